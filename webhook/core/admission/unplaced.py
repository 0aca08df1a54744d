"""A Pod no type of its class can take now: admitted unplaced, or refused. Pure.

The branch of an admission whose fit left the Pod no type (or whose group refused it): the catalog's
onUnsatisfiable says whether such a Pod is admitted as it is, and some are refused whatever it says.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from ..catalog.model import Catalog, GpuClass, Need, fastest_first
from ..view.affinity import Constraint, first_outside, named, resource_sets
from ..view.dra import HOSTNAME_LABEL
from ..view.snapshot import Snapshot
from .ask import PodAsk
from .decision import MALFORMED, Decision, Outcome
from .fit import ClassFit, Fitted
from .groups import GroupOutcome, GroupPlan
from .need import Asked
from .order import Ordered
from .shape import Malformed
from .words import gib, quoted, short

_QUEUED_UNSATISFIABLE = (
    ". A workload Kueue queues is refused rather than admitted unplaced: Kueue would count no GPUs for it and "
    "start it without them")


def unplaced(ask: PodAsk, gpu_class: GpuClass, asked: Asked, fitted: Fitted, ordered: Ordered, snapshot: Snapshot,
             catalog: Catalog, *, queued: bool) -> Decision:
    """A Pod no type of its class can take now: admitted unplaced where the catalog says so (onUnsatisfiable:
    admit), else refused. Refused whatever the catalog says: a queued template (Kueue would count no GPUs
    for it), a group that can never fit (the Pod's mistake, not the cluster's state), and a Pod whose own
    node constraints reach a GPU type outside its class: admitted unplaced, they alone would steer it, so
    a Pod could step over its class by making itself unsatisfiable (a min-memory no type has, its every
    type excluded) and naming the type it wants itself."""
    message = fitted.refusal or _unsatisfiable_message(fitted.fit, gpu_class, asked, snapshot, catalog)
    group = fitted.group
    admit = catalog.on_unsatisfiable == "admit"
    if admit and not queued and (group is None or group.outcome != "refused"):
        reach = _reaches_outside(ask, gpu_class, snapshot, catalog)
        if reach is None:
            return _decision("admitted-unsatisfiable", message, gpu_class, fitted.fit, _ended(group, "unplaced"),
                             ordered.warnings + (short(message),) + asked.ignored)
        return _decision("refused", f"{message}. {reach}", gpu_class, fitted.fit, _ended(group, "refused"),
                         ordered.warnings)
    refusal = message + (_QUEUED_UNSATISFIABLE if queued and admit else "")
    return _decision("refused", refusal, gpu_class, fitted.fit, _ended(group, "refused"), ordered.warnings)


def _decision(outcome: Outcome, message: str, gpu_class: GpuClass, fit: ClassFit, group: GroupPlan | None,
              warnings: tuple[str, ...]) -> Decision:
    return Decision(outcome, message, class_name=gpu_class.name, warnings=warnings, verdicts=fit.verdicts,
                    resource=fit.resource, resource_notes=fit.resource_notes, group=group)


def _ended(group: GroupPlan | None, outcome: GroupOutcome) -> GroupPlan | None:
    """The group's plan for a Pod that is not placed."""
    return None if group is None else dataclasses.replace(group, outcome=outcome, topology_key="")


def _reaches_outside(ask: PodAsk, gpu_class: GpuClass, snapshot: Snapshot, catalog: Catalog) -> str | None:
    """What of the Pod's own node constraints (nodeSelector, required and preferred node affinity, nodeName)
    names a GPU type outside its class for the GPU resources it asks for, said as what to write instead; None
    when nothing does (no constraint at all, or only constraints within its class). A resource no type of the
    class is given as was refused before (need.py), so the resources are the class's own."""
    if isinstance(ask.node_selector, Malformed):
        return MALFORMED + ask.node_selector.message
    asked = () if isinstance(ask.requested, Malformed) else ask.requested
    resources = resource_sets(asked, catalog.class_resources(gpu_class.name))
    found = first_outside(_own_constraints(ask), frozenset(gpu_class.types), resources, catalog,
                          snapshot.types_of_host)
    if found is None:
        return None
    where, key, value = found
    hosts = snapshot.types_of_host
    types = sorted({t for rs in resources for r in rs for t in named(key, value, r, catalog, hosts)})
    what = f"which is {', '.join(types)}" if types else "which is no type gpu-class knows"
    return (f"It is refused rather than admitted unplaced (onUnsatisfiable: admit): its own {where} names "
            f"{key}={quoted(value)[1:-1]}, {what}, not a type of class {gpu_class.name}. Drop that constraint and "
            f"let gpu-class write the class's own, or ask for a class that has the type you need")


def _own_constraints(ask: PodAsk) -> Iterator[Constraint]:
    """The node label values the Pod's own spec asks for or steers to, with where it wrote each: its
    nodeSelector, the `In` expressions of its required and preferred node affinity, and its nodeName
    (a node's name, which names it as its hostname usually does)."""
    if not isinstance(ask.node_selector, Malformed):
        yield from (("nodeSelector", k, v) for k, v in ask.node_selector.items() if isinstance(v, str))
    yield from (("required node affinity", k, v) for term in ask.node_terms for k, values in term
                for v in values)
    yield from (("preferred node affinity", k, v) for term in ask.preferred_terms for k, values in term
                for v in values)
    if ask.node_name is not None:
        yield "spec.nodeName", HOSTNAME_LABEL, ask.node_name


# --- why no type can take it ---------------------------------------------------------------


def _unsatisfiable_message(fit: ClassFit, gpu_class: GpuClass, asked: Asked, snapshot: Snapshot,
                           catalog: Catalog) -> str:
    """Memoised per snapshot by the fit it explains, as order.order is."""
    key = ("unsatisfiable", id(fit))
    found = snapshot.memo.get(key)
    if found is None or found[0] is not fit:  # the entry holds its fit, so no other fit can have its id
        message = _no_type_message(gpu_class, asked.gpus.needed, snapshot, catalog, asked.excluded,
                                   asked.min_memory_mib, fit.resource)
        need = asked.need or None
        if need is not None:
            message = _need_note(message, gpu_class, snapshot, catalog, need, dict(fit.unmet))
        found = snapshot.memo[key] = (fit, message)
    text: str = found[1]
    return text


def _no_type_message(
    gpu_class: GpuClass, gpus_needed: int, snapshot: Snapshot, catalog: Catalog, excluded: frozenset[str],
    min_memory_mib: float | None, resource: str | None,
) -> str:
    present = []
    memories: list[float] = []
    for type_name in catalog.types:
        groups = snapshot.groups(type_name)
        largest = max((g.max_allocatable for g in groups), default=0)
        # Types that could matter: the class's own that the cluster has (at 0: none of their nodes is
        # usable now), and any other with devices, for another class. Not the MIG profiles that a
        # node's product label also matches while it offers whole GPUs, or none at all.
        if groups and (largest > 0 or type_name in gpu_class.types):
            sick = sum(g.unhealthy_nodes for g in groups)
            health = f", {sick} of {sum(g.nodes for g in groups)} nodes unhealthy" if sick else ""
            present.append(f"{type_name} (largest allocatable {largest}{health})")
            memories.extend(m for g in groups if (m := g.max_memory_mib) is not None)
    types = [t for t in gpu_class.types if resource is None or catalog.types[t].resource == resource]
    excluded_note = f", excluding {', '.join(sorted(excluded))}" if excluded else ""
    memory_note = ""
    if min_memory_mib is not None:
        largest_memory = gib(max(memories)) if memories else "unknown"
        memory_note = f" with at least {gib(min_memory_mib)} each (largest memory present: {largest_memory})"
    resource_note = f" as {resource}" if resource is not None and len(catalog.class_resources(gpu_class.name)) > 1 else ""
    return (
        f"gpu-class: no ready, schedulable node offers {gpus_needed} GPU(s){memory_note}{resource_note} of class "
        f"{gpu_class.name} (types {', '.join(types)}{excluded_note}). "
        f"Present: {', '.join(present) or 'no GPU nodes'}. {_dra_note(snapshot)}"
        f"Ask for fewer GPUs or another class: {', '.join(catalog.classes)}"
    )


def _need_note(message: str, gpu_class: GpuClass, snapshot: Snapshot, catalog: Catalog, need: Need,
               unmet: dict[str, str]) -> str:
    """The refusal of a Pod that narrows its class by need says which types meet the need, and which
    of those the cluster has: the user learns whether to change the need or the class."""
    meeting = [t for t in gpu_class.types if t not in unmet]
    elsewhere = fastest_first([t for t in catalog.types.values() if t.name not in gpu_class.types
                               and t.resource == catalog.gpu_resource and need.unmet(t) is None
                               and snapshot.groups(t.name)])
    present = [t for t in meeting if snapshot.groups(t)]
    note = (f"gpu-class: the Pod needs {need.describe()}: types of class {gpu_class.name} meeting it: "
            f"{', '.join(meeting) or 'none'}; of those present: {', '.join(present) or 'none'}"
            + (f"; present in other classes: {', '.join(elsewhere)}" if elsewhere else "") + ". ")
    return note + message.removeprefix("gpu-class: ")


def _dra_note(snapshot: Snapshot) -> str:
    """DRA devices present but not placed on are often the answer to "why is my GPU not there"."""
    problems = snapshot.dra.problems
    if not problems:
        return ""
    # each reason's first clause says what is wrong; `gpuclass inventory` has the rest
    shown = "; ".join(f"{p.devices} {p.product or p.driver}: {p.reason.split(': ')[0]}" for p in problems[:2])
    more = f"; and {len(problems) - 2} more" if len(problems) > 2 else ""
    return f"DRA devices not placed on: {shown}{more} (gpuclass inventory lists them). "
