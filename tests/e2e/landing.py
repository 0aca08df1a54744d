"""Where a Pod can land, judged by the tests themselves: its nodeSelector, its required node affinity, its
tolerations and the extended resources it asks, evaluated against Nodes as the API server holds them.

A test that says "this Pod did not escape its class" judges by this and by where the Pod bound, never by a mark
gpu-class wrote (`gpu-class.io/types`) nor by the webhook's own label matching: a bug shared by the decision and
its judge would be invisible. Each node is typed by the tests' own table of products (fleet.py's nodes, plus the
H200 some tests make), and a GPU node of a product the table lacks is typed `unknown:<product>`, so it can never
pass for a type of a class.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from fleet import FLEET

PRODUCT = "nvidia.com/gpu.product"
GPU = "nvidia.com/gpu"
PRODUCT_TYPES = {**{n.labels[PRODUCT]: n.gpu_type for n in FLEET}, "NVIDIA-H200": "H200"}


def node_type(node: Mapping[str, Any]) -> str | None:
    """The GPU type of a Node by the tests' table; None for a node with no GPU product label."""
    product = ((node.get("metadata") or {}).get("labels") or {}).get(PRODUCT)
    if product is None:
        return None
    return PRODUCT_TYPES.get(product, f"unknown:{product}")


def _expression_matches(expression: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    values = list(expression.get("values") or [])
    present = key in values_of
    if operator == "In":
        return present and values_of[key] in values
    if operator == "NotIn":
        return not present or values_of[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or not values_of[key].lstrip("-").isdigit():
            return False
        given, bound = int(values_of[key]), int(values[0])
        return given > bound if operator == "Gt" else given < bound
    raise ValueError(f"unknown node selector operator {operator!r}")


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A nodeSelectorTerm: every expression and field holds; a term with neither matches no node (as in
    Kubernetes)."""
    labels = (node["metadata"].get("labels") or {})
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(_expression_matches(e, labels) for e in expressions)
            and all(_expression_matches(f, {"metadata.name": node["metadata"]["name"]}) for f in fields))


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if not t.get("key"):
            if t.get("operator") == "Exists":
                return True
            continue
        if t["key"] != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _asked(spec: Mapping[str, Any]) -> dict[str, int]:
    """Extended resources (a name with a slash) the Pod's containers ask, summed, from limits or requests."""
    asked: dict[str, int] = {}
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        for name, value in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
            if "/" in name:
                asked[name] = asked.get(name, 0) + int(value)
    return asked


def can_land(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether a Pod of this spec may be bound to the node: nodeSelector, required node affinity, the node's
    NoSchedule and NoExecute taints, cordon, and an allocatable amount of each extended resource asked."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None and not any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or []):
        return False
    tolerations = spec.get("tolerations") or []
    taints = list((node.get("spec") or {}).get("taints") or [])
    if (node.get("spec") or {}).get("unschedulable"):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    if any(t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, t) for t in taints):
        return False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return all(int(allocatable.get(name, "0")) >= amount for name, amount in _asked(spec).items())


def landing_nodes(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """Node name -> its type (node_type) for every node the Pod, as stored, may be bound to."""
    return {n["metadata"]["name"]: node_type(n) for n in nodes if can_land(pod["spec"], n)}


def escapes(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], allowed_types: set[str]) -> dict[str, str]:
    """The GPU nodes the Pod may land on whose type is not one of `allowed_types`: empty when it cannot escape."""
    return {name: str(t) for name, t in landing_nodes(pod, nodes).items() if t is not None and t not in allowed_types}


def read_nodes(core: Any) -> list[dict[str, Any]]:
    """Every Node as the API server holds it now, as JSON (a kubernetes.client.CoreV1Api `core`)."""
    return list(json.loads(core.list_node(_preload_content=False).data)["items"])
