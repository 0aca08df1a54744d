"""`gpuclass explain` says which guarantee a placed Pod's order gets (explain.guarantee), and explains a workload
template by template (workload_explain.py)."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from builders import make_catalog, make_node, make_pod
from webhook.core.admission.planner import plan
from webhook.core.admission.workload import KINDS, WorkloadKind
from webhook.core.reports.workload_explain import explain_workload, workload_json, workload_text
from webhook.core.catalog.model import Catalog
from webhook.core.reports.explain import guarantee
from webhook.core.view.inventory import build_snapshot
from webhook.core.admission.review import Request, review_pod

NODES = [make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8), make_node("a100-a", "A100-SXM4-40GB", gpus=4)]


def review(pod: dict[str, Any], catalog: Catalog) -> Any:
    request = Request(api_version="admission.k8s.io/v1", uid="u", operation="CREATE", kind="Pod", group="",
                      sub_resource="", namespace="ml", object=pod, name=pod["metadata"]["name"])
    return review_pod(request, build_snapshot(catalog, NODES), catalog)


@pytest.mark.parametrize("catalog_extra, spec, expected", [
    pytest.param("", {}, "preferred", id="stock-scheduler-gets-preferences"),
    pytest.param("", {"schedulerName": "gpu-class-scheduler"}, "strict", id="pod-names-the-strict-scheduler"),
    pytest.param("schedulerName: gpu-class-scheduler\n", {}, "strict", id="catalog-routes-to-the-strict-scheduler"),
    pytest.param("strictSchedulers: [gpu-class-extender]\n", {"schedulerName": "gpu-class-extender"}, "strict",
                 id="another-strict-scheduler"),
    pytest.param("strictSchedulers: [gpu-class-extender]\n", {"schedulerName": "gpu-class-scheduler"}, "preferred",
                 id="a-name-not-listed-is-no-promise"),
    pytest.param("schedulerName: gpu-class-scheduler\n", {"schedulerName": "volcano"}, "preferred",
                 id="pod-keeps-its-own-scheduler"),
])
def test_guarantee_follows_the_scheduler(catalog_extra: str, spec: dict[str, Any], expected: str) -> None:
    catalog = make_catalog(catalog_extra)
    pod = make_pod({"gpu-class.io/class": "high"}, extra_spec=spec)
    kind, why = guarantee(pod, review(pod, catalog), catalog)
    assert kind == expected
    assert ("profile that scores the class's strategy" in why) if expected == "strict" else ("preference" in why)


def test_a_refused_pod_has_no_guarantee() -> None:
    catalog = make_catalog()
    pod = make_pod({"gpu-class.io/class": "no-such-class"})
    assert guarantee(pod, review(pod, catalog), catalog)[0] == "none"


# --- a workload: every kind the workload webhook decides -------------------------------------------------

QUEUED = {"kueue.x-k8s.io/queue-name": "team-a"}


def gpu_template(class_name: str = "high", gpus: str = "1") -> dict[str, Any]:
    return {"metadata": {"annotations": {"gpu-class.io/class": class_name}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/train:1.0",
                                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def workload(api_version: str, kind: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "w", "namespace": "ml", "labels": dict(QUEUED if labels is None else labels)},
            "spec": spec}


def kubeflow(kind: str, field: str, *replicas: str) -> dict[str, Any]:
    return workload("kubeflow.org/v1", kind, {f"{field}ReplicaSpecs": {r: {"replicas": 1, "template": gpu_template()}
                                                                       for r in replicas}})


RAY_CLUSTER = {"headGroupSpec": {"template": gpu_template()},
               "workerGroupSpecs": [{"groupName": "small", "template": gpu_template()},
                                    {"groupName": "big", "template": gpu_template(gpus="4")}]}

# (id, the object, its pod templates as (path, role), in the object's order): written out here, not read from KINDS
WORKLOADS = [
    ("Job", workload("batch/v1", "Job", {"template": gpu_template()}), [("spec.template", "")]),
    ("StatefulSet", workload("apps/v1", "StatefulSet", {"template": gpu_template()}), [("spec.template", "")]),
    ("JobSet", workload("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [
        {"name": "workers", "template": {"spec": {"template": gpu_template()}}},
        {"name": "driver", "template": {"spec": {"template": gpu_template(gpus="2")}}}]}),
     [("spec.replicatedJobs[0].template.spec.template", "workers"),
      ("spec.replicatedJobs[1].template.spec.template", "driver")]),
    ("LeaderWorkerSet", workload("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {"leaderWorkerTemplate": {
        "leaderTemplate": gpu_template(), "workerTemplate": gpu_template(gpus="2")}}),
     [("spec.leaderWorkerTemplate.workerTemplate", "workerTemplate"),
      ("spec.leaderWorkerTemplate.leaderTemplate", "leaderTemplate")]),
    ("LeaderWorkerSet-without-a-leader-template", workload(
        "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {"leaderWorkerTemplate": {"workerTemplate": gpu_template()}}),
     [("spec.leaderWorkerTemplate.workerTemplate", "workerTemplate")]),
    ("RayCluster", workload("ray.io/v1", "RayCluster", RAY_CLUSTER),
     [("spec.headGroupSpec.template", "headGroupSpec"), ("spec.workerGroupSpecs[0].template", "small"),
      ("spec.workerGroupSpecs[1].template", "big")]),
    ("RayJob", workload("ray.io/v1", "RayJob", {"rayClusterSpec": RAY_CLUSTER, "submitterPodTemplate": gpu_template()}),
     [("spec.rayClusterSpec.headGroupSpec.template", "headGroupSpec"),
      ("spec.rayClusterSpec.workerGroupSpecs[0].template", "small"),
      ("spec.rayClusterSpec.workerGroupSpecs[1].template", "big"),
      ("spec.submitterPodTemplate", "submitterPodTemplate")]),
    ("PyTorchJob", kubeflow("PyTorchJob", "pytorch", "Master", "Worker"),
     [("spec.pytorchReplicaSpecs[Master].template", "Master"), ("spec.pytorchReplicaSpecs[Worker].template", "Worker")]),
    ("TFJob", kubeflow("TFJob", "tf", "Chief", "PS", "Worker"),
     [("spec.tfReplicaSpecs[Chief].template", "Chief"), ("spec.tfReplicaSpecs[PS].template", "PS"),
      ("spec.tfReplicaSpecs[Worker].template", "Worker")]),
    ("XGBoostJob", kubeflow("XGBoostJob", "xgb", "Master", "Worker"),
     [("spec.xgbReplicaSpecs[Master].template", "Master"), ("spec.xgbReplicaSpecs[Worker].template", "Worker")]),
    ("PaddleJob", kubeflow("PaddleJob", "paddle", "Master", "Worker"),
     [("spec.paddleReplicaSpecs[Master].template", "Master"), ("spec.paddleReplicaSpecs[Worker].template", "Worker")]),
    ("JAXJob", kubeflow("JAXJob", "jax", "Worker"), [("spec.jaxReplicaSpecs[Worker].template", "Worker")]),
    ("MPIJob", kubeflow("MPIJob", "mpi", "Launcher", "Worker"),
     [("spec.mpiReplicaSpecs[Launcher].template", "Launcher"), ("spec.mpiReplicaSpecs[Worker].template", "Worker")]),
]


def kind_of(obj: dict[str, Any]) -> WorkloadKind:
    return KINDS[(obj["apiVersion"].rpartition("/")[0], obj["kind"])]


@pytest.mark.parametrize("obj, templates", [pytest.param(o, t, id=i) for i, o, t in WORKLOADS])
def test_explain_a_workload_decides_each_of_its_pod_templates(obj: dict[str, Any],
                                                              templates: list[tuple[str, str]]) -> None:
    catalog = make_catalog()
    snapshot = build_snapshot(catalog, NODES)
    explained = explain_workload(obj, kind_of(obj), snapshot, catalog, "ml")
    assert explained.decided_at == "workload" and explained.answer.decision.outcome == "patched"
    assert [(t.path, t.role) for t in explained.templates] == templates
    for t in explained.templates:
        # the template's own decision, as the planner makes it for each of its Pods
        assert t.review.decision == plan(t.template, snapshot, catalog, namespace="ml", queued=True)
        assert t.review.decision.class_name == "high" and t.review.decision.placement is not None
        assert [v.type_name for v in t.review.decision.verdicts if v.valid] == ["H100", "A100"]
        assert all(op["path"].startswith(t.pointer + "/") for op in t.review.patch)
    # the templates' patches are the workload's, in order: what the webhook answers, nothing more or less
    assert [op for t in explained.templates for op in t.review.patch] == explained.answer.patch
    patched = jsonpatch.apply_patch(obj, explained.answer.patch)
    for t in explained.templates:
        template = jsonpatch.JsonPointer(t.pointer).resolve(patched)
        assert template["metadata"]["annotations"]["gpu-class.io/types"] == "H100,A100"
        assert template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    text = workload_text(explained, catalog)
    assert text.startswith(f"{obj['kind']} ml/w: patched\n")
    for path, role in templates:
        assert f"pod template {path}{f' ({role})' if role else ''}: patched" in text
    as_json = workload_json(explained, catalog)
    assert [(t["path"], t["outcome"], t["class"]) for t in as_json["templates"]] == [
        (p, "patched", "high") for p, _ in templates]


def test_a_workload_kueue_does_not_queue_is_explained_pod_by_pod() -> None:
    """Its Pods are placed as they are created: each template shows what a Pod made from it gets, and that Pod's
    patch; the workload itself gets none."""
    catalog = make_catalog()
    obj = workload("batch/v1", "Job", {"template": gpu_template()}, labels={})
    explained = explain_workload(obj, kind_of(obj), build_snapshot(catalog, NODES), catalog, "ml")
    assert (explained.decided_at, explained.answer.decision.outcome, explained.answer.patch) == (
        "pods", "out-of-scope", [])
    (t,) = explained.templates
    pod = {"apiVersion": "v1", "kind": "Pod", **obj["spec"]["template"]}
    patched = jsonpatch.apply_patch(pod, t.review.patch)
    assert t.review.decision.outcome == "patched"
    assert patched["metadata"]["annotations"]["gpu-class.io/types"] == "H100,A100"


def test_a_refused_template_refuses_the_workload_and_the_others_are_still_shown() -> None:
    catalog = make_catalog()
    obj = workload("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [
        {"name": "ok", "template": {"spec": {"template": gpu_template()}}},
        {"name": "bad", "template": {"spec": {"template": gpu_template("turbo")}}}]})
    explained = explain_workload(obj, kind_of(obj), build_snapshot(catalog, NODES), catalog, "ml")
    assert explained.answer.decision.outcome == "refused" and explained.answer.patch == []
    assert "pod template spec.replicatedJobs.1.template.spec.template" in explained.answer.decision.message
    assert [t.review.decision.outcome for t in explained.templates] == ["patched", "refused"]


def test_a_workload_counted_at_its_owner_has_no_templates_of_its_own() -> None:
    catalog = make_catalog()
    obj = workload("batch/v1", "Job", {"template": gpu_template()})
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
                                           "uid": "u", "controller": True}]
    explained = explain_workload(obj, kind_of(obj), build_snapshot(catalog, NODES), catalog, "ml")
    assert (explained.decided_at, explained.templates, explained.answer.decision.outcome) == (
        "none", (), "out-of-scope")
    assert "decided at its owner" in explained.answer.decision.message


def test_a_workload_the_webhook_already_decided_is_left_as_it_is() -> None:
    """One that exists, explained as the API server holds it: its templates carry gpu-class's decision."""
    catalog = make_catalog()
    snapshot = build_snapshot(catalog, NODES)
    obj = workload("batch/v1", "Job", {"template": gpu_template()})
    decided = jsonpatch.apply_patch(obj, explain_workload(obj, kind_of(obj), snapshot, catalog, "ml").answer.patch)
    explained = explain_workload(decided, kind_of(decided), snapshot, catalog, "ml")
    assert (explained.answer.decision.outcome, explained.answer.patch) == ("out-of-scope", [])
    (t,) = explained.templates
    assert t.review.decision.kept_as_decided and "decided at an earlier call" in t.review.decision.message
