"""Which Pods the upgrader moves up to a better type, and which it holds back and why (webhook/core/after_bind/upgrade.py)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import pytest

from builders import TEST_CATALOG_YAML, make_node, make_pod, make_unbound_pod, placed_affinity
from test_inventory_report import A100, CATALOG, H100, snapshot_of
from webhook.core.catalog.loading import load_catalog_text
from webhook.core.catalog.model import CatalogError
from webhook.core.scheduling.extender import PodNeeds
from webhook.core.view.inventory import InventoryState
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.pods import timestamp_seconds, unbound_gpu_pod
from webhook.core.view.snapshot import Snapshot
from webhook.core.after_bind.lease import held_spec, may_hold, micro_time
from webhook.core.after_bind.upgrade import (
    Eviction, History, Owner, PodState, UpgradeSettings, better_types, current_type, decide_moves, disruptions_allowed,
    job_recreates, read_pod_state,
    with_refused,
)

NOW = 10_000.0
SETTINGS = UpgradeSettings(settle_seconds=60, min_on_node_seconds=300, window_seconds=3600, moves_per_minute=6)
RS = Owner("apps", "ReplicaSet", "ml", "infer-7d9", "rs-uid", "Deployment/ml/infer")
OTHER_RS = Owner("apps", "ReplicaSet", "ml", "chat-5c1", "rs2-uid", "Deployment/ml/chat")
NODES = [make_node("h100-a", H100, gpus=2), make_node("a100-a", A100, gpus=4)]


def pod_state(name: str, node: str | None = "a100-a", *, owner: Owner | None = RS, opted_in: bool = True,
              gpus: int = 1, types: tuple[str, ...] = ("H100", "A100"), group: str | None = None,
              on_node_for: float = 3600.0, created_ago: float | None = None, ready: bool = True,
              terminating: bool = False) -> PodState:
    created = NOW - (created_ago if created_ago is not None else on_node_for)
    return PodState(uid=f"uid-{name}", namespace="ml", name=name,
                    needs=PodNeeds(types=types, gpus=gpus, class_name="high"), node=node, opted_in=opted_in,
                    owner=owner, group=None if group is None else ("ml", group), created_seconds=created,
                    on_node_since_seconds=NOW - on_node_for, ready=ready, terminating=terminating)


def settled(*keys: tuple[str, int, int], since: float = NOW - 120) -> History:
    """History in which each (type, GPUs per Pod, Pods) has had room since `since`."""
    return History(room_since={(t, "nvidia.com/gpu", g, n): since for t, g, n in keys})


def moved(decision: Any) -> list[list[str]]:
    return [[p.name for p in m.pods] for m in decision.moves]


def held(decision: Any) -> list[tuple[list[str], str]]:
    return [([p.name for p in h.pods], h.reason) for h in decision.held]


def snap(used: Mapping[str, int] | None = None, nodes: Sequence[dict[str, Any]] = NODES) -> Snapshot:
    return snapshot_of(nodes, dict(used or {}))


@pytest.mark.parametrize("pods, used, history, moves, held_back", [
    pytest.param([pod_state("a")], {"a100-a": 1}, settled(("H100", 1, 1)), [["a"]], [], id="settled-room-moves"),
    pytest.param([pod_state("a")], {"a100-a": 1}, History(), [], [(["a"], "settle")], id="room-just-appeared-settles"),
    pytest.param([pod_state("a")], {"a100-a": 1}, settled(("H100", 1, 1), since=NOW - 59), [],
                 [(["a"], "settle")], id="one-second-short-of-settled"),
    pytest.param([pod_state("a")], {"a100-a": 1, "h100-a": 2}, settled(("H100", 1, 1)), [], [],
                 id="no-room-on-the-better-type"),
    pytest.param([pod_state("a", "h100-a", types=("A100", "H100"))], {"h100-a": 1}, settled(("A100", 1, 1)),
                 [], [], id="never-downward-on-its-best-type"),
    pytest.param([pod_state("a", "h100-a")], {"h100-a": 1}, settled(("A100", 1, 1)), [], [],
                 id="never-downward-to-a-worse-type-with-room"),
    pytest.param([pod_state("a", owner=None)], {"a100-a": 1}, settled(("H100", 1, 1)), [], [],
                 id="bare-pod-never"),
    pytest.param([pod_state("a", opted_in=False)], {"a100-a": 1}, settled(("H100", 1, 1)), [], [],
                 id="not-opted-in-never"),
    pytest.param([pod_state("a", on_node_for=299)], {"a100-a": 1}, settled(("H100", 1, 1)), [],
                 [(["a"], "min_time")], id="too-short-on-its-node"),
    pytest.param([pod_state("a", gpus=4)], {"a100-a": 4}, settled(("H100", 4, 1)), [], [],
                 id="better-type-too-small-for-it"),
    pytest.param([pod_state("a"), pod_state("b", on_node_for=4000)], {"a100-a": 2},
                 settled(("H100", 1, 1)), [["b"]], [(["a"], "rate")], id="one-move-in-flight-per-workload"),
    pytest.param([pod_state("a"), pod_state("b", owner=OTHER_RS, on_node_for=4000)], {"a100-a": 2},
                 settled(("H100", 1, 1)), [["b"], ["a"]], [], id="two-workloads-move-together"),
    pytest.param([pod_state("a"), pod_state("b", owner=OTHER_RS, on_node_for=4000)], {"a100-a": 2, "h100-a": 1},
                 settled(("H100", 1, 1)), [["b"]], [], id="one-slot-taken-by-one-pod-only"),
    pytest.param([pod_state("a"), pod_state("new", "h100-a", ready=False)], {"a100-a": 1, "h100-a": 1},
                 settled(("H100", 1, 1)), [], [(["a"], "rate")], id="replacement-not-ready-is-in-flight"),
    pytest.param([pod_state("a"), pod_state("old", terminating=True)], {"a100-a": 2},
                 settled(("H100", 1, 1)), [], [(["a"], "rate")], id="terminating-pod-is-in-flight"),
])
def test_who_moves(pods: list[PodState], used: dict[str, int], history: History, moves: list[list[str]],
                   held_back: list[tuple[list[str], str]]) -> None:
    decision = decide_moves(NOW, snap(used), CATALOG, pods, history, SETTINGS)
    assert moved(decision) == moves
    assert held(decision) == held_back
    for move in decision.moves:
        assert (move.from_type, move.to_type) == ("A100", "H100")


def test_a_move_says_where_from_where_to_and_how_long_the_room_was_there() -> None:
    decision = decide_moves(NOW, snap({"a100-a": 1}), CATALOG, [pod_state("a")], settled(("H100", 1, 1), since=NOW - 75),
                            SETTINGS)
    assert decision.moves[0].message() == "moved from A100 to H100: H100 had room for 75 s"
    assert decision.history.evictions == (Eviction(NOW, "uid-a", "ml/a", RS.workload),)


def test_waiting_pods_take_the_room_first() -> None:
    """A Pod waiting for H100 would take the slot a moved Pod's replacement needs: nothing moves."""
    snapshot = dataclasses.replace(snap({"a100-a": 1, "h100-a": 1}), unbound_pods={"w": make_unbound_pod("w")})
    decision = decide_moves(NOW, snapshot, CATALOG, [pod_state("a")], settled(("H100", 1, 1)), SETTINGS)
    assert moved(decision) == [] and held(decision) == []
    assert decision.history.room_since == {}, "room that is taken breaks the settle time"


def test_gated_pods_do_not_take_room() -> None:
    snapshot = dataclasses.replace(snap({"a100-a": 1, "h100-a": 1}), unbound_pods={"w": make_unbound_pod("w", gated=True)})
    assert moved(decide_moves(NOW, snapshot, CATALOG, [pod_state("a")], settled(("H100", 1, 1)), SETTINGS)) == [["a"]]


def test_settle_time_starts_when_room_appears_and_restarts_when_it_breaks() -> None:
    pods = [pod_state("a")]
    first = decide_moves(NOW, snap({"a100-a": 1}), CATALOG, pods, History(), SETTINGS)
    assert first.history.room_since == {("H100", "nvidia.com/gpu", 1, 1): NOW}
    later = decide_moves(NOW + 59, snap({"a100-a": 1}), CATALOG, pods, first.history, SETTINGS)
    assert held(later) == [(["a"], "settle")]
    full = decide_moves(NOW + 30, snap({"a100-a": 1, "h100-a": 2}), CATALOG, pods, first.history, SETTINGS)
    assert full.history.room_since == {}
    again = decide_moves(NOW + 60, snap({"a100-a": 1}), CATALOG, pods, full.history, SETTINGS)
    assert held(again) == [(["a"], "settle")], "a burst of room does not add up with the next one"
    done = decide_moves(NOW + 60, snap({"a100-a": 1}), CATALOG, pods, first.history, SETTINGS)
    assert moved(done) == [["a"]]


@pytest.mark.parametrize("evicted_ago, created_ago, moves, held_back", [
    pytest.param(100, 50, [], [(["a"], "window")], id="replacement-within-window"),
    pytest.param(3700, 50, [["a"]], [], id="window-over"),
    pytest.param(100, 200, [["a"]], [], id="older-than-the-move-not-a-replacement"),
])
def test_never_twice_within_the_window(evicted_ago: float, created_ago: float, moves: list[list[str]],
                                       held_back: list[tuple[list[str], str]]) -> None:
    history = History(room_since=settled(("H100", 1, 1)).room_since,
                      evictions=(Eviction(NOW - evicted_ago, "uid-gone", "ml/gone", RS.workload),))
    pods = [pod_state("a", on_node_for=min(created_ago, 1000), created_ago=created_ago)]
    settings = dataclasses.replace(SETTINGS, min_on_node_seconds=10)
    decision = decide_moves(NOW, snap({"a100-a": 1}), CATALOG, pods, history, settings)
    assert (moved(decision), held(decision)) == (moves, held_back)


def test_cluster_wide_rate() -> None:
    owners = [dataclasses.replace(RS, uid=f"rs-{i}", workload=f"Deployment/ml/w{i}") for i in range(4)]
    pods = [pod_state(f"p{i}", owner=owners[i], on_node_for=4000 - i) for i in range(4)]
    history = History(room_since=settled(("H100", 1, 1)).room_since,
                      evictions=(Eviction(NOW - 30, "u", "ml/u", "Deployment/ml/x"),))
    nodes = [make_node("h100-a", H100, gpus=8), make_node("a100-a", A100, gpus=4)]
    settings = dataclasses.replace(SETTINGS, moves_per_minute=3)
    decision = decide_moves(NOW, snap({"a100-a": 4}, nodes), CATALOG, pods, history, settings)
    assert moved(decision) == [["p0"], ["p1"]]
    assert held(decision) == [(["p2"], "rate"), (["p3"], "rate")]


@pytest.mark.parametrize("h100_used, moves, held_back", [
    pytest.param(1, [["g0", "g1", "g2"]], [], id="room-for-all-three"),
    pytest.param(2, [], [], id="room-for-two-of-three-moves-none"),
])
def test_a_group_moves_whole_or_not_at_all(h100_used: int, moves: list[list[str]],
                                           held_back: list[tuple[list[str], str]]) -> None:
    nodes = [make_node("h100-a", H100, gpus=4), make_node("a100-a", A100, gpus=4)]
    pods = [pod_state(f"g{i}", group="train") for i in range(3)]
    decision = decide_moves(NOW, snap({"a100-a": 3, "h100-a": h100_used}, nodes), CATALOG, pods,
                            settled(("H100", 1, 3)), SETTINGS)
    assert (moved(decision), held(decision)) == (moves, held_back)
    if moves:
        assert decision.moves[0].to_type == "H100" and len(decision.history.evictions) == 3


def test_a_group_with_a_bare_pod_stays_whole() -> None:
    nodes = [make_node("h100-a", H100, gpus=4), make_node("a100-a", A100, gpus=4)]
    pods = [pod_state("g0", group="train"), pod_state("g1", group="train", owner=None)]
    decision = decide_moves(NOW, snap({"a100-a": 2}, nodes), CATALOG, pods, settled(("H100", 1, 2)), SETTINGS)
    assert moved(decision) == [] and held(decision) == [(["g0", "g1"], "group")]


def test_a_group_does_not_split_over_two_h100_products() -> None:
    """A group meets on one product label value: 2 free on each of two H100 products hold no group of 3."""
    nodes = [make_node("h100-a", H100, gpus=2), make_node("h100-p", "NVIDIA-H100-PCIe", gpus=2),
             make_node("a100-a", A100, gpus=4)]
    pods = [pod_state(f"g{i}", group="train") for i in range(3)]
    decision = decide_moves(NOW, snap({"a100-a": 3}, nodes), CATALOG, pods, settled(("H100", 1, 3)), SETTINGS)
    assert moved(decision) == []


def test_a_refused_eviction_is_held_by_the_pdb_and_not_counted() -> None:
    decision = decide_moves(NOW, snap({"a100-a": 1}), CATALOG, [pod_state("a")], settled(("H100", 1, 1)), SETTINGS)
    after = with_refused(decision, decision.moves)
    assert moved(after) == [] and held(after) == [(["a"], "pdb")] and after.history.evictions == ()


# --- reading Pods: who may move ---------------------------------------------------------------------------------

def api_pod(annotations: Mapping[str, str], owner_refs: list[dict[str, Any]] | None = None,
            affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Pod the webhook placed: its types and, unless given, the affinity the webhook writes beside them."""
    written = {"gpu-class.io/class": "high", "gpu-class.io/types": "H100,A100", **annotations}
    placed = placed_affinity(written["gpu-class.io/types"].split(","))
    pod = make_pod(written, gpu_limit="1", affinity=affinity if affinity is not None else placed)
    pod["metadata"]["uid"] = "pod-uid"
    pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if owner_refs is not None:
        pod["metadata"]["ownerReferences"] = owner_refs
    pod["spec"]["nodeName"] = "a100-a"
    pod["status"] = {"startTime": "2026-01-01T00:00:05Z", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


RS_REF = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer-7d9", "uid": "rs-uid", "controller": True}
OPT_IN = {"gpu-class.io/upgrade": "true"}


@pytest.mark.parametrize("annotations, refs, owners, catalog_extra, opted_in, has_owner", [
    pytest.param(OPT_IN, [RS_REF], {"rs-uid": RS}, "", True, True, id="replicaset-found-by-uid"),
    pytest.param({}, [RS_REF], {"rs-uid": RS}, "", False, True, id="off-by-default"),
    pytest.param({}, [RS_REF], {"rs-uid": RS}, "  - {name: high, types: [H100, A100], upgrade: true}\n", True, True,
                 id="class-default-on"),
    pytest.param({"gpu-class.io/upgrade": "false"}, [RS_REF], {"rs-uid": RS},
                 "  - {name: high, types: [H100, A100], upgrade: true}\n", False, True, id="annotation-overrides-class"),
    pytest.param(OPT_IN, None, {"rs-uid": RS}, "", True, False, id="bare-pod"),
    pytest.param(OPT_IN, [RS_REF], {}, "", True, False, id="owner-not-found-by-uid"),
    pytest.param(OPT_IN, [{**RS_REF, "name": "other"}], {"rs-uid": RS}, "", True, False, id="forged-name-for-uid"),
    pytest.param(OPT_IN, [{**RS_REF, "controller": False}], {"rs-uid": RS}, "", True, False, id="not-the-controller"),
    pytest.param(OPT_IN, [{**RS_REF, "kind": "DaemonSet"}], {"rs-uid": dataclasses.replace(RS, kind="DaemonSet")}, "",
                 True, False, id="daemonset-does-not-recreate-elsewhere"),
    pytest.param(OPT_IN, [RS_REF], {"rs-uid": dataclasses.replace(RS, recreates=False)}, "", True, False,
                 id="owner-that-would-not-recreate"),
])
def test_read_pod_state(annotations: dict[str, str], refs: list[dict[str, Any]] | None, owners: dict[str, Owner],
                        catalog_extra: str, opted_in: bool, has_owner: bool) -> None:
    catalog = CATALOG if not catalog_extra else load_catalog_text(
        TEST_CATALOG_YAML.replace("  - {name: high, types: [H100, A100, H200]}\n", catalog_extra))
    state = read_pod_state(api_pod(annotations, refs), catalog, owners)
    assert state is not None
    assert state.opted_in is opted_in
    assert (state.owner is not None) is has_owner
    assert state.ready and state.on_node_since_seconds is not None and state.created_seconds is not None
    assert state.on_node_since_seconds - state.created_seconds == 5


def test_a_pod_gpu_class_did_not_place_is_not_read() -> None:
    pod = api_pod(OPT_IN, [RS_REF])
    del pod["metadata"]["annotations"]["gpu-class.io/types"]
    assert read_pod_state(pod, CATALOG, {"rs-uid": RS}) is None


@pytest.mark.parametrize("spec, recreates", [
    pytest.param({}, True, id="default-backoff-limit"),
    pytest.param({"backoffLimit": 0}, False, id="no-retries"),
    pytest.param({"completionMode": "Indexed", "backoffLimitPerIndex": 2}, True, id="indexed"),
    pytest.param({"podFailurePolicy": {"rules": [{"action": "FailJob",
                                                  "onPodConditions": [{"type": "DisruptionTarget"}]}]}},
                 False, id="fails-on-disruption"),
])
def test_which_jobs_recreate_an_evicted_pod(spec: dict[str, Any], recreates: bool) -> None:
    assert job_recreates({"spec": spec}) is recreates


def test_catalog_upgrade_must_be_a_boolean() -> None:
    with pytest.raises(CatalogError, match="upgrade"):
        load_catalog_text(TEST_CATALOG_YAML.replace("types: [A10]}", "types: [A10], upgrade: yes-please}"))


# --- leader election --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, may", [
    pytest.param({}, True, id="new-lease"),
    pytest.param({"holderIdentity": "me", "renewTime": micro_time(NOW - 1), "leaseDurationSeconds": 15}, True,
                 id="held-by-me"),
    pytest.param({"holderIdentity": "other", "renewTime": micro_time(NOW - 10), "leaseDurationSeconds": 15}, False,
                 id="held-by-another-renewed"),
    pytest.param({"holderIdentity": "other", "renewTime": micro_time(NOW - 16), "leaseDurationSeconds": 15}, True,
                 id="held-by-another-expired"),
])
def test_who_may_hold_the_lease(spec: dict[str, Any], may: bool) -> None:
    assert may_hold(spec, "me", NOW) is may


def test_taking_a_lease_counts_a_transition_and_renewing_keeps_the_acquire_time() -> None:
    taken = held_spec({"holderIdentity": "other", "leaseTransitions": 2}, "me", NOW, 15)
    assert taken["holderIdentity"] == "me" and taken["leaseTransitions"] == 3
    renewed = held_spec(taken, "me", NOW + 5, 15)
    assert renewed["acquireTime"] == taken["acquireTime"] and renewed["leaseTransitions"] == 3
    assert timestamp_seconds(renewed["renewTime"]) == NOW + 5


# --- a group's PodDisruptionBudgets -----------------------------------------------------------------------------

def pdb(selector: dict[str, Any] | None, allowed: int) -> dict[str, Any]:
    return {"spec": {} if selector is None else {"selector": selector}, "status": {"disruptionsAllowed": allowed}}


GROUP_LABELS = [{"app": "train", "gpu-class.io/group": "g"}] * 3


@pytest.mark.parametrize("pdbs, allowed", [
    pytest.param([], True, id="no-pdb"),
    pytest.param([pdb({"matchLabels": {"app": "train"}}, 3)], True, id="allows-all-three"),
    pytest.param([pdb({"matchLabels": {"app": "train"}}, 2)], False, id="allows-two-of-three"),
    pytest.param([pdb({"matchLabels": {"app": "other"}}, 0)], True, id="selects-none-of-them"),
    pytest.param([pdb({"matchExpressions": [{"key": "app", "operator": "In", "values": ["train"]}]}, 1)], False,
                 id="match-expressions"),
    pytest.param([pdb({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, 0)], True,
                 id="does-not-exist"),
    pytest.param([pdb(None, 0)], True, id="no-selector-selects-nothing"),
    pytest.param([pdb({}, 0)], False, id="empty-selector-selects-all"),
])
def test_a_group_is_evicted_only_when_every_pdb_allows_all_of_it(pdbs: list[dict[str, Any]], allowed: bool) -> None:
    assert disruptions_allowed(pdbs, GROUP_LABELS) is allowed


@pytest.mark.parametrize("selector, tolerations, taints, moves", [
    pytest.param({}, (), (), [["a"]], id="no-selector"),
    pytest.param({"pool": "serve"}, (), (), [["a"]], id="selector-the-h100-node-matches"),
    pytest.param({"pool": "train"}, (), (), [], id="selector-the-h100-node-does-not-match"),
    pytest.param({}, (), ({"key": "team", "value": "x", "effect": "NoSchedule"},), [], id="untolerated-taint"),
    pytest.param({}, ({"key": "team", "operator": "Exists"},), ({"key": "team", "value": "x", "effect": "NoSchedule"},),
                 [["a"]], id="tolerated-taint"),
])
def test_room_only_on_nodes_the_pod_may_use(selector: dict[str, str], tolerations: tuple[dict[str, str], ...],
                                            taints: tuple[dict[str, str], ...], moves: list[list[str]]) -> None:
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = [make_node("h100-a", H100, gpus=2, labels={"pool": "serve"}, taints=(gpu_taint, *taints)),
             make_node("a100-a", A100, gpus=4)]
    pod = dataclasses.replace(pod_state("a"), node_selector=selector, tolerations=tolerations)
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    decision = decide_moves(NOW, snap({"a100-a": 1}, nodes), CATALOG, [pod], settled(("H100", 1, 1)), SETTINGS, labels)
    assert moved(decision) == moves


@pytest.mark.parametrize("annotations, types", [
    pytest.param({}, ("A100",), id="not-in-a-group-the-webhooks-types"),
    pytest.param({"group": "train"}, ("A100", "H200", "H100"), id="group-gets-its-class-types"),
    pytest.param({"group": "train", "gpu-class.io/exclude-types": "H200"}, ("A100", "H100"),
                 id="group-keeps-its-exclusions"),
])
def test_a_group_pod_is_judged_on_its_class_types(annotations: dict[str, str], types: tuple[str, ...]) -> None:
    """The webhook writes a group's Pods only the types with room for the whole group when they were admitted."""
    pod = api_pod({"gpu-class.io/types": "A100", **{k: v for k, v in annotations.items() if k != "group"}}, [RS_REF])
    if "group" in annotations:
        pod["metadata"]["labels"] = {"gpu-class.io/group": annotations["group"]}
    state = read_pod_state(pod, CATALOG, {"rs-uid": RS})
    assert state is not None and set(state.needs.types) == set(types) and state.needs.types[0] == "A100"
    on = current_type(state, snap({}))
    assert on == "A100" and set(better_types(state, on, CATALOG)) == set(types) - {"A100"}


# --- the owner as the cluster layer reads it ----------------------------------------------------------------------

@pytest.mark.parametrize("obj, group, kind, workload, recreates", [
    pytest.param({"metadata": {"name": "infer-7d9", "namespace": "ml", "uid": "u", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer", "uid": "d", "controller": True}]}},
        "apps", "ReplicaSet", "Deployment/ml/infer", True, id="replicaset-of-a-deployment"),
    pytest.param({"metadata": {"name": "db", "namespace": "ml", "uid": "u"}}, "apps", "StatefulSet",
                 "StatefulSet/ml/db", True, id="statefulset-alone"),
    pytest.param({"metadata": {"name": "t", "namespace": "ml", "uid": "u"}, "spec": {"backoffLimit": 0}}, "batch", "Job",
                 "Job/ml/t", False, id="job-without-retries"),
])
def test_the_workload_of_an_owner(obj: dict[str, Any], group: str, kind: str, workload: str, recreates: bool) -> None:
    from webhook.cluster.upgrader import owner_from_object
    owner = owner_from_object(obj, group, kind)
    assert (owner.workload, owner.recreates, owner.uid) == (workload, recreates, "u")


@pytest.mark.parametrize("evicted_ago, listed, replacement_created_ago, moves", [
    pytest.param(5, "gone", None, [], id="evicted-pod-gone-no-replacement-yet"),
    pytest.param(5, "running", None, [], id="evicted-pod-still-listed-running"),
    pytest.param(5, "gone", 4, [["a"]], id="replacement-ready"),
    pytest.param(61, "gone", None, [["a"]], id="no-replacement-after-a-minute"),
])
def test_an_eviction_is_in_flight_until_its_replacement_is_seen(evicted_ago: float, listed: str,
                                                                 replacement_created_ago: float | None,
                                                                 moves: list[list[str]]) -> None:
    history = History(room_since=settled(("H100", 1, 1)).room_since,
                      evictions=(Eviction(NOW - evicted_ago, "uid-old", "ml/old", RS.workload),))
    pods = [pod_state("a")]
    if listed == "running":
        pods.append(pod_state("old", "h100-a"))
    if replacement_created_ago is not None:
        pods.append(pod_state("new", "h100-a", on_node_for=replacement_created_ago))
    decision = decide_moves(NOW, snap({"a100-a": 1}), CATALOG, pods, history, SETTINGS)
    assert moved(decision) == moves


# --- gpu-class.io/types believed only as far as the Pod's own affinity enforces it ------------------------------


@pytest.mark.parametrize("affinity, read", [
    pytest.param({}, False, id="types-without-an-affinity"),
    pytest.param(placed_affinity(["T4"]), False, id="an-affinity-elsewhere"),
    pytest.param(placed_affinity(["H100", "A100", "T4"]), False, id="an-affinity-beyond-its-types"),
    pytest.param(placed_affinity(["H100", "A100"]), True, id="the-affinity-the-webhook-writes"),
])
def test_the_upgrader_reads_only_the_pods_whose_affinity_enforces_their_types(affinity: dict[str, Any],
                                                                              read: bool) -> None:
    state = read_pod_state(api_pod(OPT_IN, [RS_REF], affinity=affinity), CATALOG, {"rs-uid": RS})
    assert (state is not None) is read


def waiting_in(namespace: str, affinity: dict[str, Any] | None) -> dict[str, Any]:
    """A Pod of another namespace waiting for a node, listing H100 in gpu-class.io/types."""
    pod = make_pod({"gpu-class.io/class": "high", "gpu-class.io/types": "H100"}, gpu_limit="1", affinity=affinity)
    pod["metadata"].update(namespace=namespace, uid=f"uid-{namespace}")
    return pod


@pytest.mark.parametrize("affinity, moves", [
    # a string alone: before, it took H100's one free slot and held the Pod of ml on A100
    pytest.param(None, [["a"]], id="a-forged-list-takes-no-room"),
    pytest.param(placed_affinity(["H100"]), [], id="a-placed-pod-takes-its-room-first"),
])
def test_a_pod_of_another_namespace_moves_no_one_by_a_list_it_wrote(affinity: dict[str, Any] | None,
                                                                    moves: list[list[str]]) -> None:
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    state.replace_nodes(i for i in (node_info_from_object(n, CATALOG) for n in NODES) if i is not None)
    state.replace_pods([("ns/p-a100", "a100-a", {"nvidia.com/gpu": 1}), ("ns/p-h100", "h100-a", {"nvidia.com/gpu": 1})])
    waiting = unbound_gpu_pod(waiting_in("other", affinity), CATALOG.resources)
    assert waiting is not None
    state.set_unbound_pod(waiting.uid, waiting)
    snapshot = state.publish()
    assert moved(decide_moves(NOW, snapshot, CATALOG, [pod_state("a")], settled(("H100", 1, 1)), SETTINGS)) == moves
