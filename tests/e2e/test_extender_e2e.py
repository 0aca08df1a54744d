"""The scheduler extender as the real kube-scheduler calls it (gpu-class-extender: the strict profiles with the extender)."""

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


EXTENDER = local_cluster.EXTENDER_SCHEDULER


def test_the_extender_scheduler_filters_through_the_extender(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    names = [f"balanced-{i}" for i in range(4)]
    for name in names:
        core.create_namespaced_pod(namespace, make_pod(name, gpu_class="standard", scheduler=EXTENDER))
        wait_bound(core, namespace, name)  # one at a time, so each decision sees the last one's GPUs taken
    nodes = {name: read_pod(core, namespace, name)["spec"]["nodeName"] for name in names}
    types = read_pod(core, namespace, names[0])["metadata"]["annotations"][TYPES].split(",")

    assert set(types) == {"A100-40GB", "V100"}  # the standard class's types in the fleet
    assert all(TYPE_OF[node] in types for node in nodes.values()), nodes
    # balanced: the node with the largest share of its GPUs free once the Pod is placed: 7 of the
    # A100 node's 8 before 3 of the V100 node's 4
    assert TYPE_OF[nodes[names[0]]] == "A100-40GB"
    # and the Pod went to the balanced profile of the extender scheduler the Pod named
    assert read_pod(core, namespace, names[0])["spec"]["schedulerName"] == EXTENDER + "-balanced"

    core.create_namespaced_pod(namespace, make_pod("fast", gpu_class="high", scheduler=EXTENDER))
    assert TYPE_OF[wait_bound(core, namespace, "fast")] == "H100"

    calls = {(r["verb"], r["pod"].split("/", 1)[1]) for r in _extender_records(cluster, namespace)}
    # filter for every Pod; no prioritize: the configuration has no prioritizeVerb (filter keeps only
    # the promised nodes, and the profile's own scores order them)
    assert calls == {("filter", name) for name in [*names, "fast"]}, calls


def test_default_scheduler_pods_do_not_reach_the_extender(cluster: local_cluster.Cluster,
                                                          core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, make_pod("stock", gpu_class="standard"))
    assert TYPE_OF[wait_bound(core, namespace, "stock")] in ("A100-40GB", "V100")
    assert _extender_records(cluster, namespace) == []
