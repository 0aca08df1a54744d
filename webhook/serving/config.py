"""Serving configuration: read once at start, frozen, with units in the names."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.certificates.settings import KeeperSettings

MIB = 1024 * 1024
# What the API server can send: an object is at most what etcd stores in one request
# (--max-request-bytes, 1.5 MiB by default; a larger one fails at storage whatever the webhook
# answers), its JSON in the AdmissionReview up to 6 bytes per stored byte (Go's encoder writes `<`,
# `>` and `&` as `\u003c`), twice on UPDATE (object and oldObject), and the envelope around them
# (the user's groups and extra, options).
ETCD_MAX_REQUEST_BYTES = 1_572_864
JSON_ESCAPE_BYTES = 6
ENVELOPE_BYTES = 1 * MIB
MAX_ADMISSION_REVIEW_BYTES = 2 * JSON_ESCAPE_BYTES * ETCD_MAX_REQUEST_BYTES + ENVELOPE_BYTES  # 19 MiB


@dataclass(frozen=True)
class IntakeLimits:
    """How each request is read before a thread takes it (intake.py); per gunicorn worker."""

    read_seconds: float = 3.0  # handshake (new connections), headers and body of one request
    answer_seconds: float = 4.5  # the answer written; both under the webhooks' timeoutSeconds (5)
    max_head_bytes: int = 32 * 1024  # request line and headers (gunicorn's finer limits apply after)
    max_body_bytes: int = MAX_ADMISSION_REVIEW_BYTES
    buffer_bytes: int = 48 * MIB  # bodies one worker holds at once, reserved by their Content-Length
    small_body_bytes: int = 256 * 1024  # most AdmissionReviews are a few KiB
    small_reserve_bytes: int = 16 * MIB  # of buffer_bytes, kept for bodies up to small_body_bytes

    def __post_init__(self) -> None:
        if not 0 < self.read_seconds <= self.answer_seconds:
            raise ValueError("read_seconds must be positive and at most answer_seconds")
        if self.buffer_bytes - self.small_reserve_bytes < self.max_body_bytes:
            raise ValueError("buffer_bytes less small_reserve_bytes must hold one body of max_body_bytes")


@dataclass(frozen=True)
class ServeConfig:
    cert_file: str
    key_file: str
    bind: str = "0.0.0.0:8443"
    # the scheduler extender's listener, and the CA its callers' certificates must chain to; without
    # them the extender verbs are refused
    extender_bind: str | None = None
    client_ca_file: str | None = None
    # /metrics, on a listener of its own with the serving certificate; `delegated`: each scrape's bearer token
    # checked with the API server (core/access/metrics_gate.py), `none`: unchecked, allowed on loopback only
    metrics_bind: str = "0.0.0.0:8445"
    metrics_auth: str = "delegated"
    catalog_file: str | None = None  # None: the built-in catalog
    scheduler_name: str | None = None  # None: the catalog's schedulerName
    stock_schedulers: tuple[str, ...] = ()  # strict schedulers that run the stock kube-scheduler binary
    nodes_files: tuple[str, ...] = ()  # empty: watch the cluster
    kubeconfig: str | None = None  # None: in-cluster service account
    # where to publish the catalog and scheduler names for gpuclass explain (core/published/public.py); None: nowhere
    publish_namespace: str | None = None
    workers: int = 2
    threads: int = 1  # measured: one thread per worker has the best tail latency (bench/RESULTS.md)
    log_level: str = "info"
    max_body_bytes: int = MAX_ADMISSION_REVIEW_BYTES
    # each request read whole within this, answered within the next (under the webhooks' timeoutSeconds, 5)
    request_read_seconds: float = 3.0
    request_answer_seconds: float = 4.5
    body_buffer_bytes: int = 48 * MIB  # per worker: request bodies held at once
    keepalive_seconds: int = 120  # longer than the API server's idle timeout (90 s), so it closes first
    graceful_timeout_seconds: int = 20
    worker_timeout_seconds: int = 30
    max_request_line_bytes: int = 4094
    max_header_fields: int = 100
    max_header_field_bytes: int = 8190
    # tls.mode webhook-managed: the webhook keeps its own CA and certificates (cluster/tls_keeper.py); None: files
    managed_tls: KeeperSettings | None = None

    def intake_limits(self) -> IntakeLimits:
        return IntakeLimits(read_seconds=self.request_read_seconds, answer_seconds=self.request_answer_seconds,
                            max_body_bytes=self.max_body_bytes, buffer_bytes=self.body_buffer_bytes)
