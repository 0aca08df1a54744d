"""One GPU type per group of Pods (gpu-class.io/group, gpu-class.io/group-size). Pure.

What a Pod asks for (its group and the group's size), where a group already runs (its bound Pods in
the inventory), and how many of its Pods a type has room for. planner.py decides with these;
patch.py writes what holds the group together at scheduling time:

- the label gpu-class.io/group=NAME on the Pod, and
- a required Pod affinity to that label (in the Pod's namespace) with the node label that names the
  GPU product as topologyKey.

kube-scheduler's InterPodAffinity filter then admits a node only when a Pod of the group already
runs on a node with the same product label value, except when no Pod anywhere matches the term and
the Pod matches its own: the first Pod of a group goes wherever its class sends it and the others
follow. The scheduler counts the Pods it has assumed (chosen a node for, not yet bound) as running
there, and schedules one Pod at a time, so a group created in one burst cannot split between two
products. Pods with inter-pod affinity are never batched by the scheduler's opportunistic batching.
README.md ("One GPU type per group") says why this holds and what it costs.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from .catalog import Catalog
from .dra import HOSTNAME_LABEL
from .inventory import GROUP_LABEL, GroupName, NodeInfo, Offer, ProductGroup, Snapshot

GROUP_ANNOTATION = "gpu-class.io/group"
GROUP_SIZE_ANNOTATION = "gpu-class.io/group-size"
# LeaderWorkerSet writes the number of Pods of its group (leader included) on each of them. The Job
# controller and JobSet put no Pod count on Pods (JobSet's replicas annotations count Jobs).
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"

GroupOutcome = Literal["started", "followed", "no-room", "refused", "unplaced"]

# a label value: the name becomes the Pod label the affinity selects on
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_SIZE_RE = re.compile(r"[0-9]{1,6}")


@dataclass(frozen=True)
class GroupAsk:
    """A Pod's group: its name, and the number of Pods it has when known (and which annotation said so)."""

    name: str
    size: int | None = None
    size_from: str | None = None


def _size(raw: str | None) -> int | None:
    text = raw.strip() if isinstance(raw, str) else ""
    return int(text) if _SIZE_RE.fullmatch(text) and int(text) > 0 else None


def read_group(annotations: Mapping[str, str]) -> GroupAsk | None | str:
    """The Pod's group, None when it has none, or the message refusing what it wrote."""
    name = annotations.get(GROUP_ANNOTATION)
    raw_size = annotations.get(GROUP_SIZE_ANNOTATION)
    if name is None:
        if raw_size is not None:
            return (f"gpu-class: {GROUP_SIZE_ANNOTATION} needs {GROUP_ANNOTATION}: name the group whose size "
                    "it is")
        return None
    if not _NAME_RE.fullmatch(name):
        shown = repr(name) if len(name) <= 66 else repr(name[:60]) + "..."
        return (f"gpu-class: {GROUP_ANNOTATION} must be 1 to 63 letters, digits, '-', '_' or '.', beginning and "
                f"ending with a letter or digit (it becomes the Pod label {GROUP_LABEL}), not {shown}")
    if raw_size is not None:
        size = _size(raw_size)
        if size is None:
            shown = repr(raw_size) if len(raw_size) <= 30 else repr(raw_size[:27]) + "..."
            return (f"gpu-class: {GROUP_SIZE_ANNOTATION} must be a positive whole number of Pods (like \"8\"), "
                    f"not {shown}")
        return GroupAsk(name, size, GROUP_SIZE_ANNOTATION)
    # LeaderWorkerSet's webhook refuses a Pod whose size it cannot read, so a bad value never gets here
    lws = _size(annotations.get(LWS_SIZE_ANNOTATION))
    return GroupAsk(name, lws, LWS_SIZE_ANNOTATION if lws is not None else None)


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


def _offers_of(snapshot: Snapshot, type_name: str) -> tuple[tuple[NodeInfo, Offer], ...]:
    """The nodes that are `type_name`, with their offer of it: worked out once per snapshot."""
    key = ("offers-of", type_name)
    found: tuple[tuple[NodeInfo, Offer], ...] | None = snapshot.memo.get(key)
    if found is None:
        found = tuple((n, o) for n in snapshot.nodes.values() if (o := n.offer(type_name)) is not None)
        snapshot.memo[key] = found
    return found


def room(snapshot: Snapshot, catalog: Catalog, type_name: str, label_key: str, gpus: int,
         min_memory_mib: float | None) -> Room:
    """Pods of `gpus` devices each (and memory per device) that the type's nodes labelled `label_key` hold.

    Each node holds free // gpus of them, so N Pods fit when the sum is at least N: Pods of one size
    fill every node's share whatever order the scheduler binds them in. A group's Pods meet on one
    value of the key: under kubernetes.io/hostname (DRA nodes no product label names) each node is
    a value of its own, so there the group holds what its best node holds.
    """
    by_value: dict[str, tuple[int, int]] = {}
    for info, offer in _offers_of(snapshot, type_name):
        if offer.label_key != label_key or offer.allocatable < gpus:
            continue
        if min_memory_mib is not None and (offer.memory_mib is None or offer.memory_mib < min_memory_mib):
            continue
        value = offer.value if label_key == HOSTNAME_LABEL else ""
        now, most = by_value.get(value, (0, 0))
        free = snapshot.free(info.name, offer) // gpus if info.schedulable else 0
        by_value[value] = (now + free, most + offer.allocatable // gpus)
    now = max((n for n, _ in by_value.values()), default=0)
    most = max((m for _, m in by_value.values()), default=0)
    can_grow = catalog.types[type_name].scalable or any(
        p.label_key == label_key and p.holds(gpus) for p in snapshot.pools(type_name))
    return Room(type_name, label_key, now, None if can_grow else most)


@dataclass(frozen=True)
class GroupScope:
    """The nodes a group's Pod may use: those of one label key, and once the group runs, of its values."""

    label_key: str
    products: frozenset[str] | None = None  # None: any value of label_key
    ruled_out: tuple[tuple[str, str], ...] = ()  # (type, why) where the group cannot start whole

    def admits(self, group: ProductGroup) -> bool:
        return group.label_key == self.label_key and (self.products is None or group.product in self.products)

    def why_not(self, type_name: str, snapshot: Snapshot, catalog: Catalog) -> str | None:
        """Why the scope leaves out a type otherwise valid for the Pod; None when it does not."""
        ruled = dict(self.ruled_out).get(type_name)
        if ruled is not None:
            return ruled
        if self.products is not None:
            runs = any(self.admits(g) for g in snapshot.groups(type_name))
            return None if runs else f"the group runs on {self.label_key}={', '.join(sorted(self.products))}"
        groups = snapshot.groups(type_name)
        pools = snapshot.pools(type_name)
        keys = ({g.label_key for g in groups} | {p.label_key for p in pools} if groups or pools else
                # a scalable pool at zero: the keys it will have
                {k for k, _ in catalog.types[type_name].exact_values(catalog.product_labels)})
        if self.label_key in keys:
            return None
        return f"its nodes are labelled {', '.join(sorted(keys))}; the group's Pods meet on {self.label_key}"


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

    def affinity_term(self) -> dict[str, Any]:
        """The required Pod affinity term that keeps the group on one value of topology_key."""
        return {"labelSelector": {"matchLabels": {GROUP_LABEL: self.name}}, "topologyKey": self.topology_key}
