"""The DRA side of the inventory state: ResourceSlices, DeviceClasses and ResourceClaims as dra.py reduces
them, with the indexes that say which nodes a change touches, so the state merges only those again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .dra import Device, DeviceClassInfo, DeviceId, PoolId, SliceInfo


def _discard(index: dict[Any, set[str]], key: Any, name: str) -> None:
    members = index.get(key, set())
    members.discard(name)
    if not members:
        index.pop(key, None)


@dataclass
class DraState:
    """ResourceSlices, DeviceClasses and ResourceClaims as reduced, with the indexes the merge needs.

    One writer (the inventory state, under its lock). Each change says which nodes it touches, so
    only their merge is redone.
    """

    slices: dict[str, SliceInfo] = field(default_factory=dict)
    by_pool: dict[PoolId, set[str]] = field(default_factory=dict)
    by_node: dict[str, set[str]] = field(default_factory=dict)  # "" for slices not local to one node
    claims: dict[str, frozenset[DeviceId]] = field(default_factory=dict)
    holders: dict[DeviceId, int] = field(default_factory=dict)  # claims holding each device
    classes: dict[str, DeviceClassInfo] = field(default_factory=dict)

    # --- slices
    def _nodes_of_pool(self, pool: PoolId) -> set[str]:
        return {self.slices[s].node or "" for s in self.by_pool.get(pool, ())}

    def _add(self, info: SliceInfo) -> None:
        self.slices[info.name] = info
        self.by_pool.setdefault(info.pool_id, set()).add(info.name)
        self.by_node.setdefault(info.node or "", set()).add(info.name)

    def _drop(self, name: str) -> None:
        old = self.slices.pop(name, None)
        if old is not None:
            _discard(self.by_pool, old.pool_id, name)
            _discard(self.by_node, old.node or "", name)

    def upsert_slice(self, info: SliceInfo) -> set[str]:
        """Store a slice; the nodes whose devices may have changed (a new generation retires a pool's others)."""
        old = self.slices.get(info.name)
        if old == info:
            return set()
        touched = self._nodes_of_pool(info.pool_id) | ({old.node or ""} if old else set())
        if old is not None:
            touched |= self._nodes_of_pool(old.pool_id)
            self._drop(info.name)
        self._add(info)
        return touched | self._nodes_of_pool(info.pool_id)

    def remove_slice(self, name: str) -> set[str]:
        old = self.slices.get(name)
        if old is None:
            return set()
        touched = self._nodes_of_pool(old.pool_id)
        self._drop(name)
        return touched

    def replace_slices(self, infos: Iterable[SliceInfo]) -> None:
        self.slices, self.by_pool, self.by_node = {}, {}, {}
        for info in infos:
            self._add(info)

    def _newest(self, pool: PoolId) -> int:
        return max((self.slices[s].generation for s in self.by_pool.get(pool, ())), default=0)

    def devices_on(self, node: str) -> list[tuple[DeviceId, Device]]:
        """The node's devices in the newest generation of their pools (older slices are being replaced)."""
        found: list[tuple[DeviceId, Device]] = []
        for name in sorted(self.by_node.get(node, ())):
            info = self.slices[name]
            if info.generation == self._newest(info.pool_id):
                found.extend(((info.driver, info.pool, d.name), d) for d in info.devices)
        return found

    def nodes(self) -> set[str]:
        return set(self.by_node)

    # --- claims
    def _hold(self, devices: Iterable[DeviceId], sign: int) -> None:
        for d in devices:
            count = self.holders.get(d, 0) + sign
            if count > 0:
                self.holders[d] = count
            else:
                self.holders.pop(d, None)

    def _nodes_of_devices(self, devices: Iterable[DeviceId]) -> set[str]:
        return {n for pool in {(d[0], d[1]) for d in devices} for n in self._nodes_of_pool(pool)}

    def set_claim(self, key: str, devices: frozenset[DeviceId]) -> set[str]:
        """Store what a claim holds (nothing: forget it); the nodes of the devices that changed hands."""
        old = self.claims.get(key, frozenset())
        if old == devices:
            return set()
        self._hold(old, -1)
        self._hold(devices, 1)
        if devices:
            self.claims[key] = devices
        else:
            self.claims.pop(key, None)
        return self._nodes_of_devices(old ^ devices)

    def replace_claims(self, claims: Iterable[tuple[str, frozenset[DeviceId]]]) -> None:
        self.claims = {k: v for k, v in claims if v}
        self.holders = {}
        for devices in self.claims.values():
            self._hold(devices, 1)

    def held_on(self, claim: str, node: str) -> int:
        """How many of the node's devices the claim holds."""
        held = self.claims.get(claim)
        return len(held & {d for d, _ in self.devices_on(node)}) if held else 0

    def is_taken(self, device: DeviceId) -> bool:
        return device in self.holders

    # --- device classes
    def upsert_class(self, info: DeviceClassInfo) -> bool:
        if self.classes.get(info.name) == info:
            return False
        self.classes[info.name] = info
        return True

    def remove_class(self, name: str) -> bool:
        return self.classes.pop(name, None) is not None

    def replace_classes(self, infos: Iterable[DeviceClassInfo]) -> None:
        self.classes = {c.name: c for c in infos}

    def other_device_classes(self, gpu_drivers: Iterable[str]) -> tuple[str, ...]:
        """The DeviceClasses pinned to a driver not among `gpu_drivers`: they cannot hand out a GPU."""
        drivers = frozenset(gpu_drivers)
        return tuple(sorted(c.name for c in self.classes.values()
                            if c.pinned_driver is not None and c.pinned_driver not in drivers))

    def class_drivers(self) -> tuple[tuple[str, str | None], ...]:
        return tuple(sorted((c.name, c.pinned_driver) for c in self.classes.values()))

    def mapped_resources(self) -> frozenset[str]:
        return frozenset(r for c in self.classes.values() for r in c.resources)
