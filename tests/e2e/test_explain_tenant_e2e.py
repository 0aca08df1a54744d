"""`kubectl gpu-class explain pod/NAME` as a tenant, with only its namespace's rights, on the real API server.

The webhook publishes the catalog and scheduler names it runs with (gpu-class-system/gpu-class-public,
which deploy/'s RBAC lets every signed-in user get by name). The tenant here is a ServiceAccount bound
to the built-in `admin` ClusterRole in its own namespace alone: it may not list nodes or other
namespaces' Pods, and still sees what the strict path did with its Pod.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import kubernetes
import pytest

import local_cluster
from kubeobjects import make_pod, read_pod, wait_bound, wait_for
from webhook.cluster.publish import write_published
from webhook.core.published.public import PUBLISHED_CONFIGMAP

TENANT = "tenant"
TYPES = "gpu-class.io/types"


@pytest.fixture
def tenant_kubeconfig(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str,
                      tmp_path: Path) -> Path:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": TENANT}})
    kubernetes.client.RbacAuthorizationV1Api(core.api_client).create_namespaced_role_binding(namespace, {
        "metadata": {"name": TENANT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": namespace}]})
    token = cluster.kubectl("-n", namespace, "create", "token", TENANT, "--duration=1h").stdout.strip()
    path = tmp_path / "tenant.kubeconfig"
    local_cluster.write_kubeconfig(path, cluster.server, cluster.pki / "ca.crt", token=token)
    return path


@pytest.fixture
def nodes_readable(core: kubernetes.client.CoreV1Api, namespace: str) -> Iterator[None]:
    """What a platform may grant its tenants beyond their namespace: get (not list) on nodes."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(core.api_client)
    name = f"{namespace}-get-nodes"
    rbac.create_cluster_role({"metadata": {"name": name},
                              "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": namespace}]})
    yield
    rbac.delete_cluster_role_binding(name)
    rbac.delete_cluster_role(name)


def explain(kubeconfig: Path, namespace: str, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`kubectl gpu-class explain`, kubectl finding the plugin on PATH as a user's would."""
    path = os.pathsep.join([os.path.dirname(local_cluster.gpuclass_path()), os.environ.get("PATH", "")])
    return subprocess.run([local_cluster.kubectl_path(), "gpu-class", f"--kubeconfig={kubeconfig}", "explain",
                           f"pod/{name}", "-n", namespace, *extra],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PATH": path})


def strict_pod(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict[str, object]:
    core.create_namespaced_pod(namespace, make_pod(name, gpu_class="high", scheduler=local_cluster.STRICT_SCHEDULER))
    wait_bound(core, namespace, name)
    return read_pod(core, namespace, name)


def test_the_webhook_publishes_the_catalog_and_scheduler_names_it_runs_with(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api) -> None:
    data = wait_for("the published settings", lambda: core.read_namespaced_config_map(
        PUBLISHED_CONFIGMAP, local_cluster.WEBHOOK_NAMESPACE).data)
    assert data == {"catalog.yaml": (cluster.dir / "catalog.yaml").read_text(), "schedulerName": "",
                    "stockSchedulers": local_cluster.STOCK_SCHEDULER}


def test_a_worker_of_a_new_release_replaces_what_an_older_one_published(core: kubernetes.client.CoreV1Api) -> None:
    where = local_cluster.WEBHOOK_NAMESPACE
    published = wait_for("the published settings", lambda: core.read_namespaced_config_map(PUBLISHED_CONFIGMAP, where).data)
    newer = {**published, "schedulerName": "gpu-class-scheduler"}
    try:
        assert write_published(core, where, newer)  # replaced, with the resourceVersion it read
        assert core.read_namespaced_config_map(PUBLISHED_CONFIGMAP, where).data == newer
        assert not write_published(core, where, newer)  # the same data again: no write
    finally:
        write_published(core, where, published)
    assert core.read_namespaced_config_map(PUBLISHED_CONFIGMAP, where).data == published


def test_a_tenant_sees_what_the_strict_path_did_with_its_namespace_rights(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str, fleet: None,
        tenant_kubeconfig: Path) -> None:
    nodes = subprocess.run([local_cluster.kubectl_path(), f"--kubeconfig={tenant_kubeconfig}", "get", "nodes"],
                           capture_output=True, text=True, timeout=60)
    assert nodes.returncode != 0 and "forbidden" in nodes.stderr  # the premise: a tenant's rights
    pod = strict_pod(core, namespace, "trainer")
    proc = explain(tenant_kubeconfig, namespace, "trainer")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # the install's catalog read, nothing refused
    assert f"gpu-class allowed types (gpu-class.io/types, best first): {pod['metadata']['annotations'][TYPES].replace(',', ', ')}" in proc.stdout  # type: ignore[index]
    assert f"order: strict (scheduler {local_cluster.STRICT_SCHEDULER})" in proc.stdout
    assert f"scheduled on {pod['spec']['nodeName']} (its GPU type is not shown: your rights do not get nodes)" in proc.stdout  # type: ignore[index]


def test_a_tenant_that_may_get_nodes_sees_the_type_it_landed_on(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str, fleet: None,
        tenant_kubeconfig: Path, nodes_readable: None) -> None:
    pod = strict_pod(core, namespace, "trainer")
    best = pod["metadata"]["annotations"][TYPES].split(",")[0]  # type: ignore[index]
    proc = explain(tenant_kubeconfig, namespace, "trainer")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert f"scheduled on {pod['spec']['nodeName']}: {best} (" in proc.stdout  # type: ignore[index]
    assert f"{best} is its preferred type" in proc.stdout


def test_a_tenant_sees_the_scheduler_s_word_on_a_pod_it_cannot_place(
        core: kubernetes.client.CoreV1Api, namespace: str, fleet: None, tenant_kubeconfig: Path) -> None:
    pod = make_pod("nowhere", gpu_class="high", scheduler=local_cluster.STRICT_SCHEDULER)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}
    core.create_namespaced_pod(namespace, pod)
    wait_for("the scheduler's word", lambda: any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in read_pod(core, namespace, "nowhere").get("status", {}).get("conditions") or []))
    proc = explain(tenant_kubeconfig, namespace, "nowhere")
    assert proc.returncode == 0, proc.stderr
    assert f"{local_cluster.STRICT_SCHEDULER} says: 0/" in proc.stdout
    assert "node affinity/selector" in proc.stdout


def test_a_tenant_pointed_at_no_install_is_told_and_judged_with_the_built_in_catalog(
        core: kubernetes.client.CoreV1Api, namespace: str, fleet: None, tenant_kubeconfig: Path) -> None:
    strict_pod(core, namespace, "trainer")
    proc = explain(tenant_kubeconfig, namespace, "trainer", "--install-namespace", "no-gpu-class-here")
    assert proc.returncode == 0
    assert "configmap no-gpu-class-here/gpu-class-public" in proc.stderr and "built-in catalog" in proc.stderr


def test_a_tenant_may_read_the_published_settings_but_not_forge_them(
        core: kubernetes.client.CoreV1Api, tenant_kubeconfig: Path) -> None:
    where = local_cluster.WEBHOOK_NAMESPACE
    before = wait_for("the published settings", lambda: core.read_namespaced_config_map(PUBLISHED_CONFIGMAP, where).data)
    kubectl = [local_cluster.kubectl_path(), f"--kubeconfig={tenant_kubeconfig}", "-n", where]
    read = subprocess.run([*kubectl, "get", "configmap", PUBLISHED_CONFIGMAP, "-o", "jsonpath={.data.schedulerName}"],
                          capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    forged = subprocess.run([*kubectl, "patch", "configmap", PUBLISHED_CONFIGMAP, "--type=merge",
                             "-p", '{"data": {"schedulerName": "gpu-class-scheduler"}}'],
                            capture_output=True, text=True, timeout=60)
    assert forged.returncode != 0 and "forbidden" in forged.stderr
    listed = subprocess.run([*kubectl, "get", "configmaps"], capture_output=True, text=True, timeout=60)
    assert listed.returncode != 0 and "forbidden" in listed.stderr  # by name only: the namespace's others stay unread
    assert core.read_namespaced_config_map(PUBLISHED_CONFIGMAP, where).data == before
