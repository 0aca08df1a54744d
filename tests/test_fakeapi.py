"""The fake API server behaves as kube-apiserver does for the real `kubernetes` client.

These tests also pin what the client library itself does on the paths the
inventory watcher depends on (410 Expired, a cut connection, a refused one),
so a change in the client shows up here first.
"""

# The client's models declare every field Optional; these tests assert the values are there.
# mypy: disable-error-code="union-attr"
from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import pytest
import urllib3

import fakeapi
from fakeapi import FakeApiServer, JsonObj
from test_watch import eventually

Event = dict[str, Any]


def make_node(name: str, labels: dict[str, str] | None = None, unschedulable: bool = False) -> JsonObj:
    node: JsonObj = {"kind": "Node", "metadata": {"name": name, "labels": labels or {}}}
    if unschedulable:
        node["spec"] = {"unschedulable": True}
    return node


def make_pod(name: str, namespace: str = "default", node: str | None = None,
             phase: str = "Running", labels: dict[str, str] | None = None) -> JsonObj:
    spec: JsonObj = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": spec, "status": {"phase": phase}}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval_seconds=0.2) as srv:
        yield srv
    assert srv.server_errors == []


@pytest.fixture
def v1(server: FakeApiServer) -> Iterator[kubernetes.client.CoreV1Api]:
    with server.api_client() as api:
        yield kubernetes.client.CoreV1Api(api)


def after_watch_starts(server: FakeApiServer, *actions: Callable[[], object]) -> threading.Thread:
    """Run `actions` once a watch is streaming, so the test never races the watch start."""
    def run() -> None:
        assert server.wait_for_watches(1)
        for action in actions:
            action()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def take(stream: Iterator[Event], n: int) -> list[Event]:
    events: list[Event] = []
    for ev in stream:
        events.append(ev)
        if len(events) == n:
            break
    stream.close()  # type: ignore[attr-defined]  # a generator: releases the connection
    return events


def as_body(obj: JsonObj) -> Any:
    """The client sends plain dicts as they are; its signatures only name the model classes."""
    return obj


def summary(events: list[Event]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]


def watch_count(server: FakeApiServer) -> int:
    return sum(1 for r in server.request_log if r.is_watch)


class HeldClock:
    """The fake server's clock (what its watches' timeouts and bookmarks read), held still until the test moves
    it: a watch then ends by its timeout only after the test has moved the clock past it, whatever the load
    on the machine, so a test orders the end instead of measuring it. Everything else is the real `time`."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.now = self.start

    def monotonic(self) -> float:
        return self.now

    def move_to(self, seconds_after_start: float) -> None:
        # the same sum a watch's deadline is (its start, plus its timeout): the clock lands on it exactly
        self.now = self.start + seconds_after_start

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def held_clock(monkeypatch: pytest.MonkeyPatch) -> HeldClock:
    clock = HeldClock()
    monkeypatch.setattr(fakeapi, "time", clock)
    return clock


def stream_in_thread(stream: Iterator[Event]) -> tuple[threading.Thread, list[Event]]:
    """Read `stream` on a thread of its own, so that a stream that does not end fails the test, not hangs it."""
    events: list[Event] = []

    def read() -> None:
        for event in stream:
            events.append(event)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, events


def ended(thread: threading.Thread) -> bool:
    thread.join(timeout=30)  # generous for a loaded machine: the end is ordered by the test, not timed
    return not thread.is_alive()


# ---------------------------------------------------------------- list and watch

def test_list_then_watch_from_list_rv_sees_added_modified_deleted(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.create(make_node("gpu-1"))
    listed = v1.list_node()
    assert listed.metadata.resource_version == server.current_resource_version
    assert [n.metadata.name for n in listed.items] == ["gpu-1"]

    after_watch_starts(server,
                       lambda: server.create(make_node("gpu-2")),
                       lambda: server.update(make_node("gpu-2", {"gpu-type": "H100"})),
                       lambda: server.delete("Node", "gpu-2"))
    w = kubernetes.watch.Watch()
    events = take(w.stream(v1.list_node, resource_version=listed.metadata.resource_version,
                           timeout_seconds=5), 3)

    assert summary(events) == [("ADDED", "gpu-2"), ("MODIFIED", "gpu-2"), ("DELETED", "gpu-2")]
    assert events[1]["object"].metadata.labels == {"gpu-type": "H100"}
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(listed.metadata.resource_version)
    assert w.resource_version == server.current_resource_version


def test_watch_replays_history_after_the_given_resource_version(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.create(make_node("a"))
    rv = server.current_resource_version
    server.create(make_node("b"))
    server.update(make_node("a", {"x": "1"}))
    events = take(kubernetes.watch.Watch().stream(v1.list_node, resource_version=rv,
                                                  timeout_seconds=1), 2)
    assert summary(events) == [("ADDED", "b"), ("MODIFIED", "a")]


@pytest.mark.parametrize("rv", [None, "0"], ids=["rv-absent", "rv-zero"])
def test_watch_without_resource_version_starts_with_current_objects(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api, rv: str | None) -> None:
    server.create(make_node("a"))
    server.create(make_node("b"))
    server.delete("Node", "a")  # history, not state: must not be replayed
    kwargs: dict[str, Any] = {"timeout_seconds": 1} | ({"resource_version": rv} if rv else {})
    events = list(kubernetes.watch.Watch().stream(v1.list_node, **kwargs))
    assert summary(events) == [("ADDED", "b")]


def test_watch_timeout_ends_the_stream_without_retry(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = held_clock(monkeypatch)
    thread, events = stream_in_thread(kubernetes.watch.Watch().stream(
        v1.list_node, resource_version=server.current_resource_version, timeout_seconds=1))
    assert server.wait_for_watches(1)
    server.create(make_node("a"))  # its arrival says the stream runs: its deadline is read from the held clock
    eventually(lambda: summary(events) == [("ADDED", "a")], what="the first change")
    clock.move_to(0.9)
    server.create(make_node("b"))  # sent after the server has read 0.9 s on its clock
    eventually(lambda: len(events) == 2, what="a change 0.9 s into the watch")
    assert thread.is_alive(), "the stream ended before its timeout"
    clock.move_to(1.0)
    assert ended(thread), "the stream did not end at its timeout"
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b")]
    assert watch_count(server) == 1  # with timeout_seconds the client does not re-watch


@pytest.mark.parametrize("allow, expect_bookmarks", [(True, True), (False, False)],
                         ids=["bookmarks-asked", "bookmarks-not-asked"])
def test_bookmarks_arrive_only_when_asked(server: FakeApiServer, v1: kubernetes.client.CoreV1Api,
                                          allow: bool, expect_bookmarks: bool) -> None:
    server.create(make_node("a"))
    w = kubernetes.watch.Watch()
    events = list(w.stream(v1.list_node, resource_version="1", timeout_seconds=1,
                           allow_watch_bookmarks=allow))
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert summary(events)[0] == ("ADDED", "a")
    assert (len(bookmarks) >= 2) is expect_bookmarks
    for b in bookmarks:
        assert b["raw_object"] == {"kind": "Node", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": server.current_resource_version}}
    assert w.resource_version == server.current_resource_version


def test_bookmark_resource_version_advances_past_changes_to_other_kinds(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    after_watch_starts(server, lambda: server.create({"kind": "Namespace",
                                                      "metadata": {"name": "ml"}}))
    w = kubernetes.watch.Watch()
    events = list(w.stream(v1.list_node, resource_version=server.current_resource_version,
                           timeout_seconds=1, allow_watch_bookmarks=True))
    assert {e["type"] for e in events} == {"BOOKMARK"}
    assert events[-1]["raw_object"]["metadata"]["resourceVersion"] == \
        server.current_resource_version


# ---------------------------------------------------------------- 410 Expired

def test_expired_watch_is_a_200_stream_with_an_error_event(server: FakeApiServer) -> None:
    server.create(make_node("a"))
    server.compact()
    with urllib.request.urlopen(f"{server.url}/api/v1/nodes?watch=true&resourceVersion=1") as r:
        assert r.status == 200
        lines = [json.loads(line) for line in r.read().splitlines()]
    assert lines == [{"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version: 1 (2)", "reason": "Expired", "code": 410}}]


@pytest.mark.parametrize("kwargs, watch_requests", [
    # kubernetes 37 Watch.stream turns the ERROR event into ApiException(status=410).
    # With timeout_seconds it raises at once; without, it re-watches once from the
    # same resourceVersion and raises when that is expired too. Either way the caller
    # must re-list and watch from the new list's resourceVersion.
    ({"timeout_seconds": 5}, 1),
    ({}, 2),
], ids=["with-timeout-raises-at-once", "without-timeout-retries-once-then-raises"])
def test_watch_from_compacted_resource_version_raises_410(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api,
        kwargs: dict[str, Any], watch_requests: int) -> None:
    old_rv = v1.list_node().metadata.resource_version
    server.create(make_node("a"))
    server.compact()
    with pytest.raises(kubernetes.client.ApiException) as info:
        list(kubernetes.watch.Watch().stream(v1.list_node, resource_version=old_rv, **kwargs))
    assert info.value.status == 410
    assert info.value.reason.startswith("Expired: too old resource version")
    assert watch_count(server) == watch_requests
    # Lists are served from the current state, so the usual recovery works.
    relisted = v1.list_node()
    assert [n.metadata.name for n in relisted.items] == ["a"]
    assert list(kubernetes.watch.Watch().stream(
        v1.list_node, resource_version=relisted.metadata.resource_version, timeout_seconds=1)) == []


def test_compaction_never_loses_events_for_an_open_watch(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    after_watch_starts(server, lambda: server.create(make_node("a")), server.compact,
                       lambda: server.create(make_node("b")))
    events = take(kubernetes.watch.Watch().stream(
        v1.list_node, resource_version=server.current_resource_version, timeout_seconds=5), 2)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b")]


# ---------------------------------------------------------------- dropped watches

@pytest.mark.parametrize("kwargs", [{"timeout_seconds": 5}, {}],
                         ids=["with-timeout", "without-timeout"])
def test_abruptly_dropped_watch_raises_protocol_error(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api, kwargs: dict[str, Any]) -> None:
    # A cut mid-stream is not retried by the client: urllib3's ProtocolError
    # ("Response ended prematurely") comes out of Watch.stream.
    after_watch_starts(server, lambda: server.create(make_node("a")),
                       lambda: time.sleep(0.1), server.drop_watches)
    seen: list[Event] = []
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for ev in kubernetes.watch.Watch().stream(
                v1.list_node, resource_version=server.current_resource_version, **kwargs):
            seen.append(ev)
    assert summary(seen) == [("ADDED", "a")]
    assert watch_count(server) == 1


def test_gracefully_ended_watch_with_timeout_just_ends(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api, monkeypatch: pytest.MonkeyPatch) -> None:
    # the server's clock held: the watch's own 5 s cannot end it, so an end is the graceful one's
    held_clock(monkeypatch)
    after_watch_starts(server, lambda: server.drop_watches(graceful=True))
    thread, events = stream_in_thread(kubernetes.watch.Watch().stream(
        v1.list_node, resource_version=server.current_resource_version, timeout_seconds=5))
    assert ended(thread), "the gracefully ended watch is still read"
    assert events == [] and watch_count(server) == 1  # ended, not watched again


def test_gracefully_ended_watch_without_timeout_resumes_from_last_rv(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    # Without timeout_seconds, Watch.stream re-watches by itself from the last
    # resourceVersion it saw, so nothing is replayed twice and nothing is lost.
    def second_watch() -> None:
        deadline = time.monotonic() + 5
        while watch_count(server) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.wait_for_watches(1)
        server.create(make_node("b"))

    after_watch_starts(server, lambda: server.create(make_node("a")), lambda: time.sleep(0.1),
                       lambda: server.drop_watches(graceful=True), second_watch)
    events = take(kubernetes.watch.Watch().stream(
        v1.list_node, resource_version=server.current_resource_version), 2)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b")]
    watches = [r for r in server.request_log if r.is_watch]
    assert len(watches) == 2
    assert watches[1].query["resourceVersion"] == events[0]["object"].metadata.resource_version


def test_client_stopping_a_watch_frees_the_server_side(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    after_watch_starts(server, lambda: server.create(make_node("a")))
    w = kubernetes.watch.Watch()
    for _ in w.stream(v1.list_node, resource_version=server.current_resource_version):
        w.stop()
    eventually(lambda: server.open_watches == 0, what="the server to close the watch the client stopped")


# ---------------------------------------------------------------- failures and outages

@pytest.mark.parametrize("status, exc_type, reason", [
    (500, kubernetes.client.exceptions.ServiceException, "InternalError"),
    (503, kubernetes.client.exceptions.ServiceException, "ServiceUnavailable"),
    (403, kubernetes.client.exceptions.ForbiddenException, "Forbidden"),
    (429, kubernetes.client.ApiException, "TooManyRequests"),
], ids=["500", "503", "403", "429"])
def test_fail_next_answers_with_a_status(server: FakeApiServer, v1: kubernetes.client.CoreV1Api,
                                         status: int, exc_type: type[Exception],
                                         reason: str) -> None:
    server.fail_next(2, status=status)
    for _ in range(2):
        with pytest.raises(exc_type) as info:
            v1.list_node()
        assert isinstance(info.value, kubernetes.client.ApiException)
        assert info.value.status == status
        assert json.loads(info.value.body or "null")["reason"] == reason
    assert v1.list_node().items == []  # only the next n requests fail


def test_fail_next_with_a_path_prefix_spares_other_paths(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.fail_next(1, status=500, path_prefix="/api/v1/pods")
    assert v1.list_node().items == []
    with pytest.raises(kubernetes.client.ApiException):
        v1.list_pod_for_all_namespaces()
    assert v1.list_pod_for_all_namespaces().items == []


def test_fail_next_on_a_watch_raises_before_any_event(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.fail_next(1, status=503)
    with pytest.raises(kubernetes.client.ApiException) as info:
        list(kubernetes.watch.Watch().stream(v1.list_node, timeout_seconds=1))
    assert info.value.status == 503


def test_unavailable_refuses_connections_then_returns_on_the_same_port(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.create(make_node("a"))
    port = server.port
    assert v1.list_node().items  # leaves a pooled keep-alive connection behind
    server.set_available(False)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as info:
        v1.list_node()
    assert isinstance(info.value.reason, urllib3.exceptions.NewConnectionError)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    server.set_available(True)
    assert server.port == port
    assert [n.metadata.name for n in v1.list_node().items] == ["a"]


def test_going_unavailable_cuts_open_watches(server: FakeApiServer,
                                             v1: kubernetes.client.CoreV1Api) -> None:
    after_watch_starts(server, lambda: server.set_available(False))
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(kubernetes.watch.Watch().stream(
            v1.list_node, resource_version=server.current_resource_version, timeout_seconds=5))
    server.set_available(True)


# ---------------------------------------------------------------- objects and patches

def test_missing_object_is_a_404_status(v1: kubernetes.client.CoreV1Api) -> None:
    with pytest.raises(kubernetes.client.exceptions.NotFoundException) as info:
        v1.read_node("nope")
    assert json.loads(info.value.body or "null") == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'nodes "nope" not found', "reason": "NotFound",
        "details": {"name": "nope", "kind": "nodes"}, "code": 404}


@pytest.mark.parametrize("body, content_type, sent_as", [
    ({"metadata": {"labels": {"gpu-type": "H100", "old": None}}},
     "application/merge-patch+json", "application/merge-patch+json"),
    # A dict body with the default content type goes out as strategic merge.
    ({"metadata": {"labels": {"gpu-type": "H100", "old": None}}},
     None, "application/strategic-merge-patch+json"),
    ([{"op": "add", "path": "/metadata/labels/gpu-type", "value": "H100"},
      {"op": "remove", "path": "/metadata/labels/old"}],
     None, "application/json-patch+json"),
], ids=["merge", "strategic-by-default", "json-patch"])
def test_patch_node_changes_labels_and_bumps_rv(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api,
        body: Any, content_type: str | None, sent_as: str) -> None:
    before = server.create(make_node("gpu-1", {"old": "x", "keep": "y"}))
    kwargs: dict[str, Any] = {"_content_type": content_type} if content_type else {}
    patched = v1.patch_node("gpu-1", body, **kwargs)
    assert patched.metadata.labels == {"keep": "y", "gpu-type": "H100"}
    assert int(patched.metadata.resource_version or 0) > int(before["metadata"]["resourceVersion"])
    assert patched.metadata.uid == before["metadata"]["uid"]
    stored = server.get("Node", "gpu-1")
    assert stored is not None and stored["metadata"]["labels"] == patched.metadata.labels
    assert server.request_log[-1].content_type == sent_as


def test_no_op_patch_keeps_rv_and_makes_no_event(server: FakeApiServer,
                                                 v1: kubernetes.client.CoreV1Api) -> None:
    node = server.create(make_node("gpu-1", {"gpu-type": "H100"}))
    rv = server.current_resource_version
    patched = v1.patch_node("gpu-1", {"metadata": {"labels": {"gpu-type": "H100"}}})
    assert patched.metadata.resource_version == node["metadata"]["resourceVersion"] == rv
    assert server.current_resource_version == rv


def test_patch_with_stale_resource_version_conflicts(server: FakeApiServer,
                                                     v1: kubernetes.client.CoreV1Api) -> None:
    stale = server.create(make_node("gpu-1"))["metadata"]["resourceVersion"]
    server.update(make_node("gpu-1", {"a": "b"}))
    with pytest.raises(kubernetes.client.exceptions.ConflictException):
        v1.patch_node("gpu-1", {"metadata": {"resourceVersion": stale, "labels": {"c": "d"}}},
                      _content_type="application/merge-patch+json")


def test_patch_is_seen_by_a_watch(server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.create(make_node("gpu-1"))
    after_watch_starts(server, lambda: v1.patch_node("gpu-1", {"metadata": {"labels": {"a": "b"}}}))
    events = take(kubernetes.watch.Watch().stream(
        v1.list_node, resource_version=server.current_resource_version, timeout_seconds=5), 1)
    assert summary(events) == [("MODIFIED", "gpu-1")]
    assert events[0]["object"].metadata.labels == {"a": "b"}


def test_create_and_delete_through_the_client(server: FakeApiServer,
                                              v1: kubernetes.client.CoreV1Api) -> None:
    pod = v1.create_namespaced_pod("ml", as_body(make_pod("p", namespace="ignored")))
    assert (pod.metadata.namespace, pod.status.phase) == ("ml", "Running")
    with pytest.raises(kubernetes.client.exceptions.ConflictException):
        v1.create_namespaced_pod("ml", as_body(make_pod("p")))
    v1.delete_namespaced_pod("p", "ml")
    assert server.get("Pod", "p", "ml") is None
    ns = v1.create_namespace(as_body({"metadata": {"name": "ml"}}))
    assert ns.metadata.labels == {"kubernetes.io/metadata.name": "ml"}
    assert ns.status.phase == "Active"


# ---------------------------------------------------------------- selectors, namespaces, paging

@pytest.fixture
def pods(server: FakeApiServer) -> None:
    server.create(make_pod("train", "ml", node="gpu-1", labels={"app": "train", "tier": "gpu"}))
    server.create(make_pod("serve", "ml", node="gpu-2", labels={"app": "serve", "tier": "gpu"}))
    server.create(make_pod("queued", "ml", phase="Pending", labels={"app": "train"}))
    server.create(make_pod("web", "default", node="cpu-1", labels={"app": "web"}))
    server.create(make_pod("done", "default", node="cpu-1", phase="Succeeded"))


@pytest.mark.parametrize("selectors, names", [
    ({"label_selector": "app=train"}, ["queued", "train"]),
    ({"label_selector": "app==train,tier=gpu"}, ["train"]),
    ({"label_selector": "app!=train"}, ["done", "web", "serve"]),  # absent key matches !=
    ({"label_selector": "tier"}, ["serve", "train"]),
    ({"label_selector": "!tier"}, ["done", "web", "queued"]),
    ({"field_selector": "spec.nodeName=gpu-1"}, ["train"]),
    ({"field_selector": "spec.nodeName="}, ["queued"]),  # unscheduled
    ({"field_selector": "status.phase!=Succeeded,status.phase!=Failed"},
     ["web", "queued", "serve", "train"]),
    ({"field_selector": "metadata.name=web"}, ["web"]),
    ({"field_selector": "metadata.namespace=ml", "label_selector": "app=train"},
     ["queued", "train"]),
], ids=["label-eq", "label-double-eq-and", "label-neq", "label-exists", "label-not-exists",
        "field-node", "field-unscheduled", "field-not-finished", "field-name", "field-and-label"])
def test_selectors_filter_pod_lists(v1: kubernetes.client.CoreV1Api, pods: None,
                                    selectors: dict[str, Any], names: list[str]) -> None:
    listed = v1.list_pod_for_all_namespaces(**selectors)
    # Ordered as etcd keys: namespace, then name.
    assert [p.metadata.name for p in listed.items] == names


@pytest.mark.parametrize("selectors, message", [
    ({"field_selector": "spec.priority=1"}, "field label not supported: spec.priority"),
    ({"label_selector": "app in (a,b)"}, "unable to parse requirement"),
], ids=["unsupported-field", "set-based-label"])
def test_bad_selectors_are_400(v1: kubernetes.client.CoreV1Api, selectors: dict[str, Any],
                               message: str) -> None:
    with pytest.raises(kubernetes.client.exceptions.BadRequestException) as info:
        v1.list_pod_for_all_namespaces(**selectors)
    assert message in json.loads(info.value.body or "null")["message"]


def test_node_field_selector_on_unschedulable(server: FakeApiServer,
                                              v1: kubernetes.client.CoreV1Api) -> None:
    server.create(make_node("a"))
    server.create(make_node("b", unschedulable=True))
    assert [n.metadata.name for n in v1.list_node(
        field_selector="spec.unschedulable=false").items] == ["a"]


def test_namespaced_list_and_watch(server: FakeApiServer, v1: kubernetes.client.CoreV1Api,
                                   pods: None) -> None:
    assert [p.metadata.name for p in v1.list_namespaced_pod("default").items] == ["done", "web"]
    after_watch_starts(server, lambda: server.create(make_pod("other", "default")),
                       lambda: server.create(make_pod("mine", "ml")))
    events = take(kubernetes.watch.Watch().stream(
        v1.list_namespaced_pod, "ml", resource_version=server.current_resource_version,
        timeout_seconds=5), 1)
    assert summary(events) == [("ADDED", "mine")]


def test_watch_sees_objects_enter_and_leave_its_field_selector(
        server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.create(make_pod("p", phase="Pending"))
    after_watch_starts(
        server,
        lambda: server.update(make_pod("p", node="gpu-1")),   # scheduled onto gpu-1: enters
        lambda: server.update(make_pod("p", node="gpu-1", labels={"a": "b"})),  # stays
        lambda: server.update(make_pod("p", node="gpu-2")),   # moved away: leaves
        lambda: server.create(make_pod("q", node="gpu-1")),
        lambda: server.delete("Pod", "q", "default"))
    events = take(kubernetes.watch.Watch().stream(
        v1.list_pod_for_all_namespaces, field_selector="spec.nodeName=gpu-1",
        resource_version=server.current_resource_version, timeout_seconds=5), 5)
    assert summary(events) == [("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p"),
                               ("ADDED", "q"), ("DELETED", "q")]
    left = events[2]["object"]
    assert left.spec.node_name == "gpu-1"  # the last state it had inside the selector
    assert int(left.metadata.resource_version) > int(events[1]["object"].metadata.resource_version)


def test_paged_list_is_one_consistent_snapshot(server: FakeApiServer,
                                               v1: kubernetes.client.CoreV1Api) -> None:
    for i in range(5):
        server.create(make_node(f"n{i}"))
    first = v1.list_node(limit=2)
    assert [n.metadata.name for n in first.items] == ["n0", "n1"]
    assert first.metadata.remaining_item_count == 3
    server.create(make_node("n2a"))  # must not show up in the pages of the earlier list
    names, token = ["n0", "n1"], first.metadata._continue
    while token:
        page = v1.list_node(limit=2, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [str(n.metadata.name) for n in page.items]
        token = page.metadata._continue
    assert names == ["n0", "n1", "n2", "n3", "n4"]

    again = v1.list_node(limit=2)
    server.compact()
    with pytest.raises(kubernetes.client.ApiException) as info:
        v1.list_node(limit=2, _continue=again.metadata._continue)
    assert info.value.status == 410


# ---------------------------------------------------------------- harness

def test_kubeconfig_drives_the_client(server: FakeApiServer, tmp_path: Path) -> None:
    server.create(make_node("a"))
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(server.kubeconfig(tmp_path / "kubeconfig")),
                                       client_configuration=config)
    with kubernetes.client.ApiClient(config) as api:
        assert [n.metadata.name for n in kubernetes.client.CoreV1Api(api).list_node().items] == ["a"]
    assert server.request_log[-1].path == "/api/v1/nodes"


def test_stop_closes_everything_and_leaves_no_threads() -> None:
    before = set(threading.enumerate())
    srv = FakeApiServer().start()
    with srv.api_client() as api:
        v1 = kubernetes.client.CoreV1Api(api)
        v1.list_node()
        stopper = after_watch_starts(srv, srv.stop)
        with pytest.raises(urllib3.exceptions.ProtocolError):
            list(kubernetes.watch.Watch().stream(v1.list_node, resource_version="1"))
        stopper.join(timeout=5)
    assert [t.name for t in threading.enumerate() if t not in before] == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
    assert srv.server_errors == []


def test_lists_and_watches_return_only_their_own_kind(server: FakeApiServer, v1: kubernetes.client.CoreV1Api) -> None:
    server.create(make_node("gpu-1"))
    server.create(make_pod("train", "ml", node="gpu-1"))
    server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    assert [n.metadata.name for n in v1.list_node().items] == ["gpu-1"]
    assert [p.metadata.name for p in v1.list_pod_for_all_namespaces().items] == ["train"]
    assert [n.metadata.name for n in v1.list_namespace().items] == ["ml"]
    events = list(kubernetes.watch.Watch().stream(v1.list_node, resource_version="0", timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "gpu-1")]
