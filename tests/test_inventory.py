"""InventoryState kept event by event: the per-group summaries it keeps node by node equal a summary
worked out from scratch, and a published Snapshot never changes when later events arrive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import make_catalog, make_node, make_unbound_pod
from webhook.core.catalog.builtin import default_catalog_text
from webhook.core.catalog.loading import load_catalog_text
from webhook.core.view.inventory import InventoryState
from webhook.core.view.namespaces import NamespaceInfo
from webhook.core.view.nodes import NodeInfo, node_info_from_object
from webhook.core.view.pods import unbound_gpu_pod
from webhook.core.view.pools import Pool
from webhook.core.view.product_groups import GroupKey, ProductGroup, group_keys, summarize_group
from webhook.core.view.snapshot import Snapshot

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


# --- gpu-class.io/types believed only as far as the Pod's own affinity enforces it ------------------------------


def in_values(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def waiting_pod(types: str, *terms: list[dict[str, Any]], resource: str = GPU, raw_terms: Any = None) -> dict[str, Any]:
    """An unbound Pod as the watch brings it: a GPU limit, gpu-class.io/types, and the required terms given."""
    node_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": raw_terms if raw_terms is not None else [{"matchExpressions": t} for t in terms]}}
    return {"metadata": {"uid": "u", "name": "p", "namespace": "other", "annotations": {"gpu-class.io/types": types}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}],
                     **({"affinity": {"nodeAffinity": node_affinity}} if terms or raw_terms is not None else {})}}


PRODUCT = "nvidia.com/gpu.product"


@pytest.mark.parametrize("pod, types", [
    pytest.param(waiting_pod("H100"), (), id="no-affinity-a-string-alone"),
    pytest.param(waiting_pod("H100", [in_values(PRODUCT, H100)]), ("H100",), id="its-affinity-enforces-it"),
    pytest.param(waiting_pod("H100,A100", [in_values(PRODUCT, H100, A100)]), ("H100", "A100"), id="every-type"),
    pytest.param(waiting_pod("H100,A100", [in_values("team", "a"), in_values(PRODUCT, H100)]), ("H100", "A100"),
                 id="narrowed-by-the-users-own-term"),
    pytest.param(waiting_pod("H100", [in_values(PRODUCT, T4)]), (), id="its-affinity-keeps-it-elsewhere"),
    pytest.param(waiting_pod("H100", [in_values(PRODUCT, H100, T4)]), (), id="a-value-outside"),
    pytest.param(waiting_pod("H100", [in_values(PRODUCT, H100)], [in_values("zone", "a")]), (),
                 id="a-term-without-a-gpu-value"),
    pytest.param(waiting_pod("H100", [{"key": PRODUCT, "operator": "NotIn", "values": [T4]}]), (), id="notin-only"),
    pytest.param(waiting_pod("H100", raw_terms="all"), (), id="terms-not-a-list"),
    pytest.param(waiting_pod("H100", [in_values("kubernetes.io/hostname", "h100-a")]), ("H100",),
                 id="a-node-of-the-type-by-hostname"),
    pytest.param(waiting_pod("H100", [in_values("kubernetes.io/hostname", "t4-a")]), (), id="another-node-by-hostname"),
    pytest.param(waiting_pod("H100", [in_values(PRODUCT, H100)], resource="amd.com/gpu"), (),
                 id="a-resource-the-type-is-not"),
])
def test_the_inventory_believes_the_types_a_pod_lists_as_far_as_its_affinity_enforces_them(
        pod: dict[str, Any], types: tuple[str, ...]) -> None:
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    state.replace_nodes([info(make_node("h100-a", H100)), info(make_node("t4-a", T4))])
    state.publish()
    found = unbound_gpu_pod(pod, [GPU, "amd.com/gpu"])
    assert found is not None and found.types  # as written
    state.set_unbound_pod("u", found)
    unbound = state.publish().unbound_pods
    assert unbound is not None and unbound["u"].types == types
    assert unbound["u"].placed is bool(types)


@pytest.mark.parametrize("meanwhile, types", [
    pytest.param(None, ("H100",), id="judged-again"),
    pytest.param("", (), id="its-types-removed-meanwhile-stay-removed"),
])
def test_a_pod_listed_before_the_nodes_its_affinity_names_is_judged_again_when_they_come(
        meanwhile: str | None, types: tuple[str, ...]) -> None:
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    found = unbound_gpu_pod(waiting_pod("H100", [in_values("kubernetes.io/hostname", "h100-a")]), [GPU])
    assert found is not None
    state.replace_unbound_pods([found])
    first = state.publish().unbound_pods
    assert first is not None and first["u"].types == ()
    if meanwhile is not None:  # its annotation rewritten by its author while it waits
        changed = unbound_gpu_pod(waiting_pod(meanwhile, [in_values("kubernetes.io/hostname", "h100-a")]), [GPU])
        assert changed is not None
        state.set_unbound_pod("u", changed)
    state.replace_nodes([info(make_node("h100-a", H100))])
    later = state.publish().unbound_pods
    assert later is not None and later["u"].types == types


def test_a_slice_type_is_not_believed_of_a_pod_that_asks_for_whole_gpus() -> None:
    """Under the mixed MIG strategy the H100 product value is also its slices': the resource tells them apart."""
    catalog = load_catalog_text(default_catalog_text(), "catalog")
    state = InventoryState(catalog=catalog, synced=True, watch_pods=True)
    for resource, types in ((GPU, ()), ("nvidia.com/mig-1g.10gb", ("H100-1g.10gb",))):
        found = unbound_gpu_pod(waiting_pod("H100-1g.10gb", [in_values(PRODUCT, H100)], resource=resource), [resource])
        assert found is not None
        state.set_unbound_pod("u", found)
        unbound = state.publish().unbound_pods
        assert unbound is not None and unbound["u"].types == types, resource
