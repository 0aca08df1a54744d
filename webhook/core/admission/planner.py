"""Decide what to do with a Pod: out of scope, refused, or placed on which GPU types. Pure.

decide() takes what the Pod asks (ask.py reads it once, into a PodAsk), the namespace's settings,
an inventory Snapshot and the Catalog, and returns a Decision; plan() is the two in one, from the
Pod's wire JSON. A Pod of a group gets its scope from groups.py in one step (_group_fit). Nothing here
performs I/O; patch.py turns a Placement into a JSON Patch.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from ..view.affinity import first_outside, named, resource_sets
from .ask import EXCLUDE_ANNOTATION as EXCLUDE_ANNOTATION  # e2e tests import it from here
from .ask import POD_ANNOTATIONS, PREFIX, GroupAsk, Malformed, MalformedPod, PodAsk, Tolerations, quoted, read_pod
from ..catalog.model import Catalog, GpuClass, Need, Strategy, fastest_first, profile_suffix
from .groups import ClassOffer, GroupOutcome, GroupPlan, GroupScope, decide_group
from ..view.inventory import CLASS_ANNOTATION as CLASS_ANNOTATION  # the inventory reads both of unbound Pods too
from ..view.inventory import TYPES_ANNOTATION as TYPES_ANNOTATION
from ..view.inventory import MAX_WAIT_ANNOTATION
from ..view.inventory import (
    ALLOWED_CLASSES_ANNOTATION, GIB_MIB, NamespaceInfo, Pool, ProductGroup, Snapshot, Taint, placing_catalog,
    split_types, tolerates_all,
)
from .kueue import flavor_disagreement, uncounted_gpus
from .provenance import provenance

WARNING_MAX_CHARS = 120  # the API server asks webhooks to keep warnings this short

Outcome = Literal["out-of-scope", "refused", "patched", "admitted-unsatisfiable"]


@dataclass(frozen=True)
class TypeVerdict:
    """Why one type of the class is or is not valid for the Pod (shown by `gpuclass explain`)."""

    type_name: str
    valid: bool
    reason: str
    max_allocatable: int = 0
    free_gpus: int = 0
    resource: str = ""
    max_memory_mib: float | None = None
    allocatable_gpus: int = 0  # over usable nodes: with free_gpus, the share balanced and binpack read

    @property
    def free_share(self) -> float | None:
        """The share of the type's GPUs free now; None when it has none (a scalable pool at zero)."""
        return self.free_gpus / self.allocatable_gpus if self.allocatable_gpus else None


@dataclass(frozen=True)
class Preference:
    weight: int
    type_name: str
    label_key: str
    products: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    container_index: int
    container_name: str
    count: int
    set_limit: bool
    class_name: str
    types: tuple[str, ...]  # valid types, preferred first
    required: tuple[tuple[str, tuple[str, ...]], ...]  # (label key, product values) of all valid nodes
    preferences: tuple[Preference, ...]
    tolerations: tuple[Taint, ...]  # taints to tolerate; value and effect "" mean any
    scheduler_name: str | None = None
    record_class: bool = False  # the class came from a default: write it, so the extender sees the strategy
    resource: str = "nvidia.com/gpu"  # the extended resource the limit is set on
    group: GroupPlan | None = None  # gpu-class.io/group: the label and Pod affinity that keep it on one product
    max_wait: str | None = None  # gpu-class.io/max-wait as gpu-class-scheduler keeps it; None: the Pod does not wait
    drop_max_wait: bool = False  # the Pod wrote a wait no scheduler of its keeps: the annotation goes


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    message: str = ""
    class_name: str | None = None
    placement: Placement | None = None
    warnings: tuple[str, ...] = ()
    verdicts: tuple[TypeVerdict, ...] = ()
    resource: str | None = None  # the resource chosen for the Pod
    resource_notes: tuple[tuple[str, str], ...] = ()  # (resource, why it was or was not chosen)
    group: GroupPlan | None = None  # for a Pod with gpu-class.io/group
    # left as it came because its own node affinity keeps it to its class (provenance.py): what it carries,
    # gpu-class.io/types included, is the decision it came with. Any other Pod answered without a placement
    # loses a gpu-class.io/types of its own (review.py)
    kept_as_decided: bool = False

    @property
    def allowed(self) -> bool:
        return self.outcome != "refused"


@dataclass(frozen=True)
class UnreadNamespace:
    """A namespace the webhook's view does not hold yet and the API did not answer for: its policy is unknown."""

    name: str
    error: str


# How the caller knows the namespace: None leaves it to the snapshot (namespaces watched, or not at all)
NamespacePolicy = NamespaceInfo | UnreadNamespace | None


def plan(
    pod: Mapping[str, Any],
    snapshot: Snapshot,
    catalog: Catalog,
    *,
    namespace: str = "",
    policy: NamespacePolicy = None,
    queued: bool = False,
) -> Decision:
    """The whole admission decision for a Pod being created in `namespace`: its ask, read once, decided.
    `queued`: the pod template of a workload Kueue queues (workload.py), decided for as long as it waits."""
    catalog = placing_catalog(catalog, snapshot)
    try:
        ask = read_pod(pod, catalog)
    except MalformedPod as exc:
        return _malformed(str(exc))
    if ask is None:
        return Decision("out-of-scope", "mirror Pod")
    return decide(ask, snapshot, catalog, namespace=namespace, policy=policy, queued=queued)


def _malformed(message: str) -> Decision:
    return Decision("refused", f"gpu-class: malformed Pod: {message}")


def decide(ask: PodAsk, snapshot: Snapshot, catalog: Catalog, *, namespace: str = "",
           policy: NamespacePolicy = None, queued: bool = False) -> Decision:
    """The decision for what a Pod asks, in `namespace` (whose policy the caller may have read from
    the API: `policy`). The refusals come in a fixed order: the first thing wrong is the one the user
    hears of.

    `queued`: a pod template Kueue counts now and starts later, once its quota allows: it gets every
    type of the class whose nodes could take it, those cordoned or not ready now included (they may be
    back by then; Kueue's flavors choose among them all), and it is never admitted unplaced: Kueue would
    count no GPUs for it and start it without them."""
    ns_info = snapshot.namespace(namespace) if policy is None else policy
    if isinstance(ns_info, NamespaceInfo) and not ns_info.inject:
        return Decision("out-of-scope", f"namespace {namespace} is not opted in")

    class_name = ask.class_name
    from_default = class_name is None
    if class_name is None:
        if isinstance(ask.requested, Malformed):
            return _malformed(ask.requested.message)
        if not ask.requested:
            return Decision("out-of-scope", "no class annotation and no GPU request")
    if isinstance(ns_info, UnreadNamespace):
        # its default class and allowed classes are a tenant boundary: never decided without them
        return Decision(
            "refused",
            f"gpu-class: cannot read the policy of namespace {namespace} (its default and allowed classes): "
            f"{ns_info.error}; retry in a few seconds",
            class_name=class_name,
        )
    chosen = _class_of(ask, ns_info, catalog, namespace)
    if isinstance(chosen, Decision):
        return chosen
    gpu_class = chosen
    class_name = gpu_class.name
    decided = provenance(ask, gpu_class, catalog, queued=queued, hosts=snapshot.types_of_host)
    if decided == "decided-with-workload":
        return Decision("out-of-scope", f"decided with its workload, which Kueue started: its node affinity "
                                        f"keeps it to class {class_name}", class_name=class_name,
                        kept_as_decided=True)
    if decided == "decided-at-an-earlier-call":
        return Decision("out-of-scope", f"decided at an earlier call: its node affinity keeps it to class {class_name} "
                                        "and it asks for its GPUs; deciding again could only narrow it",
                        class_name=class_name, kept_as_decided=True)

    if isinstance(ask.claims, Malformed):
        return _malformed(ask.claims.message)
    if ask.claims:
        drop = (f"the {CLASS_ANNOTATION} annotation" if not from_default else
                "its GPU limit (the namespace's default class applies to Pods that ask for one)")
        return Decision(
            "refused",
            f"gpu-class: the Pod has resource claims of its own (spec.resourceClaims: {quoted(', '.join(ask.claims))[1:-1]}); "
            "gpu-class gives a Pod GPUs through its GPU limit and its node and cannot see what a claim asks for, so "
            f"the Pod could get GPUs twice, or of a type its class does not allow. Drop the claims to let gpu-class "
            f"place it, or drop {drop} and ask for GPUs through the claims alone",
            class_name=class_name,
        )
    if not snapshot.synced:
        return Decision(
            "refused",
            "gpu-class: the webhook has not yet read the cluster's nodes (starting, or the API server is "
            "unreachable); retry in a few seconds",
            class_name=class_name,
        )
    if isinstance(ask.requested, Malformed):
        return _malformed(ask.requested.message)
    fixed, refusal = _fixed_resource(ask.requested, gpu_class, catalog)
    if refusal is not None:
        return Decision("refused", refusal, class_name=class_name)
    resource = fixed or catalog.class_resources(class_name)[0]
    container = ask.container_for(resource)
    if isinstance(container, str):
        return Decision("refused", container, class_name=class_name)
    gpus = ask.gpus(container, resource)
    if isinstance(gpus, str):
        return Decision("refused", gpus, class_name=class_name)
    uncounted = uncounted_gpus(ask, resource, gpus)
    if uncounted is not None:
        return Decision("refused", uncounted, class_name=class_name)
    excluded, min_memory, group_ask = ask.excluded, ask.min_memory_mib, ask.group
    if isinstance(excluded, str):
        return Decision("refused", excluded, class_name=class_name)
    if isinstance(min_memory, str):
        return Decision("refused", min_memory, class_name=class_name)
    if isinstance(ask.need, str):
        return Decision("refused", ask.need, class_name=class_name)
    if isinstance(group_ask, str):
        return Decision("refused", group_ask, class_name=class_name, group=GroupPlan(ask.group_name, "refused"))
    if isinstance(ask.max_wait, Malformed):
        return Decision("refused", ask.max_wait.message, class_name=class_name)
    if isinstance(ask.upgrade, str):
        return Decision("refused", ask.upgrade, class_name=class_name)

    # with no resource fixed the Pod asks for none of the class's, so every one needs the same
    gpus_needed = ask.gpus_needed(resource, container, gpus.count)
    fit_class = functools.partial(class_fit, gpu_class, gpus_needed, excluded, snapshot, catalog,
                                  min_memory_mib=min_memory, need=ask.need, tolerations=ask.tolerations,
                                  queued=queued)
    # whether a scheduler keeps the wait depends on which scheduler, not on which of the class's resources
    wait, not_kept = kept_wait(ask, gpu_class, route_scheduler(ask.scheduler_name, catalog, gpu_class.strategy,
                                                               resource) or ask.scheduler_name, catalog)
    group: GroupPlan | None = None
    if group_ask is None:
        fit = fit_class(resource=fixed)
    else:
        fit, group = _group_fit(group_ask, fit_class, gpu_class, gpus_needed, min_memory, fixed, snapshot, catalog,
                                namespace, wait is not None)
    ignored = _ignored_input(ask.unknown_annotations, gpu_class, excluded)
    if fit.unsatisfiable is not None:
        return _unsatisfiable(ask, gpu_class, fit, snapshot, catalog, queued=queued, group=group, ignored=ignored)
    assert fit.resource is not None  # a satisfiable fit has chosen one
    placement = Placement(
        container_index=container.index,
        container_name=container.name,
        count=gpus.count,
        set_limit=gpus.set_limit,
        class_name=class_name,
        types=fit.types,
        required=fit.required,
        preferences=fit.preferences,
        tolerations=fit.tolerations,
        scheduler_name=route_scheduler(ask.scheduler_name, catalog, gpu_class.strategy, fit.resource),
        record_class=from_default,
        resource=fit.resource,
        group=group,
    )
    if ask.kueue_started and isinstance(ask.node_selector, Malformed):
        return _malformed(ask.node_selector.message)
    disagreement = flavor_disagreement(ask, fit.required, class_name)
    if disagreement is not None:
        return _from_fit("refused", class_name, fit, disagreement)
    if ask.types_written is not None and split_types(ask.types_written) != fit.types:
        ignored += (_short(f"gpu-class: {TYPES_ANNOTATION} is written by gpu-class: the Pod's value was replaced"),)
    if wait is not None or ask.max_wait is not None:
        placement = dataclasses.replace(placement, max_wait=wait, drop_max_wait=wait is None)
    if not_kept is not None:
        ignored += (_short(not_kept),)
    return _from_fit("patched", class_name, fit, placement=placement, group=group, warnings=fit.warnings + ignored)


def kept_wait(ask: PodAsk, gpu_class: GpuClass, scheduler_name: str | None,
              catalog: Catalog) -> tuple[str | None, str | None]:
    """The wait for its best type that gpu-class-scheduler keeps for the Pod (its own gpu-class.io/max-wait, else
    its class's maxWait), and the warning when the Pod asked for one that nothing will keep.

    Only gpu-class-scheduler's profiles that rank types (performance, cost) keep a type out for a while; the
    extender and the default scheduler cannot. Kueue chose a queued Pod's type (its flavor) before the Pod
    existed. A group waits as one: its first Pod only where the whole group fits (groups.py, and the scheduler)."""
    asked = ask.max_wait if isinstance(ask.max_wait, str) else None
    wait = asked or gpu_class.max_wait
    if wait is None:
        return None, None
    strict = None if scheduler_name is None else catalog.strict_scheduler_of(scheduler_name)
    why_not = (
        "Kueue chose its type (its flavor) before the Pod existed" if ask.kueue_started else
        f"class {gpu_class.name} ranks nodes ({gpu_class.strategy}), not types" if gpu_class.strategy not in
        ("performance", "cost") else
        "only gpu-class-scheduler keeps it: set schedulerName: gpu-class-scheduler" if strict is None else
        f"{strict} runs the stock kube-scheduler here, which cannot keep it" if strict in catalog.stock_schedulers
        else None)
    if why_not is None:
        return wait, None
    return None, (f"gpu-class: {MAX_WAIT_ANNOTATION} dropped: {why_not}" if asked else None)


def _unsatisfiable(ask: PodAsk, gpu_class: GpuClass, fit: ClassFit, snapshot: Snapshot, catalog: Catalog, *,
                   queued: bool, group: GroupPlan | None, ignored: tuple[str, ...]) -> Decision:
    """A Pod no type of its class can take now: admitted unplaced where the catalog says so (onUnsatisfiable:
    admit), else refused. Refused whatever the catalog says: a queued template (Kueue would count no GPUs
    for it), a group that can never fit (the Pod's mistake, not the cluster's state), and a Pod whose own
    node constraints reach a GPU type outside its class: admitted unplaced, they alone would steer it, so
    a Pod could step over its class by making itself unsatisfiable (a min-memory no type has, its every
    type excluded) and naming the type it wants itself."""
    assert fit.unsatisfiable is not None
    admit = catalog.on_unsatisfiable == "admit"
    if admit and not queued and (group is None or group.outcome != "refused"):
        reach = _reaches_outside(ask, gpu_class, snapshot, catalog)
        if reach is None:
            return _from_fit("admitted-unsatisfiable", gpu_class.name, fit, fit.unsatisfiable,
                             warnings=fit.warnings + (_short(fit.unsatisfiable),) + ignored,
                             group=_ended(group, "unplaced"))
        return _from_fit("refused", gpu_class.name, fit, f"{fit.unsatisfiable}. {reach}",
                         group=_ended(group, "refused"))
    refusal = fit.unsatisfiable + (_QUEUED_UNSATISFIABLE if queued and admit else "")
    return _from_fit("refused", gpu_class.name, fit, refusal, group=_ended(group, "refused"))


def _reaches_outside(ask: PodAsk, gpu_class: GpuClass, snapshot: Snapshot, catalog: Catalog) -> str | None:
    """What of the Pod's own node constraints (nodeSelector, required and preferred node affinity, nodeName)
    names a GPU type outside its class for the GPU resources it asks for, said as what to write instead; None
    when nothing does (no constraint at all, or only constraints within its class). A resource no type of the
    class is given as was refused before (_fixed_resource), so the resources are the class's own."""
    if isinstance(ask.node_selector, Malformed):
        return f"gpu-class: malformed Pod: {ask.node_selector.message}"
    asked = () if isinstance(ask.requested, Malformed) else ask.requested
    resources = resource_sets(asked, catalog.class_resources(gpu_class.name))
    found = first_outside(ask.own_constraints(), frozenset(gpu_class.types), resources, catalog,
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


_QUEUED_UNSATISFIABLE = (
    ". A workload Kueue queues is refused rather than admitted unplaced: Kueue would count no GPUs for it and "
    "start it without them")


def _group_fit(
    group: GroupAsk, fit_class: Callable[..., ClassFit], gpu_class: GpuClass, gpus_needed: int, min_memory_mib: float | None,
    fixed: str | None, snapshot: Snapshot, catalog: Catalog, namespace: str, waits: bool = False,
) -> tuple[ClassFit, GroupPlan]:
    """The class's fit for a Pod of a group, and what was decided for the group.

    The group enters the decision here, once: decide_group reads what the class offers the Pod
    without a group and returns the scope to fit the class within (groups.py says how it is chosen).
    """
    base = fit_class(resource=fixed)
    offer = ClassOffer(base.unsatisfiable is None, base.resource,
                       tuple((p.type_name, p.label_key) for p in base.preferences))
    decided = decide_group(group, namespace, gpu_class, gpus_needed, min_memory_mib, fixed, offer, snapshot, catalog,
                           waits=waits)
    if decided.scope is None:
        refused = base if decided.refusal is None else dataclasses.replace(base, unsatisfiable=decided.refusal)
        return refused, decided.plan
    scoped: ClassFit = fit_class(resource=decided.resource, scope=decided.scope)
    running = decided.plan.runs_on
    if running is not None and scoped.unsatisfiable is not None:
        why = "; ".join(f"{v.type_name}: {v.reason}" for v in scoped.verdicts if v.type_name in running.types)
        scoped = dataclasses.replace(scoped, unsatisfiable=(
            f"gpu-class: group {group.name} runs on {running.describe()}, which this Pod cannot use "
            f"({why or f'not in class {gpu_class.name}'}); the Pods of a group must all be able to run on its type"))
    if decided.warning is not None:
        scoped = dataclasses.replace(scoped, warnings=scoped.warnings + (_short(decided.warning),))
    return scoped, decided.plan


def _from_fit(outcome: Outcome, class_name: str, fit: ClassFit, message: str = "", *,
              placement: Placement | None = None, warnings: tuple[str, ...] | None = None,
              group: GroupPlan | None = None) -> Decision:
    return Decision(outcome, message, class_name=class_name, placement=placement,
                    warnings=fit.warnings if warnings is None else warnings, verdicts=fit.verdicts,
                    resource=fit.resource, resource_notes=fit.resource_notes, group=group)


def _ended(group: GroupPlan | None, outcome: GroupOutcome) -> GroupPlan | None:
    """The group's plan for a Pod that is not placed."""
    return None if group is None else dataclasses.replace(group, outcome=outcome, topology_key="")


def route_scheduler(pod_scheduler: str | None, catalog: Catalog, strategy: Strategy, resource: str) -> str | None:
    """The schedulerName a placed Pod gets; None leaves the Pod's as it is.

    A Pod that names no scheduler of its own (the API server has written `default-scheduler` before
    admission) gets the catalog's schedulerName. A Pod headed for a strict scheduler, by its own
    choice or the catalog's, goes to the profile that scores as its class's strategy, on the kind of
    resource it requests: the user writes `gpu-class-scheduler` whatever the class.
    """
    own = pod_scheduler if pod_scheduler not in (None, "", "default-scheduler") else None
    target = own or catalog.scheduler_name
    if target is None:
        return None
    strict = catalog.strict_scheduler_of(target)
    return target if strict is None else strict + profile_suffix(strategy, resource)


# --- the class and its resource ---------------------------------------------------------


def _fixed_resource(asked: Sequence[str], gpu_class: GpuClass, catalog: Catalog) -> tuple[str | None, str | None]:
    """(the catalog resource the Pod already asks for or None, the message refusing it or None)."""
    usable = catalog.class_resources(gpu_class.name)
    if len(asked) > 1:
        return None, (f"gpu-class: the Pod asks for {' and '.join(asked)}; a Pod can be placed on one GPU "
                      f"resource only (class {gpu_class.name} uses {', '.join(usable)})")
    if asked and asked[0] not in usable:
        return None, (f"gpu-class: the Pod asks for {asked[0]}, which no type of class {gpu_class.name} uses; "
                      f"ask for one of {', '.join(usable)}, or for none and let gpu-class choose")
    return (asked[0] if asked else None), None


def _class_of(ask: PodAsk, ns_info: NamespaceInfo | None, catalog: Catalog, namespace: str) -> GpuClass | Decision:
    """The Pod's class, from its annotation or, for a GPU Pod that names none, its namespace's default; or the
    decision when there is none to place it by (out of scope, or refused)."""
    class_name = ask.class_name
    if class_name is None:
        class_name, source = _default_class(ns_info, catalog)
        if class_name is None and ns_info is not None and ns_info.allowed_classes is not None:
            return Decision("refused", _name_a_class(ns_info, catalog))
        if class_name is None:
            return Decision("out-of-scope", "no class annotation and no default class")
        if class_name not in catalog.classes:
            return Decision(
                "refused",
                f"gpu-class: the {source} names class {quoted(class_name)}, which does not exist; "
                f"an administrator must set it to one of: {', '.join(catalog.classes)}",
            )
    gpu_class = catalog.classes.get(class_name)
    if gpu_class is None:
        return Decision(
            "refused",
            f"gpu-class: unknown class {quoted(class_name)} in {CLASS_ANNOTATION}; "
            f"write one of: {', '.join(_allowed(catalog, ns_info))}",
            class_name=class_name,
        )
    if ns_info is not None and ns_info.allowed_classes is not None and class_name not in ns_info.allowed_classes:
        return Decision(
            "refused",
            f"gpu-class: class {quoted(class_name)} is not allowed in namespace {namespace}; "
            f"allowed classes: {', '.join(ns_info.allowed_classes) or '(none)'}",
            class_name=class_name,
        )
    return gpu_class


def _default_class(ns_info: NamespaceInfo | None, catalog: Catalog) -> tuple[str | None, str]:
    """The class of a GPU Pod that names none, and who set it: the namespace's default-class label; in a
    namespace allowed one class only, that one; else the catalog's defaultClass where the namespace allows
    it. None where there is none: in a namespace with allowed-classes every GPU Pod is the namespace's to
    bound, so none is left out of scope there (the caller refuses it, saying which classes to write)."""
    if ns_info is not None and ns_info.default_class:
        return ns_info.default_class, f"default-class label of namespace {ns_info.name}"
    allowed = None if ns_info is None else ns_info.allowed_classes
    if ns_info is not None and allowed is not None and len(allowed) == 1:
        return allowed[0], f"{ALLOWED_CLASSES_ANNOTATION} annotation of namespace {ns_info.name}"
    if allowed is None or catalog.default_class in allowed:
        return catalog.default_class, "catalog's defaultClass"
    return None, ""


def _name_a_class(ns_info: NamespaceInfo, catalog: Catalog) -> str:
    """The refusal of a GPU Pod with no class where the namespace allows several and sets no default."""
    allowed = _allowed(catalog, ns_info)
    if not allowed:
        return (f"gpu-class: namespace {ns_info.name} allows no class of the catalog ({ALLOWED_CLASSES_ANNOTATION}: "
                f"{quoted(', '.join(ns_info.allowed_classes or ()))}), so its GPU Pods cannot be placed; ask an "
                "administrator to allow one")
    return (f"gpu-class: namespace {ns_info.name} allows only some classes and sets no default class: write "
            f"{CLASS_ANNOTATION}: <one of {', '.join(allowed)}> on the Pod (or its pod template)")


def _allowed(catalog: Catalog, ns_info: NamespaceInfo | None) -> list[str]:
    names = list(catalog.classes)
    if ns_info is not None and ns_info.allowed_classes is not None:
        names = [n for n in names if n in ns_info.allowed_classes]
    return names


def _ignored_input(unknown: Sequence[str], gpu_class: GpuClass, excluded: frozenset[str]) -> tuple[str, ...]:
    """Warnings for what the user wrote to no effect: a gpu-class.io/ annotation nobody reads (a typo
    such as gpu-class.io/min-mem would otherwise pass unnoticed), excluded types the class lacks."""
    warnings = []
    if unknown:
        read = ", ".join(k[len(PREFIX):] for k in POD_ANNOTATIONS if k != TYPES_ANNOTATION)
        warnings.append(_short(f"gpu-class: {quoted(', '.join(unknown))[1:-1]} ignored; known: {read}"))
    outside = sorted(excluded - set(gpu_class.types))
    if outside:
        warnings.append(_short(f"gpu-class: {EXCLUDE_ANNOTATION}: {', '.join(outside)} ignored: not in class "
                               f"{gpu_class.name}"))
    return tuple(warnings)


# --- deciding -----------------------------------------------------------------------------


def gib(mib: float) -> str:
    return f"{mib / GIB_MIB:.4g} GiB"


def _fits(shape_allocatable: int, shape_memory: float | None, gpus_needed: int, min_memory_mib: float | None) -> bool:
    memory_ok = min_memory_mib is None or (shape_memory is not None and shape_memory >= min_memory_mib)
    return shape_allocatable >= gpus_needed and memory_ok


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
        if cordoned + not_ready == nodes and queued:
            return verdict(True, f"all {nodes} nodes cordoned or not ready now; a queued workload waits for them", 0, 0)
        if not_ready == nodes:
            return verdict(False, f"all {nodes} nodes not ready", 0, 0)
        if cordoned + not_ready == nodes:
            return verdict(False, f"all {nodes} nodes cordoned or not ready", 0, 0)
        return verdict(False, f"no node offers allocatable {gpu_type.resource}", 0, 0)
    if min_memory_mib is not None and any(s.allocatable >= gpus_needed for g in groups for s in g.usable):
        largest = "unknown" if max_memory is None else gib(max_memory)
        return verdict(False, f"too little memory: largest {largest} per device, Pod needs {gib(min_memory_mib)}")
    return verdict(False, f"too few GPUs: largest allocatable {max_alloc}, Pod needs {gpus_needed}")


def _order(valid: Sequence[TypeVerdict], gpu_class: GpuClass, catalog: Catalog) -> list[str]:
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
        by_speed.sort(key=lambda v: (v.free_share is None, sign * (v.free_share or 0.0)))
    return [v.type_name for v in by_speed]


MAX_PREFERENCE_WEIGHT = 100  # the API's range for a preferred term's weight is 1..100


def rank_gap(higher: int, lower: int) -> int:
    """Points between two ranks once kube-scheduler's NodeAffinity has scaled the best feasible
    node's weight to 100 (DefaultNormalizeScore: integer division)."""
    return MAX_PREFERENCE_WEIGHT - MAX_PREFERENCE_WEIGHT * lower // higher


@functools.cache
def weights_for(n: int) -> tuple[int, ...]:
    """Preference weights for n ranks, best first: the smallest normalised gap between neighbours as
    large as 1..100 allows.

    kube-scheduler's NodeAffinity sums the weights of the preferred terms a node matches and scales
    them so the best feasible node gets 100: when the best types are full, the best type left leads
    the next by rank_gap of their weights, whichever ranks they are. That smallest gap, times the
    plugin's weight, is what the other score plugins must not outweigh (docs/operators/strict-scheduler.md,
    works it out for the shipped profiles; the default profile weighs NodeAffinity 2). Ranks are
    distinct up to 100 types; beyond that the tail shares weight 1.
    """
    for gap in range(MAX_PREFERENCE_WEIGHT - 1, 0, -1):
        weights = _weights_with_gap(gap, n)
        if weights is not None:
            return weights
    return tuple(max(1, MAX_PREFERENCE_WEIGHT - i) for i in range(n))


def _weights_with_gap(gap: int, n: int) -> tuple[int, ...] | None:
    """Each weight the largest whose gap to the one before is at least `gap`; None when 1 is passed."""
    weights = [MAX_PREFERENCE_WEIGHT][:n]
    while len(weights) < n:
        previous = weights[-1]
        # the largest w < previous with 100 * w // previous <= 100 - gap
        weight = min(previous - 1, ((MAX_PREFERENCE_WEIGHT + 1 - gap) * previous - 1) // MAX_PREFERENCE_WEIGHT)
        if weight < 1:
            return None
        weights.append(weight)
    return tuple(weights)


@dataclass(frozen=True)
class ClassFit:
    """What a class offers a Pod that needs `gpus_needed` on one node, in one inventory snapshot."""

    verdicts: tuple[TypeVerdict, ...]
    warnings: tuple[str, ...]
    unsatisfiable: str | None  # the message when no type is valid
    types: tuple[str, ...] = ()
    required: tuple[tuple[str, tuple[str, ...]], ...] = ()
    preferences: tuple[Preference, ...] = ()
    tolerations: tuple[Taint, ...] = ()
    resource: str | None = None  # the resource the Pod is placed on; None when none could be chosen
    resource_notes: tuple[tuple[str, str], ...] = ()  # (resource, why chosen or not) for each of the class's


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
    `queued`: see decide."""
    key = (gpu_class.name, gpus_needed, excluded, min_memory_mib, resource, scope, need or None, tolerations, queued)
    fit: ClassFit | None = snapshot.memo.get(key)
    if fit is None:
        fit = _class_fit(gpu_class, gpus_needed, excluded, snapshot, catalog, min_memory_mib, resource, scope,
                         need or None, tolerations, queued)
        if len(snapshot.memo) >= MEMO_MAX_ENTRIES:
            snapshot.memo.clear()
        snapshot.memo[key] = fit
    return fit


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
    best = _order(valid, gpu_class, catalog)
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
        message = _unsatisfiable_message(gpu_class, gpus_needed, snapshot, catalog, excluded, min_memory_mib, resource)
        if need is not None:
            message = _need_note(message, gpu_class, snapshot, catalog, need, unmet)
        return ClassFit(verdicts, (), message, resource=resource, resource_notes=notes)
    ordered = _order(valid, gpu_class, catalog)
    # a type the Pod's need rules out is its own choice, as an excluded one is: no warning
    warnings = _worse_than_best(gpu_class, verdicts, ordered[0], snapshot, catalog, excluded | set(unmet), scope)
    warnings += _placed_by_labels(ordered, catalog)
    required: dict[str, set[str]] = {}
    taints: set[Taint] = set()
    preferences: list[Preference] = []
    for weight, type_name in zip(weights_for(len(ordered)), ordered):
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
        for key, products in sorted(per_key.items()):
            required.setdefault(key, set()).update(products)
            preferences.append(Preference(weight, type_name, key, tuple(sorted(products))))
    return ClassFit(
        verdicts,
        warnings,
        None,
        types=tuple(ordered),
        required=tuple((k, tuple(sorted(v))) for k, v in sorted(required.items())),
        preferences=tuple(preferences),
        tolerations=tuple(sorted(_drop_covered(taints))),
        resource=resource,
        resource_notes=notes,
    )


def _placed_by_labels(ordered: Sequence[str], catalog: Catalog) -> tuple[str, ...]:
    """A type made from a node's labels is a guess at its rank: the Pod hears of it, the administrator
    is asked to write it in the catalog (`gpuclass inventory` says the same)."""
    guessed = [t for t in ordered if (facts := catalog.types[t].facts) is not None and facts.from_labels]
    if not guessed:
        return ()
    return (_short(f"gpu-class: {', '.join(guessed)} placed by its labels, not the catalog: ask an administrator "
                   "to add it"),)


def _unmet(gpu_class: GpuClass, catalog: Catalog, need: Need | None) -> Mapping[str, str]:
    """The class's types the Pod's need rules out, with why."""
    if need is None:
        return {}
    return {t: why for t in gpu_class.types if (why := need.unmet(catalog.types[t])) is not None}


def _need_note(message: str, gpu_class: GpuClass, snapshot: Snapshot, catalog: Catalog, need: Need,
               unmet: Mapping[str, str]) -> str:
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


def _drop_covered(taints: set[Taint]) -> set[Taint]:
    """A toleration for any effect of a key makes the per-effect ones redundant."""
    any_effect = {t.key for t in taints if t.effect == ""}
    return {t for t in taints if t.effect == "" or t.key not in any_effect}


def _worse_than_best(gpu_class: GpuClass, verdicts: Sequence[TypeVerdict], best_valid: str, snapshot: Snapshot,
                     catalog: Catalog, excluded: frozenset[str], scope: GroupScope | None) -> tuple[str, ...]:
    """A warning when the Pod cannot have the best type of its class that the cluster has.

    performance and cost only: their promise is a type order (balanced and binpack promise a share of
    GPUs, whatever the type). A type the cluster does not have is no news to the user, one the Pod
    excluded is its own choice, and one its group does not run on is the group's: none is warned of.
    """
    if gpu_class.strategy not in ("performance", "cost"):
        return ()
    present = [v for v in verdicts if snapshot.groups(v.type_name) and v.resource == catalog.types[best_valid].resource]
    order = {name: i for i, name in enumerate(gpu_class.types)}
    present.sort(key=lambda v: order[v.type_name], reverse=gpu_class.strategy == "cost")
    best = present[0] if present else None
    if best is None or best.valid or best.type_name in excluded:
        return ()
    if scope is not None and best.type_name in dict(scope.left_out):
        return ()
    return (_short(f"gpu-class: class {gpu_class.name}: not on {best.type_name} ({best.reason}); "
                   f"best allowed: {best_valid}"),)


def _unsatisfiable_message(
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
            present.append(f"{type_name} (largest allocatable {largest})")
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


def _dra_note(snapshot: Snapshot) -> str:
    """DRA devices present but not placed on are often the answer to "why is my GPU not there"."""
    problems = snapshot.dra.problems
    if not problems:
        return ""
    # each reason's first clause says what is wrong; `gpuclass inventory` has the rest
    shown = "; ".join(f"{p.devices} {p.product or p.driver}: {p.reason.split(': ')[0]}" for p in problems[:2])
    more = f"; and {len(problems) - 2} more" if len(problems) > 2 else ""
    return f"DRA devices not placed on: {shown}{more} (gpuclass inventory lists them). "


def _short(text: str) -> str:
    return text if len(text) <= WARNING_MAX_CHARS else text[: WARNING_MAX_CHARS - 3] + "..."
