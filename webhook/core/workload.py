"""A queued Job decided at the Job: its pod template gets what each of its Pods would get. Pure.

Kueue builds a Job's Workload from the Job's pod template, when the Job is created, and counts
its quota there. GPUs that gpu-class added only when each Pod is created would never be counted,
so for a Job that Kueue queues (label kueue.x-k8s.io/queue-name) the template gets the GPU limit,
the class's node affinity, tolerations, scheduler name and the types annotation. Its Pods come with
the decision made and Kueue's podset label, and provenance.py leaves them as they are because their
node affinity, copied from the template, keeps them to the class (not because of the label).

Other Jobs are placed Pod by Pod, as before: a Pod created an hour after its Job should be placed
on the cluster of that hour.
"""

from __future__ import annotations

from typing import Any, Mapping

from .catalog import Catalog
from .inventory import Snapshot
from .kueue import QUEUE_LABEL
from .patch import PatchOp, build_patch, build_unplaced_patch
from .planner import Decision, NamespacePolicy, plan

TEMPLATE = "/spec/template"


def is_job_create(kind: str, group: str, operation: str, sub_resource: str) -> bool:
    return operation == "CREATE" and kind == "Job" and group == "batch" and not sub_resource


def plan_job(job: Mapping[str, Any], snapshot: Snapshot, catalog: Catalog, namespace: str,
             policy: NamespacePolicy = None) -> tuple[Decision, list[PatchOp]]:
    """The decision for a Job's pod template and the patch that writes it into the Job.

    The template is read as a Pod is (ask.read_pod, through plan) and decided by the same rules."""
    if not isinstance(job, dict):
        return Decision("refused", "gpu-class: malformed Job: the object is not a JSON object"), []
    metadata = job.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict) or QUEUE_LABEL not in labels:
        return Decision("out-of-scope", "a Job Kueue does not queue: its Pods are placed as they are created"), []
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        return Decision("refused", "gpu-class: malformed Job: spec.template must be an object"), []
    decision = plan(template, snapshot, catalog, namespace=namespace, policy=policy)
    if decision.outcome == "admitted-unsatisfiable":
        ops = build_unplaced_patch(template)
    elif decision.placement is not None:
        ops = build_patch(template, decision.placement)
    else:
        return decision, []
    # a template without metadata (or with null) needs one before annotations can be added under it
    missing_metadata: list[PatchOp] = [] if isinstance(template.get("metadata"), dict) else [
        {"op": "add", "path": TEMPLATE + "/metadata", "value": {}}]
    return decision, missing_metadata + [{**op, "path": TEMPLATE + op["path"]} for op in ops]
