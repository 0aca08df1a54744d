"""A fake Kubernetes API server on loopback for tests.

It serves core/v1 Nodes, Namespaces, Pods and Secrets, admissionregistration.k8s.io/v1
MutatingWebhookConfigurations, apps/v1 ReplicaSets, policy/v1
PodDisruptionBudgets (and, when asked to, the
resource.k8s.io/v1 ResourceSlices, DeviceClasses and ResourceClaims of Dynamic
Resource Allocation; otherwise those paths are 404, as on a server without the
API group) over plain HTTP the way a kube-apiserver does for the calls the project makes: GET, LIST (label and
field selectors, limit/continue), WATCH (replay from a resourceVersion, 410
Expired after compaction, bookmarks, timeoutSeconds), PATCH (merge, strategic
merge treated as merge, JSON Patch), POST and DELETE, and a Pod's Eviction subresource. Tests talk to it with
the real `kubernetes` client and steer it through FakeApiServer: change
objects, compact history, cut watches, inject failures, take the listener
away and bring it back on the same port.

Simplifications, on purpose: deletion is immediate (no graceful deletion),
strategic merge patch replaces lists wholesale, set-based label selectors
(`in`, `notin`) are refused with 400, there is no admission (a Pod may name a
Namespace that does not exist), and lists always come from the current state.
No controller runs: a PodDisruptionBudget's status.disruptionsAllowed is what the
test writes, and an eviction it allows takes one from it and deletes the Pod at once.
"""

from __future__ import annotations

import base64
import bisect
import copy
import datetime
import itertools
import json
import re
import select
import socket
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Mapping, TypedDict
from urllib.parse import parse_qs, urlsplit

import jsonpatch
import kubernetes.client

from bench.common.workload import put_in_served_order

JsonObj = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
Key = tuple[str, str, str]  # (plural, namespace or "", name)


class StatusDetails(TypedDict, total=False):
    name: str
    kind: str
    retryAfterSeconds: int


class Status(TypedDict, total=False):
    kind: str
    apiVersion: str
    metadata: JsonObj
    status: str
    message: str
    reason: str
    details: StatusDetails
    code: int


class WatchEvent(TypedDict):
    type: EventType
    object: Any


@dataclass(frozen=True)
class Resource:
    """A served resource type and the field selectors the real server accepts for it."""

    kind: str
    plural: str
    namespaced: bool
    field_labels: frozenset[str]
    bool_fields: frozenset[str] = frozenset()  # an absent bool selects as "false"
    api_version: str = "v1"  # group/version; "v1" is the core group, served under /api

    @property
    def prefix(self) -> tuple[str, ...]:
        return ("api", "v1") if self.api_version == "v1" else ("apis", *self.api_version.split("/"))


DRA_API = "resource.k8s.io/v1"
KARPENTER_API = "karpenter.sh/v1"
CRD_API = "apiextensions.k8s.io/v1"  # always served, as on every API server
APPS_API, POLICY_API = "apps/v1", "policy/v1"  # likewise
APIREGISTRATION_API = "apiregistration.k8s.io/v1"  # likewise
ADMISSIONREGISTRATION_API = "admissionregistration.k8s.io/v1"  # likewise
# what kube-apiserver's aggregator registers for resource.k8s.io/v1 while it serves it
DRA_API_SERVICE_NAME = "v1.resource.k8s.io"
DRA_API_SERVICE: JsonObj = {"apiVersion": APIREGISTRATION_API, "kind": "APIService", "metadata": {
    "name": DRA_API_SERVICE_NAME, "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
    "spec": {"group": "resource.k8s.io", "version": "v1", "groupPriorityMinimum": 15900, "versionPriority": 15},
    "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local",
                               "message": "Local APIServices are always available"}]}}
RESOURCES: dict[str, Resource] = {r.plural: r for r in (
    Resource("Node", "nodes", False, frozenset({"metadata.name", "spec.unschedulable"}),
             frozenset({"spec.unschedulable"})),
    Resource("Namespace", "namespaces", False, frozenset({"metadata.name", "status.phase"})),
    Resource("Secret", "secrets", True, frozenset({"metadata.name", "metadata.namespace"})),
    Resource("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False, frozenset({"metadata.name"}),
             api_version=ADMISSIONREGISTRATION_API),
    Resource("Pod", "pods", True, frozenset({
        "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
        "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
        "status.podIP", "status.nominatedNodeName"}), frozenset({"spec.hostNetwork"})),
    Resource("ResourceSlice", "resourceslices", False, frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
             api_version=DRA_API),
    Resource("DeviceClass", "deviceclasses", False, frozenset({"metadata.name"}), api_version=DRA_API),
    Resource("ResourceClaim", "resourceclaims", True, frozenset({"metadata.name", "metadata.namespace"}),
             api_version=DRA_API),
    Resource("ResourceClaimTemplate", "resourceclaimtemplates", True, frozenset({"metadata.name", "metadata.namespace"}),
             api_version=DRA_API),
    Resource("NodePool", "nodepools", False, frozenset({"metadata.name"}), api_version=KARPENTER_API),
    Resource("ReplicaSet", "replicasets", True, frozenset({"metadata.name", "metadata.namespace"}),
             api_version=APPS_API),
    Resource("StatefulSet", "statefulsets", True, frozenset({"metadata.name", "metadata.namespace"}),
             api_version=APPS_API),
    Resource("PodDisruptionBudget", "poddisruptionbudgets", True, frozenset({"metadata.name", "metadata.namespace"}),
             api_version=POLICY_API),
    Resource("CustomResourceDefinition", "customresourcedefinitions", False, frozenset({"metadata.name"}),
             api_version=CRD_API),
    Resource("APIService", "apiservices", False, frozenset({"metadata.name"}), api_version=APIREGISTRATION_API),
)}
_BY_KIND = {r.kind.lower(): r for r in RESOURCES.values()}
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
            405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType",
            422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}  # Go's strconv.ParseBool, as the server parses


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the server saw it; tests count calls with these."""

    method: str
    path: str
    query: Mapping[str, str]
    content_type: str = ""

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch", "") in _TRUE

    def __str__(self) -> str:
        q = "&".join(f"{k}={v}" for k, v in self.query.items())
        return f"{self.method} {self.path}" + (f"?{q}" if q else "")


class ApiError(Exception):
    """Raised while handling a request; answered as a Status object."""

    def __init__(self, code: int, message: str, reason: str | None = None,
                 details: StatusDetails | None = None) -> None:
        super().__init__(message)
        self.status = make_status(code, message, reason, details)


def make_status(code: int, message: str, reason: str | None = None,
                details: StatusDetails | None = None) -> Status:
    status: Status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason or _REASONS.get(code, "Unknown"),
                      "code": code}
    if details:
        status["details"] = details
    return status


def _not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, f'{res.plural} "{name}" not found', "NotFound",
                    {"name": name, "kind": res.plural})


def resource_for(kind: str) -> Resource:
    """Accept "Node", "node" or "nodes"."""
    found = RESOURCES.get(kind.lower()) or _BY_KIND.get(kind.lower())
    if found is None:
        raise KeyError(f"the fake API server does not serve {kind!r}")
    return found


# ---------------------------------------------------------------- selectors

@dataclass(frozen=True)
class Requirement:
    key: str
    op: Literal["=", "!=", "exists", "!"]
    value: str = ""


def _terms(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    reqs: list[Requirement] = []
    for term in _terms(text):
        if "!=" in term:
            k, v = term.split("!=", 1)
            req = Requirement(k.strip(), "!=", v.strip())
        elif "=" in term:
            k, v = term.replace("==", "=", 1).split("=", 1)
            req = Requirement(k.strip(), "=", v.strip())
        elif term.startswith("!"):
            req = Requirement(term[1:].strip(), "!")
        else:
            req = Requirement(term, "exists")
        if not req.key or any(c in req.key + req.value for c in " ()!="):
            raise ApiError(400, f"unable to parse requirement: {term!r} (set-based selectors "
                                f"are not supported by the fake)")
        reqs.append(req)
    return tuple(reqs)


def parse_field_selector(text: str, resource: Resource) -> tuple[Requirement, ...]:
    reqs: list[Requirement] = []
    for term in _terms(text):
        op: Literal["=", "!="] = "!=" if "!=" in term else "="
        key, sep, value = term.replace("==", "=", 1).partition(op)
        if not sep:
            raise ApiError(400, f"invalid selector: {term!r}; can't understand it")
        if key.strip() not in resource.field_labels:
            raise ApiError(400, f"field label not supported: {key.strip()}")
        reqs.append(Requirement(key.strip(), op, value.strip()))
    return tuple(reqs)


def field_value(obj: JsonObj, path: str, resource: Resource) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if cur is None:
        return "false" if path in resource.bool_fields else ""
    return str(cur)


def _satisfies(req: Requirement, present: bool, value: str) -> bool:
    if req.op == "exists":
        return present
    if req.op == "!":
        return not present
    if req.op == "=":
        return present and value == req.value
    return not present or value != req.value  # "!=" also selects objects without the key


@dataclass(frozen=True)
class Query:
    """Which objects a list or watch request selects."""

    resource: Resource
    namespace: str | None = None
    labels: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, obj: JsonObj | None) -> bool:
        if obj is None or obj.get("kind") != self.resource.kind:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        return (all(_satisfies(r, r.key in labels, str(labels.get(r.key, ""))) for r in self.labels)
                and all(_satisfies(r, True, field_value(obj, r.key, self.resource))
                        for r in self.fields))


# ---------------------------------------------------------------- patches

def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def apply_patch(obj: JsonObj, content_type: str, body: Any) -> JsonObj:
    ctype = content_type.split(";")[0].strip().lower()
    if ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        if not isinstance(body, dict):
            raise ApiError(400, "a merge patch must be a JSON object")
        patched: JsonObj = merge_patch(obj, body)
        return patched
    if ctype == "application/json-patch+json":
        try:
            result: JsonObj = jsonpatch.apply_patch(obj, body)
            return result
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as e:
            raise ApiError(422, f"the server rejected our request due to an error in our "
                                f"request: {e}")
    raise ApiError(415, f"the body of the request was in an unknown format - accepted media "
                        f"types include: application/json-patch+json, application/merge-patch+"
                        f"json, application/strategic-merge-patch+json (got {content_type!r})")


# ---------------------------------------------------------------- state

@dataclass(frozen=True)
class StoredEvent:
    rv: int
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    resource: str
    obj: JsonObj          # for DELETED: the last state, stamped with the deletion RV
    prev: JsonObj | None  # the state before; lets a watch see an object leave its selector


@dataclass
class _Watcher:
    query: Query
    sock: socket.socket
    queue: deque[StoredEvent]  # filled by every change, so compaction never loses live events
    dropped: bool = False
    ended: bool = False


@dataclass
class _FailRule:
    remaining: int
    code: int
    path_prefix: str | None
    retry_after: int | None = None
    watches_only: bool = False


def _key(res: Resource, namespace: str | None, name: str) -> Key:
    return (res.plural, (namespace or "default") if res.namespaced else "", name)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeApiServer:
    """Loopback kube-apiserver stand-in; every public method is thread-safe."""

    def __init__(self, *, bookmark_interval_seconds: float = 1.0, port: int = 0, serve_dra: bool = False,
                 serve_karpenter: bool = False) -> None:
        self.bookmark_interval_seconds = bookmark_interval_seconds
        self._serve_dra = False
        self.serve_karpenter = serve_karpenter  # False: karpenter.sh is 404, as on a server without Karpenter
        self.server_errors: list[str] = []  # unexpected handler exceptions; tests assert none
        self._port = port
        self._cond = threading.Condition(threading.RLock())
        self._lifecycle = threading.Lock()  # start waits for a stop in progress to free the port
        self._objects: dict[Key, JsonObj] = {}
        self._history: list[StoredEvent] = []
        self._rv = 1
        self._floor = 1  # the oldest resourceVersion a watch may start from
        self._watchers: dict[int, _Watcher] = {}
        self._pages: dict[int, tuple[str, list[JsonObj]]] = {}  # list snapshots behind continue
        self._ids = itertools.count(1)
        self._fail_rules: list[_FailRule] = []
        self._log: list[LoggedRequest] = []
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._httpd: _HTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self.serve_dra = serve_dra
        # TokenReview and SubjectAccessReview: the tokens the server accepts (token -> status.user) and the
        # non-resource rights granted, as (user or "group:NAME", verb, path)
        self._tokens: dict[str, JsonObj] = {}
        self._grants: set[tuple[str, str, str]] = set()

    @property
    def serve_dra(self) -> bool:
        """False: resource.k8s.io is 404, as on a server without DRA."""
        return self._serve_dra

    @serve_dra.setter
    def serve_dra(self, served: bool) -> None:
        """Serve resource.k8s.io/v1, then register its APIService, as kube-apiserver started with it does (a
        moment later); or not, and delete the APIService, as one started without it does."""
        with self._cond:
            self._serve_dra = served
            res = RESOURCES["apiservices"]
            key = _key(res, None, DRA_API_SERVICE_NAME)
            if served and key not in self._objects:
                self._create(res, copy.deepcopy(DRA_API_SERVICE))
            elif key in self._objects and not served:
                self._delete(res, key)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FakeApiServer:
        with self._lifecycle, self._cond:
            if self._httpd is None:
                # Binding the remembered port is what lets set_available(True) come back on it.
                self._httpd = _HTTPServer(("127.0.0.1", self._port), _Handler)
                self._httpd.owner = self
                self._port = self._httpd.server_address[1]
                self._serve_thread = threading.Thread(
                    target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                    name=f"fakeapi-{self._port}", daemon=True)
                self._serve_thread.start()
        return self

    def stop(self) -> None:
        """Close the listener, then every connection (watches are cut), and join the threads."""
        with self._lifecycle:
            with self._cond:
                httpd, thread, self._httpd = self._httpd, self._serve_thread, None
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()
            with self._cond:
                for w in self._watchers.values():
                    w.dropped = True
                conns = list(self._conns.items())
                self._cond.notify_all()
            for sock, _ in conns:
                _shutdown(sock)
            for t in [thread, *(t for _, t in conns)]:
                if t is not None and t is not threading.current_thread():
                    t.join(timeout=2)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def set_available(self, available: bool) -> None:
        """False: stop listening and cut all connections (connection refused); True: listen again
        on the same port with the same objects and history."""
        if available:
            self.start()
        else:
            self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def client_configuration(self) -> kubernetes.client.Configuration:
        return kubernetes.client.Configuration(host=self.url)

    def api_client(self) -> kubernetes.client.ApiClient:
        return kubernetes.client.ApiClient(self.client_configuration())

    def kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig for this server (JSON, which is valid YAML)."""
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": "fake-token"}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}
        out = Path(path)
        out.write_text(json.dumps(cfg, indent=2))
        return out

    # ------------------------------------------------------------ test controls

    def add_token(self, token: str, username: str, groups: tuple[str, ...] = (), uid: str = "") -> None:
        """A bearer token TokenReview accepts, of `username` in `groups`."""
        with self._cond:
            self._tokens[token] = {"username": username, "uid": uid or f"uid-{username}", "groups": list(groups)}

    def grant(self, subject: str, verb: str, path: str) -> None:
        """Let `subject` (a user name, or "group:NAME") `verb` the non-resource URL `path` (SubjectAccessReview)."""
        with self._cond:
            self._grants.add((subject, verb, path))

    def revoke(self, subject: str, verb: str, path: str) -> None:
        with self._cond:
            self._grants.discard((subject, verb, path))

    @property
    def current_resource_version(self) -> str:
        with self._cond:
            return str(self._rv)

    @property
    def request_log(self) -> list[LoggedRequest]:
        with self._cond:
            return list(self._log)

    @property
    def open_watches(self) -> int:
        with self._cond:
            return len(self._watchers)

    def wait_for_watches(self, count: int, timeout_seconds: float = 5.0) -> bool:
        """Block until at least `count` watches are streaming (so a test does not race the start)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._watchers) >= count, timeout_seconds)

    def get(self, kind: str, name: str, namespace: str | None = None) -> JsonObj | None:
        with self._cond:
            obj = self._objects.get(_key(resource_for(kind), namespace, name))
            return copy.deepcopy(obj)

    def create(self, obj: JsonObj) -> JsonObj:
        """Add an object (ADDED); ApiError 409 if it exists."""
        with self._cond:
            return copy.deepcopy(self._create(resource_for(obj.get("kind", "")), copy.deepcopy(obj)))

    def update(self, obj: JsonObj) -> JsonObj:
        """Replace an object wholesale: always a MODIFIED event, no resourceVersion check."""
        res, meta = resource_for(obj.get("kind", "")), obj.get("metadata", {})
        with self._cond:
            key = _key(res, meta.get("namespace"), meta.get("name", ""))
            return copy.deepcopy(self._replace(res, key, copy.deepcopy(obj), force=True))

    def delete(self, kind: str, name: str, namespace: str | None = None) -> JsonObj:
        res = resource_for(kind)
        with self._cond:
            return copy.deepcopy(self._delete(res, _key(res, namespace, name)))

    def compact(self) -> None:
        """Forget the history: watches from older resourceVersions get 410, continue tokens too."""
        with self._cond:
            self._history.clear()
            self._pages.clear()
            self._floor = self._rv

    def drop_watches(self, *, graceful: bool = False) -> int:
        """End every open watch, abruptly (socket cut mid-stream) or gracefully (the final chunk
        is sent, as when the server's own watch timeout expires). Returns how many."""
        with self._cond:
            watchers = list(self._watchers.values())
            for w in watchers:
                w.ended, w.dropped = graceful, not graceful
            self._cond.notify_all()
        if not graceful:
            for w in watchers:
                _shutdown(w.sock)
        return len(watchers)

    def fail_next(self, n: int = 1, status: int = 500, path_prefix: str | None = None, *,
                  retry_after: int | None = None, watches_only: bool = False) -> None:
        """Answer the next `n` requests (whose path starts with `path_prefix`; only watches, if `watches_only`) with
        `status`, asking for `retry_after` seconds as kube-apiserver does (a 429 while a watch cache starts)."""
        with self._cond:
            if n > 0:
                self._fail_rules.append(_FailRule(n, status, path_prefix, retry_after, watches_only))

    def clear_failures(self) -> None:
        """Forget every failure fail_next asked for that has not happened yet."""
        with self._cond:
            self._fail_rules.clear()

    # ------------------------------------------------------------ store (lock held)

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _publish(self, ev: StoredEvent) -> None:
        self._history.append(ev)
        for w in self._watchers.values():
            if w.query.resource.plural == ev.resource:
                w.queue.append(ev)
        self._cond.notify_all()

    def _create(self, res: Resource, obj: JsonObj) -> JsonObj:
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            raise ApiError(422, f"{res.kind} is invalid: metadata.name: Required value")
        key = _key(res, meta.get("namespace"), meta["name"])
        if key in self._objects:
            raise ApiError(409, f'{res.plural} "{meta["name"]}" already exists', "AlreadyExists",
                           {"name": meta["name"], "kind": res.plural})
        obj.update(kind=res.kind, apiVersion=res.api_version)
        meta.pop("namespace", None)
        if res.namespaced:
            meta["namespace"] = key[1]
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        if res.kind == "Namespace":  # what the real server adds to every Namespace
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        if res.kind in ("Namespace", "Pod"):
            obj.setdefault("status", {}).setdefault("phase", "Active" if res.kind == "Namespace"
                                                    else "Pending")
        meta["resourceVersion"] = self._bump()
        put_in_served_order(obj)
        self._objects[key] = obj
        self._publish(StoredEvent(self._rv, "ADDED", res.plural, copy.deepcopy(obj), None))
        return obj

    def _replace(self, res: Resource, key: Key, obj: JsonObj, force: bool) -> JsonObj:
        old = self._objects.get(key)
        if old is None:
            raise _not_found(res, key[2])
        meta, old_meta = obj.setdefault("metadata", {}), old["metadata"]
        for f in ("name", "namespace", "uid"):
            if f in meta and meta[f] != old_meta.get(f):
                raise ApiError(422, f'{res.kind} "{key[2]}" is invalid: metadata.{f}: field is '
                                    f"immutable")
        if not force and meta.get("resourceVersion") not in (None, old_meta["resourceVersion"]):
            raise ApiError(409, f'Operation cannot be fulfilled on {res.plural} "{key[2]}": the '
                                f"object has been modified; please apply your changes to the "
                                f"latest version and try again", "Conflict",
                           {"name": key[2], "kind": res.plural})
        for f in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
            if f in old_meta:
                meta[f] = old_meta[f]
        obj.update(kind=res.kind, apiVersion=res.api_version)
        if obj == old and not force:
            return old  # a no-op write neither bumps the resourceVersion nor makes an event
        meta["resourceVersion"] = self._bump()
        put_in_served_order(obj)
        self._objects[key] = obj
        self._publish(StoredEvent(self._rv, "MODIFIED", res.plural, copy.deepcopy(obj), old))
        return obj

    def _delete(self, res: Resource, key: Key) -> JsonObj:
        old = self._objects.pop(key, None)
        if old is None:
            raise _not_found(res, key[2])
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = self._bump()
        self._publish(StoredEvent(self._rv, "DELETED", res.plural, gone, old))
        return gone

    # ------------------------------------------------------------ HTTP

    def _handle(self, h: _Handler) -> None:
        url = urlsplit(h.path)
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        content_type = h.headers.get("Content-Type", "")
        with self._cond:
            self._log.append(LoggedRequest(h.command, url.path, params, content_type))
            is_watch = params.get("watch", "") in _TRUE
            rule = next((r for r in self._fail_rules
                         if (r.path_prefix is None or url.path.startswith(r.path_prefix))
                         and (is_watch or not r.watches_only)), None)
            if rule is not None:
                rule.remaining -= 1
                self._fail_rules = [r for r in self._fail_rules if r.remaining > 0]
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        try:
            if rule is not None:
                raise ApiError(rule.code, f"injected failure ({rule.code})", details=None if rule.retry_after is None
                               else {"retryAfterSeconds": rule.retry_after})
            if h.command == "POST" and url.path in (TOKEN_REVIEWS, ACCESS_REVIEWS):
                h.send_json(201, self._review(url.path, body))
                return
            evicted = _EVICTION.fullmatch(url.path)
            if evicted is not None and h.command == "POST":
                h.send_json(201, self._evict(evicted["namespace"], evicted["name"]))
                return
            served = {"v1", CRD_API, APIREGISTRATION_API, ADMISSIONREGISTRATION_API, APPS_API, POLICY_API,
                      *([DRA_API] if self.serve_dra else []), *([KARPENTER_API] if self.serve_karpenter else [])}
            res, namespace, name = _route(url.path, served=frozenset(served))
            query = Query(res, namespace, parse_label_selector(params.get("labelSelector", "")),
                          parse_field_selector(params.get("fieldSelector", ""), res))
            if name is None and h.command == "GET" and is_watch:
                self._watch(h, query, params)
            else:
                result = self._respond(h.command, query, name, params, content_type, body)
                h.send_json(201 if h.command == "POST" else 200, result)
        except ApiError as e:
            h.send_json(e.status["code"], e.status)

    def _respond(self, method: str, q: Query, name: str | None, params: Mapping[str, str],
                 content_type: str, body: bytes) -> JsonObj:
        try:
            payload = json.loads(body) if body else None
        except json.JSONDecodeError as e:
            raise ApiError(400, f"invalid JSON body: {e}")
        res = q.resource
        with self._cond:
            if name is None and method == "GET":
                return self._list(q, params)
            if name is None and method == "POST" and isinstance(payload, dict):
                if q.namespace is not None:
                    payload.setdefault("metadata", {})["namespace"] = q.namespace
                return self._create(res, payload)
            if name is None:
                raise ApiError(405, f"{method} is not supported on the {res.plural} collection")
            key = _key(res, q.namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise _not_found(res, name)
            if method == "GET":
                return current
            if method == "DELETE":
                return self._delete(res, key)
            if method == "PATCH":
                return self._replace(res, key, apply_patch(current, content_type, payload), False)
            raise ApiError(405, f"{method} is not supported on {res.plural}/{name}")

    def _review(self, path: str, body: bytes) -> JsonObj:
        """TokenReview or SubjectAccessReview (non-resource attributes only), answered as kube-apiserver answers:
        the request echoed with its status filled in."""
        try:
            review = json.loads(body)
            spec = review["spec"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ApiError(400, f"invalid review: {e}")
        with self._cond:
            if path == TOKEN_REVIEWS:
                user = self._tokens.get(spec.get("token") or "")
                review["status"] = {"authenticated": True, "user": copy.deepcopy(user)} if user else {
                    "authenticated": False, "error": "invalid bearer token"}
                return review
            attrs = spec.get("nonResourceAttributes")
            if not isinstance(attrs, dict):
                raise ApiError(400, "this fake answers SubjectAccessReviews of nonResourceAttributes only")
            subjects = [spec.get("user") or "", *(f"group:{g}" for g in spec.get("groups") or ())]
            allowed = any((s, attrs.get("verb"), attrs.get("path")) in self._grants for s in subjects)
            review["status"] = {"allowed": allowed, **({} if allowed else {"reason": "no RBAC policy matched"})}
            return review

    def _evict(self, namespace: str, name: str) -> JsonObj:
        """policy/v1 Eviction as kube-apiserver answers it (pkg/registry/core/pod/storage/eviction.go): refused
        with 429 while the Pod's PodDisruptionBudget allows no disruption, 500 when more than one selects it."""
        pods, budgets = RESOURCES["pods"], RESOURCES["poddisruptionbudgets"]
        with self._cond:
            pod = self._objects.get(_key(pods, namespace, name))
            if pod is None:
                raise _not_found(pods, name)
            labels = pod["metadata"].get("labels") or {}
            selecting = [k for k, o in sorted(self._objects.items()) if k[0] == budgets.plural and k[1] == namespace
                         and _selects((o.get("spec") or {}).get("selector"), labels)]
            if len(selecting) > 1:
                raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                    "does not support.")
            for key in selecting:
                pdb = copy.deepcopy(self._objects[key])
                allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
                if allowed <= 0:
                    raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
                pdb.setdefault("status", {})["disruptionsAllowed"] = allowed - 1
                self._replace(budgets, key, pdb, force=True)
            self._delete(pods, _key(pods, namespace, name))
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _list(self, q: Query, params: Mapping[str, str]) -> JsonObj:
        token, limit = params.get("continue"), int(params.get("limit") or 0)
        if token:
            try:
                ref = json.loads(base64.urlsafe_b64decode(token))
                page_id, offset = int(ref["id"]), int(ref["offset"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "continue key is not valid")
            if page_id not in self._pages:
                raise ApiError(410, "The provided continue parameter is too old to display a "
                                    "consistent list result. You can start a new list without "
                                    "the continue parameter.", "Expired")
            rv, items = self._pages[page_id]
        else:
            # The first page freezes the whole result, so later pages are consistent with it.
            rv, page_id, offset = str(self._rv), next(self._ids), 0
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
                     for _, o in sorted(self._objects.items()) if q.matches(o)]
            self._pages[page_id] = (rv, items)
        end = offset + limit if limit > 0 else len(items)
        meta: JsonObj = {"resourceVersion": rv}
        if end < len(items):
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"id": page_id, "offset": end}).encode()).decode()
            if not q.labels and not q.fields:
                meta["remainingItemCount"] = len(items) - end
        else:
            self._pages.pop(page_id, None)
        # Typed lists from the real server carry kind/apiVersion on the list, not the items.
        return {"kind": f"{q.resource.kind}List", "apiVersion": q.resource.api_version, "metadata": meta,
                "items": copy.deepcopy(items[offset:end])}

    def _watch(self, h: _Handler, q: Query, params: Mapping[str, str]) -> None:
        rv_param = params.get("resourceVersion", "")
        if rv_param and not rv_param.isdigit():
            raise ApiError(400, f"invalid resource version: {rv_param}")
        watcher_id, start = next(self._ids), int(rv_param or 0)
        first: list[WatchEvent] = []
        watcher: _Watcher | None = None
        with self._cond:
            if start == 0:
                # "0" or absent: start now, the current objects coming first as ADDED events.
                first = [{"type": "ADDED", "object": copy.deepcopy(o)}
                         for _, o in sorted(self._objects.items()) if q.matches(o)]
                start = self._rv
            if start < self._floor:
                # The real server answers 200 and sends the 410 as an ERROR event.
                first = [{"type": "ERROR", "object": make_status(
                    410, f"too old resource version: {start} ({self._floor})", "Expired")}]
            else:
                later = self._history[bisect.bisect_right([e.rv for e in self._history], start):]
                watcher = _Watcher(q, h.connection, deque(
                    e for e in later if e.resource == q.resource.plural))
                self._watchers[watcher_id] = watcher
                self._cond.notify_all()
        try:
            h.start_chunked()
            for ev in first:
                h.send_chunk(ev)
            if watcher is None:
                h.end_chunked()
            else:
                self._stream(h, watcher, start, float(params.get("timeoutSeconds") or 0),
                             params.get("allowWatchBookmarks", "") in _TRUE)
        except OSError:
            h.close_connection = True  # the client went away; nothing to report
        finally:
            with self._cond:
                self._watchers.pop(watcher_id, None)
                self._cond.notify_all()

    def _stream(self, h: _Handler, w: _Watcher, pos: int, timeout: float, bookmarks: bool) -> None:
        deadline = time.monotonic() + timeout if timeout > 0 else float("inf")
        next_bookmark = time.monotonic() + self.bookmark_interval_seconds
        while True:
            send: list[WatchEvent] = []
            with self._cond:
                while not (w.queue or w.dropped or w.ended):
                    now = time.monotonic()
                    due = now >= deadline or (bookmarks and now >= next_bookmark)
                    if due or _client_gone(w.sock):
                        break
                    self._cond.wait(min(deadline, next_bookmark, now + 0.2) - now)
                if w.dropped:
                    h.close_connection = True  # no final chunk: the client sees a broken stream
                    return
                while w.queue:
                    ev = w.queue.popleft()
                    if (out := _translate(ev, w.query)) is not None:
                        send.append(out)
                pos = max(pos, self._rv)  # every change up to now is in `send` or filtered out
            for item in send:
                h.send_chunk(item)
            now = time.monotonic()
            if w.ended or now >= deadline or _client_gone(w.sock):
                h.end_chunked()
                return
            if bookmarks and now >= next_bookmark:
                h.send_chunk({"type": "BOOKMARK", "object": {
                    "kind": w.query.resource.kind, "apiVersion": w.query.resource.api_version,
                    "metadata": {"resourceVersion": str(pos)}}})
                next_bookmark = now + self.bookmark_interval_seconds


def _translate(ev: StoredEvent, q: Query) -> WatchEvent | None:
    """What a watch with this selector sees of a change (objects may enter or leave it)."""
    now_in, was_in = ev.type != "DELETED" and q.matches(ev.obj), q.matches(ev.prev)
    if now_in:
        return {"type": "MODIFIED" if was_in else "ADDED", "object": ev.obj}
    if not was_in:
        return None
    if ev.type == "DELETED":
        return {"type": "DELETED", "object": ev.obj}
    gone = copy.deepcopy(ev.prev or {})  # left the selector: the old state at the new version
    gone["metadata"]["resourceVersion"] = str(ev.rv)
    return {"type": "DELETED", "object": gone}


TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
_EVICTION = re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)/eviction")


def _selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector of policy/v1 (matchLabels and matchExpressions) against a Pod's labels; null selects none."""
    if selector is None:
        return False
    ops = {"In": lambda k, vs: labels.get(k) in vs, "NotIn": lambda k, vs: labels.get(k) not in vs,
           "Exists": lambda k, vs: k in labels, "DoesNotExist": lambda k, vs: k not in labels}
    return (all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
            and all(ops[e["operator"]](e["key"], e.get("values") or []) for e in selector.get("matchExpressions") or []))


def _route(path: str, *, served: frozenset[str]) -> tuple[Resource, str | None, str | None]:
    """(resource, namespace, name) of /api/v1/[namespaces/NS/]PLURAL[/NAME] (or /apis/GROUP/VERSION/...),
    of the API versions `served`."""
    parts = [p for p in path.split("/") if p]
    for res in RESOURCES.values():
        if res.api_version not in served:
            continue
        prefix = res.prefix
        rest = parts[len(prefix):] if tuple(parts[:len(prefix)]) == prefix else []
        if res.namespaced and len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] == res.plural:
            return res, rest[1], rest[3] if len(rest) == 4 else None
        if len(rest) in (1, 2) and rest[0] == res.plural:
            return res, None, rest[1] if len(rest) == 2 else None
    raise ApiError(404, f"the server could not find the requested resource ({path})")


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _client_gone(sock: socket.socket) -> bool:
    """True once the peer has closed its end (readable, with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: the connections of two workers' reflectors, opened at once,
    # overflowed it, and the kernel dropped the rest, retried one to several seconds later. The real
    # server listens with the system's backlog (Go's net.Listen: somaxconn).
    request_queue_size = socket.SOMAXCONN
    block_on_close = False  # stop() joins the threads it knows, with a bound
    owner: FakeApiServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # hang-ups are normal for watches
            with self.owner._cond:
                self.owner.server_errors.append(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streaming, like the real server
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.owner._cond:
            self.server.owner._conns[self.connection] = threading.current_thread()
            if self.server.owner._httpd is not self.server:
                _shutdown(self.connection)  # accepted just as stop() ran: refuse it too

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        with self.server.owner._cond:
            self.server.owner._conns.pop(self.connection, None)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # FakeApiServer.request_log records requests instead

    def _dispatch(self) -> None:
        self.server.owner._handle(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    def send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        retry_after = ((body.get("details") or {}).get("retryAfterSeconds") if isinstance(body, dict) else None)
        if retry_after:  # as k8s.io/apiserver's responsewriters does for a Status that asks for a wait
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, event: WatchEvent) -> None:
        # One event per chunk, one JSON document per line; the socket writer is unbuffered.
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
