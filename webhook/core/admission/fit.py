"""Fit, the fifth step of an admission: which of the class's types can take the Pod now, and in which rank. Pure.

A type is valid when one of its nodes open to the Pod (its reserving taints tolerated) has the GPUs, and the
memory per GPU, the Pod needs on one node, or a node pool can create one; the Pod's exclusions and need rule
types out. The Pod gets one resource: the one it asks for, else that of the best valid type by the class's
strategy, which also ranks the valid types. class_fit works this out once per snapshot and question (Pods of
one Deployment ask the same).

A Pod of a group is fitted in three moves, in this step: the class as it is, the group's scope decided from
that offer (groups.decide_group), and the class again within the scope.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple, Sequence

from ..catalog.model import Catalog, GpuClass, Need
from ..view.nodes import GIB_MIB, Taint, tolerates_all
from ..view.pools import Pool
from ..view.product_groups import ProductGroup
from ..view.snapshot import Snapshot
from .annotations import GroupAsk
from .ask import PodAsk
from .decision import TypeVerdict
from .groups import ClassOffer, GroupPlan, GroupScope, decide_group
from .need import Asked
from .route import Route
from .shape import Tolerations
from .words import gib, short


@dataclass(frozen=True)
class ClassFit:
    """What a class offers a Pod that needs `gpus_needed` on one node, in one inventory snapshot."""

    verdicts: tuple[TypeVerdict, ...]
    resource: str | None  # the resource the Pod is placed on; None when none could be chosen
    resource_notes: tuple[tuple[str, str], ...]  # (resource, why chosen or not) for each of the class's
    unmet: tuple[tuple[str, str], ...] = ()  # (type, why) for the class's types the Pod's need rules out
    types: tuple[str, ...] = ()  # the valid types, best first; none: no type can take the Pod now
    # (type, node label key, product values) of the valid types' nodes, best type first: what the order weighs
    placed_on: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    required: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (label key, product values) of all of them
    tolerations: tuple[Taint, ...] = ()
    avoid_hosts: tuple[str, ...] = ()  # the valid types' nodes unhealthy for them (unhealthy_hosts), sorted


class Fitted(NamedTuple):
    """The fit a Pod is decided by: its class's, or, for a Pod of a group, its class's within the group's scope."""

    fit: ClassFit
    placeable: bool  # some type can take the Pod, and its group does not refuse it
    group: GroupPlan | None = None
    scope: GroupScope | None = None  # the nodes the group may use, that the fit was worked out within
    refusal: str | None = None  # the group's, said in place of the fit's own message
    warnings: tuple[str, ...] = ()  # the group's


def fit_pod(ask: PodAsk, gpu_class: GpuClass, asked: Asked, routed: Route, snapshot: Snapshot, catalog: Catalog, *,
            namespace: str, queued: bool) -> Fitted:
    """The fit of the Pod's class, for what it asks; `queued`: see planner.decide."""
    fit_class = functools.partial(class_fit, gpu_class, asked.gpus.needed, asked.excluded, snapshot, catalog,
                                  min_memory_mib=asked.min_memory_mib, need=asked.need, tolerations=ask.tolerations,
                                  queued=queued)
    if asked.group is None:
        fit = fit_class(resource=asked.fixed)
        return Fitted(fit, placeable=bool(fit.types))
    return _group_fit(asked.group, fit_class, gpu_class, asked, snapshot, catalog, namespace,
                      waits=routed.wait is not None)


def _group_fit(group: GroupAsk, fit_class: Callable[..., ClassFit], gpu_class: GpuClass, asked: Asked,
               snapshot: Snapshot, catalog: Catalog, namespace: str, waits: bool) -> Fitted:
    """The class's fit for a Pod of a group, and what was decided for the group.

    The group enters the decision here, once: decide_group reads what the class offers the Pod
    without a group and returns the scope to fit the class within (groups.py says how it is chosen).
    """
    base = fit_class(resource=asked.fixed)
    offer = ClassOffer(bool(base.types), base.resource, tuple((t, k) for t, k, _ in base.placed_on))
    decided = decide_group(group, namespace, gpu_class, asked.gpus.needed, asked.min_memory_mib, asked.fixed, offer,
                           snapshot, catalog, waits=waits)
    if decided.scope is None:
        return Fitted(base, bool(base.types) and decided.refusal is None, decided.plan, refusal=decided.refusal)
    scoped = fit_class(resource=decided.resource, scope=decided.scope)
    refusal = None
    running = decided.plan.runs_on
    if running is not None and not scoped.types:
        why = "; ".join(f"{v.type_name}: {v.reason}" for v in scoped.verdicts if v.type_name in running.types)
        refusal = (f"gpu-class: group {group.name} runs on {running.describe()}, which this Pod cannot use "
                   f"({why or f'not in class {gpu_class.name}'}); the Pods of a group must all be able to run on "
                   "its type")
    warnings = () if decided.warning is None else (short(decided.warning),)
    return Fitted(scoped, bool(scoped.types), decided.plan, decided.scope, refusal, warnings)


MEMO_MAX_ENTRIES = 1024


def class_fit(
    gpu_class: GpuClass, gpus_needed: int, excluded: frozenset[str], snapshot: Snapshot, catalog: Catalog,
    *, min_memory_mib: float | None = None, resource: str | None = None, scope: GroupScope | None = None,
    need: Need | None = None, tolerations: Tolerations = (), queued: bool = False,
) -> ClassFit:
    """Memoised per snapshot: Pods of one Deployment ask the same question, and the answer only
    changes when the inventory does (which publishes a new snapshot with an empty memo).
    `resource`: the one the Pod already asks for; None lets the class's strategy choose.
    `scope`: for a Pod of a group, the nodes the group may use.
    `need`: what the Pod's code needs of a GPU (gpu-class.io/requires, min-compute-capability).
    `tolerations`: the Pod's own, which alone open nodes and pools reserved by taints other than the GPU's.
    `queued`: see planner.decide."""
    key = (gpu_class.name, gpus_needed, excluded, min_memory_mib, resource, scope, need or None, tolerations, queued)
    fit: ClassFit | None = snapshot.memo.get(key)
    if fit is None:
        fit = _class_fit(gpu_class, gpus_needed, excluded, snapshot, catalog, min_memory_mib, resource, scope,
                         need or None, tolerations, queued)
        if len(snapshot.memo) >= MEMO_MAX_ENTRIES:
            snapshot.memo.clear()
        snapshot.memo[key] = fit
    return fit


def _class_fit(
    gpu_class: GpuClass, gpus_needed: int, excluded: frozenset[str], snapshot: Snapshot, catalog: Catalog,
    min_memory_mib: float | None, fixed: str | None, scope: GroupScope | None = None, need: Need | None = None,
    tolerations: Tolerations = (), queued: bool = False,
) -> ClassFit:
    unmet = _unmet(gpu_class, catalog, need)
    verdicts = tuple(
        _scoped_verdict(t, snapshot, gpus_needed, excluded, catalog, min_memory_mib, scope, tolerations, queued)
        if t not in unmet else
        dataclasses.replace(_verdict(t, snapshot.groups(t), gpus_needed, excluded, catalog, min_memory_mib),
                            valid=False, reason=f"does not meet the Pod's need: {unmet[t]}")
        for t in gpu_class.types
    )
    resource, notes = _choose_resource(verdicts, gpu_class, catalog, fixed)
    if resource is not None:
        # a type of another resource is not what the Pod will be given, whatever its own state
        verdicts = tuple(
            v if v.resource == resource else dataclasses.replace(v, valid=False, reason=f"requested as {v.resource}; "
                                                                  f"the Pod gets {resource}")
            for v in verdicts
        )
    valid = [v for v in verdicts if v.valid]
    if not valid:
        return ClassFit(verdicts, resource, notes, tuple(unmet.items()))
    ordered = _ranked(valid, gpu_class, catalog)
    placed_on, taints = _nodes_of(ordered, snapshot, catalog, gpus_needed, min_memory_mib, scope, tolerations, queued)
    required: dict[str, set[str]] = {}
    for _, key, products in placed_on:
        required.setdefault(key, set()).update(products)
    return ClassFit(
        verdicts, resource, notes, tuple(unmet.items()),
        types=tuple(ordered),
        placed_on=placed_on,
        required=tuple((k, tuple(sorted(v))) for k, v in sorted(required.items())),
        tolerations=tuple(sorted(_drop_covered(taints))),
        avoid_hosts=() if queued else unhealthy_hosts(ordered, snapshot),
    )


def unhealthy_hosts(types: Sequence[str], snapshot: Snapshot) -> tuple[str, ...]:
    """The nodes of `types` unhealthy for them, as a Pod's affinity names them: what the placement keeps the
    Pod off. A queued workload's template gets none: it starts later, when the list would be stale."""
    return tuple(sorted({h for t in types for g in snapshot.groups(t) for h in g.unhealthy_hosts}))


def _nodes_of(ordered: Sequence[str], snapshot: Snapshot, catalog: Catalog, gpus_needed: int,
              min_memory_mib: float | None, scope: GroupScope | None, tolerations: Tolerations,
              queued: bool) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...], set[Taint]]:
    """(type, label key, product values) of the nodes of each valid type that can take the Pod, best type
    first, and the taints the Pod must tolerate on them."""
    placed_on: list[tuple[str, str, tuple[str, ...]]] = []
    taints: set[Taint] = set()
    for type_name in ordered:
        per_key: dict[str, set[str]] = {}
        groups = _groups_in(snapshot, type_name, scope, tolerations)
        for g in groups:
            fitting = [s.taints for s in g.usable if _fits(s.allocatable, s.memory_mib, gpus_needed, min_memory_mib)]
            if fitting:
                per_key.setdefault(g.label_key, set()).add(g.product)
                for node_taints in fitting:
                    taints.update(node_taints)
            elif queued and not g.usable:  # nodes cordoned or not ready now: their taints are unknown, any GPU taint
                per_key.setdefault(g.label_key, set()).add(g.product)
                taints.update(Taint(k, "", "") for k in catalog.gpu_taint_keys)
        # node pools that can grow: the values and taints their nodes will have, exactly
        growing = [p for p in _pools_in(snapshot, type_name, scope, tolerations) if p.holds(gpus_needed)]
        for p in growing:
            per_key.setdefault(p.label_key, set()).update(p.values)
            taints.update(p.taints)
        if not groups and not growing:  # a scalable pool at zero: its configured values, any GPU taint
            for key, values in catalog.types[type_name].exact_values(catalog.product_labels):
                if scope is None or key == scope.label_key:
                    per_key.setdefault(key, set()).update(values)
            taints.update(Taint(k, "", "") for k in catalog.gpu_taint_keys)
        placed_on.extend((type_name, key, tuple(sorted(products))) for key, products in sorted(per_key.items()))
    return tuple(placed_on), taints


def _choose_resource(
    verdicts: Sequence[TypeVerdict], gpu_class: GpuClass, catalog: Catalog, fixed: str | None
) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The resource to place on, and a note per resource of the class saying why it was or was not chosen.

    A Pod asks for one resource only: the one it already names, else that of the best valid type
    by the class's strategy."""
    resources = catalog.class_resources(gpu_class.name)
    if fixed is not None:
        return fixed, tuple((r, "the Pod asks for it" if r == fixed else f"the Pod asks for {fixed}") for r in resources)
    valid = [v for v in verdicts if v.valid]
    if not valid:
        return None, tuple((r, "no valid type") for r in resources)
    best = _ranked(valid, gpu_class, catalog)
    chosen = catalog.types[best[0]].resource
    notes = []
    for r in resources:
        own = [t for t in best if catalog.types[t].resource == r]
        if r == chosen:
            notes.append((r, f"best valid type {best[0]} by strategy {gpu_class.strategy}"))
        elif own:
            notes.append((r, f"its best valid type {own[0]} comes after {best[0]} by strategy {gpu_class.strategy}"))
        else:
            notes.append((r, "no valid type"))
    return chosen, tuple(notes)


def _ranked(valid: Sequence[TypeVerdict], gpu_class: GpuClass, catalog: Catalog) -> list[str]:
    """performance: fastest first; cost: slowest first; balanced: the largest share of GPUs free
    first; binpack: the smallest. Types with no GPUs now (a scalable pool at zero) come last in
    both: a Pod should not wait for a node to be made while others have room. Ties keep the
    class's order."""
    rank = {name: i for i, name in enumerate(gpu_class.types)}  # fastest first
    by_speed = sorted(valid, key=lambda v: rank[v.type_name])
    if gpu_class.strategy == "cost":
        by_speed.reverse()
    elif gpu_class.strategy in ("balanced", "binpack"):
        sign = -1 if gpu_class.strategy == "balanced" else 1
        by_speed.sort(key=lambda v: (_free_share(v) is None, sign * (_free_share(v) or 0.0)))
    return [v.type_name for v in by_speed]


def _free_share(verdict: TypeVerdict) -> float | None:
    """The share of the type's GPUs free now; None when it has none (a scalable pool at zero)."""
    return verdict.free_gpus / verdict.allocatable_gpus if verdict.allocatable_gpus else None


# --- one type's verdict -------------------------------------------------------------------


def _fits(shape_allocatable: int, shape_memory: float | None, gpus_needed: int, min_memory_mib: float | None) -> bool:
    memory_ok = min_memory_mib is None or (shape_memory is not None and shape_memory >= min_memory_mib)
    return shape_allocatable >= gpus_needed and memory_ok


def _scoped_verdict(
    type_name: str, snapshot: Snapshot, gpus_needed: int, excluded: frozenset[str], catalog: Catalog,
    min_memory_mib: float | None, scope: GroupScope | None, tolerations: Tolerations, queued: bool = False,
) -> TypeVerdict:
    scoped = _groups_in(snapshot, type_name, scope, tolerations)
    pools = _pools_in(snapshot, type_name, scope, tolerations)
    v = _verdict(type_name, scoped, gpus_needed, excluded, catalog, min_memory_mib, pools, queued)
    if not v.valid and not scoped and not pools and type_name not in excluded:
        kept = sorted({t for g in snapshot.groups(type_name) for t in g.reserved}
                      | {t for p in snapshot.pools(type_name) for t in p.reserved})
        if kept:
            shown = ", ".join(f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in kept)
            v = dataclasses.replace(v, reason=f"its nodes are kept for Pods that tolerate {shown}")
    # the scope has its say where the type is valid, or where it took all of the type's nodes away
    if scope is None or type_name in excluded or not (v.valid or (snapshot.groups(type_name) and not scoped)):
        return v
    why = dict(scope.left_out).get(type_name)
    return v if why is None else dataclasses.replace(v, valid=False, reason=why)


def _verdict(
    type_name: str, groups: Sequence[ProductGroup], gpus_needed: int, excluded: frozenset[str], catalog: Catalog,
    min_memory_mib: float | None, pools: Sequence[Pool] = (), queued: bool = False,
) -> TypeVerdict:
    gpu_type = catalog.types[type_name]
    max_alloc = max((g.max_allocatable for g in groups), default=0)
    free = sum(g.free_gpus for g in groups)
    allocatable = sum(g.allocatable_gpus for g in groups)
    memories = [m for g in groups if (m := g.max_memory_mib) is not None]
    max_memory = max(memories) if memories else None

    def verdict(valid: bool, reason: str, alloc: int = max_alloc, free_gpus: int = free,
                memory: float | None = max_memory) -> TypeVerdict:
        # the unusable report no GPUs at all (alloc 0), so their share is None too
        return TypeVerdict(type_name, valid, reason, alloc, free_gpus, gpu_type.resource, memory,
                           allocatable if alloc else 0)

    if type_name in excluded:
        return verdict(False, "excluded by the Pod")
    fits_now = any(_fits(s.allocatable, s.memory_mib, gpus_needed, min_memory_mib) for g in groups for s in g.usable)
    if pools and not fits_now:
        return _pool_verdict(gpu_type.memory_gib, pools, gpus_needed, min_memory_mib, verdict)
    if not groups:
        if gpu_type.scalable:
            memory = None if gpu_type.memory_gib is None else gpu_type.memory_gib * GIB_MIB
            if _fits(gpus_needed, memory, gpus_needed, min_memory_mib):
                return verdict(True, "no nodes now; scalable pool", memory=memory)
            return verdict(False, "scalable pool with too little memory per device", memory=memory)
        return verdict(False, "no nodes in the cluster")
    if fits_now:
        return verdict(True, "ok")
    if not any(g.usable for g in groups):
        nodes = sum(g.nodes for g in groups)
        not_ready = sum(g.not_ready for g in groups)
        cordoned = sum(g.cordoned for g in groups)
        sick = sum(g.unhealthy_nodes for g in groups)
        if sick == nodes:
            return verdict(False, f"all {nodes} nodes unhealthy", 0, 0)
        if cordoned + not_ready == nodes and queued:
            return verdict(True, f"all {nodes} nodes cordoned or not ready now; a queued workload waits for them", 0, 0)
        if not_ready == nodes:
            return verdict(False, f"all {nodes} nodes not ready", 0, 0)
        if cordoned + not_ready == nodes:
            return verdict(False, f"all {nodes} nodes cordoned or not ready", 0, 0)
        if sick and sick + cordoned + not_ready >= nodes:
            return verdict(False, f"all {nodes} nodes unhealthy, cordoned or not ready", 0, 0)
        return verdict(False, f"no node offers allocatable {gpu_type.resource}", 0, 0)
    if min_memory_mib is not None and any(s.allocatable >= gpus_needed for g in groups for s in g.usable):
        largest = "unknown" if max_memory is None else gib(max_memory)
        return verdict(False, f"too little memory: largest {largest} per device, Pod needs {gib(min_memory_mib)}")
    return verdict(False, f"too few GPUs: largest allocatable {max_alloc}, Pod needs {gpus_needed}")


def _pool_verdict(memory_gib: float | None, pools: Sequence[Pool], gpus_needed: int, min_memory_mib: float | None,
                  verdict: Callable[..., TypeVerdict]) -> TypeVerdict:
    """A type no node of which can take the Pod now, but that node pools can create nodes of."""
    memory = None if memory_gib is None else memory_gib * GIB_MIB
    if not _fits(gpus_needed, memory, gpus_needed, min_memory_mib):
        return verdict(False, "node pool with too little memory per device", memory=memory)
    growing = [p for p in pools if p.holds(gpus_needed)]
    if growing:
        return verdict(True, f"no node can take it now; NodePool {growing[0].name} can create one", memory=memory)
    capped = ", ".join(f"{p.name} ({p.limited()})" for p in pools)
    return verdict(False, f"no node can take it now, and its NodePools are at their limits: {capped}", memory=memory)


def _open_to(reserved: tuple[Taint, ...], tolerations: Tolerations) -> bool:
    """Whether a Pod with `tolerations` may use nodes reserved by these (non-GPU) taints."""
    return not reserved or tolerates_all((dict(t) for t in tolerations), reserved)


def _pools_in(snapshot: Snapshot, type_name: str, scope: GroupScope | None, tolerations: Tolerations) -> tuple[Pool, ...]:
    return tuple(p for p in snapshot.pools(type_name) if _open_to(p.reserved, tolerations) and (
        scope is None or p.label_key == scope.label_key and (scope.products is None or scope.products & set(p.values))))


def _groups_in(snapshot: Snapshot, type_name: str, scope: GroupScope | None,
               tolerations: Tolerations) -> tuple[ProductGroup, ...]:
    return tuple(g for g in snapshot.groups(type_name)
                 if _open_to(g.reserved, tolerations) and (scope is None or scope.admits(g)))


def _unmet(gpu_class: GpuClass, catalog: Catalog, need: Need | None) -> Mapping[str, str]:
    """The class's types the Pod's need rules out, with why."""
    if need is None:
        return {}
    return {t: why for t in gpu_class.types if (why := need.unmet(catalog.types[t])) is not None}


def _drop_covered(taints: set[Taint]) -> set[Taint]:
    """A toleration for any effect of a key makes the per-effect ones redundant."""
    any_effect = {t.key for t in taints if t.effect == ""}
    return {t for t in taints if t.effect == "" or t.key not in any_effect}
