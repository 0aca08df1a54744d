"""`gpuclass explain` of a workload (a Job, a JobSet, a RayCluster...: admission/workload.KINDS): what the webhook
would answer for it, and each of its pod templates' decision in the words of a Pod's explain. Pure.

The decision is the webhook's own: the answer is review_request's, each template's decision_template's (the
function plan_workload decides them with). A workload Kueue queues is decided at its templates (the patch writes
into the workload); one it does not is placed Pod by Pod as they are created, and each template is then shown as
the Pod made from it would be decided (review_pod), with the Pod's own patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ..admission.kueue import QUEUE_LABEL
from ..admission.review import Request, Review, review_pod, review_request
from ..admission.workload import (
    EACH, MalformedWorkload, WorkloadKind, decide_template, not_decided_at_templates, pod_templates,
)
from ..catalog.model import Catalog
from ..view.snapshot import Snapshot
from .explain import decision_json, decision_lines

# where its templates are decided: at the workload (Kueue queues it); Pod by Pod as they are created; not at all
# here (counted at its owner, or malformed)
DecidedAt = Literal["workload", "pods", "none"]


@dataclass(frozen=True)
class TemplateExplanation:
    pointer: str  # the template's JSON pointer in the workload
    path: str  # the same, as a reader writes it: spec.replicatedJobs[0].template.spec.template
    role: str  # which of the workload's parts: a replicated job's or worker group's name, a replica type, ...
    template: Mapping[str, Any]
    review: Review  # its decision, and its patch (into the workload, or, decided Pod by Pod, into the Pod)


@dataclass(frozen=True)
class WorkloadExplanation:
    kind: WorkloadKind
    name: str
    namespace: str
    answer: Review  # what the webhook answers for the workload: its decision and the patch of the whole
    decided_at: DecidedAt
    templates: tuple[TemplateExplanation, ...]


def explain_workload(obj: Mapping[str, Any], kind: WorkloadKind, snapshot: Snapshot, catalog: Catalog,
                     namespace: str) -> WorkloadExplanation:
    request = Request(api_version="admission.k8s.io/v1", uid="explain", operation="CREATE", kind=kind.kind,
                      group=kind.group, sub_resource="", namespace=namespace, object=dict(obj), name=_name(obj))
    answer = review_request(request, snapshot, catalog)
    queued = not_decided_at_templates(obj, kind) is None
    labels = (obj.get("metadata") or {}).get("labels") if isinstance(obj.get("metadata"), dict) else None
    if not queued and isinstance(labels, dict) and QUEUE_LABEL in labels:  # counted at its owner
        return WorkloadExplanation(kind, _name(obj), namespace, answer, "none", ())
    try:
        found = list(pod_templates(obj, kind))
    except MalformedWorkload:
        return WorkloadExplanation(kind, _name(obj), namespace, answer, "none", ())
    templates = []
    for pointer, template in found:
        if queued:
            decided = decide_template(pointer, template, snapshot, catalog, namespace)
            review = Review(decided.decision, decided.ops)
        else:
            review = review_pod(_as_pod(request, template), snapshot, catalog)
        templates.append(TemplateExplanation(pointer, dotted_path(kind, pointer), template_role(obj, kind, pointer),
                                             template, review))
    return WorkloadExplanation(kind, _name(obj), namespace, answer, "workload" if queued else "pods", tuple(templates))


def _as_pod(request: Request, template: Mapping[str, Any]) -> Request:
    """A Pod's CREATE of a Pod made from the template, as its controller makes it."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": dict(template.get("metadata") or {}),
           "spec": template.get("spec")}
    return Request(api_version=request.api_version, uid=request.uid, operation="CREATE", kind="Pod", group="",
                   sub_resource="", namespace=request.namespace, object=pod, name="")


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "<unnamed>"
    return str(meta.get("name") or meta.get("generateName") or "<unnamed>")


def _steps(kind: WorkloadKind, pointer: str) -> tuple[tuple[str, ...], list[str]]:
    """(the KINDS path the pointer follows, the pointer's unescaped steps)."""
    steps = [s.replace("~1", "/").replace("~0", "~") for s in pointer.split("/")[1:]]
    path = next((p for p in kind.templates + kind.optional
                 if len(p) == len(steps) and all(a in (EACH, b) for a, b in zip(p, steps))), ())
    return path, steps


def dotted_path(kind: WorkloadKind, pointer: str) -> str:
    """spec.replicatedJobs[0].template.spec.template: the pointer as kubectl explain and error messages write it."""
    path, steps = _steps(kind, pointer)
    text = ""
    for pattern, step in zip(path or steps, steps):
        text += f"[{step}]" if pattern == EACH else f".{step}"
    return text.lstrip(".")


def template_role(obj: Mapping[str, Any], kind: WorkloadKind, pointer: str) -> str:
    """The part of the workload a template is: the name of a list's item (a replicated job's, a worker group's),
    a map's key (a Kubeflow replica type), else the field that holds it (leaderTemplate, headGroupSpec)."""
    path, steps = _steps(kind, pointer)
    node: Any = obj
    role = ""
    for pattern, step in zip(path, steps):
        node = node[int(step)] if isinstance(node, list) else node.get(step) if isinstance(node, dict) else None
        if pattern == EACH:
            named = node.get("name") or node.get("groupName") if isinstance(node, dict) else None
            role = str(named) if isinstance(named, str) and named else step
        elif step not in ("spec", "template"):
            role = step
    return role


_DECIDED_AT = {
    "workload": "Kueue queues it: each pod template is decided at the workload, as each of its Pods would be, and "
                "the patch writes into the workload",
    "pods": "Kueue does not queue it: its Pods are placed as they are created; each pod template shows what a Pod "
            "made from it would get now, and that Pod's patch",
    "none": "its pod templates are not decided here",
}


def workload_text(explained: WorkloadExplanation, catalog: Catalog) -> str:
    """The workload's answer, then each template in the words of a Pod's explain."""
    answer = explained.answer.decision
    lines = [f"{explained.kind.kind} {explained.namespace}/{explained.name}: {answer.outcome}",
             _DECIDED_AT[explained.decided_at]]
    if answer.message:
        lines.append(answer.message)
    for t in explained.templates:
        lines += ["", f"pod template {t.path}{f' ({t.role})' if t.role else ''}: {t.review.decision.outcome}"]
        lines += decision_lines(t.review, t.template, catalog,
                                patch_of=f"into the {explained.kind.kind}" if explained.decided_at == "workload"
                                else "into each Pod made from it")
    lines += ["", f"the {explained.kind.kind}'s patch: {len(explained.answer.patch)} operation(s)"
              + ("" if explained.answer.patch else " (none)")]
    return "\n".join(lines)


def workload_json(explained: WorkloadExplanation, catalog: Catalog) -> dict[str, Any]:
    answer = explained.answer
    return {
        "kind": explained.kind.kind,
        "apiGroup": explained.kind.group,
        "name": explained.name,
        "namespace": explained.namespace,
        "outcome": answer.decision.outcome,
        "allowed": answer.decision.allowed,
        "message": answer.decision.message,
        "decidedAt": explained.decided_at,
        "templates": [{"path": t.path, "pointer": t.pointer, "role": t.role,
                       **decision_json(t.review, t.template, catalog)} for t in explained.templates],
        "patch": answer.patch,
    }
