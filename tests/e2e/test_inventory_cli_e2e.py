"""`gpuclass inventory`, `gpuclass explain` and `kubectl gpu-class` against the real API server.

The test's nodes carry a product of their own, claimed by a type of a catalog of its own, so the
inventory's row for that type counts exactly the nodes and the bound Pod this test made, whatever
else the cluster holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest
import yaml

import local_cluster
from kubeobjects import GPU_TAINT, create_node, delete_nodes, make_namespace, make_pod, read_pod, wait_bound

SUFFIX = uuid.uuid4().hex[:6]
TYPE = f"E2E-{SUFFIX}"
PRODUCT = f"E2E-GPU-{SUFFIX}"
UNKNOWN_PRODUCT = f"E2E-UNCLAIMED-{SUFFIX}"
CLASS = f"e2e-{SUFFIX}"
NODES = {  # name: (product, GPUs, ready, cordoned)
    f"e2e-inv-{SUFFIX}-ready": (PRODUCT, 8, True, False),
    f"e2e-inv-{SUFFIX}-cordoned": (PRODUCT, 4, True, True),
    f"e2e-inv-{SUFFIX}-not-ready": (PRODUCT, 2, False, False),
    f"e2e-inv-{SUFFIX}-unclaimed": (UNKNOWN_PRODUCT, 1, True, False),
}
READY_NODE = f"e2e-inv-{SUFFIX}-ready"
CATALOG = f"""
types:
  - {{name: {TYPE}, score: 100, memoryGiB: 80, products: [{PRODUCT}]}}
classes:
  - {{name: {CLASS}, types: [{TYPE}]}}
"""


@pytest.fixture
def nodes(core: kubernetes.client.CoreV1Api) -> Iterator[list[str]]:
    names = list(NODES)
    delete_nodes(core, names)
    for name, (product, gpus, ready, cordoned) in NODES.items():
        create_node(core, name, {"nvidia.com/gpu.product": product}, gpus=gpus, ready=ready)
        if cordoned:
            core.patch_node(name, {"spec": {"unschedulable": True}})
    yield names
    delete_nodes(core, names)


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return path


def bound_pod(core: kubernetes.client.CoreV1Api, namespace: str, name: str, gpus: int) -> str:
    """A Pod the scheduler binds to the test's ready node."""
    pod = make_pod(name, gpus=gpus)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": READY_NODE}
    pod["spec"]["tolerations"] = [{"key": GPU_TAINT["key"], "operator": "Exists"}]
    core.create_namespaced_pod(namespace, pod)
    return wait_bound(core, namespace, name)


def gpuclass(cluster: local_cluster.Cluster, *args: str, expected_rc: int = 0) -> Any:
    proc = subprocess.run([local_cluster.gpuclass_path(), *args, f"--kubeconfig={cluster.kubeconfig}", "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == expected_rc, proc.stderr
    return json.loads(proc.stdout)


def test_inventory_counts_what_the_test_put_in(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
                                               namespace: str, nodes: list[str], catalog: Path) -> None:
    assert bound_pod(core, namespace, "holds-3", 3) == READY_NODE
    assert bound_pod(core, namespace, "finished-2", 2) == READY_NODE
    core.patch_namespaced_pod_status("finished-2", namespace, {"status": {"phase": "Succeeded"}})

    report = gpuclass(cluster, "inventory", f"--config={catalog}")
    row = next(t for t in report["types"] if t["name"] == TYPE)
    assert row["resource"] == "nvidia.com/gpu"
    assert row["nodes"] == {"total": 3, "ready": 2, "notReady": 1, "cordoned": 1}
    # usable nodes only (the ready, uncordoned one); the finished Pod holds nothing
    assert row["gpus"] == {"allocatable": 8, "used": 3, "free": 5}
    unknown = {"labelKey": "nvidia.com/gpu.product", "product": UNKNOWN_PRODUCT, "nodes": 1}
    # its node has no GFD labels that would place it
    assert any(u.items() >= unknown.items() and u["reason"].startswith("too little information")
               for u in report["unknownProducts"])
    assert next(c for c in report["classes"] if c["name"] == CLASS)["types"] == [TYPE]
    assert next(c for c in report["classes"] if c["name"] == CLASS)["maxGpusPerPod"] == 5

    # the plugin, as kubectl runs it, with the kubeconfig from the environment
    bin_dir = str(Path(sys.executable).parent)
    proc = subprocess.run([local_cluster.kubectl_path(), "gpu-class", "inventory", f"--config={catalog}", "-o", "json"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
                               "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    assert next(t for t in json.loads(proc.stdout)["types"] if t["name"] == TYPE) == row


def test_explain_an_existing_pod_and_a_pod_file_against_the_cluster(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str, nodes: list[str],
        catalog: Path, tmp_path: Path) -> None:
    bound_pod(core, namespace, "placed", 2)
    result = gpuclass(cluster, "explain", "pod/placed", "-n", namespace, f"--config={catalog}")
    assert (result["node"], result["nodeType"], result["nodeProduct"], result["gpus"]) == (READY_NODE, TYPE, PRODUCT, 2)
    assert result["types"] == [] and result["phase"] == read_pod(core, namespace, "placed")["status"]["phase"]

    # the namespace's annotation, read from the cluster, refuses the class
    restricted = make_namespace(core, "e2e-allowed", labels={"gpu-class.io/inject": "enabled"},
                                annotations={"gpu-class.io/allowed-classes": "economy"})
    try:
        pod_file = tmp_path / "pod.yaml"
        pod_file.write_text(json.dumps(make_pod("asks", gpu_class=CLASS)))
        refused = gpuclass(cluster, "explain", str(pod_file), "-n", restricted, f"--config={catalog}", expected_rc=1)
        assert refused["outcome"] == "refused" and "not allowed in namespace" in refused["message"]
        placed = gpuclass(cluster, "explain", str(pod_file), "-n", namespace, f"--config={catalog}")
        assert placed["outcome"] == "patched" and placed["placement"]["order"] == [TYPE]
    finally:
        core.delete_namespace(restricted)


def test_a_missing_context_or_an_api_server_that_is_gone_is_one_line(cluster: local_cluster.Cluster,
                                                                     tmp_path: Path) -> None:
    gone = tmp_path / "gone.kubeconfig"
    port = local_cluster.free_port()  # nothing listens there
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    gone.write_text(yaml.safe_dump(config))
    for args, message in (
        ([f"--kubeconfig={cluster.kubeconfig}", "--context=nope"], "no context 'nope'; contexts: e2e"),
        ([f"--kubeconfig={gone}"], f"cannot reach the API server at https://127.0.0.1:{port}: Connection refused"),
    ):
        proc = subprocess.run([local_cluster.gpuclass_path(), "inventory", *args], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr, proc.stderr
