"""The inventory's writable state, and the snapshots built from Kubernetes objects read from a file.

The state has a single writer (a file loader or the watch); readers only ever get an immutable
Snapshot (snapshot.py). What the state holds lives in the modules named for it: the nodes
(nodes.py, merged with their DRA devices in merged_nodes.py), the Pods and what they hold
(pods.py, holdings.py), the product groups (product_groups.py), namespaces and node pools.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from immutables import Map

from ..catalog.model import Catalog
from .claim_sources import ClaimClasses, ClaimSourcesState, claim_classes_from_object, template_classes_from_object
from .dra import (
    DeviceClassInfo, DeviceId, DraView, SliceInfo, claim_from_object, device_class_from_object, gpu_drivers,
    slice_from_object,
)
from .holdings import PodHoldings
from .merged_nodes import MergedNodes
from .namespaces import NamespaceInfo, namespace_info_from_object
from .nodes import NodeInfo, node_info_from_object
from .pods import GroupName, Holding, UnboundGpuPod
from .pools import Pool, pools_by_type
from .product_groups import GroupKey, GroupSummaries, ProductGroup
from .snapshot import EMPTY_SNAPSHOT, Snapshot


@dataclass
class InventoryState:
    """The writable side: nodes, their DRA devices, namespaces and GPU requests per node. One writer, under its lock.

    Its parts each hold one thing: `merged` the nodes, as their objects say and merged with their DRA
    devices (MergedNodes); `holdings` the devices Pods hold and the GPU Pods not yet bound
    (PodHoldings); `groups` each product group's summary (GroupSummaries). This class applies each
    event to the parts it touches (a node that changes leaves its groups and joins them again with
    its devices in use) and publishes.

    A change costs what it touches, never the cluster: the parts' dicts are changed in place, each
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
    namespaces: dict[str, NamespaceInfo] = field(default_factory=dict)
    dra_off: str | None = None  # why ResourceSlices are not read; None: they are (or none exist)
    synced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    snapshot: Snapshot = EMPTY_SNAPSHOT
    # what each NodePool can create, by NodePool name (replaced on change); None: NodePools are not read
    node_pools: dict[str, tuple[Pool, ...]] | None = None
    pools_off: str | None = None
    merged: MergedNodes = field(init=False, repr=False)
    # the claims and templates Pods may name, by their DeviceClasses (changed in place: no node reads them)
    claim_sources: ClaimSourcesState = field(init=False, repr=False)
    groups: GroupSummaries = field(default_factory=GroupSummaries, init=False, repr=False)
    holdings: PodHoldings = field(init=False, repr=False)
    # the read-only copy of `namespaces` the last snapshot shares; None: changed since
    _namespaces_view: Mapping[str, NamespaceInfo] | None = field(default=None, init=False, repr=False)
    # the NodePools of the last publish and their grouping by type, kept while node_pools is not replaced
    _pools: tuple[Any, Mapping[str, tuple[Pool, ...]] | None] = field(default=(None, None), init=False, repr=False)

    def __post_init__(self) -> None:
        self.merged = MergedNodes(self.catalog)
        self.claim_sources = ClaimSourcesState(read=self.watch_pods)
        self.holdings = PodHoldings(self.catalog, self.merged, self.groups)

    # what callers read of the parts
    @property
    def bases(self) -> dict[str, NodeInfo]:
        return self.merged.bases

    @property
    def nodes(self) -> dict[str, NodeInfo]:
        return self.merged.nodes

    @property
    def pods(self) -> dict[str, Holding]:
        return self.holdings.pods

    @property
    def unbound_pods(self) -> Map[str, UnboundGpuPod]:
        return self.holdings.unbound_pods

    @property
    def requested(self) -> Map[tuple[str, str], int]:
        return self.holdings.requested

    @requested.setter
    def requested(self, requested: Map[tuple[str, str], int]) -> None:
        self.holdings.requested = requested

    @property
    def summaries(self) -> dict[GroupKey, ProductGroup]:
        return self.groups.summaries

    # --- nodes -------------------------------------------------------------------------
    def upsert_node(self, info: NodeInfo) -> bool:
        """Store a node; False when nothing the planner reads has changed (heartbeats, most updates)."""
        if self.merged.bases.get(info.name) == info:
            return False
        self.merged.bases[info.name] = info
        return self._refresh(info.name)

    def remove_node(self, name: str) -> bool:
        if self.merged.bases.pop(name, None) is None:
            return False
        return self._refresh(name)

    def replace_nodes(self, infos: Iterable[NodeInfo]) -> None:
        """A full relist: the given nodes are all there is."""
        self.merged.bases = {n.name: n for n in infos}
        self._refresh_all()

    def _refresh(self, name: str) -> bool:
        """Publish the node anew from its Node and its devices; False when nothing changed."""
        old, new, devices_changed = self.merged.refresh(name)
        if old != new:
            if old is not None:
                self.groups.leave(old)
            self.holdings.set_requested(name)
            if new is not None:
                self.groups.join(new, self.holdings.requested)
            return True
        return self.holdings.use_changed(name) or devices_changed

    def _refresh_all(self) -> None:
        self.merged.refresh_all()
        self.holdings.recount_requested()
        self.groups.rebuild(self.merged.nodes.values(), self.holdings.requested)

    # --- DRA: ResourceSlices, ResourceClaims, DeviceClasses --------------------------------
    def _refresh_nodes(self, names: Iterable[str]) -> bool:
        changed = False
        for name in names:
            changed |= self._refresh(name)
        return changed

    def upsert_slice(self, info: SliceInfo) -> bool:
        return self._refresh_nodes(self.merged.dra.upsert_slice(info))

    def remove_slice(self, name: str) -> bool:
        return self._refresh_nodes(self.merged.dra.remove_slice(name))

    def replace_slices(self, infos: Iterable[SliceInfo]) -> None:
        self.merged.dra.replace_slices(infos)
        self._refresh_all()

    def set_claim(self, key: str, devices: frozenset[DeviceId]) -> bool:
        return self._refresh_nodes(self.merged.dra.set_claim(key, devices))

    def counted_for(self, claim: str | None, node: str) -> int:
        """Devices this state already counts in use on `node` for a Pod itself: those of `claim`, the claim
        kube-scheduler made for it on DRA devices (extended_resource_claim), allocated before the bind and
        possibly seen first."""
        return self.merged.held_by_claims(claim, node)

    def replace_claims(self, claims: Iterable[tuple[str, frozenset[DeviceId]]], *, read: bool = True) -> None:
        self.merged.dra.replace_claims(claims)
        self.merged.claims_read = read
        self._refresh_all()

    def upsert_device_class(self, info: DeviceClassInfo) -> bool:
        if not self.merged.dra.upsert_class(info):
            return False
        # published even when no node changes: which classes may hand out a GPU is the boundary's (boundary.py)
        self._refresh_nodes(self.merged.dra.nodes())
        return True

    def remove_device_class(self, name: str) -> bool:
        if not self.merged.dra.remove_class(name):
            return False
        self._refresh_nodes(self.merged.dra.nodes())
        return True

    def replace_device_classes(self, infos: Iterable[DeviceClassInfo]) -> None:
        self.merged.dra.replace_classes(infos)
        self._refresh_all()

    # --- namespaces --------------------------------------------------------------------
    def upsert_namespace(self, info: NamespaceInfo) -> bool:
        if self.namespaces.get(info.name) == info:
            return False
        self.namespaces[info.name] = info
        self._namespaces_view = None
        return True

    def remove_namespace(self, name: str) -> bool:
        if name not in self.namespaces:
            return False
        del self.namespaces[name]
        self._namespaces_view = None
        return True

    def replace_namespaces(self, infos: Iterable[NamespaceInfo]) -> None:
        self.namespaces = {n.name: n for n in infos}
        self._namespaces_view = None

    # --- Pods: GPU requests of bound Pods, GPU Pods not yet bound -------------------------
    def set_pod(self, pod_key: str, node_name: str | None, gpus: Mapping[str, int],
                group: GroupName | None = None) -> bool:
        """Account a Pod's devices (per resource) to its node; node None or no devices (finished, unbound) removes it."""
        return self.holdings.set_pod(pod_key, node_name, gpus, group)

    def replace_pods(self, pods: Iterable[tuple[str, str | None, Mapping[str, int]]],
                     groups: Mapping[str, GroupName] | None = None) -> None:
        """All accounted Pods at once: (key, node, devices per resource), and the group of each Pod key that has one."""
        self.holdings.replace_pods(pods, groups)

    def set_unbound_pod(self, uid: str, pod: UnboundGpuPod | None) -> bool:
        """Keep the Pod of `uid` as known unbound, or (None: bound, finished, deleted) forget it."""
        return self.holdings.set_unbound_pod(uid, pod, self.snapshot)

    def replace_unbound_pods(self, pods: Iterable[UnboundGpuPod]) -> None:
        self.holdings.replace_unbound_pods(pods, self.snapshot)

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

    # --- publishing ----------------------------------------------------------------------
    def publish(self) -> Snapshot:
        groups_changed = self.groups.publish()
        if self._pools[0] is not self.node_pools:  # replaced whole on change: grouped again only then
            self._pools = (self.node_pools, None if self.node_pools is None else pools_by_type(self.node_pools))
        merged, holdings, old = self.merged, self.holdings, self.snapshot
        new = Snapshot(
            groups_by_type=MappingProxyType(dict(self.groups.by_type)) if groups_changed else old.groups_by_type,
            unknown_groups=self.groups.unknown,
            namespaces=self._published_namespaces() if self.watch_namespaces else None,
            synced=self.synced,
            nodes=merged.published_nodes(),
            requested=holdings.requested,
            pod_groups=holdings.pod_groups,
            unbound_pods=holdings.unbound_pods if self.watch_pods else None,
            dra=DraView(self.dra_off, merged.dra_device_total, merged.published_problems(), merged.claims_read,
                        merged.dra.other_device_classes(gpu_drivers(self.catalog)), merged.dra.class_drivers()),
            claim_sources=self.claim_sources.publish(),
            pools_by_type=self._pools[1],
            pools_off=self.pools_off,
            label_types=self.groups.published_label_types(old.label_types) if groups_changed else old.label_types,
        )
        if groups_changed and holdings.unenforced:
            holdings.judge_again(new)  # the nodes changed: the Pods' affinities may enforce their types now
            new = replace(new, unbound_pods=holdings.unbound_pods) if self.watch_pods else new
        # Only Pods waiting for a node changed (a Pod created, or written while it waits): the answers
        # worked out from the last snapshot hold for this one. Without this, each Pod of a Job created
        # one after the other would find the memo its predecessor's own event had just emptied.
        self.snapshot = replace(new, memo=old.memo) if _same_but_pods_waiting(old, new) else new
        return self.snapshot

    def _published_namespaces(self) -> Mapping[str, NamespaceInfo]:
        """A read-only copy of `namespaces` as they are now: the last one while they have not changed."""
        if self._namespaces_view is None:
            self._namespaces_view = MappingProxyType(dict(self.namespaces))
        return self._namespaces_view


def _same_but_pods_waiting(old: Snapshot, new: Snapshot) -> bool:
    """Whether `new` holds what `old` does, but perhaps for its unbound_pods and the claims Pods may name (no
    answer kept in the memo reads them): the maps and groups are the very same objects, a state reusing them
    while they have not changed."""
    shared = ("groups_by_type", "unknown_groups", "namespaces", "nodes", "requested", "pod_groups", "pools_by_type")
    return (old is not EMPTY_SNAPSHOT and all(getattr(old, name) is getattr(new, name) for name in shared)
            and (old.synced, old.dra, old.pools_off) == (new.synced, new.dra, new.pools_off))


@dataclass(frozen=True)
class Reduced:
    """Kubernetes objects read from files, reduced as the watch reduces them."""

    nodes: tuple[NodeInfo, ...]
    namespaces: tuple[NamespaceInfo, ...]
    slices: tuple[SliceInfo, ...] = ()
    device_classes: tuple[DeviceClassInfo, ...] = ()
    claims: tuple[tuple[str, frozenset[DeviceId]], ...] = ()
    # the DeviceClasses of each ResourceClaim and ResourceClaimTemplate, by namespace/name
    claim_classes: tuple[tuple[str, ClaimClasses | None], ...] = ()
    template_classes: tuple[tuple[str, ClaimClasses], ...] = ()


def reduce_objects(catalog: Catalog, objects: Iterable[Mapping[str, Any]]) -> Reduced:
    """The GPU nodes, namespaces and DRA objects among Kubernetes objects read from a file. With
    ResourceSlices among them every node is kept: one without GPU labels may have DRA devices."""
    listed = list(objects)
    keep_all = any(o.get("kind") == "ResourceSlice" for o in listed)
    nodes, namespaces, slices, classes, claims, claim_classes, templates = [], [], [], [], [], [], []
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
            claim_classes.append(claim_classes_from_object(obj))
        elif kind == "ResourceClaimTemplate":
            templates.append(template_classes_from_object(obj))
    return Reduced(tuple(n for n in nodes if n is not None), tuple(n for n in namespaces if n is not None),
                   tuple(s for s in slices if s is not None), tuple(c for c in classes if c is not None), tuple(claims),
                   tuple(claim_classes), tuple(templates))


def fixed_snapshot(catalog: Catalog, reduced: Reduced, *, watch_namespaces: bool | None = None) -> Snapshot:
    """A snapshot that will not change; namespaces count as watched when any are given."""
    # a file is all there is: a claim or template it does not hold does not exist
    state = InventoryState(catalog=catalog, synced=True)
    state.claim_sources = ClaimSourcesState(read=True)
    state.claim_sources.replace("claims", reduced.claim_classes)
    state.claim_sources.replace("templates", reduced.template_classes)
    state.merged.dra.replace_slices(reduced.slices)
    state.merged.dra.replace_classes(reduced.device_classes)
    state.merged.dra.replace_claims(reduced.claims)
    state.replace_nodes(reduced.nodes)
    state.replace_namespaces(reduced.namespaces)
    state.watch_namespaces = bool(reduced.namespaces) if watch_namespaces is None else watch_namespaces
    return state.publish()


def build_snapshot(
    catalog: Catalog, objects: Iterable[Mapping[str, Any]], *, watch_namespaces: bool | None = None
) -> Snapshot:
    """A snapshot from Node (and optionally Namespace and DRA) objects, as read from a file."""
    return fixed_snapshot(catalog, reduce_objects(catalog, objects), watch_namespaces=watch_namespaces)
