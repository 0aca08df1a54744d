"""gpu-class.io/max-wait on the real control plane with the strict path (gpu-class-scheduler): a Pod waits for its best
type within its budget, then falls back in its class's order.

The test's own H100 node (4 GPUs) is full and its A100 node has room; the Pods select the two by a label, and the
session's other GPU nodes are cordoned while it runs (the webhook judges room on every node of a type). No kubelets:
a Pod counts as placed when the scheduler binds it.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Callable, Iterator

import kubernetes
import pytest

import local_cluster
from fleet import H100_LABELS
from kubeobjects import (create_node, delete_nodes, fixture_labels, make_pod, other_gpu_nodes_cordoned, wait_for,
                         webhook_free_gpus, webhook_metrics)

SUFFIX = uuid.uuid4().hex[:6]
POOL = "gpu-class.io/e2e-wait"
H100_NODE, A100_NODE = f"wait-h100-{SUFFIX}", f"wait-a100-{SUFFIX}"


@pytest.fixture
def h100_full(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str) -> Iterator[None]:
    """The test's H100 node with its 4 GPUs taken by Pods blocker-0..3, and its A100 node empty."""
    with other_gpu_nodes_cordoned(core):
        create_node(core, H100_NODE, {**H100_LABELS, POOL: SUFFIX}, gpus=4)
        create_node(core, A100_NODE, {**fixture_labels("a100-sxm4-40gb_gce_before-mig.yaml"), POOL: SUFFIX}, gpus=4)
        try:
            for i in range(4):
                core.create_namespaced_pod(namespace, pod(f"blocker-{i}"))
            wait_for("the blockers on H100", lambda: sorted(bound(core, namespace).items()) == [
                (f"blocker-{i}", H100_NODE) for i in range(4)], seconds=60)
            # the webhook writes the Pods' types from its view: it must see H100 full and A100 free
            wait_for("the webhook seeing H100 full", lambda: webhook_free_gpus(cluster, "H100") == 0, seconds=30)
            yield
        finally:
            delete_nodes(core, [H100_NODE, A100_NODE])


def pod(name: str, max_wait: str | None = None) -> dict[str, Any]:
    manifest = make_pod(name, gpu_class="high", gpus=1, scheduler=local_cluster.STRICT_SCHEDULER,
                        annotations={"gpu-class.io/max-wait": max_wait} if max_wait else None)
    manifest["spec"]["nodeSelector"] = {POOL: SUFFIX}
    return manifest


def bound(core: kubernetes.client.CoreV1Api, namespace: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items if p.spec.node_name}


def create_and_time(core: kubernetes.client.CoreV1Api, namespace: str, name: str, max_wait: str | None,
                    seconds: float, *, free_after: float | None = None,
                    before_freeing: Callable[[], None] = lambda: None) -> tuple[str, float, float | None]:
    """Create the Pod; optionally delete blocker-0 `free_after` s later, once `before_freeing` returned. (node,
    seconds to bind, when freed)."""
    created = core.create_namespaced_pod(namespace, pod(name, max_wait))
    assert created.metadata.annotations.get("gpu-class.io/max-wait") == max_wait
    started = time.monotonic()
    freed = None
    while time.monotonic() - started < seconds:
        if free_after is not None and freed is None and time.monotonic() - started >= free_after:
            before_freeing()
            core.delete_namespaced_pod("blocker-0", namespace, grace_period_seconds=0)
            freed = time.monotonic() - started
        node = core.read_namespaced_pod(name, namespace).spec.node_name
        if node:
            return node, time.monotonic() - started, freed
        time.sleep(0.2)
    pytest.fail(f"{name} not bound within {seconds:.0f} s", pytrace=False)


def waits_counted(cluster: local_cluster.Cluster, outcome: str) -> float:
    """gpu_class_wait_seconds_count of class high and `outcome`, summed over the webhook's workers."""
    pattern = rf'^gpu_class_wait_seconds_count\{{(?=[^}}]*class="high")(?=[^}}]*outcome="{outcome}")[^}}]*\}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, webhook_metrics(cluster), re.M))


def high_gauge(cluster: local_cluster.Cluster, name: str, extra: str = "") -> float:
    """A gauge of class high (`extra`: another label's matcher), as the webhook reports it."""
    found = re.search(rf'^{name}\{{(?=[^}}]*class="high"){extra}[^}}]*\}} (\S+)$', webhook_metrics(cluster), re.M)
    return float(found.group(1)) if found else -1.0


def counted_as_waiting(cluster: local_cluster.Cluster) -> None:
    """The waiting Pod is counted as waiting by choice, not as pending (the blockers are all bound)."""
    wait_for("the Pod counted as waiting, not pending", lambda: (
        high_gauge(cluster, "gpu_class_waiting_pods"),
        high_gauge(cluster, "gpu_class_pending_pods", '(?=[^}]*longer_than="0s")')) == (1.0, 0.0), seconds=10)


def test_a_pod_waits_for_h100_within_its_budget(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
                                                 namespace: str, h100_full: None) -> None:
    before = waits_counted(cluster, "best_type")
    node, took, freed = create_and_time(core, namespace, "patient", "60s", 60, free_after=20,
                                        before_freeing=lambda: counted_as_waiting(cluster))
    assert freed is not None and node == H100_NODE, f"bound on {node} after {took:.1f} s"
    assert took >= freed, "bound before H100 had room"
    wait_for("the wait counted as best_type", lambda: waits_counted(cluster, "best_type") == before + 1, seconds=10)
    print(f"\nmax-wait 60s: H100 freed at {freed:.1f} s, bound there at {took:.1f} s")


def test_a_spent_budget_falls_back_in_order_and_says_so(cluster: local_cluster.Cluster,
                                                        core: kubernetes.client.CoreV1Api, namespace: str,
                                                        h100_full: None) -> None:
    before = waits_counted(cluster, "fell_back")
    node, took, _ = create_and_time(core, namespace, "brief", "10s", 40)
    assert node == A100_NODE
    # the plugin counts the budget from the creation stamp (truncated to the second) plus that second
    assert took >= 10.0, f"bound on A100 after {took:.1f} s, before its 10 s were spent"
    events = wait_for("the MaxWaitSpent Event", lambda: [
        e for e in core.list_namespaced_event(namespace).items
        if e.reason == "MaxWaitSpent" and e.involved_object.name == "brief"], seconds=10)
    assert events[0].message == "waited its max-wait 10s for H100, which had no room; now placed in its class's order: H100, A100-40GB"
    wait_for("the wait counted as fell_back", lambda: waits_counted(cluster, "fell_back") == before + 1, seconds=10)
    print(f"\nmax-wait 10s: bound on A100 at {took:.1f} s")


def test_without_a_wait_a_pod_takes_a100_at_once(core: kubernetes.client.CoreV1Api, namespace: str,
                                                 h100_full: None) -> None:
    node, took, _ = create_and_time(core, namespace, "eager", None, 20)
    assert node == A100_NODE and took < 5, f"bound on {node} after {took:.1f} s"
    print(f"\nno max-wait: bound on A100 at {took:.1f} s")
