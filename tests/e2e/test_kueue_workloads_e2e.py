"""gpu-class beside a real Kueue and the real JobSet and LeaderWorkerSet controllers (tests/e2e/kueue.py,
workload_controllers.py) on the local control plane: a StatefulSet, a LeaderWorkerSet and a JobSet that
carry only the class are decided at the workload, where Kueue counts them (a LeaderWorkerSet's leaderTemplate
as its workerTemplate), and never hold more GPUs than the quota at any Pod event a watch delivers
(docs/users/kueue.md, the table of kinds).

Kueue runs here with its `statefulset`, `jobset.x-k8s.io/jobset` and `leaderworkerset.x-k8s.io/leaderworkerset`
integrations on, once for the module. Every workload asks for QUOTA GPUs; two are queued against a
ClusterQueue of QUOTA GPUs on the H100 flavor only, so exactly one may hold GPUs at any time.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import kubernetes
import pytest
import yaml

import local_cluster
from gpu_watch import pod_gpus, watching_bound_gpus
from kubeobjects import TYPES, create_node, delete_nodes, make_namespace, node_label, read_pod, wait_bound, wait_for
from landing import landing_nodes, read_nodes
from kueue import QUEUE_LABEL, WORKLOAD_FRAMEWORKS, Kueue, cluster_queue, is_admitted, running_kueue
from workload_controllers import JOBSET, LWS, running_controllers

KUEUE_LABEL = ("gpu-class.io/e2e-kueue-workloads", "enabled")
PRODUCT = "nvidia.com/gpu.product"
H100 = "NVIDIA-H100-80GB-HBM3"
QUOTA = 4  # GPUs, on the H100 flavor only
WORKLOADS = 2  # each asking for QUOTA GPUs
SETTLE_SECONDS = 90.0
HOLD_SECONDS = 8.0


@pytest.fixture(scope="module")
def controllers(cluster: local_cluster.Cluster) -> Iterator[None]:
    with running_controllers(cluster, (JOBSET, LWS), namespace_label=KUEUE_LABEL):
        yield


@pytest.fixture(scope="module")
def kueue(cluster: local_cluster.Cluster, controllers: None) -> Iterator[Kueue]:
    """Kueue with the workload integrations, started once JobSet's and LWS's CRDs are there."""
    with running_kueue(cluster, namespace_label=KUEUE_LABEL, frameworks=WORKLOAD_FRAMEWORKS) as running:
        yield running


@pytest.fixture(scope="module")
def flavors(kueue: Kueue) -> dict[str, str]:
    """The flavors `gpuclass kueue` prints, applied: product -> flavor name."""
    printed = subprocess.run([local_cluster.gpuclass_path(), "kueue", "--quota", str(QUOTA)], capture_output=True,
                             text=True, check=True).stdout
    applied = [o for o in yaml.safe_load_all(printed) if o and o["kind"] == "ResourceFlavor"]
    kueue.apply(*applied)
    return {f["spec"]["nodeLabels"][PRODUCT]: f["metadata"]["name"] for f in applied if PRODUCT in f["spec"]["nodeLabels"]}


@pytest.fixture
def h100_flavor(flavors: dict[str, str]) -> str:
    return flavors[H100]


def queue_namespace(core: kubernetes.client.CoreV1Api, kueue: Kueue, flavor: str) -> str:
    """Opted in to gpu-class and managed by Kueue, with a LocalQueue `gpus` on a ClusterQueue of its own of
    QUOTA GPUs of `flavor`."""
    name = make_namespace(core, "e2e-kw", labels={"gpu-class.io/inject": "enabled", KUEUE_LABEL[0]: KUEUE_LABEL[1]})
    kueue.apply(cluster_queue(name, flavor=flavor, nominal_quota={"nvidia.com/gpu": QUOTA}))
    wait_for(f"ClusterQueue {name} active", lambda: kueue.is_active("clusterqueues", name), seconds=60)
    kueue.apply_local_queue(name, "gpus", cluster_queue_name=name)
    return name


@pytest.fixture
def queued_namespace(core: kubernetes.client.CoreV1Api, api_client: kubernetes.client.ApiClient, kueue: Kueue,
                     h100_flavor: str, fleet: None) -> Iterator[str]:
    """A queue_namespace on the H100 flavor, deleted afterwards with its workloads, Pods and ClusterQueue."""
    name = queue_namespace(core, kueue, h100_flavor)
    yield name
    objects = kubernetes.client.CustomObjectsApi(api_client)
    for kind in KINDS.values():
        kind.delete_all(api_client, objects, name)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)
    kueue.objects.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", name)


# --- the workloads, as a user writes them ------------------------------------------------------------

def pod_template(count: int, *, limit: bool, restart: str | None = None) -> dict[str, Any]:
    """The class and count, the limit only if `limit`; tolerating nothing (gpu-class adds the GPU taint's)."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/cuda:12"}
    if limit:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(count)}}
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "containers": [container]}
    if restart:
        spec["restartPolicy"] = restart
    return {"metadata": {"annotations": {"gpu-class.io/class": "high", "gpu-class.io/count": str(count)}},
            "spec": spec}


def statefulset(name: str, limit: bool) -> dict[str, Any]:
    """2 Pods x 2 GPUs, started together (no kubelet would ever make the first one Ready)."""
    template = pod_template(2, limit=limit)
    template["metadata"]["labels"] = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "labels": {QUEUE_LABEL: "gpus"}},
            "spec": {"replicas": 2, "serviceName": name, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": name}}, "template": template}}


def leaderworkerset(name: str, limit: bool) -> dict[str, Any]:
    """One group of size 2 (a leader of the leader template, its container `leader`, and a worker) x 2 GPUs."""
    leader = pod_template(2, limit=limit)
    leader["spec"]["containers"][0]["name"] = "leader"
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: "gpus"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": leader,
                                                             "workerTemplate": pod_template(2, limit=limit)}}}


def jobset(name: str, limit: bool) -> dict[str, Any]:
    """2 replicated Jobs x 2 Pods x 1 GPU. The queue's label on the Jobs too, as users copy it: JobSet
    copies it to the Jobs it creates, which must not be decided again as Jobs Kueue queues."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: "gpus"}},
            "spec": {"replicatedJobs": [{"name": rj, "replicas": 1, "template": {
                "metadata": {"labels": {QUEUE_LABEL: "gpus"}}, "spec": {
                "parallelism": 2, "completions": 2, "backoffLimit": 0,
                "template": pod_template(1, limit=limit, restart="Never")}}} for rj in ("trainer", "evaluator")]}}


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    build: Callable[[str, bool], dict[str, Any]]

    def create(self, api_client: kubernetes.client.ApiClient, namespace: str, obj: Mapping[str, Any]) -> None:
        if self.group == "apps":
            kubernetes.client.AppsV1Api(api_client).create_namespaced_stateful_set(namespace, obj)
        else:
            kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
                self.group, self.version, namespace, self.plural, obj)

    def delete_all(self, api_client: kubernetes.client.ApiClient, objects: kubernetes.client.CustomObjectsApi,
                   namespace: str) -> None:
        if self.group == "apps":
            kubernetes.client.AppsV1Api(api_client).delete_collection_namespaced_stateful_set(namespace)
        else:
            objects.delete_collection_namespaced_custom_object(self.group, self.version, namespace, self.plural)


KINDS = {
    "statefulset": Kind("StatefulSet", "apps", "v1", "statefulsets", statefulset),
    "leaderworkerset": Kind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", leaderworkerset),
    "jobset": Kind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", jobset),
}


def podset_gpus(workload: Mapping[str, Any]) -> int:
    """The GPUs Kueue counts for a Workload: each pod set's count times its template's limits."""
    return sum(ps["count"] * sum(int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", "0"))
                                 for c in ps["template"]["spec"]["containers"])
               for ps in workload["spec"]["podSets"])


@pytest.mark.parametrize("limit", [False, True], ids=["class-only", "limit-written-too"])
@pytest.mark.parametrize("kind_id", list(KINDS))
def test_a_queued_workload_is_counted_where_kueue_counts_and_never_holds_more_than_the_quota(
        core: kubernetes.client.CoreV1Api, api_client: kubernetes.client.ApiClient, kueue: Kueue,
        h100_flavor: str, queued_namespace: str, kind_id: str, limit: bool) -> None:
    ns = queued_namespace
    kind = KINDS[kind_id]
    names = [f"{kind_id[:3]}-{i}" for i in range(WORKLOADS)]
    with watching_bound_gpus(core, ns) as seen:
        for name in names:
            kind.create(api_client, ns, kind.build(name, limit))

        def settled() -> dict[str, tuple[str, int]] | None:
            bound = seen.now()
            admitted = [w for w in kueue.workloads(ns) if is_admitted(w)]
            return bound if admitted and sum(g for _, g in bound.values()) == QUOTA else None

        bound = wait_for(f"one {kind.kind} admitted and its Pods bound with {QUOTA} GPUs", settled,
                         seconds=SETTLE_SECONDS)
        # more time changes nothing: the other waits, its Pods unbound; the watch sums every change meanwhile
        time.sleep(HOLD_SECONDS)
        assert settled() == bound
        seen.assert_never_above(QUOTA)
    print(f"{kind.kind} ({'limit' if limit else 'class only'}): at most {seen.peak} GPUs bound over {seen.events} "
          f"Pod events, quota {QUOTA}")
    workloads = kueue.workloads(ns)
    admitted = [w for w in workloads if is_admitted(w)]
    # counted: Kueue's Workloads ask for what gpu-class gives, and only QUOTA of it is admitted
    assert sum(podset_gpus(w) for w in admitted) == QUOTA, [w["spec"]["podSets"] for w in admitted]
    assert all(podset_gpus(w) > 0 for w in workloads), "a Workload that counts no GPUs"
    for w in admitted:
        flavors = {a["flavors"]["nvidia.com/gpu"] for a in w["status"]["admission"]["podSetAssignments"]}
        assert flavors == {h100_flavor}
    # placed on its flavor's type
    for node, _ in bound.values():
        assert node_label(core, node, PRODUCT) == H100
    if kind_id == "leaderworkerset":
        assert_leader_decided(core, ns, bound, admitted)


def assert_leader_decided(core: kubernetes.client.CoreV1Api, namespace: str, bound: Mapping[str, tuple[str, int]],
                          admitted: list[dict[str, Any]]) -> None:
    """The leader Pod, made from the leaderTemplate (its container `leader`), was decided at the LeaderWorkerSet:
    Kueue counted its GPUs in a pod set of its own, and it holds them on a node its constraints admit, of H100."""
    (workload,) = admitted
    leader_sets = [ps for ps in workload["spec"]["podSets"]
                   if [c["name"] for c in ps["template"]["spec"]["containers"]] == ["leader"]]
    assert [podset_gpus({"spec": {"podSets": [ps]}}) for ps in leader_sets] == [2], workload["spec"]["podSets"]
    leaders = [read_pod(core, namespace, name) for name in bound]
    leaders = [p for p in leaders if [c["name"] for c in p["spec"]["containers"]] == ["leader"]]
    assert len(leaders) == 1, sorted(bound)
    (leader,) = leaders
    assert pod_gpus(leader) == 2 and leader["metadata"]["annotations"].get("gpu-class.io/class") == "high"
    node = leader["spec"]["nodeName"]
    assert node in landing_nodes(leader, read_nodes(core)) and node_label(core, node, PRODUCT) == H100, node


# --- decisions that age well ---------------------------------------------------------------------------

H200 = "NVIDIA-H200"  # class high's best type; no node of the shared fleet is one


def class_job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {QUEUE_LABEL: "gpus"}},
            "spec": {"parallelism": 1, "completions": 1, "template": pod_template(2, limit=False, restart="Never")}}


def test_a_job_queued_while_its_best_type_was_cordoned_runs_on_it_once_it_is_back(
        core: kubernetes.client.CoreV1Api, api_client: kubernetes.client.ApiClient, kueue: Kueue,
        flavors: dict[str, str]) -> None:
    """The H200 node is cordoned when the Job is queued: its template still gets H200 (first, the class's
    best), so Kueue can admit it to the H200 flavor, and its Pod binds there once the node is uncordoned."""
    node = "e2e-kw-h200"
    create_node(core, node, {PRODUCT: H200}, gpus=8)
    core.patch_node(node, {"spec": {"unschedulable": True}})
    ns = queue_namespace(core, kueue, flavors[H200])
    batch = kubernetes.client.BatchV1Api(api_client)
    try:
        def decided() -> str | None:
            # gpu-class's view holds the cordoned node once a dry run gives H200
            job = batch.create_namespaced_job(ns, class_job("probe"), dry_run="All")
            types = str(job.spec.template.metadata.annotations.get(TYPES, ""))
            return types if types.split(",")[0] == "H200" else None

        types = wait_for("a queued template to get the cordoned H200 first", decided, seconds=30)
        batch.create_namespaced_job(ns, class_job("train"))
        wait_for("the Job admitted to the H200 flavor", lambda: any(is_admitted(w) for w in kueue.workloads(ns)),
                 seconds=60)
        pod = wait_for("the Job's Pod", lambda: core.list_namespaced_pod(ns).items, seconds=60)[0]
        time.sleep(3)
        assert core.read_namespaced_pod(pod.metadata.name, ns).spec.node_name is None, "bound on a cordoned node"
        core.patch_node(node, {"spec": {"unschedulable": False}})
        assert wait_bound(core, ns, pod.metadata.name, seconds=60) == node
        print(f"queued with H200 cordoned: types {types}; bound to {node} once uncordoned")
    finally:
        batch.delete_collection_namespaced_job(ns, propagation_policy="Background")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        core.delete_namespace(ns)
        kueue.objects.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", ns)
        delete_nodes(core, [node])


# --- a template edited after Kueue counted it ----------------------------------------------------------

def _read(api_client: kubernetes.client.ApiClient, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
    if kind.group == "apps":
        response = kubernetes.client.AppsV1Api(api_client).read_namespaced_stateful_set(
            name, namespace, _preload_content=False)
        return yaml.safe_load(response.data)  # type: ignore[no-any-return]
    return kubernetes.client.CustomObjectsApi(api_client).get_namespaced_custom_object(  # type: ignore[no-any-return]
        kind.group, kind.version, namespace, kind.plural, name)


def _replace(api_client: kubernetes.client.ApiClient, kind: Kind, namespace: str, obj: Mapping[str, Any]) -> None:
    name = obj["metadata"]["name"]
    if kind.group == "apps":
        kubernetes.client.AppsV1Api(api_client).replace_namespaced_stateful_set(name, namespace, obj)
    else:
        kubernetes.client.CustomObjectsApi(api_client).replace_namespaced_custom_object(
            kind.group, kind.version, namespace, kind.plural, name, obj)


def _templates(kind: Kind, obj: dict[str, Any]) -> list[dict[str, Any]]:
    if kind.group == "apps":
        return [obj["spec"]["template"]]
    lws = obj["spec"]["leaderWorkerTemplate"]
    return [lws["workerTemplate"], *([lws["leaderTemplate"]] if "leaderTemplate" in lws else [])]


@pytest.mark.parametrize("kind_id", ["statefulset", "leaderworkerset"])
def test_a_queued_workloads_gpus_do_not_change_after_kueue_counted_them(
        core: kubernetes.client.CoreV1Api, api_client: kubernetes.client.ApiClient, kueue: Kueue,
        queued_namespace: str, kind_id: str) -> None:
    """Kueue builds the Workload once and compares only container requests on update: a template whose GPU
    limit grew would run more GPUs than counted. The edit is refused; the Pods run what the Workload counts."""
    ns, kind = queued_namespace, KINDS[kind_id]
    name = f"{kind_id[:3]}-edited"
    with watching_bound_gpus(core, ns) as seen:
        kind.create(api_client, ns, kind.build(name, True))

        def counted_and_bound() -> tuple[int, dict[str, tuple[str, int]]] | None:
            admitted = [w for w in kueue.workloads(ns) if is_admitted(w)]
            bound = seen.now()
            return (sum(podset_gpus(w) for w in admitted), bound) if admitted and len(bound) == 2 else None

        counted, bound = wait_for(f"{kind.kind} admitted and its 2 Pods bound", counted_and_bound,
                                  seconds=SETTLE_SECONDS)
        assert counted == sum(g for _, g in bound.values()) == QUOTA

        obj = _read(api_client, kind, ns, name)
        for template in _templates(kind, obj):
            template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
        with pytest.raises(kubernetes.client.exceptions.ApiException) as refused:
            _replace(api_client, kind, ns, obj)
        assert refused.value.status == 403 and "gpu-class.io-queued-gpus" in refused.value.body, refused.value.body

        # a change of anything else goes through, and nothing runs more GPUs than Kueue counts, at any event
        obj = _read(api_client, kind, ns, name)
        for template in _templates(kind, obj):
            template["metadata"].setdefault("annotations", {})["example.com/note"] = "edited"
        _replace(api_client, kind, ns, obj)
        time.sleep(HOLD_SECONDS)
        counted, bound = wait_for("the Workload and Pods again", counted_and_bound, seconds=SETTLE_SECONDS)
        assert all(g == 2 for _, g in bound.values()), bound
        assert counted == QUOTA
        seen.assert_never_above(counted)
