"""GPU nodes as the decision sees them: a Node reduced to NodeInfo, the types it offers, its taints. Pure.

Nodes are reduced to the few fields the decision needs (NodeInfo) the moment they arrive, so memory
grows with GPU nodes, not with the size of Node objects.

What a node offers is read from status.allocatable, never derived from its labels: a mixed-MIG node
labelled `nvidia.com/mig-3g.21gb.count` may offer `nvidia.com/mig-3g.20gb`. Labels only say which
types a node is; devices are counted per resource, so a Pod holding one MIG slice does not use a
whole GPU of that node.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..catalog.model import Catalog, GpuType, LabelType
from .affinity import type_label_keys
from .dra import HOSTNAME_LABEL


@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str
    effect: str


# the effects that keep a Pod off a node unless it tolerates them (PreferNoSchedule only weighs against it)
KEEPING_EFFECTS = ("NoSchedule", "NoExecute")
# Kubernetes' own taints mirror a node's state (not-ready, unschedulable, pressure): they reserve it for
# no one, and the inventory judges that state from the Node itself (its Ready condition, spec.unschedulable)
CONDITION_TAINT_PREFIX = "node.kubernetes.io/"


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Kubernetes' rule: empty key with Exists tolerates everything; empty effect matches every effect."""
    effect = toleration.get("effect") or ""
    if effect and taint.effect and effect != taint.effect:
        return False
    if effect and not taint.effect:
        return False  # the taint stands for any effect; a toleration for one effect does not cover it
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.key:
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == taint.value


def tolerates_all(tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Taint]) -> bool:
    held = tuple(tolerations)
    return all(any(tolerates(t, taint) for t in held) for taint in taints)


def split_taints(raw: Any, gpu_taint_keys: Sequence[str]) -> tuple[tuple[Taint, ...], tuple[Taint, ...]]:
    """(GPU taints, reserving taints) of a node's or a pool's `taints`. gpu-class tolerates the GPU taints
    the catalog names and nothing else: any other taint that keeps Pods off (a team's
    `dedicated=team-a:NoSchedule`) reserves the node for the Pods that tolerate it of their own accord."""
    taints = sorted(Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                    for t in raw if isinstance(t, dict) and t.get("key")) if isinstance(raw, list) else []
    return (tuple(t for t in taints if t.key in gpu_taint_keys),
            tuple(t for t in taints if t.key not in gpu_taint_keys and t.effect in KEEPING_EFFECTS
                  and not t.key.startswith(CONDITION_TAINT_PREFIX)))


@dataclass(frozen=True)
class Offer:
    """One type a node is, with the label that says so and its devices of the type's resource."""

    type_name: str
    label_key: str
    value: str
    resource: str
    allocatable: int
    memory_mib: float | None  # per device; None: unknown
    dra: bool = False  # the devices are DRA devices (ResourceSlices), not the device plugin's
    # devices of the type the node has but does not offer for their health: status.capacity above
    # status.allocatable (the device plugin reports a GPU unhealthy), or DRA devices a taint keeps from Pods
    unhealthy: int = 0


@dataclass(frozen=True)
class NodeInfo:
    """What the planner needs of a GPU node."""

    name: str
    label_key: str  # the first productLabels key on the node ("" if none): reported for unknown nodes
    product: str
    offers: tuple[Offer, ...]  # empty: the node's labels name no catalog type
    ready: bool
    unschedulable: bool
    gpu_taints: tuple[Taint, ...]
    hostname: str = ""  # its kubernetes.io/hostname label: what names a node no product label names
    reserved: tuple[Taint, ...] = ()  # its other NoSchedule/NoExecute taints (split_taints)
    # status.allocatable of the catalog's resources (those above 0): what its device plugins offer
    device_plugin: tuple[tuple[str, int], ...] = ()
    # a product no type claims: the type its labels make it (its one offer), else why it has none
    label_type: LabelType | None = None
    # its labels but those of UNKEPT_LABEL_PREFIXES (kept_labels), sorted: what a Pod's own nodeSelector and
    # affinity are judged against (own_constraints.py)
    labels: tuple[tuple[str, str], ...] = ()
    # why all its GPUs are unhealthy: the catalog's unhealthyConditions the node has (node_condition_problems)
    sick: tuple[str, ...] = ()
    # (key, value) of the catalog's topologyLabels on the node: the domains (NVLink domain, rack) it is in
    domains: tuple[tuple[str, str], ...] = ()

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable

    @property
    def type_name(self) -> str | None:
        return self.offers[0].type_name if self.offers else None

    def offer(self, type_name: str) -> Offer | None:
        return next((o for o in self.offers if o.type_name == type_name), None)

    def domain(self, key: str) -> str | None:
        """The node's value of the topology label `key`; None when it has none."""
        return next((v for k, v in self.domains if k == key), None)

    def health_problems(self, type_name: str | None) -> tuple[str, ...]:
        """Why the node is unhealthy for `type_name` (none: healthy): a condition of the catalog's
        unhealthyConditions, or device-plugin devices of the type below its capacity. A failed GPU
        often tells of a node in trouble (Xid errors), so the node is left for the type, not only the
        GPU; a tainted DRA device is left alone (the scheduler's allocator skips it, not the node)."""
        offer = self.offer(type_name) if type_name is not None else None
        if offer is None or not offer.unhealthy or offer.dra:
            return self.sick
        return self.sick + (f"{offer.resource}: allocatable {offer.allocatable} below capacity "
                            f"{offer.allocatable + offer.unhealthy}",)

    def unhealthy_gpus(self, type_name: str) -> int:
        """Devices of the type held out for health: all of them on a node unhealthy for it, else its
        tainted DRA devices."""
        offer = self.offer(type_name)
        if offer is None:
            return 0
        return offer.allocatable + offer.unhealthy if self.health_problems(type_name) else offer.unhealthy


# labels that describe a node's hardware (NFD's, GFD's, AMD's labeller's, gpu-class's own): tens a node, and
# GFD's timestamp changes every minute, so the view keeps none of them but the keys that name GPU types
UNKEPT_LABEL_PREFIXES = ("feature.node.kubernetes.io/", "nvidia.com/", "amd.com/", "beta.amd.com/", "gpu-class.io/")


def kept_labels(labels: Mapping[str, Any], type_keys: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """A node's labels as NodeInfo keeps them: those of UNKEPT_LABEL_PREFIXES left out unless they name types;
    interned, as most keys and values repeat from node to node."""
    return tuple(sorted((sys.intern(k), sys.intern(v)) for k, v in labels.items()
                        if isinstance(k, str) and isinstance(v, str)
                        and (k in type_keys or not k.startswith(UNKEPT_LABEL_PREFIXES))))


def parse_gpu_count(value: Any) -> int:
    """Extended resources are whole numbers; anything else counts as none."""
    try:
        count = int(str(value))
    except (TypeError, ValueError):
        return 0
    return max(count, 0)


GIB_MIB = 1024.0
_VRAM_UNITS_MIB = {"K": 1 / 1024, "M": 1.0, "G": GIB_MIB, "T": GIB_MIB * 1024}


def _mib(value: Any) -> float | None:
    """A MiB count as GFD and the labeller write it ("81559"); None when it is not one."""
    try:
        mib = float(str(value))
    except (TypeError, ValueError):
        return None
    return mib if mib > 0 else None


def _vram_mib(value: Any) -> float | None:
    """The AMD labeller's amd.com/gpu.vram ("192G") in MiB."""
    text = str(value).strip() if isinstance(value, str) else ""
    unit = _VRAM_UNITS_MIB.get(text[-1:].upper())
    number = _mib(text[:-1]) if unit is not None else None
    return None if number is None or unit is None else number * unit


def device_memory_mib(labels: Mapping[str, Any], gpu_type: GpuType) -> float | None:
    """Memory per device of `gpu_type` on a node, from the first source present.

    A mixed-strategy MIG type reads only its profile's `nvidia.com/mig-<profile>.memory`: the
    whole-GPU labels describe the GPU, not the slice (under the single strategy GFD writes the
    slice's memory to nvidia.com/gpu.memory, so those types read it as usual). Then
    nvidia.com/gpu.memory, the labeller's gpu-class.io/gpu-memory-mib, amd.com/gpu.vram and the
    type's memoryGiB.
    """
    profile = gpu_type.mig_profile
    if profile is not None:
        found = _mib(labels.get(f"nvidia.com/mig-{profile}.memory"))
    else:
        found = (_mib(labels.get("nvidia.com/gpu.memory")) or _mib(labels.get(MEMORY_LABEL))
                 or _vram_mib(labels.get("amd.com/gpu.vram")))
    if found is not None:
        return found
    return None if gpu_type.memory_gib is None else gpu_type.memory_gib * GIB_MIB


MEMORY_LABEL = "gpu-class.io/gpu-memory-mib"


def node_condition_problems(conditions: Any, unhealthy: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The node's conditions among `unhealthy` ((type, status) pairs: the catalog's unhealthyConditions),
    as `type=status`, in the catalog's order."""
    held = {(c.get("type"), c.get("status")) for c in conditions if isinstance(c, dict)} if isinstance(
        conditions, list) else set()
    return tuple(f"condition {kind}={status}" for kind, status in unhealthy if (kind, status) in held)


def capacity_shortfall(allocatable: Any, capacity: Any) -> int:
    """Devices in status.capacity that status.allocatable leaves out (the device plugin's unhealthy ones).
    A node that reports no capacity of the resource has none missing."""
    return max(parse_gpu_count(capacity) - parse_gpu_count(allocatable), 0) if capacity is not None else 0


def node_offers(labels: Mapping[str, Any], allocatable: Mapping[str, Any], catalog: Catalog,
                capacity: Mapping[str, Any] | None = None) -> tuple[Offer, ...]:
    """The types a node is, with its devices of each type's resource.

    A node whose labels name several types offers those with allocatable devices (a mixed-MIG
    node: one type per profile it has; the whole-GPU type it also matches has none). Only when
    none has any are all kept, so a node whose device plugin has not yet reported stays visible
    as a node of its types that offers nothing.
    """
    offers = []
    for type_name, key, value in catalog.matches_of_labels(labels):
        gpu_type = catalog.types[type_name]
        count = parse_gpu_count(allocatable.get(gpu_type.resource))
        unhealthy = capacity_shortfall(allocatable.get(gpu_type.resource), (capacity or {}).get(gpu_type.resource))
        offers.append(Offer(type_name, key, value, gpu_type.resource, count, device_memory_mib(labels, gpu_type),
                            unhealthy=unhealthy))
    positive = tuple(o for o in offers if o.allocatable > 0 or o.unhealthy > 0)
    return positive or tuple(offers)


def node_info_from_object(obj: Mapping[str, Any], catalog: Catalog, *, keep_all: bool = False) -> NodeInfo | None:
    """Reduce a Node object to NodeInfo; None for nodes that are no GPU node (no type, no product label)
    unless `keep_all`: where DRA devices are read, any node may turn out to have GPUs."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not isinstance(labels, dict):
        return None
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = status.get("allocatable") or {}
    raw_capacity = status.get("capacity")
    capacity: Mapping[str, Any] = raw_capacity if isinstance(raw_capacity, dict) else {}
    offers = node_offers(labels, allocatable if isinstance(allocatable, dict) else {}, catalog, capacity)
    product = catalog.product_label(labels)
    label_type = catalog.type_from_labels(labels) if not offers and product is not None else None
    if label_type is not None and label_type.gpu_type is not None and product is not None:
        found = label_type.gpu_type
        offers = (Offer(found.name, product[0], product[1], found.resource,
                        parse_gpu_count(allocatable.get(found.resource)) if isinstance(allocatable, dict) else 0,
                        device_memory_mib(labels, found),
                        unhealthy=capacity_shortfall(allocatable.get(found.resource) if isinstance(allocatable, dict)
                                                     else None, capacity.get(found.resource))),)
    if not offers and product is None and not keep_all:
        return None
    conditions = status.get("conditions") or []
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )
    taints, reserved = split_taints(spec.get("taints"), catalog.gpu_taint_keys)
    return NodeInfo(
        name=name,
        label_key=product[0] if product else "",
        product=product[1] if product else "",
        offers=offers,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        gpu_taints=taints,
        hostname=str(labels.get(HOSTNAME_LABEL) or ""),
        reserved=reserved,
        device_plugin=tuple((r, n) for r in catalog.resources
                            if isinstance(allocatable, dict) and (n := parse_gpu_count(allocatable.get(r))) > 0),
        label_type=label_type,
        labels=kept_labels(labels, type_label_keys(catalog)),
        sick=node_condition_problems(conditions, catalog.unhealthy_conditions),
        domains=tuple((k, v) for k in catalog.topology_labels if isinstance(v := labels.get(k), str) and v),
    )
