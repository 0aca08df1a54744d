"""The claims a Pod may name, as the view knows them: each ResourceClaim and ResourceClaimTemplate by
namespace/name, reduced to the DeviceClasses its requests use. Pure.

A class Pod may carry claims for devices that are not GPUs (a ComputeDomain channel, a NIC); whether a
claim could give it a GPU is decided from what the cluster holds (the claim or template it names, and
the DeviceClasses those use: admission/claims.py), never from what the Pod says. So the view keeps,
per claim and template, the names of its DeviceClasses and nothing else: a cluster of 60,000 Pods with
a channel claim each holds tens of thousands of them, and each worker keeps its own view. The tuples
are interned (most claims use the same one or two classes), and a claim the resourceclaim controller
made from a template for one Pod (annotated `resource.kubernetes.io/pod-claim-name`) is not kept: its
Pod names the template, and kube-scheduler refuses any other Pod that names it. Both maps are
persistent (immutables.Map), so a snapshot shares them and an event costs O(log n), not a copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from immutables import Map

# The DeviceClasses a claim's requests use, sorted, each once; or, as a str, why they cannot be read
ClaimClasses = tuple[str, ...] | str
Source = Literal["claims", "templates"]
# set by kube-controller-manager's resourceclaim controller on each claim it makes from a template for a Pod
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def claim_spec_classes(spec: Any) -> ClaimClasses:
    """The DeviceClasses a ResourceClaimSpec's requests use: `exactly.deviceClassName`, and every
    `firstAvailable` subrequest's (any may be the one allocated). A request naming none is read as
    the reason: the API server validates claims, so only a hand-written object gets there."""
    requests = _map(_map(spec).get("devices")).get("requests")
    if requests is None:
        return ()
    if not isinstance(requests, list):
        return "spec.devices.requests is not a list"
    found: set[str] = set()
    for i, request in enumerate(requests):
        request = _map(request)
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        named = ([_map(exactly).get("deviceClassName")] if exactly is not None else
                 [_map(s).get("deviceClassName") for s in first] if isinstance(first, list) and first else [None])
        readable = [n for n in named if isinstance(n, str) and n]
        if len(readable) < len(named):
            return f"request {request.get('name') or i} names no deviceClassName"
        found.update(readable)
    return tuple(sorted(found))


def claim_classes_from_object(obj: Mapping[str, Any]) -> tuple[str, ClaimClasses | None]:
    """(namespace/name, the DeviceClasses of a ResourceClaim); None for one made from a template for a
    Pod, which no other Pod can use (kept out of the view: see the module's docstring)."""
    metadata = _map(obj.get("metadata"))
    key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    if POD_CLAIM_ANNOTATION in _map(metadata.get("annotations")):
        return key, None
    return key, claim_spec_classes(obj.get("spec"))


def template_classes_from_object(obj: Mapping[str, Any]) -> tuple[str, ClaimClasses]:
    """(namespace/name, the DeviceClasses of a ResourceClaimTemplate: of the claim it makes, spec.spec)."""
    metadata = _map(obj.get("metadata"))
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}", claim_spec_classes(_map(obj.get("spec")).get("spec"))


@dataclass(frozen=True)
class ClaimSources:
    """What a snapshot says of the claims and templates Pods may name."""

    claims: Mapping[str, ClaimClasses] = field(default_factory=Map)  # by namespace/name
    templates: Mapping[str, ClaimClasses] = field(default_factory=Map)
    # why each is not read (not watched, not served, not allowed); None: it is
    claims_off: str | None = None
    templates_off: str | None = None

    def classes(self, source: Source, namespace: str, name: str) -> ClaimClasses | None:
        """The DeviceClasses of claim or template `name` of `namespace`; None when the view has none."""
        return (self.claims if source == "claims" else self.templates).get(f"{namespace}/{name}")

    def off(self, source: Source) -> str | None:
        return self.claims_off if source == "claims" else self.templates_off


NOT_WATCHED = "not watched by this view"
UNREAD_SOURCES = ClaimSources(claims_off=NOT_WATCHED, templates_off=NOT_WATCHED)


class ClaimSourcesState:
    """The writer's side: one writer (the inventory state, under its lock); publish() hands the maps over as
    they are."""

    def __init__(self, *, read: bool = False) -> None:
        self.claims: Map[str, ClaimClasses] = Map()
        self.templates: Map[str, ClaimClasses] = Map()
        self.off: dict[Source, str | None] = {"claims": None if read else NOT_WATCHED,
                                              "templates": None if read else NOT_WATCHED}
        self._interned: dict[ClaimClasses, ClaimClasses] = {}
        self._published = UNREAD_SOURCES if not read else ClaimSources()

    def _intern(self, classes: ClaimClasses) -> ClaimClasses:
        return self._interned.setdefault(classes, classes)

    def _stored(self, source: Source) -> Map[str, ClaimClasses]:
        return self.claims if source == "claims" else self.templates

    def _store(self, source: Source, found: Map[str, ClaimClasses]) -> None:
        if source == "claims":
            self.claims = found
        else:
            self.templates = found

    def set(self, source: Source, key: str, classes: ClaimClasses | None) -> bool:
        """Keep (None: forget) the classes of one claim or template; whether the view changed."""
        current = self._stored(source)
        if classes is None:
            if key not in current:
                return False
            self._store(source, current.delete(key))
            return True
        if current.get(key) == classes:
            return False
        self._store(source, current.set(key, self._intern(classes)))
        return True

    def replace(self, source: Source, items: Iterable[tuple[str, ClaimClasses | None]]) -> None:
        """A full list of `source`: all there is."""
        other = self.templates if source == "claims" else self.claims
        self._interned = {c: c for c in other.values()}  # what only the old list used goes with it
        self._store(source, Map({key: self._intern(classes) for key, classes in items if classes is not None}))

    def turn(self, source: Source, off: str | None) -> None:
        """`source` is read again (None), or not (why): what it held is forgotten either way, a list follows."""
        self.off[source] = off
        self._store(source, Map())

    def publish(self) -> ClaimSources:
        """The read-only view: the last one while nothing changed."""
        last = self._published
        if (last.claims is not self.claims or last.templates is not self.templates
                or (last.claims_off, last.templates_off) != (self.off["claims"], self.off["templates"])):
            self._published = ClaimSources(self.claims, self.templates, self.off["claims"], self.off["templates"])
        return self._published
