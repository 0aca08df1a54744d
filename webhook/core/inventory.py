"""The cluster view the planner decides on: GPU nodes grouped by product, namespaces, GPUs in use.

Pure data and state. Nodes are reduced to the few fields the decision needs (NodeInfo) the moment
they arrive, so memory grows with GPU nodes, not with the size of Node objects. The state has a
single writer (a file loader or the watch); readers only ever get an immutable Snapshot.
Summaries are kept per product group, so an admission costs O(groups), whatever the node count.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from .catalog import Catalog

INJECT_LABEL = "gpu-class.io/inject"
DEFAULT_CLASS_LABEL = "gpu-class.io/default-class"
ALLOWED_CLASSES_ANNOTATION = "gpu-class.io/allowed-classes"

@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeInfo:
    """What the planner needs of a GPU node."""

    name: str
    label_key: str  # the product label key found on the node (first of productLabels present)
    product: str
    type_name: str | None  # None: the product maps to no catalog type
    ready: bool
    unschedulable: bool
    allocatable_gpus: int
    gpu_taints: tuple[Taint, ...]

    @property
    def is_usable(self) -> bool:
        return self.ready and not self.unschedulable and self.allocatable_gpus > 0


@dataclass(frozen=True)
class NamespaceInfo:
    name: str
    inject: bool
    default_class: str | None
    allowed_classes: tuple[str, ...] | None  # None: every class is allowed


@dataclass(frozen=True)
class ProductGroup:
    """Nodes that share one product label (key and value): the unit of affinity terms."""

    label_key: str
    product: str
    type_name: str | None
    nodes: int
    not_ready: int
    cordoned: int
    # distinct (allocatable GPUs, GPU taints) of usable nodes, most GPUs first: few entries per group
    usable: tuple[tuple[int, tuple[Taint, ...]], ...]
    free_gpus: int  # over usable nodes: allocatable minus GPUs requested by Pods bound to them

    @property
    def max_allocatable(self) -> int:
        return self.usable[0][0] if self.usable else 0


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of the inventory at one moment."""

    groups_by_type: Mapping[str, tuple[ProductGroup, ...]]
    unknown_groups: tuple[ProductGroup, ...] = ()
    namespaces: Mapping[str, NamespaceInfo] | None = None  # None: namespaces are not watched
    synced: bool = True
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)  # GPU nodes by name
    requested: Mapping[str, int] = field(default_factory=dict)  # GPUs held by bound, unfinished Pods, by node
    # answers worked out from this snapshot (the planner's), dropped with it; the only mutable part
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def groups(self, type_name: str) -> tuple[ProductGroup, ...]:
        return self.groups_by_type.get(type_name, ())

    def namespace(self, name: str) -> NamespaceInfo | None:
        return None if self.namespaces is None else self.namespaces.get(name)

    @property
    def node_count(self) -> int:
        return sum(g.nodes for gs in self.groups_by_type.values() for g in gs) + sum(g.nodes for g in self.unknown_groups)


EMPTY_SNAPSHOT = Snapshot(groups_by_type=MappingProxyType({}), synced=False)


def parse_gpu_count(value: Any) -> int:
    """Extended resources are whole numbers; anything else counts as none."""
    try:
        count = int(str(value))
    except (TypeError, ValueError):
        return 0
    return max(count, 0)


def node_info_from_object(obj: Mapping[str, Any], catalog: Catalog) -> NodeInfo | None:
    """Reduce a Node object to NodeInfo; None for nodes with no GPU product label."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not isinstance(labels, dict):
        return None
    label_key = next((k for k in catalog.product_labels if isinstance(labels.get(k), str) and labels[k]), None)
    if label_key is None:
        return None
    product = labels[label_key]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )
    taints = tuple(
        sorted(
            Taint(key=t["key"], value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
            for t in spec.get("taints") or []
            if isinstance(t, dict) and t.get("key") in catalog.gpu_taint_keys
        )
    )
    return NodeInfo(
        name=name,
        label_key=label_key,
        product=product,
        type_name=catalog.type_of_product(product),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        allocatable_gpus=parse_gpu_count((status.get("allocatable") or {}).get(catalog.gpu_resource)),
        gpu_taints=taints,
    )


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


def pod_gpu_request(obj: Mapping[str, Any], resource: str) -> tuple[str | None, int]:
    """(node, GPUs) a Pod holds: bound and not finished."""
    node = (obj.get("spec") or {}).get("nodeName") or None
    if node is None or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None, 0
    return str(node), pod_gpus(obj, resource)


def summarize_group(nodes: Iterable[NodeInfo], requested: Mapping[str, int]) -> ProductGroup:
    members = list(nodes)
    first = members[0]
    usable = [n for n in members if n.is_usable]
    shapes = sorted({(n.allocatable_gpus, n.gpu_taints) for n in usable}, key=lambda s: (-s[0], s[1]))
    return ProductGroup(
        label_key=first.label_key,
        product=first.product,
        type_name=first.type_name,
        nodes=len(members),
        not_ready=sum(1 for n in members if not n.ready),
        cordoned=sum(1 for n in members if n.ready and n.unschedulable),
        usable=tuple(shapes),
        free_gpus=sum(max(n.allocatable_gpus - requested.get(n.name, 0), 0) for n in usable),
    )


GroupKey = tuple[str, str]  # (label key, product)


@dataclass
class InventoryState:
    """The writable side: nodes, namespaces and GPU requests per node. One writer, under its lock.

    Each change re-summarises only the product groups it touches and publishes a new Snapshot.
    The dicts a Snapshot exposes (nodes, namespaces, requested) are replaced, never changed in
    place, so a reader holding an old Snapshot keeps a consistent view.
    """

    catalog: Catalog
    watch_namespaces: bool = False
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    members: dict[GroupKey, dict[str, NodeInfo]] = field(default_factory=dict)
    summaries: dict[GroupKey, ProductGroup] = field(default_factory=dict)
    namespaces: dict[str, NamespaceInfo] = field(default_factory=dict)
    # GPUs requested per node by Pods bound to it, and per Pod so deletions can be undone
    requested: dict[str, int] = field(default_factory=dict)
    pods: dict[str, tuple[str, int]] = field(default_factory=dict)
    synced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    snapshot: Snapshot = EMPTY_SNAPSHOT

    # --- nodes -------------------------------------------------------------------------
    def upsert_node(self, info: NodeInfo) -> bool:
        """Store a node; False when nothing the planner reads has changed (heartbeats, most updates)."""
        old = self.nodes.get(info.name)
        if old == info:
            return False
        if old is not None:
            self._leave_group(old)
        self.nodes = {**self.nodes, info.name: info}  # copy on write: published snapshots share the old one
        key = (info.label_key, info.product)
        self.members.setdefault(key, {})[info.name] = info
        self._resummarize(key)
        return True

    def remove_node(self, name: str) -> bool:
        old = self.nodes.get(name)
        if old is None:
            return False
        self.nodes = {k: v for k, v in self.nodes.items() if k != name}
        self._leave_group(old)
        return True

    def _leave_group(self, info: NodeInfo) -> None:
        key = (info.label_key, info.product)
        group = self.members.get(key, {})
        group.pop(info.name, None)
        if not group:
            self.members.pop(key, None)
        self._resummarize(key)

    def _resummarize(self, key: GroupKey) -> None:
        group = self.members.get(key)
        if group:
            self.summaries[key] = summarize_group(group.values(), self.requested)
        else:
            self.summaries.pop(key, None)

    def replace_nodes(self, infos: Iterable[NodeInfo]) -> None:
        """A full relist: the given nodes are all there is."""
        self.nodes = {n.name: n for n in infos}
        self.members = {}
        for info in self.nodes.values():
            self.members.setdefault((info.label_key, info.product), {})[info.name] = info
        self.summaries = {k: summarize_group(v.values(), self.requested) for k, v in self.members.items()}

    # --- namespaces --------------------------------------------------------------------
    def upsert_namespace(self, info: NamespaceInfo) -> bool:
        if self.namespaces.get(info.name) == info:
            return False
        self.namespaces = {**self.namespaces, info.name: info}
        return True

    def remove_namespace(self, name: str) -> bool:
        if name not in self.namespaces:
            return False
        self.namespaces = {k: v for k, v in self.namespaces.items() if k != name}
        return True

    def replace_namespaces(self, infos: Iterable[NamespaceInfo]) -> None:
        self.namespaces = {n.name: n for n in infos}

    # --- GPU requests of bound Pods ------------------------------------------------------
    def set_pod(self, pod_key: str, node_name: str | None, gpus: int) -> bool:
        """Account a Pod's GPUs to its node; node None or gpus 0 (finished, unbound) removes it."""
        new = (node_name, gpus) if node_name and gpus > 0 else None
        old = self.pods.get(pod_key)
        if old == new:
            return False
        if old is not None:
            self._add_request(old[0], -old[1])
            del self.pods[pod_key]
        if new is not None:
            self.pods[pod_key] = new
            self._add_request(new[0], new[1])
        return True

    def replace_pods(self, pods: Iterable[tuple[str, str | None, int]]) -> None:
        self.pods = {k: (n, g) for k, n, g in pods if n and g > 0}
        requested: dict[str, int] = {}
        for node_name, gpus in self.pods.values():
            requested[node_name] = requested.get(node_name, 0) + gpus
        self.requested = requested
        self.summaries = {k: summarize_group(v.values(), self.requested) for k, v in self.members.items()}

    def _add_request(self, node_name: str, delta: int) -> None:
        total = self.requested.get(node_name, 0) + delta
        requested = dict(self.requested)  # copy on write, as for nodes
        if total > 0:
            requested[node_name] = total
        else:
            requested.pop(node_name, None)
        self.requested = requested
        node = self.nodes.get(node_name)
        if node is not None:
            self._resummarize((node.label_key, node.product))

    # --- publishing ----------------------------------------------------------------------
    def publish(self) -> Snapshot:
        by_type: dict[str, list[ProductGroup]] = {}
        unknown: list[ProductGroup] = []
        for summary in self.summaries.values():
            if summary.type_name is None:
                unknown.append(summary)
            else:
                by_type.setdefault(summary.type_name, []).append(summary)
        self.snapshot = Snapshot(
            groups_by_type=MappingProxyType({k: tuple(sorted(v, key=_group_order)) for k, v in by_type.items()}),
            unknown_groups=tuple(sorted(unknown, key=_group_order)),
            namespaces=MappingProxyType(self.namespaces) if self.watch_namespaces else None,
            synced=self.synced,
            nodes=MappingProxyType(self.nodes),
            requested=MappingProxyType(self.requested),
        )
        return self.snapshot


def _group_order(group: ProductGroup) -> tuple[str, str]:
    return (group.label_key, group.product)


def reduce_objects(
    catalog: Catalog, objects: Iterable[Mapping[str, Any]]
) -> tuple[list[NodeInfo], list[NamespaceInfo]]:
    """The GPU nodes and the namespaces among Kubernetes objects read from a file."""
    nodes: list[NodeInfo] = []
    namespaces: list[NamespaceInfo] = []
    for obj in objects:
        kind = obj.get("kind")
        if kind == "Node":
            info = node_info_from_object(obj, catalog)
            if info is not None:
                nodes.append(info)
        elif kind == "Namespace":
            ns = namespace_info_from_object(obj)
            if ns is not None:
                namespaces.append(ns)
    return nodes, namespaces


def fixed_snapshot(
    catalog: Catalog, nodes: Iterable[NodeInfo], namespaces: list[NamespaceInfo], *, watch_namespaces: bool | None = None
) -> Snapshot:
    """A snapshot that will not change; namespaces count as watched when any are given."""
    state = InventoryState(catalog=catalog, synced=True)
    state.replace_nodes(nodes)
    state.replace_namespaces(namespaces)
    state.watch_namespaces = bool(namespaces) if watch_namespaces is None else watch_namespaces
    return state.publish()


def build_snapshot(
    catalog: Catalog, objects: Iterable[Mapping[str, Any]], *, watch_namespaces: bool | None = None
) -> Snapshot:
    """A snapshot from Node (and optionally Namespace) objects, as read from a file."""
    nodes, namespaces = reduce_objects(catalog, objects)
    return fixed_snapshot(catalog, nodes, namespaces, watch_namespaces=watch_namespaces)
