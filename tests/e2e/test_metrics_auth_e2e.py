"""/metrics behind the real kube-apiserver's TokenReview and SubjectAccessReview: the webhook and the upgrader (each as
deploy/'s ServiceAccount, with the RBAC deploy/ grants it: system:auth-delegator) and gpu-class-scheduler
(kube-scheduler's delegated authentication) answer 401 without a token (kube-scheduler: 403, as system:anonymous), 403
to a ServiceAccount without the right, 200 to one bound to the ClusterRole gpu-class-metrics-reader that deploy/ ships
for Prometheus."""

from __future__ import annotations

import http.client
import ssl
import time
import uuid
from pathlib import Path
from typing import Iterator

import kubernetes
import pytest

import local_cluster
from builders import CATALOG_NODES
from servers import Server, running_server, write_objects
from upgrading import running_upgrader


def token_of(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> str:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    request = {"spec": {"expirationSeconds": 3600}}
    return str(core.create_namespaced_service_account_token(name, namespace, request).status.token)


@pytest.fixture(scope="module")
def tokens(api_client: kubernetes.client.ApiClient) -> Iterator[dict[str, str]]:
    """A token of a ServiceAccount bound to gpu-class-metrics-reader, and one of a ServiceAccount that is not."""
    core, rbac = kubernetes.client.CoreV1Api(api_client), kubernetes.client.RbacAuthorizationV1Api(api_client)
    namespace = f"e2e-metrics-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    binding = f"{namespace}-reader"
    rbac.create_cluster_role_binding({
        "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-class-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}]})
    try:
        yield {"reader": token_of(core, namespace, "prometheus"), "stranger": token_of(core, namespace, "stranger")}
    finally:
        rbac.delete_cluster_role_binding(binding)
        core.delete_namespace(namespace)


def scrape(port: int, context: ssl.SSLContext, token: str | None) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=15)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def statuses(port: int, context: ssl.SSLContext, tokens: dict[str, str]) -> list[int]:
    return [scrape(port, context, None), scrape(port, context, tokens["stranger"]),
            scrape(port, context, tokens["reader"])]


@pytest.fixture(scope="module")
def webhook(cluster: local_cluster.Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`gpuclass serve` as deploy/'s ServiceAccount gpu-class, its metrics checked with the API server (a fixed
    inventory: the watches are not what is tested here)."""
    tmp = tmp_path_factory.mktemp("metrics-auth-e2e")
    nodes = write_objects(tmp / "nodes.yaml", CATALOG_NODES)
    kubeconfig = local_cluster.service_account_kubeconfig(cluster, "gpu-class")
    with running_server(tmp, ["--nodes", str(nodes), "--kubeconfig", str(kubeconfig)],
                        metrics_auth="delegated") as server:
        yield server


def test_the_webhooks_metrics_ask_the_api_server(webhook: Server, tokens: dict[str, str]) -> None:
    assert webhook.metrics_port is not None
    assert statuses(webhook.metrics_port, webhook.context(), tokens) == [401, 403, 200], webhook.log()[-3000:]


def test_gpu_class_schedulers_metrics_take_the_same_binding(cluster: local_cluster.Cluster,
                                                             tokens: dict[str, str]) -> None:
    """kube-scheduler's own delegated check: the ClusterRole deploy/ ships for Prometheus is what it asks for. Without
    a token it takes the request as system:anonymous (its delegated authentication allows anonymous requests), which
    may not get /metrics: 403 where gpu-class answers 401."""
    assert cluster.ports is not None
    # its certificate is made at its start: there is nothing to verify it by
    assert statuses(cluster.ports.gpu_scheduler, ssl._create_unverified_context(), tokens) == [403, 403, 200]


def test_the_upgraders_metrics_ask_the_api_server(cluster: local_cluster.Cluster, tokens: dict[str, str]) -> None:
    context = ssl._create_unverified_context()  # self-signed at its start, as kube-scheduler's
    with running_upgrader(cluster, "metrics-auth", "--metrics-auth=delegated") as (proc, port):
        deadline = time.monotonic() + 30
        while True:
            try:
                scrape(port, context, None)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the upgrader's metrics never listened"
                time.sleep(0.2)
        assert statuses(port, context, tokens) == [401, 403, 200]


def test_a_webhook_log_names_who_was_refused(webhook: Server, tokens: dict[str, str]) -> None:
    assert webhook.metrics_port is not None
    scrape(webhook.metrics_port, webhook.context(), tokens["stranger"])
    assert "may not get /metrics" in Path(webhook.log_file).read_text()
