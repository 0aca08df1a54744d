"""The upgrader's owner reads (webhook/cluster/upgrader.py): each controller read once and kept for
OWNER_REFRESH_SECONDS, read afresh when asked (before an eviction), and forgotten once no Pod names it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import kubernetes
import pytest

from webhook.cluster.upgrader import OWNER_REFRESH_SECONDS, Upgrader, may_move
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.view.snapshot import EMPTY_SNAPSHOT
from webhook.core.after_bind.upgrade import Owner

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
