"""The Snapshot: the immutable view of the inventory at one moment, which every decision reads. Pure.

Readers only ever get a Snapshot; the inventory state (inventory.py) is its single writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..catalog.model import Catalog, GpuType
from .claim_sources import ClaimSources
from .dra import DraView
from .namespaces import NamespaceInfo
from .nodes import NodeInfo, Offer
from .pods import GroupName, Holding, UnboundGpuPod
from .pools import Pool
from .product_groups import ProductGroup


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
    # the ResourceClaims and ResourceClaimTemplates Pods may name, by the DeviceClasses each uses
    claim_sources: ClaimSources = field(default_factory=ClaimSources)
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
