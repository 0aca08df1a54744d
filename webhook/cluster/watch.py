"""The live inventory: list, then watch, Nodes, Namespaces and GPU Pods, the ResourceSlices,
DeviceClasses and ResourceClaims of Dynamic Resource Allocation, and Karpenter's NodePools, and keep
InventoryState current.

I/O only; what an object means is decided in webhook/core/view. The watches are modules of their own
(nodes_watch, pods_watch, dra_watch, pools_watch, heralds, over reflector.py); LiveInventory here is the view they
feed. Each gunicorn worker runs its own
reflectors (threads do not survive fork, and a worker must never serve from a view nobody updates).

Each reflector's thread reads its watch, parses and reduces each event, and queues the change; one
applier thread applies what is queued in batches, under the state's lock, and publishes once per
batch (client-go's reflector, queue and processor). A burst of thousands of node events then costs
one snapshot per batch, and what has been read but is not yet applied is there to be measured:
lag_seconds() is the age of the oldest such event, what /readyz and the lag gauge report.

Here: LiveInventory, the view the watches feed (the state, the queue, its applier, the published
snapshot) and what serving asks of it. Elsewhere: the reflector that lists and watches one resource and what
it does about real API servers (reflector.py); a watch per resource family, which reduces what its reflector
reads into changes (nodes_watch.py, pods_watch.py, dra_watch.py, pools_watch.py, heralds.py, through
feed.py); what the inventory tells (observer.py); how the cluster is reached (kube_config.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import kubernetes

from ..core.admission.planner import NamespacePolicy, UnreadNamespace
from ..core.admission.review import load_json
from ..core.catalog.model import Catalog, GpuType
from ..core.view.dra import DeviceProblem
from ..core.view.inventory import InventoryState
from ..core.view.namespaces import namespace_info_from_object
from ..core.view.snapshot import Snapshot
from .dra_watch import DraWatch
from .heralds import DRA_API_SERVICE, HERALDS, NODEPOOL_CRD, Herald, herald_watches, says_served
from .kube_config import SERVICE_ACCOUNT_TOKEN, check_kube_config
from .nodes_watch import NamespacesWatch, NodesWatch
from .observer import InventoryObserver, NoObserver
from .pods_watch import UNFINISHED_PODS, PodsWatch
from .pools_watch import PoolsWatch
from .reflector import BACKOFF_SECONDS, DRA_GROUP, OFF_RECHECK_SECONDS, RESTART_REASONS, Reflector, _events, brief

# What callers import from here: the live inventory, and the parts of its watches that other cluster modules,
# the tests and bench/ name as watch.NAME.
__all__ = [
    "BACKOFF_SECONDS", "DRA_API_SERVICE", "DRA_GROUP", "HERALDS", "NODEPOOL_CRD", "OFF_RECHECK_SECONDS",
    "SERVICE_ACCOUNT_TOKEN", "UNFINISHED_PODS", "Herald", "InventoryObserver", "LiveInventory", "NoObserver",
    "Reflector", "_events", "check_kube_config", "says_served", "start_live_inventory",
]

log = logging.getLogger("gpu_class.watch")

SYNC_WAIT_SECONDS = 15
# The applier publishes once it has applied everything queued, or after this long applying: the
# most a reader waits for an event the watch has applied behind a long burst.
MAX_BATCH_SECONDS = 0.1
# Events read and not yet applied; beyond it the watches wait (memory stays bounded, and the
# backlog waits in the connection instead).
MAX_QUEUED = 50_000
LAG_REPORT_SECONDS = 1.0  # how often the lag gauge is written
# within the API server's webhook timeout (5 s) with the decision's own time to spare
NAMESPACE_READ_TIMEOUT_SECONDS = 2.0


@dataclass
class Change:
    """An event (or a full list) read from the API server, reduced, waiting for the applier."""

    apply: Callable[[], bool]  # run under the state's lock; whether the view changed
    received: float  # monotonic time it was read
    done: threading.Event | None = None  # set once applied and published: a full list's reflector waits


class LiveInventory:
    """The view the watches feed (feed.Feed): it owns the state, applies their changes on one thread and
    publishes. An InventorySource; snapshot() is a lock-free read of the last published view."""

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
        self.logs_changes = False  # a running watch logs what changes; a one-shot read reports it in its output
        self._logged_problems: frozenset[DeviceProblem] = frozenset()
        self._logged_label_types: Mapping[str, GpuType] = {}
        self._changes: deque[Change] = deque()
        self._queued = threading.Condition()  # guards _changes
        self._applier: threading.Thread | None = None  # None: changes are applied by the thread that reads them
        self._applying_since: float | None = None  # received time of the oldest change applied, not yet published
        self._unpublished = False  # a change is applied and not yet published
        self._after: list[Callable[[], None]] = []  # to run once the lock is released (bind observers)
        # the Pods' watch is built either way, and read only where Pods are watched
        nodes, namespaces, pods = NodesWatch(self, api), NamespacesWatch(self, api), PodsWatch(self, api)
        # DRA: optional; its claims only where Pods are watched (devices taken, where Pods' requests are not
        # what counts: DRA nodes)
        dra, pools = DraWatch(self, api, claims=self.watch_pods), PoolsWatch(self, api)
        heralds = herald_watches(self, api, pools=[pools.reflector], dra=dra.reflectors)
        self.reflectors = [nodes.reflector, namespaces.reflector, *([pods.reflector] if self.watch_pods else []),
                           *dra.reflectors, pools.reflector, *(h.reflector for h in heralds)]
        # each watch's steps, which bench/ also drives by hand on an inventory it does not start
        self.nodes_watch, self.namespaces_watch, self.pods_watch = nodes, namespaces, pods
        self.dra_watch, self.pools_watch = dra, pools

    def start(self) -> LiveInventory:
        self.logs_changes = True
        self.observer.watching(tuple(r.name for r in self.reflectors), RESTART_REASONS)
        self._applier = threading.Thread(target=self._apply_loop, name="gpu-class-watch-apply", daemon=True)
        self._applier.start()
        # its own thread: the gauge keeps rising if the applier is stuck
        threading.Thread(target=self._report_lag, name="gpu-class-watch-lag", daemon=True).start()
        for r in self.reflectors:
            threading.Thread(target=r.run, name=f"gpu-class-watch-{r.name}", daemon=True).start()
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
            return UnreadNamespace(name, f"reading it from the API failed ({brief(exc)})")
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
    def submit(self, apply: Callable[[], bool], *, wait: bool = False) -> None:
        """Queue a change for the applier; `wait`: return once it is published (full lists, so that
        a reflector counts as synced, and after_list runs, only once its list is in the snapshot)."""
        if self._applier is None:  # a one-shot read: no applier thread
            with self.state.lock:
                self._unpublished |= apply()
                self.flush()
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
                self.flush()
            finally:
                self._applying_since = None
        self._run_after()
        for event in done:
            event.set()

    def flush(self) -> None:
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
        if not self.logs_changes:
            return
        new = [p for p in problems if p not in self._logged_problems]
        self._logged_problems = frozenset(problems)
        for p in new:
            log.warning("DRA devices gpu-class does not place on: %d of driver %s (%s) on %d node(s): %s",
                        p.devices, p.driver, p.product or "no productName", p.nodes, p.reason)

    def _log_label_types(self, snapshot: Snapshot) -> None:
        """Each product placed by its nodes' labels, once: its rank is a guess the catalog should replace."""
        if not self.logs_changes or snapshot.label_types is self._logged_label_types:
            return
        new = [t for name, t in snapshot.label_types.items() if name not in self._logged_label_types]
        self._logged_label_types = snapshot.label_types
        for t in new:
            log.warning("GPU product %s is in no type of the catalog: placed by its labels (%s); add it to the "
                        "catalog to rank it by its specifications", t.name,
                        t.facts.score_basis if t.facts is not None else "")

    def mark_synced(self, name: str) -> bool:
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

    def later(self, call: Callable[[], None]) -> None:
        """Run `call` once the state's lock is released: from a change, what must not hold up the applier."""
        self._after.append(call)


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
