"""A tenant cannot write its way out, on the real control plane: every mark a tenant can forge, on Pods and
Jobs in a namespace allowed only `economy`, leaves its Pods off every node outside economy's types; a node kept
for a team by its own taint is offered only to the Pods that tolerate it; and a namespace created in the same
apply as its Pods has its policy applied to every one of them (docs/operators/security.md, "Marks")."""

from __future__ import annotations

import copy
import uuid
from typing import Any, Iterator, Mapping

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import local_cluster
from fleet import FLEET, TYPE_OF, H100_LABELS
from kubeobjects import (TYPES, create_node, delete_nodes, force_delete_pods, make_namespace, make_pod, read_pod,
                         wait_bound, wait_for)
from webhook.core.catalog.loading import load_default_catalog

pytestmark = pytest.mark.usefixtures("fleet")

ECONOMY_TYPES = set(load_default_catalog().classes["economy"].types)  # what the e2e webhook serves
H100_NODE = next(n.name for n in FLEET if n.gpu_type == "H100")
PRODUCT = "nvidia.com/gpu.product"
H100 = H100_LABELS[PRODUCT]
ON_H100 = {"nodeSelector": {"kubernetes.io/hostname": H100_NODE}}
PODSET = {"kueue.x-k8s.io/podset": "main"}
H100_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": [H100]}]}]}}}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists"}


@pytest.fixture
def economy_namespace(core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api) -> Iterator[str]:
    """Opted in, its default class economy and economy its only class."""
    name = make_namespace(core, "e2e-tenant", labels={"gpu-class.io/inject": "enabled",
                                                      "gpu-class.io/default-class": "economy"},
                          annotations={"gpu-class.io/allowed-classes": "economy"})
    yield name
    batch.delete_collection_namespaced_job(name, propagation_policy="Background")
    force_delete_pods(core, name)
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def batch(api_client: kubernetes.client.ApiClient) -> kubernetes.client.BatchV1Api:
    return kubernetes.client.BatchV1Api(api_client)


def forged(name: str, *, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
           spec: Mapping[str, Any] | None = None, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A Pod asking one GPU, its tenant's marks on it, aimed at the H100 node unless `spec` says otherwise."""
    pod = make_pod(name, gpus=1, annotations=annotations)
    pod["metadata"].update(copy.deepcopy(dict(metadata or {})))
    if labels:
        pod["metadata"]["labels"] = dict(labels)
    pod["spec"]["tolerations"] = [GPU_TOLERATION]
    pod["spec"].update(copy.deepcopy(dict(ON_H100 if spec is None else spec)))
    return pod


FORGERIES = {
    "kueue-podset-and-types": forged("podset-types", labels=PODSET, annotations={TYPES: "H100"}),
    "types-alone": forged("types", annotations={TYPES: "H100"}),
    "podset-and-h100-affinity": forged("podset-affinity", labels=PODSET, annotations={TYPES: "H100"},
                                       spec={"affinity": H100_AFFINITY}),
    "kueue-queue-and-workload-marks": forged("kueue-marks", labels={"kueue.x-k8s.io/queue-name": "economy",
                                                                    "kueue.x-k8s.io/managed": "true"},
                                             annotations={"kueue.x-k8s.io/workload": "job-x", TYPES: "H100"}),
    "owner-that-does-not-exist": forged("ghost-owner", metadata={"ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": str(uuid.uuid4()), "controller": True}]}),
    "group-label-and-annotation": forged("group", labels={"gpu-class.io/group": "g"},
                                         annotations={"gpu-class.io/group": "g"}),
    "strict-scheduler-named": forged("strict", spec={**ON_H100, "schedulerName": "gpu-class-scheduler"}),
    "default-scheduler-named": forged("default", spec={**ON_H100, "schedulerName": "default-scheduler"}),
    "scheduling-gate-lifted-later": forged("gated", labels=PODSET, annotations={TYPES: "H100"},
                                           spec={**ON_H100, "schedulingGates": [{"name": "example.com/hold"}]}),
}


def forged_job(name: str, template_labels: Mapping[str, str], queue: str | None) -> dict[str, Any]:
    template = forged(name, labels=template_labels, annotations={TYPES: "H100", "gpu-class.io/class": "economy"},
                      spec={"affinity": H100_AFFINITY})
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue} if queue else {}},
            "spec": {"template": {"metadata": template["metadata"], "spec": template["spec"]}}}


GONE = {"spec": {}}  # a deleted Pod, as settled() reports it: bound nowhere


def scheduler_gave_up(pod: Mapping[str, Any]) -> bool:
    """The scheduler tried the Pod and found no node: PodScheduled False, Unschedulable."""
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def settled(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict[str, Any] | None:
    """The Pod once the scheduler has bound it or said it fits nowhere, or GONE once it is deleted (the
    garbage collector deletes a Pod whose owner does not exist); None while none of these."""
    try:
        pod = read_pod(core, namespace, name)
    except ApiException as e:
        if e.status == 404:
            return GONE
        raise
    return pod if pod["spec"].get("nodeName") or scheduler_gave_up(pod) else None


def assert_economy_or_nowhere(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> None:
    pod = wait_for(f"pod {namespace}/{name} bound or found unschedulable",
                   lambda: settled(core, namespace, name), seconds=60)
    node = (pod.get("spec") or {}).get("nodeName")
    assert node is None or TYPE_OF.get(node) in ECONOMY_TYPES, f"{name} bound on {node} ({TYPE_OF.get(node)})"


def test_every_forged_mark_leaves_the_pod_off_every_type_outside_its_namespaces_class(
        core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, economy_namespace: str) -> None:
    ns = economy_namespace
    owner = batch.create_namespaced_job(ns, {  # type: ignore[arg-type]
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "registry.example/cpu:1"}]}}}})
    # an owner that exists, a Job gpu-class never decided
    owned = forged("plain-owner", labels=PODSET, annotations={TYPES: "H100"}, metadata={"ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "plain", "uid": owner.metadata.uid, "controller": True}]})
    created = []
    for name, pod in {**FORGERIES, "owner-a-job-not-gpu-classs": owned}.items():
        try:
            core.create_namespaced_pod(ns, pod)
        except ApiException as e:  # refused outright gets it nothing either; say why for the record
            assert e.status == 403 and "gpu-class" in e.body, (name, e.body)
            continue
        created.append(pod["metadata"]["name"])
    # the tenant lifts its own gate once gpu-class has admitted the Pod
    core.patch_namespaced_pod("gated", ns, {"spec": {"schedulingGates": None}})
    for job in (forged_job("forged-template", PODSET, None), forged_job("forged-queued", PODSET, "economy")):
        batch.create_namespaced_job(ns, job)  # type: ignore[arg-type]
    job_pods = wait_for("the forged Jobs' Pods", lambda: [
        p.metadata.name for p in core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name").items]
        if len(core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name").items) == 2 else None)
    assert len(created) >= len(FORGERIES) - 1, created  # refusals are the exception, not the rule
    for name in created + job_pods:
        assert_economy_or_nowhere(core, ns, name)
    # The control: the same namespace with no forgery binds where economy can run.
    core.create_namespaced_pod(ns, forged("control", spec={}))
    assert TYPE_OF[wait_bound(core, ns, "control")] in ECONOMY_TYPES


# --- a node kept for a team ---------------------------------------------------------------------

TEAM_TAINT = {"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}
H200_LABELS = {**H100_LABELS, PRODUCT: "NVIDIA-H200", "nvidia.com/gpu.memory": "143771"}


@pytest.fixture
def team_node(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    name = f"e2e-h200-team-{uuid.uuid4().hex[:4]}"
    create_node(core, name, H200_LABELS, gpus=8,
                taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, TEAM_TAINT))
    yield name
    delete_nodes(core, [name])


def test_a_team_taint_is_never_tolerated_by_gpu_class_and_its_node_is_offered_to_those_that_tolerate_it(
        core: kubernetes.client.CoreV1Api, namespace: str, team_node: str) -> None:
    def admitted(name: str, tolerations: list[dict[str, str]] | None) -> dict[str, Any]:
        pod = make_pod(name, gpu_class="high")
        if tolerations:
            pod["spec"]["tolerations"] = tolerations
        core.create_namespaced_pod(namespace, pod)
        return read_pod(core, namespace, name)

    tolerating = make_pod("probe", gpu_class="high")
    tolerating["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    # each gunicorn worker keeps its own view, and a new connection goes to the one holding fewer: a few
    # answers in a row that offer H200 are the workers' answers
    wait_for(f"{team_node} in every worker's view",
             lambda: all("H200" in types_offered(core, namespace, tolerating) for _ in range(4)))
    team_pod = admitted("team", [{"key": "dedicated", "operator": "Exists"}])
    assert team_pod["metadata"]["annotations"][TYPES].split(",")[0] == "H200"
    assert wait_bound(core, namespace, "team") == team_node

    other = admitted("other", None)
    keys = {t.get("key") for t in other["spec"].get("tolerations") or []}
    assert "dedicated" not in keys, other["spec"]["tolerations"]
    assert "H200" not in other["metadata"]["annotations"][TYPES].split(",")
    assert wait_bound(core, namespace, "other") != team_node


def types_offered(core: kubernetes.client.CoreV1Api, namespace: str, pod: Mapping[str, Any]) -> str:
    """gpu-class.io/types of a dry-run create of `pod` (nothing stored)."""
    probe = copy.deepcopy(dict(pod))
    probe["metadata"]["name"] = "probe"
    response = core.create_namespaced_pod(namespace, probe, dry_run="All", _preload_content=False)
    return str(yaml.safe_load(response.data)["metadata"]["annotations"].get(TYPES, ""))


# --- a namespace and its Pods in one apply -------------------------------------------------------

APPLIES = 100


def one_apply(name: str) -> str:
    """A namespace allowed only economy, a ServiceAccount, a Pod asking for class high and one with only a
    GPU limit, in that order."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": name, "labels": {"gpu-class.io/inject": "enabled", "gpu-class.io/default-class": "economy"},
            "annotations": {"gpu-class.io/allowed-classes": "economy"}}},
        # The ServiceAccount admission plugin refuses a Pod whose account does not exist yet, before any
        # webhook is asked; the controller manager makes `default` only after the namespace's event reaches
        # it. An account of the apply's own lets the Pods through at once, as Pods of a chart would.
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner", "namespace": name}},
    ]
    for pod in (make_pod("high", gpu_class="high"), make_pod("bare")):
        pod["metadata"]["namespace"] = name
        pod["spec"]["serviceAccountName"] = "runner"
        docs.append(pod)
    return yaml.safe_dump_all(docs)


def test_a_namespace_created_with_its_pods_has_its_policy_applied_to_every_one(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api) -> None:
    outcomes: dict[str, int] = {"high refused": 0, "bare got economy": 0}
    names = [f"e2e-one-apply-{uuid.uuid4().hex[:6]}" for _ in range(APPLIES)]
    try:
        for name in names:
            proc = cluster.kubectl("apply", "-f", "-", input_text=one_apply(name), check=False)
            if "class 'high' is not allowed in namespace" in proc.stderr:
                outcomes["high refused"] += 1
            bare = read_pod(core, name, "bare")
            if set(bare["metadata"]["annotations"].get(TYPES, "?").split(",")) <= ECONOMY_TYPES:
                outcomes["bare got economy"] += 1
    finally:
        for name in names:
            try:
                core.delete_namespace(name, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
    assert outcomes == {"high refused": APPLIES, "bare got economy": APPLIES}
