"""One GPU type per group of Pods (gpu-class.io/group, gpu-class.io/group-size). Pure.

Where a group already runs (its bound Pods in the inventory), how many of its Pods a type has room
for, and from these, in one step (decide_group), the nodes a Pod of the group may use: fit.py
fits the Pod's class within that scope. annotations.py reads the group from the Pod; patch.py writes what
holds the group together at scheduling time:

- the label gpu-class.io/group=NAME on the Pod, and
- a required Pod affinity to that label (in the Pod's namespace) with the node label that names the
  GPU product as topologyKey.

kube-scheduler's InterPodAffinity filter then admits a node only when a Pod of the group already
runs on a node with the same product label value, except when no Pod anywhere matches the term and
the Pod matches its own: the first Pod of a group goes wherever its class sends it and the others
follow. The scheduler counts the Pods it has assumed (chosen a node for, not yet bound) as running
there, and schedules one Pod at a time, so a group created in one burst cannot split between two
products. Pods with inter-pod affinity are never batched by the scheduler's opportunistic batching.
docs/users/groups.md says why this holds and what it costs.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..catalog.model import Catalog, GpuClass
from ..view.dra import HOSTNAME_LABEL
from ..view.pods import GroupName
from ..view.nodes import NodeInfo, Offer
from ..view.product_groups import ProductGroup
from ..view.snapshot import Snapshot
from .annotations import GROUP_REQUIRED_TOPOLOGY_ANNOTATION, GroupAsk, Topology

GroupOutcome = Literal["started", "followed", "no-room", "refused", "unplaced"]
# who keeps a group within a topology domain: gpu-class (required, preferred), or Kueue's Topology Aware Scheduling
TopologyMode = Literal["required", "preferred", "kueue"]


@dataclass(frozen=True)
class RunsOn:
    """Where a group's bound, unfinished Pods are: the node label they meet on, its values, their types."""

    label_key: str
    products: tuple[str, ...]
    types: tuple[str, ...]
    resource: str
    pods: int

    def describe(self) -> str:
        return f"{', '.join(self.types)} ({self.label_key}={', '.join(self.products)})"

    def as_json(self) -> dict[str, Any]:
        return {"types": list(self.types), "labelKey": self.label_key, "products": list(self.products),
                "pods": self.pods}

    def offers_on(self, offer: Offer) -> bool:
        """Whether a node's offer is where the group runs."""
        return offer.label_key == self.label_key and offer.value in self.products


def runs_on(snapshot: Snapshot, group: GroupName, resource: str | None = None) -> RunsOn | None:
    """Where the group runs now, or None when none of its Pods is bound (or their nodes are unknown).

    Pods of one group meet on one label key; should they be on several (placed before the group had
    this webhook's affinity), the key most of them are on counts, and its values.
    """
    found: list[tuple[str, Offer]] = []
    for node, held in (snapshot.pod_groups.get(group) or {}).values():
        info = snapshot.nodes.get(node)
        if info is None:
            continue
        offer = next((o for o in info.offers if o.resource in held and (resource is None or o.resource == resource)),
                     None)
        if offer is not None:
            found.append((node, offer))
    if not found:
        return None
    key = Counter(o.label_key for _, o in found).most_common(1)[0][0]
    on_key = [o for _, o in found if o.label_key == key]
    return RunsOn(key, tuple(sorted({o.value for o in on_key})), tuple(dict.fromkeys(o.type_name for o in on_key)),
                  on_key[0].resource, len(on_key))


@dataclass(frozen=True)
class Room:
    """How many Pods of a group one type holds under one label key."""

    type_name: str
    label_key: str
    now: int  # on ready, uncordoned nodes, with the devices free now: the sum of free // the Pod's devices
    most: int | None  # on all its nodes when empty; None for a pool that can grow
    # (now, most) per value its Pods would meet on (rooms_by_value): kept so that choosing domains reads it again
    by_value: Mapping[str, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)


def _offers_of(snapshot: Snapshot, type_name: str) -> tuple[tuple[NodeInfo, Offer], ...]:
    """The nodes that are `type_name`, with their offer of it: worked out once per snapshot."""
    key = ("offers-of", type_name)
    found: tuple[tuple[NodeInfo, Offer], ...] | None = snapshot.memo.get(key)
    if found is None:
        found = tuple((n, o) for n in snapshot.nodes.values() if (o := n.offer(type_name)) is not None)
        snapshot.memo[key] = found
    return found


def room(snapshot: Snapshot, catalog: Catalog, type_name: str, label_key: str, gpus: int,
         min_memory_mib: float | None, domain_key: str | None = None) -> Room:
    """Pods of `gpus` devices each (and memory per device) that the type's nodes labelled `label_key` hold.

    Each node holds free // gpus of them, so N Pods fit when the sum is at least N: Pods of one size
    fill every node's share whatever order the scheduler binds them in. A group's Pods meet on one
    value of the key: under kubernetes.io/hostname (DRA nodes no product label names) each node is
    a value of its own, so there the group holds what its best node holds; kept within a topology
    domain (`domain_key`), what its best domain holds, and no pool grows a domain.
    """
    by_value = rooms_by_value(snapshot, type_name, label_key, gpus, min_memory_mib, domain_key)
    now = max((n for n, _ in by_value.values()), default=0)
    most = max((m for _, m in by_value.values()), default=0)
    can_grow = domain_key is None and (catalog.types[type_name].scalable or any(
        p.label_key == label_key and p.holds(gpus) for p in snapshot.pools(type_name)))
    return Room(type_name, label_key, now, None if can_grow else most, by_value)


def rooms_by_value(snapshot: Snapshot, type_name: str, label_key: str, gpus: int, min_memory_mib: float | None,
                   domain_key: str | None = None) -> dict[str, tuple[int, int]]:
    """(Pods it holds now, with all its nodes empty) per value the group's Pods would meet on: the node's
    `domain_key` value (nodes without one hold none), its hostname under kubernetes.io/hostname, else one
    value, "", for the whole type."""
    by_value: dict[str, tuple[int, int]] = {}
    for info, offer in _offers_of(snapshot, type_name):
        if offer.label_key != label_key or offer.allocatable < gpus:
            continue
        if min_memory_mib is not None and (offer.memory_mib is None or offer.memory_mib < min_memory_mib):
            continue
        value = (info.domain(domain_key) if domain_key is not None else
                 offer.value if label_key == HOSTNAME_LABEL else "")
        if value is None:
            continue
        now, most = by_value.get(value, (0, 0))
        free = snapshot.free(info.name, offer) // gpus if info.schedulable else 0
        by_value[value] = (now + free, most + offer.allocatable // gpus)
    return by_value


@dataclass(frozen=True)
class GroupScope:
    """The nodes a group's Pod may use: those of one label key, and once the group runs, of its values.

    Which of the class's types that leaves out, and why, is decided with the scope: the fit only
    reads it."""

    label_key: str
    products: frozenset[str] | None = None  # None: any value of label_key
    left_out: tuple[tuple[str, str], ...] = ()  # (type, why) for each type of the class the group may not use

    def admits(self, group: ProductGroup) -> bool:
        return group.label_key == self.label_key and (self.products is None or group.product in self.products)


def _scope(gpu_class: GpuClass, snapshot: Snapshot, catalog: Catalog, label_key: str,
           products: frozenset[str] | None = None, ruled_out: tuple[tuple[str, str], ...] = ()) -> GroupScope:
    """The scope with the class's types it leaves out: worked out once per snapshot, as the class's fit is."""
    key = ("group-scope", gpu_class.name, label_key, products, ruled_out)
    found: GroupScope | None = snapshot.memo.get(key)
    if found is None:
        ruled = dict(ruled_out)
        scope = GroupScope(label_key, products)
        left_out = tuple((t, why) for t in gpu_class.types
                         if (why := ruled.get(t) or _why_not(scope, t, snapshot, catalog)) is not None)
        found = snapshot.memo[key] = GroupScope(label_key, products, left_out)
    return found


def _why_not(scope: GroupScope, type_name: str, snapshot: Snapshot, catalog: Catalog) -> str | None:
    """Why the scope leaves out a type otherwise valid for the Pod; None when it does not."""
    if scope.products is not None:
        runs = any(scope.admits(g) for g in snapshot.groups(type_name))
        return None if runs else f"the group runs on {scope.label_key}={', '.join(sorted(scope.products))}"
    groups = snapshot.groups(type_name)
    pools = snapshot.pools(type_name)
    keys = ({g.label_key for g in groups} | {p.label_key for p in pools} if groups or pools else
            # a scalable pool at zero: the keys it will have
            {k for k, _ in catalog.types[type_name].exact_values(catalog.product_labels)})
    if scope.label_key in keys:
        return None
    return f"its nodes are labelled {', '.join(sorted(keys))}; the group's Pods meet on {scope.label_key}"


@dataclass(frozen=True)
class GroupPlan:
    """What was decided for a Pod of a group: shown by explain, counted by metrics, written by patch."""

    name: str
    outcome: GroupOutcome
    size: int | None = None
    size_from: str | None = None
    topology_key: str = ""  # the node label its Pods meet on; "" when the Pod is not placed
    runs_on: RunsOn | None = None
    rooms: tuple[Room, ...] = ()  # the class's types under topology_key, judged for the whole group
    topology: Topology | None = None  # the domain the group asked to be kept within
    # with a required topology: the values of its key the group may start in (it runs in, or that hold all of
    # it), tightest first; None: any value of the key
    domains: tuple[str, ...] | None = None
    kueue_topology: bool = False  # its Pods carry Kueue's topology annotations: Kueue places it, gpu-class keeps none

    @property
    def topology_mode(self) -> TopologyMode | None:
        """Who keeps the group within a domain, and how; None: nobody does."""
        if self.kueue_topology:
            return "kueue"
        if self.topology is None:
            return None
        return "required" if self.topology.required else "preferred"


@dataclass(frozen=True)
class ClassOffer:
    """What the Pod's class offers it without a group, as far as the group's decision reads it."""

    placeable: bool  # some type of the class can take one Pod
    resource: str | None  # the resource chosen for the Pod
    label_keys: tuple[tuple[str, str], ...]  # (type, node label key) of the valid types' nodes, best type first


@dataclass(frozen=True)
class GroupDecision:
    """What a Pod's group decides before the class is fitted to it: the nodes it may use, or that it cannot run."""

    plan: GroupPlan
    scope: GroupScope | None = None  # None: the class's offer without a group stands (see refusal)
    resource: str | None = None  # the resource to fit the class on within the scope
    refusal: str | None = None  # the group can never run on one type of the class
    warning: str | None = None


def decide_group(ask: GroupAsk, namespace: str, gpu_class: GpuClass, gpus_needed: int, min_memory_mib: float | None,
                 fixed: str | None, offer: ClassOffer, snapshot: Snapshot, catalog: Catalog,
                 waits: bool = False) -> GroupDecision:
    """The scope of a Pod of a group, and what was decided for the group.

    A group that runs (a Pod of it is bound) keeps the Pod to its products. One that does not yet
    gets the class's types under one label key, the one its best type is labelled by (kube-scheduler
    needs the affinity's topologyKey on every node it admits); with a size, only the types whose
    free devices hold every Pod of it, else, when none does now, those that can ever hold it. A group that waits
    for its best type (gpu-class.io/max-wait) gets every type that can ever hold it: gpu-class-scheduler starts
    it only where all of it fits now, its best type while the wait runs.
    """
    plan = functools.partial(GroupPlan, ask.name, size=ask.size, size_from=ask.size_from, topology=ask.topology,
                             kueue_topology=ask.kueue_topology)
    running = runs_on(snapshot, (namespace, ask.name), fixed)
    required = ask.topology.key if ask.topology is not None and ask.topology.required else None
    if running is not None:
        scope = _scope(gpu_class, snapshot, catalog, running.label_key, frozenset(running.products))
        domains = None if required is None else _domains_running(snapshot, (namespace, ask.name), required)
        return GroupDecision(plan("followed", topology_key=running.label_key, runs_on=running, domains=domains),
                             scope, fixed or running.resource)
    if not offer.placeable:  # no node can take even one of its Pods
        return GroupDecision(plan("unplaced"))
    rank = {k: i for i, k in enumerate(catalog.product_labels)}
    keys_of: dict[str, list[str]] = {}
    for type_name, label_key in offer.label_keys:
        keys_of.setdefault(type_name, []).append(label_key)
    candidates = [(t, k) for t, keys in keys_of.items()
                  for k in sorted(keys, key=lambda key: (rank.get(key, len(rank)), key))]
    size = ask.size or (1 if required else None)  # kept within a domain: only types with one count
    if size is None:
        key = candidates[0][1]
        return GroupDecision(plan("started", topology_key=key), _scope(gpu_class, snapshot, catalog, key),
                             offer.resource)
    rooms = [room(snapshot, catalog, t, k, gpus_needed, min_memory_mib, required) for t, k in candidates]
    holding = [] if waits else [r for r in rooms if r.now >= size]
    outcome: GroupOutcome = "started"
    ever = not holding  # judged on what each type can ever hold
    if ever:
        holding = [r for r in rooms if r.most is None or r.most >= size]
        outcome = "started" if waits else "no-room"
    larger = not holding and required is not None  # than any domain: it waits, as Kueue's TAS leaves it pending
    if larger:
        holding = [r for r in rooms if r.most]  # the types with a domain: where one may yet hold it
    if not holding:
        return GroupDecision(plan("refused"), refusal=_never(ask, size, gpus_needed, gpu_class, rooms, required))
    key = holding[0].label_key
    under_key = tuple(r for r in rooms if r.label_key == key)
    ruled = tuple((r.type_name, _short_of_room(r, size, ever)) for r in under_key if r not in holding)
    domains = None if required is None or ask.size is None or larger else _domains_holding(
        [r for r in holding if r.label_key == key], size, ever)
    warning = None if outcome != "no-room" else (
        f"gpu-class: group {ask.name}: no type has room for its {size} Pods now; they wait for room "
        f"where the first one runs" if required is None else
        f"gpu-class: group {ask.name}: no {required} domain can hold its {size} Pods (at most "
        f"{max(r.most or 0 for r in rooms)}); they wait" if larger else
        f"gpu-class: group {ask.name}: no {required} domain has room for its {size} Pods now; they wait for one")
    return GroupDecision(plan(outcome, topology_key=key, rooms=under_key, domains=domains),
                         _scope(gpu_class, snapshot, catalog, key, None, ruled), offer.resource, warning=warning)


def _never(ask: GroupAsk, size: int, gpus: int, gpu_class: GpuClass, rooms: list[Room], domain_key: str | None) -> str:
    """The refusal of a group no type of its class can ever hold (no node of which is in a domain, when kept
    within one)."""
    if domain_key is not None:
        return (f"gpu-class: group {ask.name} is kept within one {domain_key} domain "
                f"({GROUP_REQUIRED_TOPOLOGY_ANNOTATION}), and no node of class {gpu_class.name} that can take its "
                f"Pods has that label. Label the nodes (GPU Feature Discovery writes {domain_key} on NVLink "
                f"domains), or drop the annotation")
    best = max(rooms, key=lambda r: r.most or 0)
    return (f"gpu-class: group {ask.name} of {size} Pods x {gpus} GPU(s) can never run on one type of class "
            f"{gpu_class.name}: the most one type holds is {best.most} such Pods ({best.type_name}, all its nodes "
            f"empty). Ask for fewer Pods or GPUs per Pod ({ask.size_from}), or another class")


def _domains_running(snapshot: Snapshot, group: GroupName, key: str) -> tuple[str, ...] | None:
    """The values of `key` on the nodes the group's bound Pods are on; None when they carry none."""
    values = {d for node, _ in (snapshot.pod_groups.get(group) or {}).values()
              if (info := snapshot.nodes.get(node)) is not None and (d := info.domain(key)) is not None}
    return tuple(sorted(values)) or None


def _domains_holding(rooms: list[Room], size: int, ever: bool) -> tuple[str, ...]:
    """The domains of the rooms' types that hold the whole group now (ever, when none does now), tightest first:
    the group keeps larger free domains for larger groups."""
    found: dict[str, int] = {}
    for r in rooms:
        for value, (now, most) in r.by_value.items():
            if (most if ever else now) >= size:
                found[value] = min(found.get(value, now), now)
    return tuple(sorted(found, key=lambda v: (found[v], v)))


def _short_of_room(r: Room, size: int, ever: bool) -> str:
    if not ever:
        return f"room for {r.now} of the group's {size} Pods now"
    return f"holds at most {r.most} of the group's {size} Pods"
