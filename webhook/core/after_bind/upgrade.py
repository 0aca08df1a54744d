"""Which Pods to move up to a better type of their class now that it has room (`gpuclass upgrader`). Pure.

The strict order is a promise at bind time. A Pod that opted in (gpu-class.io/upgrade: "true", or its
class's `upgrade: true` in the catalog) and landed on a lesser type is evicted, so its controller
recreates it and the strict path places the new Pod on the best type with room, only when all of:

- its controller recreates it: the controller ownerReference names a ReplicaSet, StatefulSet, Job
  that replaces failed Pods, or LeaderWorkerSet, and the cluster layer found that object by UID (a
  reference the Pod's author wrote to nothing, or to another object, moves nothing); a bare Pod never;
- gpu-class placed it: its required node affinity keeps it to the types its gpu-class.io/types lists
  (an annotation anyone may write is believed only as far as the scheduler enforces it);
- a type strictly better in the Pod's own order (the one the webhook wrote and the extender keeps,
  extender.type_order) has room for it now, after the Pods waiting for a node have taken theirs in
  that order, and has had such room for `settle_seconds` (a burst of free GPUs moves nothing);
- it has run on its node for `min_on_node_seconds`;
- it is no replacement of a Pod its workload moved within `window_seconds`;
- its workload has no move in flight (a Pod terminating, waiting for a node, or not Ready), and the
  cluster has made fewer than `moves_per_minute` moves in the last minute.

Room is reserved on a node as each move is decided, so two Pods are not sent to one free slot. A
group (gpu-class.io/group) moves as one: every bound Pod of it, onto one type with room for all of
them on one value of the label its Pods meet on, or none of it. Never downward: only a better type
is a target, so a Pod that moved lands where no later decision moves it again while that type stays
its best with room.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Mapping, Sequence

from ..view.affinity import required_terms
from ..admission.annotations import EXCLUDE_ANNOTATION, UPGRADE_ANNOTATION
from ..catalog.model import Catalog
from ..scheduling.extender import PodNeeds, PodProblem, ordering_for, pod_offer, read_pod, type_order
from ..view.nodes import Offer, tolerates_all
from ..view.pods import GroupName, enforced_types, pod_group, split_types, timestamp_seconds
from ..view.snapshot import Snapshot


# (API group, kind) of the controllers that recreate a Pod evicted from them
RECREATING_KINDS = frozenset({
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
})

HeldReason = Literal["settle", "min_time", "window", "rate", "group", "pdb"]
HELD_REASONS: tuple[HeldReason, ...] = ("settle", "min_time", "window", "rate", "group", "pdb")


@dataclass(frozen=True)
class UpgradeSettings:
    """How cautious the upgrader is; seconds throughout."""

    settle_seconds: float = 60.0
    min_on_node_seconds: float = 300.0
    window_seconds: float = 3600.0
    moves_per_minute: int = 6  # cluster-wide
    in_flight_per_workload: int = 1


@dataclass(frozen=True)
class Owner:
    """A Pod's controller as read from the API by UID."""

    api_group: str
    kind: str
    namespace: str
    name: str
    uid: str
    workload: str  # what the per-workload rate counts: "kind/namespace/name" of the Deployment above a ReplicaSet, else its own
    recreates: bool = True  # False for a Job that would not replace an evicted Pod


def controller_ref(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with controller: true, as the API holds it."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller") is True), None)


def ref_group(ref: Mapping[str, Any]) -> str:
    api_version = str(ref.get("apiVersion") or "")
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def is_recreating_ref(ref: Mapping[str, Any] | None) -> bool:
    return ref is not None and (ref_group(ref), str(ref.get("kind") or "")) in RECREATING_KINDS


def job_recreates(job: Mapping[str, Any]) -> bool:
    """Whether a Job replaces a Pod that an eviction ends: an indexed Job, or one with retries left to spend.

    An evicted Pod of a Job fails; the Job creates another while its backoffLimit (6 unless set) allows.
    A podFailurePolicy that fails the Job on a disruption would end it instead: such a Job is never moved.
    """
    spec = job.get("spec") or {}
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        on_disruption = any(c.get("type") == "DisruptionTarget" for c in rule.get("onPodConditions") or [])
        if on_disruption and rule.get("action") == "FailJob":
            return False
    if spec.get("completionMode") == "Indexed":
        return int(spec.get("backoffLimitPerIndex", spec.get("backoffLimit", 6)) or 0) > 0
    return int(spec.get("backoffLimit", 6) or 0) > 0


def is_opted_in(pod: Mapping[str, Any], catalog: Catalog, class_name: str | None) -> bool:
    """The Pod's annotation decides ("true" / "false"); without one, its class's catalog default (off)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(UPGRADE_ANNOTATION)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    gpu_class = catalog.classes.get(class_name) if class_name else None
    return gpu_class is not None and gpu_class.upgrade


@dataclass(frozen=True)
class PodState:
    """What the decision reads of one Pod that gpu-class placed."""

    uid: str
    namespace: str
    name: str
    needs: PodNeeds
    node: str | None
    opted_in: bool
    owner: Owner | None  # its controller when that recreates it and was found by UID; else None
    group: GroupName | None = None
    created_seconds: float | None = None
    on_node_since_seconds: float | None = None  # status.startTime, else creation
    ready: bool = False
    terminating: bool = False
    node_selector: Mapping[str, str] = field(default_factory=dict)  # spec.nodeSelector
    tolerations: tuple[Mapping[str, Any], ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def read_pod_state(pod: Mapping[str, Any], catalog: Catalog, owners: Mapping[str, Owner]) -> PodState | None:
    """The Pod as the decision reads it; None for a Pod gpu-class did not place, or that cannot be read.
    gpu-class placed a Pod when its required node affinity keeps it to the gpu-class.io/types it lists (judged
    with `catalog` alone: one kept to DRA nodes by hostname, or to a product no type claims, is not moved).

    `owners` are the controllers the cluster layer read by UID: the Pod's owner counts only when its
    controller reference names one of them, with the same kind and name.
    """
    try:
        needs = read_pod(pod, catalog)
    except PodProblem:
        return None
    metadata = pod.get("metadata") or {}
    uid = metadata.get("uid")
    if needs is None or not isinstance(uid, str) or not uid:
        return None
    # gpu-class.io/types only as far as the Pod's own affinity enforces it: a forged list would move
    # the Pod, and take room that other namespaces' Pods are moved by (pods.enforced_types)
    needs = replace(needs, types=enforced_types(needs.types, required_terms(pod), (needs.resource,), catalog))
    if not needs.types:
        return None
    group = pod_group(pod)
    if group is not None:
        needs = _group_types(needs, metadata.get("annotations") or {}, catalog)
    ref = controller_ref(pod)
    owner = owners.get(str(ref.get("uid"))) if ref is not None and is_recreating_ref(ref) else None
    if owner is not None and ref is not None and not (
            owner.kind == ref.get("kind") and owner.name == ref.get("name") and owner.api_group == ref_group(ref)
            and owner.namespace == metadata.get("namespace") and owner.recreates):
        owner = None
    status = pod.get("status") or {}
    created = timestamp_seconds(metadata.get("creationTimestamp"))
    started = timestamp_seconds(status.get("startTime"))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    return PodState(
        uid=uid, namespace=str(metadata.get("namespace") or ""), name=str(metadata.get("name") or ""), needs=needs,
        node=(pod.get("spec") or {}).get("nodeName") or None, opted_in=is_opted_in(pod, catalog, needs.class_name),
        owner=owner, group=group, created_seconds=created,
        on_node_since_seconds=started if started is not None else created, ready=ready,
        terminating=bool(metadata.get("deletionTimestamp")),
        node_selector={str(k): str(v) for k, v in selector.items()} if isinstance(selector, dict) else {},
        tolerations=tuple(t for t in spec.get("tolerations") or [] if isinstance(t, dict)))


def _group_types(needs: PodNeeds, annotations: Mapping[str, Any], catalog: Catalog) -> PodNeeds:
    """A group's Pod with its class's types: the webhook wrote only those with room for the whole group then.

    The class's types of the Pod's resource, less those it excludes (gpu-class.io/exclude-types), in the class's
    order; only for the strategies that rank types (performance, cost). Its other needs (memory, precisions) are
    not read again: a group sent back by them is held by the window.
    """
    gpu_class = catalog.classes.get(needs.class_name) if needs.class_name else None
    if gpu_class is None or gpu_class.strategy not in ("performance", "cost"):
        return needs
    excluded = set(split_types(annotations.get(EXCLUDE_ANNOTATION)))
    extra = tuple(t for t in gpu_class.types if t not in needs.types and t not in excluded
                  and t in catalog.types and catalog.types[t].resource == needs.resource)
    return replace(needs, types=(*needs.types, *extra))


# (type, resource, GPUs per Pod, Pods): room of one kind the settle time is kept for
RoomKey = tuple[str, str, int, int]


@dataclass(frozen=True)
class Eviction:
    at_seconds: float
    pod_uid: str
    pod: str  # namespace/name
    workload: str


@dataclass(frozen=True)
class History:
    """What the upgrader remembers between passes; the decision returns the next one."""

    room_since: Mapping[RoomKey, float] = field(default_factory=dict)  # since when such room has been there, unbroken
    evictions: tuple[Eviction, ...] = ()  # within the window


@dataclass(frozen=True)
class Move:
    pods: tuple[PodState, ...]  # one, or every bound Pod of a group
    from_type: str
    to_type: str
    class_name: str | None
    room_seconds: float  # how long to_type had had room for them

    def message(self) -> str:
        return (f"moved from {self.from_type} to {self.to_type}: {self.to_type} had room for "
                f"{self.room_seconds:.0f} s")


@dataclass(frozen=True)
class Held:
    pods: tuple[PodState, ...]
    reason: HeldReason
    from_type: str
    to_type: str
    detail: str


@dataclass(frozen=True)
class UpgradeDecision:
    moves: tuple[Move, ...]
    held: tuple[Held, ...]
    history: History


class _Room:
    """Free devices per node of the snapshot, less what this pass has reserved.

    A pass asks it once per candidate Pod, and most candidates of a busy cluster share their needs: the
    type's nodes are listed once per pass, and an answer is kept for the Pods that ask the same until a
    reservation changes the room, so a pass costs what its distinct needs cost, not its Pods."""

    def __init__(self, snapshot: Snapshot, node_labels: Mapping[str, Mapping[str, str]] | None) -> None:
        self.snapshot = snapshot
        self.node_labels = node_labels
        self.reserved: dict[tuple[str, str], int] = defaultdict(int)
        self._nodes: dict[tuple[str, str], list[tuple[str, Offer]]] = {}
        self._placed: dict[Any, list[tuple[str, str]] | None] = {}

    def free(self, node: str, offer: Offer) -> int:
        return self.snapshot.free(node, offer) - self.reserved[(node, offer.resource)]

    def admits(self, name: str, pod: PodState | None) -> bool:
        """Whether the node may take the Pod: its nodeSelector (where node labels are known) and the node's
        taints other than the GPU ones. A waiting Pod (None) is taken to fit anywhere its types allow."""
        if pod is None:
            return True
        info = self.snapshot.nodes[name]
        if not tolerates_all(pod.tolerations, info.reserved):
            return False
        labels = None if self.node_labels is None else self.node_labels.get(name, {})
        return labels is None or all(labels.get(k) == v for k, v in pod.node_selector.items())

    def nodes_of(self, type_name: str, needs: PodNeeds, pod: PodState | None) -> list[tuple[str, Offer]]:
        """The type's ready, uncordoned nodes that offer it as the Pod's resource and admit it, by name."""
        key = (type_name, needs.resource)
        typed = self._nodes.get(key)
        if typed is None:
            typed = []
            for name in sorted(self.snapshot.nodes):
                info = self.snapshot.nodes[name]
                offer = info.offer(type_name)
                if offer is not None and offer.resource == needs.resource and info.schedulable:
                    typed.append((name, offer))
            self._nodes[key] = typed
        return [(name, offer) for name, offer in typed if self.admits(name, pod)]

    def place(self, type_name: str, needs: PodNeeds, count: int,
              pod: PodState | None = None) -> list[tuple[str, str]] | None:
        """Nodes for `count` Pods of `needs` on one value of the label they meet on, tightest first; None: no room."""
        # what the answer depends on: the needs and, for a Pod, what admits it to a node
        key = (type_name, needs.resource, needs.gpus, count, pod is None,
               None if pod is None else tuple(sorted(pod.node_selector.items())),
               None if pod is None else tuple(tuple(sorted(t.items())) for t in pod.tolerations))
        try:
            if key in self._placed:
                return self._placed[key]
        except TypeError:  # a toleration holding something unhashable: answer without keeping it
            return self._place(type_name, needs, count, pod)
        found = self._placed[key] = self._place(type_name, needs, count, pod)
        return found

    def _place(self, type_name: str, needs: PodNeeds, count: int,
               pod: PodState | None) -> list[tuple[str, str]] | None:
        by_value: dict[tuple[str, str], list[tuple[str, Offer]]] = defaultdict(list)
        for name, offer in self.nodes_of(type_name, needs, pod):
            # a lone Pod meets no one: any node of the type will do
            by_value[(offer.label_key, offer.value) if count > 1 else ("", "")].append((name, offer))
        for nodes in by_value.values():
            free = {name: self.free(name, offer) for name, offer in nodes}
            chosen: list[tuple[str, str]] = []
            for _ in range(count):
                fits = [n for n, f in free.items() if f >= needs.gpus]
                if not fits:
                    break
                best = min(fits, key=lambda n: (free[n], n))  # tightest: leaves the large holes for large Pods
                free[best] -= needs.gpus
                chosen.append((best, needs.resource))
            if len(chosen) == count:
                return chosen
        return None

    def reserve(self, chosen: Iterable[tuple[str, str]], gpus: int) -> None:
        for node_resource in chosen:
            self.reserved[node_resource] += gpus
        self._placed.clear()


def _waiting_take_their_room(room: _Room, snapshot: Snapshot) -> None:
    """Pods waiting for a node get it before any Pod is moved: each on the first of its types with room, oldest first."""
    waiting = sorted((p for p in (snapshot.unbound_pods or {}).values() if p.placed and not p.gated),
                     key=lambda p: (p.created_seconds or 0.0, p.uid))
    for pod in waiting:
        needs = PodNeeds(types=pod.types, gpus=pod.devices, class_name=pod.class_name, resource=pod.resource)
        for type_name in pod.types:
            chosen = room.place(type_name, needs, 1)
            if chosen is not None:
                room.reserve(chosen, pod.devices)
                break


def current_type(pod: PodState, snapshot: Snapshot) -> str | None:
    info = snapshot.nodes.get(pod.node) if pod.node else None
    offer = pod_offer(info, pod.needs) if info is not None else None
    return offer.type_name if offer is not None else None


def better_types(pod: PodState, on_type: str, catalog: Catalog) -> tuple[str, ...]:
    """The Pod's types strictly better than the one it runs on, best first: the strict path's order."""
    order = type_order(pod.needs, catalog, ordering_for(pod.needs, catalog))
    return order[:order.index(on_type)] if on_type in order else ()


@dataclass
class _Pass:
    now: float
    snapshot: Snapshot
    catalog: Catalog
    settings: UpgradeSettings
    room: _Room
    room_since: dict[RoomKey, float]
    seen_keys: set[RoomKey]
    evictions: list[Eviction]
    in_flight: dict[str, int]
    moves: list[Move] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)

    def target(self, unit: Sequence[PodState], on_type: str) -> tuple[str, list[tuple[str, str]], RoomKey] | None:
        """The best strictly better type with room for the whole unit now, with the nodes that take it."""
        first = unit[0]
        for type_name in better_types(first, on_type, self.catalog):
            key: RoomKey = (type_name, first.needs.resource, first.needs.gpus, len(unit))
            chosen = self.room.place(type_name, first.needs, len(unit), first)
            if chosen is None:
                continue
            self.seen_keys.add(key)
            self.room_since.setdefault(key, self.now)
            return type_name, chosen, key
        return None

    def recent_moves(self) -> int:
        return sum(1 for e in self.evictions if self.now - e.at_seconds < 60.0)

    def why_held(self, unit: Sequence[PodState], key: RoomKey) -> tuple[HeldReason, str] | None:
        s = self.settings
        had_room = self.now - self.room_since[key]
        if had_room < s.settle_seconds:
            return "settle", f"{key[0]} has had room for {had_room:.0f} s of {s.settle_seconds:.0f} s"
        for pod in unit:
            on_node = self.now - (pod.on_node_since_seconds if pod.on_node_since_seconds is not None else self.now)
            if on_node < s.min_on_node_seconds:
                return "min_time", f"{pod.ref} has run on its node for {on_node:.0f} s of {s.min_on_node_seconds:.0f} s"
        for pod in unit:
            assert pod.owner is not None
            moved = [e for e in self.evictions if e.workload == pod.owner.workload
                     and pod.created_seconds is not None and pod.created_seconds >= e.at_seconds - 1.0]
            if moved:
                return "window", (f"{pod.ref} may replace a Pod its workload moved {self.now - moved[-1].at_seconds:.0f} s "
                                  f"ago; a Pod moves at most once in {s.window_seconds:.0f} s")
        workloads = {p.owner.workload for p in unit if p.owner is not None}
        busy = [w for w in workloads if self.in_flight.get(w, 0) >= s.in_flight_per_workload]
        if busy:
            return "rate", f"{busy[0]} has {self.in_flight[busy[0]]} move(s) in flight"
        if self.recent_moves() >= s.moves_per_minute:
            return "rate", f"the cluster made {self.recent_moves()} moves in the last minute"
        return None

    def consider(self, unit: Sequence[PodState], on_type: str) -> None:
        found = self.target(unit, on_type)
        if found is None:
            return
        to_type, chosen, key = found
        held = self.why_held(unit, key)
        if held is not None:
            self.held.append(Held(tuple(unit), held[0], on_type, to_type, held[1]))
            return
        self.room.reserve(chosen, unit[0].needs.gpus)
        for pod in unit:
            assert pod.owner is not None
            self.evictions.append(Eviction(self.now, pod.uid, pod.ref, pod.owner.workload))
        for workload in {p.owner.workload for p in unit if p.owner is not None}:
            self.in_flight[workload] = self.in_flight.get(workload, 0) + 1
        self.moves.append(Move(tuple(unit), on_type, to_type, unit[0].needs.class_name,
                               self.now - self.room_since[key]))


REPLACEMENT_WAIT_SECONDS = 60.0  # how long an evicted Pod with no replacement in sight counts as a move in flight


def _in_flight(pods: Sequence[PodState], evictions: Sequence[Eviction], now: float) -> dict[str, int]:
    """Per workload, the moves not yet done: its Pods that are leaving, waiting for a node or not yet Ready, and
    its recent evictions whose Pod is still listed as if running, or that no Pod created since replaces yet (a
    controller takes a moment to make the replacement; a Pod list can be read in between)."""
    counts: dict[str, int] = defaultdict(int)
    for pod in pods:
        if pod.owner is not None and (pod.terminating or pod.node is None or not pod.ready):
            counts[pod.owner.workload] += 1
    listed = {p.uid: p for p in pods}
    for e in evictions:
        if now - e.at_seconds >= REPLACEMENT_WAIT_SECONDS:
            continue
        evicted = listed.get(e.pod_uid)
        replaced = any(p.owner is not None and p.owner.workload == e.workload and p.created_seconds is not None
                       and p.created_seconds >= e.at_seconds - 1.0 for p in pods)
        if (evicted is not None and not evicted.terminating) or (evicted is None and not replaced):
            counts[e.workload] += 1
    return dict(counts)


def _units(pods: Sequence[PodState], snapshot: Snapshot, held: list[Held]) -> list[tuple[list[PodState], str]]:
    """What may move, with the type it is on: lone Pods, and groups whose every bound Pod may move with it."""
    bound = [p for p in pods if p.node is not None and not p.terminating]
    by_group: dict[GroupName, list[PodState]] = defaultdict(list)
    units: list[tuple[list[PodState], str]] = []
    for pod in bound:
        if pod.group is not None:
            by_group[pod.group].append(pod)
        elif pod.opted_in and pod.owner is not None and (on := current_type(pod, snapshot)) is not None:
            units.append(([pod], on))
    for members in by_group.values():
        members.sort(key=lambda p: p.name)
        types = {current_type(p, snapshot) for p in members}
        shapes = {(p.needs.gpus, p.needs.resource, p.needs.types) for p in members}
        if not any(p.opted_in for p in members) or None in types:
            continue
        if len(types) != 1 or len(shapes) != 1 or not all(p.opted_in and p.owner is not None for p in members):
            # a group split over types, or with a Pod that cannot move, stays where it is as a whole
            held.append(Held(tuple(members), "group", ",".join(sorted(str(t) for t in types)), "",
                             "every Pod of a group must opt in, have a controller that recreates it, and share one type"))
            continue
        units.append((members, str(next(iter(types)))))
    # longest on their node first: they have waited longest for the better type
    units.sort(key=lambda u: (min(p.on_node_since_seconds or 0.0 for p in u[0]), u[0][0].ref))
    return units


def decide_moves(now: float, snapshot: Snapshot, catalog: Catalog, pods: Sequence[PodState], history: History,
                 settings: UpgradeSettings = UpgradeSettings(),
                 node_labels: Mapping[str, Mapping[str, str]] | None = None) -> UpgradeDecision:
    """The Pods to evict now, those held back and why, and the history to pass to the next call.

    Room is judged as the strict path judges it (type, readiness, free devices), and also on the Pod's
    nodeSelector against `node_labels` (when given) and the nodes' non-GPU taints against its
    tolerations, so that a Pod is not moved towards a node it could never run on. Its other
    constraints (required node affinity beyond its types, CPU and memory, Pod affinity) are not
    judged: a Pod sent back to where it was is held by the window, never moved in a loop.
    """
    room = _Room(snapshot, node_labels)
    _waiting_take_their_room(room, snapshot)
    state = _Pass(now=now, snapshot=snapshot, catalog=catalog, settings=settings, room=room,
                  room_since=dict(history.room_since), seen_keys=set(),
                  evictions=[e for e in history.evictions if now - e.at_seconds < settings.window_seconds],
                  in_flight=_in_flight(pods, history.evictions, now))
    group_held: list[Held] = []
    for unit, on_type in _units(pods, snapshot, group_held):
        state.consider(unit, on_type)
    # room not seen this pass is broken: its settle time starts again when it returns
    kept = {k: v for k, v in state.room_since.items() if k in state.seen_keys}
    return UpgradeDecision(tuple(state.moves), (*group_held, *state.held),
                           History(room_since=kept, evictions=tuple(state.evictions)))


def with_refused(decision: UpgradeDecision, refused: Iterable[Move]) -> UpgradeDecision:
    """The decision once the API refused some moves (a PodDisruptionBudget): they are held, not moved."""
    refused_uids = {p.uid for m in refused for p in m.pods}
    moves = tuple(m for m in decision.moves if not any(p.uid in refused_uids for p in m.pods))
    held = tuple(Held(m.pods, "pdb", m.from_type, m.to_type, "a PodDisruptionBudget allows no disruption now")
                 for m in decision.moves if m not in moves)
    evictions = tuple(e for e in decision.history.evictions if e.pod_uid not in refused_uids)
    return replace(decision, moves=moves, held=(*decision.held, *held),
                   history=replace(decision.history, evictions=evictions))


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects these labels; an empty one selects all."""
    if selector is None:
        return False  # a PodDisruptionBudget without a selector selects no Pod (policy/v1)
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if not {"In": present and labels.get(key) in values, "NotIn": not present or labels.get(key) not in values,
                "Exists": present, "DoesNotExist": not present}.get(op, False):
            return False
    return True


def disruptions_allowed(pdbs: Sequence[Mapping[str, Any]], pods_labels: Sequence[Mapping[str, str]]) -> bool:
    """Whether every PodDisruptionBudget allows evicting all of these Pods at once (a group's): each PDB's
    disruptionsAllowed covers the Pods it selects, so none of the group is evicted unless all can be."""
    for pdb in pdbs:
        selector = (pdb.get("spec") or {}).get("selector")
        selected = sum(1 for labels in pods_labels if selects(selector, labels))
        if selected and int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) < selected:
            return False
    return True


@dataclass(frozen=True)
class UpgradeOutlook:
    """What `gpuclass explain` says of a bound Pod and the upgrader: whether it may move, and where to now."""

    opted_in: bool
    recreated: bool  # its controller reference names a kind that recreates it (the upgrader also checks its UID)
    on_type: str | None
    better_with_room: str | None  # the best strictly better type with room for it now, after waiting Pods

    def describe(self, settings: UpgradeSettings = UpgradeSettings()) -> str:
        if not self.opted_in:
            return "upgrade: not opted in (gpu-class.io/upgrade: \"true\", or the class's upgrade: true)"
        if not self.recreated:
            return "upgrade: opted in, but never moved: no controller that recreates it (a bare Pod)"
        if self.better_with_room is None:
            return f"upgrade: opted in; no type better than {self.on_type} has room for it now: it stays"
        return (f"upgrade: opted in; {self.better_with_room} has room for it now: the upgrader moves it once that room "
                f"has lasted {settings.settle_seconds:.0f} s, it has run {settings.min_on_node_seconds:.0f} s on its "
                "node and its workload has no move in flight (defaults; see gpuclass upgrader)")


def upgrade_outlook(pod: Mapping[str, Any], snapshot: Snapshot, catalog: Catalog) -> UpgradeOutlook | None:
    """For a bound Pod gpu-class placed; None for any other."""
    state = read_pod_state(pod, catalog, {})
    if state is None or state.node is None:
        return None
    on_type = current_type(state, snapshot)
    room = _Room(snapshot, None)
    _waiting_take_their_room(room, snapshot)
    better = None if on_type is None else next(
        (t for t in better_types(state, on_type, catalog) if room.place(t, state.needs, 1, state) is not None), None)
    return UpgradeOutlook(state.opted_in, is_recreating_ref(controller_ref(pod)), on_type, better)
