"""The cluster view the planner decides on: GPU nodes grouped by type and label, namespaces, GPUs in use.

Pure data and state. Nodes are reduced to the few fields the decision needs (NodeInfo) the moment
they arrive, so memory grows with GPU nodes, not with the size of Node objects. The state has a
single writer (a file loader or the watch); readers only ever get an immutable Snapshot.
Summaries are kept per group (type, label key, label value), so an admission costs O(groups),
whatever the node count.

What a node offers is read from status.allocatable, never derived from its labels: a mixed-MIG node
labelled `nvidia.com/mig-3g.21gb.count` may offer `nvidia.com/mig-3g.20gb`. Labels only say which
types a node is; devices are counted per resource, so a Pod holding one MIG slice does not use a
whole GPU of that node.

Devices a DRA driver publishes in ResourceSlices are a second source (dra.py reduces them): the
state keeps each Node as its object says (`bases`) and publishes it merged with its DRA devices, so
a node whose GPUs are DRA devices offers its types like any other, and the planner, the extender
and the reports read one view.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from immutables import Map

from .affinity import Hosts, NodeTerm, keeps_within, no_hosts, required_terms, resource_sets
from ..catalog.model import Catalog, GpuType, LabelType, parse_wait
from .dra import (
    HOSTNAME_LABEL, DeviceClassInfo, DeviceId, DeviceProblem, DraState, DraView, SliceInfo, claim_from_object,
    device_class_from_object, group_problems, node_devices, slice_from_object,
)

INJECT_LABEL = "gpu-class.io/inject"
DEFAULT_CLASS_LABEL = "gpu-class.io/default-class"
ALLOWED_CLASSES_ANNOTATION = "gpu-class.io/allowed-classes"
GROUP_LABEL = "gpu-class.io/group"  # written by the webhook on the Pods of a group (groups.py)
CLASS_ANNOTATION = "gpu-class.io/class"
TYPES_ANNOTATION = "gpu-class.io/types"  # written by the webhook on every Pod it places, best first
MAX_WAIT_ANNOTATION = "gpu-class.io/max-wait"  # how long gpu-class-scheduler keeps the Pod to its best type

GroupName = tuple[str, str]  # (namespace, gpu-class.io/group): Pods of one namespace share a group
Holding = tuple[str, Mapping[str, int]]  # (node, devices per resource) of one bound, unfinished Pod

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
class NodeDevices:
    """The devices of a pool's resource one node it creates can carry, as far as the pool says
    (pools.py): at least `least`, at most `most`, and one of `only` when the pool lists them."""

    least: int = 0
    most: int | None = None  # None: no bound known
    only: frozenset[int] | None = None


@dataclass(frozen=True)
class Pool:
    """One type an autoscaler's node pool can create nodes of (pools.py reads Karpenter's NodePools)."""

    name: str  # the NodePool's
    type_name: str
    label_key: str
    values: tuple[str, ...]  # what the pool's nodes carry under label_key, all naming type_name
    taints: tuple[Taint, ...]  # the catalog's GPU taints its nodes carry: what gpu-class tolerates
    resource: str  # the type's
    left: int | None  # devices of `resource` its limits leave; None: no limit on it
    weight: int = 0
    node_devices: NodeDevices = NodeDevices()  # unknown: any size
    nodes_left: int | None = None  # nodes its limits leave; None: no limit on nodes
    reserved: tuple[Taint, ...] = ()  # its other taints: offered only to Pods that tolerate them

    def holds(self, gpus: int) -> bool:
        """Whether the pool can create a node that takes `gpus` devices within its limits.

        Karpenter launches only instance types whose whole capacity fits what the pool's limits
        leave, and none once its `nodes` limit is used up (karpenter pkg/controllers/provisioning/
        scheduling/scheduler.go, filterByRemainingResources): a pool with 4 GPUs left whose nodes
        carry 8 creates no node, even for a Pod of 4. Where the pool does not say what its nodes
        carry, the smallest node that takes the Pod is assumed."""
        if self.nodes_left is not None and self.nodes_left <= 0:
            return False
        low = max(gpus, self.node_devices.least)
        bounds = [b for b in (self.left, self.node_devices.most) if b is not None]
        high = min(bounds) if bounds else None
        if self.node_devices.only is not None:
            return any(low <= n and (high is None or n <= high) for n in self.node_devices.only)
        return high is None or low <= high

    def limited(self) -> str:
        """What the pool's limits leave, and what its nodes carry where known: why it may not grow."""
        if self.nodes_left is not None and self.nodes_left <= 0:
            return "its nodes limit used up"
        left = "no limit" if self.left is None else f"{self.left} {self.resource} left"
        d = self.node_devices
        if d.only is not None:
            return f"{left}, its nodes carry {' or '.join(map(str, sorted(d.only))) or 'none'}"
        if d.least == d.most:
            return f"{left}, its nodes carry {d.least}"
        if d.least or d.most is not None:
            return f"{left}, its nodes carry {d.least} to {'any' if d.most is None else d.most}"
        return left


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
    hostname: str = ""
    reserved: tuple[Taint, ...] = ()  # its other NoSchedule/NoExecute taints (split_taints)  # its kubernetes.io/hostname label: what names a node no product label names
    # status.allocatable of the catalog's resources (those above 0): what its device plugins offer
    device_plugin: tuple[tuple[str, int], ...] = ()
    # a product no type claims: the type its labels make it (its one offer), else why it has none
    label_type: LabelType | None = None

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable

    @property
    def type_name(self) -> str | None:
        return self.offers[0].type_name if self.offers else None

    def offer(self, type_name: str) -> Offer | None:
        return next((o for o in self.offers if o.type_name == type_name), None)


@dataclass(frozen=True)
class NamespaceInfo:
    name: str
    inject: bool
    default_class: str | None
    allowed_classes: tuple[str, ...] | None  # None: every class is allowed


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
    def max_allocatable(self) -> int:
        return self.usable[0].allocatable if self.usable else 0

    @property
    def max_memory_mib(self) -> float | None:
        known = [s.memory_mib for s in self.usable if s.memory_mib is not None]
        return max(known) if known else None


@dataclass(frozen=True)
class UnboundGpuPod:
    """A GPU Pod the watch has seen that no node holds yet: not bound (no spec.nodeName), not finished.

    `resource` is the first of the catalog's resources the Pod requests and `devices` how many of it
    one node must offer (pod_gpus), as the scheduler extender reads the Pod. `types` is what the
    webhook allowed it (gpu-class.io/types, best first; empty: gpu-class did not place it). The
    annotation is anyone's to write, so InventoryState keeps it only where the Pod's required node
    affinity (`node_terms`, which the scheduler enforces) keeps the Pod to those types (enforced_types).
    """

    uid: str
    namespace: str
    name: str
    resource: str
    devices: int
    class_name: str | None
    types: tuple[str, ...] = ()
    created_seconds: float | None = None  # metadata.creationTimestamp, Unix time
    group: GroupName | None = None  # the gpu-class.io/group label the webhook wrote
    gated: bool = False  # spec.schedulingGates: held back (by a queue such as Kueue), not yet asking for a node
    max_wait_seconds: int | None = None  # gpu-class.io/max-wait: kept to its best type this long after creation
    node_terms: tuple[NodeTerm, ...] = ()  # its required node affinity's `In` expressions (affinity.required_terms)

    def waits_by_choice(self, now_seconds: float) -> bool:
        """Whether it is within its max-wait: kept to its best type by its own choice, not stuck."""
        return self.max_wait_seconds is not None and self.created_seconds is not None and (
            now_seconds < self.created_seconds + self.max_wait_seconds + 1)  # the scheduler's second of truncation

    @property
    def placed(self) -> bool:
        """gpu-class placed it: it carries the types the webhook wrote."""
        return bool(self.types)


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of the inventory at one moment."""

    groups_by_type: Mapping[str, tuple[ProductGroup, ...]]
    unknown_groups: tuple[ProductGroup, ...] = ()
    namespaces: Mapping[str, NamespaceInfo] | None = None  # None: namespaces are not watched
    synced: bool = True
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)  # GPU nodes by name
    # devices held by bound, unfinished Pods, by (node, resource)
    requested: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # the bound, unfinished Pods of each group, by group, then by Pod ("namespace/name")
    pod_groups: Mapping[GroupName, Mapping[str, Holding]] = field(default_factory=dict)
    # GPU Pods seen unbound and unfinished, by uid; a Pod leaves it in the event that binds it.
    # None: Pods are not watched (a file inventory)
    unbound_pods: Mapping[str, UnboundGpuPod] | None = None
    dra: DraView = field(default_factory=DraView)
    # node pools that can create nodes of each type (Karpenter's NodePools); None: not read
    pools_by_type: Mapping[str, tuple[Pool, ...]] | None = None
    pools_off: str | None = None  # why NodePools are not read, where they were asked for
    # types of products no type claims, made from their nodes' labels (placing_catalog adds them)
    label_types: Mapping[str, GpuType] = field(default_factory=dict)
    # answers worked out from this snapshot (the planner's), dropped with it; the only mutable part
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def groups(self, type_name: str) -> tuple[ProductGroup, ...]:
        return self.groups_by_type.get(type_name, ())

    def pools(self, type_name: str) -> tuple[Pool, ...]:
        return () if self.pools_by_type is None else self.pools_by_type.get(type_name, ())

    def namespace(self, name: str) -> NamespaceInfo | None:
        return None if self.namespaces is None else self.namespaces.get(name)

    def types_of_host(self, hostname: str) -> frozenset[str]:
        """The types the node of this kubernetes.io/hostname (or, failing that, of this name) offers; none for
        a node the view does not hold: what an affinity to the hostname keeps a Pod to (affinity.Hosts)."""
        info = self.nodes.get(hostname)
        if info is None or info.hostname not in ("", hostname):
            by_host = self.memo.get(_BY_HOSTNAME)
            if by_host is None:
                by_host = self.memo[_BY_HOSTNAME] = {n.hostname: n for n in self.nodes.values() if n.hostname}
            info = by_host.get(hostname, info)
        return frozenset(o.type_name for o in info.offers) if info is not None else frozenset()

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def free(self, node: str, offer: Offer) -> int:
        return max(offer.allocatable - self.requested.get((node, offer.resource), 0), 0)


_BY_HOSTNAME = ("nodes by hostname",)  # Snapshot.memo's key for them
EMPTY_SNAPSHOT = Snapshot(groups_by_type=MappingProxyType({}), synced=False)


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


def node_offers(labels: Mapping[str, Any], allocatable: Mapping[str, Any], catalog: Catalog) -> tuple[Offer, ...]:
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
        offers.append(Offer(type_name, key, value, gpu_type.resource, count, device_memory_mib(labels, gpu_type)))
    positive = tuple(o for o in offers if o.allocatable > 0)
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
    offers = node_offers(labels, allocatable if isinstance(allocatable, dict) else {}, catalog)
    product = catalog.product_label(labels)
    label_type = catalog.type_from_labels(labels) if not offers and product is not None else None
    if label_type is not None and label_type.gpu_type is not None and product is not None:
        found = label_type.gpu_type
        offers = (Offer(found.name, product[0], product[1], found.resource,
                        parse_gpu_count(allocatable.get(found.resource)) if isinstance(allocatable, dict) else 0,
                        device_memory_mib(labels, found)),)
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
    )


def placing_catalog(catalog: Catalog, snapshot: Snapshot) -> Catalog:
    """The catalog the snapshot is decided with: with the types its nodes' labels made of products no
    type claims. Worked out once per snapshot."""
    if not snapshot.label_types:
        return catalog
    key = ("placing_catalog", id(catalog))
    found: Catalog | None = snapshot.memo.get(key)
    if found is None:
        found = snapshot.memo[key] = catalog.with_label_types(tuple(snapshot.label_types.values()))
    return found


def namespace_info_from_object(obj: Mapping[str, Any]) -> NamespaceInfo | None:
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str):
        return None
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    allowed = annotations.get(ALLOWED_CLASSES_ANNOTATION)
    return NamespaceInfo(
        name=name,
        inject=labels.get(INJECT_LABEL) == "enabled",
        default_class=labels.get(DEFAULT_CLASS_LABEL) or None,
        allowed_classes=None if allowed is None else tuple(c.strip() for c in str(allowed).split(",") if c.strip()),
    )


TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_gpus(obj: Mapping[str, Any], resource: str, target: tuple[int, int] | None = None) -> int:
    """GPUs a Pod needs on one node: app containers add up; an init container runs alone.

    `target` (container index, GPUs) counts that app container as having those GPUs: the planner
    asks before its patch has given them.
    """
    spec = obj.get("spec") or {}

    def gpus(container: Any) -> int:
        resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
        value = (resources.get("limits") or {}).get(resource, (resources.get("requests") or {}).get(resource))
        return parse_gpu_count(value)

    app = sum(target[1] if target and i == target[0] else gpus(c) for i, c in enumerate(spec.get("containers") or []))
    init = max((gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(app, init)


def pod_group(obj: Mapping[str, Any]) -> GroupName | None:
    """The group a Pod was placed in: the label the webhook wrote, with the Pod's namespace."""
    metadata = obj.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(GROUP_LABEL)
    return (str(metadata.get("namespace") or ""), name) if isinstance(name, str) and name else None


def pod_gpu_requests(obj: Mapping[str, Any], resources: Iterable[str]) -> tuple[str | None, dict[str, int]]:
    """(node, devices per resource) a Pod holds: bound and not finished; only resources it holds."""
    node = (obj.get("spec") or {}).get("nodeName") or None
    if node is None or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None, {}
    held = {r: pod_gpus(obj, r) for r in resources}
    return str(node), {r: n for r, n in held.items() if n > 0}


def unbound_gpu_pod(obj: Mapping[str, Any], resources: Iterable[str]) -> UnboundGpuPod | None:
    """The Pod as a known unbound GPU Pod; None when it is bound, finished, has no uid or requests no GPU."""
    metadata = obj.get("metadata") or {}
    uid = metadata.get("uid")
    if (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    held = next(((r, n) for r in resources if (n := pod_gpus(obj, r)) > 0), None)
    if not isinstance(uid, str) or not uid or held is None:
        return None
    annotations = metadata.get("annotations") or {}
    class_name = annotations.get(CLASS_ANNOTATION)
    return UnboundGpuPod(uid=uid, namespace=str(metadata.get("namespace") or ""), name=str(metadata.get("name") or ""),
                         resource=held[0], devices=held[1],
                         class_name=class_name if isinstance(class_name, str) else None,
                         types=split_types(annotations.get(TYPES_ANNOTATION)),
                         created_seconds=timestamp_seconds(metadata.get("creationTimestamp")), group=pod_group(obj),
                         gated=bool((obj.get("spec") or {}).get("schedulingGates")),
                         max_wait_seconds=parse_wait(annotations.get(MAX_WAIT_ANNOTATION)),
                         node_terms=required_terms(obj))


def enforced_types(types: tuple[str, ...], node_terms: Sequence[NodeTerm], resources: Sequence[str],
                   catalog: Catalog, hosts: Hosts = no_hosts) -> tuple[str, ...]:
    """The gpu-class.io/types a Pod lists, when its required node affinity keeps it to them for the GPU
    resources it holds; () when it does not (all or nothing: a part of the list would be an order the
    webhook never wrote).

    Anyone who creates a Pod can write the annotation, and a Pod the webhook leaves alone (its namespace
    not opted in, or created while the webhook was down) keeps what its author wrote. Readers that act on
    it for other Pods' sake (the upgrader reserving room, the extender counting GPUs, the pending metrics)
    must not take a string's word: the affinity is what the scheduler and kubelet enforce, and the webhook
    writes it beside the types on every Pod it places, so the list is believed exactly as far as it is true."""
    listed = frozenset(types)
    if types and keeps_within(node_terms, listed, resource_sets(resources, ()), catalog, hosts):
        return types
    return ()


def split_types(value: Any) -> tuple[str, ...]:
    """gpu-class.io/types as a tuple, best first, without blanks or repeats."""
    if not isinstance(value, str):
        return ()
    return tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))


def timestamp_seconds(value: Any) -> float | None:
    """An API timestamp ("2025-01-02T03:04:05Z") as Unix time; None when it is not one."""
    try:
        return datetime.fromisoformat(value).timestamp() if isinstance(value, str) and value.endswith("Z") else None
    except ValueError:
        return None


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
    )


def _is_usable(node: NodeInfo, offer: Offer) -> bool:
    return node.schedulable and offer.allocatable > 0


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


def share_of(node: NodeInfo, key: GroupKey, requested: Mapping[tuple[str, str], int]) -> Share:
    offer = node.offer(key[0]) if key[0] is not None else None
    usable = None
    if offer is not None and _is_usable(node, offer):
        usable = (Shape(offer.allocatable, offer.memory_mib, node.gpu_taints), _free_on(node, offer, requested))
    return Share(node.ready, node.ready and node.unschedulable, offer.resource if offer else "", usable)


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
        )


def _add(counter: Counter[Any], key: Any, sign: int) -> None:
    """counter[key] += sign, keeping no key at zero (a summary lists only what some node has)."""
    count = counter[key] + sign
    if count:
        counter[key] = count
    else:
        del counter[key]


NodeProblem = tuple[str, str, str]  # (driver, product, reason) of one DRA device gpu-class does not place on


@dataclass
class InventoryState:
    """The writable side: nodes, their DRA devices, namespaces and GPU requests per node. One writer, under its lock.

    A change costs what it touches, never the cluster: the dicts below are changed in place, each
    product group's summary is kept node by node (GroupTally), and publish() sums again only the
    groups that changed. What Pod events change (requested, unbound_pods, pod_groups) are persistent
    maps (immutables.Map, a hash array mapped trie): a change makes a new map that shares all but a
    few of its nodes with the old, and publish() hands it over as it is. A copy per publish cost
    every Pod event the size of the cluster: 0.2 ms with 6,000 GPU Pods pending, 0.8 ms with 20,000,
    the GIL held while an admission waits (`python -m bench live_burst pods`). Nodes and namespaces
    stay dicts, copied at a publish only when they changed: node events come in batches (one copy
    per batch), and a dict keeps the order the API server listed them in, where a trie's order
    follows string hashes, which differ from worker to worker. A reader holding an old Snapshot keeps
    a consistent view.
    """

    catalog: Catalog
    watch_namespaces: bool = False
    watch_pods: bool = False  # publish unbound_pods (else None: nobody tells us which Pods exist)
    bases: dict[str, NodeInfo] = field(default_factory=dict)  # each Node as its object says
    nodes: dict[str, NodeInfo] = field(default_factory=dict)  # published: GPU nodes, DRA devices merged in
    tallies: dict[GroupKey, GroupTally] = field(default_factory=dict)
    summaries: dict[GroupKey, ProductGroup] = field(default_factory=dict)  # as of the last publish
    namespaces: dict[str, NamespaceInfo] = field(default_factory=dict)
    # devices requested per (node, resource) by Pods bound to it, and per Pod so deletions can be undone
    pod_requested: dict[tuple[str, str], int] = field(default_factory=dict)
    pods: dict[str, Holding] = field(default_factory=dict)
    # the group of each accounted Pod that has one; each group's Pods (the inner maps are replaced,
    # never changed: snapshots share them)
    pod_group_of: dict[str, GroupName] = field(default_factory=dict)
    pod_groups: Map[GroupName, Mapping[str, Holding]] = field(default_factory=Map)
    unbound_pods: Map[str, UnboundGpuPod] = field(default_factory=Map)  # by uid
    # published: pod_requested, where the node serves the resource from DRA the devices claims hold
    requested: Map[tuple[str, str], int] = field(default_factory=Map)
    dra: DraState = field(default_factory=DraState)
    dra_off: str | None = None  # why ResourceSlices are not read; None: they are (or none exist)
    claims_read: bool = True  # False: devices taken by claims are unknown; Pods' requests count instead
    dra_taken: dict[str, Mapping[str, int]] = field(default_factory=dict)  # node -> resource -> devices
    dra_problems: dict[str, tuple[NodeProblem, ...]] = field(default_factory=dict)  # by node ("": no node)
    dra_devices: dict[str, int] = field(default_factory=dict)  # devices published per node
    synced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    snapshot: Snapshot = EMPTY_SNAPSHOT
    # what each NodePool can create, by NodePool name (replaced on change); None: NodePools are not read
    node_pools: dict[str, tuple[Pool, ...]] | None = None
    pools_off: str | None = None
    # what publish() reuses: the read-only copies of the dicts above the last snapshot shares, and the
    # names of those changed since
    _views: dict[str, Mapping[Any, Any]] = field(default_factory=dict, init=False, repr=False)
    _changed: set[str] = field(default_factory=set, init=False, repr=False)
    # the NodePools of the last publish and their grouping by type, kept while node_pools is not replaced
    _pools: tuple[Any, Mapping[str, tuple[Pool, ...]] | None] = field(default=(None, None), init=False, repr=False)
    _dirty_groups: set[GroupKey] | None = field(default=None, init=False, repr=False)  # None: all of them
    _of_type: dict[str | None, dict[GroupKey, ProductGroup]] = field(default_factory=dict, init=False, repr=False)
    _by_type: dict[str, tuple[ProductGroup, ...]] = field(default_factory=dict, init=False, repr=False)
    _unknown: tuple[ProductGroup, ...] = field(default=(), init=False, repr=False)
    _label_types: dict[str, GpuType] = field(default_factory=dict, init=False, repr=False)  # kept as nodes join
    _dra_device_total: int = field(default=0, init=False, repr=False)
    # unbound Pods, as they came, whose gpu-class.io/types their affinity did not enforce when judged (by uid)
    _unenforced: dict[str, UnboundGpuPod] = field(default_factory=dict, init=False, repr=False)
    _problems: tuple[DeviceProblem, ...] = field(default=(), init=False, repr=False)

    # --- nodes -------------------------------------------------------------------------
    def upsert_node(self, info: NodeInfo) -> bool:
        """Store a node; False when nothing the planner reads has changed (heartbeats, most updates)."""
        if self.bases.get(info.name) == info:
            return False
        self.bases[info.name] = info
        return self._refresh(info.name)

    def remove_node(self, name: str) -> bool:
        if self.bases.pop(name, None) is None:
            return False
        return self._refresh(name)

    def replace_nodes(self, infos: Iterable[NodeInfo]) -> None:
        """A full relist: the given nodes are all there is."""
        self.bases = {n.name: n for n in infos}
        self._refresh_all()

    def _merged(self, name: str) -> tuple[NodeInfo | None, Mapping[str, int], tuple[NodeProblem, ...], int]:
        """The node as published, the devices claims hold of each resource it serves from DRA, its
        DRA devices gpu-class does not place on, and how many DRA devices it has."""
        base = self.bases.get(name)
        devices = self.dra.devices_on(name)
        if not devices:
            return (base if base is not None and (base.offers or base.product) else None), {}, (), 0
        if base is None:
            reason = "not local to one node" if name == "" else f"node {name} is not in the cluster (or not yet seen)"
            return None, {}, tuple((i[0], d.product, d.problem or reason) for i, d in devices), len(devices)
        found = node_devices(devices, self.dra.is_taken, self.dra.mapped_resources(), dict(base.device_plugin),
                             self.catalog)
        problems = list(found.problems)
        by_attributes = {d.label_type.name: d.label_type for _, d in devices if d.label_type is not None}
        offers: list[Offer] = []
        taken: dict[str, int] = {}
        for type_name, resource, count, held, memory in found.offers:
            # a label naming another type of the resource would let that type's Pods onto these devices
            misnamed = [o for o in base.offers if o.resource == resource and o.type_name != type_name]
            if misnamed:
                problems.extend((i[0], d.product, f"node {name}'s label {misnamed[0].label_key}={misnamed[0].value} "
                                                   f"names {misnamed[0].type_name}, its devices are {type_name}: a "
                                                   f"{misnamed[0].type_name} Pod could be given them; fix the label")
                                for i, d in devices if d.type_name == type_name)
                continue
            labelled = base.offer(type_name)
            key, value = (labelled.label_key, labelled.value) if labelled else (HOSTNAME_LABEL, base.hostname)
            if not value:
                problems.extend((i[0], d.product, f"node {name} has no {HOSTNAME_LABEL} label nor a product label "
                                                   "of the type: a Pod's affinity cannot name it")
                                for i, d in devices if d.type_name == type_name)
                continue
            gpu_type = by_attributes.get(type_name) or self.catalog.types[type_name]
            default = None if gpu_type.memory_gib is None else gpu_type.memory_gib * GIB_MIB
            offers.append(Offer(type_name, key, value, resource, count, default if memory is None else memory, dra=True))
            taken[resource] = held
        merged = _merge_offers(base.offers, offers)
        offered = [by_attributes[o.type_name] for o in merged if o.type_name in by_attributes]
        info = replace(base, offers=merged, label_type=LabelType(offered[0]) if offered else base.label_type)
        return (info if merged or base.product else None), taken, tuple(problems), len(devices)

    def _refresh(self, name: str) -> bool:
        """Publish the node anew from its Node and its devices; False when nothing changed."""
        info, taken, problems, count = self._merged(name)
        changed = self._put_dra(name, problems, count)
        changed |= _put(self.dra_taken, name, taken)
        old = self.nodes.get(name)
        if old != info:
            if old is not None:
                self._leave_groups(old)
            if info is None:
                del self.nodes[name]
            else:
                self.nodes[name] = info
            self._changed.add("nodes")
            self._set_requested(name)
            if info is not None:
                self._join_groups(info)
            return True
        if self._set_requested(name):
            self._free_changed(name)
            return True
        return changed

    def _put_dra(self, name: str, problems: tuple[NodeProblem, ...], count: int) -> bool:
        self._dra_device_total += count - self.dra_devices.get(name, 0)
        changed = _put(self.dra_devices, name, count)
        if _put(self.dra_problems, name, problems):
            self._changed.add("dra_problems")
            changed = True
        return changed

    def _refresh_all(self) -> None:
        self.dra_problems, self.dra_devices, self.dra_taken = {}, {}, {}
        self._dra_device_total = 0
        nodes: dict[str, NodeInfo] = {}
        for name in set(self.bases) | self.dra.nodes():
            info, taken, problems, count = self._merged(name)
            self._put_dra(name, problems, count)
            _put(self.dra_taken, name, taken)
            if info is not None:
                nodes[name] = info
        self.nodes = nodes
        self._changed.update(("nodes", "dra_problems"))
        self._recount_requested()
        self._rebuild_groups()

    def _join_groups(self, info: NodeInfo) -> None:
        if info.label_type is not None and info.label_type.gpu_type is not None:
            self._label_types[info.label_type.gpu_type.name] = info.label_type.gpu_type
        for key in group_keys(info):
            tally = self.tallies.get(key)
            if tally is None:
                tally = self.tallies[key] = GroupTally(key)
            tally.put(info.name, share_of(info, key, self.requested))
            self._group_changed(key)

    def _leave_groups(self, info: NodeInfo) -> None:
        for key in group_keys(info):
            tally = self.tallies.get(key)
            if tally is None:
                continue
            tally.put(info.name, None)
            if not tally.members:
                del self.tallies[key]
            self._group_changed(key)

    def _group_changed(self, key: GroupKey) -> None:
        if self._dirty_groups is not None:
            self._dirty_groups.add(key)

    def _rebuild_groups(self) -> None:
        """Every group from the nodes: after a full list."""
        self.tallies = {}
        for info in self.nodes.values():
            self._join_groups(info)
        self._dirty_groups = None

    # --- DRA: ResourceSlices, ResourceClaims, DeviceClasses --------------------------------
    def _refresh_nodes(self, names: Iterable[str]) -> bool:
        changed = False
        for name in names:
            changed |= self._refresh(name)
        return changed

    def upsert_slice(self, info: SliceInfo) -> bool:
        return self._refresh_nodes(self.dra.upsert_slice(info))

    def remove_slice(self, name: str) -> bool:
        return self._refresh_nodes(self.dra.remove_slice(name))

    def replace_slices(self, infos: Iterable[SliceInfo]) -> None:
        self.dra.replace_slices(infos)
        self._refresh_all()

    def set_claim(self, key: str, devices: frozenset[DeviceId]) -> bool:
        return self._refresh_nodes(self.dra.set_claim(key, devices))

    def counted_for(self, claim: str | None, node: str) -> int:
        """Devices this state already counts in use on `node` for a Pod itself: those of `claim`, the claim
        kube-scheduler made for it on DRA devices (extended_resource_claim), allocated before the bind and
        possibly seen first."""
        return self.dra.held_on(claim, node) if claim is not None and self.claims_read else 0

    def replace_claims(self, claims: Iterable[tuple[str, frozenset[DeviceId]]], *, read: bool = True) -> None:
        self.dra.replace_claims(claims)
        self.claims_read = read
        self._refresh_all()

    def upsert_device_class(self, info: DeviceClassInfo) -> bool:
        if not self.dra.upsert_class(info):
            return False
        # published even when no node changes: which classes may hand out a GPU is the boundary's (boundary.py)
        self._refresh_nodes(self.dra.nodes())
        return True

    def remove_device_class(self, name: str) -> bool:
        if not self.dra.remove_class(name):
            return False
        self._refresh_nodes(self.dra.nodes())
        return True

    def replace_device_classes(self, infos: Iterable[DeviceClassInfo]) -> None:
        self.dra.replace_classes(infos)
        self._refresh_all()

    # --- namespaces --------------------------------------------------------------------
    def upsert_namespace(self, info: NamespaceInfo) -> bool:
        if self.namespaces.get(info.name) == info:
            return False
        self.namespaces[info.name] = info
        self._changed.add("namespaces")
        return True

    def remove_namespace(self, name: str) -> bool:
        if name not in self.namespaces:
            return False
        del self.namespaces[name]
        self._changed.add("namespaces")
        return True

    def replace_namespaces(self, infos: Iterable[NamespaceInfo]) -> None:
        self.namespaces = {n.name: n for n in infos}
        self._changed.add("namespaces")

    # --- GPU requests of bound Pods ------------------------------------------------------
    def set_pod(self, pod_key: str, node_name: str | None, gpus: Mapping[str, int],
                group: GroupName | None = None) -> bool:
        """Account a Pod's devices (per resource) to its node; node None or no devices (finished, unbound) removes it."""
        held = {r: n for r, n in gpus.items() if n > 0}
        new = (node_name, held) if node_name and held else None
        old = self.pods.get(pod_key)
        old_group = self.pod_group_of.get(pod_key)
        new_group = group if new is not None else None
        if old == new and old_group == new_group:
            return False
        if old is not None:
            self._add_requests(old[0], old[1], -1)
            del self.pods[pod_key]
        if new is not None:
            self.pods[pod_key] = new
            self._add_requests(new[0], new[1], 1)
        if old_group is not None or new_group is not None:
            self._regroup(pod_key, old_group, new_group)
        return True

    def _regroup(self, pod_key: str, old: GroupName | None, new: GroupName | None) -> None:
        with self.pod_groups.mutate() as groups:
            if old is not None:
                members = {k: h for k, h in groups.get(old, {}).items() if k != pod_key}
                if members:
                    groups[old] = members
                elif old in groups:
                    del groups[old]
                del self.pod_group_of[pod_key]
            if new is not None:
                groups[new] = {**groups.get(new, {}), pod_key: self.pods[pod_key]}
                self.pod_group_of[pod_key] = new
            self.pod_groups = groups.finish()

    def replace_pods(self, pods: Iterable[tuple[str, str | None, Mapping[str, int]]],
                     groups: Mapping[str, GroupName] | None = None) -> None:
        """All accounted Pods at once: (key, node, devices per resource), and the group of each Pod key that has one."""
        self.pods = {}
        for key, node, held in pods:
            positive = {r: n for r, n in held.items() if n > 0}
            if node and positive:
                self.pods[key] = (node, positive)
        self.pod_group_of = {k: g for k, g in (groups or {}).items() if k in self.pods}
        by_group: dict[GroupName, dict[str, Holding]] = {}
        for key, name in self.pod_group_of.items():
            by_group.setdefault(name, {})[key] = self.pods[key]
        self.pod_groups = Map(by_group)
        requested: dict[tuple[str, str], int] = {}
        for node_name, held in self.pods.values():
            for resource, n in held.items():
                requested[(node_name, resource)] = requested.get((node_name, resource), 0) + n
        self.pod_requested = requested
        self._recount_requested()
        self._rebuild_groups()

    # --- GPU Pods not yet bound --------------------------------------------------------------
    def set_unbound_pod(self, uid: str, pod: UnboundGpuPod | None) -> bool:
        """Keep the Pod of `uid` as known unbound, or (None: bound, finished, deleted) forget it."""
        pod = None if pod is None else self._enforced(pod, self.snapshot)
        if pod is None:
            self._unenforced.pop(uid, None)
        if self.unbound_pods.get(uid) == pod:
            return False
        self.unbound_pods = self.unbound_pods.delete(uid) if pod is None else self.unbound_pods.set(uid, pod)
        return True

    def replace_unbound_pods(self, pods: Iterable[UnboundGpuPod]) -> None:
        self._unenforced = {}
        self.unbound_pods = Map((p.uid, self._enforced(p, self.snapshot)) for p in pods)

    def _enforced(self, pod: UnboundGpuPod, snapshot: Snapshot) -> UnboundGpuPod:
        """The Pod with the types its own affinity enforces (enforced_types), judged with the catalog and the
        nodes of `snapshot`. One whose list its affinity does not enforce is kept as it came, to be judged
        again when the nodes change: its affinity may name a DRA node by hostname, or a product no type
        claims, that the view did not hold yet (the Pods' list may come before the nodes')."""
        types = pod.types and enforced_types(pod.types, pod.node_terms, (pod.resource,),
                                             placing_catalog(self.catalog, snapshot), snapshot.types_of_host)
        if types == pod.types or not pod.node_terms:  # without terms no view of the nodes could enforce them
            self._unenforced.pop(pod.uid, None)
        else:
            self._unenforced[pod.uid] = pod
        return pod if types == pod.types else replace(pod, types=types)

    def _judged_again(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with the Pods whose listed types were not enforced judged again on its nodes."""
        for uid, pod in list(self._unenforced.items()):
            kept = self.unbound_pods.get(uid)
            judged = self._enforced(pod, snapshot)
            if judged.types and kept == replace(pod, types=()):  # still the Pod as it was judged before
                self.unbound_pods = self.unbound_pods.set(uid, judged)
        return replace(snapshot, unbound_pods=self.unbound_pods) if self.watch_pods else snapshot

    def _add_requests(self, node_name: str, held: Mapping[str, int], sign: int) -> None:
        for resource, n in held.items():
            total = self.pod_requested.get((node_name, resource), 0) + sign * n
            if total > 0:
                self.pod_requested[(node_name, resource)] = total
            else:
                self.pod_requested.pop((node_name, resource), None)
        if self._set_requested(node_name):
            self._free_changed(node_name)

    def _free_changed(self, node_name: str) -> None:
        """The node's devices in use changed, nothing else of it: its groups' free counts move."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        for key in group_keys(node):
            tally = self.tallies.get(key)
            if tally is not None:
                tally.put(node_name, share_of(node, key, self.requested))
                self._group_changed(key)

    def _held(self, name: str) -> dict[tuple[str, str], int]:
        """A node's devices in use per resource: what claims hold of those it serves from DRA (once
        claims are read), what bound Pods request of the others."""
        from_claims = self.dra_taken.get(name, {}) if self.claims_read else {}
        return {(name, r): n for r in self.catalog.resources
                if (n := from_claims[r] if r in from_claims else self.pod_requested.get((name, r), 0)) > 0}

    def _set_requested(self, name: str) -> bool:
        held = self._held(name)
        old = {(name, r): self.requested[(name, r)] for r in self.catalog.resources if (name, r) in self.requested}
        if held == old:
            return False
        with self.requested.mutate() as requested:
            for key in old.keys() - held.keys():
                del requested[key]
            requested.update(held)
            self.requested = requested.finish()
        return True

    def _recount_requested(self) -> None:
        names = {n for n, _ in self.pod_requested} | set(self.dra_taken)
        self.requested = Map((k, v) for name in names for k, v in self._held(name).items())

    # --- publishing ----------------------------------------------------------------------
    # --- node pools ------------------------------------------------------------------
    def set_pools(self, name: str, pools: tuple[Pool, ...]) -> bool:
        """Store what NodePool `name` can create (() when deleted or naming no type); whether it changed."""
        current = self.node_pools or {}
        if current.get(name, ()) == pools and self.node_pools is not None:
            return False
        self.node_pools = {**current, name: pools} if pools else {k: v for k, v in current.items() if k != name}
        return True

    def replace_pools(self, pools: Iterable[tuple[str, tuple[Pool, ...]]]) -> None:
        self.node_pools = {name: found for name, found in pools if found}

    def publish(self) -> Snapshot:
        groups_changed = self._dirty_groups is None or bool(self._dirty_groups)
        self._publish_groups()
        if "dra_problems" in self._changed:
            self._problems = group_problems((node, p) for node, found in self.dra_problems.items() for p in found)
        if self._pools[0] is not self.node_pools:  # replaced whole on change: grouped again only then
            self._pools = (self.node_pools, None if self.node_pools is None else _pools_by_type(self.node_pools))
        old = self.snapshot
        new = Snapshot(
            groups_by_type=MappingProxyType(dict(self._by_type)) if groups_changed else old.groups_by_type,
            unknown_groups=self._unknown,
            namespaces=self._view("namespaces", self.namespaces) if self.watch_namespaces else None,
            synced=self.synced,
            nodes=self._view("nodes", self.nodes),
            requested=self.requested,
            pod_groups=self.pod_groups,
            unbound_pods=self.unbound_pods if self.watch_pods else None,
            dra=DraView(self.dra_off, self._dra_device_total, self._problems, self.claims_read,
                        self.dra.other_device_classes(self.catalog.drivers)),
            pools_by_type=self._pools[1],
            pools_off=self.pools_off,
            label_types=self._published_label_types(old.label_types) if groups_changed else old.label_types,
        )
        if groups_changed and self._unenforced:
            new = self._judged_again(new)
        # Only Pods waiting for a node changed (a Pod created, or written while it waits): the answers
        # worked out from the last snapshot hold for this one. Without this, each Pod of a Job created
        # one after the other would find the memo its predecessor's own event had just emptied.
        self.snapshot = replace(new, memo=old.memo) if _same_but_pods_waiting(old, new) else new
        self._changed.clear()
        return self.snapshot

    def _published_label_types(self, old: Mapping[str, GpuType]) -> Mapping[str, GpuType]:
        """The label types some node offers now; the old mapping while they are the same (few: one per
        product no type claims)."""
        self._label_types = {t: found for t, found in self._label_types.items() if t in self._by_type}
        return old if self._label_types == old else MappingProxyType(dict(self._label_types))

    def _view(self, name: str, current: Mapping[Any, Any]) -> Mapping[Any, Any]:
        """A read-only copy of `current` as it is now: the last one while it has not changed."""
        view = self._views.get(name)
        if view is None or name in self._changed:
            view = self._views[name] = MappingProxyType(dict(current))
        return view

    def _publish_groups(self) -> None:
        """Summaries of the groups changed since the last publish, and the sorted groups of their types."""
        if self._dirty_groups is None:
            self.summaries = {k: t.summary() for k, t in self.tallies.items()}
            self._of_type = {}
            for key, summary in self.summaries.items():
                self._of_type.setdefault(key[0], {})[key] = summary
            types: set[str | None] = {None, *self._of_type, *self._by_type}
        else:
            for key in self._dirty_groups:
                tally = self.tallies.get(key)
                of_type = self._of_type.setdefault(key[0], {})
                if tally is None:
                    self.summaries.pop(key, None)
                    of_type.pop(key, None)
                else:
                    self.summaries[key] = of_type[key] = tally.summary()
            types = {k[0] for k in self._dirty_groups}
        self._dirty_groups = set()
        for type_name in types:
            groups = tuple(sorted(self._of_type.get(type_name, {}).values(), key=_group_order))
            if type_name is None:
                self._unknown = groups
            elif groups:
                self._by_type[type_name] = groups
            else:
                self._by_type.pop(type_name, None)


def _same_but_pods_waiting(old: Snapshot, new: Snapshot) -> bool:
    """Whether `new` holds what `old` does, but perhaps for its unbound_pods: the maps and groups are
    the very same objects, a state reusing them while they have not changed."""
    shared = ("groups_by_type", "unknown_groups", "namespaces", "nodes", "requested", "pod_groups", "pools_by_type")
    return (old is not EMPTY_SNAPSHOT and all(getattr(old, name) is getattr(new, name) for name in shared)
            and (old.synced, old.dra, old.pools_off) == (new.synced, new.dra, new.pools_off))


def _pools_by_type(node_pools: Mapping[str, tuple[Pool, ...]]) -> Mapping[str, tuple[Pool, ...]]:
    """Each type's pools, the heaviest NodePool first (Karpenter's own choice among pools), then by name."""
    by_type: dict[str, list[Pool]] = {}
    for found in node_pools.values():
        for pool in found:
            by_type.setdefault(pool.type_name, []).append(pool)
    return MappingProxyType({t: tuple(sorted(p, key=lambda p: (-p.weight, p.name))) for t, p in by_type.items()})


def _put(index: dict[str, Any], name: str, value: Any) -> bool:
    """Set index[name] to value (an empty value removes it); whether that changed anything."""
    if index.get(name) == (value or None):
        return False
    if value:
        index[name] = value
    else:
        index.pop(name, None)
    return True


def _merge_offers(from_labels: Sequence[Offer], from_dra: Sequence[Offer]) -> tuple[Offer, ...]:
    """A DRA offer replaces the label offers of its resource that have no devices (the device plugin
    offers none there). As for labels alone: the offers with devices, or all when none has any."""
    served = {o.resource for o in from_dra}
    merged = [o for o in from_labels if o.resource not in served or o.allocatable > 0] + list(from_dra)
    positive = tuple(o for o in merged if o.allocatable > 0)
    return positive or tuple(merged)


def _group_order(group: ProductGroup) -> tuple[str, str, tuple[Taint, ...]]:
    return (group.label_key, group.product, group.reserved)


@dataclass(frozen=True)
class Reduced:
    """Kubernetes objects read from files, reduced as the watch reduces them."""

    nodes: tuple[NodeInfo, ...]
    namespaces: tuple[NamespaceInfo, ...]
    slices: tuple[SliceInfo, ...] = ()
    device_classes: tuple[DeviceClassInfo, ...] = ()
    claims: tuple[tuple[str, frozenset[DeviceId]], ...] = ()


def reduce_objects(catalog: Catalog, objects: Iterable[Mapping[str, Any]]) -> Reduced:
    """The GPU nodes, namespaces and DRA objects among Kubernetes objects read from a file. With
    ResourceSlices among them every node is kept: one without GPU labels may have DRA devices."""
    listed = list(objects)
    keep_all = any(o.get("kind") == "ResourceSlice" for o in listed)
    nodes, namespaces, slices, classes, claims = [], [], [], [], []
    for obj in listed:
        kind = obj.get("kind")
        if kind == "Node":
            nodes.append(node_info_from_object(obj, catalog, keep_all=keep_all))
        elif kind == "Namespace":
            namespaces.append(namespace_info_from_object(obj))
        elif kind == "ResourceSlice":
            slices.append(slice_from_object(obj, catalog))
        elif kind == "DeviceClass":
            classes.append(device_class_from_object(obj))
        elif kind == "ResourceClaim":
            claims.append(claim_from_object(obj))
    return Reduced(tuple(n for n in nodes if n is not None), tuple(n for n in namespaces if n is not None),
                   tuple(s for s in slices if s is not None), tuple(c for c in classes if c is not None), tuple(claims))


def fixed_snapshot(catalog: Catalog, reduced: Reduced, *, watch_namespaces: bool | None = None) -> Snapshot:
    """A snapshot that will not change; namespaces count as watched when any are given."""
    state = InventoryState(catalog=catalog, synced=True)
    state.dra.replace_slices(reduced.slices)
    state.dra.replace_classes(reduced.device_classes)
    state.dra.replace_claims(reduced.claims)
    state.replace_nodes(reduced.nodes)
    state.replace_namespaces(reduced.namespaces)
    state.watch_namespaces = bool(reduced.namespaces) if watch_namespaces is None else watch_namespaces
    return state.publish()


def build_snapshot(
    catalog: Catalog, objects: Iterable[Mapping[str, Any]], *, watch_namespaces: bool | None = None
) -> Snapshot:
    """A snapshot from Node (and optionally Namespace and DRA) objects, as read from a file."""
    return fixed_snapshot(catalog, reduce_objects(catalog, objects), watch_namespaces=watch_namespaces)
