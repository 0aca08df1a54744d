"""Beside Kueue: a queued Job decided at the Job, the Pods Kueue starts left as decided or refused, and
the Kueue objects whose flavor order is the class's order (webhook/core/admission/workload.py, kueue.py)."""

from __future__ import annotations

import copy
import json
import re
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
from builders import (
    CATALOG_NODES, K8S_VERSION, assert_valid_pod, make_catalog, make_namespace, make_node, make_review,
)
from webhook.core.catalog.loading import load_catalog_text, load_default_catalog
from webhook.core.view.inventory import build_snapshot
from webhook.core.view.snapshot import placing_catalog
from webhook.core.admission.kueue import (KUEUE_MAX_FLAVORS, PODSET_LABEL, QUEUE_LABEL, Flavor, Tenant, class_order, flavor_name,
                                kueue_objects, share, supply_from_catalog, supply_from_snapshot)
from webhook.core.admission.review import Review, parse_review, review_request

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


# --- the Kueue objects: flavors in the class's order, quota held once -------------------------------


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def queues_of(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return of_kind(objects, "ClusterQueue")


def flavor_order(queue: Mapping[str, Any]) -> list[list[str]]:
    return [[f["name"] for f in g["flavors"]] for g in queue["spec"]["resourceGroups"]]


def labels_in_order(objects: list[dict[str, Any]], queue: str) -> list[list[tuple[str, str]]]:
    """A queue's flavors as the node labels they select, in the queue's order."""
    flavors = of_kind(objects, "ResourceFlavor")
    return [[next(iter(flavors[n]["spec"]["nodeLabels"].items())) for n in names]
            for names in flavor_order(queues_of(objects)[queue])]


def cohort_quota(cohort: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> nominalQuota of a Cohort."""
    return {(f["name"], r["name"]): r["nominalQuota"] for g in cohort["spec"].get("resourceGroups", [])
            for f in g["flavors"] for r in f["resources"]}


def matching_nodes(flavor: Mapping[str, Any], nodes: list[dict[str, Any]]) -> set[str]:
    """The nodes a flavor's nodeLabels select, as Kueue's nodeSelector would."""
    wanted = flavor["spec"]["nodeLabels"].items()
    return {n["metadata"]["name"] for n in nodes if all(n["metadata"]["labels"].get(k) == v for k, v in wanted)}


# Written out by hand from TEST_CATALOG_YAML: each type's exact products, the class's types fastest
# first (cost: slowest first).
EXPECTED_ORDER = {
    "gpu-class-high": ["NVIDIA-H200", "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"],
    "gpu-class-economy": ["Tesla-T4", "Tesla-T4-SHARED", "Tesla-V100-SXM2-16GB", "NVIDIA-L4", "NVIDIA-A10"],
    "gpu-class-balanced": ["A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4", "Tesla-T4", "Tesla-T4-SHARED"],
    "gpu-class-scalable": ["Tesla-V100-SXM2-16GB", "Tesla-T4", "Tesla-T4-SHARED"],
}


@pytest.mark.parametrize("queue", sorted(EXPECTED_ORDER))
def test_a_class_queue_tries_its_flavors_in_the_class_order(queue: str) -> None:
    objects, _ = kueue_objects(CATALOG, supply_from_catalog(CATALOG, 4))
    assert labels_in_order(objects, queue) == [[(PRODUCT, v) for v in EXPECTED_ORDER[queue]]]


def test_a_glob_gets_no_flavor_and_says_so() -> None:
    objects, notes = kueue_objects(CATALOG, supply_from_catalog(CATALOG, 4))
    assert notes == ["H100: no flavor for NVIDIA-H100-PCIe* (a glob); add one per product your nodes carry, "
                     "or read them from the cluster (--nodes, --kubeconfig)"]
    assert all("pcie" not in o["metadata"]["name"] for o in objects)


@pytest.mark.parametrize("class_name", list(load_default_catalog().classes))
def test_the_built_in_catalog_gives_queues_kueue_accepts_in_each_class_order(class_name: str) -> None:
    catalog = load_default_catalog()
    objects, _ = kueue_objects(catalog, supply_from_catalog(catalog, 8))
    flavors = of_kind(objects, "ResourceFlavor")
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
            assert any(value in dict(catalog.types[t].exact_values(catalog.product_labels)).get(key, ())
                       for t in rank)


DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize("key, value, name", [
    pytest.param(PRODUCT, "nvidia-h100-80gb-hbm3", "nvidia-h100-80gb-hbm3", id="the-value-itself"),
    pytest.param(PRODUCT, "NVIDIA-H100-80GB-HBM3", "nvidia-h100-80gb-hbm3-a38ff796", id="upper-case"),
    pytest.param(PRODUCT, "NVIDIA_H100_80GB_HBM3", "nvidia-h100-80gb-hbm3-a0436ceb", id="underscores"),
    pytest.param("gpu-type", "nvidia-h100-80gb-hbm3", "nvidia-h100-80gb-hbm3-57e8004a", id="another-key"),
    pytest.param(PRODUCT, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia-a100-sxm4-40gb-mig-1g.5gb-fb4703a1",
                 id="mig-value-with-a-dot"),
    pytest.param(PRODUCT, "Tesla T4", "tesla-t4-629323df", id="space"),
    pytest.param(PRODUCT, "-A..B_", "a.b-18b431a8", id="no-empty-dns-label"),
])
def test_flavor_names_are_dns_names_unique_per_label(key: str, value: str, name: str) -> None:
    assert flavor_name(Flavor(key, value), CATALOG) == name
    assert DNS_SUBDOMAIN.fullmatch(name) and len(name) <= 253


# Products that differ only in case or in _/-: three label values, three sets of nodes.
LOOKALIKE_CATALOG_YAML = """
productLabels: [nvidia.com/gpu.product, gpu-type]
types:
  - {name: H100, score: 989, memoryGiB: 80, products: [NVIDIA-H100-80GB-HBM3, NVIDIA_H100_80GB_HBM3]}
  - {name: H100-capped, score: 700, memoryGiB: 80, products: [nvidia-h100-80gb-hbm3]}
  - {name: A100, score: 312, memoryGiB: 40, products: [A100-SXM4-40GB]}
classes:
  - {name: high, types: [H100, H100-capped, A100]}
"""
LOOKALIKE_CATALOG = load_catalog_text(LOOKALIKE_CATALOG_YAML, "lookalike.yaml")
GPU_TYPE_NODES = [  # a cluster labelled by gpu-type only, but for one node
    make_node("upper-0", "NVIDIA-H100-80GB-HBM3", gpus=8, label_key="gpu-type"),
    make_node("upper-1", "NVIDIA-H100-80GB-HBM3", gpus=8, label_key="gpu-type"),
    make_node("snake-0", "NVIDIA_H100_80GB_HBM3", gpus=4, label_key="gpu-type"),
    make_node("lower-0", "nvidia-h100-80gb-hbm3", gpus=2, label_key="gpu-type"),
    make_node("a100-0", "A100-SXM4-40GB", gpus=4, label_key="gpu-type"),
    make_node("a100-1", "A100-SXM4-40GB", gpus=4),
    make_node("cpu-0"),
]


def test_lookalike_products_in_a_cluster_labelled_by_gpu_type_get_a_flavor_each_matching_its_nodes() -> None:
    snapshot = build_snapshot(LOOKALIKE_CATALOG, GPU_TYPE_NODES)
    objects, notes = kueue_objects(LOOKALIKE_CATALOG, supply_from_snapshot(LOOKALIKE_CATALOG, snapshot))
    assert notes == []
    flavors = of_kind(objects, "ResourceFlavor")
    assert {name: matching_nodes(f, GPU_TYPE_NODES) for name, f in flavors.items()} == {
        flavor_name(Flavor("gpu-type", "NVIDIA-H100-80GB-HBM3"), LOOKALIKE_CATALOG): {"upper-0", "upper-1"},
        flavor_name(Flavor("gpu-type", "NVIDIA_H100_80GB_HBM3"), LOOKALIKE_CATALOG): {"snake-0"},
        flavor_name(Flavor("gpu-type", "nvidia-h100-80gb-hbm3"), LOOKALIKE_CATALOG): {"lower-0"},
        flavor_name(Flavor("gpu-type", "A100-SXM4-40GB"), LOOKALIKE_CATALOG): {"a100-0"},
        flavor_name(Flavor(PRODUCT, "A100-SXM4-40GB"), LOOKALIKE_CATALOG): {"a100-1"},
    }
    # the quota of each flavor is its nodes' GPUs, held once
    ((cohort_name, cohort),) = of_kind(objects, "Cohort").items()
    assert cohort_quota(cohort) == {(name, "nvidia.com/gpu"): sum(
        int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in GPU_TYPE_NODES if n["metadata"]["name"] in nodes)
        for name, f in flavors.items() if (nodes := matching_nodes(f, GPU_TYPE_NODES))}
    queue = queues_of(objects)["gpu-class-high"]
    assert queue["spec"]["cohortName"] == cohort_name == "gpu-class"
    # H100's two values first (catalog order within a type), then H100-capped's, then A100's
    assert [v for _, v in labels_in_order(objects, "gpu-class-high")[0]] == [
        "NVIDIA-H100-80GB-HBM3", "NVIDIA_H100_80GB_HBM3", "nvidia-h100-80gb-hbm3", "A100-SXM4-40GB",
        "A100-SXM4-40GB"]


def test_a_cluster_without_gpu_nodes_gets_cohorts_and_no_queue_saying_why() -> None:
    snapshot = build_snapshot(CATALOG, [make_node("cpu-0")])
    objects, notes = kueue_objects(CATALOG, supply_from_snapshot(CATALOG, snapshot), TENANTS)
    assert {o["kind"] for o in objects} == {"Cohort"}
    assert notes[0] == f"no node in the cluster is {', '.join(CATALOG.types)}"
    assert "class high: no type has a flavor; no ClusterQueue" in notes


def test_a_catalog_alone_names_the_label_key_its_nodes_carry() -> None:
    objects, _ = kueue_objects(LOOKALIKE_CATALOG, supply_from_catalog(LOOKALIKE_CATALOG, 4, "gpu-type"))
    flavors = of_kind(objects, "ResourceFlavor")
    assert sorted(next(iter(f["spec"]["nodeLabels"].items())) for f in flavors.values()) == [
        ("gpu-type", "A100-SXM4-40GB"), ("gpu-type", "NVIDIA-H100-80GB-HBM3"), ("gpu-type", "NVIDIA_H100_80GB_HBM3"),
        ("gpu-type", "nvidia-h100-80gb-hbm3")]
    assert all(matching_nodes(f, GPU_TYPE_NODES) for f in flavors.values())


@pytest.mark.parametrize("total, parts", [(0, 3), (2, 3), (16, 3), (17, 5), (8, 1)])
def test_shares_differ_by_one_at_most_and_add_up(total: int, parts: int) -> None:
    shares = [share(total, parts, i) for i in range(parts)]
    assert sum(shares) == total and max(shares) - min(shares) <= 1


TENANTS = (Tenant("vision", ("vision",)), Tenant("nlp", ("nlp", "nlp-eval")), Tenant("speech", ("speech",)))
FLEET = [*CATALOG_NODES, make_node("h100-b", "NVIDIA-H100-80GB-HBM3", gpus=8),
         make_node("a100-80", "NVIDIA-A100-SXM4-80GB", gpus=2), make_node("l4-a", "NVIDIA-L4", gpus=1)]


def test_tenants_share_one_cohort_whose_quotas_add_up_to_the_cluster_gpus() -> None:
    snapshot = build_snapshot(CATALOG, FLEET)
    objects, _ = kueue_objects(CATALOG, supply_from_snapshot(CATALOG, snapshot), TENANTS)
    cohorts = of_kind(objects, "Cohort")
    assert set(cohorts) == {"gpu-class", "gpu-class-vision", "gpu-class-nlp", "gpu-class-speech"}
    assert cohorts["gpu-class"]["spec"] == {}  # the root holds nothing: every GPU is some tenant's
    flavors = of_kind(objects, "ResourceFlavor")
    summed: dict[str, int] = {}
    for t in TENANTS:
        cohort = cohorts[f"gpu-class-{t.name}"]
        assert cohort["spec"]["parentName"] == "gpu-class"
        for (flavor, resource), quota in cohort_quota(cohort).items():
            assert resource == "nvidia.com/gpu"
            summed[flavor] = summed.get(flavor, 0) + quota
    gpus = {name: sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in FLEET
                      if n["metadata"]["name"] in matching_nodes(f, FLEET)) for name, f in flavors.items()}
    assert summed == gpus and sum(summed.values()) == 8 + 4 + 1 + 8 + 2 + 1
    # even shares: the 8 GPUs of one flavor go 3, 3, 2; the remainders go round, flavor by flavor
    per_tenant = [sum(cohort_quota(cohorts[f"gpu-class-{t.name}"]).values()) for t in TENANTS]
    assert max(per_tenant) - min(per_tenant) <= 1
    # each tenant's class queues: in its cohort, no quota of their own, its namespaces only
    queues = queues_of(objects)
    for t in TENANTS:
        for class_name in ("high", "economy"):
            spec = queues[f"gpu-class-{t.name}-{class_name}"]["spec"]
            assert spec["cohortName"] == f"gpu-class-{t.name}"
            assert spec["namespaceSelector"] == {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(t.namespaces)}]}
            assert {r["nominalQuota"] for g in spec["resourceGroups"] for f in g["flavors"] for r in f["resources"]} \
                == {0}
    local = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
             for o in objects if o["kind"] == "LocalQueue"}
    assert local[("nlp-eval", "high")] == "gpu-class-nlp-high"
    assert {ns for ns, _ in local} == {"vision", "nlp", "nlp-eval", "speech"}


def test_without_tenants_the_class_queues_share_the_quota_once() -> None:
    objects, _ = kueue_objects(CATALOG, supply_from_catalog(CATALOG, 16))
    (cohort,) = of_kind(objects, "Cohort").values()
    assert set(cohort_quota(cohort).values()) == {16}
    assert len(cohort_quota(cohort)) == len(of_kind(objects, "ResourceFlavor"))
    assert {q["spec"]["cohortName"] for q in queues_of(objects).values()} == {"gpu-class"}
    assert {r["nominalQuota"] for q in queues_of(objects).values() for g in q["spec"]["resourceGroups"]
            for f in g["flavors"] for r in f["resources"]} == {0}


@pytest.mark.parametrize("tenants", [(), TENANTS], ids=["no-tenants", "three-tenants"])
def test_a_catalog_of_more_flavors_than_a_cohort_takes_keeps_every_flavor_s_quota_once(
        tenants: tuple[Tenant, ...]) -> None:
    catalog = load_default_catalog()
    supply = supply_from_catalog(catalog, 6)
    objects, notes = kueue_objects(catalog, supply, tenants)
    assert not [n for n in notes if "cohort" in n]
    cohorts = of_kind(objects, "Cohort")
    owners = [f"gpu-class-{t.name}" for t in tenants] or ["gpu-class"]
    flavors = of_kind(objects, "ResourceFlavor")
    assert len(flavors) > KUEUE_MAX_FLAVORS
    held: dict[tuple[str, str], int] = {}
    for name, cohort in cohorts.items():
        # the root, an owner, or a piece of an owner's quota right under it, where its queues borrow it
        owner, _, piece = name.partition(".")
        assert name == "gpu-class" or owner in owners and (not piece or cohort["spec"]["parentName"] == owner)
        for group in cohort["spec"].get("resourceGroups", []):
            assert len(group["flavors"]) <= KUEUE_MAX_FLAVORS
        for key, quota in cohort_quota(cohort).items():
            held[key] = held.get(key, 0) + quota
    assert len(cohorts) > len(owners) + bool(tenants), "no piece: the catalog fits one cohort"
    label = {n: Flavor(*next(iter(f["spec"]["nodeLabels"].items()))) for n, f in flavors.items()}
    assert held == {(n, r): supply.devices.get((label[n], r), 0) for n, r in held}
    assert {n for (n, _), quota in held.items() if quota} == set(flavors)


REPO_ROOT = Path(__file__).resolve().parents[1]


def gpuclass_kueue(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli", "kueue", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT)


def test_gpuclass_kueue_prints_objects_for_tenants_from_an_inventory_file(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": GPU_TYPE_NODES}))
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(LOOKALIKE_CATALOG_YAML)
    done = gpuclass_kueue("--config", str(catalog), "--nodes", str(nodes), "--tenant", "a=ns-a",
                          "--tenant", "b=ns-b", "--tenant", "c=ns-c,ns-c2", "--cohort", "research")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# Kueue objects for gpu-class")
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    cohorts = of_kind(objects, "Cohort")
    assert sorted(cohorts) == ["research", "research-a", "research-b", "research-c"]
    assert sum(sum(cohort_quota(c).values()) for c in cohorts.values()) == 8 + 8 + 4 + 2 + 4 + 4
    assert sorted(queues_of(objects)) == ["research-a-high", "research-b-high", "research-c-high"]


@pytest.mark.parametrize("args, message", [
    pytest.param(["--quota", "-1"], "--quota must be 0 or more GPUs", id="negative-quota"),
    pytest.param(["--label-key", "nvidia.com/gpu.family"], "--label-key nvidia.com/gpu.family is none of the "
                 "catalog's productLabels", id="unknown-label-key"),
    pytest.param(["--tenant", "Team=ns"], "--tenant Team=ns: write NAME=NAMESPACE", id="tenant-not-dns"),
    pytest.param(["--tenant", "team"], "--tenant team: write NAME=NAMESPACE", id="tenant-without-namespace"),
    pytest.param(["--tenant", "a=ns", "--tenant", "b=ns"], "--tenant b and a both have namespace ns",
                 id="namespace-in-two-tenants"),
    pytest.param(["--tenant", "a=x", "--tenant", "a=y"], "both have ClusterQueue gpu-class-a-high",
                 id="tenant-twice"),
    pytest.param(["--nodes", "deploy/demo/nodes.yaml", "--quota", "4"], "--quota and --label-key are for a "
                 "catalog alone", id="quota-with-a-cluster"),
])
def test_gpuclass_kueue_refuses_what_it_cannot_print(args: list[str], message: str) -> None:
    refused = gpuclass_kueue(*args)
    assert refused.returncode == 2 and message in refused.stderr, refused.stderr


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


# --- what a cluster's nodes and namespaces say of the queues -------------------------------------------------

GH200_FACTS = {"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9",
               "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "97871"}
GH200 = make_node("gh200-a", "NVIDIA-GH200-480GB", gpus=4, labels=GH200_FACTS)


def test_a_product_its_labels_make_a_type_gets_a_flavor_in_the_classes_the_type_joins() -> None:
    built_in = load_default_catalog()  # its types have the facts a type made from labels is scored against
    snapshot = build_snapshot(built_in, [make_node("h100-b", "NVIDIA-H100-80GB-HBM3"), GH200])
    placing = placing_catalog(built_in, snapshot)
    (made,) = snapshot.label_types
    joined = [c.name for c in placing.classes.values() if made in c.types]
    assert joined, "the GH200's labels make a type some class of the built-in catalog takes"
    objects, _ = kueue_objects(placing, supply_from_snapshot(placing, snapshot))
    (flavor,) = [f for f in of_kind(objects, "ResourceFlavor").values()
                 if f["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}]
    queues = queues_of(objects)
    for class_name in joined:
        assert flavor["metadata"]["name"] in sum(flavor_order(queues[f"gpu-class-{class_name}"]), [])
    (cohort,) = of_kind(objects, "Cohort").values()
    assert cohort_quota(cohort)[(flavor["metadata"]["name"], "nvidia.com/gpu")] == 4
    # with the catalog as loaded (a library caller's), the type is in no class, and nothing fails
    objects, _ = kueue_objects(built_in, supply_from_snapshot(built_in, snapshot))
    assert not [f for f in of_kind(objects, "ResourceFlavor").values()
                if f["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}]


@pytest.mark.parametrize("node,why", [
    (make_node("h100-cordoned", "NVIDIA-H100-80GB-HBM3", unschedulable=True), "cordoned"),
    (make_node("h100-down", "NVIDIA-H100-80GB-HBM3", ready=False), "not ready"),
    (make_node("h100-team", "NVIDIA-H100-80GB-HBM3", taints=[
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "team", "value": "vision", "effect": "NoSchedule"}]), "reserved by a taint of their own (team)"),
], ids=["cordoned", "not-ready", "reserved"])
def test_quota_counts_the_gpus_pods_could_be_given_and_says_what_it_leaves_out(
        node: dict[str, Any], why: str) -> None:
    usable = make_node("h100-free", "NVIDIA-H100-80GB-HBM3", gpus=8)
    supply = supply_from_snapshot(CATALOG, build_snapshot(CATALOG, [usable, node]))
    flavor = Flavor("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3")
    assert supply.devices[(flavor, "nvidia.com/gpu")] == 8  # the other node's 8 are not quota
    assert f"no quota for the GPUs of 1 node(s) {why}: {node['metadata']['name']}" in supply.notes
    assert flavor in supply.flavors["H100"], "its type keeps its flavor: its nodes may come back"


# allowed-classes of each tenant namespace (None: every class) -> the classes each gets a LocalQueue of
ALLOWED = {"vision": "economy", "nlp": None, "nlp-eval": "high", "speech": "big,h20"}


def test_a_tenant_gets_queues_only_of_the_classes_its_namespaces_allow() -> None:
    namespaces = [make_namespace(n, allowed=a) for n, a in ALLOWED.items()]
    snapshot = build_snapshot(CATALOG, [*FLEET, *namespaces])
    objects, notes = kueue_objects(CATALOG, supply_from_snapshot(CATALOG, snapshot), TENANTS,
                                   namespaces=snapshot.namespaces)
    queued = set(queues_of(objects))
    local = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "LocalQueue"}
    for tenant in TENANTS:
        for class_name in CATALOG.classes:
            if f"gpu-class-{class_name}" not in queues_of(kueue_objects(CATALOG, supply_from_snapshot(
                    CATALOG, snapshot))[0]):
                continue  # no flavor: no queue with or without tenants
            allowing = [n for n in tenant.namespaces
                        if ALLOWED[n] is None or class_name in str(ALLOWED[n]).split(",")]
            name = f"gpu-class-{tenant.name}-{class_name}"
            assert {n for n, c in local if c == class_name and n in tenant.namespaces} == set(allowing)
            if not allowing:
                assert name not in queued
                assert f"tenant {tenant.name}: none of its namespaces allows class {class_name} " \
                       "(gpu-class.io/allowed-classes): no queue of it" in notes
                continue
            assert queues_of(objects)[name]["spec"]["namespaceSelector"] == {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": allowing}]}
    assert ("vision", "economy") in local and ("vision", "high") not in local
    assert ("nlp", "high") in local and ("nlp", "economy") in local


def test_gpuclass_kueue_reads_a_product_its_labels_make_a_type_and_says_what_it_leaves_out(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        GH200, make_node("h100-cordoned", "NVIDIA-H100-80GB-HBM3", unschedulable=True)]}))
    printed = gpuclass_kueue("--nodes", str(nodes))  # the built-in catalog
    assert printed.returncode == 0, printed.stderr
    objects = [o for o in yaml.safe_load_all(printed.stdout) if o]
    assert [f for f in of_kind(objects, "ResourceFlavor").values()
            if f["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}]
    assert "gpuclass kueue: not here: no quota for the GPUs of 1 node(s) cordoned: h100-cordoned" in printed.stderr
    assert "# not here: no quota for the GPUs of 1 node(s) cordoned: h100-cordoned" in printed.stdout
