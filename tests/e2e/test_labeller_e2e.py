"""`gpuclass label-node` against a real Node object, as deploy/labeller's ServiceAccount with the token of
a Pod on that node, and what the ValidatingAdmissionPolicy gpu-class.io-labeller lets such a token do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

import local_cluster
from kubeobjects import FIXTURES, GPU_TAINT, create_node, delete_nodes, wait_for

NODE = "e2e-labeller"
OTHER_NODE = "e2e-labeller-other"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
A100_8X = FIXTURES / "nvidia-smi" / "csv_name-memtotal-driver_8x_A100-SXM4-80GB.csv"
ACCOUNT = "gpu-class-labeller"


@pytest.fixture
def node(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    delete_nodes(core, [NODE, OTHER_NODE])
    for name in (NODE, OTHER_NODE):
        create_node(core, name, {"team": "ml", "gpu-class.io/gpu-models-mixed": "true"}, gpus=8)
        core.patch_node(name, {"metadata": {"annotations": {"example.com/owner": "ml-platform"}}})
    # The controller-manager's TTL controller annotates every new Node once; let it, so the only
    # change left to see is the labeller's.
    for name in (NODE, OTHER_NODE):
        wait_for("the TTL controller's annotation",
                 lambda name=name: TTL_ANNOTATION in (core.read_node(name).metadata.annotations or {}))
    yield NODE
    delete_nodes(core, [NODE, OTHER_NODE])


@pytest.fixture
def pod_token(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, node: str) -> Iterator[Path]:
    """A kubeconfig with the token of a labeller Pod on `node`, as the kubelet mounts it: bound to the
    Pod, so the API server puts the Pod's node in the user's extra."""
    namespace = local_cluster.WEBHOOK_NAMESPACE
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    pod = core.create_namespaced_pod(namespace, {
        "metadata": {"name": f"labeller-{node}"},
        "spec": {"nodeName": node, "serviceAccountName": ACCOUNT, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "labeller", "image": "gpu-class", "securityContext": restricted}]}})
    token = cluster.kubectl("-n", namespace, "create", "token", ACCOUNT, "--duration=1h", "--bound-object-kind=Pod",
                            f"--bound-object-name={pod.metadata.name}", f"--bound-object-uid={pod.metadata.uid}"
                            ).stdout.strip()
    path = cluster.dir / f"labeller-{node}.kubeconfig"
    local_cluster.write_kubeconfig(path, cluster.server, cluster.pki / "ca.crt", token=token)
    yield path
    core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)


def label_node(kubeconfig: Path, node: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    smi = fake_bin / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncat "{A100_8X}"\n')  # a recorded 8x A100 80GB, whatever the query
    smi.chmod(0o755)
    return subprocess.run(
        [local_cluster.gpuclass_path(), "label-node", "--once", "--node", node, f"--kubeconfig={kubeconfig}"],
        env={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"}, capture_output=True, text=True, timeout=60)


def test_label_node_once_patches_its_own_labels_and_nothing_else(
        core: kubernetes.client.CoreV1Api, node: str, pod_token: Path, tmp_path: Path) -> None:
    before = core.read_node(node)
    proc = label_node(pod_token, node, tmp_path)
    assert proc.returncode == 0, proc.stderr

    after = core.read_node(node)
    changed = {k: v for k, v in after.metadata.labels.items() if before.metadata.labels.get(k) != v}
    removed = set(before.metadata.labels) - set(after.metadata.labels)
    assert changed == {"gpu-type": "NVIDIA-A100-SXM4-80GB", "gpu-class.io/gpu-count": "8",
                       "gpu-class.io/gpu-memory-mib": "81920"}
    assert removed == {"gpu-class.io/gpu-models-mixed"}  # its own stale label
    assert after.metadata.annotations == before.metadata.annotations
    assert [t.to_dict() for t in after.spec.taints] == [t.to_dict() for t in before.spec.taints]
    assert after.spec.taints[0].key == GPU_TAINT["key"]
    assert after.status.allocatable == before.status.allocatable


def test_a_labeller_token_cannot_relabel_another_node(
        core: kubernetes.client.CoreV1Api, node: str, pod_token: Path, tmp_path: Path) -> None:
    before = core.read_node(OTHER_NODE).metadata.labels
    proc = label_node(pod_token, OTHER_NODE, tmp_path)
    assert proc.returncode != 0
    assert f"gpu-class-labeller may label only the node its Pod runs on ({node}), not {OTHER_NODE}" in proc.stderr
    assert core.read_node(OTHER_NODE).metadata.labels == before


def as_labeller(kubeconfig: Path) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))


@pytest.mark.parametrize("patch, message", [
    pytest.param({"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}},
                 "may change only its own labels", id="another-key"),
    pytest.param({"metadata": {"labels": {"team": None}}}, "not team", id="another-key-removed"),
    pytest.param({"spec": {"taints": None}}, "may change only labels", id="taints"),
    pytest.param({"spec": {"unschedulable": True}}, "may change only labels", id="cordon"),
])
def test_a_labeller_token_cannot_change_anything_else_of_its_own_node(
        core: kubernetes.client.CoreV1Api, node: str, pod_token: Path, patch: dict[str, object], message: str) -> None:
    before = core.read_node(node)
    with pytest.raises(ApiException) as refused:
        as_labeller(pod_token).patch_node(node, patch)
    assert refused.value.status == 403 and message in str(refused.value.body)
    after = core.read_node(node)
    assert (after.metadata.labels, after.spec.taints, after.spec.unschedulable) == (
        before.metadata.labels, before.spec.taints, before.spec.unschedulable)


def test_a_labeller_token_bound_to_no_pod_labels_nothing(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, node: str, tmp_path: Path) -> None:
    """`kubectl create token` without a Pod: RBAC allows the patch, the policy does not."""
    before = core.read_node(node).metadata.labels
    proc = label_node(local_cluster.service_account_kubeconfig(cluster, ACCOUNT), node, tmp_path)
    assert proc.returncode != 0
    assert "this token is bound to no Pod on a node" in proc.stderr
    assert core.read_node(node).metadata.labels == before
