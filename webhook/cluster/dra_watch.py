"""The watches of Dynamic Resource Allocation: DeviceClasses, ResourceSlices (the devices each node has) and
ResourceClaims (the devices taken, where Pods' requests are not what counts).

Optional: each is off (and said so) where the API server does not serve it or lets us read it; the GPUs are then
counted from the device plugins' node allocatable, and the devices in use from the Pods' requests.
"""

from __future__ import annotations

import logging
from typing import Any

import kubernetes

from ..core.view.dra import (
    DeviceClassInfo, DeviceId, SliceInfo, claim_from_object, device_class_from_object, slice_from_object,
)
from .feed import Feed, feeding
from .reflector import Reflector

log = logging.getLogger("gpu_class.watch")


class DraWatch:
    """DeviceClasses and ResourceSlices, and ResourceClaims where Pods are watched (`claims`)."""

    def __init__(self, feed: Feed, api: kubernetes.client.CoreV1Api, *, claims: bool) -> None:
        self.feed = feed
        self.catalog = feed.catalog
        self.state = feed.state
        self._submit = feed.submit  # bound once: it is called for every event
        self._off: dict[str, str] = {}  # why each resource that is off is off
        resource = kubernetes.client.ResourceV1Api(api.api_client)
        self.reflectors: list[Reflector] = [
            feeding(feed, "deviceclasses", resource.list_device_class, device_class_from_object,
                    self.replace_classes, self.apply_class, on_off=self.turned),
            feeding(feed, "resourceslices", resource.list_resource_slice, self.reduce_slice,
                    self.replace_slices, self.apply_slice, on_off=self.turned),
        ]
        if claims:
            self.reflectors.append(feeding(
                feed, "resourceclaims", resource.list_resource_claim_for_all_namespaces, claim_from_object,
                self.replace_claims, self.apply_claim, on_off=self.turned))

    def reduce_slice(self, obj: dict[str, Any]) -> SliceInfo | None:
        return slice_from_object(obj, self.catalog)

    def replace_slices(self, infos: list[SliceInfo]) -> None:
        def apply() -> bool:
            self.state.replace_slices(infos)
            return self.feed.mark_synced("resourceslices")
        self._submit(apply, wait=True)

    def apply_slice(self, kind: str, obj: dict[str, Any]) -> None:
        info = None if kind == "DELETED" else self.reduce_slice(obj)
        name = str((obj.get("metadata") or {}).get("name"))
        self._submit(lambda: self.state.upsert_slice(info) if info is not None else self.state.remove_slice(name))

    def replace_classes(self, infos: list[DeviceClassInfo]) -> None:
        def apply() -> bool:
            self.state.replace_device_classes(infos)
            return self.feed.mark_synced("deviceclasses")
        self._submit(apply, wait=True)

    def apply_class(self, kind: str, obj: dict[str, Any]) -> None:
        info = None if kind == "DELETED" else device_class_from_object(obj)
        name = str((obj.get("metadata") or {}).get("name"))
        self._submit(lambda: self.state.upsert_device_class(info) if info is not None
                     else self.state.remove_device_class(name))

    def replace_claims(self, claims: list[tuple[str, frozenset[DeviceId]]]) -> None:
        def apply() -> bool:
            self.state.replace_claims(claims, read="resourceclaims" not in self._off)
            return self.feed.mark_synced("resourceclaims")
        self._submit(apply, wait=True)

    def apply_claim(self, kind: str, obj: dict[str, Any]) -> None:
        key, devices = claim_from_object(obj)
        held = frozenset() if kind == "DELETED" else devices
        self._submit(lambda: self.state.set_claim(key, held))

    def turned(self, name: str, reason: str | None) -> None:
        """A DRA resource went off (not served, not allowed) or came back: say so once, and forget
        what it held while off."""
        was_off = self.off()
        if reason is None:
            self._off.pop(name, None)
        else:
            self._off[name] = reason
        dra_off = self.off()

        def apply() -> bool:
            if reason is not None and name == "resourceslices":
                self.state.replace_slices([])
            elif reason is not None and name == "deviceclasses":
                self.state.replace_device_classes([])
            elif name == "resourceclaims":
                self.state.replace_claims([], read=reason is None)
            self.state.dra_off = dra_off
            # an answer like a list: the reflector counts as synced (a resource back on lists next)
            return self.feed.mark_synced(name)
        self._submit(apply, wait=True)
        if self.feed.logs_changes:
            _log_turned(name, reason, was_off, dra_off)

    def off(self) -> str | None:
        """Why DRA devices are not read (ResourceSlices or DeviceClasses off); None when they are."""
        return self._off.get("resourceslices") or self._off.get("deviceclasses")


def _log_turned(name: str, reason: str | None, was_off: str | None, now_off: str | None) -> None:
    if now_off is not None and was_off is None:
        log.warning("DRA is off: %s; GPUs are counted from the device plugins' node allocatable only", now_off)
    elif now_off is None and was_off is not None:
        log.info("DRA is on: reading ResourceSlices and DeviceClasses")
    if name == "resourceclaims" and now_off is None:
        if reason is not None:
            log.warning("ResourceClaims are off: %s; devices in use on DRA nodes are counted from the Pods' "
                        "requests", reason)
        else:
            log.info("ResourceClaims are read again")
