"""What a Pod asks of gpu-class, read once from its wire JSON into a frozen PodAsk, whole. Pure.

read_pod() is the only code that walks the Pod: its shape (shape.py), its gpu-class.io annotations
(annotations.py), its containers and their GPU limits and requests, and from these the GPUs it asks for
(GpuAsk: the container that gets them, how many, how many it needs on one node), its scheduler name,
Kueue's marks and its own resource claims. The decision (planner.decide and its steps) reads the
PodAsk, the inventory snapshot and the catalog, and never looks at the Pod again.

A Pod that is not the shape the webhook reads and writes is refused (MalformedPod), and what the
user wrote wrong is refused with a message saying what to write. Both are found here, but the
decision says them in its own order: a Pod out of scope (in a namespace not opted in, say) is left
alone whatever else it holds, so a part the decision may never reach is kept as its Malformed or its
message, and refused only when the decision reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

from ..catalog.model import Catalog, Need
from ..view.affinity import NodeTerm
from ..view.nodes import parse_gpu_count
from ..view.pods import CLASS_ANNOTATION, TYPES_ANNOTATION
from .annotations import (
    CONTAINER_ANNOTATION, COUNT_ANNOTATION, GROUP_ANNOTATION, GroupAsk, excluded_types, max_wait, min_memory_mib,
    parse_count, read_group, read_need, unknown_annotations, upgrade, wanted_count,
)
from .shape import (
    Malformed, MalformedPod, PodClaim, Tolerations, app_containers, caught, mapping, own_claims, patchable_parts,
    requested_resources, string_map,
)
from .words import quoted

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# Set by Kueue on the pod template of every workload it starts (pkg/constants PodSetLabel), so
# on every Pod created from it: its quota was counted from the template, not from the Pod.
PODSET_LABEL = "kueue.x-k8s.io/podset"
# on the Pods of a StatefulSet or LeaderWorkerSet whose Workload Kueue counted from the parent's templates
SUSPENDING_PARENT_ANNOTATION = "kueue.x-k8s.io/pod-suspending-parent"


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


class GpuAsk(NamedTuple):
    """The GPUs a Pod asks for: the container that gets them, how many, and how many the Pod needs on one node."""

    container: Container
    gpus: Gpus
    needed: int  # on one node: the app containers add up; an init container runs alone


class PodAsk(NamedTuple):
    """Everything of a Pod that the admission decision reads. A str in place of a value is the
    message refusing what the Pod wrote there. (A NamedTuple: one is built per admission, and it
    costs a fraction of a frozen dataclass of as many fields to build.)"""

    class_name: str | None  # gpu-class.io/class; None: the namespace's or catalog's default, if the Pod wants GPUs
    containers: tuple[Container, ...]  # never empty
    container: int | str | None  # the index gpu-class.io/container names; None: the annotation is absent
    unlimited: Gpus | str  # what a container gets of a resource it neither limits nor requests
    init_held: Mapping[str, int]  # per resource, the most any init container holds (it runs alone)
    requested: tuple[str, ...] | Malformed  # the catalog's resources any container limits or requests, in its order
    # The GPUs it asks for, of the one resource it asks for; of none, the same whichever its class gives (no
    # container holds any). A Pod that asks for several, or whose resources are malformed, is refused before
    # this is read. None: the Pod names no class and asks for no GPU, so there is nothing to give.
    gpu_ask: GpuAsk | str | None
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
    claims: tuple[PodClaim, ...] | Malformed  # spec.resourceClaims
    node_selector: Mapping[str, Any] | Malformed
    unknown_annotations: tuple[str, ...]  # gpu-class.io/ keys nobody reads, sorted

    def container_for(self, resource: str) -> Container | str:
        """The container that gets the GPUs, or the message refusing gpu-class.io/container."""
        return chosen_container(self.containers, self.container, resource)

    def gpus(self, container: Container, resource: str) -> Gpus | str:
        return container.gpus.get(resource, self.unlimited)

    def gpus_needed(self, resource: str, container: Container, count: int) -> int:
        """GPUs the Pod needs on one node once `container` has `count`."""
        return gpus_needed(self.containers, self.init_held, resource, container, count)


def read_pod(pod: Any, catalog: Catalog) -> PodAsk | None:
    """The Pod's ask; None for a mirror Pod (the kubelet's copy of a static Pod: nothing to place).

    Raises MalformedPod where the Pod is not a Pod the webhook can read or patch at all."""
    if not isinstance(pod, dict):
        raise MalformedPod("the object is not a JSON object")
    metadata = mapping(pod.get("metadata"), "metadata")
    annotations = string_map(metadata.get("annotations"), "metadata.annotations")
    if MIRROR_ANNOTATION in annotations:
        return None
    containers = app_containers(pod)
    labels, node_terms, preferred_terms, tolerations = patchable_parts(pod)
    spec = mapping(pod.get("spec"), "spec")
    requested = caught(requested_resources, pod, catalog.resources)
    claims = caught(own_claims, spec)
    node_selector = caught(mapping, spec.get("nodeSelector"), "spec.nodeSelector")
    wanted = wanted_count(annotations)
    gpu_resources = frozenset(catalog.resources)
    # the containers' resources have their shapes only when `requested` read them, and the decision
    # refuses the Pod before it looks at a container otherwise
    shaped = not isinstance(requested, Malformed)
    read = tuple(_container(i, c, wanted, gpu_resources if shaped else frozenset()) for i, c in enumerate(containers))
    init_held: dict[str, int] = {}
    for c in (spec.get("initContainers") or []) if shaped else []:
        for r in _named(c, gpu_resources):
            init_held[r] = max(init_held.get(r, 0), _held(c, r))
    named = _named_container(annotations, read)
    unlimited = wanted if isinstance(wanted, str) else Gpus(wanted or 1, True)
    class_name = annotations.get(CLASS_ANNOTATION)
    return PodAsk(
        class_name=class_name,
        containers=read,
        container=named,
        unlimited=unlimited,
        init_held=init_held,
        requested=requested,
        gpu_ask=None if class_name is None and not requested else _gpu_ask(read, named, unlimited, init_held,
                                                                            _one_resource(requested)),
        excluded=excluded_types(annotations, catalog),
        min_memory_mib=min_memory_mib(annotations),
        need=read_need(annotations),
        group=read_group(annotations, catalog.topology_labels),
        group_name=annotations.get(GROUP_ANNOTATION, ""),
        max_wait=max_wait(annotations),
        upgrade=upgrade(annotations),
        scheduler_name=spec.get("schedulerName"),
        kueue_started=PODSET_LABEL in labels,
        counted_at_parent=SUSPENDING_PARENT_ANNOTATION in annotations,
        types_written=annotations.get(TYPES_ANNOTATION),
        node_terms=node_terms,
        preferred_terms=preferred_terms,
        node_name=spec.get("nodeName") if isinstance(spec.get("nodeName"), str) and spec.get("nodeName") else None,
        tolerations=tolerations,
        claims=claims,
        node_selector=node_selector,
        unknown_annotations=unknown_annotations(annotations),
    )


def chosen_container(containers: Sequence[Container], named: int | str | None,
                     resource: str | None) -> Container | str:
    """The container gpu-class.io/container names (or the message refusing it), else the first that limits
    `resource`, else the first: a Pod that already asks for GPUs in one container means that one."""
    if isinstance(named, str):
        return named
    if named is not None:
        return containers[named]
    return next((c for c in containers if resource in c.limited), containers[0])


def gpus_needed(containers: Sequence[Container], init_held: Mapping[str, int], resource: str, container: Container,
                count: int) -> int:
    """GPUs the Pod needs on one node once `container` has `count`: app containers add up; an init
    container runs alone."""
    app = sum(count if c.index == container.index else c.held.get(resource, 0) for c in containers)
    return max(app, init_held.get(resource, 0))


def _one_resource(requested: tuple[str, ...] | Malformed) -> str | None:
    """The resource the Pod's GPUs are read for: the first it asks for (a Pod that asks for several is refused)."""
    return requested[0] if isinstance(requested, tuple) and requested else None


def _gpu_ask(containers: Sequence[Container], named: int | str | None, unlimited: Gpus | str,
             init_held: Mapping[str, int], resource: str | None) -> GpuAsk | str:
    """The GPUs asked of `resource`, or of none (None: no container holds any, so the container is the named one or
    the first, it gets `unlimited`, and the Pod needs those alone); or the first message refusing what it wrote."""
    container = chosen_container(containers, named, resource)
    if isinstance(container, str):
        return container
    gpus = unlimited if resource is None else container.gpus.get(resource, unlimited)
    if isinstance(gpus, str):
        return gpus
    needed = gpus.count if resource is None else gpus_needed(containers, init_held, resource, container, gpus.count)
    return GpuAsk(container, gpus, needed)


# --- the containers' GPUs ------------------------------------------------------------------


def _parts(container: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(limits, requests) of a container whose shapes requested_resources has checked."""
    resources = container.get("resources") or {}
    return resources.get("limits") or {}, resources.get("requests") or {}


def _held(container: Any, resource: str) -> int:
    """Devices of `resource` a container holds as the scheduler counts them (view.pods.pod_gpus)."""
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
    """The index of the container gpu-class.io/container names; None when absent; or the message refusing it."""
    wanted = annotations.get(CONTAINER_ANNOTATION)
    if wanted is None:
        return None
    for c in containers:
        if c.name == wanted:
            return c.index
    names = ", ".join(c.name for c in containers)
    return f"gpu-class: {CONTAINER_ANNOTATION} names container {quoted(wanted)}, which this Pod does not have; containers: {names}"


def _gpus(wanted: int | None | str, where: str, limit_raw: Any, request_raw: Any, resource: str) -> Gpus | str:
    """The GPUs for the container, and whether the limit must be written. An existing limit is the count."""
    if isinstance(wanted, str):
        return wanted
    limit = None if limit_raw is None else parse_count(limit_raw)
    request = None if request_raw is None else parse_count(request_raw)
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
