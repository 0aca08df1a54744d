"""Placement fidelity on the real control plane: streams with a known number of fallbacks and broken
promises, scheduled by the stock default scheduler, show exactly those numbers in gpu-class's /metrics;
the Pods left Pending show in the pending gauge and in `gpuclass inventory`.

"Room" is what the webhook can know: free GPUs on a ready, uncordoned node. The test keeps its own
count of GPUs per node (every Pod it binds there, and the cluster's other GPU Pods, read at the start)
and judges each bind by it, not by CPU: a best-type node whose GPUs are free but whose CPU is taken
had room, and a Pod the scheduler sent past it is a broken promise. What a Pod was allowed comes
from the catalog's class and the nodes there are, never from the `gpu-class.io/types` the webhook
wrote: the webhook's answer is what is under test.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from typing import Any, Iterator

import kubernetes
import pytest

import local_cluster
from bench.placement.placement import read_catalog
from bench.placement.placement_cluster import cluster_state
from bench.placement.placement_model import NodeState
from webhook.core.catalog.model import Catalog
from webhook.core.scheduling.extender import share_after
from kubeobjects import (create_node, delete_nodes, force_delete_pods, make_namespace, make_pod, wait_bound, wait_for,
                         webhook_metrics)

# Class high (performance): H200 first, then H100-NVL. Class inference (binpack): L4 among them.
H200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
NVL = {"nvidia.com/gpu.product": "NVIDIA-H100-NVL"}
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4"}
NODES = {  # name: (labels, GPUs, CPUs)
    "e2e-fid-h200-free": (H200, 4, "64"),
    "e2e-fid-h200-crowded": (H200, 4, "8"),  # its CPU taken by a CPU-only Pod: free GPUs, no room for a Pod's CPU
    "e2e-fid-nvl": (NVL, 8, "64"),
    "e2e-fid-l4-busy": (L4, 4, "16"),  # 2 GPUs and 12 of 16 CPUs taken: the default scheduler spreads away
    "e2e-fid-l4-idle": (L4, 4, "64"),
}
OUTCOMES = ("best", "fallback", "broken")


def samples(text: str, name: str) -> dict[tuple[str, str], float]:
    """A metric's samples by (class, second label's value)."""
    found = {}
    for labels, value in re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        found[(pairs["class"], pairs.get("outcome") or pairs.get("longer_than") or "")] = float(value)
    return found


@dataclass
class Judge:
    """The test's own count: GPUs free per node, from the cluster at the start and every Pod placed
    since; a 1-GPU Pod of a class may have any of the class's types that has a node here."""

    nodes: dict[str, NodeState]
    catalog: Catalog

    def bind(self, node: str, gpu_class: str) -> str:
        c = self.catalog.classes[gpu_class]
        order = [t for t in c.types if any(n.gpu_type == t for n in self.nodes.values())]
        if c.strategy == "cost":
            order.reverse()
        fitting = [n for n in self.nodes.values() if n.gpu_type in order and n.free_gpus >= 1]
        chosen = self.nodes[node]
        if c.strategy in ("binpack", "balanced"):
            def share(n: NodeState) -> int:
                return share_after(n.gpus, n.free_gpus, 1, in_use=c.strategy == "binpack")
            outcome = "best" if share(chosen) >= max(map(share, fitting)) else "broken"
        else:
            better = order[:order.index(str(chosen.gpu_type))]
            outcome = ("broken" if any(n.gpu_type in better for n in fitting)
                       else "best" if chosen.gpu_type == order[0] else "fallback")
        chosen.free_gpus -= 1
        return outcome

    def take(self, node: str, gpus: int) -> None:
        self.nodes[node].free_gpus -= gpus


@pytest.fixture
def pool(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """The test's nodes, and a namespace gpu-class does not place in, for the Pods that fill them."""
    delete_nodes(core, list(NODES))
    for name, (labels, gpus, cpu) in NODES.items():
        create_node(core, name, labels, gpus=gpus, cpu=cpu)
    fill = make_namespace(core, "e2e-fid-fill")
    yield fill
    force_delete_pods(core, fill)
    core.delete_namespace(fill)
    delete_nodes(core, list(NODES))


def fill_pod(core: kubernetes.client.CoreV1Api, namespace: str, name: str, node: str, *, cpu: str = "0",
             gpus: int = 0) -> None:
    """A Pod bound by nodeName at creation: the scheduler never sees it, the watch never sees it unbound."""
    pod = make_pod(name, gpus=gpus or None, cpu=cpu)
    pod["spec"]["nodeName"] = node
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    core.create_namespaced_pod(namespace, pod)


def stream_pod(core: kubernetes.client.CoreV1Api, namespace: str, name: str, gpu_class: str) -> str:
    """A 1-GPU Pod of the class on the default scheduler: its node."""
    core.create_namespaced_pod(namespace, make_pod(name, gpu_class=gpu_class, cpu="1"))
    return wait_bound(core, namespace, name)


def test_binds_are_counted_as_the_webhook_can_judge_them(cluster: local_cluster.Cluster,
                                                          core: kubernetes.client.CoreV1Api, namespace: str,
                                                          pool: str) -> None:
    catalog = read_catalog()
    others = {n.name for n in cluster_state(core, catalog).values()
              if n.gpu_type in ("H200", "H100-NVL", "L4") and n.name not in NODES}
    assert not others, f"nodes of the test's types left by another test: {others}"
    fill_pod(core, pool, "cpu-h200", "e2e-fid-h200-crowded", cpu="7500m")
    fill_pod(core, pool, "cpu-l4", "e2e-fid-l4-busy", cpu="12")
    fill_pod(core, pool, "gpu-l4", "e2e-fid-l4-busy", gpus=2)
    # the webhook sees the pool: a class Pod admitted now may go to H200 and to L4
    wait_for("the webhook to see the test's nodes", lambda: all(t in _types(core, namespace, c) for c, t in
                                                                 (("high", "H200"), ("high", "H100-NVL"),
                                                                  ("inference", "L4"))))
    judge = Judge(cluster_state(core, catalog), catalog)
    before = samples(webhook_metrics(cluster), "gpu_class_placements_total")
    counted: dict[tuple[str, str], int] = {}

    def place(name: str, gpu_class: str, expected_node: str, expected: str) -> None:
        node = stream_pod(core, namespace, name, gpu_class)
        outcome = judge.bind(node, gpu_class)
        assert (node, outcome) == (expected_node, expected), name
        counted[(gpu_class, outcome)] = counted.get((gpu_class, outcome), 0) + 1

    for i in range(4):  # H200 with room, where the CPU is free too
        place(f"high-{i}", "high", "e2e-fid-h200-free", "best")
    for i in range(4, 8):  # the other H200 has 4 free GPUs but no CPU for the Pod: the scheduler must pass it
        place(f"high-{i}", "high", "e2e-fid-nvl", "broken")
    fill_pod(core, pool, "gpu-h200", "e2e-fid-h200-crowded", gpus=4)
    judge.take("e2e-fid-h200-crowded", 4)
    for i in range(8, 10):  # every H200 GPU taken: the next type, an honest fallback
        place(f"high-{i}", "high", "e2e-fid-nvl", "fallback")
    # binpack promises the L4 with more GPUs in use; the default scheduler's resource scores prefer the
    # node with free CPU until it is as full
    place("infer-0", "inference", "e2e-fid-l4-idle", "broken")  # 75% in use there against 25% here
    place("infer-1", "inference", "e2e-fid-l4-idle", "broken")  # 75% against 50%
    place("infer-2", "inference", "e2e-fid-l4-idle", "best")  # 75% either way
    place("infer-3", "inference", "e2e-fid-l4-idle", "best")  # 100% here
    place("infer-4", "inference", "e2e-fid-l4-busy", "best")  # the only L4 with room
    assert counted == {("high", "best"): 4, ("high", "broken"): 4, ("high", "fallback"): 2,
                       ("inference", "broken"): 2, ("inference", "best"): 3}

    def added() -> dict[tuple[str, str], float]:
        after = samples(webhook_metrics(cluster), "gpu_class_placements_total")
        return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}

    # two workers watch, one counts: each bind once
    wait_for("the webhook to count every bind", lambda: added() == counted, seconds=30)


def _types(core: kubernetes.client.CoreV1Api, namespace: str, gpu_class: str) -> list[str]:
    response = core.create_namespaced_pod(namespace, make_pod("probe", gpu_class=gpu_class), dry_run="All",
                                          _preload_content=False)
    annotations = json.loads(response.data)["metadata"].get("annotations") or {}
    return str(annotations.get("gpu-class.io/types", "")).split(",")


def placed_pending(core: kubernetes.client.CoreV1Api, gpu_class: str) -> int:
    """Pods of the class that gpu-class placed and no node holds, in the whole cluster, as the API has them."""
    pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
    return sum(1 for p in pods if not p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
               and (p["metadata"].get("annotations") or {}).get("gpu-class.io/class") == gpu_class
               and "gpu-class.io/types" in (p["metadata"].get("annotations") or {})
               and not p["spec"].get("schedulingGates"))


def test_pending_pods_show_in_the_gauge_and_the_inventory(cluster: local_cluster.Cluster,
                                                          core: kubernetes.client.CoreV1Api, namespace: str,
                                                          pool: str) -> None:
    wait_for("the webhook to see the test's nodes", lambda: "H200" in _types(core, namespace, "high"))
    for i in range(3):  # admitted (the webhook does not see CPU), never bound: no node has 500 CPUs
        core.create_namespaced_pod(namespace, make_pod(f"waits-{i}", gpu_class="high", cpu="500"))
    gated = make_pod("gated", gpu_class="high")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/queue"}]
    core.create_namespaced_pod(namespace, gated)
    expected = placed_pending(core, "high")
    assert expected >= 3
    wait_for("the pending gauge to count them",
             lambda: samples(webhook_metrics(cluster), "gpu_class_pending_pods").get(("high", "0s")) == expected)
    assert samples(webhook_metrics(cluster), "gpu_class_pending_pods").get(("high", "1h")) == 0
    proc = subprocess.run([local_cluster.gpuclass_path(), "inventory", f"--kubeconfig={cluster.kubeconfig}", "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    classes = {c["name"]: c for c in json.loads(proc.stdout)["classes"]}
    assert classes["high"]["pending"] == expected


def test_absent_types_are_not_warned_a_worse_placement_is(core: kubernetes.client.CoreV1Api, namespace: str,
                                                         pool: str) -> None:
    """The cluster lacks most catalog types: no warning for that. A Pod too big for H200's nodes is warned."""
    wait_for("the webhook to see the test's nodes", lambda: "H200" in _types(core, namespace, "high"))
    _, warnings = _admit(core, namespace, make_pod("ordinary", gpu_class="high"))
    assert warnings == []
    _, warnings = _admit(core, namespace, make_pod("big", gpu_class="high", gpus=8))
    assert warnings == ["gpu-class: class high: not on H200 (too few GPUs: largest allocatable 4, Pod needs 8); "
                        "best allowed: H100-NVL"]
    _, warnings = _admit(core, namespace, make_pod("typo", gpu_class="high", annotations={"gpu-class.io/cuont": "2"}))
    assert warnings == ["gpu-class: gpu-class.io/cuont ignored; known: class, count, container, exclude-types, "
                        "min-memory, group, group-size, ..."]


def _admit(core: kubernetes.client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A dry-run create: the Pod as admitted, and the warnings the API server passed on (RFC 7234 Warning
    headers: `299 - "text"`)."""
    response = core.create_namespaced_pod(namespace, pod, dry_run="All", _preload_content=False)
    warnings = [m.group(1) for w in response.headers.getlist("Warning") if (m := re.fullmatch(r'\d+ \S+ "(.*)"', w))]
    return json.loads(response.data), warnings
