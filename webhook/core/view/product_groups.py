"""Product groups: the nodes that are one type by one label, summarized for the planner (ProductGroup),
each summary kept node by node (GroupTally), and the inventory state's index of them (GroupSummaries).

Summaries are kept per group (type, label key, label value), so an admission costs O(groups),
whatever the node count. Pure data and state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from ..catalog.model import GpuType
from .nodes import NodeInfo, Offer, Taint


@dataclass(frozen=True, order=True)
class Shape:
    """Usable nodes of a group that look alike to the planner."""

    allocatable: int
    memory_mib: float | None
    taints: tuple[Taint, ...]


@dataclass(frozen=True)
class ProductGroup:
    """Nodes that are one type by one label (key and value): the unit of affinity terms."""

    label_key: str
    product: str  # the label value
    type_name: str | None
    nodes: int
    not_ready: int
    cordoned: int
    # distinct shapes of usable nodes, most devices first: few entries per group
    usable: tuple[Shape, ...]
    free_gpus: int  # over usable nodes: allocatable minus devices of the resource requested by bound Pods
    resource: str = ""
    allocatable_gpus: int = 0  # over usable nodes
    # (allocatable, free, how many usable nodes have them): which Pods one node has room for, and the
    # share of its devices in use, without a walk over the nodes (fidelity.py judges each bind on it)
    room: tuple[tuple[int, int, int], ...] = ()
    # the taints, besides the GPU ones, every node of the group has: a Pod that does not tolerate them
    # cannot use the group (nodes reserved for a team are a group of their own)
    reserved: tuple[Taint, ...] = ()
    # devices of the type held out for health (NodeInfo.unhealthy_gpus), and the nodes unhealthy for the
    # type by what a Pod's affinity names them (affinity_name), sorted: neither counts as room
    unhealthy_gpus: int = 0
    unhealthy_hosts: tuple[str, ...] = ()
    gpus: int = 0  # devices of the type on all its nodes, healthy or not (allocatable and unhealthy)

    def has_room(self, devices: int) -> bool:
        return any(free >= devices for _, free, _ in self.room)

    def moved(self, allocatable: int, free_before: int, free_after: int) -> ProductGroup:
        """The group once one usable node's free devices changed."""
        counts = Counter({(a, f): n for a, f, n in self.room})
        counts[(allocatable, free_before)] -= 1
        counts[(allocatable, free_after)] += 1
        return replace(self, free_gpus=self.free_gpus + free_after - free_before,
                       room=tuple(sorted((a, f, n) for (a, f), n in counts.items() if n > 0)))

    @property
    def unhealthy_nodes(self) -> int:
        return len(self.unhealthy_hosts)

    @property
    def max_allocatable(self) -> int:
        return self.usable[0].allocatable if self.usable else 0

    @property
    def max_memory_mib(self) -> float | None:
        known = [s.memory_mib for s in self.usable if s.memory_mib is not None]
        return max(known) if known else None


# (type or None for no type, label key, label value, the nodes' reserving taints)
GroupKey = tuple[str | None, str, str, tuple[Taint, ...]]


def group_keys(info: NodeInfo) -> list[GroupKey]:
    if not info.offers:
        return [(None, info.label_key, info.product, info.reserved)]
    return [(o.type_name, o.label_key, o.value, info.reserved) for o in info.offers]


def summarize_group(key: GroupKey, nodes: Iterable[NodeInfo], requested: Mapping[tuple[str, str], int]) -> ProductGroup:
    """A group's summary worked out from all its members: what GroupTally keeps node by node (the
    tests hold one to the other)."""
    type_name, label_key, value, reserved = key
    members = list(nodes)
    offers = [(n, n.offer(type_name)) for n in members] if type_name is not None else []
    usable = [(n, o) for n, o in offers if o is not None and _is_usable(n, o)]
    shapes = sorted({Shape(o.allocatable, o.memory_mib, n.gpu_taints) for n, o in usable}, key=_shape_order)
    free = [(o.allocatable, _free_on(n, o, requested)) for n, o in usable]
    sick = [n for n, o in offers if o is not None and n.health_problems(type_name)]
    return ProductGroup(
        label_key=label_key,
        product=value,
        type_name=type_name,
        nodes=len(members),
        not_ready=sum(1 for n in members if not n.ready),
        cordoned=sum(1 for n in members if n.ready and n.unschedulable),
        usable=tuple(shapes),
        free_gpus=sum(f for _, f in free),
        resource=usable[0][1].resource if usable else next((o.resource for _, o in offers if o), ""),
        allocatable_gpus=sum(o.allocatable for _, o in usable),
        room=tuple(sorted((a, f, n) for (a, f), n in Counter(free).items())),
        reserved=reserved,
        unhealthy_gpus=sum(n.unhealthy_gpus(o.type_name) for n, o in offers if o is not None),
        unhealthy_hosts=tuple(sorted(affinity_name(n) for n in sick)),
        gpus=sum(o.allocatable + o.unhealthy for _, o in offers if o is not None),
    )


def _is_usable(node: NodeInfo, offer: Offer) -> bool:
    return node.schedulable and offer.allocatable > 0 and not node.health_problems(offer.type_name)


def affinity_name(node: NodeInfo) -> str:
    """What a node affinity names the node by: its kubernetes.io/hostname label, the kubelet's default
    being its name, which stands in where the label is missing."""
    return node.hostname or node.name


def _free_on(node: NodeInfo, offer: Offer, requested: Mapping[tuple[str, str], int]) -> int:
    return max(offer.allocatable - requested.get((node.name, offer.resource), 0), 0)


def _shape_order(shape: Shape) -> tuple[int, float, tuple[Taint, ...]]:
    return (-shape.allocatable, -(shape.memory_mib or 0), shape.taints)


@dataclass(frozen=True)
class Share:
    """What one node adds to the summary of one of its groups."""

    ready: bool
    cordoned: bool  # ready and unschedulable
    resource: str  # of its offer of the group's type ("" for no type)
    usable: tuple[Shape, int] | None = None  # (shape, free devices) when the node is usable for the type
    unhealthy_gpus: int = 0
    sick_host: str = ""  # affinity_name of a node unhealthy for the type; "" when healthy
    gpus: int = 0  # its devices of the type, healthy or not


def share_of(node: NodeInfo, key: GroupKey, requested: Mapping[tuple[str, str], int]) -> Share:
    offer = node.offer(key[0]) if key[0] is not None else None
    usable = None
    if offer is not None and _is_usable(node, offer):
        usable = (Shape(offer.allocatable, offer.memory_mib, node.gpu_taints), _free_on(node, offer, requested))
    share = Share(node.ready, node.ready and node.unschedulable, offer.resource if offer else "", usable)
    if offer is None:
        return share
    sick = bool(node.health_problems(offer.type_name))
    return replace(share, unhealthy_gpus=node.unhealthy_gpus(offer.type_name), gpus=offer.allocatable + offer.unhealthy,
                   sick_host=affinity_name(node) if sick else "")


@dataclass
class GroupTally:
    """One product group's summary, kept node by node: each member's Share is remembered, so a node
    that changes or leaves is taken back exactly, without a walk over its group (thousands of nodes
    of one product). summary() costs the group's distinct shapes and free counts: a handful."""

    key: GroupKey
    members: dict[str, Share] = field(default_factory=dict)
    not_ready: int = 0
    cordoned: int = 0
    shapes: Counter[Shape] = field(default_factory=Counter)
    room: Counter[tuple[int, int]] = field(default_factory=Counter)  # (allocatable, free) of usable nodes
    free_gpus: int = 0
    allocatable_gpus: int = 0
    resources: Counter[str] = field(default_factory=Counter)
    unhealthy_gpus: int = 0
    sick_hosts: Counter[str] = field(default_factory=Counter)
    gpus: int = 0
    # sick_hosts sorted, kept until they change: a summary is made at every bind on the group's nodes
    _sick_sorted: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)

    def put(self, name: str, share: Share | None) -> None:
        """Count `name` with `share` from now on (None: no longer a member)."""
        old = self.members.pop(name, None)
        if old is not None:
            self._count(old, -1)
        if share is not None:
            self.members[name] = share
            self._count(share, 1)

    def _count(self, share: Share, sign: int) -> None:
        self.not_ready += sign * (not share.ready)
        self.cordoned += sign * share.cordoned
        _add(self.resources, share.resource, sign)
        self.unhealthy_gpus += sign * share.unhealthy_gpus
        self.gpus += sign * share.gpus
        if share.sick_host:
            _add(self.sick_hosts, share.sick_host, sign)
            self._sick_sorted = None
        if share.usable is not None:
            shape, free = share.usable
            _add(self.shapes, shape, sign)
            _add(self.room, (shape.allocatable, free), sign)
            self.free_gpus += sign * free
            self.allocatable_gpus += sign * shape.allocatable

    def summary(self) -> ProductGroup:
        type_name, label_key, value, reserved = self.key
        return ProductGroup(
            label_key=label_key,
            product=value,
            type_name=type_name,
            nodes=len(self.members),
            not_ready=self.not_ready,
            cordoned=self.cordoned,
            usable=tuple(sorted(self.shapes, key=_shape_order)),
            free_gpus=self.free_gpus,
            # one type's offers all name the type's resource
            resource=next((r for r in sorted(self.resources) if r), ""),
            allocatable_gpus=self.allocatable_gpus,
            room=tuple(sorted((a, f, n) for (a, f), n in self.room.items())),
            reserved=reserved,
            unhealthy_gpus=self.unhealthy_gpus,
            unhealthy_hosts=self._sorted_sick(),
            gpus=self.gpus,
        )

    def _sorted_sick(self) -> tuple[str, ...]:
        if self._sick_sorted is None:
            self._sick_sorted = tuple(sorted(self.sick_hosts))
        return self._sick_sorted


def _add(counter: Counter[Any], key: Any, sign: int) -> None:
    """counter[key] += sign, keeping no key at zero (a summary lists only what some node has)."""
    count = counter[key] + sign
    if count:
        counter[key] = count
    else:
        del counter[key]


def _group_order(group: ProductGroup) -> tuple[str, str, tuple[Taint, ...]]:
    return (group.label_key, group.product, group.reserved)


@dataclass
class GroupSummaries:
    """The inventory state's product groups: each group's tally, kept node by node, and the summaries as
    of the last publish. publish() sums again only the groups that changed since (a node joined or left
    them, or its devices in use moved), and sorts again only the groups of their types."""

    tallies: dict[GroupKey, GroupTally] = field(default_factory=dict)
    summaries: dict[GroupKey, ProductGroup] = field(default_factory=dict)  # as of the last publish
    # as of the last publish: each type's groups, sorted, and the groups of nodes of no type
    by_type: dict[str, tuple[ProductGroup, ...]] = field(default_factory=dict)
    unknown: tuple[ProductGroup, ...] = ()
    _dirty: set[GroupKey] | None = field(default=None, init=False, repr=False)  # None: all of them
    _of_type: dict[str | None, dict[GroupKey, ProductGroup]] = field(default_factory=dict, init=False, repr=False)
    _label_types: dict[str, GpuType] = field(default_factory=dict, init=False, repr=False)  # kept as nodes join

    def join(self, info: NodeInfo, requested: Mapping[tuple[str, str], int]) -> None:
        if info.label_type is not None and info.label_type.gpu_type is not None:
            self._label_types[info.label_type.gpu_type.name] = info.label_type.gpu_type
        for key in group_keys(info):
            tally = self.tallies.get(key)
            if tally is None:
                tally = self.tallies[key] = GroupTally(key)
            tally.put(info.name, share_of(info, key, requested))
            self._changed(key)

    def leave(self, info: NodeInfo) -> None:
        for key in group_keys(info):
            tally = self.tallies.get(key)
            if tally is None:
                continue
            tally.put(info.name, None)
            if not tally.members:
                del self.tallies[key]
            self._changed(key)

    def free_changed(self, node: NodeInfo, requested: Mapping[tuple[str, str], int]) -> None:
        """The node's devices in use changed, nothing else of it: its groups' free counts move."""
        for key in group_keys(node):
            tally = self.tallies.get(key)
            if tally is not None:
                tally.put(node.name, share_of(node, key, requested))
                self._changed(key)

    def _changed(self, key: GroupKey) -> None:
        if self._dirty is not None:
            self._dirty.add(key)

    def rebuild(self, nodes: Iterable[NodeInfo], requested: Mapping[tuple[str, str], int]) -> None:
        """Every group from the nodes: after a full list."""
        self.tallies = {}
        for info in nodes:
            self.join(info, requested)
        self._dirty = None

    def publish(self) -> bool:
        """Summaries of the groups changed since the last publish, and the sorted groups of their types;
        whether any changed."""
        changed = self._dirty is None or bool(self._dirty)
        if self._dirty is None:
            self.summaries = {k: t.summary() for k, t in self.tallies.items()}
            self._of_type = {}
            for key, summary in self.summaries.items():
                self._of_type.setdefault(key[0], {})[key] = summary
            types: set[str | None] = {None, *self._of_type, *self.by_type}
        else:
            for key in self._dirty:
                tally = self.tallies.get(key)
                of_type = self._of_type.setdefault(key[0], {})
                if tally is None:
                    self.summaries.pop(key, None)
                    of_type.pop(key, None)
                else:
                    self.summaries[key] = of_type[key] = tally.summary()
            types = {k[0] for k in self._dirty}
        self._dirty = set()
        for type_name in types:
            groups = tuple(sorted(self._of_type.get(type_name, {}).values(), key=_group_order))
            if type_name is None:
                self.unknown = groups
            elif groups:
                self.by_type[type_name] = groups
            else:
                self.by_type.pop(type_name, None)
        return changed

    def published_label_types(self, old: Mapping[str, GpuType]) -> Mapping[str, GpuType]:
        """The label types some node offers now; the old mapping while they are the same (few: one per
        product no type claims)."""
        self._label_types = {t: found for t, found in self._label_types.items() if t in self.by_type}
        return old if self._label_types == old else MappingProxyType(dict(self._label_types))
