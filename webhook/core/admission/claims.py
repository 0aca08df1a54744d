"""Which of a class Pod's own resource claims may stay: those that cannot give it a GPU. Pure.

gpu-class gives a class Pod its GPUs through its GPU limit and its node; a claim of the Pod's own that could be
allocated a GPU would give it GPUs twice, or of a type its class does not allow. A claim for other devices (the
IMEX channel of a ComputeDomain that NVLink across nodes needs, a NIC) is its driver's business, and passes.

Which a claim is, is read from the cluster, never from the Pod: the ResourceClaim or ResourceClaimTemplate it
names, as the view holds it (view/claim_sources.py), and every DeviceClass its requests use (`exactly`, and each
`firstAvailable` subrequest, any of which may be the one allocated). A claim passes only when each of those
classes is pinned to a driver no GPU type names (DraView.other_device_classes, the list the tenant boundary's
policy admits claims by). What a request adds of its own (selectors, allocationMode All) only narrows or widens
its choice within its class, and a class that can give no GPU cannot be made to give one.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from ..view.claim_sources import Source
from ..view.snapshot import Snapshot
from .shape import PodClaim
from .words import quoted


class ClaimProblem(NamedTuple):
    """Why one of the Pod's claims cannot stay."""

    claim: str  # its name in the Pod
    message: str
    gpus: bool  # it may give a GPU (else it names what the view does not hold, or is unreadable)
    retry: bool  # what it names may be in the view in a moment


def claim_problems(claims: Sequence[PodClaim], namespace: str, snapshot: Snapshot) -> list[ClaimProblem]:
    """The problem of each of the Pod's claims that cannot stay, in the Pod's order; [] when all may."""
    return [p for p in (_problem(c, namespace, snapshot) for c in claims) if p is not None]


def _problem(claim: PodClaim, namespace: str, snapshot: Snapshot) -> ClaimProblem | None:
    if (claim.claim is None) == (claim.template is None):
        both = "both a resourceClaimName and a resourceClaimTemplateName" if claim.claim else \
            "neither a resourceClaimName nor a resourceClaimTemplateName"
        return ClaimProblem(claim.name, f"names {both}", False, False)
    source: Source = "claims" if claim.claim is not None else "templates"
    name = claim.claim or claim.template or ""
    kind = "ResourceClaim" if source == "claims" else "ResourceClaimTemplate"
    what = f"{kind} {quoted(namespace + '/' + name)}"  # names the Pod wrote: kept short
    sources = snapshot.claim_sources
    off = sources.off(source)
    if off is not None:
        return ClaimProblem(claim.name, f"{what}: the webhook does not read {kind}s ({off})", False, False)
    classes = sources.classes(source, namespace, name)
    if classes is None:
        return ClaimProblem(claim.name, f"no {what} in the webhook's view (not created yet, or a moment ago)",
                            False, True)
    if isinstance(classes, str):
        return ClaimProblem(claim.name, f"{what}: {classes}", False, False)
    reasons = [r for r in (_class_reason(c, snapshot) for c in classes) if r is not None]
    if not reasons:
        return None
    return ClaimProblem(claim.name, f"{what} uses {'; '.join(r for r, _ in reasons)}",
                        any(not unseen for _, unseen in reasons), all(unseen for _, unseen in reasons))


def _class_reason(device_class: str, snapshot: Snapshot) -> tuple[str, bool] | None:
    """Why a DeviceClass may give a GPU, and whether only because the view does not hold it; None: it cannot."""
    dra = snapshot.dra
    if device_class in dra.other_device_classes:
        return None
    if dra.off is not None:
        return f"DeviceClass {device_class}, and the webhook does not read DeviceClasses ({dra.off})", False
    pinned = dict(dra.class_drivers)
    if device_class not in pinned:
        return f"DeviceClass {device_class}, which the cluster does not have (or not yet in the webhook's view)", True
    driver = pinned[device_class]
    if driver is None:
        return (f"DeviceClass {device_class}, which pins no driver (no selector `device.driver == \"...\"`), so it "
                "may select a GPU"), False
    return f"DeviceClass {device_class} of driver {driver}, whose devices are GPUs", False
