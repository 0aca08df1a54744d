"""Need, the third step of an admission: what the Pod asks, checked, into the values the fit reads. Pure.

The refusals come in a fixed order, the first thing wrong being the one the user hears of: claims of its
own not shaped as the API's, a cluster not read yet, claims that may give it a GPU (claims.py), the GPU
resources it asks for, its container and count (and whether Kueue counted them), then its exclusions, memory,
need, group, wait and upgrade. ask.py read every value once; a str there is the message refusing what the Pod
wrote.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

from ..catalog.model import Catalog, GpuClass, Need
from ..view.pods import CLASS_ANNOTATION, TYPES_ANNOTATION
from ..view.snapshot import Snapshot
from .annotations import EXCLUDE_ANNOTATION, POD_ANNOTATIONS, PREFIX, GroupAsk
from .ask import GpuAsk, PodAsk
from .claims import ClaimProblem, claim_problems
from .decision import MALFORMED, Decision
from .groups import GroupPlan
from .shape import Malformed
from .words import quoted, short


class Asked(NamedTuple):
    """What a Pod in scope asks, every value checked."""

    resource: str  # the resource its GPUs are asked of: the one it names, else its class's first
    fixed: str | None  # the resource it names itself; None lets the fit choose among its class's
    gpus: GpuAsk
    excluded: frozenset[str]
    min_memory_mib: float | None
    need: Need | None
    group: GroupAsk | None
    ignored: tuple[str, ...]  # warnings: what it wrote to no effect


def check_need(ask: PodAsk, gpu_class: GpuClass, snapshot: Snapshot, catalog: Catalog,
               namespace: str = "") -> Asked | Decision:
    """What the Pod (created in `namespace`) asks, checked; or the decision refusing the first thing wrong."""
    class_name = gpu_class.name
    if isinstance(ask.claims, Malformed):
        return Decision("refused", MALFORMED + ask.claims.message)
    if not snapshot.synced:
        return Decision(
            "refused",
            "gpu-class: the webhook has not yet read the cluster's nodes (starting, or the API server is "
            "unreachable); retry in a few seconds",
            class_name=class_name,
        )
    problems = claim_problems(ask.claims, namespace, snapshot) if ask.claims else ()
    if problems:
        return _claims_refusal(ask, gpu_class, problems)
    if isinstance(ask.requested, Malformed):
        return Decision("refused", MALFORMED + ask.requested.message)
    usable = catalog.class_resources(class_name)
    fixed, message = _fixed_resource(ask.requested, gpu_class, usable)
    if message is not None:
        return Decision("refused", message, class_name=class_name)
    resource = fixed or usable[0]
    gpus = ask.gpu_ask
    assert gpus is not None  # read for every Pod that names a class or asks for a GPU
    if isinstance(gpus, str):  # its container, or its count
        return Decision("refused", gpus, class_name=class_name)
    message = _uncounted(ask, resource, gpus)
    if message is not None:
        return Decision("refused", message, class_name=class_name)
    return _narrowing(ask, gpu_class, resource, fixed, gpus)


def _narrowing(ask: PodAsk, gpu_class: GpuClass, resource: str, fixed: str | None,
               gpus: GpuAsk) -> Asked | Decision:
    """The rest of what the Pod asks, checked: what narrows its class, its group, its wait and its upgrade."""
    excluded, min_memory, need, group = ask.excluded, ask.min_memory_mib, ask.need, ask.group
    if isinstance(excluded, str):
        return Decision("refused", excluded, class_name=gpu_class.name)
    if isinstance(min_memory, str):
        return Decision("refused", min_memory, class_name=gpu_class.name)
    if isinstance(need, str):
        return Decision("refused", need, class_name=gpu_class.name)
    if isinstance(group, str):
        return Decision("refused", group, class_name=gpu_class.name, group=GroupPlan(ask.group_name, "refused"))
    if group is not None and group.topology is None and not group.kueue_topology and gpu_class.group_topology:
        group = dataclasses.replace(group, topology=gpu_class.group_topology)  # the class's, as a Pod's own wins
    if isinstance(ask.max_wait, Malformed):
        return Decision("refused", ask.max_wait.message, class_name=gpu_class.name)
    if isinstance(ask.upgrade, str):
        return Decision("refused", ask.upgrade, class_name=gpu_class.name)
    return Asked(resource, fixed, gpus, excluded, min_memory, need, group,
                 _ignored_input(ask.unknown_annotations, gpu_class, excluded, group))


def _claims_refusal(ask: PodAsk, gpu_class: GpuClass, problems: Sequence[ClaimProblem]) -> Decision:
    """A class Pod may keep claims of its own only for devices that are not GPUs: refused, each claim told why."""
    told = "; ".join(f"claim {quoted(p.claim)}: {p.message}" for p in problems)
    advice = []
    if any(p.gpus for p in problems):
        drop = (f"the {CLASS_ANNOTATION} annotation" if ask.class_name is not None else
                "its GPU limit (the namespace's default class applies to Pods that ask for one)")
        advice.append("A claim that may be given a GPU could give the Pod GPUs twice, or of a type its class does "
                      "not allow (gpu-class gives it GPUs through its GPU limit and its node): drop such claims to let "
                      f"gpu-class place it, or drop {drop} and ask for GPUs through the claims alone")
    if any(p.retry for p in problems):
        advice.append("Create what it names first (a controller that creates the Pod retries by itself)")
    return Decision(
        "refused",
        "gpu-class: a class Pod's resource claims (spec.resourceClaims) may only be for devices that are not GPUs "
        f"(DeviceClasses pinned to a driver no GPU type names, as a ComputeDomain channel's or a NIC's): {told}"
        + "".join(f". {a}" for a in advice),
        class_name=gpu_class.name,
    )


def _fixed_resource(asked: Sequence[str], gpu_class: GpuClass,
                    usable: Sequence[str]) -> tuple[str | None, str | None]:
    """(the catalog resource the Pod already asks for or None, the message refusing it or None); `usable`:
    the resources the class's types are given as."""
    if len(asked) > 1:
        return None, (f"gpu-class: the Pod asks for {' and '.join(asked)}; a Pod can be placed on one GPU "
                      f"resource only (class {gpu_class.name} uses {', '.join(usable)})")
    if asked and asked[0] not in usable:
        return None, (f"gpu-class: the Pod asks for {asked[0]}, which no type of class {gpu_class.name} uses; "
                      f"ask for one of {', '.join(usable)}, or for none and let gpu-class choose")
    return (asked[0] if asked else None), None


def _uncounted(ask: PodAsk, resource: str, gpus: GpuAsk) -> str | None:
    """The message refusing a Pod Kueue started, or one whose parent's templates Kueue counted (a
    StatefulSet's or LeaderWorkerSet's, gated until Kueue admits them), when only gpu-class would give it
    its GPUs, or None. Kueue's other check, of its flavor, needs the fit (kueue.py); this one comes here, with
    the count, where the order of the refusals has always had it."""
    if not ((ask.kueue_started or ask.counted_at_parent) and gpus.gpus.set_limit):
        return None
    count = gpus.gpus.count
    return (
        f"gpu-class: Kueue started this Pod's workload and counted its quota from the pod template, which asks for "
        f"no {resource}; gpu-class would add {count} here, GPUs the quota never counted. Queue it as a kind "
        f"gpu-class decides at the workload, where Kueue counts it (docs/users/kueue.md), or write the limit ({resource}: "
        f"{count}) in the workload's pod template"
    )


def _ignored_input(unknown: Sequence[str], gpu_class: GpuClass, excluded: frozenset[str],
                   group: GroupAsk | None = None) -> tuple[str, ...]:
    """Warnings for what the user wrote to no effect: a gpu-class.io/ annotation nobody reads (a typo
    such as gpu-class.io/min-mem would otherwise pass unnoticed), excluded types the class lacks, a group
    topology Kueue decides instead."""
    warnings = []
    if group is not None and group.topology_left_to_kueue:
        # two schedulers of topology would pull one workload two ways: Kueue's assignment wins, as it is quota
        warnings.append(short(f"gpu-class: {group.topology_left_to_kueue} ignored: Kueue's Topology Aware "
                              "Scheduling places it"))
    if unknown:
        read = ", ".join(k[len(PREFIX):] for k in POD_ANNOTATIONS if k != TYPES_ANNOTATION)
        warnings.append(short(f"gpu-class: {quoted(', '.join(unknown))[1:-1]} ignored; known: {read}"))
    outside = sorted(excluded - set(gpu_class.types)) if excluded else []
    if outside:
        warnings.append(short(f"gpu-class: {EXCLUDE_ANNOTATION}: {', '.join(outside)} ignored: not in class "
                              f"{gpu_class.name}"))
    return tuple(warnings)
