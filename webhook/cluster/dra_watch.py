"""The watches of Dynamic Resource Allocation: DeviceClasses, ResourceSlices (the devices each node has),
ResourceClaims (the devices taken, where Pods' requests are not what counts, and the DeviceClasses each uses)
and ResourceClaimTemplates (the DeviceClasses of the claims each makes): what a class Pod's own claims may be
for (core/view/claim_sources.py).

Optional: each is off (and said so) where the API server does not serve it or lets us read it; the GPUs are then
counted from the device plugins' node allocatable, and the devices in use from the Pods' requests.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import kubernetes

from ..core.view.claim_sources import ClaimClasses, Source, claim_classes_from_object, template_classes_from_object
from ..core.view.dra import (
    DeviceClassInfo, DeviceId, SliceInfo, claim_from_object, device_class_from_object, slice_from_object,
)
from .feed import Feed, feeding
from .reflector import Reflector

log = logging.getLogger("gpu_class.watch")
# what each claims resource is named in the state
SOURCES: dict[str, Source] = {"resourceclaims": "claims", "resourceclaimtemplates": "templates"}


class ClaimRead(NamedTuple):
    """A ResourceClaim reduced: the devices its allocation holds, and the DeviceClasses its requests use (None:
    made from a template for one Pod)."""

    key: str
    devices: frozenset[DeviceId]
    classes: ClaimClasses | None


def claim_read(obj: dict[str, Any]) -> ClaimRead:
    key, devices = claim_from_object(obj)
    return ClaimRead(key, devices, claim_classes_from_object(obj)[1])


class DraWatch:
    """DeviceClasses and ResourceSlices, and ResourceClaims and ResourceClaimTemplates where Pods are watched
    (`claims`)."""

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
            self.reflectors += [
                feeding(feed, "resourceclaims", resource.list_resource_claim_for_all_namespaces, claim_read,
                        self.replace_claims, self.apply_claim, on_off=self.turned),
                feeding(feed, "resourceclaimtemplates", resource.list_resource_claim_template_for_all_namespaces,
                        template_classes_from_object, self.replace_templates, self.apply_template, on_off=self.turned),
            ]

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

    def replace_claims(self, claims: list[ClaimRead]) -> None:
        def apply() -> bool:
            self.state.replace_claims([(c.key, c.devices) for c in claims], read="resourceclaims" not in self._off)
            self.state.claim_sources.replace("claims", [(c.key, c.classes) for c in claims])
            return self.feed.mark_synced("resourceclaims")
        self._submit(apply, wait=True)

    def apply_claim(self, kind: str, obj: dict[str, Any]) -> None:
        read = claim_read(obj)
        held, classes = (frozenset(), None) if kind == "DELETED" else (read.devices, read.classes)

        def apply() -> bool:
            return self.state.set_claim(read.key, held) | self.state.claim_sources.set("claims", read.key, classes)
        self._submit(apply)

    def replace_templates(self, templates: list[tuple[str, ClaimClasses]]) -> None:
        def apply() -> bool:
            self.state.claim_sources.replace("templates", templates)
            return self.feed.mark_synced("resourceclaimtemplates")
        self._submit(apply, wait=True)

    def apply_template(self, kind: str, obj: dict[str, Any]) -> None:
        key, classes = template_classes_from_object(obj)
        self._submit(lambda: self.state.claim_sources.set("templates", key, None if kind == "DELETED" else classes))

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
            if name == "resourceclaims":
                self.state.replace_claims([], read=reason is None)
            if name in SOURCES:
                self.state.claim_sources.turn(SOURCES[name], reason)
            self.state.dra_off = dra_off
            # an answer like a list: the reflector counts as synced (a resource back on lists next)
            return self.feed.mark_synced(name)
        self._submit(apply, wait=True)
        if self.feed.logs_changes:
            _log_turned(name, reason, was_off, dra_off)

    def off(self) -> str | None:
        """Why DRA devices are not read (ResourceSlices or DeviceClasses off); None when they are."""
        return self._off.get("resourceslices") or self._off.get("deviceclasses")


# the kinds read beside DRA that can be off alone (RBAC): their name in the log, and what gpu-class does without them
_READ_ALONE = {
    "resourceclaims": ("ResourceClaims", "devices in use on DRA nodes are counted from the Pods' requests"),
    "resourceclaimtemplates": ("ResourceClaimTemplates",
                               "a class Pod whose spec.resourceClaims names one is refused"),
}


def _log_turned(name: str, reason: str | None, was_off: str | None, now_off: str | None) -> None:
    if now_off is not None and was_off is None:
        log.warning("DRA is off: %s; GPUs are counted from the device plugins' node allocatable only", now_off)
    elif now_off is None and was_off is not None:
        log.info("DRA is on: reading ResourceSlices and DeviceClasses")
    what = _READ_ALONE.get(name)
    if what is not None and now_off is None:
        kind, without = what
        if reason is not None:
            log.warning("%s are off: %s; %s", kind, reason, without)
        else:
            log.info("%s are read again", kind)
