"""The serving side: HTTP in and out of the decision.

Here: the Flask app and its routes (admission `/mutate`, the scheduler extender's `/filter` and
`/prioritize`, `/healthz`, `/readyz`; `/metrics` on a listener of its own, `metrics_listener`), gunicorn over TLS (`server`, `tls`; `intake` reads each
request whole, by a deadline, before a thread takes it; `balance` spreads connections over workers), Prometheus
metrics, JSON logs, the frozen serving configuration, and certificate generation (`certs`: pure, but
about serving, not about placement; `gpuclass certs` and the certificate-expiry metric use it).
Routes translate HTTP to `webhook.core` calls and back, nothing more.

It reaches the cluster side only through `webhook.cluster.source` (checked by tests/test_architecture.py).
"""
