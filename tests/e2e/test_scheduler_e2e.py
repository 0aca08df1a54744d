"""gpu-class-scheduler's NodeLabelIndex on the real control plane: a Pod's cycle sees only the nodes its
required affinity names, and the index follows the nodes as they come, go and change their labels.

The stock binary's profiles (gpu-class-stock) run beside it as the control: the same Pods, filtered
on every node. The nodes are this module's own, of a type label no other test uses, and the Pods
name their affinity themselves in a namespace that has not opted in, so only the scheduler acts.
"""

from __future__ import annotations

import random
import re
import ssl
import time
import urllib.request
import uuid
from typing import Any, Iterator

import kubernetes
import pytest

import local_cluster
from kubeobjects import create_node, delete_nodes, make_pod, read_pod, wait_bound, wait_for

SUFFIX = uuid.uuid4().hex[:6]
TYPE_LABEL = "gpu-type"
WANTED, OTHER = f"e2e-index-{SUFFIX}", f"e2e-other-{SUFFIX}"
SMALL = f"e2e-index-small-{SUFFIX}"  # the one node of the wanted type at first: 1 GPU
SCHEDULERS = [pytest.param(local_cluster.STRICT_SCHEDULER, id="gpu-class-scheduler"),
              pytest.param(local_cluster.STOCK_SCHEDULER, id="stock-binary")]
# The shared GPU nodes and a CPU-only node: the nodes of other types the index must leave out.
pytestmark = pytest.mark.usefixtures("fleet")


@pytest.fixture
def small_node(core: kubernetes.client.CoreV1Api) -> Iterator[list[str]]:
    """The wanted type's one small node; a test appends the nodes it makes, all deleted afterwards."""
    made = [SMALL]
    create_node(core, SMALL, {TYPE_LABEL: WANTED}, gpus=1, taints=())
    yield made
    delete_nodes(core, made)


def wanting(name: str, scheduler: str, gpus: int) -> dict[str, Any]:
    required = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": TYPE_LABEL, "operator": "In", "values": [WANTED]}]}]}
    return make_pod(name, gpus=gpus, scheduler=scheduler,
                    affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}})


def unschedulable_message(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> str:
    def message() -> str | None:
        for c in read_pod(core, namespace, name)["status"].get("conditions", []):
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                return str(c["message"])
        return None
    return str(wait_for(f"{namespace}/{name} found unschedulable", message))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_only_the_wanted_types_nodes_are_filtered(core: kubernetes.client.CoreV1Api, plain_namespace: str,
                                                  small_node: list[str], scheduler: str) -> None:
    """Too big for the one node of its type: the scheduler says why of every node. With the index,
    every other node was left out before any Filter plugin ran; on the stock binary each of them went
    through the Filter plugins (turned down by a taint, a cordon or NodeAffinity)."""
    core.create_namespaced_pod(plain_namespace, wanting("too-big", scheduler, gpus=2))
    message = unschedulable_message(core, plain_namespace, "too-big")
    others = len(core.list_node().items) - 1
    assert "1 Insufficient nvidia.com/gpu" in message, message
    left_out = f"{others} node(s) didn't satisfy plugin(s) [NodeLabelIndex]"
    if scheduler == local_cluster.STRICT_SCHEDULER:
        assert left_out in message, message
    else:
        assert "NodeLabelIndex" not in message and "didn't match Pod's node affinity/selector" in message, message


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_node_added_with_the_type_is_found(core: kubernetes.client.CoreV1Api, plain_namespace: str,
                                             small_node: list[str], scheduler: str) -> None:
    core.create_namespaced_pod(plain_namespace, wanting("waits", scheduler, gpus=4))
    unschedulable_message(core, plain_namespace, "waits")
    big = f"e2e-index-big-{scheduler}-{SUFFIX}"
    small_node.append(big)
    create_node(core, big, {TYPE_LABEL: WANTED}, gpus=4, taints=())
    assert wait_bound(core, plain_namespace, "waits") == big


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_node_relabelled_to_the_type_is_found(core: kubernetes.client.CoreV1Api, plain_namespace: str,
                                                small_node: list[str], scheduler: str) -> None:
    """The node count does not change, only a label: the index must move the node to its new type."""
    relabelled = f"e2e-index-relabelled-{scheduler}-{SUFFIX}"
    small_node.append(relabelled)
    create_node(core, relabelled, {TYPE_LABEL: OTHER}, gpus=4, taints=())
    core.create_namespaced_pod(plain_namespace, wanting("waits", scheduler, gpus=4))
    unschedulable_message(core, plain_namespace, "waits")
    core.patch_node(relabelled, {"metadata": {"labels": {TYPE_LABEL: WANTED}}})
    assert wait_bound(core, plain_namespace, "waits") == relabelled


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_deleted_node_is_not_offered(core: kubernetes.client.CoreV1Api, plain_namespace: str,
                                       small_node: list[str], scheduler: str) -> None:
    """The wanted type's big node goes away before the Pod comes: the Pod waits rather than bind to a
    node that is no more, and takes the next one that comes."""
    gone, later = f"e2e-index-gone-{scheduler}-{SUFFIX}", f"e2e-index-later-{scheduler}-{SUFFIX}"
    small_node.extend([gone, later])
    create_node(core, gone, {TYPE_LABEL: WANTED}, gpus=4, taints=())
    delete_nodes(core, [gone])
    core.create_namespaced_pod(plain_namespace, wanting("waits", scheduler, gpus=4))
    message = unschedulable_message(core, plain_namespace, "waits")
    assert "1 Insufficient nvidia.com/gpu" in message, message
    create_node(core, later, {TYPE_LABEL: WANTED}, gpus=4, taints=())
    assert wait_bound(core, plain_namespace, "waits") == later


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_best_nodes_all_refused_by_a_filter_the_order_does_not_know_widen_the_next_attempt(
        core: kubernetes.client.CoreV1Api, plain_namespace: str, small_node: list[str], scheduler: str) -> None:
    """The best type's one node has room for the Pod's CPU and devices but takes no more Pods (its
    `pods` allocatable is used up), which NodeResourcesFit's Filter checks and NodeLabelIndex's order
    does not: the cycle given only the best node finds no node, NodeLabelIndex's PostFilter gives the
    next attempt every node of the Pod's types, and the Pod binds on the next type, as on the stock
    binary, where one cycle saw both."""
    best, worse = f"e2e-order-best-{scheduler}-{SUFFIX}", f"e2e-order-next-{scheduler}-{SUFFIX}"
    best_type, worse_type = f"e2e-order-best-{SUFFIX}", f"e2e-order-next-{SUFFIX}"
    small_node.extend([best, worse])
    create_node(core, best, {TYPE_LABEL: best_type}, gpus=4, taints=(), extra_allocatable={"pods": "0"})
    create_node(core, worse, {TYPE_LABEL: worse_type}, gpus=4, taints=())
    required = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": TYPE_LABEL, "operator": "In", "values": [best_type, worse_type]}]}]}
    preferred = [{"weight": w, "preference": {"matchExpressions": [
        {"key": TYPE_LABEL, "operator": "In", "values": [t]}]}} for w, t in ((100, best_type), (50, worse_type))]
    created = time.monotonic()
    core.create_namespaced_pod(plain_namespace, make_pod("ordered", gpus=1, scheduler=scheduler, affinity={
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required,
                         "preferredDuringSchedulingIgnoredDuringExecution": preferred}}))
    assert wait_bound(core, plain_namespace, "ordered", seconds=60) == worse
    print(f"\nbest nodes all refused, create to bind on the next type: {time.monotonic() - created:.1f} s "
          f"({scheduler})")
    failures = [e.message for e in core.list_namespaced_event(
        plain_namespace, field_selector="involvedObject.name=ordered").items if e.reason == "FailedScheduling"]
    if scheduler == local_cluster.STRICT_SCHEDULER:
        assert any("its next attempt looks at every node of its types" in m for m in failures), failures
    else:
        assert failures == []


def scheduler_metrics(cluster: local_cluster.Cluster) -> dict[str, float]:
    """gpu-class-scheduler's own /metrics (kube-scheduler's secure port, its certificate self-signed), read as
    an admin: `name{labels}` -> value for gpu-class's series."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
    assert cluster.ports
    url = f"https://127.0.0.1:{cluster.ports.gpu_scheduler}/metrics"
    with urllib.request.urlopen(url, context=context, timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(gpu_class_scheduler_\w+(?:\{[^}]*\})?) (\S+)$", text, re.MULTILINE)}


def preferring(name: str, gpus: int) -> dict[str, Any]:
    """A Pod of the wanted type for gpu-class-scheduler that also prefers it, as the webhook writes a class's
    types: its profile's order ranks the wanted type's nodes with room first."""
    pod = wanting(name, local_cluster.STRICT_SCHEDULER, gpus=gpus)
    pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {"weight": 100, "preference": {"matchExpressions": [{"key": TYPE_LABEL, "operator": "In", "values": [WANTED]}]}}]
    return pod


def test_cycles_are_counted_on_the_schedulers_metrics(cluster: local_cluster.Cluster,
                                                      core: kubernetes.client.CoreV1Api, plain_namespace: str,
                                                      small_node: list[str]) -> None:
    """A Pod whose cycle NodeLabelIndex narrows to its best node counts as `narrowed` on kube-scheduler's own
    /metrics; every outcome is served, and the index, fed by the scheduler's informer alone, has needed no
    repair through this module's node adds, deletes and relabels."""
    narrowed = 'gpu_class_scheduler_prefilter_cycles_total{outcome="narrowed"}'
    before = scheduler_metrics(cluster)
    assert {f'gpu_class_scheduler_prefilter_cycles_total{{outcome="{o}"}}'
            for o in ("narrowed", "widened", "fell_back", "unnarrowed")} <= before.keys(), before
    core.create_namespaced_pod(plain_namespace, preferring("narrowed", gpus=1))
    assert wait_bound(core, plain_namespace, "narrowed") == SMALL
    after = scheduler_metrics(cluster)
    assert after[narrowed] >= before[narrowed] + 1, (before, after)
    assert after["gpu_class_scheduler_index_repairs_total"] == 0, after


def test_narrowing_survives_node_churn(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
                                       plain_namespace: str, small_node: list[str]) -> None:
    """Nodes of the wanted type and another come, go and change types in bursts while Pods wait for the wanted
    type (so the scheduler runs their hints on those events and replays them after their cycles): the Pods then
    bind on the wanted type when it has room, and once the nodes are still every cycle is narrowed again, with
    no repair of the index."""
    rng = random.Random(47)
    churn = [f"e2e-churn-{i}-{SUFFIX}" for i in range(24)]
    small_node.extend(churn)
    waiting = [f"waits-{i}" for i in range(4)]
    for name in waiting:
        core.create_namespaced_pod(plain_namespace, preferring(name, gpus=2))
    for name in waiting:
        unschedulable_message(core, plain_namespace, name)
    live: set[str] = set()
    for _ in range(3):
        for name in churn:
            if name not in live and rng.random() < 0.6:
                create_node(core, name, {TYPE_LABEL: rng.choice([WANTED, OTHER])}, gpus=1, taints=())
                live.add(name)
        for name in sorted(live):
            draw = rng.random()
            if draw < 0.3:
                core.patch_node(name, {"metadata": {"labels": {TYPE_LABEL: rng.choice([WANTED, OTHER])}}})
            elif draw < 0.55:
                delete_nodes(core, [name])
                live.discard(name)
    roomy = [f"e2e-churn-roomy-{i}-{SUFFIX}" for i in range(len(waiting))]
    small_node.extend(roomy)
    for name in roomy:
        create_node(core, name, {TYPE_LABEL: WANTED}, gpus=2, taints=())
    for name in waiting:
        assert wait_bound(core, plain_namespace, name, seconds=60) in roomy
    time.sleep(2)  # every node event handled by both of the scheduler's handlers
    narrowed = 'gpu_class_scheduler_prefilter_cycles_total{outcome="narrowed"}'
    before = scheduler_metrics(cluster)
    later = [f"later-{i}" for i in range(3)]
    for name in later:
        core.create_namespaced_pod(plain_namespace, preferring(name, gpus=1))
        wait_bound(core, plain_namespace, name)
    after = scheduler_metrics(cluster)
    assert after[narrowed] - before[narrowed] >= len(later), (before, after)
    assert after["gpu_class_scheduler_index_repairs_total"] == 0, after
