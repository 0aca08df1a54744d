"""What the certificate keeper keeps, and where: read once at start (gpuclass serve --manage-certificates)."""

from __future__ import annotations

from dataclasses import dataclass

from .rotation import Policy


@dataclass(frozen=True)
class KeeperSettings:
    namespace: str  # where the Secrets are
    names: tuple[str, ...]  # the serving certificate's DNS names and IPs
    webhook_configurations: tuple[str, ...]  # MutatingWebhookConfigurations whose caBundle is kept
    policy: Policy = Policy()
    directory: str = ""  # where the server's tls.crt, tls.key and ca.crt are written
    interval_seconds: float = 60.0  # how often each worker checks again
    ca_secret: str = "gpu-class-ca"
    serving_secret: str = "gpu-class-tls"
    client_secret: str = "gpu-class-extender-client"
    client_common_name: str = "gpu-class-scheduler"
