"""The upgrader's I/O (webhook/cluster/upgrader.py). Its owner reads: each controller read once and kept for
OWNER_REFRESH_SECONDS, read afresh when asked (before an eviction), and forgotten once no Pod names it. Its
evictions, against a fake API server that keeps PodDisruptionBudgets: a move a budget refuses leaves its Pods
where they are, to be tried again at a later pass, and a group is evicted only when every budget allows all of it."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import kubernetes
import pytest
from prometheus_client import REGISTRY

from builders import make_node
from fakeapi import FakeApiServer
from test_inventory_report import A100, H100, snapshot_of
from test_inventory_report import CATALOG as TEST_CATALOG
from test_upgrade import OPT_IN, api_pod
from webhook.cluster.upgrader import OWNER_REFRESH_SECONDS, NoUpgradeObserver, Upgrader, UpgradeObserver, may_move
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.view.snapshot import EMPTY_SNAPSHOT
from webhook.core.after_bind.upgrade import History, Owner, UpgradeDecision
from webhook.serving.metrics import UpgradeMetrics

CATALOG = load_default_catalog()
OWNERS = {uid: Owner("apps", "ReplicaSet", "ml", name, uid, f"Deployment/ml/{name}")
          for uid, name in (("uid-a", "a-1"), ("uid-b", "b-1"), ("uid-c", "c-1"))}


def pod(name: str, owner_uid: str, *, opted_in: bool = True, group: str | None = None) -> dict[str, Any]:
    annotations = {"gpu-class.io/class": "high", "gpu-class.io/types": "H100,A100-80GB",
                   **({"gpu-class.io/upgrade": "true"} if opted_in else {})}
    labels = {"gpu-class.io/group": group} if group else {}
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"pod-{name}", "annotations": annotations,
                         "labels": labels,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True,
                                              "name": OWNERS[owner_uid].name if owner_uid in OWNERS else "ghost",
                                              "uid": owner_uid}]}}


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingUpgrader(Upgrader):
    """Reads owners from a table, and records each read, instead of asking the API."""

    def __init__(self, clock: Clock, known: Mapping[str, Owner]) -> None:
        super().__init__(kubernetes.client.ApiClient(), CATALOG, lambda: EMPTY_SNAPSHOT, clock=clock)
        self.known = dict(known)
        self.reads: list[str] = []

    def _read_owner(self, ref: Mapping[str, Any], namespace: str, uid: str) -> Owner | None:
        self.reads.append(uid)
        return self.known.get(uid)


A1, A2, B1 = pod("a1", "uid-a"), pod("a2", "uid-a"), pod("b1", "uid-b")
PLAIN = pod("c1", "uid-c", opted_in=False)
FORGED = pod("f1", "uid-made-up")

# each case: passes of (seconds after the first, Pods, afresh), then per pass the UIDs read and the owners found
CASES = [
    pytest.param([(0, [A1, A2, B1, PLAIN], False)], [["uid-a", "uid-b"]], [{"uid-a", "uid-b"}],
                 id="one-read-per-controller-of-opted-in-pods"),
    pytest.param([(0, [A1, B1], False), (OWNER_REFRESH_SECONDS - 1, [A1, B1], False)], [["uid-a", "uid-b"], []],
                 [{"uid-a", "uid-b"}, {"uid-a", "uid-b"}], id="kept-within-the-refresh-time"),
    pytest.param([(0, [A1, B1], False), (OWNER_REFRESH_SECONDS, [A1, B1], False)],
                 [["uid-a", "uid-b"], ["uid-a", "uid-b"]], [{"uid-a", "uid-b"}, {"uid-a", "uid-b"}],
                 id="read-again-once-the-refresh-time-is-up"),
    pytest.param([(0, [A1, B1], False), (1, [A2], True), (2, [A1, B1], False)], [["uid-a", "uid-b"], ["uid-a"], []],
                 [{"uid-a", "uid-b"}, {"uid-a"}, {"uid-a", "uid-b"}],
                 id="afresh-reads-the-named-and-keeps-the-others"),
    pytest.param([(0, [A1, B1], False), (1, [B1], False), (2, [A1, B1], False)], [["uid-a", "uid-b"], [], ["uid-a"]],
                 [{"uid-a", "uid-b"}, {"uid-b"}, {"uid-a", "uid-b"}], id="forgotten-once-no-pod-names-it"),
    pytest.param([(0, [FORGED, A1], False), (1, [FORGED, A1], False)], [["uid-made-up", "uid-a"], []],
                 [{"uid-a"}, {"uid-a"}], id="a-reference-to-nothing-is-read-once-per-refresh-and-never-an-owner"),
]


@pytest.mark.parametrize("passes, reads, found", CASES)
def test_owner_reads(passes: list[tuple[float, list[dict[str, Any]], bool]], reads: list[list[str]],
                     found: list[set[str]]) -> None:
    clock = Clock()
    upgrader = CountingUpgrader(clock, OWNERS)
    start = clock.now
    for (after, pods, afresh), want_reads, want_found in zip(passes, reads, found, strict=True):
        clock.now = start + after
        upgrader.reads.clear()
        owners = upgrader.read_owners(pods, afresh=afresh)
        assert upgrader.reads == want_reads
        assert set(owners) == want_found


def test_an_owner_changed_since_it_was_read_is_seen_afresh() -> None:
    clock = Clock()
    upgrader = CountingUpgrader(clock, OWNERS)
    assert upgrader.read_owners([A1])["uid-a"].recreates
    upgrader.known["uid-a"] = Owner("apps", "ReplicaSet", "ml", "a-1", "uid-a", "Deployment/ml/a", recreates=False)
    assert upgrader.read_owners([A1])["uid-a"].recreates, "kept within the refresh time"
    assert not upgrader.read_owners([A1], afresh=True)["uid-a"].recreates
    del upgrader.known["uid-a"]
    assert upgrader.read_owners([A1], afresh=True) == {}


@pytest.mark.parametrize("manifest, wanted", [
    pytest.param(A1, True, id="opted-in"),
    pytest.param(PLAIN, False, id="not-opted-in"),
    pytest.param(pod("g1", "uid-c", opted_in=False, group="train"), True, id="in-a-group"),
])
def test_may_move(manifest: dict[str, Any], wanted: bool) -> None:
    assert may_move(manifest, CATALOG) is wanted


# --- evictions, and the PodDisruptionBudgets that hold them back ------------------------------------------------

NODES = [make_node("h100-a", H100, gpus=4), make_node("a100-a", A100, gpus=4)]


class Told(NoUpgradeObserver):
    """What the upgrader told of each Eviction it asked for: evicted, pdb (429), gone (404) or error."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def evicted(self, outcome: str) -> None:
        self.outcomes.append(outcome)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def placed_on_a100(api: FakeApiServer, names: list[str], *, group: str | None = None) -> None:
    """Opted-in Pods of one Deployment's ReplicaSet (which the API holds, so the owner is found by UID), one GPU
    each, bound to a100-a an hour ago, as the webhook placed them (types H100,A100)."""
    replica_set = api.create({"kind": "ReplicaSet", "metadata": {"name": "infer-7d9", "namespace": "ml",
                              "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer",
                                                   "uid": "deploy-uid", "controller": True}]}})
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer-7d9",
           "uid": replica_set["metadata"]["uid"], "controller": True}
    started = datetime.datetime.fromtimestamp(time.time() - 3600, datetime.timezone.utc)
    for name in names:
        pod = api_pod(OPT_IN, [ref])
        pod["metadata"].update(name=name, labels={"app": "infer", **({"gpu-class.io/group": group} if group else {})})
        pod["status"].update(phase="Running", startTime=started.strftime("%Y-%m-%dT%H:%M:%SZ"))
        api.create(pod)


def upgrader_of(api: FakeApiServer, pods: int, told: UpgradeObserver) -> Upgrader:
    for node in NODES:
        api.create(node)
    snapshot = snapshot_of(NODES, {"a100-a": pods})
    clock = Clock(time.time())
    upgrader = Upgrader(api.api_client(), TEST_CATALOG, lambda: snapshot, observer=told, clock=clock)
    # H100 has had room for them for two minutes: past the settle time, so only the API can hold them back
    upgrader.history = History(room_since={("H100", "nvidia.com/gpu", 1, pods): clock.now - 120})
    return upgrader


def budget(allowed: int) -> dict[str, Any]:
    """The Deployment's PodDisruptionBudget, with the disruptionsAllowed its controller would have written."""
    return {"kind": "PodDisruptionBudget", "metadata": {"name": "infer", "namespace": "ml"},
            "spec": {"selector": {"matchLabels": {"app": "infer"}}, "minAvailable": 1},
            "status": {"disruptionsAllowed": allowed}}


def requests(api: FakeApiServer, method: str, suffix: str) -> list[str]:
    return [r.path for r in api.request_log if r.method == method and r.path.endswith(suffix)]


def outcome(decision: UpgradeDecision) -> tuple[list[list[str]], list[tuple[list[str], str]]]:
    return ([[p.name for p in m.pods] for m in decision.moves],
            [([p.name for p in h.pods], h.reason) for h in decision.held])


@dataclass(frozen=True)
class EvictionCase:
    id: str
    pods: tuple[str, ...]
    budget: int | None  # the PodDisruptionBudget's disruptionsAllowed; None: no budget selects them
    moves: list[list[str]]
    held: list[tuple[list[str], str]]
    evictions_asked: int
    told: tuple[str, ...]
    group: str | None = None
    budgets_unreadable: bool = False  # listing the namespace's PodDisruptionBudgets fails


EVICTION_CASES = [
    EvictionCase("no-budget-evicted", ("a",), None, [["a"]], [], 1, ("evicted",)),
    EvictionCase("budget-allows-one-evicted", ("a",), 1, [["a"]], [], 1, ("evicted",)),
    EvictionCase("budget-allows-none-429-pod-kept", ("a",), 0, [], [(["a"], "pdb")], 1, ("pdb",)),
    EvictionCase("group-no-budget-evicted-whole", ("g0", "g1", "g2"), None, [["g0", "g1", "g2"]], [], 3,
                 ("evicted",) * 3, group="train"),
    EvictionCase("group-budget-allows-all-three", ("g0", "g1", "g2"), 3, [["g0", "g1", "g2"]], [], 3,
                 ("evicted",) * 3, group="train"),
    EvictionCase("group-budget-allows-none-none-asked", ("g0", "g1", "g2"), 0, [], [(["g0", "g1", "g2"], "pdb")], 0,
                 ("pdb",), group="train"),
    # evicting one by one would take two and leave the third refused: a group split over two types
    EvictionCase("group-budget-allows-two-of-three-none-asked", ("g0", "g1", "g2"), 2, [],
                 [(["g0", "g1", "g2"], "pdb")], 0, ("pdb",), group="train"),
    EvictionCase("group-budgets-unreadable-none-asked", ("g0", "g1", "g2"), 3, [], [(["g0", "g1", "g2"], "pdb")], 0,
                 ("pdb",), group="train", budgets_unreadable=True),
]


@pytest.mark.parametrize("case", EVICTION_CASES, ids=lambda c: c.id)
def test_evictions_and_the_budgets_that_refuse_them(api: FakeApiServer, case: EvictionCase) -> None:
    told = Told()
    upgrader = upgrader_of(api, len(case.pods), told)
    placed_on_a100(api, list(case.pods), group=case.group)
    if case.budget is not None:
        api.create(budget(case.budget))
    if case.budgets_unreadable:
        api.fail_next(1, 500, "/apis/policy/v1/namespaces/ml/poddisruptionbudgets")
    decision = upgrader.run_once()
    assert len(requests(api, "POST", "/eviction")) == case.evictions_asked, requests(api, "POST", "/eviction")
    assert outcome(decision) == (case.moves, case.held)
    assert told.outcomes == list(case.told)
    # the upgrader only asks; a Pod leaves by an eviction the API server allowed, never by a DELETE of its own
    assert requests(api, "DELETE", "") == []
    moved = {name for m in case.moves for name in m}
    assert [n for n in case.pods if api.get("Pod", n, "ml") is None] == sorted(moved)
    assert {e.pod for e in upgrader.history.evictions} == {f"ml/{n}" for n in moved}


def test_a_move_a_budget_refused_is_tried_again_once_the_budget_allows_it(api: FakeApiServer) -> None:
    told = Told()
    upgrader = upgrader_of(api, 1, told)
    placed_on_a100(api, ["a"])
    api.create(budget(0))
    assert outcome(upgrader.run_once()) == ([], [(["a"], "pdb")])
    assert upgrader.history.evictions == (), "a refused move is not counted: it holds no later pass back"
    assert api.get("Pod", "a", "ml") is not None
    allowing = api.get("PodDisruptionBudget", "infer", "ml")
    assert allowing is not None
    allowing["status"]["disruptionsAllowed"] = 1
    api.update(allowing)
    assert outcome(upgrader.run_once()) == ([["a"]], [])
    assert api.get("Pod", "a", "ml") is None and told.outcomes == ["pdb", "evicted"]


def metric(name: str, labels: Mapping[str, str]) -> float:
    return REGISTRY.get_sample_value(name, dict(labels)) or 0.0


@pytest.mark.parametrize("pods, allowed, group, held", [
    pytest.param(("a",), 0, None, 1, id="one-pod-429"),
    pytest.param(("g0", "g1", "g2"), 2, "train", 3, id="a-group-its-budget-refuses-before-any-eviction"),
])
def test_a_budgets_refusal_is_counted_as_pdb_in_the_upgraders_metrics(
        api: FakeApiServer, pods: tuple[str, ...], allowed: int, group: str | None, held: int) -> None:
    """gpu_class_upgrade_evictions_total{outcome="pdb"} and gpu_class_upgrade_held_back{reason="pdb"} are how an
    operator tells a budget holding moves back from an API error: a refusal must be told as the budget's."""
    outcomes = ("evicted", "pdb", "gone", "error")
    before = {o: metric("gpu_class_upgrade_evictions_total", {"outcome": o}) for o in outcomes}
    upgrader = upgrader_of(api, len(pods), UpgradeMetrics(TEST_CATALOG))
    placed_on_a100(api, list(pods), group=group)
    api.create(budget(allowed))
    assert outcome(upgrader.run_once()) == ([], [(list(pods), "pdb")])
    counted = {o: metric("gpu_class_upgrade_evictions_total", {"outcome": o}) - before[o] for o in outcomes}
    assert counted == {"evicted": 0, "pdb": 1, "gone": 0, "error": 0}
    assert metric("gpu_class_upgrade_held_back", {"reason": "pdb"}) == held
    assert all(api.get("Pod", n, "ml") is not None for n in pods)
