"""What a Pod asks of gpu-class, read once from its wire JSON into a frozen PodAsk. Pure.

read_pod() is the only code that walks the Pod: its annotations, containers and their GPU limits and
requests, its exclusions, memory, group, scheduler name, Kueue's podset label and its own resource
claims. planner.py decides from the PodAsk, the inventory snapshot and the catalog, and never looks
at the Pod again.

A Pod that is not the shape the webhook reads and writes is refused (MalformedPod), and what the
user wrote wrong is refused with a message saying what to write. Both are found here, but the
decision says them in its own order: a Pod out of scope (in a namespace not opted in, say) is left
alone whatever else it holds, so a part the decision may never reach is kept as its Malformed or its
message, and refused only when the decision reaches it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

from ..view.affinity import NodeTerm as NodeTerm  # provenance.py and the tests read it from here
from ..view.affinity import Constraint, node_term
from ..catalog.model import PRECISIONS, WAIT_FORMS, Catalog, Need, parse_compute_capability, parse_wait
from ..view.dra import HOSTNAME_LABEL
from ..view.inventory import CLASS_ANNOTATION, GROUP_LABEL, MAX_WAIT_ANNOTATION, TYPES_ANNOTATION, parse_gpu_count
from ..catalog.quantity import quantity_mib

PREFIX = "gpu-class.io/"
COUNT_ANNOTATION = PREFIX + "count"
CONTAINER_ANNOTATION = PREFIX + "container"
EXCLUDE_ANNOTATION = PREFIX + "exclude-types"
MIN_MEMORY_ANNOTATION = PREFIX + "min-memory"
# what the Pod's code needs of a GPU, whatever its name: they narrow the class as min-memory does
REQUIRES_ANNOTATION = PREFIX + "requires"
MIN_COMPUTE_CAPABILITY_ANNOTATION = PREFIX + "min-compute-capability"
UPGRADE_ANNOTATION = PREFIX + "upgrade"  # read by the upgrader (upgrade.py), not the webhook
GROUP_ANNOTATION = "gpu-class.io/group"
GROUP_SIZE_ANNOTATION = "gpu-class.io/group-size"
# LeaderWorkerSet writes the number of Pods of its group (leader included) on each of them. The Job
# controller and JobSet put no Pod count on Pods (JobSet's replicas annotations count Jobs).
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# Set by Kueue on the pod template of every workload it starts (pkg/constants PodSetLabel), so
# on every Pod created from it: its quota was counted from the template, not from the Pod.
PODSET_LABEL = "kueue.x-k8s.io/podset"
# on the Pods of a StatefulSet or LeaderWorkerSet whose Workload Kueue counted from the parent's templates
SUSPENDING_PARENT_ANNOTATION = "kueue.x-k8s.io/pod-suspending-parent"

# the Pod annotations gpu-class reads (and the one it writes): any other gpu-class.io/ key is a slip
POD_ANNOTATIONS = (CLASS_ANNOTATION, COUNT_ANNOTATION, CONTAINER_ANNOTATION, EXCLUDE_ANNOTATION, MIN_MEMORY_ANNOTATION,
                   GROUP_ANNOTATION, GROUP_SIZE_ANNOTATION, REQUIRES_ANNOTATION, MIN_COMPUTE_CAPABILITY_ANNOTATION,
                   TYPES_ANNOTATION, UPGRADE_ANNOTATION, MAX_WAIT_ANNOTATION)

T = TypeVar("T")

_COUNT_RE = re.compile(r"[0-9]{1,6}")
# The most a Pod may ask for in an annotation. Beyond them a value is a slip (or a probe), never a need: no
# node offers a thousand GPUs, no GPU has 64 TiB, and a group of more Pods than this is not a job.
MAX_COUNT = 1024  # gpu-class.io/count: GPUs for one Pod
MAX_GROUP_SIZE = 65536  # gpu-class.io/group-size: Pods of one group
MAX_MIN_MEMORY_MIB = 64 * 1024 * 1024  # gpu-class.io/min-memory: 64Ti per GPU
# a label value: the group's name becomes the Pod label its affinity selects on
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_SIZE_RE = re.compile(r"[0-9]{1,6}")


class MalformedPod(ValueError):
    """The Pod does not have the shape of a Pod where the webhook must read or write it."""


@dataclass(frozen=True)
class Malformed:
    """A part of the Pod without its API shape, refused as MalformedPod when the decision reaches it."""

    message: str


# A Pod's tolerations, each as its sorted (field, text) items: hashable, so a decision can be memoised on them
Tolerations = tuple[tuple[tuple[str, str], ...], ...]


@dataclass(frozen=True)
class GroupAsk:
    """A Pod's group: its name, and the number of Pods it has when known (and which annotation said so)."""

    name: str
    size: int | None = None
    size_from: str | None = None


@dataclass(frozen=True)
class Gpus:
    """The GPUs a container gets of one resource, and whether gpu-class must write the limit."""

    count: int
    set_limit: bool


@dataclass(frozen=True)
class Container:
    """An app container, as far as its GPUs go. Only the catalog's resources are read."""

    index: int
    name: str
    limited: frozenset[str]  # the resources it writes a limit of
    # per resource it limits or requests: what it gets, or the message refusing what it wrote
    gpus: Mapping[str, Gpus | str]
    held: Mapping[str, int]  # devices per resource as written (the limit, else the request), as the scheduler counts


@dataclass(frozen=True)
class PodAsk:
    """Everything of a Pod that the admission decision reads. A str in place of a value is the
    message refusing what the Pod wrote there."""

    class_name: str | None  # gpu-class.io/class; None: the namespace's or catalog's default, if the Pod wants GPUs
    containers: tuple[Container, ...]  # never empty
    container: int | str | None  # the index gpu-class.io/container names; None: the annotation is absent
    unlimited: Gpus | str  # what a container gets of a resource it neither limits nor requests
    init_held: Mapping[str, int]  # per resource, the most any init container holds (it runs alone)
    requested: tuple[str, ...] | Malformed  # the catalog's resources any container limits or requests, in its order
    excluded: frozenset[str] | str
    min_memory_mib: float | None | str
    need: Need | None | str  # gpu-class.io/requires and min-compute-capability; None: neither
    group: GroupAsk | None | str
    group_name: str  # gpu-class.io/group as written, "" when absent: a refused group is still named
    max_wait: str | None | Malformed  # gpu-class.io/max-wait as written (checked); None: absent
    upgrade: bool | None | str  # gpu-class.io/upgrade, which the upgrader reads; None: absent
    scheduler_name: str | None
    kueue_started: bool  # Kueue's podset label: kueue.py's rules apply
    counted_at_parent: bool  # SUSPENDING_PARENT_ANNOTATION: Kueue counts the Pod's parent, not the Pod
    types_written: str | None  # gpu-class.io/types as the Pod came; gpu-class writes it
    # what the scheduler and kubelet enforce on the Pod as it came (provenance.py reads them)
    node_terms: tuple[NodeTerm, ...]  # spec.affinity.nodeAffinity's required terms, ORed; () for none
    preferred_terms: tuple[NodeTerm, ...]  # its preferred terms' `In` expressions: where the Pod steers itself
    node_name: str | None  # spec.nodeName: a Pod bound at creation skips the scheduler
    tolerations: Tolerations
    claims: tuple[str, ...] | Malformed  # the names of spec.resourceClaims
    node_selector: Mapping[str, Any] | Malformed
    unknown_annotations: tuple[str, ...]  # gpu-class.io/ keys nobody reads, sorted

    def container_for(self, resource: str) -> Container | str:
        """The container that gets the GPUs, or the message refusing gpu-class.io/container."""
        if isinstance(self.container, str):
            return self.container
        if self.container is not None:
            return self.containers[self.container]
        # a Pod that already asks for GPUs in one container means that one
        return next((c for c in self.containers if resource in c.limited), self.containers[0])

    def gpus(self, container: Container, resource: str) -> Gpus | str:
        return container.gpus.get(resource, self.unlimited)

    def gpus_needed(self, resource: str, container: Container, count: int) -> int:
        """GPUs the Pod needs on one node once `container` has `count`: app containers add up; an init
        container runs alone."""
        app = sum(count if c.index == container.index else c.held.get(resource, 0) for c in self.containers)
        return max(app, self.init_held.get(resource, 0))

    def own_constraints(self) -> Iterator[Constraint]:
        """The node label values the Pod's own spec asks for or steers to, with where it wrote each: its
        nodeSelector, the `In` expressions of its required and preferred node affinity, and its nodeName
        (a node's name, which names it as its hostname usually does)."""
        if not isinstance(self.node_selector, Malformed):
            yield from (("nodeSelector", k, v) for k, v in self.node_selector.items() if isinstance(v, str))
        yield from (("required node affinity", k, v) for term in self.node_terms for k, values in term
                    for v in values)
        yield from (("preferred node affinity", k, v) for term in self.preferred_terms for k, values in term
                    for v in values)
        if self.node_name is not None:
            yield "spec.nodeName", HOSTNAME_LABEL, self.node_name


def read_pod(pod: Any, catalog: Catalog) -> PodAsk | None:
    """The Pod's ask; None for a mirror Pod (the kubelet's copy of a static Pod: nothing to place).

    Raises MalformedPod where the Pod is not a Pod the webhook can read or patch at all."""
    if not isinstance(pod, dict):
        raise MalformedPod("the object is not a JSON object")
    metadata = _mapping(pod.get("metadata"), "metadata")
    annotations = _string_map(metadata.get("annotations"), "metadata.annotations")
    if MIRROR_ANNOTATION in annotations:
        return None
    containers = _containers(pod)
    labels, node_terms, preferred_terms, tolerations = _check_patchable(pod)
    spec = _mapping(pod.get("spec"), "spec")
    requested = _caught(lambda: _requested_resources(pod, catalog.resources))
    wanted = _wanted_count(annotations)
    gpu_resources = frozenset(catalog.resources)
    # the containers' resources have their shapes only when `requested` read them, and the decision
    # refuses the Pod before it looks at a container otherwise
    shaped = not isinstance(requested, Malformed)
    read = tuple(_container(i, c, wanted, gpu_resources if shaped else frozenset()) for i, c in enumerate(containers))
    init_held: dict[str, int] = {}
    for c in (spec.get("initContainers") or []) if shaped else []:
        for r in _named(c, gpu_resources):
            init_held[r] = max(init_held.get(r, 0), _held(c, r))
    return PodAsk(
        class_name=annotations.get(CLASS_ANNOTATION),
        containers=read,
        container=_named_container(annotations, read),
        unlimited=wanted if isinstance(wanted, str) else Gpus(wanted or 1, True),
        init_held=init_held,
        requested=requested,
        excluded=_excluded(annotations, catalog),
        min_memory_mib=_min_memory_mib(annotations),
        need=read_need(annotations),
        group=read_group(annotations),
        group_name=annotations.get(GROUP_ANNOTATION, ""),
        max_wait=_max_wait(annotations),
        upgrade=_upgrade(annotations),
        scheduler_name=spec.get("schedulerName"),
        kueue_started=PODSET_LABEL in labels,
        counted_at_parent=SUSPENDING_PARENT_ANNOTATION in annotations,
        types_written=annotations.get(TYPES_ANNOTATION),
        node_terms=node_terms,
        preferred_terms=preferred_terms,
        node_name=spec.get("nodeName") if isinstance(spec.get("nodeName"), str) and spec.get("nodeName") else None,
        tolerations=tolerations,
        claims=_caught(lambda: _own_claims(spec)),
        node_selector=_caught(lambda: _mapping(spec.get("nodeSelector"), "spec.nodeSelector")),
        unknown_annotations=tuple(sorted(k for k in annotations if k.startswith(PREFIX) and k not in POD_ANNOTATIONS)),
    )


def read_group(annotations: Mapping[str, str]) -> GroupAsk | None | str:
    """The Pod's group, None when it has none, or the message refusing what it wrote."""
    name = annotations.get(GROUP_ANNOTATION)
    raw_size = annotations.get(GROUP_SIZE_ANNOTATION)
    if name is None:
        if raw_size is not None:
            return (f"gpu-class: {GROUP_SIZE_ANNOTATION} needs {GROUP_ANNOTATION}: name the group whose size "
                    "it is")
        return None
    if not _NAME_RE.fullmatch(name):
        shown = repr(name) if len(name) <= 66 else repr(name[:60]) + "..."
        return (f"gpu-class: {GROUP_ANNOTATION} must be 1 to 63 letters, digits, '-', '_' or '.', beginning and "
                f"ending with a letter or digit (it becomes the Pod label {GROUP_LABEL}), not {shown}")
    if raw_size is not None:
        size = _size(raw_size)
        if size is None:
            shown = repr(raw_size) if len(raw_size) <= 30 else repr(raw_size[:27]) + "..."
            return (f"gpu-class: {GROUP_SIZE_ANNOTATION} must be a positive whole number of Pods, at most "
                    f"{MAX_GROUP_SIZE} (like \"8\"), not {shown}")
        return GroupAsk(name, size, GROUP_SIZE_ANNOTATION)
    # LeaderWorkerSet's webhook refuses a Pod whose size it cannot read, so a bad value never gets here
    lws = _size(annotations.get(LWS_SIZE_ANNOTATION))
    return GroupAsk(name, lws, LWS_SIZE_ANNOTATION if lws is not None else None)


def quoted(value: Any) -> str:
    """A value from the Pod, quoted for a message; annotations can be long, messages should not be."""
    text = repr(value)
    return text if len(text) <= 66 else text[:63] + "..."


# --- the shapes of the Pod's parts ----------------------------------------------------------


def _caught(read: Callable[[], T]) -> T | Malformed:
    try:
        return read()
    except MalformedPod as exc:
        return Malformed(str(exc))


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
            raise MalformedPod(f"{where}[{quoted(key)}] must be a string")
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


def _own_claims(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the Pod's spec.resourceClaims (DRA claims it brings itself)."""
    claims = _list(spec.get("resourceClaims"), "spec.resourceClaims")
    return tuple(str(_item(c, f"spec.resourceClaims[{i}]").get("name") or "?") for i, c in enumerate(claims))


def _check_patchable(pod: Mapping[str, Any]
                     ) -> tuple[Mapping[str, str], tuple[NodeTerm, ...], tuple[NodeTerm, ...], Tolerations]:
    """The parts patch.py reads and extends must have their API shapes. Returns four of them: the
    Pod's labels, its required and its preferred node affinity terms, and its tolerations."""
    spec = _mapping(pod.get("spec"), "spec")
    node_affinity = _mapping(_mapping(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "nodeAffinity")
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), "nodeAffinity.required")
    terms = tuple(
        node_term(_list(_item(term, f"nodeSelectorTerms[{i}]").get("matchExpressions"),
                        f"nodeSelectorTerms[{i}].matchExpressions"))
        for i, term in enumerate(_list(required.get("nodeSelectorTerms"), "nodeSelectorTerms")))
    preferred = tuple(
        _preferred_term(_item(pref, f"nodeAffinity.preferred[{i}]"))
        for i, pref in enumerate(_list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                       "nodeAffinity.preferred")))
    tolerations = tuple(
        tuple(sorted((k, v) for k, v in _item(toleration, f"spec.tolerations[{i}]").items() if isinstance(v, str)))
        for i, toleration in enumerate(_list(spec.get("tolerations"), "spec.tolerations")))
    pod_affinity = _mapping(_mapping(spec.get("affinity"), "spec.affinity").get("podAffinity"), "podAffinity")
    for i, term in enumerate(_list(pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                   "podAffinity.required")):
        _item(term, f"podAffinity.required[{i}]")
    labels = _string_map(_mapping(pod.get("metadata"), "metadata").get("labels"), "metadata.labels")
    if not isinstance(spec.get("schedulerName", ""), (str, type(None))):
        raise MalformedPod("spec.schedulerName must be a string")
    return labels, terms, preferred, tolerations


def _preferred_term(preference: Mapping[str, Any]) -> NodeTerm:
    """A preferred term's `In` expressions: where the Pod steers itself (a term of another shape names nothing)."""
    term = preference.get("preference")
    expressions = term.get("matchExpressions") if isinstance(term, dict) else None
    return node_term(expressions) if isinstance(expressions, list) else ()


def _requested_resources(pod: Mapping[str, Any], resources: Sequence[str]) -> tuple[str, ...]:
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
    return tuple(r for r in resources if r in found)


# --- what it asks for --------------------------------------------------------------------------


def _parts(container: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(limits, requests) of a container whose shapes _requested_resources has checked."""
    resources = container.get("resources") or {}
    return resources.get("limits") or {}, resources.get("requests") or {}


def _held(container: Any, resource: str) -> int:
    """Devices of `resource` a container holds as the scheduler counts them (inventory.pod_gpus)."""
    if not isinstance(container, dict):
        return 0
    limits, requests = _parts(container)
    return parse_gpu_count(limits.get(resource, requests.get(resource)))


def _named(container: Any, resources: frozenset[str]) -> set[str]:
    """The resources a container's limits or requests name, with a value or null."""
    if not isinstance(container, dict) or not resources:
        return set()
    limits, requests = _parts(container)
    return (limits.keys() | requests.keys()) & resources


def _container(index: int, container: Mapping[str, Any], wanted: int | None | str,
               resources: frozenset[str]) -> Container:
    named = _named(container, resources)
    if not named:  # most containers of most Pods: nothing more to read
        return Container(index, container["name"], frozenset(), {}, {})
    limits, requests = _parts(container)
    given = {r for r in named if limits.get(r) is not None or requests.get(r) is not None}
    return Container(
        index=index,
        name=container["name"],
        limited=frozenset(r for r in given if limits.get(r) is not None),
        gpus={r: _gpus(wanted, f"container {container['name']}", limits.get(r), requests.get(r), r) for r in given},
        held={r: held for r in named if (held := _held(container, r))},
    )


def _named_container(annotations: Mapping[str, str], containers: Sequence[Container]) -> int | str | None:
    wanted = annotations.get(CONTAINER_ANNOTATION)
    if wanted is None:
        return None
    for c in containers:
        if c.name == wanted:
            return c.index
    names = ", ".join(c.name for c in containers)
    return f"gpu-class: {CONTAINER_ANNOTATION} names container {quoted(wanted)}, which this Pod does not have; containers: {names}"


def _parse_count(value: Any) -> int | None:
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not _COUNT_RE.fullmatch(text) or int(text) == 0:
        return None
    return int(text)


def _wanted_count(annotations: Mapping[str, str]) -> int | None | str:
    raw = annotations.get(COUNT_ANNOTATION)
    wanted = None if raw is None else _parse_count(raw)
    if raw is not None and (wanted is None or wanted > MAX_COUNT):
        return (f"gpu-class: {COUNT_ANNOTATION} must be a positive whole number of GPUs, at most {MAX_COUNT} (like "
                f"\"1\" or \"4\"), not {quoted(raw)}")
    return wanted


def _gpus(wanted: int | None | str, where: str, limit_raw: Any, request_raw: Any, resource: str) -> Gpus | str:
    """The GPUs for the container, and whether the limit must be written. An existing limit is the count."""
    if isinstance(wanted, str):
        return wanted
    limit = None if limit_raw is None else _parse_count(limit_raw)
    request = None if request_raw is None else _parse_count(request_raw)
    if limit_raw is not None and limit is None:
        return f"gpu-class: {where} has {resource} limit {quoted(limit_raw)}; it must be a positive whole number"
    if request_raw is not None and request is None:
        return f"gpu-class: {where} has {resource} request {quoted(request_raw)}; it must be a positive whole number"
    existing = limit if limit is not None else request
    if limit is not None and request is not None and limit != request:
        return f"gpu-class: {where} requests {request} but limits {limit} of {resource}; they must be equal"
    if existing is not None and wanted is not None and existing != wanted:
        return (
            f"gpu-class: {COUNT_ANNOTATION} says {wanted} but {where} already has {existing} {resource}; "
            "remove one of them or make them equal"
        )
    count = existing if existing is not None else wanted if wanted is not None else 1
    return Gpus(count, limit is None)


def _excluded(annotations: Mapping[str, str], catalog: Catalog) -> frozenset[str] | str:
    raw = annotations.get(EXCLUDE_ANNOTATION)
    if raw is None:
        return frozenset()
    names = {n.strip() for n in raw.split(",") if n.strip()}
    unknown = sorted(n for n in names if n not in catalog.types)
    if unknown:
        return (
            f"gpu-class: {EXCLUDE_ANNOTATION} names unknown types {quoted(', '.join(unknown))[1:-1]}; "
            f"types: {', '.join(catalog.types)}"
        )
    return frozenset(names)


def _max_wait(annotations: Mapping[str, str]) -> str | None | Malformed:
    raw = annotations.get(MAX_WAIT_ANNOTATION)
    if raw is None:
        return None
    if parse_wait(raw) is None:
        return Malformed(f"gpu-class: {MAX_WAIT_ANNOTATION} must be {WAIT_FORMS}, not {quoted(raw)}")
    return raw.strip()


def _upgrade(annotations: Mapping[str, str]) -> bool | None | str:
    """gpu-class.io/upgrade as the upgrader reads it ("true" or "false", any case), or the message refusing it:
    a value the upgrader would pass over silently leaves the Pod where it is while its author thinks otherwise."""
    raw = annotations.get(UPGRADE_ANNOTATION)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false"):
        return f"gpu-class: {UPGRADE_ANNOTATION} must be \"true\" or \"false\", not {quoted(raw)}"
    return raw.lower() == "true"


def _min_memory_mib(annotations: Mapping[str, str]) -> float | None | str:
    """gpu-class.io/min-memory as MiB (a Kubernetes quantity), or the message refusing it."""
    raw = annotations.get(MIN_MEMORY_ANNOTATION)
    if raw is None:
        return None
    mib = quantity_mib(raw)
    if mib is None or mib > MAX_MIN_MEMORY_MIB:
        return (f"gpu-class: {MIN_MEMORY_ANNOTATION} must be a positive Kubernetes quantity of memory per GPU, at "
                f"most 64Ti, like \"40Gi\", \"40960Mi\" or \"48G\", not {quoted(raw)}")
    return mib


def read_need(annotations: Mapping[str, str]) -> Need | None | str:
    """gpu-class.io/requires (precisions, comma-separated) and gpu-class.io/min-compute-capability, or
    the message refusing what the Pod wrote."""
    raw_precisions = annotations.get(REQUIRES_ANNOTATION)
    raw_capability = annotations.get(MIN_COMPUTE_CAPABILITY_ANNOTATION)
    if raw_precisions is None and raw_capability is None:
        return None
    precisions = frozenset(p.strip().lower() for p in (raw_precisions or "").split(",") if p.strip())
    unknown = sorted(precisions - set(PRECISIONS))
    if raw_precisions is not None and (unknown or not precisions):
        return (f"gpu-class: {REQUIRES_ANNOTATION} lists tensor-core precisions, comma-separated, of "
                f"{', '.join(PRECISIONS)} (like \"fp8\" or \"fp8,bf16\"), not {quoted(raw_precisions)}")
    capability = None if raw_capability is None else parse_compute_capability(raw_capability)
    if raw_capability is not None and capability is None:
        return (f"gpu-class: {MIN_COMPUTE_CAPABILITY_ANNOTATION} must be a CUDA compute capability major.minor, "
                f"like \"8.9\" or \"9.0\", not {quoted(raw_capability)}")
    return Need(min_compute_capability=capability, precisions=precisions)


def _size(raw: str | None) -> int | None:
    text = raw.strip() if isinstance(raw, str) else ""
    return int(text) if _SIZE_RE.fullmatch(text) and 0 < int(text) <= MAX_GROUP_SIZE else None
