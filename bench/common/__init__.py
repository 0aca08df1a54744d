"""What the experiments share: the local API server as its admin (kubeapi), server processes (procs), the servers
gpu-class is compared with (variant), the Pods and Nodes sent and served (workload), sections of RESULTS.md (sections)."""
