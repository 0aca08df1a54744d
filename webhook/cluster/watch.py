"""The live inventory: list, then watch, Nodes, Namespaces and GPU Pods, the ResourceSlices,
DeviceClasses and ResourceClaims of Dynamic Resource Allocation, and Karpenter's NodePools, and keep
InventoryState current.

I/O only; what an object means is decided in inventory.py. Each gunicorn worker runs its own
reflectors (threads do not survive fork, and a worker must never serve from a view nobody updates).

The `kubernetes` client does the HTTP, authentication and configuration; responses are read with
`_preload_content=False` and parsed as plain JSON, because turning 150,000 Pods into generated model
objects would cost minutes and gigabytes, and the decision needs only a few fields of each.

What real API servers do, and what the reflector does about it:
- a watch ends after its timeout, or the connection drops: watch again from the last resourceVersion;
- `410 Gone` (as an ERROR event or a status): the history is compacted, list again;
- BOOKMARK events: only a newer resourceVersion to resume from;
- unreachable or failing (at start or for minutes): retry with capped, jittered backoff, forever,
  serving meanwhile from the last known inventory;
- a resource it does not serve (404: no resource.k8s.io/v1) or will not let us list from the start
  (403: no RBAC for it): for the DRA resources and NodePools only, that resource is off (empty) and logged once,
  and is tried again every minute; Nodes, Namespaces and Pods work as they always have. A 403 after
  a successful list is retried as an error: an API server that restarts refuses until its RBAC
  cache is warm, and the devices last seen are better than none.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Protocol, get_args

import kubernetes
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from ..core.catalog import Catalog
from .loading import InputError
from ..core.dra import (
    DeviceClassInfo, DeviceId, DeviceProblem, SliceInfo, claim_from_object, device_class_from_object, slice_from_object,
)
from ..core.pools import NODEPOOL_API, pools_from_object
from ..core.inventory import (
    GroupName, InventoryState, NamespaceInfo, NodeInfo, Pool, Snapshot, UnboundGpuPod, namespace_info_from_object,
    node_info_from_object, pod_gpu_requests, pod_group, unbound_gpu_pod,
)

log = logging.getLogger("gpu_class.watch")

LIST_PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = (240, 360)  # spread so that reflectors do not reconnect in step
BACKOFF_SECONDS = (0.5, 30.0)
SYNC_WAIT_SECONDS = 15
# Bound Pods hold GPUs; unbound ones are known to the scheduler extender (inventory.UnboundGpuPod). One
# watch over both, so the event that binds a Pod moves it from one to the other at once.
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
OFF_RECHECK_SECONDS = 60  # a resource that is not served or not allowed: how long until we ask again
DRA_GROUP = "resource.k8s.io/v1"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
RestartReason = Literal["timeout", "expired", "error"]
RESTART_REASONS: tuple[RestartReason, ...] = get_args(RestartReason)
# a Pod as the pods watch keeps it: (namespace/name, node or None, devices held per resource, its group,
# and the Pod itself when it is a known unbound GPU Pod)
PodView = tuple[str, str | None, dict[str, int], GroupName | None, UnboundGpuPod | None]


class Expired(Exception):
    """The resourceVersion we resume from is gone: list again."""


class ConfigError(InputError):
    """No way to reach the cluster; the message says what to give."""


def check_kube_config(kubeconfig: str | None) -> kubernetes.client.Configuration:
    configuration = kubernetes.client.Configuration()
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise ConfigError(f"--kubeconfig {kubeconfig}: no such file")
        try:
            kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except Exception as exc:  # the loader raises several kinds for a bad file
            raise ConfigError(f"--kubeconfig {kubeconfig}: {exc}") from None
        return configuration
    if "KUBERNETES_SERVICE_HOST" not in os.environ or not os.path.exists(SERVICE_ACCOUNT_TOKEN):
        raise ConfigError(
            "not running in a cluster (no KUBERNETES_SERVICE_HOST or service account token): "
            "give --kubeconfig PATH, or --nodes NODES.yaml for a fixed inventory"
        )
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    return configuration


class InventoryObserver(Protocol):
    """Told about watch restarts, contact with the API, and each published snapshot (for metrics)."""

    def watching(self, resources: tuple[str, ...], reasons: tuple[str, ...]) -> None:
        """Before the first list: the resources watched and every reason a watch can restart for."""

    def restarted(self, resource: str, reason: str) -> None: ...

    def contacted(self, resource: str) -> None: ...

    def published(self, snapshot: Snapshot) -> None: ...

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        """A GPU Pod seen unbound is now bound to `node`; `before` is the inventory just before the bind,
        in which `counted` of the Pod's own devices on `node` are already in use (its DRA claim)."""


class NoObserver:
    def watching(self, resources: tuple[str, ...], reasons: tuple[str, ...]) -> None:
        pass

    def restarted(self, resource: str, reason: str) -> None:
        pass

    def contacted(self, resource: str) -> None:
        pass

    def published(self, snapshot: Snapshot) -> None:
        pass

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        pass


@dataclass
class Reflector:
    """List+watch of one resource kind, feeding `apply` (events) and `replace` (full lists)."""

    name: str
    list_call: Callable[..., Any]
    # each listed object is reduced as its page arrives, so a relist never holds 150,000 whole Pods
    reduce: Callable[[dict[str, Any]], Any]
    replace: Callable[[list[Any]], None]
    apply: Callable[[str, dict[str, Any]], None]
    stop_event: threading.Event
    resource_version: str | None = None
    synced: bool = False
    connected: bool = False
    last_contact: float | None = None  # monotonic time of the last list, event or bookmark
    restarts: int = 0
    relists: int = 0
    errors: int = 0
    observer: InventoryObserver = field(default_factory=NoObserver)
    # optional: a 404 or 403 turns the resource off (told to on_off with the reason) instead of failing
    on_off: Callable[[str, str | None], None] | None = None
    off: str | None = None  # why the resource is off; None: it is read
    after_list: Callable[[], None] | None = None  # once a full list is in the state
    group: str = DRA_GROUP  # an optional resource's API group and version, for what on_off is told
    _backoff: float = field(default=BACKOFF_SECONDS[0], repr=False)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                if self.off is not None:
                    self.stop_event.wait(OFF_RECHECK_SECONDS)
                    continue
                self._watch()
                self._backoff = BACKOFF_SECONDS[0]
                self._restarted("timeout")
            except Expired:
                self.resource_version = None
                self._restarted("expired")
            except Exception as exc:  # API errors, refused or dropped connections, bad JSON: retry
                self.connected = False
                self.errors += 1
                status = getattr(exc, "status", None)
                if status == 410:
                    self.resource_version = None
                    self._restarted("expired")
                    continue
                if status == 404 and self.on_off is not None:
                    self.resource_version = None  # the API went away: the list says it is off
                log.warning("%s watch failed, retrying in %.1fs: %s", self.name, self._backoff, _brief(exc))
                self._restarted("error")
                self.stop_event.wait(self._backoff * random.uniform(0.5, 1.0))
                self._backoff = min(self._backoff * 2, BACKOFF_SECONDS[1])

    def _restarted(self, reason: RestartReason) -> None:
        self.restarts += 1
        self.observer.restarted(self.name, reason)

    def _contact(self) -> None:
        self.last_contact = time.monotonic()
        self.observer.contacted(self.name)

    def _list(self) -> None:
        items: list[Any] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE, "_preload_content": False, "_request_timeout": 60}
            if token:
                kwargs["_continue"] = token
            try:
                response = self.list_call(**kwargs)
            except ApiException as exc:
                # a 403 once listed is passing (an API server that restarts answers 403 until its RBAC
                # cache is warm): retried like any error, serving the last known devices meanwhile
                if self.on_off is not None and (exc.status == 404 or (exc.status == 403 and self.relists == 0)):
                    self._turn_off(exc)
                    return
                raise
            page = json.loads(response.data)
            items.extend(r for r in map(self.reduce, page.get("items") or []) if r is not None)
            del page["items"]
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                break
        if self.off is not None and self.on_off is not None:
            self.off = None
            self.on_off(self.name, None)
        self.replace(items)
        self.resource_version = metadata.get("resourceVersion")
        self.relists += 1
        self.synced = True
        self.connected = True
        self._contact()
        if self.after_list is not None:
            self.after_list()

    def _turn_off(self, exc: ApiException) -> None:
        """Not served (404) or not allowed (403): off, with what to do about it, until a list works."""
        assert self.on_off is not None
        if exc.status == 404:
            reason = f"the API server does not serve {self.name}.{self.group.split('/')[0]} ({self.group})"
        else:
            reason = (f"not allowed to list {self.name}.{self.group.split('/')[0]} ({_brief(exc)}): grant the "
                      "webhook's ServiceAccount get, list and watch on it (deploy/base/rbac.yaml)")
        first = self.off is None
        self.off = reason
        self.resource_version = None
        self.synced = True  # off is an answer: readiness does not wait for it
        self.connected = False
        self._contact()
        if first:
            self.on_off(self.name, reason)

    def _watch(self) -> None:
        timeout = random.randint(*WATCH_TIMEOUT_SECONDS)
        response = self.list_call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            _preload_content=False,
            # a silent dead connection is noticed when nothing, not even a bookmark, arrives in time
            _request_timeout=(10, timeout + 30),
        )
        self.connected = True
        try:
            for event in _events(response):
                if self.stop_event.is_set():
                    return
                self._handle(event)
        finally:
            response.release_conn()

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error event: {obj.get('message') or obj}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        self._contact()
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.apply(str(kind), obj)
        if rv:
            self.resource_version = rv

    def status(self, now: float) -> dict[str, Any]:
        return {
            "synced": self.synced,
            "connected": self.connected,
            "staleSeconds": None if self.last_contact is None else round(now - self.last_contact, 1),
            "restarts": self.restarts,
            "relists": self.relists,
            **({"off": self.off} if self.off is not None else {}),
        }


def _events(response: Any) -> Iterator[dict[str, Any]]:
    for line in iter_resp_lines(response):
        if line:
            yield json.loads(line)


def _brief(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class LiveInventory:
    """An InventorySource fed by reflectors; snapshot() is a lock-free read of the last published view."""

    def __init__(self, catalog: Catalog, api: kubernetes.client.CoreV1Api, *, watch_pods: bool = True,
                 observer: InventoryObserver | None = None, after_list: Callable[[], None] | None = None) -> None:
        self.catalog = catalog
        self.observer = observer or NoObserver()
        self.after_list = after_list
        self.stop_event = threading.Event()
        # GPUs in use: the balanced and binpack orders, the extender's free devices, and the groups
        # (gpu-class.io/group) whose Pods run where and whose size must fit what is free
        self.watch_pods = watch_pods
        self.state = InventoryState(catalog=catalog, watch_namespaces=True, watch_pods=self.watch_pods)
        self._published = threading.Condition()  # notified with every new snapshot (wait_newer)
        self._listed: set[str] = set()  # reflectors whose first list is in the state
        self.reflectors = [
            self._reflector("nodes", api.list_node, self._reduce_node, self._replace_nodes, self._apply_node),
            self._reflector("namespaces", api.list_namespace, namespace_info_from_object, self._replace_namespaces,
                            self._apply_namespace),
        ]
        if self.watch_pods:
            # only unfinished Pods can matter: those bound hold GPUs, those not yet bound are known GPU
            # Pods. A Pod that finishes leaves the selection, and the API server sends it as DELETED.
            list_pods = functools.partial(api.list_pod_for_all_namespaces, field_selector=UNFINISHED_PODS)
            self.reflectors.append(self._reflector("pods", list_pods, self._reduce_pod, self._replace_pods, self._apply_pod))
        # DRA: optional, each off (and said so) where the API server does not serve it or lets us read it
        self._off: dict[str, str] = {}
        self._logging = False  # a running watch logs what changes; a one-shot read reports it in its output
        self._logged_problems: frozenset[DeviceProblem] = frozenset()
        resource = kubernetes.client.ResourceV1Api(api.api_client)
        self.reflectors += [
            self._reflector("deviceclasses", resource.list_device_class, device_class_from_object,
                            self._replace_classes, self._apply_class, optional=True),
            self._reflector("resourceslices", resource.list_resource_slice, self._reduce_slice,
                            self._replace_slices, self._apply_slice, optional=True),
        ]
        if self.watch_pods:
            # devices taken, where Pods' requests are not what counts (DRA nodes)
            self.reflectors.append(self._reflector(
                "resourceclaims", resource.list_resource_claim_for_all_namespaces, claim_from_object,
                self._replace_claims, self._apply_claim, optional=True))
        # Karpenter's NodePools: GPU nodes that can appear (pools.py). Off, and said so once, where
        # Karpenter is not installed or we may not read them
        self.state.node_pools = {}
        group, version = NODEPOOL_API.split("/")
        list_pools = functools.partial(kubernetes.client.CustomObjectsApi(api.api_client).list_cluster_custom_object,
                                       group, version, "nodepools")
        self.reflectors.append(Reflector("nodepools", list_pools, self._reduce_pools, self._replace_pools,
                                         self._apply_pools, self.stop_event, observer=self.observer,
                                         on_off=self._pools_turned, after_list=self.after_list, group=NODEPOOL_API))
        self._threads: list[threading.Thread] = []

    def _reflector(self, name: str, list_call: Callable[..., Any], reduce: Callable[[dict[str, Any]], Any],
                   replace: Callable[[list[Any]], None], apply: Callable[[str, dict[str, Any]], None], *,
                   optional: bool = False) -> Reflector:
        return Reflector(name, list_call, reduce, replace, apply, self.stop_event, observer=self.observer,
                         on_off=self._turned if optional else None, after_list=self.after_list)

    def start(self) -> LiveInventory:
        self._logging = True
        self.observer.watching(tuple(r.name for r in self.reflectors), RESTART_REASONS)
        for r in self.reflectors:
            thread = threading.Thread(target=r.run, name=f"gpu-class-watch-{r.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self.stop_event.set()

    def wait_until_synced(self, timeout_seconds: float) -> bool:
        deadline = time.monotonic() + timeout_seconds
        while not self.readiness()[0] and time.monotonic() < deadline:
            self.stop_event.wait(0.05)
        return self.readiness()[0]

    def snapshot(self) -> Snapshot:
        return self.state.snapshot

    def wait_newer(self, than: Snapshot, timeout_seconds: float) -> Snapshot:
        """The first snapshot published after `than`, or the current one when none comes in time."""
        with self._published:
            self._published.wait_for(lambda: self.state.snapshot is not than, timeout_seconds)
        return self.state.snapshot

    def read_once(self) -> Snapshot:
        """One list of each resource and no watch, reduced as the watch reduces: the view of a one-shot command."""
        for r in self.reflectors:
            r._list()  # errors propagate: run() would retry them, a one-shot reader reports them
        return self.state.snapshot

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        now = time.monotonic()
        ready = all(r.synced for r in self.reflectors)
        stale = [s for s in (r.status(now)["staleSeconds"] for r in self.reflectors) if s is not None]
        return ready, {
            "source": "api",
            "nodes": len(self.state.nodes),
            "staleSeconds": max(stale) if len(stale) == len(self.reflectors) else None,
            "watches": {r.name: r.status(now) for r in self.reflectors},
        }

    # each change goes through the state's lock and ends with a new published snapshot
    def _publish_if(self, changed: bool) -> None:
        if changed:
            self._publish()

    def _publish(self) -> None:
        snapshot = self.state.publish()
        self.observer.published(snapshot)
        self._log_problems(snapshot.dra.problems)
        with self._published:
            self._published.notify_all()

    def _log_problems(self, problems: tuple[DeviceProblem, ...]) -> None:
        """Each new kind of DRA device gpu-class does not place on, once (the inventory lists them all)."""
        if not self._logging:
            return
        new = [p for p in problems if p not in self._logged_problems]
        self._logged_problems = frozenset(problems)
        for p in new:
            log.warning("DRA devices gpu-class does not place on: %d of driver %s (%s) on %d node(s): %s",
                        p.devices, p.driver, p.product or "no productName", p.nodes, p.reason)

    def _reduce_node(self, obj: dict[str, Any]) -> NodeInfo | None:
        # a node without GPU labels may have GPUs as DRA devices: keep every node
        return node_info_from_object(obj, self.catalog, keep_all=True)

    def _replace_nodes(self, infos: list[NodeInfo]) -> None:
        with self.state.lock:
            self.state.replace_nodes(infos)
            self._mark_synced("nodes")

    def _apply_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        info = None if kind == "DELETED" else self._reduce_node(obj)
        with self.state.lock:
            changed = self.state.upsert_node(info) if info is not None else self.state.remove_node(str(name))
            self._publish_if(changed)

    def _replace_namespaces(self, infos: list[NamespaceInfo]) -> None:
        with self.state.lock:
            self.state.replace_namespaces(infos)
            self._mark_synced("namespaces")

    def _apply_namespace(self, kind: str, obj: dict[str, Any]) -> None:
        info = namespace_info_from_object(obj)
        if info is None:
            return
        with self.state.lock:
            changed = self.state.remove_namespace(info.name) if kind == "DELETED" else self.state.upsert_namespace(info)
            self._publish_if(changed)

    def _reduce_pod(self, obj: dict[str, Any]) -> PodView | None:
        node, gpus = pod_gpu_requests(obj, self.catalog.resources)
        unbound = unbound_gpu_pod(obj, self.catalog.resources)
        return (_pod_key(obj), node, gpus, pod_group(obj), unbound) if (node and gpus) or unbound else None

    def _replace_pods(self, pods: list[PodView]) -> None:
        with self.state.lock:
            self.state.replace_pods(((key, node, gpus) for key, node, gpus, _, _ in pods),
                                    {key: group for key, _, _, group, _ in pods if group is not None})
            self.state.replace_unbound_pods(unbound for *_, unbound in pods if unbound is not None)
            self._mark_synced("pods")

    def _apply_pod(self, kind: str, obj: dict[str, Any]) -> None:
        gone = kind == "DELETED"
        node, gpus = (None, {}) if gone else pod_gpu_requests(obj, self.catalog.resources)
        unbound = None if gone else unbound_gpu_pod(obj, self.catalog.resources)
        uid = (obj.get("metadata") or {}).get("uid")
        bind: tuple[UnboundGpuPod, str, Snapshot, int] | None = None
        with self.state.lock:
            was = self.state.unbound_pods.get(uid) if isinstance(uid, str) and uid else None
            if was is not None and node is not None and gpus:
                # every change so far is published: this snapshot is the inventory the scheduler bound
                # against, but for the Pod's own DRA claim, which the claims' watch may have delivered first
                bind = (was, node, self.state.snapshot, self.state.counted_for(obj, node))
            accounted = self.state.set_pod(_pod_key(obj), node, gpus, pod_group(obj))
            known = self.state.set_unbound_pod(uid, unbound) if isinstance(uid, str) and uid else False
            self._publish_if(accounted or known)
        if bind is not None:
            # outside the lock: the other watches need not wait while the bind is judged
            self.observer.bound(*bind)

    # --- DRA ----------------------------------------------------------------------------
    def _reduce_slice(self, obj: dict[str, Any]) -> SliceInfo | None:
        return slice_from_object(obj, self.catalog)

    def _replace_slices(self, infos: list[SliceInfo]) -> None:
        with self.state.lock:
            self.state.replace_slices(infos)
            self._mark_synced("resourceslices")

    def _apply_slice(self, kind: str, obj: dict[str, Any]) -> None:
        info = None if kind == "DELETED" else self._reduce_slice(obj)
        with self.state.lock:
            name = str((obj.get("metadata") or {}).get("name"))
            self._publish_if(self.state.upsert_slice(info) if info is not None else self.state.remove_slice(name))

    def _replace_classes(self, infos: list[DeviceClassInfo]) -> None:
        with self.state.lock:
            self.state.replace_device_classes(infos)
            self._mark_synced("deviceclasses")

    def _apply_class(self, kind: str, obj: dict[str, Any]) -> None:
        info = None if kind == "DELETED" else device_class_from_object(obj)
        with self.state.lock:
            name = str((obj.get("metadata") or {}).get("name"))
            self._publish_if(self.state.upsert_device_class(info) if info is not None
                             else self.state.remove_device_class(name))

    def _replace_claims(self, claims: list[tuple[str, frozenset[DeviceId]]]) -> None:
        with self.state.lock:
            self.state.replace_claims(claims, read="resourceclaims" not in self._off)
            self._mark_synced("resourceclaims")

    def _apply_claim(self, kind: str, obj: dict[str, Any]) -> None:
        key, devices = claim_from_object(obj)
        with self.state.lock:
            self._publish_if(self.state.set_claim(key, frozenset() if kind == "DELETED" else devices))

    # --- node pools ------------------------------------------------------------------
    def _reduce_pools(self, obj: dict[str, Any]) -> tuple[str, tuple[Pool, ...]]:
        return str((obj.get("metadata") or {}).get("name")), pools_from_object(obj, self.catalog)

    def _replace_pools(self, pools: list[tuple[str, tuple[Pool, ...]]]) -> None:
        with self.state.lock:
            self.state.replace_pools(pools)
            self._mark_synced("nodepools")

    def _apply_pools(self, kind: str, obj: dict[str, Any]) -> None:
        name, pools = self._reduce_pools(obj)
        with self.state.lock:
            self._publish_if(self.state.set_pools(name, () if kind == "DELETED" else pools))

    def _pools_turned(self, name: str, reason: str | None) -> None:
        """NodePools went off (not served: no Karpenter; not allowed) or came back."""
        with self.state.lock:
            self.state.pools_off = reason
            if reason is not None:
                self.state.node_pools = None
            self._mark_synced(name)
        if self._logging:
            log.info("Karpenter's NodePools are %s", f"not read: {reason}" if reason else "read")

    def _turned(self, name: str, reason: str | None) -> None:
        """A DRA resource went off (not served, not allowed) or came back: say so once, and forget
        what it held while off."""
        was_off = self.dra_off()
        if reason is None:
            self._off.pop(name, None)
        else:
            self._off[name] = reason
        with self.state.lock:
            if reason is not None and name == "resourceslices":
                self.state.replace_slices([])
            elif reason is not None and name == "deviceclasses":
                self.state.replace_device_classes([])
            elif name == "resourceclaims":
                self.state.replace_claims([], read=reason is None)
            self.state.dra_off = self.dra_off()
            # an answer like a list: the reflector counts as synced (a resource back on lists next)
            self._mark_synced(name)
        now_off = self.dra_off()
        if not self._logging:
            return
        if now_off is not None and was_off is None:
            log.warning("DRA is off: %s; GPUs are counted from the device plugins' node allocatable only", now_off)
        elif now_off is None and was_off is not None:
            log.info("DRA is on: reading ResourceSlices and DeviceClasses")
        if name == "resourceclaims" and now_off is None:
            if reason is not None:
                log.warning("ResourceClaims are off: %s; devices in use on DRA nodes are counted from the Pods' "
                            "requests", reason)
            else:
                log.info("ResourceClaims are read again")

    def dra_off(self) -> str | None:
        """Why DRA devices are not read (ResourceSlices or DeviceClasses off); None when they are."""
        return self._off.get("resourceslices") or self._off.get("deviceclasses")

    def _mark_synced(self, name: str) -> None:
        # Counted here, under the state's lock, not from the reflectors' own flags: a reflector sets its
        # flag after replace() returns, so two lists ending together could each see the other unfinished
        # and leave the snapshot unsynced, refusing every GPU Pod, until the next relist.
        self._listed.add(name)
        self.state.synced = self._listed >= {r.name for r in self.reflectors}
        self._publish()


def _pod_key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def start_live_inventory(
    catalog: Catalog, *, kubeconfig: str | None, observer: InventoryObserver | None = None,
    after_list: Callable[[], None] | None = None,
) -> LiveInventory:
    configuration = check_kube_config(kubeconfig)
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    inventory = LiveInventory(catalog, api, observer=observer, after_list=after_list).start()
    # a worker that accepts before its first list would refuse every Pod for want of nodes; wait a
    # little (well under gunicorn's worker timeout), then serve anyway, refusing until synced
    if not inventory.wait_until_synced(SYNC_WAIT_SECONDS):
        log.warning("inventory not synced after %ss; serving, refusing GPU Pods until it is", SYNC_WAIT_SECONDS)
    return inventory
