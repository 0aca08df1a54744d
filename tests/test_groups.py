"""Groups (gpu-class.io/group, gpu-class.io/group-size): what a Pod asks, where its group runs, the room a
type has for the whole group, the decision and the patch that keeps the group on one product."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest

from builders import assert_valid_pod, make_catalog, make_node, make_pod
from test_planner import check_patch
from webhook.core.catalog.model import Catalog
from webhook.core.reports.explain import explain_json, explain_text
from webhook.core.admission.annotations import GroupAsk, read_group
from webhook.core.admission.groups import room, runs_on
from webhook.core.view.inventory import InventoryState
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.patch import build_patch
from webhook.core.admission.planner import Decision, plan
from webhook.core.reports.pod_report import build_pod_report, can_run_now, render_pod_text
from webhook.core.admission.review import Request, review_pod

CATALOG = make_catalog()
C, G, SIZE, COUNT = "gpu-class.io/class", "gpu-class.io/group", "gpu-class.io/group-size", "gpu-class.io/count"
LWS = "leaderworkerset.sigs.k8s.io/size"
GFD, HAND = "nvidia.com/gpu.product", "gpu-type"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"

# class high is H100, A100, H200 (no H200 here): two H100 and two A100 nodes of 8 GPUs
NODES = [
    make_node("h100-1", H100, gpus=8), make_node("h100-2", H100, gpus=8),
    make_node("a100-1", A100, gpus=8), make_node("a100-2", A100, gpus=8),
]


def snapshot_with(nodes: list[dict[str, Any]], used: dict[str, int] | None = None,
                  members: dict[str, tuple[str, int, tuple[str, str]]] | None = None,
                  catalog: Catalog = CATALOG) -> Snapshot:
    """Nodes, GPUs held on them by Pods of no group (`used`), and Pods of groups: key -> (node, GPUs, group)."""
    state = InventoryState(catalog=catalog, synced=True)
    state.replace_nodes(n for n in (node_info_from_object(o, catalog) for o in nodes) if n is not None)
    pods = [(f"other/fill-{node}", node, {"nvidia.com/gpu": n}) for node, n in (used or {}).items()]
    pods += [(key, node, {"nvidia.com/gpu": n}) for key, (node, n, _) in (members or {}).items()]
    state.replace_pods(pods, {key: group for key, (_, _, group) in (members or {}).items()})
    return state.publish()


def group_pod(group: str | None = "train", size: str | None = None, count: int = 2, gpu_class: str = "high",
              **extra: str) -> dict[str, Any]:
    annotations = {C: gpu_class, COUNT: str(count), **({G: group} if group is not None else {}),
                   **({SIZE: size} if size is not None else {}), **extra}
    return make_pod(annotations)


# --- what a Pod asks --------------------------------------------------------------------------

@pytest.mark.parametrize("annotations, expected", [
    pytest.param({}, None, id="no-group"),
    pytest.param({G: "train"}, GroupAsk("train"), id="name-only"),
    pytest.param({G: "bert.v2_run-7"}, GroupAsk("bert.v2_run-7"), id="label-value-characters"),
    pytest.param({G: "g" * 63}, GroupAsk("g" * 63), id="63-characters"),
    pytest.param({G: "train", SIZE: "8"}, GroupAsk("train", 8, SIZE), id="with-size"),
    pytest.param({G: "train", SIZE: " 8 "}, GroupAsk("train", 8, SIZE), id="size-with-spaces"),
    pytest.param({G: "llm", LWS: "4"}, GroupAsk("llm", 4, LWS), id="leaderworkerset-size"),
    pytest.param({G: "llm", LWS: "4", SIZE: "12"}, GroupAsk("llm", 12, SIZE), id="annotation-wins-over-lws"),
    pytest.param({G: "llm", LWS: "four"}, GroupAsk("llm"), id="unreadable-lws-size-is-no-size"),
    pytest.param({LWS: "4"}, None, id="lws-pod-without-a-group"),
])
def test_read_group(annotations: dict[str, str], expected: GroupAsk | None) -> None:
    assert read_group(annotations) == expected


@pytest.mark.parametrize("annotations, says", [
    pytest.param({G: ""}, "not ''", id="empty-name"),
    pytest.param({G: "-train"}, "beginning and ending with a letter or digit", id="leading-dash"),
    pytest.param({G: "train."}, "not 'train.'", id="trailing-dot"),
    pytest.param({G: "my job"}, "not 'my job'", id="space"),
    pytest.param({G: "team/job"}, "not 'team/job'", id="slash"),
    pytest.param({G: "g" * 64}, "1 to 63 letters", id="64-characters"),
    pytest.param({G: "x" * 5000}, "...", id="huge-name-shortened"),
    pytest.param({G: "train", SIZE: "0"}, "positive whole number of Pods", id="size-zero"),
    pytest.param({G: "train", SIZE: "-2"}, "not '-2'", id="size-negative"),
    pytest.param({G: "train", SIZE: "1.5"}, "not '1.5'", id="size-fraction"),
    pytest.param({G: "train", SIZE: "eight"}, "not 'eight'", id="size-word"),
    pytest.param({G: "train", SIZE: ""}, "positive whole number", id="size-empty"),
    pytest.param({G: "train", SIZE: "9" * 7}, "positive whole number", id="size-huge"),
    pytest.param({SIZE: "4"}, "needs gpu-class.io/group", id="size-without-group"),
])
def test_bad_group_annotations_are_refused_with_what_to_write(annotations: dict[str, str], says: str) -> None:
    message = read_group(annotations)
    assert isinstance(message, str) and message.startswith("gpu-class: ") and says in message
    assert len(message) < 300
    decision = plan(make_pod({C: "high", **annotations}), snapshot_with(NODES), CATALOG, namespace="ml")
    assert (decision.outcome, decision.message) == ("refused", message)
    assert decision.group is not None and decision.group.outcome == "refused"


# --- the decision ---------------------------------------------------------------------------------

@dataclass
class Case:
    id: str
    pod: dict[str, Any]
    outcome: str
    types: tuple[str, ...] = ()
    group_outcome: str = ""
    required: dict[str, list[str]] | None = None
    used: dict[str, int] = field(default_factory=dict)
    members: dict[str, tuple[str, int, tuple[str, str]]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=lambda: NODES)
    catalog: Catalog = CATALOG
    says: tuple[str, ...] = ()  # substrings of the message, or of a type's reason
    warning: str | None = None


H100_PARTLY_FULL = {"h100-1": 6, "h100-2": 6}  # room for two Pods of 2 GPUs
HAND_A100 = [make_node("h100-1", H100, gpus=8), make_node("a100-h", A100, gpus=8, label_key=HAND)]
ON_A100 = {"ml/train-0": ("a100-1", 2, ("ml", "train"))}
CASES = [
    Case("no-size-every-type-best-first", group_pod(), "patched", ("H100", "A100"), "started",
         required={GFD: [A100, H100]}, used=H100_PARTLY_FULL),
    Case("size-that-fits-the-best-type", group_pod(size="2"), "patched", ("H100", "A100"), "started",
         used=H100_PARTLY_FULL),
    Case("size-too-big-for-the-best-type-spills-whole", group_pod(size="3"), "patched", ("A100",), "started",
         required={GFD: [A100]}, used=H100_PARTLY_FULL, says=("room for 2 of the group's 3 Pods now",)),
    Case("nodes-hold-whole-pods-only", group_pod(size="3", count=4), "patched", ("A100",), "started",
         used={"h100-1": 2, "h100-2": 5}, says=("room for 1 of the group's 3 Pods now",)),
    Case("lws-size-counts", group_pod(**{LWS: "3"}), "patched", ("A100",), "started", used=H100_PARTLY_FULL),
    Case("no-type-has-room-now", group_pod(size="8"), "patched", ("H100", "A100"), "no-room",
         used={**H100_PARTLY_FULL, "a100-1": 8}, warning="no type has room for its 8 Pods now"),
    Case("no-room-and-a-type-too-small-ever", group_pod(size="6"), "patched", ("H100",), "no-room",
         used={"h100-1": 8, "a100-1": 8}, nodes=NODES[:3], says=("holds at most 4 of the group's 6 Pods",)),
    Case("size-that-never-fits-is-refused", group_pod(size="9"), "refused", group_outcome="refused",
         says=("group train of 9 Pods x 2 GPU(s) can never run on one type of class high",
               "the most one type holds is 8 such Pods", "gpu-class.io/group-size")),
    Case("running-group-keeps-its-type", group_pod(size="3"), "patched", ("A100",), "followed",
         required={GFD: [A100]}, members=ON_A100),
    Case("running-group-keeps-its-type-when-full", group_pod(), "patched", ("A100",), "followed",
         members=ON_A100, used={"a100-1": 6, "a100-2": 8}),
    Case("running-group-of-another-class-type", group_pod(gpu_class="economy"), "refused", group_outcome="refused",
         members=ON_A100, says=("group train runs on A100", "cannot use", "not in class economy")),
    Case("running-group-on-nodes-too-small", group_pod(count=16), "refused", group_outcome="refused",
         members=ON_A100, says=("A100: too few GPUs",)),
    Case("a-group-of-another-namespace-is-another-group", group_pod(), "patched", ("H100", "A100"), "started",
         members={"team-b/train-0": ("a100-1", 2, ("team-b", "train"))}),
    Case("another-group-name-is-another-group", group_pod(), "patched", ("H100", "A100"), "started",
         members={"ml/eval-0": ("a100-1", 2, ("ml", "eval"))}),
    Case("two-label-keys-meet-on-the-best-types-key", group_pod(), "patched", ("H100",), "started",
         nodes=HAND_A100, required={GFD: [H100]}, says=("its nodes are labelled gpu-type",)),
    Case("two-label-keys-spill-to-the-other-key", group_pod(size="4"), "patched", ("A100",), "started",
         nodes=HAND_A100, used={"h100-1": 4}, required={HAND: [A100]}),
    Case("running-on-a-hand-labelled-node", group_pod(), "patched", ("A100",), "followed", nodes=HAND_A100,
         members={"ml/train-0": ("a100-h", 2, ("ml", "train"))}, required={HAND: [A100]}),
    Case("scalable-pool-at-zero-can-hold-any-size", group_pod(size="40", gpu_class="scalable", count=1), "patched",
         ("V100",), "no-room", nodes=[make_node("t4", "Tesla-T4", gpus=4)],
         says=("holds at most 4 of the group's 40 Pods",)),
    Case("no-node-for-one-pod-is-the-usual-refusal", group_pod(count=16), "refused", group_outcome="refused",
         says=("no ready, schedulable node offers 16 GPU(s)",)),
    Case("never-fits-is-refused-even-where-unsatisfiable-pods-are-admitted", group_pod(size="9"), "refused",
         group_outcome="refused", catalog=dataclasses.replace(CATALOG, on_unsatisfiable="admit")),
    Case("admitted-unplaced-where-no-node-takes-one-pod", group_pod(count=16), "admitted-unsatisfiable",
         group_outcome="unplaced", catalog=dataclasses.replace(CATALOG, on_unsatisfiable="admit")),
]


def decide(case: Case) -> tuple[Decision, Snapshot]:
    snapshot = snapshot_with(case.nodes, case.used, case.members, case.catalog)
    return plan(case.pod, snapshot, case.catalog, namespace="ml"), snapshot


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_group_decision(case: Case) -> None:
    decision, snapshot = decide(case)
    assert decision.outcome == case.outcome, decision.message
    assert decision.group is not None and decision.group.outcome == (case.group_outcome or decision.group.outcome)
    said = [decision.message, *(v.reason for v in decision.verdicts)]
    for part in case.says:
        assert any(part in s for s in said), said
    if case.warning is not None:
        assert any(case.warning in w for w in decision.warnings) and all(len(w) <= 120 for w in decision.warnings)
    if decision.placement is None:
        return
    assert decision.placement.types == case.types
    if case.required is not None:
        assert {k: list(v) for k, v in decision.placement.required} == case.required
    key = decision.placement.required[0][0]
    assert decision.group.topology_key == key and len(decision.placement.required) == 1
    patched = check_patch(case.pod, decision, snapshot, case.catalog)
    assert patched["metadata"]["labels"] == {"gpu-class.io/group": "train"}
    assert patched["spec"]["affinity"]["podAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"gpu-class.io/group": "train"}}, "topologyKey": key}]}


def test_pods_without_a_group_get_no_label_and_no_pod_affinity() -> None:
    decision, snapshot = decide(Case("", make_pod({C: "high"}), "patched"))
    assert decision.group is None
    patched = check_patch(make_pod({C: "high"}), decision, snapshot, CATALOG)
    assert "labels" not in patched["metadata"] and "podAffinity" not in patched["spec"]["affinity"]


def test_the_pods_own_labels_and_pod_affinity_are_kept() -> None:
    own_term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}
    pod = group_pod()
    pod["metadata"]["labels"] = {"app": "trainer", "gpu-class.io/group": "stale"}
    pod["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [own_term],
                                               "preferredDuringSchedulingIgnoredDuringExecution": [
                                                   {"weight": 3, "podAffinityTerm": own_term}]}}
    decision, snapshot = decide(Case("", pod, "patched"))
    patched = check_patch(pod, decision, snapshot, CATALOG)
    assert patched["metadata"]["labels"] == {"app": "trainer", "gpu-class.io/group": "train"}
    pod_affinity = patched["spec"]["affinity"]["podAffinity"]
    assert pod_affinity["requiredDuringSchedulingIgnoredDuringExecution"] == [own_term, {
        "labelSelector": {"matchLabels": {"gpu-class.io/group": "train"}}, "topologyKey": GFD}]
    assert pod_affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 3


@pytest.mark.parametrize("spec_affinity", [
    pytest.param({"podAffinity": "x"}, id="pod-affinity-not-an-object"),
    pytest.param({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}, id="terms-not-a-list"),
    pytest.param({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["x"]}}, id="term-not-an-object"),
])
def test_a_malformed_pod_affinity_is_refused(spec_affinity: dict[str, Any]) -> None:
    pod = group_pod()
    pod["spec"]["affinity"] = spec_affinity
    decision, _ = decide(Case("", pod, "refused"))
    assert decision.outcome == "refused" and "malformed Pod" in decision.message


def test_malformed_labels_are_refused() -> None:
    pod = group_pod()
    pod["metadata"]["labels"] = {"app": 3}
    decision, _ = decide(Case("", pod, "refused"))
    assert decision.outcome == "refused" and "metadata.labels['app'] must be a string" in decision.message


def test_a_burst_admitted_before_any_pod_is_bound_gets_one_answer() -> None:
    """The Job controller creates the Pods of a group together: each is admitted on the same inventory."""
    snapshot = snapshot_with(NODES, H100_PARTLY_FULL)
    patches = [build_patch(p, plan(p, snapshot, CATALOG, namespace="ml").placement)  # type: ignore[arg-type]
               for p in (group_pod(size="3") for _ in range(6))]
    assert all(p == patches[0] for p in patches)


def test_once_a_pod_is_bound_the_next_ones_follow_whatever_the_room_says_now() -> None:
    """Group train started on A100 (H100 was full); H100 has room now: its next Pod still goes to A100."""
    snapshot = snapshot_with(NODES, members=ON_A100)
    placement = plan(group_pod(size="3"), snapshot, CATALOG, namespace="ml").placement
    assert placement is not None and placement.types == ("A100",)
    assert dict(placement.required) == {GFD: (A100,)}


# --- where a group runs, and the room a type has -----------------------------------------------

def test_runs_on_reads_the_groups_bound_pods() -> None:
    snapshot = snapshot_with(NODES, members={
        "ml/t-0": ("a100-1", 2, ("ml", "train")), "ml/t-1": ("a100-2", 2, ("ml", "train")),
        "ml/e-0": ("h100-1", 2, ("ml", "eval"))})
    running = runs_on(snapshot, ("ml", "train"))
    assert running is not None
    assert (running.types, running.label_key, running.products, running.pods) == (("A100",), GFD, (A100,), 2)
    assert runs_on(snapshot, ("ml", "other")) is None
    assert runs_on(snapshot, ("ml", "train"), "amd.com/gpu") is None


def test_a_group_placed_on_two_keys_counts_where_most_of_it_runs() -> None:
    nodes = [*HAND_A100, make_node("a100-g", A100, gpus=8)]
    snapshot = snapshot_with(nodes, members={
        "ml/t-0": ("a100-h", 2, ("ml", "t")), "ml/t-1": ("a100-g", 2, ("ml", "t")),
        "ml/t-2": ("a100-g", 2, ("ml", "t"))})
    running = runs_on(snapshot, ("ml", "t"))
    assert running is not None and (running.label_key, running.pods) == (GFD, 2)


@pytest.mark.parametrize("gpus, min_memory_mib, now, most", [
    pytest.param(2, None, 1 + 3, 4 + 4 + 4, id="free-over-pod-size-per-node"),
    pytest.param(3, None, 0 + 2, 2 + 2 + 2, id="leftovers-do-not-add-up"),
    pytest.param(1, 50_000.0, 7, 8 + 8, id="memory-too-small-on-one-node"),
])
def test_room_counts_whole_pods_per_node(gpus: int, min_memory_mib: float | None, now: int, most: int) -> None:
    # a: 2 GPUs free and 40 GiB each; b: 7 free; c: not ready (no room now, part of what the type can ever hold)
    nodes = [make_node("a", H100, gpus=8), make_node("b", H100, gpus=8), make_node("c", H100, gpus=8, ready=False),
             make_node("d", A100, gpus=8)]
    nodes[0]["metadata"]["labels"]["nvidia.com/gpu.memory"] = "40960"
    r = room(snapshot_with(nodes, {"a": 6, "b": 1}), CATALOG, "H100", GFD, gpus, min_memory_mib)
    assert (r.now, r.most) == (now, most)


def test_room_under_another_key_is_none() -> None:
    snapshot = snapshot_with(HAND_A100)
    assert room(snapshot, CATALOG, "A100", GFD, 1, None).most == 0
    assert room(snapshot, CATALOG, "A100", HAND, 1, None).most == 8


# --- the inventory keeps each group's bound Pods ---------------------------------------------

def test_the_inventory_follows_each_groups_pods() -> None:
    state = InventoryState(catalog=CATALOG, synced=True)
    state.replace_nodes(n for n in (node_info_from_object(o, CATALOG) for o in NODES) if n is not None)
    gpu = {"nvidia.com/gpu": 2}
    state.replace_pods([("ml/a", "a100-1", gpu), ("ml/b", "a100-2", gpu), ("ml/x", "h100-1", gpu)],
                       {"ml/a": ("ml", "t"), "ml/b": ("ml", "t"), "ml/gone": ("ml", "t")})
    before = state.publish()
    assert {g: sorted(m) for g, m in before.pod_groups.items()} == {("ml", "t"): ["ml/a", "ml/b"]}
    assert state.set_pod("ml/a", None, {}, ("ml", "t"))  # finished: it leaves the group
    assert state.set_pod("ml/c", "h100-2", gpu, ("ml", "u"))
    assert state.set_pod("ml/x", "h100-1", gpu, ("ml", "u"))  # the same holding, now with a group label
    assert not state.set_pod("ml/x", "h100-1", gpu, ("ml", "u"))
    after = state.publish()
    assert {g: sorted(m) for g, m in after.pod_groups.items()} == {("ml", "t"): ["ml/b"], ("ml", "u"): ["ml/c", "ml/x"]}
    assert state.set_pod("ml/b", "a100-2", gpu)  # its label removed
    assert ("ml", "t") not in state.publish().pod_groups
    # a snapshot already handed out does not change
    assert {g: sorted(m) for g, m in before.pod_groups.items()} == {("ml", "t"): ["ml/a", "ml/b"]}


# --- explain, the Pod report ----------------------------------------------------------------

def review(pod: dict[str, Any], snapshot: Snapshot) -> Any:
    request = Request(api_version="admission.k8s.io/v1", uid="u", operation="CREATE", kind="Pod", group="",
                      sub_resource="", namespace="ml", object=pod, name="train")
    return review_pod(request, snapshot, CATALOG)


def test_explain_shows_the_group_its_size_and_the_room_of_each_type() -> None:
    pod = group_pod(size="3")
    result = review(pod, snapshot_with(NODES, H100_PARTLY_FULL))
    text = explain_text(result, "ml", pod, CATALOG)
    assert "group train: 3 Pods (gpu-class.io/group-size)" in text
    assert "  H100: room for 2 of its Pods now, 8 with its nodes empty" in text
    assert "room for 2 of the group's 3 Pods now" in text
    group = explain_json(result, "ml", pod, CATALOG)["group"]
    assert (group["outcome"], group["topologyKey"], group["runsOn"]) == ("started", GFD, None)
    assert group["rooms"][0] == {"type": "H100", "labelKey": GFD, "podsNow": 2, "podsAtMost": 8}


def test_explain_shows_where_a_running_group_runs() -> None:
    pod = group_pod()
    result = review(pod, snapshot_with(NODES, members=ON_A100))
    text = explain_text(result, "ml", pod, CATALOG)
    assert f"group train runs on A100 ({GFD}={A100}), 1 Pod(s) bound: this Pod is kept to it" in text
    assert "size not given" in text
    assert explain_json(result, "ml", pod, CATALOG)["group"]["runsOn"] == {
        "types": ["A100"], "labelKey": GFD, "products": [A100], "pods": 1}


def pending_group_pod(snapshot: Snapshot) -> dict[str, Any]:
    """A Pod of group train as the API server holds it after admission: placed, not bound."""
    pod = group_pod()
    decision = plan(pod, snapshot, CATALOG, namespace="ml")
    assert decision.placement is not None
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), build_patch(pod, decision.placement))
    assert_valid_pod(patched)
    patched["status"] = {"phase": "Pending"}
    return patched


def test_a_pending_pod_of_a_full_group_type_says_why_it_waits() -> None:
    # admitted in the same burst as train-0, before it was bound: it allowed H100 and A100
    pod = pending_group_pod(snapshot_with(NODES))
    snapshot = snapshot_with(NODES, {"a100-1": 6, "a100-2": 7}, members=ON_A100)
    report = build_pod_report(pod, snapshot, CATALOG)
    assert report["group"] == {"name": "train", "runsOn": {"types": ["A100"], "labelKey": GFD,
                                                           "products": [A100], "pods": 1}, "domains": None}
    # H100 has room, but the scheduler will not put a Pod of this group there
    assert [r["type"] for r in report["room"] or []] == ["A100"] and not can_run_now(report)
    text = render_pod_text(report)
    assert "group train runs on A100; no A100 node has 2 free GPUs: the Pod waits for room there" in text


def test_a_pending_pod_of_a_group_not_started_is_judged_on_its_types() -> None:
    snapshot = snapshot_with(NODES)
    report = build_pod_report(pending_group_pod(snapshot), snapshot, CATALOG)
    assert report["group"] == {"name": "train", "runsOn": None, "domains": None} and can_run_now(report)
    assert "group train: none of its Pods is bound yet" in render_pod_text(report)


def test_the_watch_reads_the_group_label_of_bound_pods() -> None:
    from fakeapi import FakeApiServer
    from test_watch import eventually, gpu_pod, start_inventory

    with FakeApiServer(bookmark_interval_seconds=0.2) as api:
        api.create(make_node("a100-1", A100, gpus=8))
        labelled = gpu_pod("t-0", "a100-1", 2)
        labelled["metadata"]["labels"] = {"gpu-class.io/group": "train"}
        api.create(labelled)
        api.create(gpu_pod("other", "a100-1", 2))
        inv = start_inventory(api)
        try:
            eventually(lambda: inv.readiness()[0], what="sync")
            running = runs_on(inv.snapshot(), ("ml", "train"))
            assert running is not None and (running.types, running.pods) == (("A100",), 1)
            second = gpu_pod("t-1", None, 2, phase="Pending")
            second["metadata"]["labels"] = {"gpu-class.io/group": "train"}
            api.create(second)
            second["spec"]["nodeName"] = "a100-1"
            api.update(second)  # bound
            eventually(lambda: len(inv.snapshot().pod_groups.get(("ml", "train"), {})) == 2, what="the binding")
            api.delete("Pod", "t-0", "ml")
            api.delete("Pod", "t-1", "ml")
            eventually(lambda: ("ml", "train") not in inv.snapshot().pod_groups, what="the group gone")
        finally:
            inv.stop()
