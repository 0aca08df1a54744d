"""Beside Kueue: a queued Job decided at the Job, the Pods Kueue starts left as decided or refused, and
the Kueue objects whose flavor order is the class's order (webhook/core/workload.py, kueue.py)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jsonpatch
import kubernetes_validate
import pytest
import yaml

import test_deploy as deploy
from builders import CATALOG_NODES, K8S_VERSION, assert_valid_pod, make_catalog, make_namespace, make_node, make_review
from webhook.core.catalog import load_default_catalog
from webhook.core.inventory import build_snapshot
from webhook.core.kueue import KUEUE_MAX_FLAVORS, PODSET_LABEL, QUEUE_LABEL, class_order, flavor_name, kueue_objects
from webhook.core.review import Review, parse_review, review_request

CATALOG = make_catalog()
SNAPSHOT = build_snapshot(CATALOG, [*CATALOG_NODES, make_namespace("ml"), make_namespace("plain", inject=False)])
PRODUCT = "nvidia.com/gpu.product"


def make_job(annotations: Mapping[str, str] | None = None, *, queue: str | None = "team-a",
             gpu_limit: str | None = None, template_metadata: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.example/train:1.0"}
    if gpu_limit is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpu_limit}}
    template: dict[str, Any] = {"spec": {"containers": [container], "restartPolicy": "Never"}}
    if template_metadata:
        template["metadata"] = {"annotations": dict(annotations or {})}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "labels": {QUEUE_LABEL: queue} if queue else {}},
        "spec": {"suspend": True, "template": template},
    }


def job_review(job: Mapping[str, Any], namespace: str = "ml") -> Review:
    body = make_review(job, kind="Job", namespace=namespace)
    body["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    return review_request(parse_review(json.dumps(body).encode()), SNAPSHOT, CATALOG)


def pod_review(pod: Mapping[str, Any]) -> Review:
    return review_request(parse_review(json.dumps(make_review(pod)).encode()), SNAPSHOT, CATALOG)


def patched(obj: Mapping[str, Any], review: Review) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(dict(obj)), list(review.patch))
    return result


def pod_of(job: Mapping[str, Any], *, labels: Mapping[str, str] | None = None,
           node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Pod the Job controller creates from the Job's template once Kueue started it."""
    template = copy.deepcopy(job["spec"]["template"])
    metadata = template.get("metadata") or {}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**metadata, "name": "train-x7k2p", "namespace": "ml",
                        "labels": {**(metadata.get("labels") or {}), **(labels or {})}},
           "spec": template["spec"]}
    if node_selector:
        pod["spec"]["nodeSelector"] = dict(node_selector)
    return pod


def required_products(spec: Mapping[str, Any]) -> set[str]:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return {v for t in terms for e in t["matchExpressions"] if e["key"] == PRODUCT for v in e["values"]}


# --- a queued Job is decided at the Job ------------------------------------------------------------


@dataclass(frozen=True)
class JobCase:
    id: str
    job: dict[str, Any]
    outcome: str
    limit: str | None = None  # the template's GPU limit after the patch
    types: str | None = None  # the template's gpu-class.io/types after the patch
    message: str = ""
    namespace: str = "ml"


JOB_CASES = [
    JobCase("class-and-count", make_job({"gpu-class.io/class": "high", "gpu-class.io/count": "2"}), "patched",
            limit="2", types="H100,A100"),
    JobCase("class-only", make_job({"gpu-class.io/class": "high"}), "patched", limit="1", types="H100,A100"),
    JobCase("limit-written-by-the-user", make_job({"gpu-class.io/class": "high"}, gpu_limit="4"), "patched",
            limit="4", types="H100,A100"),
    JobCase("no-template-metadata-default-class", make_job(gpu_limit="1", template_metadata=False), "out-of-scope",
            limit="1"),
    JobCase("not-queued-by-kueue", make_job({"gpu-class.io/class": "high"}, queue=None), "out-of-scope"),
    JobCase("namespace-not-opted-in", make_job({"gpu-class.io/class": "high"}), "out-of-scope", namespace="plain"),
    JobCase("unknown-class", make_job({"gpu-class.io/class": "fastest"}), "refused",
            message="unknown class 'fastest'"),
    JobCase("more-gpus-than-any-node", make_job({"gpu-class.io/class": "high", "gpu-class.io/count": "9"}),
            "refused", message="no ready, schedulable node offers 9 GPU(s) of class high"),
]


@pytest.mark.parametrize("case", JOB_CASES, ids=lambda c: c.id)
def test_a_queued_job_is_decided_in_its_pod_template(case: JobCase) -> None:
    review = job_review(case.job, case.namespace)
    assert review.decision.outcome == case.outcome, review.decision.message
    assert case.message in review.decision.message
    if case.outcome != "patched":
        assert review.patch == []
        return
    job = patched(case.job, review)
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    template = job["spec"]["template"]
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": case.limit}
    assert template["metadata"]["annotations"]["gpu-class.io/types"] == case.types
    assert required_products(template["spec"]) == {"NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in template["spec"]["tolerations"]
    # what reaches the API server again (reinvocation) is left as it is
    assert job_review(job).patch == []


def test_a_template_without_metadata_gets_one_before_its_annotations() -> None:
    namespaced = build_snapshot(CATALOG, [*CATALOG_NODES, make_namespace("ml", default_class="high")])
    job = make_job(gpu_limit="1", template_metadata=False)
    body = make_review(job, kind="Job")
    body["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    review = review_request(parse_review(json.dumps(body).encode()), namespaced, CATALOG)
    assert review.decision.outcome == "patched"
    assert review.patch[0] == {"op": "add", "path": "/spec/template/metadata", "value": {}}
    annotations = patched(job, review)["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"gpu-class.io/types": "H100,A100", "gpu-class.io/class": "high"}


@pytest.mark.parametrize("template, message", [
    pytest.param("a string", "spec.template must be an object", id="template-string"),
    pytest.param({"spec": {"containers": []}, "metadata": {"annotations": {"gpu-class.io/class": "high"}}},
                 "spec.containers is empty", id="no-containers"),
])
def test_a_malformed_job_is_refused_with_what_is_wrong(template: Any, message: str) -> None:
    job = make_job({"gpu-class.io/class": "high"})
    job["spec"]["template"] = template
    review = job_review(job)
    assert review.decision.outcome == "refused" and message in review.decision.message


# --- the Pods Kueue starts ------------------------------------------------------------------------


def decided_job() -> dict[str, Any]:
    job = make_job({"gpu-class.io/class": "high", "gpu-class.io/count": "2"})
    return patched(job, job_review(job))


@dataclass(frozen=True)
class PodCase:
    id: str
    pod: dict[str, Any]
    outcome: str
    message: str = ""
    products: set[str] = field(default_factory=set)  # required products after the patch


POD_CASES = [
    PodCase("decided-with-its-job", pod_of(decided_job(), labels={PODSET_LABEL: "main"},
                                             node_selector={PRODUCT: "A100-SXM4-40GB"}), "out-of-scope",
            message="decided with its workload"),
    PodCase("kueue-started-class-only", pod_of(make_job({"gpu-class.io/class": "high"}),
                                                labels={PODSET_LABEL: "main"}), "refused",
            message="counted its quota from the pod template, which asks for no nvidia.com/gpu"),
    PodCase("kueue-started-limit-flavor-in-class", pod_of(make_job({"gpu-class.io/class": "high"}, gpu_limit="1"),
                                                           labels={PODSET_LABEL: "main"},
                                                           node_selector={PRODUCT: "A100-SXM4-40GB"}),
            "patched", products={"NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"}),
    PodCase("kueue-started-limit-flavor-outside-class",
            pod_of(make_job({"gpu-class.io/class": "high"}, gpu_limit="1"), labels={PODSET_LABEL: "main"},
                   node_selector={PRODUCT: "Tesla-T4"}), "refused",
            message="asks for nvidia.com/gpu.product=Tesla-T4, which class high cannot place on now"),
    # the pod integration: Kueue builds the Workload from the stored Pod, so it is placed as any Pod
    PodCase("queued-plain-pod", pod_of(make_job({"gpu-class.io/class": "high"}), labels={QUEUE_LABEL: "team-a"}),
            "patched", products={"NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"}),
]


@pytest.mark.parametrize("case", POD_CASES, ids=lambda c: c.id)
def test_pods_kueue_starts_are_left_as_decided_or_refused(case: PodCase) -> None:
    review = pod_review(case.pod)
    assert review.decision.outcome == case.outcome, review.decision.message
    assert case.message in review.decision.message
    if case.outcome == "patched":
        pod = patched(case.pod, review)
        assert_valid_pod(pod)
        assert required_products(pod["spec"]) == case.products
    else:
        assert review.patch == []


# --- the Kueue objects: flavors in the class's order -----------------------------------------------


def queues_of(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterQueue"}


def flavor_order(queue: Mapping[str, Any]) -> list[list[str]]:
    return [[f["name"] for f in g["flavors"]] for g in queue["spec"]["resourceGroups"]]


# Written out by hand from TEST_CATALOG_YAML: each type's exact products, the class's types fastest
# first (cost: slowest first).
EXPECTED_ORDER = {
    "gpu-class-high": [["nvidia-h200", "nvidia-h100-80gb-hbm3", "a100-sxm4-40gb", "nvidia-a100-sxm4-80gb"]],
    "gpu-class-economy": [["tesla-t4", "tesla-t4-shared", "tesla-v100-sxm2-16gb", "nvidia-l4", "nvidia-a10"]],
    "gpu-class-balanced": [["a100-sxm4-40gb", "nvidia-a100-sxm4-80gb", "nvidia-l4", "tesla-t4", "tesla-t4-shared"]],
    "gpu-class-scalable": [["tesla-v100-sxm2-16gb", "tesla-t4", "tesla-t4-shared"]],
}


@pytest.mark.parametrize("queue", sorted(EXPECTED_ORDER))
def test_a_class_queue_tries_its_flavors_in_the_class_order(queue: str) -> None:
    objects, _ = kueue_objects(CATALOG, 4)
    assert flavor_order(queues_of(objects)[queue]) == EXPECTED_ORDER[queue]


def test_a_glob_gets_no_flavor_and_says_so() -> None:
    objects, notes = kueue_objects(CATALOG, 4)
    assert notes == ["H100: no flavor for NVIDIA-H100-PCIe* (a glob); add one per product your nodes carry"]
    assert all("pcie" not in o["metadata"]["name"] for o in objects)


@pytest.mark.parametrize("class_name", list(load_default_catalog().classes))
def test_the_built_in_catalog_gives_queues_kueue_accepts_in_each_class_order(class_name: str) -> None:
    catalog = load_default_catalog()
    objects, _ = kueue_objects(catalog, 8)
    flavors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"}
    queue = queues_of(objects)[f"gpu-class-{class_name}"]
    groups = queue["spec"]["resourceGroups"]
    # the limits Kueue's CRD and admission put on a queue
    assert len(groups) <= 16
    seen: set[str] = set()
    for group in groups:
        assert 1 <= len(group["flavors"]) <= KUEUE_MAX_FLAVORS
        names = [f["name"] for f in group["flavors"]]
        assert not seen & set(names), "a flavor in two resource groups of one queue"
        seen.update(names)
        for f in group["flavors"]:
            assert [r["name"] for r in f["resources"]] == group["coveredResources"]
    covered = [r for g in groups for r in g["coveredResources"]]
    assert sorted(covered) == sorted(catalog.class_resources(class_name))
    # each flavor stands for a type of the class, and a group's flavors follow the class's order
    rank = {t: i for i, t in enumerate(class_order(catalog.classes[class_name]))}
    for names in flavor_order(queue):
        first_type = [min(rank[t] for t in flavors[n]["metadata"]["annotations"]["gpu-class.io/types"].split(",")
                          if t in rank) for n in names]
        assert first_type == sorted(first_type)
        for n in names:
            ((key, value),) = flavors[n]["spec"]["nodeLabels"].items()
            assert any(catalog.types[t].exact_values(catalog.product_labels) == ((key, (value,)),)
                       or value in dict(catalog.types[t].exact_values(catalog.product_labels)).get(key, ())
                       for t in rank)


@pytest.mark.parametrize("product, name", [
    ("NVIDIA-H100-80GB-HBM3", "nvidia-h100-80gb-hbm3"),
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia-a100-sxm4-40gb-mig-1g.5gb"),
    ("AMD_Instinct_MI300X_OAM", "amd-instinct-mi300x-oam"),
    ("Tesla T4", "tesla-t4"),
])
def test_flavor_names_are_dns_names_of_the_product(product: str, name: str) -> None:
    assert flavor_name(product) == name


def test_gpuclass_kueue_prints_objects_that_validate_and_refuses_a_negative_quota() -> None:
    cli = [sys.executable, "-m", "webhook.cli", "kueue"]
    done = subprocess.run([*cli, "--quota", "2"], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert {o["kind"] for o in objects} == {"ResourceFlavor", "ClusterQueue"}
    assert done.stdout.startswith("# Kueue objects for gpu-class")
    assert {r["nominalQuota"] for q in queues_of(objects).values() for g in q["spec"]["resourceGroups"]
            for f in g["flavors"] for r in f["resources"]} == {2}
    refused = subprocess.run([*cli, "--quota", "-1"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parents[1])
    assert refused.returncode == 2 and "--quota must be 0 or more GPUs" in refused.stderr


# --- the registration: which Jobs the API server sends ---------------------------------------------


@pytest.mark.parametrize("job, sent", [
    pytest.param(make_job({"gpu-class.io/class": "high"}), True, id="class-in-template"),
    pytest.param(make_job(gpu_limit="2"), True, id="gpu-limit-in-template"),
    pytest.param(make_job(gpu_limit="0"), False, id="zero-gpus"),
    pytest.param(make_job(), False, id="no-gpu-no-class"),
    pytest.param(make_job(gpu_limit="1", template_metadata=False), True, id="no-template-metadata"),
])
def test_the_workload_webhook_is_sent_the_jobs_whose_pods_it_would_place(job: dict[str, Any], sent: bool) -> None:
    configuration = yaml.safe_load((Path(deploy.REPO) / "deploy" / "base" / "workload-webhook.yaml").read_text())
    (webhook,) = [w for w in configuration["webhooks"] if w["name"] == "jobs.gpu-class.io"]
    activation = {"object": job, "oldObject": None, "request": deploy.admission_request(job)}
    assert all(deploy.evaluate_cel(c["expression"], activation) for c in webhook["matchConditions"]) is sent
