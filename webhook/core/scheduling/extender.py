"""The Kubernetes scheduler extender: which nodes may run a GPU-class Pod, and which it should prefer. Pure.

Admission happens before scheduling, so the webhook can only state preferences (node affinity by GPU
type). A scheduler profile that calls this extender (deploy/scheduler) decides with the live load at
scheduling time: `filter` drops nodes whose GPU type the Pod was not given, or that lack the free
GPUs, and of the rest keeps those the class's strategy promises (keep_promised); `prioritize`
scores them by the strategy.

Wire format: the Go types of k8s.io/kube-scheduler/extender/v1 carry no json tags, so encoding/json
writes the Go field names (`Pod`, `Nodes`, `NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`,
`Error`, `Host`, `Score`) and reads keys case-insensitively. Nothing here does I/O; the HTTP side is
extender_routes.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Literal, Mapping, Sequence, TypedDict

from ..catalog.model import Catalog
from ..view.nodes import NodeInfo, Offer, node_info_from_object
from ..view.pods import CLASS_ANNOTATION, TYPES_ANNOTATION, UnboundGpuPod, pod_gpus, split_types
from ..view.snapshot import Snapshot, placing_catalog
from ..admission.order import weights_for

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10  # extenderv1.MaxExtenderPriority; the scheduler multiplies by weight * 10

Ordering = Literal["annotation", "performance", "cost", "balanced", "binpack"]


class BadExtenderArgs(ValueError):
    """The body is not ExtenderArgs (not JSON, not an object, fields of the wrong type): an HTTP 400."""


class PodProblem(ValueError):
    """ExtenderArgs parsed, but the Pod cannot be read where the extender must read it."""


# --- wire types ----------------------------------------------------------------------------


class ExtenderFilterResult(TypedDict):
    Nodes: dict[str, Any] | None  # a NodeList, answered when the scheduler sent Nodes
    NodeNames: list[str] | None  # answered when it sent NodeNames (nodeCacheCapable)
    FailedNodes: dict[str, str]  # preemption may help (too few free GPUs)
    FailedAndUnresolvableNodes: dict[str, str]  # preemption cannot help: the scheduler skips them for it
    Error: str  # non-empty: the whole filter failed for this Pod


class HostPriority(TypedDict):
    Host: str
    Score: int


@dataclass(frozen=True)
class ExtenderArgs:
    """ExtenderArgs as read. `node_objects` is None when the scheduler sent names only (nodeCacheCapable)."""

    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    node_objects: tuple[Mapping[str, Any], ...] | None
    node_list: Mapping[str, Any] | None  # the NodeList as sent, so an answer keeps its other fields
    names_sent: bool  # NodeNames was given: answer with NodeNames too

    @property
    def candidates(self) -> tuple[str, ...]:
        """The nodes to judge: those of Nodes when sent (the scheduler's own view), else NodeNames."""
        if self.node_objects is None:
            return self.node_names
        return tuple(o["metadata"]["name"] for o in self.node_objects)

    @property
    def pod_ref(self) -> str:
        metadata = self.pod.get("metadata")
        if not isinstance(metadata, Mapping):
            return "?"
        return f"{metadata.get('namespace') or ''}/{metadata.get('name') or metadata.get('generateName') or '?'}"


@dataclass(frozen=True)
class PodNeeds:
    """What the extender reads of a GPU-class Pod."""

    types: tuple[str, ...]  # gpu-class.io/types as the webhook wrote it, best first
    gpus: int  # devices of `resource` one node must offer
    class_name: str | None
    resource: str = "nvidia.com/gpu"


@dataclass(frozen=True)
class NodeVerdict:
    name: str
    passed: bool
    reason: str = ""
    resolvable: bool = False  # failed, but evicting lower-priority Pods could make it pass
    free_gpus: int = 0
    type_name: str | None = None
    allocatable: int = 0  # devices of the Pod's resource on the node


def share_score(v: NodeVerdict, gpus: int, *, in_use: bool) -> int:
    return share_after(v.allocatable, v.free_gpus, gpus, in_use=in_use)


def share_after(allocatable: int, free: int, gpus: int, *, in_use: bool) -> int:
    """NodeResourcesFit's score of a node once the Pod is placed: the share of its devices in use
    (MostAllocated, `in_use`) or free (LeastAllocated), 0..100 by integer division as kube-scheduler
    computes it, so the extender and the strict profiles (deploy/scheduler) agree to the point."""
    if allocatable <= 0:
        return 0
    used_after = min(allocatable - free + gpus, allocatable)
    return (used_after if in_use else allocatable - used_after) * 100 // allocatable


# --- parsing -------------------------------------------------------------------------------


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """Go's encoding/json: an exact key first, else any key equal to it ignoring case."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    return next((v for k, v in obj.items() if isinstance(k, str) and k.lower() == lowered), None)


def parse_extender_args(data: Any) -> ExtenderArgs:
    """Read decoded JSON as ExtenderArgs; BadExtenderArgs says what is wrong with it."""
    if not isinstance(data, dict):
        raise BadExtenderArgs("body is not a JSON object (ExtenderArgs)")
    pod = _field(data, "Pod")
    if not isinstance(pod, dict):
        raise BadExtenderArgs("Pod must be a Pod object")
    node_list = _field(data, "Nodes")
    raw_names = _field(data, "NodeNames")
    if node_list is None and raw_names is None:
        raise BadExtenderArgs("ExtenderArgs needs Nodes (a NodeList) or NodeNames (a list of node names)")

    objects: tuple[Mapping[str, Any], ...] | None = None
    if node_list is not None:
        if not isinstance(node_list, dict):
            raise BadExtenderArgs("Nodes must be a NodeList object or null")
        items = node_list.get("items")
        if items is None:
            items = []  # Go writes a NodeList without nodes as "items": null
        if not isinstance(items, list):
            raise BadExtenderArgs("Nodes.items must be a list of Node objects")
        for i, item in enumerate(items):
            metadata = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
                raise BadExtenderArgs(f"Nodes.items[{i}] must be a Node object with metadata.name")
        objects = tuple(items)

    if raw_names is not None:
        if not isinstance(raw_names, list) or not all(isinstance(n, str) and n for n in raw_names):
            raise BadExtenderArgs("NodeNames must be a list of node names or null")
        names = tuple(raw_names)
    else:
        names = tuple(o["metadata"]["name"] for o in objects or ())
    return ExtenderArgs(
        pod=pod,
        node_names=names,
        node_objects=objects,
        node_list=node_list,
        names_sent=raw_names is not None,
    )


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodProblem(f"{where} must be an object")
    return value


def _containers(spec: Mapping[str, Any], field: str) -> None:
    containers = spec.get(field)
    if containers is None:
        return
    if not isinstance(containers, list):
        raise PodProblem(f"spec.{field} must be a list")
    for i, container in enumerate(containers):
        where = f"spec.{field}[{i}]"
        resources = _object(_object(container, where).get("resources"), f"{where}.resources")
        for part in ("limits", "requests"):
            _object(resources.get(part), f"{where}.resources.{part}")


def read_pod(pod: Mapping[str, Any], catalog: Catalog) -> PodNeeds | None:
    """The Pod's allowed types and GPUs; None for a Pod the webhook did not place (no gpu-class.io/types)."""
    metadata = _object(pod.get("metadata"), "metadata")
    annotations = _object(metadata.get("annotations"), "metadata.annotations")
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise PodProblem(f"metadata.annotations[{key!r}] must be a string")
    listed = annotations.get(TYPES_ANNOTATION)
    if listed is None:
        return None
    spec = _object(pod.get("spec"), "spec")
    _containers(spec, "containers")
    _containers(spec, "initContainers")
    types = split_types(listed)
    # counted as the inventory counts a bound Pod, so scheduling and accounting agree; the
    # resource is the one the Pod holds, else that of its best type
    held = [r for r in catalog.resources if pod_gpus({"spec": spec}, r) > 0]
    listed_resources = [catalog.types[t].resource for t in types if t in catalog.types]
    resource = (held or listed_resources or [catalog.gpu_resource])[0]
    gpus = pod_gpus({"spec": spec}, resource)
    return PodNeeds(types=types, gpus=gpus, class_name=annotations.get(CLASS_ANNOTATION), resource=resource)


# --- deciding ------------------------------------------------------------------------------


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def judge_node(name: str, info: NodeInfo | None, needs: PodNeeds, snapshot: Snapshot, *, from_cache: bool) -> NodeVerdict:
    """Whether the Pod may run on the node, and if not, why and whether preemption could change that."""
    if info is None:
        # from the cache: the inventory holds every node with a GPU product label or DRA GPUs
        reason = "unknown node (gpu-class has seen no GPU product label or DRA GPU on it)" if from_cache else "not a GPU node"
        return NodeVerdict(name, False, f"gpu-class: {reason}")
    if not info.offers:
        return NodeVerdict(name, False, f"gpu-class: product {info.product} is no GPU type of the catalog")
    offer = pod_offer(info, needs)
    if offer is None:
        allowed = ",".join(needs.types) or "(none)"
        offered = ",".join(o.type_name for o in info.offers)
        return NodeVerdict(name, False, f"gpu-class: type {offered} not in {allowed}", type_name=info.type_name)
    type_name = offer.type_name
    if not info.ready:
        return NodeVerdict(name, False, "gpu-class: node not ready", type_name=type_name)
    if info.unschedulable:
        return NodeVerdict(name, False, "gpu-class: node cordoned", type_name=type_name)
    sick = info.health_problems(type_name)
    if sick:
        return NodeVerdict(name, False, f"gpu-class: node unhealthy for {type_name} ({'; '.join(sick)})",
                           type_name=type_name)
    if offer.allocatable < needs.gpus:
        return NodeVerdict(
            name, False, f"gpu-class: {_gpus(offer.allocatable)} allocatable, Pod needs {needs.gpus}",
            type_name=type_name,
        )
    free = snapshot.free(name, offer)
    if free < needs.gpus:
        return NodeVerdict(
            name, False, f"gpu-class: {_gpus(free)} free, Pod needs {needs.gpus}",
            resolvable=True, free_gpus=free, type_name=type_name, allocatable=offer.allocatable,
        )
    return NodeVerdict(name, True, free_gpus=free, type_name=type_name, allocatable=offer.allocatable)


def pod_offer(info: NodeInfo, needs: PodNeeds) -> Offer | None:
    """What the node offers the Pod: a node may offer several types (mixed MIG: one per profile); the
    first of the Pod's types it offers, as the Pod's resource, counts."""
    return next((o for t in needs.types if (o := info.offer(t)) is not None and o.resource == needs.resource), None)


def _candidates(args: ExtenderArgs, snapshot: Snapshot, catalog: Catalog) -> list[tuple[str, NodeInfo | None]]:
    if args.node_objects is not None:
        return [(o["metadata"]["name"], _from_object(o, snapshot, catalog)) for o in args.node_objects]
    return [(name, snapshot.nodes.get(name)) for name in args.node_names]


def _from_object(obj: Mapping[str, Any], snapshot: Snapshot, catalog: Catalog) -> NodeInfo | None:
    """A Node the scheduler sent, as its object says; its DRA devices are in no Node object, so a
    node the inventory knows to have some is taken with the offers merged from its ResourceSlices."""
    info = node_info_from_object(obj, catalog, keep_all=True)
    known = snapshot.nodes.get(obj["metadata"]["name"])
    if info is not None and known is not None and any(o.dra for o in known.offers):
        return dataclasses.replace(info, offers=known.offers)
    return info if info is not None and (info.offers or info.product) else None


def judge_nodes(args: ExtenderArgs, needs: PodNeeds, snapshot: Snapshot, catalog: Catalog) -> list[NodeVerdict]:
    from_cache = args.node_objects is None
    return [judge_node(n, info, needs, snapshot, from_cache=from_cache) for n, info in _candidates(args, snapshot, catalog)]


NOT_SYNCED = "gpu-class has not yet read the cluster's nodes and GPU Pods (starting, or the API server is unreachable)"


def filter_nodes(args: ExtenderArgs, snapshot: Snapshot, catalog: Catalog) -> ExtenderFilterResult:
    """The `filter` verb. Pods the webhook did not place pass unchanged; so does an empty node list."""
    catalog = placing_catalog(catalog, snapshot)  # with the types nodes' labels made
    try:
        needs = read_pod(args.pod, catalog)
    except PodProblem as exc:
        return filter_error(f"gpu-class: cannot read Pod {args.pod_ref}: {exc}")
    if needs is None:
        return _filter_answer(args, [*args.candidates, *args.node_names], {}, {})
    if not snapshot.synced:
        return filter_error(f"gpu-class: {NOT_SYNCED}; retry")
    verdicts = keep_promised(judge_nodes(args, needs, snapshot, catalog), needs, snapshot, catalog)
    passed = [v.name for v in verdicts if v.passed]
    failed = {v.name: v.reason for v in verdicts if not v.passed and v.resolvable}
    unresolvable = {v.name: v.reason for v in verdicts if not v.passed and not v.resolvable}
    return _filter_answer(args, passed, failed, unresolvable)


def keep_promised(verdicts: Sequence[NodeVerdict], needs: PodNeeds, snapshot: Snapshot,
                  catalog: Catalog) -> list[NodeVerdict]:
    """Of the nodes that could take the Pod, only those its class's strategy promises now.

    Scores alone lose to the scheduler's own (least-allocated, topology spread): a half-full H100
    node next to an empty L40S one can send a `performance` Pod to the L40S. The scheduler calls
    `filter` with the nodes that passed its own filters (CPU, memory, taints, affinity), so keeping
    the promised ones among them cannot strand the Pod: at least one stays when any could run it.

    - performance, cost, annotation: the nodes of the best type (by type_order) that has one;
    - binpack: the node with the largest share of its devices in use once the Pod is placed;
    - balanced: the node with the largest share free once the Pod is placed.
    The last two are the strict profiles' NodeResourcesFit scores (share_score), whatever the type.
    """
    fitting = [v for v in verdicts if v.passed]
    if not fitting:
        return list(verdicts)
    ordering = ordering_for(needs, catalog)
    # binpack and balanced keep one node (ties go to the first name), so the extender knows where
    # the Pod goes and can count it there at once (Assumed): the scheduler binds a Deployment's next
    # replica before the watch has seen this one bound.
    if ordering in ("binpack", "balanced"):
        in_use = ordering == "binpack"
        best_score = max(share_score(v, needs.gpus, in_use=in_use) for v in fitting)
        keep = {min(v.name for v in fitting if share_score(v, needs.gpus, in_use=in_use) == best_score)}
        why = (f"gpu-class: {ordering}: a node with {best_score}% of its GPUs "
               f"{'in use' if in_use else 'free'} once the Pod is placed can take it")
    else:
        present = {v.type_name for v in fitting}
        best = next((t for t in type_order(needs, catalog, ordering) if t in present), None)
        keep = {v.name for v in fitting if v.type_name == best}
        why = f"gpu-class: {ordering}: a node of the preferred type {best} can take it"
    # Unresolvable: preempting Pods on a node the strategy passes over would not help.
    return [v if not v.passed or v.name in keep else dataclasses.replace(v, passed=False, reason=why, resolvable=False)
            for v in verdicts]


ASSUME_SECONDS = 10.0  # a bind not seen by then failed, or the Pod went elsewhere


@dataclass(frozen=True)
class Assumed:
    """A Pod `filter` sent to exactly one node, counted there until the inventory shows it bound.

    kube-scheduler does the same in its own cache ("assume"): it binds asynchronously and schedules
    the next Pod at once, milliseconds before the watch brings the binding to the webhook.
    """

    node: str
    resource: str
    gpus: int
    at_seconds: float


@dataclass(frozen=True)
class FilterOutcome:
    """A `filter` answer, the assumptions pending after it, and the one it made (None: none)."""

    result: ExtenderFilterResult
    assumptions: dict[str, Assumed]
    assumed: Assumed | None
    pod_known: bool  # the Pod is one the inventory has seen unbound, with this request
    # the answer sent the Pod to one node, but the inventory does not know the Pod (yet: the
    # scheduler may ask before the watch has brought the Pod's creation); None otherwise
    unknown: Assumed | None = None


def known_unbound_pod(args: ExtenderArgs, needs: PodNeeds, snapshot: Snapshot) -> UnboundGpuPod | None:
    """The Pod as the inventory knows it: seen unbound, with this uid, name and request; else None.

    Only such a Pod may leave an assumption behind: anyone can make up a Pod with a fresh uid, and
    its GPUs, counted for ASSUME_SECONDS, would keep real Pods off the nodes it names.
    """
    known = (snapshot.unbound_pods or {}).get(pod_uid(args))
    metadata = args.pod.get("metadata")
    name = (metadata.get("namespace"), metadata.get("name")) if isinstance(metadata, Mapping) else None
    if known is None or name != (known.namespace, known.name) or (needs.resource, needs.gpus) != (
            known.resource, known.devices):
        return None
    return known


def assume(result: ExtenderFilterResult, needs: PodNeeds, now_seconds: float) -> Assumed | None:
    """The assumption a filter answer makes: only when it left exactly one node."""
    kept = result["NodeNames"] if result["NodeNames"] is not None else [
        o["metadata"]["name"] for o in (result["Nodes"] or {}).get("items", [])]
    if result["Error"] or len(kept) != 1 or needs.gpus <= 0:
        return None
    return Assumed(kept[0], needs.resource, needs.gpus, now_seconds)


def filter_assuming(args: ExtenderArgs, snapshot: Snapshot, catalog: Catalog, assumed: Mapping[str, Assumed],
                    now_seconds: float) -> FilterOutcome:
    """`filter` on the snapshot with the other Pods' pending assumptions counted; and the assumptions after it.

    A retry of the same Pod (its bind failed) does not count its own assumption, and replaces it. A
    Pod the inventory does not know (known_unbound_pod) is answered and leaves nothing behind.
    """
    uid = pod_uid(args)
    others = {k: a for k, a in assumed.items() if k != uid}
    adjusted, live = with_assumed(snapshot, others, now_seconds)
    result = filter_nodes(args, adjusted, catalog)
    try:
        needs = read_pod(args.pod, catalog)
    except PodProblem:
        needs = None
    known = needs is not None and known_unbound_pod(args, needs, snapshot) is not None
    implied = assume(result, needs, now_seconds) if needs is not None and uid else None
    if implied is not None and known:
        live[uid] = implied
    return FilterOutcome(result, live, implied if known else None, known, None if known else implied)


def pod_uid(args: ExtenderArgs) -> str:
    metadata = args.pod.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    return uid if isinstance(uid, str) else ""


def with_assumed(snapshot: Snapshot, assumed: Mapping[str, Assumed],
                 now_seconds: float) -> tuple[Snapshot, dict[str, Assumed]]:
    """The snapshot as if the assumed Pods were bound, and the assumptions still pending (by Pod uid).

    An assumption ends when its Pod is no longer a known unbound Pod (the watch saw it bound, where
    it is counted from then on, or deleted or finished), or after ASSUME_SECONDS.
    """
    unbound = snapshot.unbound_pods or {}
    live = {uid: a for uid, a in assumed.items() if now_seconds - a.at_seconds < ASSUME_SECONDS and uid in unbound}
    if not live:
        return snapshot, live
    requested = dict(snapshot.requested)
    for a in live.values():
        requested[(a.node, a.resource)] = requested.get((a.node, a.resource), 0) + a.gpus
    return dataclasses.replace(snapshot, requested=MappingProxyType(requested), memo={}), live


def _filter_answer(
    args: ExtenderArgs, passed: Sequence[str], failed: dict[str, str], unresolvable: dict[str, str]
) -> ExtenderFilterResult:
    keep = set(passed)
    nodes: dict[str, Any] | None = None
    if args.node_objects is not None:
        # the very objects the scheduler sent: it continues with what comes back
        nodes = {**(args.node_list or {}), "items": [o for o in args.node_objects if o["metadata"]["name"] in keep]}
    names = [n for n in args.node_names if n in keep] if args.names_sent else None
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }


def filter_error(message: str) -> ExtenderFilterResult:
    """A filter answer that fails the Pod's scheduling attempt with `message` (HTTP 200, as the scheduler expects)."""
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def ordering_for(needs: PodNeeds, catalog: Catalog) -> Ordering:
    """The class's strategy; a Pod without a (known) class is scored by its annotation's order."""
    gpu_class = catalog.classes.get(needs.class_name) if needs.class_name else None
    return "annotation" if gpu_class is None else gpu_class.strategy


def type_order(needs: PodNeeds, catalog: Catalog, ordering: Ordering) -> tuple[str, ...]:
    """Types best first. performance: the class's order (fastest first); cost: slowest first.

    The webhook wrote the annotation best first for the class's strategy, so for these two the
    result equals the annotation; reading the catalog keeps it right for a hand-written annotation.
    """
    gpu_class = catalog.classes.get(needs.class_name) if needs.class_name else None
    if ordering not in ("performance", "cost") or gpu_class is None:
        return needs.types
    rank = {name: i for i, name in enumerate(gpu_class.types)}
    known = sorted((t for t in needs.types if t in rank), key=rank.__getitem__)
    if ordering == "cost":
        known.reverse()
    return (*known, *(t for t in needs.types if t not in rank))


def _scale(part: int, whole: int) -> int:
    """part/whole on 0..MAX_EXTENDER_PRIORITY, rounded half up."""
    return (2 * MAX_EXTENDER_PRIORITY * part + whole) // (2 * whole)


def score_nodes(verdicts: Sequence[NodeVerdict], needs: PodNeeds, catalog: Catalog) -> dict[str, int]:
    """Scores for the nodes that pass; 0 for the rest.

    - performance, cost, annotation: by type; the best type gets 10, the others follow the
      webhook's preferred-affinity weights (order.weights_for) scaled to 0..10, so the scheduler
      and the Pod's preferences rank types alike;
    - binpack, balanced: the share of the node's devices in use (binpack) or free (balanced) once
      the Pod is placed (share_score), scaled to 0..10.
    """
    ordering = ordering_for(needs, catalog)
    fitting = [v for v in verdicts if v.passed]
    scores = {v.name: MIN_EXTENDER_PRIORITY for v in verdicts}
    if ordering in ("binpack", "balanced"):
        for v in fitting:
            scores[v.name] = _scale(share_score(v, needs.gpus, in_use=ordering == "binpack"), 100)
    else:
        ordered = type_order(needs, catalog, ordering)
        by_type = {t: _scale(w, 100) for t, w in zip(ordered, weights_for(len(ordered)))}
        for v in fitting:
            scores[v.name] = by_type.get(v.type_name or "", MIN_EXTENDER_PRIORITY)
    return scores


def prioritize_nodes(args: ExtenderArgs, snapshot: Snapshot, catalog: Catalog) -> list[HostPriority]:
    """The `prioritize` verb: a score 0..10 for every node sent, in the order sent.

    A Pod the webhook did not place, a Pod that cannot be read, or an inventory not yet read gets 0
    everywhere: no opinion. (The scheduler ignores prioritize errors anyway, and `filter` has already
    reported the problem.)
    """
    catalog = placing_catalog(catalog, snapshot)  # with the types nodes' labels made
    names = args.candidates
    try:
        needs = read_pod(args.pod, catalog)
    except PodProblem:
        needs = None
    if needs is None or not snapshot.synced:
        return neutral_priorities(names)
    scores = score_nodes(judge_nodes(args, needs, snapshot, catalog), needs, catalog)
    return [{"Host": n, "Score": scores.get(n, MIN_EXTENDER_PRIORITY)} for n in names]


def neutral_priorities(names: Iterable[str]) -> list[HostPriority]:
    return [{"Host": n, "Score": MIN_EXTENDER_PRIORITY} for n in names]
