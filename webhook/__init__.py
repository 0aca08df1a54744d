"""gpu-class: GPU-type-aware placement for Kubernetes Pods (a mutating admission webhook)."""

# The one place the version is written: setup.cfg reads it, and tests/test_docs_claims.py holds the chart, the
# image tags and CHANGELOG.md to it (docs/contributors/architecture.md#releases).
__version__ = "0.2.0"
