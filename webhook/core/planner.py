"""Decide what to do with a Pod: out of scope, refused, or placed on which GPU types. Pure.

plan() reads the Pod (wire JSON), the namespace's settings, an inventory Snapshot and the Catalog,
and returns a Decision. It never performs I/O; patch.py turns a Placement into a JSON Patch.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from .catalog import Catalog, GpuClass, Strategy, profile_suffix
from .groups import (
    GROUP_ANNOTATION, GROUP_SIZE_ANNOTATION, GroupAsk, GroupOutcome, GroupPlan, GroupScope, Room, read_group, room,
    runs_on,
)
from .inventory import CLASS_ANNOTATION as CLASS_ANNOTATION  # the inventory reads both of unbound Pods too
from .inventory import TYPES_ANNOTATION as TYPES_ANNOTATION
from .inventory import GIB_MIB, NamespaceInfo, Pool, ProductGroup, Snapshot, Taint, pod_gpus, split_types
from .kueue import flavor_disagreement, started_by_kueue, uncounted_gpus_message
from .quantity import quantity_mib

PREFIX = "gpu-class.io/"
COUNT_ANNOTATION = PREFIX + "count"
CONTAINER_ANNOTATION = PREFIX + "container"
EXCLUDE_ANNOTATION = PREFIX + "exclude-types"
MIN_MEMORY_ANNOTATION = PREFIX + "min-memory"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

WARNING_MAX_CHARS = 120  # the API server asks webhooks to keep warnings this short
_COUNT_RE = re.compile(r"[0-9]{1,6}")

Outcome = Literal["out-of-scope", "refused", "patched", "admitted-unsatisfiable"]


class MalformedPod(ValueError):
    """The Pod does not have the shape of a Pod where the webhook must read or write it."""


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

    @property
    def allowed(self) -> bool:
        return self.outcome != "refused"


def plan(
    pod: Mapping[str, Any],
    snapshot: Snapshot,
    catalog: Catalog,
    *,
    namespace: str = "",
) -> Decision:
    """The whole admission decision for a Pod being created in `namespace`."""
    try:
        return _plan(pod, snapshot, catalog, namespace)
    except MalformedPod as exc:
        return Decision("refused", f"gpu-class: malformed Pod: {exc}")


def _plan(pod: Mapping[str, Any], snapshot: Snapshot, catalog: Catalog, namespace: str) -> Decision:
    if not isinstance(pod, dict):
        raise MalformedPod("the object is not a JSON object")
    annotations = _mapping(pod.get("metadata"), "metadata").get("annotations")
    annotations = _string_map(annotations, "metadata.annotations")
    if MIRROR_ANNOTATION in annotations:
        return Decision("out-of-scope", "mirror Pod")
    containers = _containers(pod)
    _check_patchable(pod)
    ns_info = snapshot.namespace(namespace)
    if ns_info is not None and not ns_info.inject:
        return Decision("out-of-scope", f"namespace {namespace} is not opted in")
    labels = _string_map(_mapping(pod.get("metadata"), "metadata").get("labels"), "metadata.labels")
    kueue_started = started_by_kueue(labels)
    if kueue_started and TYPES_ANNOTATION in annotations:
        # its Job's template was decided where Kueue counted it (workload.py): deciding again could
        # disagree with the flavor Kueue chose since
        return Decision("out-of-scope", "decided with its workload, which Kueue started")

    class_name = annotations.get(CLASS_ANNOTATION)
    from_default = class_name is None
    if class_name is None:
        if not _requested_resources(pod, catalog.resources):
            return Decision("out-of-scope", "no class annotation and no GPU request")
        class_name, source = _default_class(ns_info, catalog)
        if class_name is None:
            return Decision("out-of-scope", "no class annotation and no default class")
        if class_name not in catalog.classes:
            return Decision(
                "refused",
                f"gpu-class: the {source} names class {_quoted(class_name)}, which does not exist; "
                f"an administrator must set it to one of: {', '.join(catalog.classes)}",
            )
    gpu_class = catalog.classes.get(class_name)
    if gpu_class is None:
        return Decision(
            "refused",
            f"gpu-class: unknown class {_quoted(class_name)} in {CLASS_ANNOTATION}; "
            f"write one of: {', '.join(_allowed(catalog, ns_info))}",
            class_name=class_name,
        )
    if ns_info is not None and ns_info.allowed_classes is not None and class_name not in ns_info.allowed_classes:
        return Decision(
            "refused",
            f"gpu-class: class {_quoted(class_name)} is not allowed in namespace {namespace}; "
            f"allowed classes: {', '.join(ns_info.allowed_classes) or '(none)'}",
            class_name=class_name,
        )

    claims = _own_claims(pod)
    if claims:
        drop = (f"the {CLASS_ANNOTATION} annotation" if not from_default else
                "its GPU limit (the namespace's default class applies to Pods that ask for one)")
        return Decision(
            "refused",
            f"gpu-class: the Pod has resource claims of its own (spec.resourceClaims: {_quoted(', '.join(claims))[1:-1]}); "
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
    fixed, refusal = _fixed_resource(pod, gpu_class, catalog)
    if refusal is not None:
        return Decision("refused", refusal, class_name=class_name)
    resource = fixed or catalog.class_resources(class_name)[0]
    target = _target_container(annotations, containers, resource)
    if isinstance(target, str):
        return Decision("refused", target, class_name=class_name)
    index, container = target
    count = _count(annotations, container, resource)
    if isinstance(count, str):
        return Decision("refused", count, class_name=class_name)
    count_value, set_limit = count
    if kueue_started and set_limit:
        return Decision("refused", uncounted_gpus_message(resource, count_value), class_name=class_name)
    excluded = _excluded(annotations, catalog)
    if isinstance(excluded, str):
        return Decision("refused", excluded, class_name=class_name)
    min_memory = _min_memory_mib(annotations)
    if isinstance(min_memory, str):
        return Decision("refused", min_memory, class_name=class_name)
    ask = read_group(annotations)
    if isinstance(ask, str):
        return Decision("refused", ask, class_name=class_name,
                        group=GroupPlan(annotations.get(GROUP_ANNOTATION, ""), "refused"))

    # with no resource fixed the Pod asks for none of the class's, so every one needs the same
    gpus_needed = pod_gpus(pod, resource, target=(index, count_value))
    group: GroupPlan | None = None
    if ask is None:
        fit = class_fit(gpu_class, gpus_needed, excluded, snapshot, catalog, min_memory_mib=min_memory, resource=fixed)
    else:
        fit, group = _group_fit(ask, gpu_class, gpus_needed, excluded, snapshot, catalog, namespace, min_memory, fixed)
    ignored = _ignored_input(annotations, gpu_class, excluded)
    if fit.unsatisfiable is not None:
        # a group that can never fit is the Pod's mistake, not the cluster's state: refused either way
        if catalog.on_unsatisfiable == "admit" and (group is None or group.outcome != "refused"):
            return _from_fit("admitted-unsatisfiable", class_name, fit, fit.unsatisfiable,
                             warnings=fit.warnings + (_short(fit.unsatisfiable),) + ignored,
                             group=_ended(group, "unplaced"))
        return _from_fit("refused", class_name, fit, fit.unsatisfiable, group=_ended(group, "refused"))
    assert fit.resource is not None  # a satisfiable fit has chosen one
    placement = Placement(
        container_index=index,
        container_name=container["name"],
        count=count_value,
        set_limit=set_limit,
        class_name=class_name,
        types=fit.types,
        required=fit.required,
        preferences=fit.preferences,
        tolerations=fit.tolerations,
        scheduler_name=route_scheduler(_mapping(pod.get("spec"), "spec").get("schedulerName"), catalog,
                                       gpu_class.strategy, fit.resource),
        record_class=from_default,
        resource=fit.resource,
        group=group,
    )
    if kueue_started:
        node_selector = _mapping(_mapping(pod.get("spec"), "spec").get("nodeSelector"), "spec.nodeSelector")
        disagreement = flavor_disagreement(node_selector, fit.required, class_name)
        if disagreement is not None:
            return _from_fit("refused", class_name, fit, disagreement)
    written = annotations.get(TYPES_ANNOTATION)
    if written is not None and split_types(written) != fit.types:
        ignored += (_short(f"gpu-class: {TYPES_ANNOTATION} is written by gpu-class: the Pod's value was replaced"),)
    return _from_fit("patched", class_name, fit, placement=placement, group=group, warnings=fit.warnings + ignored)


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


# --- reading the Pod ----------------------------------------------------------------------


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPod(f"{where} must be an object")
    return value


def _item(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise MalformedPod(f"{where} must be an object")
    return value


def _list(value: Any, where: str) -> Sequence[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedPod(f"{where} must be a list")
    return value


def _string_map(value: Any, where: str) -> Mapping[str, str]:
    mapping = _mapping(value, where)
    for key, item in mapping.items():
        if not isinstance(item, str):
            raise MalformedPod(f"{where}[{_quoted(key)}] must be a string")
    return mapping


def _containers(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    spec = _mapping(pod.get("spec"), "spec")
    containers = _list(spec.get("containers"), "spec.containers")
    if not containers:
        raise MalformedPod("spec.containers is empty")
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise MalformedPod(f"spec.containers[{i}] must be an object with a name")
    return containers


def _own_claims(pod: Mapping[str, Any]) -> list[str]:
    """The names of the Pod's spec.resourceClaims (DRA claims it brings itself)."""
    claims = _list(_mapping(pod.get("spec"), "spec").get("resourceClaims"), "spec.resourceClaims")
    return [str(_item(c, f"spec.resourceClaims[{i}]").get("name") or "?") for i, c in enumerate(claims)]


def _check_patchable(pod: Mapping[str, Any]) -> None:
    """The parts patch.py reads and extends must have their API shapes."""
    spec = _mapping(pod.get("spec"), "spec")
    node_affinity = _mapping(_mapping(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "nodeAffinity")
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), "nodeAffinity.required")
    for i, term in enumerate(_list(required.get("nodeSelectorTerms"), "nodeSelectorTerms")):
        _list(_item(term, f"nodeSelectorTerms[{i}]").get("matchExpressions"), f"nodeSelectorTerms[{i}].matchExpressions")
    for i, pref in enumerate(_list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), "nodeAffinity.preferred")):
        _item(pref, f"nodeAffinity.preferred[{i}]")
    for i, toleration in enumerate(_list(spec.get("tolerations"), "spec.tolerations")):
        _item(toleration, f"spec.tolerations[{i}]")
    pod_affinity = _mapping(_mapping(spec.get("affinity"), "spec.affinity").get("podAffinity"), "podAffinity")
    for i, term in enumerate(_list(pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                   "podAffinity.required")):
        _item(term, f"podAffinity.required[{i}]")
    _string_map(_mapping(pod.get("metadata"), "metadata").get("labels"), "metadata.labels")
    if not isinstance(spec.get("schedulerName", ""), (str, type(None))):
        raise MalformedPod("spec.schedulerName must be a string")


def _resource_value(container: Mapping[str, Any], part: str, resource: str, where: str) -> Any:
    resources = _mapping(container.get("resources"), f"{where}.resources")
    return _mapping(resources.get(part), f"{where}.resources.{part}").get(resource)


def _requested_resources(pod: Mapping[str, Any], resources: Sequence[str]) -> list[str]:
    """The catalog's resources the Pod's containers or init containers limit or request, in catalog order."""
    spec = _mapping(pod.get("spec"), "spec")
    found: set[str] = set()
    for field in ("containers", "initContainers"):
        for i, c in enumerate(_list(spec.get(field), f"spec.{field}")):
            where = f"spec.{field}[{i}]"
            container_resources = _mapping(_mapping(c, where).get("resources"), f"{where}.resources")
            # Each container's few keys against the catalog's resources, not every resource looked up
            # in every container: this runs on every admission.
            for part in ("limits", "requests"):
                found.update(k for k, v in _mapping(container_resources.get(part), f"{where}.resources.{part}").items()
                             if v is not None)
    return [r for r in resources if r in found]


def _fixed_resource(pod: Mapping[str, Any], gpu_class: GpuClass, catalog: Catalog) -> tuple[str | None, str | None]:
    """(the catalog resource the Pod already asks for or None, the message refusing it or None)."""
    asked = _requested_resources(pod, catalog.resources)
    usable = catalog.class_resources(gpu_class.name)
    if len(asked) > 1:
        return None, (f"gpu-class: the Pod asks for {' and '.join(asked)}; a Pod can be placed on one GPU "
                      f"resource only (class {gpu_class.name} uses {', '.join(usable)})")
    if asked and asked[0] not in usable:
        return None, (f"gpu-class: the Pod asks for {asked[0]}, which no type of class {gpu_class.name} uses; "
                      f"ask for one of {', '.join(usable)}, or for none and let gpu-class choose")
    return (asked[0] if asked else None), None


def _min_memory_mib(annotations: Mapping[str, str]) -> float | None | str:
    """gpu-class.io/min-memory as MiB (a Kubernetes quantity), or the message refusing it."""
    raw = annotations.get(MIN_MEMORY_ANNOTATION)
    if raw is None:
        return None
    mib = quantity_mib(raw)
    if mib is None:
        return (f"gpu-class: {MIN_MEMORY_ANNOTATION} must be a positive Kubernetes quantity of memory per GPU, "
                f"like \"40Gi\", \"40960Mi\" or \"48G\", not {_quoted(raw)}")
    return mib


def _default_class(ns_info: NamespaceInfo | None, catalog: Catalog) -> tuple[str | None, str]:
    if ns_info is not None and ns_info.default_class:
        return ns_info.default_class, f"default-class label of namespace {ns_info.name}"
    return catalog.default_class, "catalog's defaultClass"


def _allowed(catalog: Catalog, ns_info: NamespaceInfo | None) -> list[str]:
    names = list(catalog.classes)
    if ns_info is not None and ns_info.allowed_classes is not None:
        names = [n for n in names if n in ns_info.allowed_classes]
    return names


def _target_container(
    annotations: Mapping[str, str], containers: Sequence[Mapping[str, Any]], resource: str
) -> tuple[int, Mapping[str, Any]] | str:
    wanted = annotations.get(CONTAINER_ANNOTATION)
    if wanted is not None:
        for i, c in enumerate(containers):
            if c["name"] == wanted:
                return i, c
        names = ", ".join(c["name"] for c in containers)
        return f"gpu-class: {CONTAINER_ANNOTATION} names container {_quoted(wanted)}, which this Pod does not have; containers: {names}"
    # a Pod that already asks for GPUs in one container means that one
    for i, c in enumerate(containers):
        if _resource_value(c, "limits", resource, f"spec.containers[{i}]") is not None:
            return i, c
    return 0, containers[0]


def _parse_count(value: Any) -> int | None:
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not _COUNT_RE.fullmatch(text) or int(text) == 0:
        return None
    return int(text)


def _count(annotations: Mapping[str, str], container: Mapping[str, Any], resource: str) -> tuple[int, bool] | str:
    """The GPUs for the Pod, and whether the limit must be written. An existing limit is the count."""
    where = f"container {container['name']}"
    wanted_raw = annotations.get(COUNT_ANNOTATION)
    wanted = None if wanted_raw is None else _parse_count(wanted_raw)
    if wanted_raw is not None and wanted is None:
        return f"gpu-class: {COUNT_ANNOTATION} must be a positive whole number of GPUs (like \"1\" or \"4\"), not {_quoted(wanted_raw)}"
    limit_raw = _resource_value(container, "limits", resource, where)
    request_raw = _resource_value(container, "requests", resource, where)
    limit = None if limit_raw is None else _parse_count(limit_raw)
    request = None if request_raw is None else _parse_count(request_raw)
    if limit_raw is not None and limit is None:
        return f"gpu-class: {where} has {resource} limit {_quoted(limit_raw)}; it must be a positive whole number"
    if request_raw is not None and request is None:
        return f"gpu-class: {where} has {resource} request {_quoted(request_raw)}; it must be a positive whole number"
    existing = limit if limit is not None else request
    if limit is not None and request is not None and limit != request:
        return f"gpu-class: {where} requests {request} but limits {limit} of {resource}; they must be equal"
    if existing is not None and wanted is not None and existing != wanted:
        return (
            f"gpu-class: {COUNT_ANNOTATION} says {wanted} but {where} already has {existing} {resource}; "
            "remove one of them or make them equal"
        )
    count = existing if existing is not None else wanted if wanted is not None else 1
    return count, limit is None


# the Pod annotations gpu-class reads (and the one it writes): any other gpu-class.io/ key is a slip
POD_ANNOTATIONS = (CLASS_ANNOTATION, COUNT_ANNOTATION, CONTAINER_ANNOTATION, EXCLUDE_ANNOTATION, MIN_MEMORY_ANNOTATION,
                   GROUP_ANNOTATION, GROUP_SIZE_ANNOTATION, TYPES_ANNOTATION)


def _ignored_input(annotations: Mapping[str, str], gpu_class: GpuClass, excluded: frozenset[str]) -> tuple[str, ...]:
    """Warnings for what the user wrote to no effect: a gpu-class.io/ annotation nobody reads (a typo
    such as gpu-class.io/min-mem would otherwise pass unnoticed), excluded types the class lacks."""
    warnings = []
    unknown = sorted(k for k in annotations if k.startswith(PREFIX) and k not in POD_ANNOTATIONS)
    if unknown:
        read = ", ".join(k[len(PREFIX):] for k in POD_ANNOTATIONS if k != TYPES_ANNOTATION)
        warnings.append(_short(f"gpu-class: {_quoted(', '.join(unknown))[1:-1]} ignored; known: {read}"))
    outside = sorted(excluded - set(gpu_class.types))
    if outside:
        warnings.append(_short(f"gpu-class: {EXCLUDE_ANNOTATION}: {', '.join(outside)} ignored: not in class "
                               f"{gpu_class.name}"))
    return tuple(warnings)


def _excluded(annotations: Mapping[str, str], catalog: Catalog) -> frozenset[str] | str:
    raw = annotations.get(EXCLUDE_ANNOTATION)
    if raw is None:
        return frozenset()
    names = {n.strip() for n in raw.split(",") if n.strip()}
    unknown = sorted(n for n in names if n not in catalog.types)
    if unknown:
        return (
            f"gpu-class: {EXCLUDE_ANNOTATION} names unknown types {_quoted(', '.join(unknown))[1:-1]}; "
            f"types: {', '.join(catalog.types)}"
        )
    return frozenset(names)


# --- deciding -----------------------------------------------------------------------------


def gib(mib: float) -> str:
    return f"{mib / GIB_MIB:.4g} GiB"


def _fits(shape_allocatable: int, shape_memory: float | None, gpus_needed: int, min_memory_mib: float | None) -> bool:
    memory_ok = min_memory_mib is None or (shape_memory is not None and shape_memory >= min_memory_mib)
    return shape_allocatable >= gpus_needed and memory_ok


def _verdict(
    type_name: str, groups: Sequence[ProductGroup], gpus_needed: int, excluded: frozenset[str], catalog: Catalog,
    min_memory_mib: float | None, pools: Sequence[Pool] = (),
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
    plugin's weight, is what the other score plugins must not outweigh (deploy/scheduler/README.md
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
) -> ClassFit:
    """Memoised per snapshot: Pods of one Deployment ask the same question, and the answer only
    changes when the inventory does (which publishes a new snapshot with an empty memo).
    `resource`: the one the Pod already asks for; None lets the class's strategy choose.
    `scope`: for a Pod of a group, the nodes the group may use."""
    key = (gpu_class.name, gpus_needed, excluded, min_memory_mib, resource, scope)
    fit: ClassFit | None = snapshot.memo.get(key)
    if fit is None:
        fit = _class_fit(gpu_class, gpus_needed, excluded, snapshot, catalog, min_memory_mib, resource, scope)
        if len(snapshot.memo) >= MEMO_MAX_ENTRIES:
            snapshot.memo.clear()
        snapshot.memo[key] = fit
    return fit


def _group_fit(
    ask: GroupAsk, gpu_class: GpuClass, gpus_needed: int, excluded: frozenset[str], snapshot: Snapshot,
    catalog: Catalog, namespace: str, min_memory_mib: float | None, fixed: str | None,
) -> tuple[ClassFit, GroupPlan]:
    """The class's fit for a Pod of a group, and what was decided for the group.

    A group that runs (a Pod of it is bound) keeps the Pod to its products. One that does not yet
    gets the class's types under one label key, the one its best type is labelled by (kube-scheduler
    needs the affinity's topologyKey on every node it admits); with a size, only the types whose
    free devices hold every Pod of it, else, when none does now, those that can ever hold it.
    """
    fit = functools.partial(class_fit, gpu_class, gpus_needed, excluded, snapshot, catalog,
                            min_memory_mib=min_memory_mib)
    plan = functools.partial(GroupPlan, ask.name, size=ask.size, size_from=ask.size_from)
    running = runs_on(snapshot, (namespace, ask.name), fixed)
    if running is not None:
        scope = GroupScope(running.label_key, frozenset(running.products))
        followed = fit(resource=fixed or running.resource, scope=scope)
        if followed.unsatisfiable is not None:
            why = "; ".join(f"{v.type_name}: {v.reason}" for v in followed.verdicts if v.type_name in running.types)
            followed = dataclasses.replace(followed, unsatisfiable=(
                f"gpu-class: group {ask.name} runs on {running.describe()}, which this Pod cannot use "
                f"({why or f'not in class {gpu_class.name}'}); the Pods of a group must all be able to run on its type"))
        return followed, plan("followed", topology_key=running.label_key, runs_on=running)
    base = fit(resource=fixed)
    if base.unsatisfiable is not None:  # no node can take even one of its Pods
        return base, plan("unplaced")
    rank = {k: i for i, k in enumerate(catalog.product_labels)}
    keys_of: dict[str, list[str]] = {}
    for p in base.preferences:  # best type first, each type's label keys
        keys_of.setdefault(p.type_name, []).append(p.label_key)
    candidates = [(t, k) for t, keys in keys_of.items()
                  for k in sorted(keys, key=lambda key: (rank.get(key, len(rank)), key))]
    if ask.size is None:
        key = candidates[0][1]
        return fit(resource=base.resource, scope=GroupScope(key)), plan("started", topology_key=key)
    size = ask.size
    rooms = [room(snapshot, catalog, t, k, gpus_needed, min_memory_mib) for t, k in candidates]
    holding = [r for r in rooms if r.now >= size]
    outcome: GroupOutcome = "started"
    if not holding:
        holding = [r for r in rooms if r.most is None or r.most >= size]
        outcome = "no-room"
    if not holding:
        best = max(rooms, key=lambda r: r.most or 0)
        return dataclasses.replace(base, unsatisfiable=(
            f"gpu-class: group {ask.name} of {size} Pods x {gpus_needed} GPU(s) can never run on one type of class "
            f"{gpu_class.name}: the most one type holds is {best.most} such Pods ({best.type_name}, all its nodes "
            f"empty). Ask for fewer Pods or GPUs per Pod ({ask.size_from}), or another class")), plan("refused")
    key = holding[0].label_key
    under_key = tuple(r for r in rooms if r.label_key == key)
    ruled = tuple((r.type_name, _short_of_room(r, size, outcome)) for r in under_key if r not in holding)
    scoped = fit(resource=base.resource, scope=GroupScope(key, None, ruled))
    if outcome == "no-room":
        scoped = dataclasses.replace(scoped, warnings=scoped.warnings + (_short(
            f"gpu-class: group {ask.name}: no type has room for its {size} Pods now; they wait for room "
            f"where the first one runs"),))
    return scoped, plan(outcome, topology_key=key, rooms=under_key)


def _short_of_room(r: Room, size: int, outcome: GroupOutcome) -> str:
    if outcome == "started":
        return f"room for {r.now} of the group's {size} Pods now"
    return f"holds at most {r.most} of the group's {size} Pods"


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
    capped = ", ".join(f"{p.name} ({p.left} {p.resource} left)" for p in pools)
    return verdict(False, f"no node can take it now, and its NodePools are at their limits: {capped}", memory=memory)


def _pools_in(snapshot: Snapshot, type_name: str, scope: GroupScope | None) -> tuple[Pool, ...]:
    pools = snapshot.pools(type_name)
    return pools if scope is None else tuple(
        p for p in pools if p.label_key == scope.label_key and (scope.products is None or scope.products & set(p.values)))


def _groups_in(snapshot: Snapshot, type_name: str, scope: GroupScope | None) -> tuple[ProductGroup, ...]:
    groups = snapshot.groups(type_name)
    return groups if scope is None else tuple(g for g in groups if scope.admits(g))


def _scoped_verdict(
    type_name: str, snapshot: Snapshot, gpus_needed: int, excluded: frozenset[str], catalog: Catalog,
    min_memory_mib: float | None, scope: GroupScope | None,
) -> TypeVerdict:
    scoped = _groups_in(snapshot, type_name, scope)
    v = _verdict(type_name, scoped, gpus_needed, excluded, catalog, min_memory_mib, _pools_in(snapshot, type_name, scope))
    # the scope has its say where the type is valid, or where it took all of the type's nodes away
    if scope is None or type_name in excluded or not (v.valid or (snapshot.groups(type_name) and not scoped)):
        return v
    why = scope.why_not(type_name, snapshot, catalog)
    return v if why is None else dataclasses.replace(v, valid=False, reason=why)


def _class_fit(
    gpu_class: GpuClass, gpus_needed: int, excluded: frozenset[str], snapshot: Snapshot, catalog: Catalog,
    min_memory_mib: float | None, fixed: str | None, scope: GroupScope | None = None,
) -> ClassFit:
    verdicts = tuple(
        _scoped_verdict(t, snapshot, gpus_needed, excluded, catalog, min_memory_mib, scope) for t in gpu_class.types
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
        return ClassFit(verdicts, (), message, resource=resource, resource_notes=notes)
    ordered = _order(valid, gpu_class, catalog)
    warnings = _worse_than_best(gpu_class, verdicts, ordered[0], snapshot, catalog, excluded, scope)
    required: dict[str, set[str]] = {}
    taints: set[Taint] = set()
    preferences: list[Preference] = []
    for weight, type_name in zip(weights_for(len(ordered)), ordered):
        per_key: dict[str, set[str]] = {}
        groups = _groups_in(snapshot, type_name, scope)
        for g in groups:
            fitting = [s.taints for s in g.usable if _fits(s.allocatable, s.memory_mib, gpus_needed, min_memory_mib)]
            if fitting:
                per_key.setdefault(g.label_key, set()).add(g.product)
                for node_taints in fitting:
                    taints.update(node_taints)
        # node pools that can grow: the values and taints their nodes will have, exactly
        growing = [p for p in _pools_in(snapshot, type_name, scope) if p.holds(gpus_needed)]
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
    if scope is not None and scope.why_not(best.type_name, snapshot, catalog) is not None:
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


def _quoted(value: Any) -> str:
    """A value from the Pod, quoted for a message; annotations can be long, messages should not be."""
    text = repr(value)
    return text if len(text) <= 66 else text[:63] + "..."


def _short(text: str) -> str:
    return text if len(text) <= WARNING_MAX_CHARS else text[: WARNING_MAX_CHARS - 3] + "..."
