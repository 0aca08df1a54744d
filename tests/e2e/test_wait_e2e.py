"""gpu-class.io/max-wait on the real control plane with the strict path (gpu-class-scheduler): a Pod waits for its best
type within its budget, then falls back in its class's order.

The test's own H100 node (4 GPUs) is full and its A100 node has room; the Pods select the two by a label, and the
session's other GPU nodes are cordoned while it runs (the webhook judges room on every node of a type). No kubelets:
a Pod counts as placed when the scheduler binds it.
"""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def h100_with_blockers(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str,
                       blockers: int) -> Iterator[None]:
    """The test's H100 node (4 GPUs) with `blockers` of them taken by Pods blocker-0.., and its A100 node empty."""
    with other_gpu_nodes_cordoned(core):
        create_node(core, H100_NODE, {**H100_LABELS, POOL: SUFFIX}, gpus=4)
        create_node(core, A100_NODE, {**fixture_labels("a100-sxm4-40gb_gce_before-mig.yaml"), POOL: SUFFIX}, gpus=4)
        try:
            for i in range(blockers):
                core.create_namespaced_pod(namespace, pod(f"blocker-{i}"))
            wait_for("the blockers on H100", lambda: sorted(bound(core, namespace).items()) == [
                (f"blocker-{i}", H100_NODE) for i in range(blockers)], seconds=60)
            # the webhook writes the Pods' types from its view: it must see what the blockers left
            wait_for("the webhook seeing the blockers", lambda: webhook_free_gpus(cluster, "H100") == 4 - blockers,
                     seconds=30)
            yield
        finally:
            delete_nodes(core, [H100_NODE, A100_NODE])


@pytest.fixture
def h100_full(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str) -> Iterator[None]:
    with h100_with_blockers(cluster, core, namespace, 4):
        yield


@pytest.fixture
def h100_room_for_2(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str) -> Iterator[None]:
    with h100_with_blockers(cluster, core, namespace, 2):
        yield


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


def create_group(core: kubernetes.client.CoreV1Api, namespace: str, max_wait: str) -> None:
    for i in range(3):
        manifest = pod(f"train-{i}", max_wait)
        manifest["metadata"]["annotations"].update({"gpu-class.io/group": "train", "gpu-class.io/group-size": "3"})
        core.create_namespaced_pod(namespace, manifest)


def group_nodes(core: kubernetes.client.CoreV1Api, namespace: str) -> list[str]:
    return [node for name, node in sorted(bound(core, namespace).items()) if name.startswith("train-")]


def test_a_group_waits_as_one_for_room_for_all_of_it(core: kubernetes.client.CoreV1Api, namespace: str,
                                                      h100_room_for_2: None) -> None:
    started = time.monotonic()
    create_group(core, namespace, "60s")
    time.sleep(10)
    assert group_nodes(core, namespace) == [], "no Pod of the group starts while H100 holds 2 of its 3"
    freed = time.monotonic() - started
    core.delete_namespaced_pod("blocker-0", namespace, grace_period_seconds=0)
    wait_for("the group of 3 on H100", lambda: group_nodes(core, namespace) == [H100_NODE] * 3, seconds=40)
    print(f"\ngroup of 3, max-wait 60s: room for all of it at {freed:.1f} s, all 3 on H100 at "
          f"{time.monotonic() - started:.1f} s")


def test_a_group_whose_wait_is_spent_lands_on_one_type_that_holds_it(core: kubernetes.client.CoreV1Api,
                                                                     namespace: str, h100_room_for_2: None) -> None:
    started = time.monotonic()
    create_group(core, namespace, "10s")
    wait_for("the group of 3 on A100", lambda: group_nodes(core, namespace) == [A100_NODE] * 3, seconds=40)
    took = time.monotonic() - started
    assert took >= 10.0, f"the group started after {took:.1f} s, before its wait was spent"
    print(f"\ngroup of 3, max-wait 10s, H100 room for 2: all 3 on A100 at {took:.1f} s")


def test_a_wait_written_for_a_path_that_cannot_keep_it_is_dropped(core: kubernetes.client.CoreV1Api,
                                                                       namespace: str, h100_full: None) -> None:
    """A max-wait on a Pod for the strict profiles on the stock kube-scheduler binary, which cannot keep it, gets
    nothing: the stored Pod carries no wait that a scheduler, an alert or explain could read, and it binds on A100
    at once."""
    manifest = pod("forged", "24h")
    manifest["spec"]["schedulerName"] = local_cluster.STOCK_SCHEDULER
    created = core.create_namespaced_pod(namespace, manifest)
    assert "gpu-class.io/max-wait" not in (created.metadata.annotations or {})
    started = time.monotonic()
    node = wait_for("the Pod bound", lambda: core.read_namespaced_pod("forged", namespace).spec.node_name, seconds=20)
    assert node == A100_NODE and time.monotonic() - started < 5
