"""Placement fidelity: each bind judged against the inventory just before it; Pods still Pending by class."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest

from builders import GPU_TAINT, make_catalog, make_node, make_pod, placed_terms
from webhook.core.admission.review import Request, review_pod
from webhook.core.reports.fidelity import BindVerdict, judge_bind, pending_by_class
from webhook.core.view.inventory import InventoryState, build_snapshot
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.own_constraints import Requirement, own_constraints
from webhook.core.view.pods import GroupName, UnboundGpuPod, unbound_gpu_pod
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


# --- the nodes a Pod's own constraints let it use ---------------------------------------------------------

TEAM = {"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}
TOLERATES_TEAM = {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoSchedule"}


def team_node(name: str, product: str, team: str = "team-a", effect: str = "NoSchedule", **kw: Any) -> dict[str, Any]:
    """A node a platform team reserved: its label, and its taint besides the GPU's."""
    return make_node(name, product, labels={"team": team}, taints=(GPU_TAINT, {**TEAM, "value": team, "effect": effect}),
                     **kw)


def own_affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": list(expressions)}]}}}


def as_placed(class_name: str, nodes: list[dict[str, Any]], *, gpus: str = "1", **spec: Any) -> UnboundGpuPod:
    """The Pod the webhook places (its real patch applied: the restriction it appends to each term, its
    tolerations, its types), as the watch reads it once it binds."""
    obj = make_pod({"gpu-class.io/class": class_name}, gpu_limit=gpus, extra_spec=spec)
    request = Request(api_version="admission.k8s.io/v1", uid="u", operation="CREATE", kind="Pod", group="",
                      sub_resource="", namespace="ml", object=obj, name="p")
    review = review_pod(request, build_snapshot(CATALOG, nodes), CATALOG)
    assert review.decision.placement is not None, review.decision.message
    placed = jsonpatch.apply_patch(obj, review.patch)
    placed["metadata"]["uid"] = "uid-p"
    found = unbound_gpu_pod(placed, (GPU,))
    assert found is not None and found.placed
    return found


@dataclass
class OwnCase:
    id: str
    class_name: str
    spec: dict[str, Any]  # the Pod's own nodeSelector, affinity, tolerations
    node: str
    nodes: list[dict[str, Any]]
    used: dict[str, int]
    expected: str  # outcome
    better: str = ""
    # the nodes when the webhook decided, where they differ: it leaves out a type whose nodes a Pod's
    # tolerations do not open, so for the judge to see such a node it was reserved after the admission
    admitted: list[dict[str, Any]] | None = None


UNRESERVED = [make_node("h100", H100), make_node("a100", A100)]

OWN = [
    # the team's A100 nodes, reserved by label and taint; H100 had room elsewhere, where the Pod could never go
    OwnCase("pinned-by-node-selector-to-its-teams-nodes-kept", "high",
            {"nodeSelector": {"team": "team-a"}, "tolerations": [TOLERATES_TEAM]}, "a100-team",
            [make_node("h100", H100), team_node("a100-team", A100)], {}, "fallback"),
    OwnCase("pinned-by-its-own-required-affinity-kept", "high",
            {"affinity": own_affinity({"key": "team", "operator": "In", "values": ["team-a"]}),
             "tolerations": [TOLERATES_TEAM]}, "a100-team",
            [make_node("h100", H100), team_node("a100-team", A100)], {}, "fallback"),
    OwnCase("not-in-and-exists-are-read", "high",
            {"affinity": own_affinity({"key": "team", "operator": "Exists"},
                                      {"key": "team", "operator": "NotIn", "values": ["team-b"]})},
            "a100", [team_node("h100", H100, "team-b", "PreferNoSchedule"),
                     make_node("a100", A100, labels={"team": "team-c"})], {}, "fallback"),
    OwnCase("pinned-by-node-name-kept", "high",
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a100"]}]}]}}}},
            "a100", [make_node("h100", H100), make_node("a100", A100)], {}, "fallback"),
    # the same bind, the Pod without constraints of its own: H100 had room for it
    OwnCase("without-constraints-broken", "high", {}, "a100",
            [make_node("h100", H100), make_node("a100", A100)], {}, "broken", "H100 had room"),
    OwnCase("its-teams-better-type-had-room-broken", "high",
            {"nodeSelector": {"team": "team-a"}, "tolerations": [TOLERATES_TEAM]}, "a100-team",
            [make_node("h100", H100), team_node("h100-team", H100), team_node("a100-team", A100)], {},
            "broken", "H100 had room"),
    OwnCase("its-teams-better-type-full-kept", "high",
            {"nodeSelector": {"team": "team-a"}, "tolerations": [TOLERATES_TEAM]}, "a100-team",
            [make_node("h100", H100), team_node("h100-team", H100), team_node("a100-team", A100)],
            {"h100-team": 8}, "fallback"),
    # taints: a node another team reserved is no room for a Pod that does not tolerate its taint
    OwnCase("not-tolerating-the-taint-kept", "high", {}, "a100",
            [team_node("h100", H100, "team-b"), make_node("a100", A100)], {}, "fallback", admitted=UNRESERVED),
    OwnCase("not-tolerating-a-no-execute-taint-kept", "high", {}, "a100",
            [team_node("h100", H100, "team-b", "NoExecute"), make_node("a100", A100)], {}, "fallback", admitted=UNRESERVED),
    OwnCase("tolerating-the-taint-broken", "high", {"tolerations": [{**TOLERATES_TEAM, "value": "team-b"}]}, "a100",
            [team_node("h100", H100, "team-b"), make_node("a100", A100)], {}, "broken", "H100 had room",
            admitted=UNRESERVED),
    OwnCase("tolerating-everything-broken", "high", {"tolerations": [{"operator": "Exists"}]}, "a100",
            [team_node("h100", H100, "team-b"), make_node("a100", A100)], {}, "broken", "H100 had room",
            admitted=UNRESERVED),
    OwnCase("a-prefer-no-schedule-taint-reserves-nothing", "high", {}, "a100",
            [team_node("h100", H100, "team-b", "PreferNoSchedule"), make_node("a100", A100)], {},
            "broken", "H100 had room"),
    # what the scheduler does not enforce excuses nothing
    OwnCase("a-preferred-affinity-is-no-constraint", "high",
            {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [
                    {"key": "team", "operator": "In", "values": ["team-a"]}]}}]}}}, "a100-team",
            [make_node("h100", H100), make_node("a100-team", A100, labels={"team": "team-a"})], {},
            "broken", "H100 had room"),
    OwnCase("a-label-the-view-does-not-keep-is-taken-to-hold", "high",
            {"nodeSelector": {"nvidia.com/gpu.present": "true"}}, "a100",
            [make_node("h100", H100), make_node("a100", A100, labels={"nvidia.com/gpu.present": "true"})], {},
            "broken", "H100 had room"),
    # binpack: the fuller L4 node is another team's; among the Pod's own nodes, its node was the fullest
    OwnCase("binpack-judged-among-its-own-nodes", "packed", {"nodeSelector": {"team": "team-a"}}, "l4-a",
            [make_node("l4-a", L4, gpus=4, labels={"team": "team-a"}),
             make_node("l4-b", L4, gpus=4, labels={"team": "team-b"})], {"l4-b": 3}, "best"),
    OwnCase("binpack-its-own-fuller-node-broken", "packed", {"nodeSelector": {"team": "team-a"}}, "l4-a",
            [make_node("l4-a", L4, gpus=4, labels={"team": "team-a"}),
             make_node("l4-b", L4, gpus=4, labels={"team": "team-a"})], {"l4-b": 2},
            "broken", "a node of L4 would have had 75% of its GPUs in use, this one 25%"),
]


@pytest.mark.parametrize("case", OWN, ids=[c.id for c in OWN])
def test_judged_against_the_nodes_its_own_constraints_allow(case: OwnCase) -> None:
    pod = as_placed(case.class_name, case.admitted or case.nodes, **case.spec)
    verdict = judge_bind(pod, case.node, snapshot_of(case.nodes, case.used), CATALOG)
    assert verdict is not None and (verdict.outcome, verdict.better) == (case.expected, case.better)


def test_an_affinity_in_gpu_class_shape_excuses_nothing() -> None:
    """A Pod's author writes what the webhook appends (an `In` over the types, last in its term) with types of
    its own: set aside as gpu-class's, it cannot narrow where the Pod is judged, though it pins the Pod to A100."""
    nodes = [make_node("h100", H100), make_node("a100", A100)]
    obj = make_pod({"gpu-class.io/class": "high", "gpu-class.io/types": "H100,A100"}, gpu_limit="1",
                   affinity=own_affinity({"key": "team", "operator": "DoesNotExist"},
                                         {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]}))
    obj["metadata"]["uid"] = "uid-p"
    pod = unbound_gpu_pod(obj, (GPU,))
    assert pod is not None and pod.own.terms == ((Requirement("team", "DoesNotExist"),),)
    verdict = judge_bind(pod, "a100", snapshot_of(nodes), CATALOG)
    assert verdict is not None and (verdict.outcome, verdict.better) == ("broken", "H100 had room")


def test_the_restriction_gpu_class_appends_is_not_the_pods_own() -> None:
    """A Pod placed without constraints of its own: what the webhook wrote leaves it none."""
    pod = as_placed("high", [make_node("h100", H100), make_node("a100", A100)])
    assert pod.node_terms and pod.own.terms == () and not pod.own.selects


def test_the_nodes_a_pod_may_use_follow_the_nodes_and_the_devices_in_use() -> None:
    """The nodes a kind of Pod may use are read once per node map (a bind changes only the devices in use); a
    bind that fills the team's H100 node and a node that joins the team are both seen."""
    nodes = [team_node("h100-team", H100), team_node("a100-team", A100)]
    pod = as_placed("high", nodes, nodeSelector={"team": "team-a"}, tolerations=[TOLERATES_TEAM])
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    state.replace_nodes(i for i in (node_info_from_object(n, CATALOG) for n in nodes) if i is not None)
    free = state.publish()
    assert judge_bind(pod, "a100-team", free, CATALOG) == BindVerdict("high", "broken", "A100", "H100 had room")
    state.replace_pods([("ml/other", "h100-team", {GPU: 8})], {})
    full = state.publish()
    assert full.nodes is free.nodes  # the same node map: what the Pod may use is not read again
    assert judge_bind(pod, "a100-team", full, CATALOG) == BindVerdict("high", "fallback", "A100")
    # a free H100 node joins the team: a new node map, read again
    joined = [*nodes, make_node("h100-b", H100, labels={"team": "team-a"})]
    state.replace_nodes(i for i in (node_info_from_object(n, CATALOG) for n in joined) if i is not None)
    grown = state.publish()
    assert grown.nodes is not free.nodes
    assert judge_bind(pod, "a100-team", grown, CATALOG) == BindVerdict("high", "broken", "A100", "H100 had room")


def affinity_terms(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": t} for t in terms]}}}


def with_restriction(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with the `In` gpu-class appends to each term of a required affinity: set aside, it changes nothing."""
    required = (spec.get("affinity") or {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return spec
    restriction = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]}
    terms = [{**t, "matchExpressions": [*t.get("matchExpressions", []), restriction]} for t in required["nodeSelectorTerms"]]
    return {**spec, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}}


NODE_LABELS = {"team": "team-a", "gpu-count": "8", "nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("spec, admitted", [
    pytest.param({}, True, id="no-constraints"),
    pytest.param({"nodeSelector": {"team": "team-a"}}, True, id="selector-holds"),
    pytest.param({"nodeSelector": {"team": "team-b"}}, False, id="selector-fails"),
    pytest.param({"nodeSelector": {"zone": "z1"}}, False, id="selector-on-a-label-the-node-lacks"),
    pytest.param({"nodeSelector": {"nvidia.com/gpu.present": "false"}}, True, id="a-label-not-kept-holds"),
    pytest.param({"affinity": affinity_terms([{"key": "gpu-count", "operator": "Gt", "values": ["4"]}])}, True,
                 id="gt"),
    pytest.param({"affinity": affinity_terms([{"key": "gpu-count", "operator": "Lt", "values": ["4"]}])}, False,
                 id="lt"),
    pytest.param({"affinity": affinity_terms([{"key": "team", "operator": "DoesNotExist"}])}, False,
                 id="does-not-exist"),
    pytest.param({"affinity": affinity_terms([{"key": "team", "operator": "In", "values": ["team-b"]}],
                                             [{"key": "team", "operator": "Exists"}])}, True, id="terms-are-ored"),
    pytest.param({"affinity": affinity_terms([{"key": "team", "operator": "Exists"},
                                              {"key": "team", "operator": "NotIn", "values": ["team-a"]}])}, False,
                 id="expressions-are-anded"),
    pytest.param({"affinity": affinity_terms([{"key": "team", "operator": "Bogus"}])}, True,
                 id="an-operator-not-read-holds"),
    pytest.param({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n"]}]}]}}}},
        False, id="match-fields-name"),
])
def test_own_constraints_follow_kubernetes_rules(spec: dict[str, Any], admitted: bool) -> None:
    node = node_info_from_object(make_node("n", H100, labels=NODE_LABELS), CATALOG)
    assert node is not None
    own = own_constraints({"spec": spec})
    restricted = own_constraints({"spec": with_restriction(spec)})
    assert own.admits(node) is admitted and restricted.admits(node) is admitted
