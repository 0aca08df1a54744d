"""The live inventory: list, then watch, Nodes, Namespaces and GPU Pods, the ResourceSlices,
DeviceClasses and ResourceClaims of Dynamic Resource Allocation, and Karpenter's NodePools, and keep
InventoryState current.

I/O only; what an object means is decided in inventory.py. Each gunicorn worker runs its own
reflectors (threads do not survive fork, and a worker must never serve from a view nobody updates).

Each reflector's thread reads its watch, parses and reduces each event, and queues the change; one
applier thread applies what is queued in batches, under the state's lock, and publishes once per
batch (client-go's reflector, queue and processor). A burst of thousands of node events then costs
one snapshot per batch, and what has been read but is not yet applied is there to be measured:
lag_seconds() is the age of the oldest such event, what /readyz and the lag gauge report.

The `kubernetes` client does the HTTP, authentication and configuration; responses are read with
`_preload_content=False` and parsed as plain JSON, because turning 150,000 Pods into generated model
objects would cost minutes and gigabytes, and the decision needs only a few fields of each.

What real API servers do, and what the reflector does about it:
- a watch ends after its timeout, or the connection drops: watch again from the last resourceVersion;
- `410 Gone` (as an ERROR event or a status): the history is compacted, list again;
- BOOKMARK events: only a newer resourceVersion to resume from;
- Pod events that cannot change the GPU view (no resource of the catalog, a Pod the view does not hold)
  are told apart on the raw line and never decoded (core/view/pod_lines.py); only their resourceVersion is kept;
- unreachable or failing (at start or for minutes): retry with capped, jittered backoff, forever,
  serving meanwhile from the last known inventory; an answer that says when to ask again (Retry-After, as
  the 429 of a watch cache that is starting after an API server restart) is asked again then;
- a resource it does not serve (404: no resource.k8s.io/v1) or will not let us list from the start
  (403: no RBAC for it): for the DRA resources and NodePools only, that resource is off (empty) and logged once,
  and is tried again every minute, or at once when its herald, watched by name, says the API is served
  (HERALDS: Karpenter's CRD established, DRA's APIService available); Nodes, Namespaces and Pods work as they
  always have. A 403 after
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
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, NamedTuple, Protocol, get_args

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from ..core.catalog.model import Catalog, GpuType
from .loading import InputError
from ..core.view.dra import (
    DeviceClassInfo, DeviceId, DeviceProblem, SliceInfo, claim_from_object, device_class_from_object,
    extended_resource_claim, slice_from_object,
)
from ..core.admission.planner import NamespacePolicy, UnreadNamespace
from ..core.view.pod_lines import resource_needles, skipped_pod_event
from ..core.view.pools import NODEPOOL_API, pools_from_object
from ..core.admission.review import load_json
from ..core.view.inventory import (
    GroupName, InventoryState, NamespaceInfo, NodeInfo, Pool, Snapshot, UnboundGpuPod, namespace_info_from_object,
    node_info_from_object, pod_gpu_requests, pod_group, unbound_gpu_pod,
)

log = logging.getLogger("gpu_class.watch")

LIST_PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = (240, 360)  # spread so that reflectors do not reconnect in step
BACKOFF_SECONDS = (0.5, 30.0)
SYNC_WAIT_SECONDS = 15
# The applier publishes once it has applied everything queued, or after this long applying: the
# most a reader waits for an event the watch has applied behind a long burst.
MAX_BATCH_SECONDS = 0.1
# Events read and not yet applied; beyond it the watches wait (memory stays bounded, and the
# backlog waits in the connection instead).
MAX_QUEUED = 50_000
LAG_REPORT_SECONDS = 1.0  # how often the lag gauge is written
# Bound Pods hold GPUs; unbound ones are known to the scheduler extender (inventory.UnboundGpuPod). One
# watch over both, so the event that binds a Pod moves it from one to the other at once.
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
OFF_RECHECK_SECONDS = 60  # a resource that is not served or not allowed: how long until we ask again
DRA_GROUP = "resource.k8s.io/v1"
# A herald's watch is one small object: it retries a broken connection within a second, so that an API
# server back from a restart (an upgrade that brings an API) is heard at once, not after the other
# watches' backoff, which grows to BACKOFF_SECONDS[1] over a restart's failed attempts
HERALD_BACKOFF_SECONDS = 1.0
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
RestartReason = Literal["timeout", "expired", "error"]
RESTART_REASONS: tuple[RestartReason, ...] = get_args(RestartReason)


@dataclass(frozen=True)
class Herald:
    """An object, watched by name, whose condition says that an optional API is now served: when it does,
    the reflectors of that API that are off list at once rather than at their next minute."""

    resource: str  # the herald's plural, as the reflector (and the metrics) name it
    api: str  # its group/version
    name: str
    condition: str  # the status condition that is True once the API is served
    serves: str  # the group/version of the optional API it heralds


# Karpenter's CRD: NodePools are read the moment Karpenter is installed, not a minute later.
NODEPOOL_CRD = Herald("customresourcedefinitions", "apiextensions.k8s.io/v1", "nodepools.karpenter.sh",
                      "Established", NODEPOOL_API)
# DRA's APIService: kube-apiserver's aggregator registers one (no service, Available with reason Local) for each
# built-in group version it serves, within a second of serving it and before /readyz passes, and deletes it when
# it starts without that version (kube-aggregator's autoregister, "onstart"). So an API server upgraded or
# restarted with resource.k8s.io/v1 served is read at once, not a minute later.
DRA_API_SERVICE = Herald("apiservices", "apiregistration.k8s.io/v1", "v1.resource.k8s.io", "Available", DRA_GROUP)
HERALDS = (NODEPOOL_CRD, DRA_API_SERVICE)


def says_served(herald: Herald, obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is the herald and says its API is served (its condition True)."""
    if (obj.get("metadata") or {}).get("name") != herald.name:
        return False
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == herald.condition and c.get("status") == "True"
               for c in conditions if isinstance(c, dict))


class PodView(NamedTuple):
    """A listed Pod as the pods watch keeps it."""

    key: str  # namespace/name
    node: str | None
    gpus: dict[str, int]  # devices held per resource
    group: GroupName | None
    unbound: UnboundGpuPod | None  # the Pod, when it is a known unbound GPU Pod


# within the API server's webhook timeout (5 s) with the decision's own time to spare
NAMESPACE_READ_TIMEOUT_SECONDS = 2.0


class Expired(Exception):
    """The resourceVersion we resume from is gone: list again."""


class ConfigError(InputError):
    """No way to reach the cluster; the message says what to give."""


def check_kube_config(kubeconfig: str | None) -> kubernetes.client.Configuration:
    configuration = kubernetes.client.Configuration()
    # By default urllib3 asks again three times, sleeping in the caller's thread, when an answer says when to (a
    # 429 or 503 with Retry-After), out of sight of the reflector's log, metrics and wait (Reflector.run), which
    # then doubled its backoff on the fourth. A dropped connection is still tried again at once, as by default.
    configuration.retries = urllib3.util.Retry(3, respect_retry_after_header=False)
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

    def reading(self, resource: str, read: bool) -> None:
        """After each list: whether the resource is read (False: off, not served or not allowed)."""

    def published(self, snapshot: Snapshot) -> None: ...

    def synced(self) -> None:
        """Once, when every resource has been listed: the worker's view is whole."""

    def lagging(self, seconds: float) -> None:
        """Every LAG_REPORT_SECONDS: the age of the oldest event read and not yet in a published snapshot."""

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

    def reading(self, resource: str, read: bool) -> None:
        pass

    def published(self, snapshot: Snapshot) -> None:
        pass

    def synced(self) -> None:
        pass

    def lagging(self, seconds: float) -> None:
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
    # set to list an off resource now rather than after OFF_RECHECK_SECONDS or its backoff (its herald says it
    # is served; stop). Each list clears it first: one asked for while a list is under way lists again.
    recheck: threading.Event = field(default_factory=threading.Event)
    max_backoff_seconds: float = BACKOFF_SECONDS[1]
    # a look at each raw watch line before it is decoded: the resourceVersion of an event that need not be
    # (only kept to resume from), None to decode it
    skip: Callable[[bytes], str | None] | None = None
    skipped: int = 0  # events read and not decoded
    _backoff: float = field(default=BACKOFF_SECONDS[0], repr=False)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                if self.off is not None:
                    self.recheck.wait(OFF_RECHECK_SECONDS)
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
                asked = retry_after(exc)
                # The server's own wait, not ours: a watch cache that starts answers 429 "retry after 1 s" for
                # the seconds it takes, and doubling over those answers would resume up to 30 s late
                wait = (self._backoff * random.uniform(0.5, 1.0) if asked is None
                        else min(asked, self.max_backoff_seconds) * random.uniform(1.0, 1.25))
                log.warning("%s watch failed, retrying in %.1fs: %s", self.name, wait, _brief(exc))
                self._restarted("error")
                # an off resource's herald may end the wait (a recheck that failed while the API server restarted)
                (self.recheck if self.off is not None else self.stop_event).wait(wait)
                if asked is None:
                    self._backoff = min(self._backoff * 2, self.max_backoff_seconds)

    def _restarted(self, reason: RestartReason) -> None:
        self.restarts += 1
        self.observer.restarted(self.name, reason)

    def _contact(self) -> None:
        self.last_contact = time.monotonic()
        self.observer.contacted(self.name)

    def _list(self) -> None:
        self.recheck.clear()  # what asked for a list before this one is answered by it
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
            page = _parse(response.data)
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
        self.observer.reading(self.name, True)  # before the flag, as the state: readiness counts the flag
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
        if first:
            # Told (and published) before the flag is set, as a list is: readiness counts the flag, and
            # a replica ready before the snapshot knows the resource's answer refuses GPU Pods as unsynced.
            self.on_off(self.name, reason)
        self.observer.reading(self.name, False)
        self.synced = True  # off is an answer: readiness does not wait for it
        self.connected = False
        self._contact()

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
            for line in _lines(response.stream(amt=None, decode_content=False)):
                if self.stop_event.is_set():
                    return
                self.read(line)
        finally:
            response.release_conn()

    def read(self, line: bytes) -> None:
        """One line of the watch: an event, decoded unless `skip` says it need not be."""
        rv = self.skip(line) if self.skip is not None else None
        if rv is None:
            self._handle(_parse(line))
            return
        self.skipped += 1
        self._contact()
        self.resource_version = rv

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


def _events(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    for line in _lines(chunks):
        yield _parse(line)


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The non-empty lines of a watch (one JSON event per line), as bytes.

    kubernetes' iter_resp_lines decodes every line to str and copies what is left of its buffer once per
    line; a Pod watch in a busy cluster is the worker's largest steady cost besides admissions, and it
    holds the GIL while an admission waits.
    """
    rest = bytearray()
    for chunk in chunks:
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            rest += chunk
            continue
        rest += lines[0]
        lines[0] = bytes(rest)
        rest = bytearray(lines.pop())
        yield from (line for line in lines if line)


def _parse(data: bytes) -> Any:
    """load_json (orjson, reading what json.loads reads, in about half the time), and like the client,
    text that is not UTF-8 is read with replacement characters rather than refused."""
    try:
        return load_json(data)
    except UnicodeDecodeError:
        return json.loads(data.decode("utf-8", errors="replace"))


def retry_after(exc: BaseException) -> float | None:
    """The seconds the API server asked us to wait with its error (its Retry-After header: a 429 while a watch
    cache starts, or while API Priority and Fairness sheds load), or None where it asked for no wait."""
    headers = getattr(exc, "headers", None) if isinstance(exc, ApiException) else None
    try:
        seconds = float((headers or {}).get("Retry-After", ""))
    except ValueError:  # absent, or an HTTP date, which kube-apiserver never sends
        return None
    return seconds if seconds >= 0 else None


def _brief(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


@dataclass
class Change:
    """An event (or a full list) read from the API server, reduced, waiting for the applier."""

    apply: Callable[[], bool]  # run under the state's lock; whether the view changed
    received: float  # monotonic time it was read
    done: threading.Event | None = None  # set once applied and published: a full list's reflector waits


class LiveInventory:
    """An InventorySource fed by reflectors; snapshot() is a lock-free read of the last published view."""

    def __init__(self, catalog: Catalog, api: kubernetes.client.CoreV1Api, *, watch_pods: bool = True,
                 observer: InventoryObserver | None = None, after_list: Callable[[], None] | None = None) -> None:
        self.catalog = catalog
        self.api = api
        self.observer = observer or NoObserver()
        self.after_list = after_list
        self.stop_event = threading.Event()
        # GPUs in use: the balanced and binpack orders, the extender's free devices, and the groups
        # (gpu-class.io/group) whose Pods run where and whose size must fit what is free
        self.watch_pods = watch_pods
        self.state = InventoryState(catalog=catalog, watch_namespaces=True, watch_pods=self.watch_pods)
        self._published = threading.Condition()  # notified with every new snapshot (wait_newer)
        self._listed: set[str] = set()  # reflectors whose first list is in the state
        # the Pods the view holds (namespace/name; bound with GPUs, or known unbound) as the pods watch has read
        # them, ahead of the applier: whatever their next event says, it is decoded. Only the pods
        # reflector's thread reads and writes it. Keyed as the state keys bound Pods, the two mostly share each
        # key's string: about 2 MB at 60,000 GPU Pods, where a set of uids would cost some 7 MB.
        self._held_pods: set[str] = set()
        self._pod_needles = resource_needles(catalog.resources)
        self.reflectors = [
            self._reflector("nodes", api.list_node, self._reduce_node, self._replace_nodes, self._apply_node),
            self._reflector("namespaces", api.list_namespace, namespace_info_from_object, self._replace_namespaces,
                            self._apply_namespace),
        ]
        if self.watch_pods:
            # only unfinished Pods can matter: those bound hold GPUs, those not yet bound are known GPU
            # Pods. A Pod that finishes leaves the selection, and the API server sends it as DELETED.
            list_pods = functools.partial(api.list_pod_for_all_namespaces, field_selector=UNFINISHED_PODS)
            pods = self._reflector("pods", list_pods, self._reduce_pod, self._replace_pods, self._apply_pod)
            pods.skip = self._skip_pod_line
            self.reflectors.append(pods)
        # DRA: optional, each off (and said so) where the API server does not serve it or lets us read it
        self._off: dict[str, str] = {}
        self._logging = False  # a running watch logs what changes; a one-shot read reports it in its output
        self._logged_problems: frozenset[DeviceProblem] = frozenset()
        self._logged_label_types: Mapping[str, GpuType] = {}
        resource = kubernetes.client.ResourceV1Api(api.api_client)
        dra = [
            self._reflector("deviceclasses", resource.list_device_class, device_class_from_object,
                            self._replace_classes, self._apply_class, optional=True),
            self._reflector("resourceslices", resource.list_resource_slice, self._reduce_slice,
                            self._replace_slices, self._apply_slice, optional=True),
        ]
        if self.watch_pods:
            # devices taken, where Pods' requests are not what counts (DRA nodes)
            dra.append(self._reflector(
                "resourceclaims", resource.list_resource_claim_for_all_namespaces, claim_from_object,
                self._replace_claims, self._apply_claim, optional=True))
        self.reflectors += dra
        # Karpenter's NodePools: GPU nodes that can appear (pools.py). Off, and said so once, where
        # Karpenter is not installed or we may not read them
        self.state.node_pools = {}
        group, version = NODEPOOL_API.split("/")
        list_pools = functools.partial(kubernetes.client.CustomObjectsApi(api.api_client).list_cluster_custom_object,
                                       group, version, "nodepools")
        pools = Reflector("nodepools", list_pools, self._reduce_pools, self._replace_pools, self._apply_pools,
                          self.stop_event, observer=self.observer, on_off=self._pools_turned,
                          after_list=self.after_list, group=NODEPOOL_API)
        self.reflectors.append(pools)
        # The heralds, by name: Karpenter installed, or DRA served, after gpu-class started is read at once
        by_name = {herald: f"metadata.name={herald.name}" for herald in HERALDS}
        self.reflectors += [
            self._herald_reflector(NODEPOOL_CRD, functools.partial(
                kubernetes.client.ApiextensionsV1Api(api.api_client).list_custom_resource_definition,
                field_selector=by_name[NODEPOOL_CRD]), [pools]),
            self._herald_reflector(DRA_API_SERVICE, functools.partial(
                kubernetes.client.ApiregistrationV1Api(api.api_client).list_api_service,
                field_selector=by_name[DRA_API_SERVICE]), dra),
        ]
        self._threads: list[threading.Thread] = []
        self._changes: deque[Change] = deque()
        self._queued = threading.Condition()  # guards _changes
        self._applier: threading.Thread | None = None  # None: changes are applied by the thread that reads them
        self._applying_since: float | None = None  # received time of the oldest change applied, not yet published
        self._unpublished = False  # a change is applied and not yet published
        self._after: list[Callable[[], None]] = []  # to run once the lock is released (bind observers)

    def _reflector(self, name: str, list_call: Callable[..., Any], reduce: Callable[[dict[str, Any]], Any],
                   replace: Callable[[list[Any]], None], apply: Callable[[str, dict[str, Any]], None], *,
                   optional: bool = False) -> Reflector:
        return Reflector(name, list_call, reduce, replace, apply, self.stop_event, observer=self.observer,
                         on_off=self._turned if optional else None, after_list=self.after_list)

    def _herald_reflector(self, herald: Herald, list_call: Callable[..., Any], heralded: list[Reflector]) -> Reflector:
        """The watch of `herald`: when it says its API is served, `heralded` are listed at once."""
        def reduce(obj: dict[str, Any]) -> bool | None:
            return True if says_served(herald, obj) else None

        def replace(served: list[bool]) -> None:
            self._submit(lambda: self._mark_synced(herald.resource), wait=True)
            if served:
                self._heard(herald, heralded)

        def apply(kind: str, obj: dict[str, Any]) -> None:
            if kind != "DELETED" and says_served(herald, obj):
                self._heard(herald, heralded)

        def turned(name: str, reason: str | None) -> None:
            """Not allowed to watch the herald: its API is still asked for every OFF_RECHECK_SECONDS."""
            self._submit(lambda: self._mark_synced(name), wait=True)
            if self._logging and reason is not None:
                log.info("%s %s is not watched (%s): %s, while off, is asked for again every %d s", herald.resource,
                         herald.name, reason, herald.serves, OFF_RECHECK_SECONDS)

        return Reflector(herald.resource, list_call, reduce, replace, apply, self.stop_event, observer=self.observer,
                         on_off=turned, after_list=self.after_list, group=herald.api,
                         max_backoff_seconds=HERALD_BACKOFF_SECONDS)

    def _heard(self, herald: Herald, heralded: list[Reflector]) -> None:
        """`herald` says its API is served: its resources that are off are listed now."""
        off = [r.name for r in heralded if r.off is not None]
        if off and self._logging:
            log.info("%s %s is %s: %s is served, reading %s now", herald.resource, herald.name, herald.condition,
                     herald.serves, ", ".join(off))
        for r in heralded:
            # every one, not only those off: one whose list is under way, about to find the API not served,
            # lists again at once
            r.recheck.set()

    def start(self) -> LiveInventory:
        self._logging = True
        self.observer.watching(tuple(r.name for r in self.reflectors), RESTART_REASONS)
        self._applier = threading.Thread(target=self._apply_loop, name="gpu-class-watch-apply", daemon=True)
        self._applier.start()
        # its own thread: the gauge keeps rising if the applier is stuck
        threading.Thread(target=self._report_lag, name="gpu-class-watch-lag", daemon=True).start()
        for r in self.reflectors:
            thread = threading.Thread(target=r.run, name=f"gpu-class-watch-{r.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for r in self.reflectors:
            r.recheck.set()
        with self._queued:
            self._queued.notify_all()

    def wait_until_synced(self, timeout_seconds: float) -> bool:
        deadline = time.monotonic() + timeout_seconds
        while not self.readiness()[0] and time.monotonic() < deadline:
            self.stop_event.wait(0.05)
        return self.readiness()[0]

    def snapshot(self) -> Snapshot:
        return self.state.snapshot

    def namespace_policy(self, snapshot: Snapshot, name: str) -> NamespacePolicy:
        """A namespace the view does not hold yet, read from the API; None where the view decides.

        A namespace and its Pods created in one apply reach the webhook before the watch has told
        this worker of the namespace. Its default and allowed classes are a tenant's boundary, so
        they are read before the decision, never assumed absent; a failed read is said, and the
        planner refuses a Pod that needs them."""
        if snapshot.namespaces is None or not name or name in snapshot.namespaces:
            return None
        try:
            # the raw body, reduced as the watch reduces it (the client's typed model would only be undone)
            response: Any = self.api.read_namespace(name, _preload_content=False,
                                                    _request_timeout=NAMESPACE_READ_TIMEOUT_SECONDS)
            info = namespace_info_from_object(load_json(response.data))
        except Exception as exc:  # any failure to read is the same answer: the policy is unknown
            return UnreadNamespace(name, f"reading it from the API failed ({_brief(exc)})")
        return info if info is not None else UnreadNamespace(name, "the API's answer names no namespace")

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
            # how far the served view is behind what the watches have read (0: caught up)
            "lagSeconds": round(self.lag_seconds(now), 1),
            "queuedEvents": len(self._changes),
            "watches": {r.name: r.status(now) for r in self.reflectors},
        }

    def lag_seconds(self, now: float | None = None) -> float:
        """The age of the oldest event read from the API server that no published snapshot holds yet."""
        oldest = self._applying_since
        try:
            head: float | None = self._changes[0].received
        except IndexError:
            head = None
        known = [t for t in (oldest, head) if t is not None]
        return max((time.monotonic() if now is None else now) - min(known), 0.0) if known else 0.0

    def _report_lag(self) -> None:
        while not self.stop_event.wait(LAG_REPORT_SECONDS):
            self.observer.lagging(self.lag_seconds())

    # --- applying: every change goes through the queue, the state's lock and a published snapshot ---
    def _submit(self, apply: Callable[[], bool], *, wait: bool = False) -> None:
        """Queue a change for the applier; `wait`: return once it is published (full lists, so that
        a reflector counts as synced, and after_list runs, only once its list is in the snapshot)."""
        if self._applier is None:  # a one-shot read: no applier thread
            with self.state.lock:
                self._unpublished |= apply()
                self._flush()
            self._run_after()
            return
        change = Change(apply, time.monotonic(), threading.Event() if wait else None)
        with self._queued:
            while len(self._changes) >= MAX_QUEUED and not self.stop_event.is_set():
                self._queued.wait(1.0)
            self._changes.append(change)
            self._queued.notify_all()
        while change.done is not None and not change.done.wait(0.5) and not self.stop_event.is_set():
            pass

    def _apply_loop(self) -> None:
        while not self.stop_event.is_set():
            with self._queued:
                self._queued.wait_for(lambda: self._changes or self.stop_event.is_set(), 1.0)
            try:
                self._apply_batch()
            except Exception:  # a bug must not stop the view: log it, keep applying
                log.exception("applying watch events failed")

    def _apply_batch(self) -> None:
        """Apply what is queued (for MAX_BATCH_SECONDS at most), then publish once."""
        started = time.monotonic()
        done: list[threading.Event] = []
        with self.state.lock:
            try:
                while time.monotonic() - started < MAX_BATCH_SECONDS:
                    with self._queued:
                        if not self._changes:
                            break
                        if self._applying_since is None:
                            self._applying_since = self._changes[0].received
                        change = self._changes.popleft()
                        self._queued.notify_all()  # a watch may be waiting for room
                    if change.done is not None:
                        done.append(change.done)
                    try:
                        self._unpublished |= change.apply()
                    except Exception:
                        log.exception("applying a watch event failed")
                self._flush()
            finally:
                self._applying_since = None
        self._run_after()
        for event in done:
            event.set()

    def _flush(self) -> None:
        """Publish what is applied and not yet published. Under the state's lock."""
        if self._unpublished:
            self._unpublished = False
            self._publish()

    def _run_after(self) -> None:
        after, self._after = self._after, []
        for call in after:
            call()

    def _publish(self) -> None:
        snapshot = self.state.publish()
        self.observer.published(snapshot)
        self._log_problems(snapshot.dra.problems)
        self._log_label_types(snapshot)
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

    def _log_label_types(self, snapshot: Snapshot) -> None:
        """Each product placed by its nodes' labels, once: its rank is a guess the catalog should replace."""
        if not self._logging or snapshot.label_types is self._logged_label_types:
            return
        new = [t for name, t in snapshot.label_types.items() if name not in self._logged_label_types]
        self._logged_label_types = snapshot.label_types
        for t in new:
            log.warning("GPU product %s is in no type of the catalog: placed by its labels (%s); add it to the "
                        "catalog to rank it by its specifications", t.name,
                        t.facts.score_basis if t.facts is not None else "")

    def _reduce_node(self, obj: dict[str, Any]) -> NodeInfo | None:
        # a node without GPU labels may have GPUs as DRA devices: keep every node
        return node_info_from_object(obj, self.catalog, keep_all=True)

    def _replace_nodes(self, infos: list[NodeInfo]) -> None:
        def apply() -> bool:
            self.state.replace_nodes(infos)
            return self._mark_synced("nodes")
        self._submit(apply, wait=True)

    def _apply_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        info = None if kind == "DELETED" else self._reduce_node(obj)  # reduced here: only NodeInfo is queued
        self._submit(lambda: self.state.upsert_node(info) if info is not None else self.state.remove_node(name))

    def _replace_namespaces(self, infos: list[NamespaceInfo]) -> None:
        def apply() -> bool:
            self.state.replace_namespaces(infos)
            return self._mark_synced("namespaces")
        self._submit(apply, wait=True)

    def _apply_namespace(self, kind: str, obj: dict[str, Any]) -> None:
        info = namespace_info_from_object(obj)
        if info is None:
            return
        gone = kind == "DELETED"
        self._submit(lambda: self.state.remove_namespace(info.name) if gone else self.state.upsert_namespace(info))

    def _reduce_pod(self, obj: dict[str, Any]) -> PodView | None:
        node, gpus = pod_gpu_requests(obj, self.catalog.resources)
        unbound = unbound_gpu_pod(obj, self.catalog.resources)
        return PodView(_pod_key(obj), node, gpus, pod_group(obj), unbound) if (node and gpus) or unbound else None

    def _replace_pods(self, pods: list[PodView]) -> None:
        self._held_pods = {p.key for p in pods}

        def apply() -> bool:
            self.state.replace_pods(((p.key, p.node, p.gpus) for p in pods),
                                    {p.key: p.group for p in pods if p.group is not None})
            self.state.replace_unbound_pods(p.unbound for p in pods if p.unbound is not None)
            return self._mark_synced("pods")
        self._submit(apply, wait=True)

    def _skip_pod_line(self, line: bytes) -> str | None:
        return skipped_pod_event(line, self._pod_needles, self._held_pods)

    def _apply_pod(self, kind: str, obj: dict[str, Any]) -> None:
        gone = kind == "DELETED"
        node, gpus = (None, {}) if gone else pod_gpu_requests(obj, self.catalog.resources)
        unbound = None if gone else unbound_gpu_pod(obj, self.catalog.resources)
        uid = (obj.get("metadata") or {}).get("uid")
        # what the applier needs, not the Pod: a backlog of queued events holds no whole Pods
        key, group, claim = _pod_key(obj), pod_group(obj), extended_resource_claim(obj)
        if (node and gpus) or unbound is not None:
            self._held_pods.add(key)
        else:
            self._held_pods.discard(key)

        def apply() -> bool:
            was = self.state.unbound_pods.get(uid) if isinstance(uid, str) and uid else None
            if was is not None and node is not None and gpus:
                # the inventory the scheduler bound against: every change before this one, published
                # now, but for the Pod's own DRA claim, which the claims' watch may have delivered first
                self._flush()
                bind = (was, node, self.state.snapshot, self.state.counted_for(claim, node))
                # outside the lock: the other watches need not wait while the bind is judged
                self._after.append(lambda: self.observer.bound(*bind))
            accounted = self.state.set_pod(key, node, gpus, group)
            known = self.state.set_unbound_pod(uid, unbound) if isinstance(uid, str) and uid else False
            return accounted or known
        self._submit(apply)

    # --- DRA ----------------------------------------------------------------------------
    def _reduce_slice(self, obj: dict[str, Any]) -> SliceInfo | None:
        return slice_from_object(obj, self.catalog)

    def _replace_slices(self, infos: list[SliceInfo]) -> None:
        def apply() -> bool:
            self.state.replace_slices(infos)
            return self._mark_synced("resourceslices")
        self._submit(apply, wait=True)

    def _apply_slice(self, kind: str, obj: dict[str, Any]) -> None:
        info = None if kind == "DELETED" else self._reduce_slice(obj)
        name = str((obj.get("metadata") or {}).get("name"))
        self._submit(lambda: self.state.upsert_slice(info) if info is not None else self.state.remove_slice(name))

    def _replace_classes(self, infos: list[DeviceClassInfo]) -> None:
        def apply() -> bool:
            self.state.replace_device_classes(infos)
            return self._mark_synced("deviceclasses")
        self._submit(apply, wait=True)

    def _apply_class(self, kind: str, obj: dict[str, Any]) -> None:
        info = None if kind == "DELETED" else device_class_from_object(obj)
        name = str((obj.get("metadata") or {}).get("name"))
        self._submit(lambda: self.state.upsert_device_class(info) if info is not None
                     else self.state.remove_device_class(name))

    def _replace_claims(self, claims: list[tuple[str, frozenset[DeviceId]]]) -> None:
        def apply() -> bool:
            self.state.replace_claims(claims, read="resourceclaims" not in self._off)
            return self._mark_synced("resourceclaims")
        self._submit(apply, wait=True)

    def _apply_claim(self, kind: str, obj: dict[str, Any]) -> None:
        key, devices = claim_from_object(obj)
        held = frozenset() if kind == "DELETED" else devices
        self._submit(lambda: self.state.set_claim(key, held))

    # --- node pools ------------------------------------------------------------------
    def _reduce_pools(self, obj: dict[str, Any]) -> tuple[str, tuple[Pool, ...]]:
        return str((obj.get("metadata") or {}).get("name")), pools_from_object(obj, self.catalog)

    def _replace_pools(self, pools: list[tuple[str, tuple[Pool, ...]]]) -> None:
        def apply() -> bool:
            self.state.replace_pools(pools)
            return self._mark_synced("nodepools")
        self._submit(apply, wait=True)

    def _apply_pools(self, kind: str, obj: dict[str, Any]) -> None:
        name, pools = self._reduce_pools(obj)
        held = () if kind == "DELETED" else pools
        self._submit(lambda: self.state.set_pools(name, held))

    def _pools_turned(self, name: str, reason: str | None) -> None:
        """NodePools went off (not served: no Karpenter; not allowed) or came back."""
        def apply() -> bool:
            self.state.pools_off = reason
            if reason is not None:
                self.state.node_pools = None
            return self._mark_synced(name)
        self._submit(apply, wait=True)
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
        dra_off = self.dra_off()

        def apply() -> bool:
            if reason is not None and name == "resourceslices":
                self.state.replace_slices([])
            elif reason is not None and name == "deviceclasses":
                self.state.replace_device_classes([])
            elif name == "resourceclaims":
                self.state.replace_claims([], read=reason is None)
            self.state.dra_off = dra_off
            # an answer like a list: the reflector counts as synced (a resource back on lists next)
            return self._mark_synced(name)
        self._submit(apply, wait=True)
        now_off = dra_off
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

    def _mark_synced(self, name: str) -> bool:
        """A full list is in the state: always published (True). Under the state's lock."""
        # Counted here, under the state's lock, not from the reflectors' own flags: a reflector sets its
        # flag after replace() returns, so two lists ending together could each see the other unfinished
        # and leave the snapshot unsynced, refusing every GPU Pod, until the next relist.
        self._listed.add(name)
        was = self.state.synced
        self.state.synced = self._listed >= {r.name for r in self.reflectors}
        if self.state.synced and not was:
            self.observer.synced()
        return True


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
