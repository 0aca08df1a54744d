"""How the webhook reaches the API server: a kubeconfig file, else the Pod's own service account."""

from __future__ import annotations

import os

import kubernetes
import urllib3

from .loading import InputError

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class ConfigError(InputError):
    """No way to reach the cluster; the message says what to give."""


def check_kube_config(kubeconfig: str | None) -> kubernetes.client.Configuration:
    configuration = kubernetes.client.Configuration()
    # By default urllib3 asks again three times, sleeping in the caller's thread, when an answer says when to (a
    # 429 or 503 with Retry-After), out of sight of the reflector's log, metrics and wait (Reflector.run), which
    # then doubled its backoff on the fourth. A dropped connection is still tried again at once, as by default.
    configuration.retries = urllib3.util.Retry(3, respect_retry_after_header=False)
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise ConfigError(f"--kubeconfig {kubeconfig}: no such file")
        try:
            kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except Exception as exc:  # the loader raises several kinds for a bad file
            raise ConfigError(f"--kubeconfig {kubeconfig}: {exc}") from None
        return configuration
    if "KUBERNETES_SERVICE_HOST" not in os.environ or not os.path.exists(SERVICE_ACCOUNT_TOKEN):
        raise ConfigError(
            "not running in a cluster (no KUBERNETES_SERVICE_HOST or service account token): "
            "give --kubeconfig PATH, or --nodes NODES.yaml for a fixed inventory"
        )
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    return configuration
