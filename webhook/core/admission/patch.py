"""Turn a Placement into JSON Patch operations on the Pod as it came in. Pure.

Operations are written for exactly the paths that change (not a diff of the whole Pod), so the cost
does not grow with managedFields or other large parts of the object, and fields the webhook does
not know survive untouched. Every operation is idempotent with respect to the webhook's own output:
run again on a patched Pod, the patch is empty.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, NotRequired, Sequence, TypedDict

from ..view.dra import HOSTNAME_LABEL
from ..view.nodes import Taint, tolerates
from ..view.pods import CLASS_ANNOTATION, GROUP_LABEL, MAX_WAIT_ANNOTATION, TYPES_ANNOTATION
from .decision import Placement
from .groups import GroupPlan


class PatchOp(TypedDict):
    op: str
    path: str
    value: NotRequired[Any]  # none for "remove"


def escape(token: str) -> str:
    """RFC 6901: '~' before '/', so 'nvidia.com/gpu' becomes 'nvidia.com~1gpu'."""
    return token.replace("~", "~0").replace("/", "~1")


def _add(path: str, value: Any) -> PatchOp:
    # 'add' on an existing member replaces it, so one op serves both cases
    return {"op": "add", "path": path, "value": value}


def build_patch(pod: Mapping[str, Any], placement: Placement) -> list[PatchOp]:
    ops: list[PatchOp] = []
    spec = pod.get("spec") or {}
    ops += _limit_ops(spec["containers"][placement.container_index], placement)
    ops += _affinity_ops(spec, placement)
    ops += _toleration_ops(spec, placement.tolerations)
    if placement.scheduler_name and spec.get("schedulerName") != placement.scheduler_name:
        ops.append(_add("/spec/schedulerName", placement.scheduler_name))
    annotations = {TYPES_ANNOTATION: ",".join(placement.types)}
    if placement.record_class:
        annotations[CLASS_ANNOTATION] = placement.class_name
    if placement.max_wait is not None:
        annotations[MAX_WAIT_ANNOTATION] = placement.max_wait
    metadata = pod.get("metadata") or {}
    ops += _map_ops(metadata, "annotations", annotations)
    if placement.drop_max_wait and MAX_WAIT_ANNOTATION in (metadata.get("annotations") or {}):
        ops.append({"op": "remove", "path": f"/metadata/annotations/{escape(MAX_WAIT_ANNOTATION)}"})
    if placement.group is not None:
        ops += _map_ops(metadata, "labels", {GROUP_LABEL: placement.group.name})
    return ops


def build_unplaced_patch(pod: Mapping[str, Any]) -> list[PatchOp]:
    """An admitted but unplaced Pod still says the webhook saw it (the backstop policy looks for that)."""
    return _map_ops(pod.get("metadata") or {}, "annotations", {TYPES_ANNOTATION: ""})


def _limit_ops(container: Mapping[str, Any], placement: Placement) -> list[PatchOp]:
    if not placement.set_limit:
        return []
    gpu_resource = placement.resource
    base = f"/spec/containers/{placement.container_index}/resources"
    value = str(placement.count)
    resources = container.get("resources")
    if not resources:
        return [_add(base, {**(resources or {}), "limits": {gpu_resource: value}})]
    if not resources.get("limits"):
        return [_add(base + "/limits", {gpu_resource: value})]
    return [_add(f"{base}/limits/{escape(gpu_resource)}", value)]


def _restriction(key: str, products: Sequence[str]) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(products)}


def merged_node_affinity(node_affinity: Mapping[str, Any] | None, placement: Placement) -> dict[str, Any]:
    """The Pod's nodeAffinity with the valid types required in every term and preferred in order.

    Terms are ORed and expressions within a term ANDed, so the restriction joins each term; with
    several label keys (nodes labelled by GFD and by hand), each term is repeated once per key.
    A term that already holds one of the restrictions is the webhook's own output and is kept.
    Each new term also keeps the Pod off the nodes unhealthy for its types (`kubernetes.io/hostname NotIn`):
    the tenant boundary and provenance read only `In` expressions, so this narrows and names no type.
    """
    result = copy.deepcopy(dict(node_affinity or {}))
    restrictions = [_restriction(k, v) for k, v in placement.required]
    domain = _domain_restriction(placement.group)
    avoid = ([{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": list(placement.avoid_hosts)}]
             if placement.avoid_hosts else [])
    required = result.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or [{}]
    new_terms: list[dict[str, Any]] = []
    for term in terms:
        expressions = term.get("matchExpressions") or []
        if any(r in expressions for r in restrictions):
            new_terms.append(term)
            continue
        for r in restrictions:
            new_terms.append({**term, "matchExpressions": [*expressions, r, *domain, *avoid]})
    result["requiredDuringSchedulingIgnoredDuringExecution"] = {**required, "nodeSelectorTerms": new_terms}

    preferred = list(result.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    for p in placement.preferences:
        term = {"weight": p.weight, "preference": {"matchExpressions": [_restriction(p.label_key, p.products)]}}
        if term not in preferred:
            preferred.append(term)
    if preferred:
        result["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return result


def merged_pod_affinity(pod_affinity: Mapping[str, Any] | None, term: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod's podAffinity with `term` among its required terms (ANDed with the Pod's own)."""
    result = copy.deepcopy(dict(pod_affinity or {}))
    required = list(result.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    if term not in required:
        required.append(dict(term))
    result["requiredDuringSchedulingIgnoredDuringExecution"] = required
    return result


def _affinity_ops(spec: Mapping[str, Any], placement: Placement) -> list[PatchOp]:
    affinity = spec.get("affinity") or {}
    changed: dict[str, Any] = {}
    node_affinity = merged_node_affinity(affinity.get("nodeAffinity"), placement)
    if node_affinity != affinity.get("nodeAffinity"):
        changed["nodeAffinity"] = node_affinity
    if placement.group is not None:
        pod_affinity = _group_pod_affinity(affinity.get("podAffinity"), placement.group)
        if pod_affinity != affinity.get("podAffinity"):
            changed["podAffinity"] = pod_affinity
    if not changed:
        return []
    if not affinity:
        return [_add("/spec/affinity", changed)]
    return [_add(f"/spec/affinity/{key}", value) for key, value in changed.items()]


def _group_term(group: GroupPlan, topology_key: str) -> dict[str, Any]:
    """The Pod affinity term that meets the group's Pods on one value of `topology_key`."""
    return {"labelSelector": {"matchLabels": {GROUP_LABEL: group.name}}, "topologyKey": topology_key}


def _group_pod_affinity(pod_affinity: Mapping[str, Any] | None, group: GroupPlan) -> dict[str, Any]:
    """The Pod's podAffinity with the terms that keep its group on one product and, as asked, in one domain.

    A required domain's term comes first: gpu-class-scheduler holds a waiting group until one value of its
    first group term's key has room for all of it (group_wait.go), and that value must be the domain's."""
    topology = group.topology
    result = dict(pod_affinity or {})
    if topology is not None and topology.required:
        result = merged_pod_affinity(result, _group_term(group, topology.key))
    result = merged_pod_affinity(result, _group_term(group, group.topology_key))
    if topology is not None and not topology.required:
        preferred = list(result.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
        term = {"weight": PREFERRED_DOMAIN_WEIGHT, "podAffinityTerm": _group_term(group, topology.key)}
        if term not in preferred:
            preferred.append(term)
        result["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return result


# the most a preferred term weighs: the group's Pods meet in one domain ahead of every other preference they hold
PREFERRED_DOMAIN_WEIGHT = 100


def _domain_restriction(group: GroupPlan | None) -> list[dict[str, Any]]:
    """The node affinity expression that keeps a group with a required topology within its domains."""
    if group is None or group.topology is None or not group.topology.required or not group.topology_key:
        return []
    if group.domains is None:
        return [{"key": group.topology.key, "operator": "Exists"}]
    return [_restriction(group.topology.key, group.domains)]


def _toleration_ops(spec: Mapping[str, Any], taints: Sequence[Taint]) -> list[PatchOp]:
    existing = spec.get("tolerations") or []
    missing = [t for t in taints if not any(tolerates(tol, t) for tol in existing if isinstance(tol, dict))]
    # one Exists toleration per key and effect covers every value of that taint
    wanted = dict.fromkeys((t.key, t.effect) for t in missing)
    new = [{"key": key, "operator": "Exists", **({"effect": effect} if effect else {})} for key, effect in wanted]
    if not new:
        return []
    if not spec.get("tolerations"):
        return [_add("/spec/tolerations", new)]
    return [_add("/spec/tolerations/-", t) for t in new]


def _map_ops(metadata: Mapping[str, Any], field: str, wanted: Mapping[str, str]) -> list[PatchOp]:
    """Set keys of metadata.annotations or metadata.labels, leaving the others as they are."""
    current = metadata.get(field)
    if not current:
        return [_add(f"/metadata/{field}", dict(wanted))]
    return [_add(f"/metadata/{field}/{escape(k)}", v) for k, v in wanted.items() if current.get(k) != v]
