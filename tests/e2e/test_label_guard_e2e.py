"""deploy/components/label-guard on the real API server: its CEL as Kubernetes compiles and runs it.

The component's ValidatingAdmissionPolicies are applied for this module and removed afterwards. A tenant
(impersonated: alice@example.com in group ml-team-admins) is granted `patch` on its namespace by RBAC, so what
refuses it is the policy, not RBAC: the same tenant may still change the namespace's other labels. A node
(impersonated: system:node:NAME in group system:nodes, which the Node authorizer lets patch its own Node) may not
change its GPU labels, and may change its other labels.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

import kubernetes
import pytest
import yaml

import local_cluster
from kubeobjects import create_node, delete_nodes, make_namespace, wait_for

COMPONENT = local_cluster.REPO / "deploy" / "components" / "label-guard"
TENANT = ("--as=alice@example.com", "--as-group=ml-team-admins")
NODE = "e2e-label-guard"
AS_NODE = (f"--as=system:node:{NODE}", "--as-group=system:nodes")
EDITOR = "e2e-label-guard-namespace-editor"


def kubectl(cluster: local_cluster.Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(*args, check=False)


def rendered() -> list[dict[str, Any]]:
    done = subprocess.run([local_cluster.kubectl_path(), "kustomize", str(COMPONENT)], capture_output=True, text=True,
                          check=True, timeout=60)
    return [o for o in yaml.safe_load_all(done.stdout) if o]


@pytest.fixture(scope="module")
def guarded(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """An opted-in namespace the tenant may patch, a GPU node, and the label guard in force."""
    namespace = make_namespace(core, "e2e-guard", labels={"gpu-class.io/inject": "enabled",
                                                          "gpu-class.io/default-class": "standard"})
    rbac = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": EDITOR},
         "rules": [{"apiGroups": [""], "resources": ["namespaces"], "resourceNames": [namespace],
                    "verbs": ["get", "patch", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": EDITOR},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": EDITOR},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice@example.com"}]},
    ]
    delete_nodes(core, [NODE])
    create_node(core, NODE, {"gpu-type": "Tesla-T4", "gpu-class.io/gpu-memory-mib": "15360"}, gpus=1)
    objects = rendered()
    local_cluster.apply(cluster, [*rbac, *objects])

    def in_force() -> bool:
        probe = kubectl(cluster, *TENANT, "label", "--dry-run=server", "namespace", namespace, "gpu-class.io/inject-")
        return probe.returncode != 0 and "gpu-class.io-namespace-policy" in probe.stderr

    wait_for("the label guard to refuse the tenant", in_force, seconds=60)
    try:
        yield namespace
    finally:
        for obj in [*objects, *rbac]:
            kubectl(cluster, "delete", "--ignore-not-found", f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}",
                    obj["metadata"]["name"])
        delete_nodes(core, [NODE])
        core.delete_namespace(namespace)


def namespace_meta(core: kubernetes.client.CoreV1Api, name: str) -> tuple[dict[str, str], dict[str, str]]:
    meta = core.read_namespace(name).metadata
    return dict(meta.labels or {}), dict(meta.annotations or {})


@pytest.mark.parametrize(("change", "key"), [
    pytest.param(("label", "gpu-class.io/inject-"), "gpu-class.io/inject", id="remove-inject"),
    pytest.param(("label", "--overwrite", "gpu-class.io/default-class=high"), "gpu-class.io/default-class",
                 id="change-default-class"),
    pytest.param(("annotate", "gpu-class.io/allowed-classes=high,standard"), "gpu-class.io/allowed-classes",
                 id="write-allowed-classes"),
])
def test_a_tenant_cannot_change_its_namespaces_gpu_policy(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, guarded: str, change: Sequence[str],
        key: str) -> None:
    before = namespace_meta(core, guarded)
    verb, *args = change
    done = kubectl(cluster, *TENANT, verb, "namespace", guarded, *args)
    assert done.returncode != 0
    assert "denied request: gpu-class.io-namespace-policy: " + key in done.stderr, done.stderr
    assert namespace_meta(core, guarded) == before


def test_the_tenant_may_change_its_namespaces_other_labels(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, guarded: str) -> None:
    done = kubectl(cluster, *TENANT, "label", "--overwrite", "namespace", guarded, "team=research")
    assert done.returncode == 0, done.stderr
    assert namespace_meta(core, guarded)[0]["team"] == "research"


def test_a_cluster_admin_may_change_the_gpu_policy(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, guarded: str) -> None:
    """The admin's kubeconfig is in system:masters, the group the component names."""
    done = kubectl(cluster, "annotate", "--overwrite", "namespace", guarded, "gpu-class.io/allowed-classes=standard")
    assert done.returncode == 0, done.stderr
    assert namespace_meta(core, guarded)[1]["gpu-class.io/allowed-classes"] == "standard"


@pytest.mark.parametrize("labels", [
    pytest.param(("gpu-type=NVIDIA-H100-80GB-HBM3",), id="rename-its-type"),
    pytest.param(("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",), id="add-a-product-label"),
    pytest.param(("gpu-class.io/gpu-memory-mib=196608",), id="claim-more-memory"),
    pytest.param(("gpu-class.io/gpu-memory-mib-",), id="remove-a-gpu-label"),
])
def test_a_node_cannot_change_its_own_gpu_labels(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, guarded: str, labels: Sequence[str]) -> None:
    before = core.read_node(NODE).metadata.labels
    done = kubectl(cluster, *AS_NODE, "label", "--overwrite", "node", NODE, *labels)
    assert done.returncode != 0
    assert "denied request: gpu-class.io-node-gpu-labels: a node may not change its own GPU labels" in done.stderr, (
        done.stderr)
    assert core.read_node(NODE).metadata.labels == before


def test_a_node_may_change_its_other_labels(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, guarded: str) -> None:
    done = kubectl(cluster, *AS_NODE, "label", "--overwrite", "node", NODE, "example.com/rack=r7")
    assert done.returncode == 0, done.stderr
    assert core.read_node(NODE).metadata.labels["example.com/rack"] == "r7"
