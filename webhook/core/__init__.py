"""The decision, pure: what a Pod gets, computed from values.

Here: the catalog (types, classes, product matching, its validation), the inventory's state and its
immutable snapshots, the planner, the JSON Patch, AdmissionReview parsing and building, the scheduler
extender's filter and scores, nvidia-smi parsing and node label computation, and `explain`'s rendering.
A module belongs here when it decides something and can be tested with plain values.

Not here: sockets, subprocesses, the Kubernetes API, watches, and the libraries that do those (flask,
werkzeug, gunicorn, kubernetes, prometheus_client). The one file a core module opens is a catalog
(`catalog.load_catalog_file`), read where it is validated so that errors carry the file and line.
`webhook.core` imports no other webhook layer; tests/test_architecture.py checks both with
import-linter (contracts in setup.cfg).
"""
