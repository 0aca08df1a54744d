"""Turn a Placement into JSON Patch operations on the Pod as it came in. Pure.

Operations are written for exactly the paths that change (not a diff of the whole Pod), so the cost
does not grow with managedFields or other large parts of the object, and fields the webhook does
not know survive untouched. Every operation is idempotent with respect to the webhook's own output:
run again on a patched Pod, the patch is empty.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, NotRequired, Sequence, TypedDict

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
    """
    result = copy.deepcopy(dict(node_affinity or {}))
    restrictions = [_restriction(k, v) for k, v in placement.required]
    required = result.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or [{}]
    new_terms: list[dict[str, Any]] = []
    for term in terms:
        expressions = term.get("matchExpressions") or []
        if any(r in expressions for r in restrictions):
            new_terms.append(term)
            continue
        for r in restrictions:
            new_terms.append({**term, "matchExpressions": [*expressions, r]})
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
        pod_affinity = merged_pod_affinity(affinity.get("podAffinity"), _group_term(placement.group))
        if pod_affinity != affinity.get("podAffinity"):
            changed["podAffinity"] = pod_affinity
    if not changed:
        return []
    if not affinity:
        return [_add("/spec/affinity", changed)]
    return [_add(f"/spec/affinity/{key}", value) for key, value in changed.items()]


def _group_term(group: GroupPlan) -> dict[str, Any]:
    """The required Pod affinity term that keeps the group on one value of its topology key."""
    return {"labelSelector": {"matchLabels": {GROUP_LABEL: group.name}}, "topologyKey": group.topology_key}


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
