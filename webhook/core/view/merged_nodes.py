"""The inventory state's nodes: each Node as its object says, and as published, merged with its DRA devices.

Devices a DRA driver publishes in ResourceSlices are a second source (dra.py reduces them): the
state keeps each Node as its object says (`bases`) and publishes it merged with its DRA devices, so
a node whose GPUs are DRA devices offers its types like any other, and the planner, the extender
and the reports read one view.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple, Sequence

from ..catalog.model import Catalog, LabelType
from .dra import HOSTNAME_LABEL, DeviceProblem, group_problems, node_devices
from .dra_state import DraState
from .nodes import GIB_MIB, NodeInfo, Offer

NodeProblem = tuple[str, str, str]  # (driver, product, reason) of one DRA device gpu-class does not place on


class Refreshed(NamedTuple):
    """A node merged anew: as published before and now (None: not published), and whether what the state
    keeps of its DRA devices changed."""

    old: NodeInfo | None
    new: NodeInfo | None
    devices_changed: bool


@dataclass
class MergedNodes:
    """Nodes as their objects say (`bases`) and as published (`nodes`): merged with their DRA devices, with
    the devices claims hold of each resource a node serves from DRA, and the devices gpu-class does not
    place on. `nodes` is copied at a publish only when it changed (InventoryState says why a dict)."""

    catalog: Catalog
    bases: dict[str, NodeInfo] = field(default_factory=dict)  # each Node as its object says
    nodes: dict[str, NodeInfo] = field(default_factory=dict)  # published: GPU nodes, DRA devices merged in
    dra: DraState = field(default_factory=DraState)
    claims_read: bool = True  # False: devices taken by claims are unknown; Pods' requests count instead
    dra_taken: dict[str, Mapping[str, int]] = field(default_factory=dict)  # node -> resource -> devices
    dra_problems: dict[str, tuple[NodeProblem, ...]] = field(default_factory=dict)  # by node ("": no node)
    dra_devices: dict[str, int] = field(default_factory=dict)  # devices published per node
    dra_device_total: int = 0
    # what publish() reuses while nothing changed: the read-only copy of `nodes` the last snapshot shares,
    # and the problems grouped; None: changed since
    _nodes_view: Mapping[str, NodeInfo] | None = field(default=None, init=False, repr=False)
    _problems: tuple[DeviceProblem, ...] | None = field(default=None, init=False, repr=False)

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
        for type_name, resource, count, held, memory, unhealthy in found.offers:
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
            offers.append(Offer(type_name, key, value, resource, count, default if memory is None else memory, dra=True,
                                unhealthy=unhealthy))
            taken[resource] = held
        merged = _merge_offers(base.offers, offers)
        offered = [by_attributes[o.type_name] for o in merged if o.type_name in by_attributes]
        info = replace(base, offers=merged, label_type=LabelType(offered[0]) if offered else base.label_type)
        return (info if merged or base.product else None), taken, tuple(problems), len(devices)

    def refresh(self, name: str) -> Refreshed:
        """Merge the node anew from its Node and its devices, and keep it as published."""
        info, taken, problems, count = self._merged(name)
        changed = self._put_dra(name, problems, count)
        changed |= _put(self.dra_taken, name, taken)
        old = self.nodes.get(name)
        if old != info:
            if info is None:
                del self.nodes[name]
            else:
                self.nodes[name] = info
            self._nodes_view = None
        return Refreshed(old, info, changed)

    def _put_dra(self, name: str, problems: tuple[NodeProblem, ...], count: int) -> bool:
        self.dra_device_total += count - self.dra_devices.get(name, 0)
        changed = _put(self.dra_devices, name, count)
        if _put(self.dra_problems, name, problems):
            self._problems = None
            changed = True
        return changed

    def refresh_all(self) -> None:
        """Merge every node anew: after a full list of Nodes or of DRA objects."""
        self.dra_problems, self.dra_devices, self.dra_taken = {}, {}, {}
        self.dra_device_total = 0
        nodes: dict[str, NodeInfo] = {}
        for name in set(self.bases) | self.dra.nodes():
            info, taken, problems, count = self._merged(name)
            self._put_dra(name, problems, count)
            _put(self.dra_taken, name, taken)
            if info is not None:
                nodes[name] = info
        self.nodes = nodes
        self._nodes_view = self._problems = None

    def held_by_claims(self, claim: str | None, node: str) -> int:
        """Devices of `node` that `claim` holds, where claims are read."""
        return self.dra.held_on(claim, node) if claim is not None and self.claims_read else 0

    def published_nodes(self) -> Mapping[str, NodeInfo]:
        """A read-only copy of `nodes` as they are now: the last one while they have not changed."""
        if self._nodes_view is None:
            self._nodes_view = MappingProxyType(dict(self.nodes))
        return self._nodes_view

    def published_problems(self) -> tuple[DeviceProblem, ...]:
        """The DRA devices gpu-class does not place on, counted by driver, product and reason."""
        if self._problems is None:
            self._problems = group_problems((node, p) for node, found in self.dra_problems.items() for p in found)
        return self._problems


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
    positive = tuple(o for o in merged if o.allocatable > 0 or o.unhealthy > 0)
    return positive or tuple(merged)
