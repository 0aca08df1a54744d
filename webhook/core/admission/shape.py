"""The parts of a Pod's JSON the webhook reads and writes, checked to have their API shapes. Pure.

A Pod without the shape the webhook must read or patch is refused whole (MalformedPod). A part the decision
may never reach (its resource claims, its nodeSelector, the resources its containers ask for) is kept as a
Malformed instead, and refused only when the decision reaches it: a Pod out of scope is left alone whatever
else it holds. ask.read_pod reads the Pod through these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Sequence, TypeVar

from ..view.affinity import NodeTerm, node_term
from .words import quoted

T = TypeVar("T")

# A Pod's tolerations, each as its sorted (field, text) items: hashable, so a decision can be memoised on them
Tolerations = tuple[tuple[tuple[str, str], ...], ...]


class MalformedPod(ValueError):
    """The Pod does not have the shape of a Pod where the webhook must read or write it."""


@dataclass(frozen=True)
class Malformed:
    """A part of the Pod without its API shape, refused as MalformedPod when the decision reaches it."""

    message: str


def caught(read: Callable[..., T], *args: Any) -> T | Malformed:
    """read(*args), or the Malformed it raised as MalformedPod."""
    try:
        return read(*args)
    except MalformedPod as exc:
        return Malformed(str(exc))


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPod(f"{where} must be an object")
    return value


def item(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise MalformedPod(f"{where} must be an object")
    return value


def listed(value: Any, where: str) -> Sequence[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedPod(f"{where} must be a list")
    return value


def string_map(value: Any, where: str) -> Mapping[str, str]:
    found = mapping(value, where)
    for key, text in found.items():
        if not isinstance(text, str):
            raise MalformedPod(f"{where}[{quoted(key)}] must be a string")
    return found


def app_containers(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    spec = mapping(pod.get("spec"), "spec")
    containers = listed(spec.get("containers"), "spec.containers")
    if not containers:
        raise MalformedPod("spec.containers is empty")
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise MalformedPod(f"spec.containers[{i}] must be an object with a name")
    return containers


class PodClaim(NamedTuple):
    """One of the Pod's spec.resourceClaims: its name in the Pod, and the ResourceClaim or the
    ResourceClaimTemplate it names (the API server lets a Pod name exactly one)."""

    name: str
    claim: str | None  # resourceClaimName
    template: str | None  # resourceClaimTemplateName


def own_claims(spec: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The Pod's spec.resourceClaims (DRA claims it brings itself)."""
    claims = listed(spec.get("resourceClaims"), "spec.resourceClaims")
    found = []
    for i, c in enumerate(claims):
        where = f"spec.resourceClaims[{i}]"
        named = [item(c, where).get(k) for k in ("resourceClaimName", "resourceClaimTemplateName")]
        for key, value in zip(("resourceClaimName", "resourceClaimTemplateName"), named):
            if not isinstance(value, (str, type(None))):
                raise MalformedPod(f"{where}.{key} must be a string")
        found.append(PodClaim(str(c.get("name") or "?"), named[0] or None, named[1] or None))
    return tuple(found)


def patchable_parts(pod: Mapping[str, Any]
                    ) -> tuple[Mapping[str, str], tuple[NodeTerm, ...], tuple[NodeTerm, ...], Tolerations]:
    """The parts patch.py reads and extends must have their API shapes. Returns four of them: the
    Pod's labels, its required and its preferred node affinity terms, and its tolerations."""
    spec = mapping(pod.get("spec"), "spec")
    node_affinity = mapping(mapping(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "nodeAffinity")
    required = mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), "nodeAffinity.required")
    terms = tuple(
        node_term(listed(item(term, f"nodeSelectorTerms[{i}]").get("matchExpressions"),
                         f"nodeSelectorTerms[{i}].matchExpressions"))
        for i, term in enumerate(listed(required.get("nodeSelectorTerms"), "nodeSelectorTerms")))
    preferred = tuple(
        _preferred_term(item(pref, f"nodeAffinity.preferred[{i}]"))
        for i, pref in enumerate(listed(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                        "nodeAffinity.preferred")))
    tolerations = tuple(
        tuple(sorted((k, v) for k, v in item(toleration, f"spec.tolerations[{i}]").items() if isinstance(v, str)))
        for i, toleration in enumerate(listed(spec.get("tolerations"), "spec.tolerations")))
    pod_affinity = mapping(mapping(spec.get("affinity"), "spec.affinity").get("podAffinity"), "podAffinity")
    for i, term in enumerate(listed(pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                    "podAffinity.required")):
        item(term, f"podAffinity.required[{i}]")
    labels = string_map(mapping(pod.get("metadata"), "metadata").get("labels"), "metadata.labels")
    if not isinstance(spec.get("schedulerName", ""), (str, type(None))):
        raise MalformedPod("spec.schedulerName must be a string")
    return labels, terms, preferred, tolerations


def _preferred_term(preference: Mapping[str, Any]) -> NodeTerm:
    """A preferred term's `In` expressions: where the Pod steers itself (a term of another shape names nothing)."""
    term = preference.get("preference")
    expressions = term.get("matchExpressions") if isinstance(term, dict) else None
    return node_term(expressions) if isinstance(expressions, list) else ()


def requested_resources(pod: Mapping[str, Any], resources: Sequence[str]) -> tuple[str, ...]:
    """The catalog's resources the Pod's containers or init containers limit or request, in catalog order."""
    spec = mapping(pod.get("spec"), "spec")
    found: set[str] = set()
    for field in ("containers", "initContainers"):
        for i, c in enumerate(listed(spec.get(field), f"spec.{field}")):
            where = f"spec.{field}[{i}]"
            container_resources = mapping(mapping(c, where).get("resources"), f"{where}.resources")
            # Each container's few keys against the catalog's resources, not every resource looked up
            # in every container: this runs on every admission.
            for part in ("limits", "requests"):
                found.update(k for k, v in mapping(container_resources.get(part), f"{where}.resources.{part}").items()
                             if v is not None)
    return tuple(r for r in resources if r in found)
