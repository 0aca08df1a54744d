"""`gpuclass label-node` against a real Node object, as deploy/labeller's ServiceAccount."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import kubernetes
import pytest

import local_cluster
from kubeobjects import FIXTURES, GPU_TAINT, create_node, delete_nodes, wait_for

NODE = "e2e-labeller"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
A100_8X = FIXTURES / "nvidia-smi" / "csv_name-memtotal-driver_8x_A100-SXM4-80GB.csv"


@pytest.fixture
def node(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    delete_nodes(core, [NODE])
    create_node(core, NODE, {"team": "ml", "gpu-class.io/gpu-models-mixed": "true"}, gpus=8)
    core.patch_node(NODE, {"metadata": {"annotations": {"example.com/owner": "ml-platform"}}})
    # The controller-manager's TTL controller annotates every new Node once; let it, so the only
    # change left to see is the labeller's.
    wait_for("the TTL controller's annotation", lambda: TTL_ANNOTATION in (core.read_node(NODE).metadata.annotations or {}))
    yield NODE
    delete_nodes(core, [NODE])


def test_label_node_once_patches_its_own_labels_and_nothing_else(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, node: str, tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncat "{A100_8X}"\n')  # a recorded 8x A100 80GB, whatever the query
    smi.chmod(0o755)
    before = core.read_node(node)

    proc = subprocess.run(
        [local_cluster.gpuclass_path(), "label-node", "--once", "--node", node,
         f"--kubeconfig={local_cluster.service_account_kubeconfig(cluster, 'gpu-class-labeller')}"],
        env={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"}, capture_output=True, text=True, timeout=60)
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
