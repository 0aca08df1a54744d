"""gpu-class.io/max-wait on the real control plane with the strict path (gpu-class-scheduler): a Pod waits for its best
type within its budget, then falls back in its class's order.

The test's own H100 node (4 GPUs) is full and its A100 node has room; the Pods select the two by a label, and the
session's other GPU nodes are cordoned while it runs (the webhook judges room on every node of a type). No kubelets:
a Pod counts as placed when the scheduler binds it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

import kubernetes
import pytest

import local_cluster
from fleet import H100_LABELS
from kubeobjects import (create_node, delete_nodes, fixture_labels, make_pod, other_gpu_nodes_cordoned, wait_for,
                         webhook_free_gpus)

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
                    seconds: float, *, free_after: float | None = None) -> tuple[str, float, float | None]:
    """Create the Pod; optionally delete blocker-0 `free_after` s later. (node, seconds to bind, when freed)."""
    created = core.create_namespaced_pod(namespace, pod(name, max_wait))
    assert created.metadata.annotations.get("gpu-class.io/max-wait") == max_wait
    started = time.monotonic()
    freed = None
    while time.monotonic() - started < seconds:
        if free_after is not None and freed is None and time.monotonic() - started >= free_after:
            core.delete_namespaced_pod("blocker-0", namespace, grace_period_seconds=0)
            freed = time.monotonic() - started
        node = core.read_namespaced_pod(name, namespace).spec.node_name
        if node:
            return node, time.monotonic() - started, freed
        time.sleep(0.2)
    pytest.fail(f"{name} not bound within {seconds:.0f} s", pytrace=False)


def test_a_pod_waits_for_h100_within_its_budget(core: kubernetes.client.CoreV1Api, namespace: str,
                                                 h100_full: None) -> None:
    node, took, freed = create_and_time(core, namespace, "patient", "60s", 60, free_after=20)
    assert freed is not None and node == H100_NODE, f"bound on {node} after {took:.1f} s"
    assert took >= freed, "bound before H100 had room"
    print(f"\nmax-wait 60s: H100 freed at {freed:.1f} s, bound there at {took:.1f} s")


def test_a_spent_budget_falls_back_in_order_and_says_so(core: kubernetes.client.CoreV1Api, namespace: str,
                                                        h100_full: None) -> None:
    node, took, _ = create_and_time(core, namespace, "brief", "10s", 40)
    assert node == A100_NODE
    # the plugin counts the budget from the creation stamp (truncated to the second) plus that second
    assert took >= 10.0, f"bound on A100 after {took:.1f} s, before its 10 s were spent"
    events = wait_for("the MaxWaitSpent Event", lambda: [
        e for e in core.list_namespaced_event(namespace).items
        if e.reason == "MaxWaitSpent" and e.involved_object.name == "brief"], seconds=10)
    assert events[0].message == "waited its max-wait 10s for H100, which had no room; now placed in its class's order: H100, A100-40GB"
    print(f"\nmax-wait 10s: bound on A100 at {took:.1f} s")


def test_without_a_wait_a_pod_takes_a100_at_once(core: kubernetes.client.CoreV1Api, namespace: str,
                                                 h100_full: None) -> None:
    node, took, _ = create_and_time(core, namespace, "eager", None, 20)
    assert node == A100_NODE and took < 5, f"bound on {node} after {took:.1f} s"
    print(f"\nno max-wait: bound on A100 at {took:.1f} s")
