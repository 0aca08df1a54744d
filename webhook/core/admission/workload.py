"""A queued workload decided at the workload: each pod template gets what each of its Pods would get. Pure.

Kueue builds a workload's Workload from the pod templates inside it, when the workload is created,
and counts its quota there. GPUs that gpu-class added only when each Pod is created would never be
counted, so for a workload that Kueue queues (label kueue.x-k8s.io/queue-name) every pod template
Kueue reads gets the GPU limit, the class's node affinity, tolerations, scheduler name and the
types annotation. Its Pods come with the decision made, and provenance.py leaves them as they are
because their node affinity, copied from the template, keeps them to the class (not because of a label).

KINDS says, per kind, where Kueue (v0.19.2, pkg/controller/jobs) reads its pod sets. A Job whose
controller is a kind Kueue manages (a JobSet's child Job) is counted at that owner: decided there, not
again. A Job of any other controller, a CronJob's above all, is its own workload to Kueue
(jobframework.IsOwnerManagedByKueue asks only whether the owner's kind is one of its integrations, and
CronJob is none): it is decided at the Job, when the CronJob controller creates it, like any Job.
Other workloads are placed Pod by Pod, as before: a Pod created an hour after its Job should be
placed on the cluster of that hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from ..catalog.model import Catalog
from ..view.snapshot import Snapshot
from .kueue import QUEUE_LABEL
from .patch import PatchOp, build_patch, escape
from .planner import Decision, NamespacePolicy, plan

EACH = "*"  # a path step: every item of a list, or every value of a map


@dataclass(frozen=True)
class WorkloadKind:
    """A kind whose Workload Kueue builds from the pod templates at `templates` (paths from the
    object's root; `optional` ones may be absent)."""

    group: str
    kind: str
    resource: str  # its plural, as the webhook configuration's rules name it
    templates: tuple[tuple[str, ...], ...]
    optional: tuple[tuple[str, ...], ...] = ()


KINDS = {(k.group, k.kind): k for k in (
    WorkloadKind("batch", "Job", "jobs", (("spec", "template"),)),
    WorkloadKind("apps", "StatefulSet", "statefulsets", (("spec", "template"),)),
    WorkloadKind("jobset.x-k8s.io", "JobSet", "jobsets",
                 (("spec", "replicatedJobs", EACH, "template", "spec", "template"),)),
    WorkloadKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets",
                 (("spec", "leaderWorkerTemplate", "workerTemplate"),),
                 optional=(("spec", "leaderWorkerTemplate", "leaderTemplate"),)),
    WorkloadKind("ray.io", "RayCluster", "rayclusters",
                 (("spec", "headGroupSpec", "template"), ("spec", "workerGroupSpecs", EACH, "template"))),
    WorkloadKind("ray.io", "RayJob", "rayjobs",
                 (("spec", "rayClusterSpec", "headGroupSpec", "template"),
                  ("spec", "rayClusterSpec", "workerGroupSpecs", EACH, "template")),
                 optional=(("spec", "submitterPodTemplate"),)),
    *(WorkloadKind("kubeflow.org", kind, f"{kind.lower()}s", (("spec", f"{field}ReplicaSpecs", EACH, "template"),))
      for kind, field in (("PyTorchJob", "pytorch"), ("TFJob", "tf"), ("XGBoostJob", "xgb"), ("PaddleJob", "paddle"),
                          ("JAXJob", "jax"), ("MPIJob", "mpi"))),
)}


# (API group, kind) of the controllers Kueue manages that create Jobs: a Job they control is counted at them.
# KINDS (a JobSet's Jobs, a RayJob's submitter, an MPIJob's launcher), and the integrations whose templates
# gpu-class does not decide (docs/users/kueue.md: they carry the GPU limit in their templates themselves).
COUNTED_AT_OWNER = frozenset({(k.group, k.kind) for k in KINDS.values()} | {
    ("workload.codeflare.dev", "AppWrapper"),
    ("trainer.kubeflow.org", "TrainJob"),
})


def workload_kind(kind: str, group: str, operation: str, sub_resource: str) -> WorkloadKind | None:
    """The kind of a workload CREATE that is decided at the workload, or None."""
    if operation != "CREATE" or sub_resource:
        return None
    return KINDS.get((group, kind))


class MalformedWorkload(ValueError):
    pass


def pod_templates(obj: Mapping[str, Any], kind: WorkloadKind) -> Iterator[tuple[str, dict[str, Any]]]:
    """(JSON pointer, template) of each pod template Kueue reads, in the object's order."""
    for path in kind.templates + kind.optional:
        yield from _walk(obj, path, "", "", required=path not in kind.optional)


def _walk(node: Any, path: tuple[str, ...], pointer: str, dotted: str,
          required: bool) -> Iterator[tuple[str, dict[str, Any]]]:
    if not path:
        if not isinstance(node, dict):
            raise MalformedWorkload(f"{dotted.lstrip('.')} must be an object")
        yield pointer, node
        return
    step, rest = path[0], path[1:]
    if step == EACH:
        items = enumerate(node) if isinstance(node, list) else node.items() if isinstance(node, dict) else None
        if items is None:
            raise MalformedWorkload(f"{dotted.lstrip('.')} must be a list or an object")
        for key, item in items:
            yield from _walk(item, rest, f"{pointer}/{escape(str(key))}", f"{dotted}[{key}]", required)
        return
    if not isinstance(node, dict):
        raise MalformedWorkload(f"{dotted.lstrip('.')} must be an object")
    child = node.get(step)
    if child is None and not required:
        return
    if child is None and rest:
        raise MalformedWorkload(f"{dotted.lstrip('.')}.{step} is missing".lstrip("."))
    yield from _walk(child, rest, f"{pointer}/{escape(step)}", f"{dotted}.{step}", required)


def counting_owner(obj: Mapping[str, Any]) -> str | None:
    """`Kind name` of the object's controlling owner when Kueue counts the object at that owner
    (COUNTED_AT_OWNER), or None: no controller, or one Kueue does not manage (a CronJob)."""
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, dict) and owner.get("controller") is True:
            api_version = str(owner.get("apiVersion") or "")
            group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
            counted = (group, str(owner.get("kind") or "")) in COUNTED_AT_OWNER
            return f"{owner.get('kind')} {owner.get('name')}" if counted else None
    return None


def plan_workload(obj: Mapping[str, Any], kind: WorkloadKind, snapshot: Snapshot, catalog: Catalog,
                  namespace: str, policy: NamespacePolicy = None) -> tuple[Decision, list[PatchOp]]:
    """The decision for a workload's pod templates and the patch that writes it into the workload.

    Each template is read as a Pod is (ask.read_pod, through plan) and decided by the same rules;
    the first one refused refuses the workload, naming the template."""
    undecided = not_decided_at_templates(obj, kind)
    if undecided is not None:
        return undecided, []
    try:
        templates = list(pod_templates(obj, kind))
    except MalformedWorkload as exc:
        return Decision("refused", f"gpu-class: malformed {kind.kind}: {exc}"), []
    ops: list[PatchOp] = []
    decided: Decision | None = None
    for pointer, template in templates:
        found = decide_template(pointer, template, snapshot, catalog, namespace, policy)
        decision = found.decision
        if decision.outcome == "refused":
            where = "" if len(templates) == 1 else f" (pod template {pointer.lstrip('/').replace('/', '.')})"
            return Decision("refused", decision.message + where, class_name=decision.class_name,
                            verdicts=decision.verdicts), []
        ops += found.ops
        if decided is None or decided.placement is None:
            decided = decision
    if decided is None:  # a list of templates that is empty: nothing for Kueue to count
        return Decision("out-of-scope", f"a {kind.kind} without pod templates"), []
    return decided, ops


def not_decided_at_templates(obj: Mapping[str, Any], kind: WorkloadKind) -> Decision | None:
    """The answer for a workload whose templates are not decided (not an object, not queued by Kueue, counted at its
    owner); None for one whose templates are."""
    if not isinstance(obj, dict):
        return Decision("refused", f"gpu-class: malformed {kind.kind}: the object is not a JSON object")
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict) or QUEUE_LABEL not in labels:
        return Decision("out-of-scope", f"a {kind.kind} Kueue does not queue: its Pods are placed as they are "
                                        "created")
    owner = counting_owner(obj)
    if owner is not None:
        return Decision("out-of-scope", f"a {kind.kind} of {owner}: decided at its owner, where Kueue counts it")
    return None


@dataclass(frozen=True)
class TemplateDecision:
    """One pod template's decision, and the operations that write it into the workload (paths from its root)."""

    pointer: str  # the template's JSON pointer in the workload
    decision: Decision
    ops: list[PatchOp]


def decide_template(pointer: str, template: Mapping[str, Any], snapshot: Snapshot, catalog: Catalog, namespace: str,
                    policy: NamespacePolicy = None) -> TemplateDecision:
    """A queued workload's pod template decided as each of its Pods would be, and its operations into the workload."""
    decision = plan(template, snapshot, catalog, namespace=namespace, policy=policy, queued=True)
    if decision.placement is None or decision.outcome == "refused":
        return TemplateDecision(pointer, decision, [])
    return TemplateDecision(pointer, decision, _template_ops(pointer, template, build_patch(template, decision.placement)))


def _template_ops(pointer: str, template: Mapping[str, Any], ops: list[PatchOp]) -> list[PatchOp]:
    # a template without metadata (or with null) needs one before annotations can be added under it
    missing_metadata: list[PatchOp] = [] if isinstance(template.get("metadata"), dict) else [
        {"op": "add", "path": pointer + "/metadata", "value": {}}]
    return missing_metadata + [{**op, "path": pointer + op["path"]} for op in ops]
