"""Placement fidelity: each bind judged against the inventory just before it; Pods still Pending by class."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import make_catalog, make_node, placed_terms
from webhook.core.reports.fidelity import judge_bind, pending_by_class
from webhook.core.view.inventory import InventoryState
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.pods import GroupName, UnboundGpuPod
from webhook.core.view.snapshot import Snapshot

CATALOG = make_catalog()  # high: H100, A100, H200 (performance); economy: cost; packed: binpack; balanced
H100, A100, H200, T4, L4 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB", "NVIDIA-H200", "Tesla-T4", "NVIDIA-L4"
GPU = "nvidia.com/gpu"


def snapshot_of(nodes: list[dict[str, Any]], used: dict[str, int] | None = None,
                groups: dict[str, GroupName] | None = None, *, synced: bool = True) -> Snapshot:
    """The inventory as the watch publishes it: nodes, and devices held by bound Pods (node -> GPUs),
    each bound Pod named after its node (for `groups`)."""
    state = InventoryState(catalog=CATALOG, synced=synced, watch_pods=True)
    state.replace_nodes(i for i in (node_info_from_object(n, CATALOG) for n in nodes) if i is not None)
    state.replace_pods(((f"ml/on-{node}", node, {GPU: gpus}) for node, gpus in (used or {}).items()),
                       {f"ml/on-{node}": g for node, g in (groups or {}).items()})
    return state.publish()


def pod(class_name: str | None, types: tuple[str, ...], devices: int = 1, *,
        group: GroupName | None = None, created: float | None = None, gated: bool = False) -> UnboundGpuPod:
    return UnboundGpuPod("uid-p", "ml", "p", GPU, devices, class_name, types, created, group, gated)


@dataclass
class Case:
    id: str
    pod: UnboundGpuPod
    node: str
    nodes: list[dict[str, Any]]
    used: dict[str, int] = field(default_factory=dict)
    expected: tuple[str, str] | None = None  # (outcome, type) or None: not judged
    better: str = ""
    groups: dict[str, GroupName] = field(default_factory=dict)
    synced: bool = True
    counted: int = 0  # devices of the Pod the inventory already holds on its node (a DRA claim seen first)


PERF = ("H100", "A100")
CASES = [
    Case("performance-on-the-best-type", pod("high", PERF), "h100", [make_node("h100", H100), make_node("a100", A100)],
         expected=("best", "H100")),
    Case("performance-fallback-when-the-best-type-is-full", pod("high", PERF), "a100",
         [make_node("h100", H100), make_node("a100", A100)], {"h100": 8}, expected=("fallback", "A100")),
    Case("performance-broken-when-the-best-type-had-room", pod("high", PERF), "a100",
         [make_node("h100", H100), make_node("a100", A100)], {"h100": 6}, expected=("broken", "A100"),
         better="H100 had room"),
    # two free GPUs on each of two nodes is no room for a Pod of 4: room is per node, not the type's sum
    Case("performance-room-is-on-one-node", pod("high", PERF, 4), "a100",
         [make_node("h100-1", H100), make_node("h100-2", H100), make_node("a100", A100)], {"h100-1": 6, "h100-2": 6},
         expected=("fallback", "A100")),
    Case("performance-not-ready-and-cordoned-nodes-have-no-room", pod("high", PERF), "a100",
         [make_node("h100-1", H100, ready=False), make_node("h100-2", H100, unschedulable=True), make_node("a100", A100)],
         expected=("fallback", "A100")),
    # the order is the class's, whatever order the annotation has
    Case("performance-class-order-wins-over-the-annotation", pod("high", ("A100", "H100")), "a100",
         [make_node("h100", H100), make_node("a100", A100)], expected=("broken", "A100"), better="H100 had room"),
    Case("performance-types-it-was-not-allowed-do-not-count", pod("high", ("A100",)), "a100",
         [make_node("h100", H100), make_node("a100", A100)], expected=("best", "A100")),
    Case("cost-slowest-first", pod("economy", ("T4", "L4")), "l4", [make_node("t4", T4, gpus=4), make_node("l4", L4)],
         {"t4": 3}, expected=("broken", "L4"), better="T4 had room"),
    Case("cost-on-the-slowest", pod("economy", ("T4", "L4")), "t4", [make_node("t4", T4, gpus=4), make_node("l4", L4)],
         expected=("best", "T4")),
    # binpack: the largest share in use once placed (l4-a: 75%; l4-b: 25%; the T4: 50%)
    Case("binpack-on-the-fullest-node", pod("packed", ("L4", "T4")), "l4-a",
         [make_node("l4-a", L4, gpus=4), make_node("l4-b", L4, gpus=4), make_node("t4", T4, gpus=2)], {"l4-a": 2},
         expected=("best", "L4")),
    Case("binpack-broken-on-an-emptier-node", pod("packed", ("L4", "T4")), "l4-b",
         [make_node("l4-a", L4, gpus=4), make_node("l4-b", L4, gpus=4), make_node("t4", T4, gpus=2)], {"l4-a": 2},
         expected=("broken", "L4"), better="a node of L4 would have had 75% of its GPUs in use, this one 25%"),
    Case("binpack-ties-are-all-right", pod("packed", ("L4", "T4")), "t4",
         [make_node("l4-a", L4, gpus=4), make_node("t4", T4, gpus=2)], {"l4-a": 1}, expected=("best", "T4")),
    Case("binpack-whole-percent", pod("packed", ("L4",)), "l4-b",
         [make_node("l4-a", L4, gpus=3), make_node("l4-b", L4, gpus=6)], {"l4-b": 1},  # 33% against 33.3%
         expected=("best", "L4")),
    Case("balanced-broken-on-a-fuller-node", pod("balanced", ("A100", "T4")), "a100-b",
         [make_node("a100-a", A100), make_node("a100-b", A100)], {"a100-b": 4},
         expected=("broken", "A100"), better="a node of A100 would have had 87% of its GPUs free, this one 37%"),
    # a DRA node: the scheduler's claim for the Pod, allocated before the bind, is in the view; given
    # back, l4-a had 1 GPU in use (50% once placed) against l4-b's 2 (75%)
    Case("binpack-the-pods-own-claim-seen-before-the-bind", pod("packed", ("L4",)), "l4-a",
         [make_node("l4-a", L4, gpus=4), make_node("l4-b", L4, gpus=4)], {"l4-a": 2, "l4-b": 2}, counted=1,
         expected=("broken", "L4"), better="a node of L4 would have had 75% of its GPUs in use, this one 50%"),
    Case("balanced-the-pods-own-claim-seen-before-the-bind", pod("balanced", ("A100",)), "a100-a",
         [make_node("a100-a", A100), make_node("a100-b", A100)], {"a100-a": 1}, counted=1, expected=("best", "A100")),
    Case("performance-the-pods-own-claim-seen-before-the-bind", pod("high", PERF), "h100",
         [make_node("h100", H100), make_node("a100", A100)], {"h100": 8}, counted=1, expected=("best", "H100")),
    # the group runs on A100: H100 with room is not room for a Pod of the group
    Case("group-following-its-type-is-no-broken-promise", pod("high", PERF, group=("ml", "g")), "a100-b",
         [make_node("h100", H100), make_node("a100-a", A100), make_node("a100-b", A100)], {"a100-a": 1},
         groups={"a100-a": ("ml", "g")}, expected=("fallback", "A100")),
    Case("a-group-of-another-namespace-does-not-scope", pod("high", PERF, group=("ml", "g")), "a100-b",
         [make_node("h100", H100), make_node("a100-a", A100), make_node("a100-b", A100)], {"a100-a": 1},
         groups={"a100-a": ("other", "g")}, expected=("broken", "A100"), better="H100 had room"),
    Case("not-placed-by-gpu-class", pod("high", ()), "h100", [make_node("h100", H100)]),
    Case("class-not-in-the-catalog", pod("turbo", PERF), "h100", [make_node("h100", H100)]),
    Case("node-the-inventory-does-not-know", pod("high", PERF), "cpu-1", [make_node("h100", H100), make_node("cpu-1")]),
    Case("node-of-a-type-it-was-not-allowed", pod("high", ("H100",)), "a100", [make_node("a100", A100)]),
    Case("before-the-nodes-are-read", pod("high", PERF), "h100", [make_node("h100", H100)], synced=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_judge_bind(case: Case) -> None:
    verdict = judge_bind(case.pod, case.node, snapshot_of(case.nodes, case.used, case.groups, synced=case.synced),
                         CATALOG, counted=case.counted)
    if case.expected is None:
        assert verdict is None
        return
    assert verdict is not None and (verdict.outcome, verdict.type_name) == case.expected
    assert verdict.class_name == case.pod.class_name and verdict.better == case.better


def test_the_pods_own_node_counts_as_it_was_even_if_the_view_says_it_was_full() -> None:
    """The scheduler saw room the watch had not yet seen freed: the Pod's node is still judged by its share."""
    nodes = [make_node("l4-a", L4, gpus=4), make_node("l4-b", L4, gpus=4)]
    verdict = judge_bind(pod("packed", ("L4",)), "l4-a", snapshot_of(nodes, {"l4-a": 4, "l4-b": 2}), CATALOG)
    assert verdict is not None and verdict.outcome == "best"


NOW = 1_000_000.0


def test_pending_by_class_counts_placed_unbound_pods_by_how_long_they_waited() -> None:
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    waiting = {"fresh": pod("high", PERF, created=NOW - 10), "two-minutes": pod("high", PERF, created=NOW - 120),
               "twenty-minutes": pod("high", PERF, created=NOW - 1200), "day": pod("economy", ("T4",), created=NOW - 86400),
               "no-timestamp": pod("high", PERF), "not-placed": pod("high", (), created=NOW - 7200),
               "gated": pod("high", PERF, created=NOW - 7200, gated=True),
               "unknown-class": pod("turbo", PERF, created=NOW - 7200)}
    # each with the affinity the webhook writes beside its types: the inventory believes the types by it
    state.replace_unbound_pods(UnboundGpuPod(uid, "ml", uid, GPU, 1, p.class_name, p.types, p.created_seconds, None,
                                             p.gated, node_terms=placed_terms(p.types)) for uid, p in waiting.items())
    counts = pending_by_class(state.publish(), CATALOG, NOW)
    assert counts is not None and set(counts) == set(CATALOG.classes)
    assert counts["high"] == {"0s": 4, "1m": 2, "5m": 1, "15m": 1, "1h": 0}
    assert counts["economy"] == {"0s": 1, "1m": 1, "5m": 1, "15m": 1, "1h": 1}
    assert counts["packed"] == dict.fromkeys(("0s", "1m", "5m", "15m", "1h"), 0)


def test_pending_is_unknown_where_pods_are_not_watched() -> None:
    assert pending_by_class(Snapshot(groups_by_type={}), CATALOG, NOW) is None
