"""Serving configuration: read once at start, frozen, with units in the names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeConfig:
    cert_file: str
    key_file: str
    bind: str = "0.0.0.0:8443"
    # the scheduler extender's listener, and the CA its callers' certificates must chain to; without
    # them the extender verbs are refused
    extender_bind: str | None = None
    client_ca_file: str | None = None
    catalog_file: str | None = None  # None: the built-in catalog
    scheduler_name: str | None = None  # None: the catalog's schedulerName
    stock_schedulers: tuple[str, ...] = ()  # strict schedulers that run the stock kube-scheduler binary
    nodes_files: tuple[str, ...] = ()  # empty: watch the cluster
    kubeconfig: str | None = None  # None: in-cluster service account
    # where to publish the catalog and scheduler names for gpuclass explain (core/published.py); None: nowhere
    publish_namespace: str | None = None
    workers: int = 2
    threads: int = 1  # measured: one thread per worker has the best tail latency (bench/RESULTS.md)
    log_level: str = "info"
    max_body_bytes: int = 3 * 1024 * 1024
    keepalive_seconds: int = 120  # longer than the API server's idle timeout (90 s), so it closes first
    graceful_timeout_seconds: int = 20
    worker_timeout_seconds: int = 30
    max_request_line_bytes: int = 4094
    max_header_fields: int = 100
    max_header_field_bytes: int = 8190
