"""Prometheus metrics, correct across gunicorn workers.

Under gunicorn, PROMETHEUS_MULTIPROC_DIR is set by the server before this module is imported, and
each worker writes its values to files there that /metrics aggregates; without it (tests, explain)
the default in-process registry is used. Label values come from the catalog only, never from an
annotation as written, so a Pod cannot add series.

Every labelled series whose labels are known at start is created at 0 then (admissions by outcome and
class, preferred types by class, Pods of groups by outcome, and those kept within a topology domain by class,
key, mode and outcome, watch restarts by resource and reason, placements by class and outcome): a series that
first appears with its first increment hides that increment from rate() and increase(). In multiprocess mode
creating the child writes its 0 to the worker's file, so /metrics shows it from the first scrape.

Placements (core/reports/fidelity.py) are judged from the watch, and every worker watches: each sees every
bind. One worker counts them, the one that holds an exclusive lock (flock) on a file in the
multiprocess directory; the kernel releases it when that worker exits, and the next worker to see a
bind takes it. So each bind is counted once, except the few a worker change falls between: binds
that one of the two workers' streams had reached and the other had not. Pending Pods are set by the
worker that answers the scrape, from its own inventory, just before it renders (`livemostrecent`).
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import ssl
import threading
import time
from collections import Counter as Tally
from typing import Any, Sequence, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess
from prometheus_client import CONTENT_TYPE_LATEST

from ..core.catalog.model import Catalog
from ..core.reports.fidelity import PLACEMENT_OUTCOMES, judge_bind, pending_by_class, waiting_by_class
from ..core.admission.groups import GroupOutcome, GroupPlan, TopologyMode
from ..core.view.pods import UnboundGpuPod
from ..core.view.snapshot import Snapshot
from ..core.admission.decision import Outcome
from ..core.admission.review import Review
from ..core.after_bind.upgrade import HELD_REASONS, Held, Move
from . import logs

CONTENT_TYPE = CONTENT_TYPE_LATEST

ADMISSIONS = Counter(
    "gpu_class_admission_requests_total", "AdmissionReviews answered, by outcome and class", ["outcome", "class"]
)
PREFERRED_TYPE = Counter(
    "gpu_class_admission_preferred_type_total", "Patched Pods by their most preferred GPU type", ["class", "type"]
)
GROUP_PODS = Counter(
    "gpu_class_group_pods_total",
    "Admitted or refused Pods with gpu-class.io/group, by what was decided for the group: started (no Pod of "
    "it bound yet: the class chose), followed (kept to the type it runs on), no-room (its size fits no type "
    "now), refused, unplaced", ["outcome"],
)
GROUP_TOPOLOGY_PODS = Counter(
    "gpu_class_group_topology_pods_total",
    "Admitted or refused Pods of groups kept within one topology domain, by class, the node label key gpu-class "
    "keeps the group within (none: Kueue's), mode (required, preferred: gpu-class keeps it; kueue: the Pod carries "
    "Kueue's Topology Aware Scheduling annotations, Kueue places it) and outcome (as gpu_class_group_pods_total)",
    ["class", "topology", "mode", "outcome"],
)
LATENCY = Histogram(
    "gpu_class_admission_duration_seconds",
    "Time from reading the body to the response, per AdmissionReview",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
INVENTORY_NODES = Gauge(
    "gpu_class_inventory_nodes", "GPU nodes in the inventory, by type and state", ["type", "state"],
    multiprocess_mode="livemax",
)
FREE_GPUS = Gauge(
    "gpu_class_inventory_free_gpus",
    "Allocatable minus requested devices of the type's resource on usable nodes, by type", ["type", "resource"],
    multiprocess_mode="livemax",
)
INVENTORY_GPUS = Gauge(
    "gpu_class_inventory_gpus",
    "Devices of the type's resource on its nodes, by type and health: unhealthy on nodes whose allocatable is below "
    "capacity or that have an unhealthyConditions condition, and DRA devices with a NoSchedule/NoExecute taint; "
    "they count as no room", ["type", "resource", "health"],
    multiprocess_mode="livemax",
)
WATCH_RESTARTS = Counter(
    "gpu_class_watch_restarts_total", "Watch restarts, by resource and reason", ["resource", "reason"]
)
LAST_CONTACT = Gauge(
    "gpu_class_inventory_last_contact_timestamp_seconds",
    "Unix time of the last list, event or bookmark, by resource (staleness = time() - this)", ["resource"],
    multiprocess_mode="livemax",
)
RESOURCE_READ = Gauge(
    "gpu_class_inventory_resource_read",
    "1 when every live worker reads the resource, 0 when one does not (an optional API not served, or not allowed: "
    "the logs say which); by resource", ["resource"], multiprocess_mode="livemin",
)
SYNCED_WORKERS = Gauge(
    "gpu_class_inventory_synced_workers",
    "Workers of this replica whose inventory holds a first full list of every resource it watches (a worker answers "
    "only once synced, or after 15 s, refusing GPU Pods until it is)", multiprocess_mode="livesum",
)
INVENTORY_LAG = Gauge(
    "gpu_class_inventory_lag_seconds",
    "Age of the oldest watch event this worker has read and not yet applied to the inventory it answers from "
    "(0: caught up); the most of any worker", multiprocess_mode="livemax",
)
CERT_EXPIRY = Gauge(
    "gpu_class_certificate_expiry_timestamp_seconds", "Unix time the serving certificate expires",
    multiprocess_mode="livemin",
)

PLACEMENTS = Counter(
    "gpu_class_placements_total",
    "Pods gpu-class placed, counted when bound, by class and how the node compares with the class's promise at "
    "that moment: best, fallback (every better type full), broken (a better type or node had room)",
    ["class", "outcome"],
)
PENDING = Gauge(
    "gpu_class_pending_pods",
    "Pods gpu-class placed that no node holds yet, by class, waiting longer than longer_than since creation",
    ["class", "longer_than"], multiprocess_mode="livemostrecent",
)
WAITING = Gauge(
    "gpu_class_waiting_pods",
    "Pods gpu-class placed that wait for their best type within their gpu-class.io/max-wait, by class: by their "
    "choice (gpu_class_pending_pods counts them only once it is spent)", ["class"], multiprocess_mode="livemostrecent",
)
WAITED = Histogram(
    "gpu_class_wait_seconds",
    "Time from creation to bind of Pods with a gpu-class.io/max-wait, by class and outcome: best_type (bound on the "
    "type it waited for) or fell_back", ["class", "outcome"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
)
LABEL_PLACED = Gauge(
    "gpu_class_label_placed_nodes",
    "GPU nodes of a product no type of the catalog claims, placed by their GPU Feature Discovery labels in the "
    "classes defined by requirements, by product: add the product to the catalog", ["product"],
    multiprocess_mode="livemax",
)
# the upgrader's (`gpuclass upgrader`, its own process: the default registry, served by serve_upgrade_metrics)
UPGRADE_MOVES = Counter(
    "gpu_class_upgrade_moves_total",
    "Pods (or groups) the upgrader evicted so that they move up, by class, the type they ran on and the better "
    "type that had room", ["class", "from_type", "to_type"],
)
UPGRADE_HELD = Gauge(
    "gpu_class_upgrade_held_back",
    "Opted-in Pods a better type has room for, held back at the upgrader's last pass, by reason: settle (the room "
    "is younger than the settle time), min_time (too short on its node), window (moved within the window), rate "
    "(a move of its workload in flight, or the cluster-wide rate), group (a group that cannot move whole), pdb "
    "(a PodDisruptionBudget refused)", ["reason"],
)
UPGRADE_EVICTIONS = Counter(
    "gpu_class_upgrade_evictions_total",
    "Evictions the upgrader asked for, by outcome: evicted, pdb (429: a PodDisruptionBudget allows none now), "
    "gone (404), error", ["outcome"],
)
UPGRADE_LEADER = Gauge("gpu_class_upgrade_leader", "1 while this upgrader replica holds the Lease")
EVICTION_OUTCOMES = ("evicted", "pdb", "gone", "error")

log = logging.getLogger("gpu_class.placement")
UNKNOWN = "unknown"
NO_CLASS = "none"
NO_TOPOLOGY = "none"  # a group whose domain Kueue chooses: gpu-class keeps it within none
# answered without a decision, so without a class; the last three by the worker before the app saw the request
# (intake.py): not read whole by its deadline, a body over the limit, no buffer memory free by the deadline
REQUEST_CUTS = ("too-slow", "too-large", "busy")
REQUEST_FAILURES = ("bad-request", "error", *REQUEST_CUTS)


_children: dict[tuple[Any, ...], Any] = {}


def _child(metric: Any, *labels: str) -> Any:
    """metric.labels(...) takes a lock and builds a key on every call; label sets are few, keep them."""
    key = (metric, labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def observe_admission(review: Review | None, duration_seconds: float, catalog: Catalog, outcome: str | None = None) -> None:
    decision = review.decision if review is not None else None
    if decision is None or decision.class_name is None:
        class_name = NO_CLASS
    else:
        class_name = decision.class_name if decision.class_name in catalog.classes else UNKNOWN
    _child(ADMISSIONS, outcome or (decision.outcome if decision else "error"), class_name).inc()
    if decision is not None and decision.placement is not None and decision.placement.types:
        _child(PREFERRED_TYPE, class_name, decision.placement.types[0]).inc()
    if decision is not None and decision.group is not None:
        _child(GROUP_PODS, decision.group.outcome).inc()
        topology = group_topology_labels(decision.group, class_name, catalog)
        if topology is not None:
            _child(GROUP_TOPOLOGY_PODS, *topology).inc()
    LATENCY.observe(duration_seconds)


def group_topology_labels(group: GroupPlan, class_name: str, catalog: Catalog) -> tuple[str, str, str, str] | None:
    """(class, topology, mode, outcome) of a Pod whose group is kept within a domain; None when none keeps it.
    The key is one of the catalog's topologyLabels (the Pod's annotation was checked against them): never Kueue's
    level, which the Pod writes."""
    mode = group.topology_mode
    if mode is None:
        return None
    key = NO_TOPOLOGY if group.topology is None or mode == "kueue" else group.topology.key
    return class_name, key if key == NO_TOPOLOGY or key in catalog.topology_labels else UNKNOWN, mode, group.outcome


def group_topology_label_sets(catalog: Catalog) -> list[tuple[str, str, str, str]]:
    """Every (class, topology, mode, outcome) observe_admission can record with this catalog for a known class."""
    kept: list[tuple[str, TopologyMode]] = [(k, m) for k in catalog.topology_labels for m in ("required", "preferred")]
    return [(c, k, m, o) for c in catalog.classes for k, m in [*kept, (NO_TOPOLOGY, "kueue")]
            for o in get_args(GroupOutcome)]


def observe_cut(outcome: str) -> None:
    """A /mutate request the worker answered itself (refused or cut, intake.py): no review, no duration."""
    _child(ADMISSIONS, outcome if outcome in REQUEST_FAILURES else "bad-request", NO_CLASS).inc()


def admission_label_sets(catalog: Catalog) -> list[tuple[str, str]]:
    """Every (outcome, class) observe_admission can record with this catalog."""
    no_class = [o for o in get_args(Outcome) if o != "patched" and o != "admitted-unsatisfiable"]
    labels = [(o, NO_CLASS) for o in [*no_class, *REQUEST_FAILURES]] + [("refused", UNKNOWN)]
    # a decision with a class is never out of scope; admitted-unsatisfiable needs onUnsatisfiable: admit
    with_class = ["patched", "refused", *(["admitted-unsatisfiable"] if catalog.on_unsatisfiable == "admit" else [])]
    return labels + [(o, c) for c in catalog.classes for o in with_class]


def preferred_type_label_sets(catalog: Catalog) -> list[tuple[str, str]]:
    return [(c.name, t) for c in catalog.classes.values() for t in c.types]


def start_admission_series(catalog: Catalog) -> None:
    for labels in admission_label_sets(catalog):
        _child(ADMISSIONS, *labels)
    for labels in preferred_type_label_sets(catalog):
        _child(PREFERRED_TYPE, *labels)
    for outcome in get_args(GroupOutcome):
        _child(GROUP_PODS, outcome)
    for topology in group_topology_label_sets(catalog):
        _child(GROUP_TOPOLOGY_PODS, *topology)


def observe_inventory(snapshot: Snapshot, catalog: Catalog) -> None:
    for type_name, gpu_type in catalog.types.items():
        groups = snapshot.groups(type_name)
        nodes = sum(g.nodes for g in groups)
        not_ready = sum(g.not_ready for g in groups)
        cordoned = sum(g.cordoned for g in groups)
        _child(INVENTORY_NODES, type_name, "ready").set(nodes - not_ready - cordoned)
        _child(INVENTORY_NODES, type_name, "not_ready").set(not_ready)
        _child(INVENTORY_NODES, type_name, "cordoned").set(cordoned)
        # each type is counted in its own resource: a MIG slice held is not a whole GPU used
        _child(FREE_GPUS, type_name, gpu_type.resource).set(sum(g.free_gpus for g in groups))
        unhealthy = sum(g.unhealthy_gpus for g in groups)
        _child(INVENTORY_GPUS, type_name, gpu_type.resource, "healthy").set(sum(g.gpus for g in groups) - unhealthy)
        _child(INVENTORY_GPUS, type_name, gpu_type.resource, "unhealthy").set(unhealthy)
    _child(INVENTORY_NODES, UNKNOWN, "ready").set(sum(g.nodes for g in snapshot.unknown_groups))
    for product in _label_placed_seen - snapshot.label_types.keys():  # a product gone, or now in the catalog
        _child(LABEL_PLACED, product).set(0)
    for product in snapshot.label_types:
        _label_placed_seen.add(product)
        _child(LABEL_PLACED, product).set(sum(g.nodes for g in snapshot.groups(product)))


_label_placed_seen: set[str] = set()  # products once placed by their labels: their series stay, at 0 when gone


def observe_watch_restart(resource: str, reason: str) -> None:
    _child(WATCH_RESTARTS, resource, reason).inc()


def observe_contact(resource: str) -> None:
    _child(LAST_CONTACT, resource).set(time.time())  # on every watch event


def observe_reading(resource: str, read: bool) -> None:
    _child(RESOURCE_READ, resource).set(1 if read else 0)


def observe_synced() -> None:
    SYNCED_WORKERS.set(1)


def observe_lag(seconds: float) -> None:
    INVENTORY_LAG.set(seconds)


def observe_certificate(not_after_unix: float) -> None:
    CERT_EXPIRY.set(not_after_unix)


def observe_pending(snapshot: Snapshot, catalog: Catalog, now_seconds: float) -> None:
    """The pending and waiting gauges from this worker's inventory (before a scrape); nothing when Pods are not
    watched."""
    counts = pending_by_class(snapshot, catalog, now_seconds)
    for class_name, by_bound in (counts or {}).items():
        for label, n in by_bound.items():
            _child(PENDING, class_name, label).set(n)
    for class_name, n in (waiting_by_class(snapshot, catalog, now_seconds) or {}).items():
        _child(WAITING, class_name).set(n)


LOCK_FILE = "placements.lock"


class BindCounting:
    """Whether this worker counts binds: it holds the lock, or it is the only process (no multiprocess directory)."""

    def __init__(self, directory: str | None) -> None:
        self._path = None if directory is None else os.path.join(directory, LOCK_FILE)
        self._fd: int | None = None
        self.holding = directory is None

    def mine(self) -> bool:
        if self.holding or self._path is None:
            return self.holding
        if self._fd is None:  # opened in the worker: a descriptor inherited from the master would be shared
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.holding = True
        return True


def observe_bind(pod: UnboundGpuPod, node: str, before: Snapshot, catalog: Catalog, counted: int = 0,
                 now_seconds: float | None = None) -> None:
    if pod.max_wait_seconds is not None and pod.created_seconds is not None and pod.placed:
        info = before.nodes.get(node)
        outcome = "best_type" if info is not None and info.offer(pod.types[0]) is not None else "fell_back"
        waited = (time.time() if now_seconds is None else now_seconds) - pod.created_seconds
        _child(WAITED, pod.class_name or "", outcome).observe(max(waited, 0.0))
    verdict = judge_bind(pod, node, before, catalog, counted=counted)
    if verdict is None:
        return
    _child(PLACEMENTS, verdict.class_name, verdict.outcome).inc()
    if verdict.outcome != "best" and log.isEnabledFor(logging.INFO):
        logs.write_record(log.name, "placement", {
            "namespace": pod.namespace, "pod": pod.name, "class": verdict.class_name, "outcome": verdict.outcome,
            "node": node, "type": verdict.type_name, "better": verdict.better or None})


class InventoryMetrics:
    """Feeds the inventory gauges, watch counters and placements from the live inventory's callbacks.

    The gauges follow the published snapshots at most once per `interval_seconds`: the first
    snapshot after a quiet interval at once, the last of a burst when the interval ends. The watch
    publishes on every change, and a burst of Pod binds publishes hundreds a second; writing every
    type's gauges for each held the GIL from the admissions (bench/RESULTS.md, "On the real API
    server": +20 ms to the median create through the API server during 1,000 binds). Scrapes come
    every 15 s or more.
    """

    def __init__(self, catalog: Catalog, interval_seconds: float = 1.0) -> None:
        self.catalog = catalog
        self.interval_seconds = interval_seconds
        self._lock = threading.Lock()  # one writer of the gauges at a time: the watch's thread or the timer
        self._written_at = -math.inf
        self._pending: Snapshot | None = None
        self._timer: threading.Timer | None = None
        self.counting = BindCounting(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None)

    def watching(self, resources: tuple[str, ...], reasons: tuple[str, ...]) -> None:
        for resource in resources:
            for reason in reasons:
                _child(WATCH_RESTARTS, resource, reason)
        if "pods" in resources:
            for class_name in self.catalog.classes:
                for outcome in PLACEMENT_OUTCOMES:
                    _child(PLACEMENTS, class_name, outcome)

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        if self.counting.mine():
            observe_bind(pod, node, before, self.catalog, counted)

    def restarted(self, resource: str, reason: str) -> None:
        observe_watch_restart(resource, reason)

    def contacted(self, resource: str) -> None:
        observe_contact(resource)

    def reading(self, resource: str, read: bool) -> None:
        observe_reading(resource, read)

    def synced(self) -> None:
        observe_synced()

    def lagging(self, seconds: float) -> None:
        observe_lag(seconds)

    def published(self, snapshot: Snapshot) -> None:
        with self._lock:
            wait = self._written_at + self.interval_seconds - time.monotonic()
            if wait <= 0 and self._timer is None:
                self._write(snapshot)
                return
            self._pending = snapshot
            if self._timer is None:
                self._timer = threading.Timer(max(wait, 0.0), self._flush)
                self._timer.daemon = True
                self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._pending is not None:
                self._write(self._pending)

    def _write(self, snapshot: Snapshot) -> None:
        self._pending = None
        self._written_at = time.monotonic()
        observe_inventory(snapshot, self.catalog)


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE


def mark_worker_dead(pid: int) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class UpgradeMetrics:
    """The upgrader's observer (webhook.cluster.upgrader.UpgradeObserver). Label values come from the catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        for reason in HELD_REASONS:
            _child(UPGRADE_HELD, reason).set(0)
        for outcome in EVICTION_OUTCOMES:
            _child(UPGRADE_EVICTIONS, outcome)
        UPGRADE_LEADER.set(0)

    def moved(self, move: Move) -> None:
        class_name = move.class_name if move.class_name in self.catalog.classes else NO_CLASS
        _child(UPGRADE_MOVES, str(class_name), move.from_type, move.to_type).inc()

    def held(self, held: Sequence[Held]) -> None:
        counts = Tally(h.reason for h in held for _ in h.pods)
        for reason in HELD_REASONS:
            _child(UPGRADE_HELD, reason).set(counts.get(reason, 0))

    def evicted(self, outcome: str) -> None:
        _child(UPGRADE_EVICTIONS, outcome if outcome in EVICTION_OUTCOMES else "error").inc()

    def leading(self, leader: bool) -> None:
        UPGRADE_LEADER.set(1 if leader else 0)


def check_metrics_args(args: Any) -> None:
    """The upgrader's metrics listener, checked at start: InputError says what to fix."""
    from ..cluster.source import InputError, check_live_config
    from ..core.access.metrics_gate import insecure_combination

    why = insecure_combination(args.metrics_auth, args.metrics_address)
    if why is None and (args.metrics_cert_file is None) != (args.metrics_key_file is None):
        why = "--metrics-cert-file and --metrics-key-file go together"
    if why:
        raise InputError(why)
    if args.metrics_auth == "delegated":
        check_live_config(args.kubeconfig)
    if args.metrics_cert_file:
        from .metrics_listener import file_context

        try:
            file_context(args.metrics_cert_file, args.metrics_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"cannot use --metrics-cert-file {args.metrics_cert_file} / --metrics-key-file "
                             f"{args.metrics_key_file}: {exc}") from None


def serve_upgrade_metrics(port: int, address: str, auth: str, kubeconfig: str | None,
                          cert_pair: tuple[str | None, str | None]) -> None:
    """GET /metrics of the upgrader's process, over TLS and behind the same check as the webhook's, on a thread."""
    from prometheus_client import REGISTRY

    from ..cluster.source import access_reviewer
    from ..core.access.metrics_gate import Gate, MetricsGate, OpenGate
    from .metrics_listener import file_context, gated_metrics, self_signed_context, serve_metrics_in_thread

    gate: Gate = OpenGate() if auth == "none" else MetricsGate(access_reviewer(kubeconfig), time.monotonic)
    cert_file, key_file = cert_pair
    context = (file_context(cert_file, key_file) if cert_file and key_file
               else self_signed_context(("gpu-class-upgrader", "localhost")))
    serve_metrics_in_thread(gated_metrics(gate, lambda: (generate_latest(REGISTRY), CONTENT_TYPE)), address, port,
                            context)
