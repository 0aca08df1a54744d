"""The live inventory against a fake API server over HTTP, with the real kubernetes client."""

from __future__ import annotations

import base64
import gc
import json
import re
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator

import kubernetes
import pytest
from kubernetes.watch.watch import iter_resp_lines

from builders import (
    RecordedFlag, make_catalog, make_namespace, make_node, make_pod, make_review, record_decoded_lines,
)
from fakeapi import FakeApiServer
from servers import WATCHED, running_server
from webhook.core.view.namespaces import NamespaceInfo
from webhook.core.view.pods import UnboundGpuPod, pod_gpu_requests, unbound_gpu_pod
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.planner import UnreadNamespace, plan
from webhook.cluster import watch
from webhook.cluster.watch import UNFINISHED_PODS, LiveInventory, NoObserver, check_kube_config
from webhook.serving.server import keep_listed_from_gc

CATALOG = make_catalog()


def eventually(check: Callable[[], Any], timeout_seconds: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval_seconds=0.2) as server:
        yield server


def start_inventory(api: FakeApiServer, **kwargs: Any) -> LiveInventory:
    core = kubernetes.client.CoreV1Api(api.api_client())
    return LiveInventory(CATALOG, core, **kwargs).start()


@pytest.fixture
def inventory(api: FakeApiServer) -> Iterator[LiveInventory]:
    api.create(make_namespace("ml"))
    api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
    inv = start_inventory(api)
    eventually(lambda: inv.readiness()[0], what="first sync")
    yield inv
    inv.stop()


def types_for(inv: LiveInventory, annotations: dict[str, str] | None = None) -> tuple[str, ...]:
    decision = plan(make_pod(annotations or {"gpu-class.io/class": "high"}), inv.snapshot(), CATALOG, namespace="ml")
    return decision.placement.types if decision.placement else ()


def test_nodes_added_modified_deleted_mid_watch_reach_the_next_decision(api: FakeApiServer, inventory: LiveInventory) -> None:
    assert types_for(inventory) == ("H100",)
    api.create(make_node("a100-a", "A100-SXM4-40GB", gpus=4))
    eventually(lambda: types_for(inventory) == ("H100", "A100"), what="added node")
    api.update(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8, unschedulable=True))
    eventually(lambda: types_for(inventory) == ("A100",), what="cordoned node")
    api.delete("Node", "a100-a")
    eventually(lambda: plan(make_pod({"gpu-class.io/class": "high"}), inventory.snapshot(), CATALOG,
                            namespace="ml").outcome == "refused", what="deleted node")


def test_unchanged_fields_publish_no_new_snapshot(api: FakeApiServer, inventory: LiveInventory) -> None:
    before = inventory.snapshot()
    heartbeat = make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8)
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-29T00:00:00Z"
    heartbeat["metadata"]["labels"]["feature.node.kubernetes.io/kernel-version"] = "6.1"
    api.update(heartbeat)
    rv = api.current_resource_version
    eventually(lambda: inventory.reflectors[0].resource_version == rv, what="event seen")
    assert inventory.snapshot() is before


def test_starts_before_the_api_is_reachable(tmp_path: Path) -> None:
    api = FakeApiServer(bookmark_interval_seconds=0.2).start()
    api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3"))
    api.create(make_namespace("ml"))
    api.set_available(False)
    inv = start_inventory(api)
    try:
        time.sleep(1.0)
        ready, detail = inv.readiness()
        assert not ready and detail["watches"]["nodes"]["synced"] is False
        assert inv.reflectors[0].errors >= 1
        api.set_available(True)
        eventually(lambda: inv.readiness()[0], timeout_seconds=40, what="sync after the API came up")
        assert types_for(inv) == ("H100",)
    finally:
        inv.stop()
        api.stop()


def test_ready_only_once_the_snapshot_holds_every_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readiness counts each watch's flag; the snapshot counts what the applier has published. Here the
    API server's answer that it does not serve DRA comes last (its first list fails and is retried
    after the others are in), and a slow applier (a loaded machine) widens the gap: whenever a replica
    says ready, the snapshot must be synced, that answer included."""
    original = LiveInventory._apply_batch

    def slow_apply_batch(self: LiveInventory) -> None:
        time.sleep(0.2)
        original(self)

    monkeypatch.setattr(LiveInventory, "_apply_batch", slow_apply_batch)
    api = FakeApiServer(bookmark_interval_seconds=0.2).start()
    api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3"))
    api.create(make_namespace("ml"))
    api.fail_next(1, 500, path_prefix="/apis/resource.k8s.io/")
    inv = start_inventory(api)
    try:
        deadline = time.monotonic() + 40
        while not inv.readiness()[0]:
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.005)
        assert inv.snapshot().synced, "ready while the published snapshot is not synced"
        assert types_for(inv) == ("H100",)
    finally:
        inv.stop()
        api.stop()


def swap_nodes_unseen(api: FakeApiServer) -> None:
    """Node h100-a replaced by t4-a in changes the watch will not replay: the history is compacted
    and the watch cut, so only a relist (after 410) sees them."""
    assert api.wait_for_watches(2)
    api.set_available(False)
    api.delete("Node", "h100-a")
    api.create(make_node("t4-a", "Tesla-T4", gpus=1))
    api.compact()
    api.set_available(True)


def test_relist_after_410_converges(api: FakeApiServer, inventory: LiveInventory) -> None:
    nodes = inventory.reflectors[0]
    relists = nodes.relists
    swap_nodes_unseen(api)
    eventually(lambda: nodes.relists > relists, timeout_seconds=40, what="relist after 410")
    eventually(lambda: set(inventory.state.nodes) == {"t4-a"}, what="converged inventory")
    assert types_for(inventory, {"gpu-class.io/class": "economy"}) == ("T4", "V100")


def test_after_list_runs_once_each_full_list_is_in_the_state(api: FakeApiServer) -> None:
    api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
    seen: list[frozenset[str]] = []
    inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(api.api_client()),
                        after_list=lambda: seen.append(frozenset(inv.state.nodes)))
    inv.start()
    try:
        eventually(lambda: inv.readiness()[0], what="first sync")
        listed = [r for r in inv.reflectors if r.off is None]
        eventually(lambda: len(seen) == len(listed), what="a call per first list")
        assert frozenset({"h100-a"}) in seen
        swap_nodes_unseen(api)
        # a relist calls it again, with the new list already in the state
        eventually(lambda: frozenset({"t4-a"}) in seen, timeout_seconds=40, what="a call after the relist")
    finally:
        inv.stop()


def test_the_served_inventory_is_kept_from_the_cyclic_gc_and_still_freed(api: FakeApiServer) -> None:
    api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
    inv = start_inventory(api, after_list=keep_listed_from_gc)
    try:
        eventually(lambda: inv.readiness()[0], what="first sync")
        node = weakref.ref(inv.state.nodes["h100-a"])
        # out of every generation the cyclic GC walks
        assert not any(o is node() for o in gc.get_objects())
        api.delete("Node", "h100-a")
        eventually(lambda: "h100-a" not in inv.state.nodes, what="node gone")
        assert node() is None  # reference counting still frees it
    finally:
        inv.stop()
        gc.unfreeze()


def test_dropped_watch_and_500s_are_retried(api: FakeApiServer, inventory: LiveInventory) -> None:
    api.fail_next(3, status=500, path_prefix="/api/v1/nodes")
    api.drop_watches()
    api.create(make_node("a100-a", "A100-SXM4-40GB", gpus=4))
    eventually(lambda: types_for(inventory) == ("H100", "A100"), timeout_seconds=30, what="recovery")
    assert inventory.readiness()[0]


def test_bookmarks_advance_the_resource_version(api: FakeApiServer, inventory: LiveInventory) -> None:
    api.create(make_node("other", None))  # a CPU node: an event, and the resourceVersion moves on
    rv = api.current_resource_version
    eventually(lambda: inventory.reflectors[1].resource_version == rv, what="namespaces watch bookmarked past the node")


def test_namespace_label_change_takes_effect(api: FakeApiServer, inventory: LiveInventory) -> None:
    gpu_pod = make_pod(gpu_limit="1")
    assert plan(gpu_pod, inventory.snapshot(), CATALOG, namespace="ml").outcome == "out-of-scope"
    api.update(make_namespace("ml", default_class="high"))
    eventually(lambda: plan(gpu_pod, inventory.snapshot(), CATALOG, namespace="ml").outcome == "patched",
               what="default class")
    api.update(make_namespace("ml", inject=False))
    eventually(lambda: plan(make_pod({"gpu-class.io/class": "high"}), inventory.snapshot(), CATALOG,
                            namespace="ml").outcome == "out-of-scope", what="opt-out")


def test_a_namespace_the_view_lacks_is_read_from_the_api_and_a_failed_read_is_said(
        api: FakeApiServer, inventory: LiveInventory) -> None:
    before = inventory.snapshot()
    assert inventory.namespace_policy(before, "ml") is None  # the view holds it: the view decides
    api.create(make_namespace("team", default_class="economy", allowed="economy"))
    assert inventory.namespace_policy(before, "team") == NamespaceInfo("team", True, "economy", ("economy",))
    api.fail_next(1, status=500, path_prefix="/api/v1/namespaces/team")
    unread = inventory.namespace_policy(before, "team")
    assert isinstance(unread, UnreadNamespace) and "HTTP 500" in unread.error
    # the planner refuses a class Pod there rather than deciding it without the namespace's classes
    decision = plan(make_pod({"gpu-class.io/class": "high"}), before, CATALOG, namespace="team", policy=unread)
    assert decision.outcome == "refused" and "cannot read the policy of namespace team" in decision.message


class BehindWatch:
    """The live inventory as a worker sees it while the namespace's watch event is still on its way: the
    snapshot of before, everything else the live inventory's own."""

    def __init__(self, live: LiveInventory) -> None:
        self.live, self.before = live, live.snapshot()

    def snapshot(self) -> Snapshot:
        return self.before

    def __getattr__(self, name: str) -> Any:
        return getattr(self.live, name)


def test_a_pod_in_a_namespace_the_watch_has_not_brought_gets_the_namespaces_policy(
        api: FakeApiServer, inventory: LiveInventory) -> None:
    from webhook.serving.app import create_app

    client = create_app(CATALOG, BehindWatch(inventory)).test_client()  # type: ignore[arg-type]
    api.create(make_namespace("team", default_class="economy", allowed="economy"))

    def admit(annotations: dict[str, str] | None) -> dict[str, Any]:
        body = make_review(make_pod(annotations, gpu_limit="1"), namespace="team")
        response: dict[str, Any] = client.post("/mutate", json=body).get_json()["response"]
        return response

    refused = admit({"gpu-class.io/class": "high"})
    assert refused["allowed"] is False and "not allowed in namespace team" in refused["status"]["message"]
    defaulted = admit(None)
    annotations = next(op["value"] for op in json.loads(base64.b64decode(defaulted["patch"]))
                       if op["path"] == "/metadata/annotations")
    assert annotations["gpu-class.io/class"] == "economy"  # the namespace's default, read from the API
    api.fail_next(1, status=503, path_prefix="/api/v1/namespaces/team")
    unread = admit({"gpu-class.io/class": "economy"})
    assert unread["allowed"] is False and "cannot read the policy of namespace team" in unread["status"]["message"]


def gpu_pod(name: str, node: str | None, gpus: int | None, phase: str = "Running") -> dict[str, Any]:
    """A Pod with `gpus` GPUs in its limits (None: no GPU limit at all)."""
    pod = make_pod(name=name, gpu_limit=None if gpus is None else str(gpus))
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase}
    return pod


def test_pod_accounting_follows_completion_and_deletion(api: FakeApiServer) -> None:
    api.create(make_namespace("ml"))
    api.create(make_node("a100-1", "A100-SXM4-40GB", gpus=8))
    api.create(gpu_pod("a", "a100-1", 3))
    api.create(gpu_pod("b", "a100-1", 2, phase="Pending"))  # bound, not yet running: it holds its GPUs
    api.create(gpu_pod("c", None, 4, phase="Pending"))  # not bound: no node to account it to
    inv = start_inventory(api, watch_pods=True)
    try:
        eventually(lambda: inv.readiness()[0], what="sync")

        def free() -> int:
            return inv.snapshot().groups("A100")[0].free_gpus

        assert free() == 3
        api.update(gpu_pod("a", "a100-1", 3, phase="Succeeded"))
        eventually(lambda: free() == 6, what="completion frees GPUs")
        api.delete("Pod", "b", "ml")
        eventually(lambda: free() == 8, what="deletion frees GPUs")
        api.update(gpu_pod("c", "a100-1", 4, phase="Running"))
        eventually(lambda: free() == 4, what="binding takes GPUs")
        assert inv.state.pods == {"ml/c": ("a100-1", {"nvidia.com/gpu": 4})}
        # only unfinished Pods are listed and watched: a 150,000-Pod cluster of finished Jobs sends far fewer
        pod_calls = [r for r in api.request_log if r.path == "/api/v1/pods"]
        assert pod_calls and all(r.query.get("fieldSelector") == UNFINISHED_PODS for r in pod_calls)
    finally:
        inv.stop()


def test_unbound_gpu_pods_are_known_until_bound_finished_or_deleted(api: FakeApiServer) -> None:
    api.create(make_namespace("ml"))
    api.create(make_node("a100-1", "A100-SXM4-40GB", gpus=8))
    api.create(gpu_pod("waiting", None, 2, phase="Pending"))
    api.create(gpu_pod("cpu-only", None, 0, phase="Pending"))
    inv = start_inventory(api, watch_pods=True)
    try:
        eventually(lambda: inv.readiness()[0], what="sync")

        def known() -> dict[str, tuple[str, int]]:
            return {p.name: (p.resource, p.devices) for p in inv.snapshot().unbound_pods.values()}

        assert known() == {"waiting": ("nvidia.com/gpu", 2)}, "listed: the GPU Pod only"
        api.create(gpu_pod("later", None, 1, phase="Pending"))
        eventually(lambda: known() == {"waiting": ("nvidia.com/gpu", 2), "later": ("nvidia.com/gpu", 1)},
                   what="a new Pod known")
        (uid,) = [u for u, p in inv.snapshot().unbound_pods.items() if p.name == "waiting"]
        api.update(gpu_pod("waiting", "a100-1", 2, phase="Pending"))
        # one event moves it: known unbound no more, and its GPUs counted on its node
        eventually(lambda: known() == {"later": ("nvidia.com/gpu", 1)}, what="binding")
        snapshot = inv.snapshot()
        assert uid not in snapshot.unbound_pods and snapshot.requested[("a100-1", "nvidia.com/gpu")] == 2
        api.delete("Pod", "later", "ml")
        eventually(lambda: known() == {}, what="deletion")
    finally:
        inv.stop()


def test_events_of_pods_the_view_cannot_hold_are_not_decoded_and_their_resource_version_is_kept(
        api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    api.bookmark_interval_seconds = 3600.0  # only events move the resourceVersion here
    api.create(make_namespace("ml"))
    api.create(make_node("a100-1", "A100-SXM4-40GB", gpus=8))
    inv = start_inventory(api, watch_pods=True)
    decoded = record_decoded_lines(monkeypatch)
    try:
        eventually(lambda: inv.readiness()[0], what="sync")
        pods = next(r for r in inv.reflectors if r.name == "pods")
        decoded.clear()
        for i in range(5):
            api.create(gpu_pod(f"web-{i}", None, None, phase="Pending"))
            api.update(gpu_pod(f"web-{i}", "a100-1", None))
        api.delete("Pod", "web-0", "ml")
        rv = api.current_resource_version
        eventually(lambda: pods.resource_version == rv, what="the last CPU Pod event read")
        assert pods.skipped == 11 and not any(b'"web-' in line for line in decoded)
        api.create(gpu_pod("train", "a100-1", 3))
        eventually(lambda: inv.snapshot().requested.get(("a100-1", "nvidia.com/gpu")) == 3, what="GPU Pod counted")
        assert pods.skipped == 11 and any(b'"train"' in line for line in decoded)
    finally:
        inv.stop()


def test_a_pod_the_view_holds_is_forgotten_when_its_gpus_leave_its_line(api: FakeApiServer) -> None:
    """The API server refuses a change to a Pod's GPU limits; the fake does not. A Pod the view holds is
    read whatever its line says: here its next state names no GPU at all, and it must leave the view."""
    api.create(make_namespace("ml"))
    api.create(make_node("a100-1", "A100-SXM4-40GB", gpus=8))
    api.create(gpu_pod("listed", "a100-1", 2))
    inv = start_inventory(api, watch_pods=True)
    try:
        eventually(lambda: inv.readiness()[0], what="sync")

        def in_use() -> int | None:
            return inv.snapshot().requested.get(("a100-1", "nvidia.com/gpu"))

        assert in_use() == 2
        api.create(gpu_pod("watched", "a100-1", 3))
        eventually(lambda: in_use() == 5, what="a Pod held from its event")
        api.create(gpu_pod("waiting", None, 1, phase="Pending"))
        eventually(lambda: len(inv.snapshot().unbound_pods or {}) == 1, what="a Pod known unbound")
        for name in ("listed", "watched"):
            api.update(gpu_pod(name, "a100-1", None))
        api.update(gpu_pod("waiting", None, None, phase="Pending"))
        eventually(lambda: in_use() is None and not inv.snapshot().unbound_pods, what="held Pods without GPUs forgotten")
        assert inv.state.pods == {}
        assert next(r for r in inv.reflectors if r.name == "pods").skipped == 0
    finally:
        inv.stop()


@pytest.mark.parametrize("order", [
    pytest.param(("nodes", "namespaces", "pods", "deviceclasses", "resourceslices", "resourceclaims",
                  "resourceclaimtemplates", "nodepools", "customresourcedefinitions", "apiservices"), id="nodes-first"),
    pytest.param(("apiservices", "customresourcedefinitions", "nodepools", "resourceclaimtemplates", "resourceclaims",
                  "pods", "resourceslices", "namespaces", "deviceclasses", "nodes"), id="pods-first"),
])
def test_synced_once_every_first_list_is_in_whatever_the_reflectors_flags_say(api: FakeApiServer,
                                                                              order: tuple[str, ...]) -> None:
    """Reflectors set their own flag after replace() returns: lists that end together each see the
    others unfinished. The snapshot counts the lists it has taken in instead (here the flags never move)."""
    core = kubernetes.client.CoreV1Api(api.api_client())
    told = Synced()
    inv = LiveInventory(CATALOG, core, watch_pods=True, observer=told)  # not started: the replaces are called by hand
    replace = {r.name: r.replace for r in inv.reflectors}
    assert sorted(replace) == sorted(order)  # every reflector, each once
    for name in order:
        assert inv.snapshot().synced is False, f"synced before {name} was listed"
        assert told.times == 0
        replace[name]([])
        assert not any(r.synced for r in inv.reflectors)
    assert inv.snapshot().synced is True
    assert told.times == 1  # what the synced-workers gauge counts
    replace[order[0]]([])  # a relist: still the one worker
    assert told.times == 1


class Synced(NoObserver):
    """Counts the times the inventory says it is synced."""

    def __init__(self) -> None:
        self.times = 0

    def synced(self) -> None:
        self.times += 1


def test_wait_newer_returns_when_the_watch_publishes(api: FakeApiServer) -> None:
    api.create(make_namespace("ml"))
    inv = start_inventory(api, watch_pods=True)
    try:
        eventually(lambda: inv.readiness()[0], what="sync")
        before = inv.snapshot()
        assert inv.wait_newer(before, 0.05) is before, "nothing new: the same snapshot, after the timeout"
        api.create(gpu_pod("waiting", None, 1, phase="Pending"))
        newer = inv.wait_newer(before, 30)
        assert newer is not before
        eventually(lambda: [p.name for p in inv.snapshot().unbound_pods.values()] == ["waiting"], what="the Pod")
    finally:
        inv.stop()


class Lags(NoObserver):
    """Records each lag the inventory reports (what the gauge shows)."""

    def __init__(self) -> None:
        self.seen: list[float] = [-1.0]

    def lagging(self, seconds: float) -> None:
        self.seen.append(seconds)


def test_the_lag_rises_while_read_events_wait_and_falls_once_they_are_published(
        api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "LAG_REPORT_SECONDS", 0.05)
    api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
    lags = Lags()
    inv = start_inventory(api, observer=lags)
    try:
        eventually(lambda: inv.readiness()[0], what="first sync")
        eventually(lambda: lags.seen[-1] == 0.0, what="caught up")
        with inv.state.lock:  # the applier waits, as it would behind a long burst
            api.create(make_node("a100-a", "A100-SXM4-40GB", gpus=4))
            eventually(lambda: inv.lag_seconds() >= 0.5, what="the lag rising")
            ready, detail = inv.readiness()
            assert ready and detail["lagSeconds"] >= 0.5 and detail["queuedEvents"] == 1, detail
            eventually(lambda: lags.seen[-1] >= 0.5, what="the reported lag rising")
            assert "a100-a" not in inv.snapshot().nodes
        eventually(lambda: "a100-a" in inv.snapshot().nodes, what="the event applied")
        eventually(lambda: lags.seen[-1] == 0.0, what="the reported lag falling")
        assert inv.lag_seconds() == 0.0 and inv.readiness()[1]["lagSeconds"] == 0.0
    finally:
        inv.stop()


class Binds(NoObserver):
    """Records each bind the inventory reports, with what the snapshot before it held."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bool, int]] = []  # (Pod, node, still unbound before, GPUs held there before)

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        self.seen.append((pod.name, node, pod.uid in (before.unbound_pods or {}),
                          before.requested.get((node, "nvidia.com/gpu"), 0)))


def test_each_bind_is_reported_once_with_the_inventory_just_before_it(api: FakeApiServer) -> None:
    api.create(make_namespace("ml"))
    api.create(make_node("a100-1", "A100-SXM4-40GB", gpus=8))
    api.create(gpu_pod("running", "a100-1", 1))
    api.create(gpu_pod("listed-unbound", None, 2, phase="Pending"))
    binds = Binds()
    inv = start_inventory(api, watch_pods=True, observer=binds)
    try:
        eventually(lambda: inv.readiness()[0], what="sync")
        api.create(gpu_pod("created-bound", "a100-1", 1))  # never seen unbound: not a bind the watch saw
        api.create(gpu_pod("waiting", None, 3, phase="Pending"))
        eventually(lambda: len(inv.snapshot().unbound_pods or {}) == 2, what="the new Pod known")
        api.update(gpu_pod("waiting", "a100-1", 3, phase="Pending"))
        api.update(gpu_pod("waiting", "a100-1", 3, phase="Running"))  # bound already: no second report
        api.update(gpu_pod("listed-unbound", "a100-1", 2, phase="Pending"))
        eventually(lambda: len(binds.seen) == 2 and inv.snapshot().requested.get(("a100-1", "nvidia.com/gpu")) == 7,
                   what="both binds")
        # before each bind: the Pod still unbound there, and only the GPUs of the Pods bound earlier
        assert binds.seen == [("waiting", "a100-1", True, 2), ("listed-unbound", "a100-1", True, 5)]
        # bound while the watch was away, and the history gone: the relist shows it bound, but not when
        api.create(gpu_pod("while-away", None, 1, phase="Pending"))
        eventually(lambda: len(inv.snapshot().unbound_pods or {}) == 1, what="the Pod known")
        api.set_available(False)
        api.update(gpu_pod("while-away", "a100-1", 1, phase="Pending"))
        api.compact()
        api.set_available(True)
        eventually(lambda: inv.snapshot().requested.get(("a100-1", "nvidia.com/gpu")) == 8, what="the relist",
                   timeout_seconds=30)
        unbound = inv.snapshot().unbound_pods
        assert unbound is not None and len(unbound) == 0 and len(binds.seen) == 2
    finally:
        inv.stop()


def unbound(name: str, devices: int, resource: str = "nvidia.com/gpu", class_name: str | None = None,
            **placed: Any) -> UnboundGpuPod:
    return UnboundGpuPod(f"uid-{name}", "ml", name, resource, devices, class_name, **placed)


def with_uid(pod: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    pod["metadata"].update(uid=f"uid-{pod['metadata']['name']}", **metadata)
    return pod


@pytest.mark.parametrize("pod, expected", [
    pytest.param(with_uid(gpu_pod("a", None, 2, phase="Pending")), unbound("a", 2), id="pending"),
    pytest.param(with_uid(gpu_pod("a", None, 1, phase="Pending"), annotations={"gpu-class.io/class": "high"}),
                 unbound("a", 1, class_name="high"), id="with-class"),
    pytest.param(with_uid(gpu_pod("a", None, 1, phase="Pending"),
                          annotations={"gpu-class.io/class": "high", "gpu-class.io/types": "H100, A100,H100"},
                          labels={"gpu-class.io/group": "train"}, creationTimestamp="2025-03-04T05:06:07Z"),
                 unbound("a", 1, class_name="high", types=("H100", "A100"), created_seconds=1741064767.0,
                         group=("ml", "train")), id="placed"),
    pytest.param(with_uid(gpu_pod("a", None, 1, phase="Pending"), creationTimestamp="yesterday",
                          annotations={"gpu-class.io/types": "H100"}),
                 unbound("a", 1, types=("H100",)), id="bad-timestamp"),
    pytest.param(with_uid({**gpu_pod("a", None, 1, phase="Pending"), "spec": {
        **gpu_pod("a", None, 1)["spec"], "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}}),
        unbound("a", 1, gated=True), id="gated"),
    pytest.param(with_uid(gpu_pod("a", "n1", 2, phase="Pending")), None, id="bound"),
    pytest.param(with_uid(gpu_pod("a", None, 2, phase="Failed")), None, id="finished"),
    pytest.param(with_uid(gpu_pod("a", None, 0, phase="Pending")), None, id="no-gpus"),
    pytest.param(gpu_pod("a", None, 2, phase="Pending"), None, id="no-uid"),
    pytest.param(with_uid({"metadata": {"name": "a", "namespace": "ml"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"amd.com/gpu": "1"}}},
        {"name": "d", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}}]}}),
        unbound("a", 2, "nvidia.com/mig-1g.10gb"), id="first-resource-of-the-catalog"),
])
def test_unbound_gpu_pod(pod: dict[str, Any], expected: UnboundGpuPod | None) -> None:
    assert unbound_gpu_pod(pod, ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"]) == expected


@pytest.mark.parametrize("pod, expected", [
    pytest.param(gpu_pod("a", "n1", 2), ("n1", {"nvidia.com/gpu": 2}), id="running"),
    pytest.param(gpu_pod("a", None, 2, phase="Pending"), (None, {}), id="unbound"),
    pytest.param(gpu_pod("a", "n1", 2, phase="Failed"), (None, {}), id="failed"),
    pytest.param({"spec": {"nodeName": "n1", "containers": [{"name": "a"}]}}, ("n1", {}), id="no-gpus"),
    pytest.param({"spec": {"nodeName": "n1", "containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}},
        {"name": "b", "resources": {"limits": {"amd.com/gpu": "2"}}}]}},
        ("n1", {"nvidia.com/mig-1g.10gb": 1, "amd.com/gpu": 2}), id="per-resource"),
    pytest.param({"spec": {"nodeName": "n1", "containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "2"}}}],
        "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}},
        ("n1", {"nvidia.com/gpu": 4}), id="init-wins"),
])
def test_pod_gpu_requests(pod: dict[str, Any], expected: tuple[str | None, dict[str, int]]) -> None:
    assert pod_gpu_requests(pod, ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"]) == expected


# A watch stream as the API server sends it: one event per line, text that is not ASCII, an empty line.
WATCH_STREAM = b"".join([
    b'{"type":"ADDED","object":{"metadata":{"name":"a","annotations":{"note":"H100 \xc3\xa9\xe2\x9c\x93"}}}}\n',
    b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}}\n',
    b"\n",
    b'{"type":"MODIFIED","object":{"metadata":{"name":"' + b"b" * 300 + b'"}}}\n',
])


class Chunks:
    """A urllib3 response, for kubernetes' iter_resp_lines."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        return iter(self.chunks)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100, len(WATCH_STREAM)])
@pytest.mark.parametrize("tail", [b"", b'{"type":"ADDED"'], ids=["whole", "cut-off"])
def test_watch_lines_are_the_clients_lines_however_the_stream_is_cut(size: int, tail: bytes) -> None:
    stream = WATCH_STREAM + tail  # a connection cut mid-event: the partial line is not an event
    chunks = [stream[i:i + size] for i in range(0, len(stream), size)]
    expected = [json.loads(line) for line in iter_resp_lines(Chunks(chunks)) if line]
    assert len(expected) == 3
    assert list(watch._events(chunks)) == expected


@pytest.mark.parametrize("line", [
    pytest.param(WATCH_STREAM.split(b"\n")[0], id="utf-8"),
    pytest.param(b'{"type":"ADDED","object":{"metadata":{"name":"a\xff\xfeb"}}}', id="not-utf-8"),
    pytest.param(b'{"n":123456789012345678901234567890,"f":1.5e400}', id="beyond-64-bits"),
    pytest.param(b'{"n":NaN}', id="nan"),
    pytest.param(b'{"a":"\\ud800"}', id="lone-surrogate"),
])
def test_watch_events_read_what_the_client_read(line: bytes) -> None:
    expected = json.loads(line.decode("utf-8", errors="replace"))  # what kubernetes' iter_resp_lines + json.loads read
    assert repr(next(watch._events([line + b"\n"]))) == repr(expected)


def test_readiness_reports_staleness_after_sync(api: FakeApiServer, inventory: LiveInventory) -> None:
    ready, detail = inventory.readiness()
    assert ready and detail["source"] == "api" and detail["nodes"] == 1
    synced_stale = detail["staleSeconds"]
    assert synced_stale is not None
    api.set_available(False)
    time.sleep(1.5)
    ready, detail = inventory.readiness()
    # keeps serving from the last known inventory, and says how old it is: older by the outage, at least
    assert ready and detail["staleSeconds"] >= synced_stale + 1.0
    assert types_for(inventory) == ("H100",)
    api.set_available(True)


def test_served_by_gunicorn_workers_from_a_live_watch(api: FakeApiServer, tmp_path: Path) -> None:
    # DRA and NodePools are served, so watched: an optional resource that is off is asked again, by a
    # list, whenever its worker gets to it, which would be an API call in the middle of the admissions
    api.serve_dra = True
    api.serve_karpenter = True
    api.create(make_namespace("ml"))
    api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3"))
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    config = tmp_path / "catalog.yaml"
    from builders import TEST_CATALOG_YAML

    config.write_text(TEST_CATALOG_YAML)
    with running_server(tmp_path, ["--kubeconfig", str(kubeconfig), "--config", str(config)], workers=2) as server:
        eventually(lambda: server.get("/readyz")[0] == 200, timeout_seconds=20, what="readyz")
        # both workers with every watch open: one still starting lists its last resources during the admissions
        assert api.wait_for_watches(2 * len(WATCHED), timeout_seconds=20)
        review = make_review(make_pod({"gpu-class.io/class": "high"}))
        calls_before = len(api.request_log)
        for _ in range(10):
            assert server.post("/mutate", review)[1]["response"]["allowed"] is True
        # admissions are answered from the watched view: no API call per admission
        new_calls = api.request_log[calls_before:]
        assert all(r.query.get("watch") in ("true", "1") for r in new_calls), new_calls
        api.delete("Node", "h100-a")
        api.create(make_node("a100-a", "A100-SXM4-40GB"))

        def every_worker_sees_it() -> bool:
            # each request opens a new connection, which may land on either worker
            return all(types_annotation(server.post("/mutate", review)[1]) == "A100" for _ in range(8))

        eventually(every_worker_sees_it, timeout_seconds=20, what="both workers updated")
        assert re.search(r"^gpu_class_inventory_synced_workers 2\.0$", server.metrics()[1], re.M)
        assert api.server_errors == []


def types_annotation(body: dict[str, Any]) -> str | None:
    patch = json.loads(base64.b64decode(body["response"].get("patch", "") or "W10="))
    return next((op["value"] for op in patch if op["path"] == "/metadata/annotations/gpu-class.io~1types"), None)


# --- heralds: an object watched by name that says an optional API is served ----------------------------

def _conditions(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"conditions": [{"type": t, "status": s} for t, s in pairs]}


@pytest.mark.parametrize("herald, obj, served", [
    pytest.param(watch.DRA_API_SERVICE, {"metadata": {"name": "v1.resource.k8s.io"},
                                         "status": _conditions(("Available", "True"))}, True, id="apiservice-available"),
    pytest.param(watch.DRA_API_SERVICE, {"metadata": {"name": "v1.resource.k8s.io"},
                                         "status": _conditions(("Available", "False"))}, False,
                 id="apiservice-not-available"),
    pytest.param(watch.DRA_API_SERVICE, {"metadata": {"name": "v1.resource.k8s.io"}}, False,
                 id="apiservice-no-status-yet"),
    pytest.param(watch.DRA_API_SERVICE, {"metadata": {"name": "v1beta1.resource.k8s.io"},
                                         "status": _conditions(("Available", "True"))}, False,
                 id="another-version-of-the-group"),
    pytest.param(watch.DRA_API_SERVICE, {"metadata": {"name": "v1.resource.k8s.io"},
                                         "status": _conditions(("Established", "True"))}, False,
                 id="apiservice-with-the-crds-condition"),
    pytest.param(watch.DRA_API_SERVICE, {"metadata": {"name": "v1.resource.k8s.io"},
                                         "status": {"conditions": ["Available", None]}}, False,
                 id="conditions-that-are-not-objects"),
    pytest.param(watch.NODEPOOL_CRD, {"metadata": {"name": "nodepools.karpenter.sh"},
                                      "status": _conditions(("NamesAccepted", "True"), ("Established", "True"))}, True,
                 id="crd-established"),
    pytest.param(watch.NODEPOOL_CRD, {"metadata": {"name": "nodepools.karpenter.sh"},
                                      "status": _conditions(("NamesAccepted", "True"), ("Established", "False"))},
                 False, id="crd-names-accepted-only"),
    pytest.param(watch.NODEPOOL_CRD, {"metadata": {"name": "nodeclaims.karpenter.sh"},
                                      "status": _conditions(("Established", "True"))}, False, id="another-crd"),
])
def test_a_herald_says_its_api_is_served_by_its_name_and_condition(herald: watch.Herald, obj: dict[str, Any],
                                                                   served: bool) -> None:
    assert watch.says_served(herald, obj) is served


def test_each_herald_heralds_the_api_its_resources_are_read_from() -> None:
    """The APIService kube-apiserver registers is named version.group of the group version it serves."""
    version_group = watch.DRA_GROUP.split("/")[1] + "." + watch.DRA_GROUP.split("/")[0]
    assert (watch.DRA_API_SERVICE.name, watch.DRA_API_SERVICE.serves) == (version_group, watch.DRA_GROUP)


class _Stop(threading.Event):
    """A stop event whose waits return at once, recorded, and that is set after `waits` of them."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self.limit = waits

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self.limit:
            self.set()
        return self.is_set()


@pytest.mark.parametrize("name, waits", [
    pytest.param("apiservices", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], id="dra-herald"),
    pytest.param("customresourcedefinitions", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], id="karpenter-herald"),
    pytest.param("nodes", [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0], id="an-ordinary-watch"),
])
def test_a_herald_retries_within_a_second_while_other_watches_back_off(
        api: FakeApiServer, monkeypatch: pytest.MonkeyPatch, name: str, waits: list[float]) -> None:
    """An API server restarting refuses every connection for seconds: a herald is back the second it is."""
    monkeypatch.setattr("webhook.cluster.reflector.random.uniform", lambda low, high: high)  # each wait's longest
    inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(api.api_client()))  # not started: run() by hand
    (reflector,) = [r for r in inv.reflectors if r.name == name]

    def refused(**kwargs: Any) -> Any:
        raise ConnectionRefusedError("the API server is restarting")

    reflector.list_call, reflector.stop_event = refused, _Stop(len(waits))
    reflector.run()
    assert reflector.stop_event.waits == waits


@pytest.mark.parametrize("name, status, asked, waits", [
    # kube-apiserver restarted: each watch cache answers 429 "storage is (re)initializing", retry after 1 s,
    # until it has listed etcd
    pytest.param("nodes", 429, 1, [1.25] * 5, id="a-starting-watch-cache"),
    pytest.param("resourceslices", 429, 1, [1.25] * 5, id="a-starting-watch-cache-of-dra"),
    pytest.param("nodes", 503, 3, [3.75] * 5, id="unavailable-retry-after-3"),
    pytest.param("apiservices", 429, 60, [1.25] * 5, id="a-herald-asked-a-minute-waits-its-second"),
    pytest.param("nodes", 500, None, [0.5, 1.0, 2.0, 4.0, 8.0], id="no-wait-asked-backs-off"),
])
def test_a_watch_asked_to_retry_after_seconds_retries_then_without_backing_off(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, status: int, asked: int | None,
        waits: list[float]) -> None:
    """The wait the API server asks for with its answer (Retry-After) is the wait, capped at the reflector's
    longest; doubling over a starting watch cache's seconds of 429s would resume the view up to 30 s late. The
    client is the webhook's own (check_kube_config): urllib3 left to itself asks again thrice, sleeping, before
    the reflector sees the answer (12.5 s before a resourceslices watch resumed once, where 1 s was asked)."""
    monkeypatch.setattr("webhook.cluster.reflector.random.uniform", lambda low, high: high)  # each wait's longest
    with FakeApiServer(serve_dra=True) as api:
        configuration = check_kube_config(str(api.kubeconfig(tmp_path / "kubeconfig")))
        inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration)))
        (reflector,) = [r for r in inv.reflectors if r.name == name]
        reflector.after_list = None  # no applier runs to take the list
        reflector.replace = lambda items: None
        api.fail_next(100, status=status, retry_after=asked, watches_only=True)  # every watch until stopped
        reflector.stop_event = _Stop(len(waits))
        reflector.run()
        assert reflector.stop_event.waits == waits
        assert reflector.relists == 1  # listed once; every failure was a watch's
        # one request a wait: none retried out of the reflector's sight
        assert sum(r.query.get("watch") == "true" for r in api.request_log) == len(waits)


def test_an_off_resource_whose_recheck_failed_is_woken_from_its_backoff_by_its_herald() -> None:
    """Its minute's list came while the API server was restarting: the herald heard next does not wait out
    the backoff (up to BACKOFF_SECONDS[1]) that failure began."""
    stop, lists = threading.Event(), []

    def list_call(**kwargs: Any) -> Any:
        lists.append(kwargs)
        raise ConnectionRefusedError("the API server is restarting")

    recheck = RecordedFlag()
    reflector = watch.Reflector("resourceslices", list_call, lambda obj: obj, lambda items: None,
                                lambda kind, obj: None, stop, on_off=lambda name, reason: None, off="not served",
                                recheck=recheck, _backoff=watch.BACKOFF_SECONDS[1])
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: len(lists) == 1, what="the failed recheck")
        reflector.recheck.set()  # the herald
        eventually(lambda: len(lists) == 2, what="a list once the herald is heard")
        # Why, not how fast: the failure's wait was the long backoff (half of BACKOFF_SECONDS[1] at the least,
        # with its jitter), and the herald's flag ended it; none ran out
        (backoff, *_) = recheck.waits
        assert backoff.timeout_seconds is not None and backoff.timeout_seconds >= watch.BACKOFF_SECONDS[1] / 2
        assert backoff.ended_by_flag
    finally:
        stop.set()
        reflector.recheck.set()
        thread.join(timeout=5)
