"""gpu-class: GPU-type-aware placement for Kubernetes Pods (a mutating admission webhook)."""
