"""Human and machine renderings of a Review for `gpuclass explain`."""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..catalog.model import Catalog
from ..catalog.profiles import STRICT_SCHEDULER
from ..admission.groups import GroupPlan
from ..admission.review import Review

def guarantee(pod: Mapping[str, Any], result: Review, catalog: Catalog) -> tuple[str, str]:
    """Which promise the placement gets: ("strict" | "preferred" | "none", why)."""
    p = result.decision.placement
    if p is None:
        return "none", "no placement"
    spec = pod.get("spec") or {}
    return scheduler_guarantee(p.scheduler_name or spec.get("schedulerName") or "default-scheduler", catalog)


def scheduler_guarantee(scheduler: str, catalog: Catalog) -> tuple[str, str]:
    """("strict" | "preferred", why) for a placed Pod scheduled by `scheduler`."""
    if catalog.strict_scheduler_of(scheduler) is not None:
        return "strict", (f"scheduled by {scheduler}, a profile that scores the class's strategy above every "
                          "other score over all nodes (docs/operators/strict-scheduler.md): the best allowed node with "
                          "room at scheduling time")
    return "preferred", (f"scheduled by {scheduler}: the required affinity holds; the order is a preference that "
                         "the scheduler weighs against its own scores and only over the nodes it samples (for a "
                         f"strict order, write schedulerName: {STRICT_SCHEDULER} and run deploy/scheduler)")


PLACED_BY_LABELS = "placed by its labels"


def placed_by_labels(catalog: Catalog, type_name: str) -> bool:
    """Whether a type was made from a node's labels (a product no type claims), not read from the catalog."""
    gpu_type = catalog.types.get(type_name)
    return gpu_type is not None and gpu_type.facts is not None and gpu_type.facts.from_labels


def _shown(catalog: Catalog, type_name: str) -> str:
    return f"{type_name} ({PLACED_BY_LABELS})" if placed_by_labels(catalog, type_name) else type_name


def explain_json(result: Review, namespace: str, pod: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    return {"pod": _pod_name(pod), "namespace": namespace, **decision_json(result, pod, catalog)}


def decision_json(result: Review, pod: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    """One decision, for a Pod or a workload's pod template (`pod`), and its patch, as `explain -o json` shows it."""
    d = result.decision
    p = d.placement
    return {
        "outcome": d.outcome,
        "allowed": d.allowed,
        "message": d.message,
        "class": d.class_name,
        "resource": d.resource,
        "resources": [{"resource": r, "chosen": r == d.resource, "reason": why} for r, why in d.resource_notes],
        "types": [
            {"type": v.type_name, "valid": v.valid, "reason": v.reason, "maxAllocatable": v.max_allocatable,
             "freeGpus": v.free_gpus, "resource": v.resource, "maxMemoryMiB": v.max_memory_mib,
             "placedByLabels": placed_by_labels(catalog, v.type_name)}
            for v in d.verdicts
        ],
        "placement": None if p is None else {
            "container": p.container_name,
            "count": p.count,
            "order": list(p.types),
            "preferences": [{"type": x.type_name, "weight": x.weight, "key": x.label_key, "products": list(x.products)}
                            for x in p.preferences],
            "tolerations": [{"key": t.key, "effect": t.effect or None} for t in p.tolerations],
        },
        "guarantee": dict(zip(("kind", "reason"), guarantee(pod, result, catalog))),
        "group": None if d.group is None else group_json(d.group),
        "warnings": list(d.warnings),
        "patch": result.patch,
    }


def group_json(g: GroupPlan) -> dict[str, Any]:
    return {
        "name": g.name,
        "outcome": g.outcome,
        "size": g.size,
        "sizeFrom": g.size_from,
        "topologyKey": g.topology_key or None,
        "runsOn": None if g.runs_on is None else g.runs_on.as_json(),
        "topology": None if g.topology is None else {
            "key": g.topology.key, "mode": "required" if g.topology.required else "preferred",
            "domains": None if g.domains is None else list(g.domains)},
        "rooms": [{"type": r.type_name, "labelKey": r.label_key, "podsNow": r.now, "podsAtMost": r.most}
                  for r in g.rooms],
    }


def group_lines(g: GroupPlan) -> list[str]:
    """What was decided for the Pod's group, in words."""
    size = (f"{g.size} Pods ({g.size_from})" if g.size is not None else
            "size not given: its Pods may wait for room on the type its first Pod gets")
    lines = [f"group {g.name}: {size}"]
    if g.runs_on is not None:
        lines.append(f"group {g.name} runs on {g.runs_on.describe()}, {g.runs_on.pods} Pod(s) bound: "
                     "this Pod is kept to it")
    elif g.outcome in ("started", "no-room"):
        lines.append(f"group {g.name}: no Pod of it bound yet; its first Pod goes where the class sends it, the "
                     f"others to the same {g.topology_key} value (required Pod affinity)")
    else:
        lines.append(f"group {g.name}: {g.outcome}")
    lines.extend(_topology_lines(g))
    in_domain = "" if g.topology is None or not g.topology.required else f" in its best {g.topology.key} domain"
    for r in g.rooms:
        most = "no limit (scalable pool)" if r.most is None else f"{r.most} with its nodes empty"
        lines.append(f"  {r.type_name}: room for {r.now} of its Pods{in_domain} now, {most}")
    return lines


def _topology_lines(g: GroupPlan) -> list[str]:
    """Where the group's topology keeps it, in words."""
    t = g.topology
    if g.kueue_topology and g.topology_key:
        return [f"group {g.name}: its topology domain is Kueue's to choose (Topology Aware Scheduling); gpu-class "
                "keeps it on one product only"]
    if t is None or not g.topology_key:
        return []
    if not t.required:
        return [f"group {g.name}: kept in as few {t.key} domains as the scheduler can (preferred Pod affinity)"]
    where = ("any one of them" if g.domains is None else
             f"one of {', '.join(g.domains)}" if len(g.domains) > 1 else g.domains[0])
    return [f"group {g.name}: kept within one {t.key} domain ({where}): it starts only where one holds all of it"
            if g.runs_on is None else f"group {g.name}: kept within the {t.key} domain it runs in ({where})"]


def _pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "<unnamed>")


def explain_text(result: Review, namespace: str, pod: Mapping[str, Any], catalog: Catalog) -> str:
    lines = [f"Pod {namespace}/{_pod_name(pod)}: {result.decision.outcome}"]
    return "\n".join(lines + decision_lines(result, pod, catalog))


def decision_lines(result: Review, pod: Mapping[str, Any], catalog: Catalog, patch_of: str = "") -> list[str]:
    """One decision, for a Pod or a workload's pod template (`pod`), in words: its class, each type and why, the
    placement and the patch (`patch_of`: what the patch's paths start from, when not the Pod)."""
    d = result.decision
    p = d.placement
    lines: list[str] = []
    if d.class_name and d.class_name in catalog.classes:
        gpu_class = catalog.classes[d.class_name]
        lines.append(f"class {gpu_class.name} (strategy {gpu_class.strategy}): "
                     f"{', '.join(_shown(catalog, t) for t in gpu_class.types)}")
    if d.message:
        lines.append(d.message)
    if d.group is not None:
        lines.extend(group_lines(d.group))
    for resource, why in d.resource_notes:
        lines.append(f"resource {resource}: {'chosen' if resource == d.resource else 'not chosen'} ({why})")
    weights = {x.type_name: x.weight for x in p.preferences} if p else {}
    if d.verdicts:
        lines.append("")
        width = max(14, *(len(v.type_name) + 2 for v in d.verdicts))
        lines.append(f"{'type':<{width}}{'valid':<7}{'weight':<8}reason")
        for v in d.verdicts:
            weight = str(weights.get(v.type_name, "-"))
            facts = catalog.types[v.type_name].facts if v.type_name in catalog.types else None
            why = (f"{v.reason}; {PLACED_BY_LABELS} ({facts.score_basis})" if facts is not None and facts.from_labels
                   else v.reason)
            lines.append(f"{v.type_name:<{width}}{'yes' if v.valid else 'no':<7}{weight:<8}{why}")
    if p is not None:
        lines.append("")
        lines.append(f"container {p.container_name}: {p.count} {p.resource}{' (limit added)' if p.set_limit else ''}")
        lines.append("required: " + "; ".join(f"{k} in {', '.join(v)}" for k, v in p.required))
        tolerations = ", ".join(f"{t.key}:{t.effect or 'any effect'}" for t in p.tolerations)
        lines.append(f"tolerations: {tolerations or '(none needed)'}")
        kind, why = guarantee(pod, result, catalog)
        lines.append(f"order: {kind} ({why})")
    for w in d.warnings:
        lines.append(f"warning: {w}")
    lines.append("")
    lines.append(f"patch{f' ({patch_of})' if patch_of else ''}:")
    lines.append(json.dumps(result.patch, indent=2) if result.patch else "(none)")
    return lines
