"""InventoryState kept event by event: the per-group summaries it keeps node by node equal a summary
worked out from scratch, and a published Snapshot never changes when later events arrive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import make_catalog, make_node, make_unbound_pod
from webhook.core.inventory import (
    GroupKey, InventoryState, NamespaceInfo, NodeInfo, Pool, ProductGroup, Snapshot, group_keys,
    node_info_from_object, summarize_group,
)

CATALOG = make_catalog()
H100, A100, T4 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB", "Tesla-T4"
GPU = "nvidia.com/gpu"


def info(obj: dict[str, Any]) -> NodeInfo:
    found = node_info_from_object(obj, CATALOG, keep_all=True)
    assert found is not None
    return found


def from_scratch(state: InventoryState) -> dict[GroupKey, ProductGroup]:
    """Every group summarised anew from the state's nodes: what the kept summaries must equal."""
    members: dict[GroupKey, list[NodeInfo]] = {}
    for node in state.nodes.values():
        for key in group_keys(node):
            members.setdefault(key, []).append(node)
    return {k: summarize_group(k, v, state.requested) for k, v in members.items()}


def published_groups(snapshot: Snapshot) -> dict[GroupKey, ProductGroup]:
    groups = [g for gs in snapshot.groups_by_type.values() for g in gs] + list(snapshot.unknown_groups)
    return {(g.type_name, g.label_key, g.product, g.reserved): g for g in groups}


@dataclass(frozen=True)
class Step:
    kind: str  # "node", "remove", "pod"
    node: int
    product: int = 0
    gpus: int = 8
    ready: bool = True
    cordoned: bool = False
    tainted: bool = False
    pod_gpus: int = 0
    reserved: bool = False  # a team's taint beside the GPU's: the node's groups are its own


PRODUCTS = (H100, A100, T4, "Unknown-GPU", None)  # None: a CPU-only node


def apply(state: InventoryState, step: Step) -> None:
    name = f"n{step.node}"
    if step.kind == "remove":
        state.remove_node(name)
    elif step.kind == "pod":
        state.set_pod(f"ml/p{step.node}", name, {GPU: step.pod_gpus})
    else:
        product = PRODUCTS[step.product]
        state.upsert_node(info(make_node(name, product, gpus=step.gpus if product else 0, ready=step.ready,
                                         unschedulable=step.cordoned,
                                         taints=([{"key": GPU, "value": "present", "effect": "NoSchedule"}]
                                                 if step.tainted else [])
                                         + ([{"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}]
                                            if step.reserved else []))))


steps = st.builds(Step, kind=st.sampled_from(("node", "node", "remove", "pod")), node=st.integers(0, 7),
                  product=st.integers(0, len(PRODUCTS) - 1), gpus=st.sampled_from((0, 1, 4, 8)),
                  ready=st.booleans(), cordoned=st.booleans(), tainted=st.booleans(), pod_gpus=st.integers(0, 9),
                  reserved=st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(steps, max_size=40), st.integers(1, 5))
def test_kept_summaries_equal_summaries_from_scratch(events: list[Step], batch: int) -> None:
    """Whatever the events and however many go between publishes."""
    state = InventoryState(catalog=CATALOG, synced=True)
    for i, step in enumerate(events):
        apply(state, step)
        if (i + 1) % batch == 0:
            assert published_groups(state.publish()) == from_scratch(state)
    assert published_groups(state.publish()) == from_scratch(state)


@pytest.mark.parametrize("later", [
    pytest.param(Step("node", 1, product=1, gpus=4), id="a-node-changes"),
    pytest.param(Step("node", 9, product=0), id="a-node-joins"),
    pytest.param(Step("remove", 0), id="a-node-leaves"),
    pytest.param(Step("pod", 1, pod_gpus=3), id="a-pod-binds"),
])
def test_a_published_snapshot_is_not_changed_by_later_events(later: Step) -> None:
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    for step in (Step("node", 0, product=0), Step("node", 1, product=1), Step("pod", 0, pod_gpus=2)):
        apply(state, step)
    before = state.publish()
    nodes, requested = dict(before.nodes), dict(before.requested)
    groups = published_groups(before)
    apply(state, later)
    after = state.publish()
    assert (dict(before.nodes), dict(before.requested), published_groups(before)) == (nodes, requested, groups)
    assert after is not before and published_groups(after) == from_scratch(state)


def test_a_publish_shares_the_maps_that_did_not_change() -> None:
    """What lets a burst of binds publish without copying the node map each time."""
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    apply(state, Step("node", 0, product=0))
    before = state.publish()
    apply(state, Step("pod", 0, pod_gpus=2))
    after = state.publish()
    assert after.nodes is before.nodes and after.requested is not before.requested


H100_POOL = Pool("h100", "H100", "nvidia.com/gpu.product", (H100,), (), GPU, None)


@pytest.mark.parametrize("change, kept", [
    pytest.param(lambda s: None, True, id="nothing"),
    pytest.param(lambda s: s.set_unbound_pod("new", make_unbound_pod("new")), True, id="a-pod-is-created-and-waits"),
    pytest.param(lambda s: s.set_unbound_pod("old", None), True, id="a-waiting-pod-is-deleted"),
    pytest.param(lambda s: s.set_unbound_pod("old", make_unbound_pod("old", gated=True)), True, id="a-waiting-pod-is-gated"),
    pytest.param(lambda s: s.set_pod("ml/p1", "n0", {GPU: 1}), False, id="a-pod-binds"),
    pytest.param(lambda s: s.set_pod("ml/p0", None, {}), False, id="a-bound-pod-finishes"),
    pytest.param(lambda s: apply(s, Step("node", 0, product=0, gpus=4)), False, id="a-node-changes"),
    pytest.param(lambda s: apply(s, Step("node", 5, product=2)), False, id="a-node-joins"),
    pytest.param(lambda s: s.upsert_namespace(NamespaceInfo("team", True, "high", None)), False, id="a-namespace-opts-in"),
    pytest.param(lambda s: s.set_pools("h100", (H100_POOL,)), False, id="a-node-pool-appears"),
    pytest.param(lambda s: setattr(s, "pools_off", "no RBAC"), False, id="node-pools-go-unread"),
    pytest.param(lambda s: setattr(s, "dra_off", "not served"), False, id="dra-goes-unread"),
    pytest.param(lambda s: setattr(s, "synced", False), False, id="no-longer-synced"),
])
def test_answers_from_a_snapshot_carry_over_only_when_pods_waiting_alone_change(
        change: Callable[[InventoryState], None], kept: bool) -> None:
    """Each Pod of a Job, created one after the other, sends the watch an event that publishes a
    snapshot: the planner's answers for the class (the memo) hold for it, as for nothing else."""
    state = InventoryState(catalog=CATALOG, synced=True, watch_namespaces=True, watch_pods=True)
    state.node_pools = {}
    apply(state, Step("node", 0, product=0))
    apply(state, Step("pod", 0, pod_gpus=2))
    state.set_unbound_pod("old", make_unbound_pod("old"))
    before = state.publish()
    before.memo["answer"] = "worked out"
    change(state)
    after = state.publish()
    assert (after.memo is before.memo) is kept
    assert after.memo == ({"answer": "worked out"} if kept else {})
