"""The cluster side: Kubernetes and file I/O that feeds the core.

Here: the live inventory (`watch`) and the watches that feed it (`nodes_watch`, `pods_watch`,
`dra_watch`, `pools_watch`, `heralds`, each over a `reflector`), reading Node, Namespace and Pod
files (`loading`), the node labeller's nvidia-smi run, Node read and merge patch (`labeller`), and the
TokenReviews and SubjectAccessReviews that check who reads /metrics (`access_review`).
What any of it means is decided in `webhook.core`; this package only fetches and writes.

`source` is the interface: the inventory protocol and the file and live inventories. `webhook.serving`
imports `source` and no other module of this package (checked by tests/test_architecture.py), so the
serving side does not depend on how the cluster is read.
"""
