"""The scheduler extender as the real kube-scheduler calls it (the gpu-class-scheduler profile)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

import local_cluster
from fleet import TYPE_OF
from kubeobjects import TYPES, make_pod, read_pod, wait_bound

pytestmark = pytest.mark.usefixtures("fleet")


def _extender_records(cluster: local_cluster.Cluster, namespace: str) -> list[dict[str, Any]]:
    records = []
    for line in (cluster.logs / "gpuclass.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("msg") == "extender" and str(record.get("pod", "")).startswith(namespace + "/"):
                records.append(record)
    return records


def test_gpu_class_scheduler_filters_and_scores_through_the_extender(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    names = [f"balanced-{i}" for i in range(4)]
    for name in names:
        core.create_namespaced_pod(namespace, make_pod(name, gpu_class="standard", scheduler="gpu-class-scheduler"))
        wait_bound(core, namespace, name)  # one at a time, so each decision sees the last one's GPUs taken
    nodes = {name: read_pod(core, namespace, name)["spec"]["nodeName"] for name in names}
    types = read_pod(core, namespace, names[0])["metadata"]["annotations"][TYPES].split(",")

    assert set(types) == {"A100-40GB", "V100"}  # the standard class's types in the fleet
    assert all(TYPE_OF[node] in types for node in nodes.values()), nodes
    # balanced: the type with the most free GPUs first (A100: 8, V100: 4), so the A100 takes the
    # first Pods.
    assert TYPE_OF[nodes[names[0]]] == "A100-40GB"

    # performance: the filter keeps both H100 nodes, so the scheduler asks the extender to score them
    core.create_namespaced_pod(namespace, make_pod("fast", gpu_class="high", scheduler="gpu-class-scheduler"))
    assert TYPE_OF[wait_bound(core, namespace, "fast")] == "H100"

    calls = {(r["verb"], r["pod"].split("/", 1)[1]) for r in _extender_records(cluster, namespace)}
    assert all(("filter", name) in calls for name in [*names, "fast"]), calls
    # With one node left after filter the scheduler has nothing to score; with two it asks.
    assert ("prioritize", "fast") in calls, calls


def test_default_scheduler_pods_do_not_reach_the_extender(cluster: local_cluster.Cluster,
                                                          core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, make_pod("stock", gpu_class="standard"))
    assert TYPE_OF[wait_bound(core, namespace, "stock")] in ("A100-40GB", "V100")
    assert _extender_records(cluster, namespace) == []
