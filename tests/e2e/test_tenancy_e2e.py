"""A tenant cannot write its way out, on the real control plane: every mark a tenant can forge, on Pods and
Jobs in a namespace allowed only `economy`, leaves its Pods off every node outside economy's types; a node kept
for a team by its own taint is offered only to the Pods that tolerate it; and a namespace created in the same
apply as its Pods has its policy applied to every one of them (docs/operators/security.md, "Marks").

"Off every node" is judged by the nodes each Pod's stored constraints admit (landing.py, the tests' own matcher)
and, where it bound, by that node; never by gpu-class's own marks. The forged Pods carry a finalizer of the
test's, so one the garbage collector deletes (a forged owner) is still there to be judged."""

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
from kubeobjects import (TYPES, create_node, delete_if_present, delete_nodes, force_delete_pods, make_namespace,
                         make_pod, read_pod, wait_bound, wait_for)
from landing import escapes, landing_nodes, read_nodes
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
    release_kept(core, name)
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


KEEP = "gpu-class.test/keep"  # the test's own finalizer: a Pod the garbage collector deletes stays to be judged


def kept(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod with the test's finalizer: deleted by anyone, it stays readable until release_kept."""
    kept_pod = copy.deepcopy(dict(pod))
    kept_pod["metadata"]["finalizers"] = [*kept_pod["metadata"].get("finalizers", []), KEEP]
    return kept_pod


def release_kept(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    for pod in core.list_namespaced_pod(namespace).items:
        rest = [f for f in pod.metadata.finalizers or [] if f != KEEP]
        if rest != list(pod.metadata.finalizers or []):
            delete_if_present(core.patch_namespaced_pod, pod.metadata.name, namespace,
                              [{"op": "replace", "path": "/metadata/finalizers", "value": rest}])


def scheduler_gave_up(pod: Mapping[str, Any]) -> bool:
    """The scheduler tried the Pod and found no node: PodScheduled False, Unschedulable."""
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def settled(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> tuple[str, dict[str, Any]] | None:
    """How the Pod ended, with the Pod: "bound", "unschedulable" (the scheduler found no node), or "deleted"
    (being deleted, kept by KEEP: the scheduler no longer tries it); None while none of these."""
    try:
        pod = read_pod(core, namespace, name)
    except ApiException as e:
        if e.status == 404:
            pytest.fail(f"{namespace}/{name} is gone though kept by {KEEP}: nothing is left to judge", pytrace=False)
        raise
    if pod["spec"].get("nodeName"):
        return "bound", pod
    if scheduler_gave_up(pod):
        return "unschedulable", pod
    return ("deleted", pod) if pod["metadata"].get("deletionTimestamp") else None


def assert_confined(core: kubernetes.client.CoreV1Api, namespace: str, name: str, allowed: set[str]) -> str:
    """The Pod, as finally stored, can land on no GPU node outside `allowed` types, and where it bound is one it
    could land on, of an allowed type; returns how it ended (settled)."""
    outcome, pod = wait_for(f"pod {namespace}/{name} bound, found unschedulable or deleted",
                            lambda: settled(core, namespace, name), seconds=60)
    nodes = read_nodes(core)
    assert not escapes(pod, nodes, allowed), (
        f"{name} ({outcome}) may land outside {sorted(allowed)}: {escapes(pod, nodes, allowed)}; "
        f"its constraints: {pod['spec'].get('nodeSelector')}, {pod['spec'].get('affinity')}")
    if outcome == "bound":
        node = pod["spec"]["nodeName"]
        assert node in landing_nodes(pod, nodes) and TYPE_OF.get(node) in allowed, f"{name} bound on {node}"
    return str(outcome)


def test_every_forged_mark_leaves_the_pod_off_every_type_outside_its_namespaces_class(
        core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, economy_namespace: str,
        plain_namespace: str) -> None:
    ns = economy_namespace
    owner = batch.create_namespaced_job(ns, {  # type: ignore[arg-type]
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "registry.example/cpu:1"}]}}}})
    # an owner that exists, a Job gpu-class never decided
    owned = forged("plain-owner", labels=PODSET, annotations={TYPES: "H100"}, metadata={"ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "plain", "uid": owner.metadata.uid, "controller": True}]})
    pods = {**FORGERIES, "owner-a-job-not-gpu-classs": owned}
    for pod in pods.values():  # every one admitted: a refusal here would be a change of the boundary to assert
        core.create_namespaced_pod(ns, kept(pod))
    # the tenant lifts its own gate once gpu-class has admitted the Pod
    core.patch_namespaced_pod("gated", ns, {"spec": {"schedulingGates": None}})
    for job in (forged_job("forged-template", PODSET, None), forged_job("forged-queued", PODSET, "economy")):
        batch.create_namespaced_job(ns, job)  # type: ignore[arg-type]
    job_pods = wait_for("the forged Jobs' Pods", lambda: [
        p.metadata.name for p in core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name").items]
        if len(core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name").items) == 2 else None)
    outcomes = {name: assert_confined(core, ns, name, ECONOMY_TYPES)
                for name in [p["metadata"]["name"] for p in pods.values()] + job_pods}
    print(f"\nforged Pods, how each ended: {outcomes}")
    # The controls. The same aim in a namespace gpu-class leaves alone lands where it aims: an escape would
    # show, and the judge's matcher agrees with the scheduler.
    core.create_namespaced_pod(plain_namespace, forged("aimed", annotations={TYPES: "H100"}))
    assert wait_bound(core, plain_namespace, "aimed") == H100_NODE
    assert escapes(read_pod(core, plain_namespace, "aimed"), read_nodes(core), ECONOMY_TYPES) == {H100_NODE: "H100"}
    # The same namespace with no forgery binds where economy can run.
    core.create_namespaced_pod(ns, forged("control", spec={}))
    assert assert_confined(core, ns, "control", ECONOMY_TYPES) == "bound"


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
    assert team_node not in landing_nodes(other, read_nodes(core))
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
    nodes = read_nodes(core)
    economy_nodes = {n.name for n in FLEET if n.gpu_type in ECONOMY_TYPES}
    outcomes: dict[str, int] = {"high refused": 0, "bare lands on economy's nodes only": 0}
    names = [f"e2e-one-apply-{uuid.uuid4().hex[:6]}" for _ in range(APPLIES)]
    try:
        for name in names:
            proc = cluster.kubectl("apply", "-f", "-", input_text=one_apply(name), check=False)
            if "class 'high' is not allowed in namespace" in proc.stderr:
                outcomes["high refused"] += 1
            # judged by where the stored Pod may land: on economy's nodes, every one of them (the namespace's
            # default class, decided), and on no other type
            landing = landing_nodes(read_pod(core, name, "bare"), nodes)
            if economy_nodes <= set(landing) and all(t is None or t in ECONOMY_TYPES for t in landing.values()):
                outcomes["bare lands on economy's nodes only"] += 1
        # and those the scheduler bound meanwhile, by where they bound; the refused Pods stored nowhere
        pods = [p for name in names for p in core.list_namespaced_pod(name).items]
        assert [p.metadata.name for p in pods] == ["bare"] * APPLIES, sorted(
            f"{p.metadata.namespace}/{p.metadata.name}" for p in pods)
        bound = {p.metadata.namespace: p.spec.node_name for p in pods if p.spec.node_name}
        assert all(TYPE_OF.get(node) in ECONOMY_TYPES for node in bound.values()), bound
        print(f"\n{len(bound)} of {APPLIES} bare Pods bound meanwhile, on {sorted(set(bound.values()))}")
    finally:
        for name in names:
            try:
                core.delete_namespace(name, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
    assert outcomes == {"high refused": APPLIES, "bare lands on economy's nodes only": APPLIES}
