"""A queued workload of every kind Kueue counts at the workload is decided in its pod templates
(webhook/core/admission/workload.py), for as long as it waits; the webhook configuration sends exactly those kinds.
The kinds and their templates are written here by hand from each kind's API: KINDS is what is tested, never the
answer."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonpatch
import pytest
import yaml

from builders import CATALOG_NODES, make_catalog, make_namespace, make_node, make_review
from webhook.core.catalog.model import Catalog
from webhook.core.view.inventory import build_snapshot
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.kueue import QUEUE_LABEL
from webhook.core.admission.review import Review, parse_review, review_request
from webhook.core.admission.workload import KINDS

REPO = Path(__file__).resolve().parents[1]
CATALOG = make_catalog()
SNAPSHOT = build_snapshot(CATALOG, [*CATALOG_NODES, make_namespace("ml")])
PRODUCT = "nvidia.com/gpu.product"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"
SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"


def template(count: int = 2, *, limit: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.example/train:1.0"}
    if limit:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(count)}}
    return {"metadata": {"annotations": {"gpu-class.io/class": "high", "gpu-class.io/count": str(count)}},
            "spec": {"containers": [container], "restartPolicy": "Never"}}


def workload(api_version: str, kind: str, spec: dict[str, Any], *, queued: bool = True,
             owner: str | None = None, owner_api: str = "jobset.x-k8s.io/v1alpha2") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "train", "namespace": "ml", "labels": {QUEUE_LABEL: "team-a"} if queued else {}}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": owner_api, "kind": owner, "name": "train",
                                        "uid": "u-1", "controller": True}]
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def review(obj: Mapping[str, Any], snapshot: Snapshot = SNAPSHOT, catalog: Catalog = CATALOG) -> Review:
    group, _, version = obj["apiVersion"].rpartition("/")
    body = make_review(obj, kind=obj["kind"])
    body["request"]["kind"] = {"group": group, "version": version, "kind": obj["kind"]}
    return review_request(parse_review(json.dumps(body).encode()), snapshot, catalog)


def patched(obj: Mapping[str, Any], answer: Review) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(dict(obj)), list(answer.patch))
    return result


def required_products(spec: Mapping[str, Any]) -> set[str]:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return {v for t in terms for e in t["matchExpressions"] if e["key"] == PRODUCT for v in e["values"]}


# --- one object per kind, as its users write it ---------------------------------------------------------

def sample(kind: str, tpl: dict[str, Any]) -> dict[str, Any]:
    """A `kind` whose every pod template Kueue reads is `tpl`."""
    t = lambda: copy.deepcopy(tpl)  # noqa: E731
    return {
        "Job": lambda: workload("batch/v1", "Job", {"suspend": True, "template": t()}),
        "StatefulSet": lambda: workload("apps/v1", "StatefulSet", {
            "replicas": 2, "serviceName": "train", "selector": {"matchLabels": {"app": "t"}}, "template": t()}),
        "JobSet": lambda: workload("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [
            {"name": n, "replicas": 1, "template": {"spec": {"parallelism": 2, "template": t()}}}
            for n in ("trainer", "evaluator")]}),
        "LeaderWorkerSet": lambda: workload("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {
            "replicas": 2, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": t(), "workerTemplate": t()}}),
        "RayCluster": lambda: workload("ray.io/v1", "RayCluster", {
            "headGroupSpec": {"template": t()}, "workerGroupSpecs": [{"groupName": "gpu", "template": t()}]}),
        "RayJob": lambda: workload("ray.io/v1", "RayJob", {"rayClusterSpec": {
            "headGroupSpec": {"template": t()}, "workerGroupSpecs": [{"groupName": "gpu", "template": t()}]}}),
        **{k: (lambda k=k, f=f: workload("kubeflow.org/v1", k, {f"{f}ReplicaSpecs": {
            "Master": {"replicas": 1, "template": t()}, "Worker": {"replicas": 2, "template": t()}}}))
           for k, f in (("PyTorchJob", "pytorch"), ("TFJob", "tf"), ("XGBoostJob", "xgb"),
                            ("PaddleJob", "paddle"), ("JAXJob", "jax"), ("MPIJob", "mpi"))},
    }[kind]()


# --- the pod templates of each kind, written by hand from each kind's API (not read from KINDS) ---------------

# (API group, kind) -> JSON pointers of the pod templates Kueue reads in sample(kind) (RayJob with a submitter)
TEMPLATES_BY_HAND: dict[tuple[str, str], tuple[str, ...]] = {
    ("batch", "Job"): ("/spec/template",),
    ("apps", "StatefulSet"): ("/spec/template",),
    ("jobset.x-k8s.io", "JobSet"): ("/spec/replicatedJobs/0/template/spec/template",
                                    "/spec/replicatedJobs/1/template/spec/template"),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): ("/spec/leaderWorkerTemplate/leaderTemplate",
                                                      "/spec/leaderWorkerTemplate/workerTemplate"),
    ("ray.io", "RayCluster"): ("/spec/headGroupSpec/template", "/spec/workerGroupSpecs/0/template"),
    ("ray.io", "RayJob"): ("/spec/rayClusterSpec/headGroupSpec/template",
                           "/spec/rayClusterSpec/workerGroupSpecs/0/template", "/spec/submitterPodTemplate"),
    ("kubeflow.org", "PyTorchJob"): ("/spec/pytorchReplicaSpecs/Master/template",
                                     "/spec/pytorchReplicaSpecs/Worker/template"),
    ("kubeflow.org", "TFJob"): ("/spec/tfReplicaSpecs/Master/template", "/spec/tfReplicaSpecs/Worker/template"),
    ("kubeflow.org", "XGBoostJob"): ("/spec/xgbReplicaSpecs/Master/template", "/spec/xgbReplicaSpecs/Worker/template"),
    ("kubeflow.org", "PaddleJob"): ("/spec/paddleReplicaSpecs/Master/template",
                                    "/spec/paddleReplicaSpecs/Worker/template"),
    ("kubeflow.org", "JAXJob"): ("/spec/jaxReplicaSpecs/Master/template", "/spec/jaxReplicaSpecs/Worker/template"),
    ("kubeflow.org", "MPIJob"): ("/spec/mpiReplicaSpecs/Master/template", "/spec/mpiReplicaSpecs/Worker/template"),
}


def at_pointer(obj: Any, pointer: str) -> Any:
    for token in pointer.lstrip("/").split("/"):
        obj = obj[int(token)] if isinstance(obj, list) else obj[token]
    return obj


@pytest.mark.parametrize("limit", [False, True], ids=["class-only", "limit-written-too"])
@pytest.mark.parametrize("group_kind, pointers", [pytest.param(k, p, id=k[1]) for k, p in TEMPLATES_BY_HAND.items()])
def test_each_pod_template_of_each_kind_gets_the_gpus_and_the_class(group_kind: tuple[str, str],
                                                                    pointers: tuple[str, ...], limit: bool) -> None:
    """A template left undecided (a LeaderWorkerSet's leader, a RayJob's submitter) runs without the GPUs Kueue
    counted for it, or with GPUs Kueue never counted."""
    group, kind = group_kind
    obj = sample(kind, template(2, limit=limit))
    assert obj["apiVersion"].rpartition("/")[0] == group
    if kind == "RayJob":
        obj["spec"]["submitterPodTemplate"] = template(2, limit=limit)
    answer = review(obj)
    assert answer.decision.outcome == "patched", answer.decision.message
    decided = patched(obj, answer)
    for pointer in pointers:
        t = at_pointer(decided, pointer)
        assert t["spec"]["containers"][0].get("resources", {}).get("limits") == {"nvidia.com/gpu": "2"}, pointer
        assert t["metadata"]["annotations"].get("gpu-class.io/types") == "H100,A100", pointer
        assert required_products(t["spec"]) == {H100, A100}, pointer
    stray = [op["path"] for op in answer.patch if not any(op["path"].startswith(p + "/") for p in pointers)]
    assert stray == [], "the patch writes outside the pod templates"
    # what reaches the API server again (reinvocation after Kueue's webhook) is left as it is
    assert review(decided).patch == []


def test_the_kinds_decided_at_the_workload_are_those_written_by_hand() -> None:
    assert set(KINDS) == set(TEMPLATES_BY_HAND)


@pytest.mark.parametrize("obj, outcome, message", [
    pytest.param(workload("batch/v1", "Job", {"template": template()}, owner="JobSet"), "out-of-scope",
                 "a Job of JobSet train: decided at its owner", id="a-jobsets-child-job"),
    pytest.param(workload("apps/v1", "StatefulSet", {"template": template()}, queued=False), "out-of-scope",
                 "a StatefulSet Kueue does not queue", id="not-queued"),
    pytest.param(workload("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": {"a": 1}}), "refused",
                 "malformed JobSet: spec.replicatedJobs[a] must be an object", id="jobset-replicated-jobs-not-a-list"),
    pytest.param(workload("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {"leaderWorkerTemplate": {}}), "refused",
                 "malformed LeaderWorkerSet: spec.leaderWorkerTemplate.workerTemplate must be an object",
                 id="lws-without-worker-template"),
    pytest.param(workload("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [
        {"name": "a", "template": {"spec": {"template": template(2)}}},
        {"name": "b", "template": {"spec": {"template": template(9)}}}]}), "refused",
                 "(pod template spec.replicatedJobs.1.template.spec.template)", id="one-template-cannot-be-placed"),
])
def test_what_is_not_a_queued_workload_or_cannot_be_read(obj: dict[str, Any], outcome: str, message: str) -> None:
    answer = review(obj)
    assert answer.decision.outcome == outcome
    assert message in answer.decision.message, answer.decision.message
    assert answer.patch == []


# --- decisions that age well -----------------------------------------------------------------------------

CORDONED_H100 = build_snapshot(CATALOG, [make_node("h100-a", H100, gpus=8, unschedulable=True),
                                         *CATALOG_NODES[1:], make_namespace("ml")])
NOT_READY = build_snapshot(CATALOG, [make_node("h100-a", H100, gpus=8, ready=False),
                                     make_node("a100-a", A100, gpus=4, unschedulable=True), make_namespace("ml")])
ADMIT = dataclasses.replace(CATALOG, on_unsatisfiable="admit")


@dataclass(frozen=True)
class AgingCase:
    id: str
    snapshot: Snapshot
    outcome: str
    types: str = ""
    products: frozenset[str] = frozenset()
    catalog: Catalog = CATALOG
    count: int = 2
    message: str = ""


AGING_CASES = [
    AgingCase("best-type-cordoned", CORDONED_H100, "patched", "H100,A100", frozenset({H100, A100})),
    AgingCase("every-type-cordoned-or-not-ready", NOT_READY, "patched", "H100,A100", frozenset({H100, A100})),
    AgingCase("never-unplaced-with-admit", SNAPSHOT, "refused", catalog=ADMIT, count=9,
              message="A workload Kueue queues is refused rather than admitted unplaced"),
]


@pytest.mark.parametrize("case", AGING_CASES, ids=lambda c: c.id)
def test_a_queued_template_gets_the_class_for_as_long_as_it_waits(case: AgingCase) -> None:
    job = sample("Job", template(case.count))
    answer = review(job, case.snapshot, case.catalog)
    assert answer.decision.outcome == case.outcome, answer.decision.message
    assert case.message in answer.decision.message
    if case.outcome != "patched":
        assert answer.patch == []
        return
    tpl = patched(job, answer)["spec"]["template"]
    assert tpl["metadata"]["annotations"]["gpu-class.io/types"] == case.types
    assert required_products(tpl["spec"]) == case.products
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in tpl["spec"]["tolerations"]


H100_GONE = build_snapshot(CATALOG, [*CATALOG_NODES[1:], make_namespace("ml")])


@pytest.mark.parametrize("kind", ["Job", "StatefulSet", "JobSet", "LeaderWorkerSet"])
def test_a_second_call_never_narrows_a_decided_template(kind: str) -> None:
    """Kueue's webhook changes the workload, so the API server calls gpu-class again; the cluster changed in
    between (the H100 node went): the templates stay as first decided, within the class Kueue counted."""
    obj = sample(kind, template(2))
    decided = patched(obj, review(obj))
    again = review(decided, H100_GONE)
    assert again.patch == [], again.decision.message
    assert "decided at an earlier call" in again.decision.message
    # a template that only claims to be decided (the types annotation, no affinity of the class) is decided
    forged = sample(kind, {**template(2, limit=True), "metadata": {"annotations": {
        "gpu-class.io/class": "high", "gpu-class.io/types": "H100"}}})
    assert review(forged, H100_GONE).decision.outcome == "patched"


def test_a_pod_of_a_decided_statefulset_is_left_as_decided() -> None:
    """At creation it has no Kueue label yet (Kueue adds it when it ungates it), only the parent's mark."""
    sts = sample("StatefulSet", template(2))
    tpl = patched(sts, review(sts))["spec"]["template"]
    tpl["metadata"]["annotations"][SUSPENDING_PARENT] = "statefulset"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0", "namespace": "ml", **tpl["metadata"]},
           "spec": tpl["spec"]}
    answer = review_request(parse_review(json.dumps(make_review(pod)).encode()), H100_GONE, CATALOG)
    assert answer.decision.outcome == "out-of-scope" and answer.patch == [], answer.decision.message


def test_a_pod_is_still_placed_on_what_takes_it_now() -> None:
    """The same Pod, not queued: its cordoned best type is left out (it would wait for it for nothing)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", **template(2)["metadata"]},
           "spec": template(2)["spec"]}
    answer = review_request(parse_review(json.dumps(make_review(pod)).encode()), CORDONED_H100, CATALOG)
    assert answer.decision.placement is not None and answer.decision.placement.types == ("A100",)


def test_a_pod_whose_parent_kueue_counted_is_refused_gpus_only_gpu_class_would_give() -> None:
    """A StatefulSet's or LeaderWorkerSet's Pod made from a template gpu-class did not decide (created before
    the opt-in, or while no replica answered): Kueue counted no GPUs for it."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-0", "namespace": "ml", "annotations": {"gpu-class.io/class": "high", SUSPENDING_PARENT: "statefulset"}},
        "spec": template(2)["spec"]}
    answer = review_request(parse_review(json.dumps(make_review(pod)).encode()), SNAPSHOT, CATALOG)
    assert answer.decision.outcome == "refused"
    assert "write the limit (nvidia.com/gpu: 1) in the workload's pod template" in answer.decision.message


@pytest.mark.parametrize("owner, owner_api, queued, outcome, message", [
    # the CronJob controller creates each Job from its jobTemplate; Kueue counts the Job (CronJob is no
    # integration of Kueue's), so gpu-class decides it there, when the Job is created
    pytest.param("CronJob", "batch/v1", True, "patched", "", id="a-queued-cronjobs-job-is-decided-at-the-job"),
    pytest.param("CronJob", "batch/v1", False, "out-of-scope", "a Job Kueue does not queue",
                 id="a-cronjobs-job-kueue-does-not-queue"),
    pytest.param("Workflow", "argoproj.io/v1alpha1", True, "patched", "", id="a-job-of-a-controller-kueue-does-not-manage"),
    pytest.param("JobSet", "jobset.x-k8s.io/v1alpha2", True, "out-of-scope", "a Job of JobSet train: decided at its owner",
                 id="a-jobsets-job-is-counted-at-the-jobset"),
    pytest.param("RayJob", "ray.io/v1", True, "out-of-scope", "decided at its owner", id="a-rayjobs-submitter"),
    pytest.param("AppWrapper", "workload.codeflare.dev/v1beta2", True, "out-of-scope", "decided at its owner",
                 id="an-appwrappers-job-is-counted-at-the-appwrapper"),
])
def test_a_job_is_decided_at_the_job_unless_kueue_counts_it_at_its_owner(
        owner: str, owner_api: str, queued: bool, outcome: str, message: str) -> None:
    job = workload("batch/v1", "Job", {"template": template()}, queued=queued, owner=owner, owner_api=owner_api)
    answer = review(job)
    assert answer.decision.outcome == outcome and message in answer.decision.message, answer.decision.message
    if outcome == "patched":
        t = patched(job, answer)["spec"]["template"]
        assert t["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
        assert required_products(t["spec"]) == {H100, A100}


# --- the registration ----------------------------------------------------------------------------------


def test_the_workload_webhooks_are_sent_exactly_the_kinds_decided_at_the_workload() -> None:
    configuration = yaml.safe_load((REPO / "deploy" / "base" / "workload-webhook.yaml").read_text())
    sent = {(group, resource) for hook in configuration["webhooks"] for rule in hook["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}
    # every kind's plural is its name in lower case with an s
    assert sent == {(group, kind.lower() + "s") for group, kind in TEMPLATES_BY_HAND}
