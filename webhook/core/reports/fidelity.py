"""Placement fidelity: did a Pod gpu-class placed land where its class promised, and which wait. Pure.

The live inventory sees each GPU Pod go from unbound to bound (cluster/pods_watch.py) and keeps the snapshot of
the moment before. judge_bind() compares the node the scheduler chose with what the class's strategy
promised in that snapshot, with the definitions the scheduler extender and the strict profiles use
(extender.type_order, extender.share_after):

- performance, cost: the best type, by the class's order, of the Pod's allowed types
  (gpu-class.io/types) that had a node with room for it;
- binpack, balanced: the node with the largest share of its devices in use (binpack) or free
  (balanced) once the Pod is placed, in whole percent; ties are all right.

Outcomes: `best` (as promised, on the best type the Pod was allowed, or a node of the best share),
`fallback` (performance, cost: on a later type because every better one was full: an honest
fallback), `broken` (a better type, or a node with a better share, had room then).

"Room" is what the webhook can know: a ready, uncordoned node offering the Pod's resource with at
least the Pod's devices free (allocatable minus what bound, unfinished Pods hold), within where the
Pod's group runs, and that the Pod itself could use: its tolerations cover the node's NoSchedule and
NoExecute taints (those outside gpuTaintKeys, which gpu-class tolerates), and its own nodeSelector and
required node affinity hold there (view/own_constraints.py: what the scheduler enforces, less the
restriction gpu-class wrote). CPU, memory and other Pods' requests of anything else are not seen: a
better type whose nodes have free GPUs but no free CPU counts as room, and the bind that passes it
over as a broken promise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Literal, Mapping, get_args

from ..catalog.model import Catalog
from ..scheduling.extender import PodNeeds, ordering_for, pod_offer, share_after, type_order
from ..admission.groups import GroupScope, runs_on
from ..view.nodes import NodeInfo, Offer
from ..view.pods import UnboundGpuPod
from ..view.product_groups import ProductGroup
from ..view.snapshot import Snapshot, placing_catalog

PlacementOutcome = Literal["best", "fallback", "broken"]
PLACEMENT_OUTCOMES: tuple[PlacementOutcome, ...] = get_args(PlacementOutcome)


@dataclass(frozen=True)
class BindVerdict:
    """How one bind compares with the promise, at the moment it happened."""

    class_name: str
    outcome: PlacementOutcome
    type_name: str  # the type the Pod got
    better: str = ""  # broken: what had room and would have been better, in words


def judge_bind(pod: UnboundGpuPod, node: str, before: Snapshot, catalog: Catalog, *,
               counted: int = 0) -> BindVerdict | None:
    """The verdict on `pod` bound to `node`, in `before`: the inventory just before the bind.

    `counted`: devices of this Pod that `before` already holds on `node`. On a DRA node the scheduler
    allocates the Pod's claim before it binds, and the claims' watch may deliver that first; they are
    given back, so the node is judged as the scheduler saw it.

    None for a Pod gpu-class did not place, of a class the catalog does not have, bound to a node that
    offers none of its types (a node the inventory does not know, or whose labels changed), or bound
    before the inventory had read every node.
    """
    catalog = placing_catalog(catalog, before)  # with the types nodes' labels made
    gpu_class = catalog.classes.get(pod.class_name or "")
    info = before.nodes.get(node)
    if gpu_class is None or not pod.placed or info is None or not before.synced:
        return None
    needs = PodNeeds(types=pod.types, gpus=pod.devices, class_name=gpu_class.name, resource=pod.resource)
    offer = pod_offer(info, needs)
    if offer is None:
        return None
    reach = _Reach(pod, before, needs)
    ordering = ordering_for(needs, catalog)
    if ordering in ("binpack", "balanced"):
        return _judge_share(reach, node, offer, gpu_class.name, counted, in_use=ordering == "binpack")
    order = type_order(needs, catalog, ordering)
    with_room = {t for t, g in reach.groups() if g.has_room(pod.devices)}
    better = next((t for t in order[:order.index(offer.type_name)] if t in with_room and reach.has_room(t)), None)
    if better is not None:
        return BindVerdict(gpu_class.name, "broken", offer.type_name, f"{better} had room")
    return BindVerdict(gpu_class.name, "best" if offer.type_name == order[0] else "fallback", offer.type_name)


def _judge_share(reach: _Reach, node: str, offer: Offer, class_name: str, counted: int, *,
                 in_use: bool) -> BindVerdict:
    """binpack, balanced: the node's share once placed against the best share a node open to the Pod had."""
    devices = reach.pod.devices
    seen = reach.before.free(node, offer)
    free = min(seen + max(counted, 0), offer.allocatable)
    own = share_after(offer.allocatable, free, devices, in_use=in_use)
    groups = [(t, _given_back(g, offer, seen, free)) for t, g in reach.groups()]
    best = max(((share_after(a, f, devices, in_use=in_use), t) for t, g in groups
                for a, f, _ in g.room if f >= devices), default=None)
    if best is not None and own < best[0] and reach.pod.own.selects:  # its own selector or affinity: node by node
        best = max(((share_after(a, f, devices, in_use=in_use), t) for _, t, a, f in reach.nodes(node, free)
                    if f >= devices), default=None)
    if best is None or own >= best[0]:
        return BindVerdict(class_name, "best", offer.type_name)
    share = "in use" if in_use else "free"
    return BindVerdict(class_name, "broken", offer.type_name,
                       f"a node of {best[1]} would have had {best[0]}% of its GPUs {share}, this one {own}%")


class _Reach:
    """The nodes a bind is judged against: of the Pod's types and resource, within where its group runs, open to
    its tolerations and, node by node, to its own nodeSelector and required affinity (own_constraints.py)."""

    def __init__(self, pod: UnboundGpuPod, before: Snapshot, needs: PodNeeds) -> None:
        self.pod, self.before, self.needs = pod, before, needs
        running = runs_on(before, pod.group, pod.resource) if pod.group is not None else None
        # where a Pod of a running group may go: its group's products (the scheduler's Pod affinity)
        self.scope = None if running is None else GroupScope(running.label_key, frozenset(running.products))
        self._with_room: set[str] | None = None

    def groups(self) -> list[tuple[str, ProductGroup]]:
        """The product groups of the Pod's types that offer its resource, within the scope, open to it."""
        return [(t, g) for t in self.needs.types for g in self.before.groups(t)
                if g.resource == self.needs.resource and (self.scope is None or self.scope.admits(g))
                and self.pod.own.tolerates(g.reserved)]

    def has_room(self, type_name: str) -> bool:
        """Whether a node of the type the Pod's own constraints admit had room; any, when it names no nodes."""
        if not self.pod.own.selects:
            return True
        if self._with_room is None:  # one walk answers for every type
            self._with_room = {t for _, t, _, f in self.nodes("", 0) if f >= self.pod.devices}
        return type_name in self._with_room

    def nodes(self, bound: str, bound_free: int) -> Iterator[tuple[str, str, int, int]]:
        """(node, type, allocatable, free) of each usable node open to the Pod; `bound` counted with `bound_free`."""
        for name, offer in self._open_nodes():
            free = bound_free if name == bound else self.before.free(name, offer)
            yield name, offer.type_name, offer.allocatable, free

    def _open_nodes(self) -> tuple[tuple[str, Offer], ...]:
        """(node, offer) of the usable nodes of the Pod's types its own constraints let it use, by a walk over the
        nodes, kept while they do not change: a bind changes only the devices in use, so a burst of binds of
        a team's Pods walks once (_OPEN_NODES)."""
        key = (self.pod.own, self.needs.types, self.needs.resource, self.scope)
        kept = _OPEN_NODES.get(key)
        if kept is not None and kept[0] is self.before.nodes:
            return kept[1]
        own = self.pod.own
        found = tuple((info.name, offer) for info in self.before.nodes.values() for offer in info.offers
                      if offer.type_name in self.needs.types and offer.resource == self.needs.resource
                      and self._usable(info, offer) and own.tolerates(info.reserved) and own.admits(info))
        _OPEN_NODES[key] = (self.before.nodes, found)
        for stale in list(_OPEN_NODES)[:-OPEN_NODES_KEPT]:  # a copy of the keys: safe beside another watch's thread
            _OPEN_NODES.pop(stale, None)
        return found

    def _usable(self, info: NodeInfo, offer: Offer) -> bool:
        """As product_groups counts a node in a group's room, and within where the Pod's group runs."""
        scope = self.scope
        return info.schedulable and offer.allocatable > 0 and not info.health_problems(offer.type_name) and (
            scope is None or (offer.label_key == scope.label_key
                              and (scope.products is None or offer.value in scope.products)))


# The nodes each kind of Pod (own constraints, types, resource, group scope) may use, with the node map they were
# read from: the snapshot's map is the very same object until a node changes (inventory.publish), so an entry
# holds while `is` says so. The Pods a burst binds share a few kinds; the oldest kind goes first.
OPEN_NODES_KEPT = 16  # each entry may hold an older node map alive: a few hundred KiB with 5,000 nodes
_OPEN_NODES: dict[Any, tuple[Mapping[str, NodeInfo], tuple[tuple[str, Offer], ...]]] = {}


def _given_back(group: ProductGroup, offer: Offer, seen: int, free: int) -> ProductGroup:
    """The group with the bound node's free devices as the scheduler saw them, where it counts the node."""
    if free == seen or (group.type_name, group.label_key, group.product) != (offer.type_name, offer.label_key,
                                                                             offer.value):
        return group
    if not any((a, f) == (offer.allocatable, seen) for a, f, _ in group.room):
        return group  # the node is not usable (not ready, cordoned): not counted in the group's room
    return group.moved(offer.allocatable, seen, free)


# --- Pods still waiting ------------------------------------------------------------------------

# how long a Pod has waited, as the pending gauge counts it: those waiting longer than each bound
PENDING_BOUNDS: tuple[tuple[str, float], ...] = (("0s", 0.0), ("1m", 60.0), ("5m", 300.0), ("15m", 900.0),
                                                  ("1h", 3600.0))


def placed_pending(snapshot: Snapshot, catalog: Catalog) -> list[UnboundGpuPod] | None:
    """The Pods gpu-class placed, of a class of the catalog, that wait for a node: not bound, not
    finished, not held by scheduling gates (a queue's, not the scheduler's, to let go). None when the
    inventory does not see Pods (a file)."""
    if snapshot.unbound_pods is None:
        return None
    return [p for p in snapshot.unbound_pods.values()
            if p.placed and not p.gated and (p.class_name or "") in catalog.classes]


def pending_by_class(snapshot: Snapshot, catalog: Catalog, now_seconds: float) -> dict[str, dict[str, int]] | None:
    """Per class of the catalog, its placed Pods waiting for a node longer than each of PENDING_BOUNDS; None when
    the inventory does not see Pods. A Pod within its max-wait is not counted (it waits by choice: waiting_by_class),
    and one past it has waited since its max-wait ended, not since its creation."""
    pending = placed_pending(snapshot, catalog)
    if pending is None:
        return None
    counts = {c: dict.fromkeys((label for label, _ in PENDING_BOUNDS), 0) for c in catalog.classes}
    for pod in pending:
        if pod.waits_by_choice(now_seconds):
            continue
        since = None if pod.created_seconds is None else pod.created_seconds + (pod.max_wait_seconds or 0)
        waited = now_seconds - since if since is not None else 0.0
        for label, seconds in PENDING_BOUNDS:
            if seconds == 0.0 or waited > seconds:
                counts[pod.class_name or ""][label] += 1
    return counts


def waiting_by_class(snapshot: Snapshot, catalog: Catalog, now_seconds: float) -> dict[str, int] | None:
    """Per class of the catalog, its placed Pods within their max-wait, kept to their best type by their choice."""
    pending = placed_pending(snapshot, catalog)
    if pending is None:
        return None
    counts = dict.fromkeys(catalog.classes, 0)
    for pod in pending:
        if pod.waits_by_choice(now_seconds):
            counts[pod.class_name or ""] += 1
    return counts
