"""The decision, pure: what a Pod gets, computed from values.

One room a concern, each a subpackage whose docstring says what lives there and what it may import, from
the bottom up: `catalog` (GPU types, classes, their loading) and `labeller` (nvidia-smi parsed into node
labels); `view`, the cluster view (nodes, GPU Pods, groups, pools, DRA, the snapshot); `admission`, the
decision for one Pod or workload, and `published`, what the webhook publishes to be checked by; `scheduling`,
the extender; `after_bind`, moving up; `reports`, what is shown to people; and `access`, who may read /metrics.
A module belongs in webhook.core when it decides something and can be tested with plain values.

Not here: sockets, subprocesses, the Kubernetes API, watches, and the libraries that do those (flask,
werkzeug, gunicorn, kubernetes, prometheus_client). The one file a core module opens is a catalog
(`catalog.load_catalog_file`), read where it is validated so that errors carry the file and line.
`webhook.core` imports no other webhook layer; tests/test_architecture.py checks both with
import-linter (contracts in setup.cfg: core-is-pure, core-rooms).
"""
