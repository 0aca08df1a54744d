"""gpu-class beside a real Kueue (tests/e2e/kueue.py) on the local control plane: GPU quota never bypassed,
Kueue's flavor and the class always agree (docs/users/kueue.md).

The `kueue` fixture starts Kueue once for the module. The first test keeps gpu-class out (its namespace
carries Kueue's label only, not gpu-class's opt-in): it proves the harness and Kueue's own admission.
The others run Jobs and Pods that carry only the class through both.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any, Iterator, Mapping, Sequence

import kubernetes
import pytest
import yaml

import local_cluster
from fleet import TYPE_OF
from gpu_watch import watching_bound_gpus
from kubeobjects import (TYPES, create_node, delete_if_present, delete_nodes, dry_run_create, make_namespace, node_label,
                         read_pod, wait_bound, wait_for)
from kueue import QUEUE_LABEL, Kueue, is_admitted, local_queue, running_kueue
from landing import escapes, landing_nodes, read_nodes
from webhook.core.catalog.loading import load_default_catalog

KUEUE_LABEL = ("gpu-class.io/e2e-kueue", "enabled")
H100 = "NVIDIA-H100-80GB-HBM3"
FLAVOR = "e2e-kueue-default"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@pytest.fixture(scope="module")
def kueue(cluster: local_cluster.Cluster) -> Iterator[Kueue]:
    """Kueue for the module, managing namespaces labelled KUEUE_LABEL."""
    with running_kueue(cluster, namespace_label=KUEUE_LABEL) as running:
        yield running


@pytest.fixture(scope="module")
def batch(api_client: kubernetes.client.ApiClient) -> kubernetes.client.BatchV1Api:
    return kubernetes.client.BatchV1Api(api_client)


@pytest.fixture
def kueue_namespace(core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api,
                    kueue: Kueue) -> Iterator[str]:
    """A namespace Kueue manages and gpu-class does not, deleted afterwards with its Jobs and Pods."""
    name = make_namespace(core, "e2e-kueue", labels=dict([KUEUE_LABEL]))
    yield name
    batch.delete_collection_namespaced_job(name, propagation_policy="Background")
    # No kubelet confirms a bound Pod's end: delete them now.
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)


@pytest.fixture
def gpu_nodes(core: kubernetes.client.CoreV1Api, kueue_namespace: str) -> Iterator[list[str]]:
    names = [f"{kueue_namespace}-h100-{i}" for i in range(2)]
    for name in names:
        create_node(core, name, {"nvidia.com/gpu.product": H100}, gpus=8)
    yield names
    delete_nodes(core, names)


def gpu_job(name: str, *, queue: str, gpus: int, nodes: Sequence[str]) -> dict[str, Any]:
    """A Job of one Pod asking `gpus` GPUs (a limit, as users write it), for the queue `queue`, that
    tolerates the GPU taint and may run on `nodes` only (the session's other nodes are other tests')."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]}]}}},
            # Nothing runs (no kubelets): the image is only a name.
            "containers": [{"name": "main", "image": "registry.example/cuda:12",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        }}},
    }


def bound_node(core: kubernetes.client.CoreV1Api, namespace: str, job: str) -> str | None:
    pods = core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job}").items
    return next((p.spec.node_name for p in pods if p.spec and p.spec.node_name), None)


def is_suspended(batch: kubernetes.client.BatchV1Api, namespace: str, job: str) -> bool:
    spec = batch.read_namespaced_job(job, namespace).spec
    return bool(spec and spec.suspend)


def quota_refusal(workload: dict[str, Any] | None) -> str:
    """Kueue's reason for not reserving quota, once it has tried: the message of QuotaReserved=False."""
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "QuotaReserved" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return ""


def test_cluster_queue_quota_admits_one_gpu_job_at_a_time(
        kueue: Kueue, core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api,
        kueue_namespace: str, gpu_nodes: list[str]) -> None:
    ns = kueue_namespace
    queue = "gpus"
    kueue.apply_resource_flavor(FLAVOR)
    kueue.apply_cluster_queue(ns, flavor=FLAVOR, nominal_quota={"nvidia.com/gpu": 2})
    kueue.apply_local_queue(ns, queue, cluster_queue_name=ns)
    wait_for(f"ClusterQueue {ns} active", lambda: kueue.is_active("clusterqueues", ns))

    jobs = ("first", "second")
    for name in jobs:
        job = gpu_job(name, queue=queue, gpus=2, nodes=gpu_nodes)
        created = batch.create_namespaced_job(ns, job)  # type: ignore[arg-type]  # (it takes the JSON form too)
        # as stored: Kueue may admit it the moment after
        assert created.spec and created.spec.suspend, f"Kueue's webhook did not suspend Job {name} on create"

    def admitted() -> list[str]:
        return [name for name in jobs if is_admitted(kueue.workload_of(ns, "Job", name) or {})]

    # Quota for one of them: which one is Kueue's choice.
    running = wait_for("one Workload admitted", admitted, seconds=60)[0]
    waiting = next(name for name in jobs if name != running)
    node = wait_for(f"the Pod of admitted Job {running} bound", lambda: bound_node(core, ns, running), seconds=60)
    assert node in gpu_nodes
    assert not is_suspended(batch, ns, running)

    refusal = wait_for(f"Kueue's refusal of Job {waiting}'s quota",
                       lambda: quota_refusal(kueue.workload_of(ns, "Job", waiting)), seconds=60)
    assert "insufficient unused quota for nvidia.com/gpu" in refusal, refusal
    assert admitted() == [running], kueue.log_tail()
    assert is_suspended(batch, ns, waiting)
    assert bound_node(core, ns, waiting) is None

    # The first Job gone (its Pod deleted now: no kubelet confirms it), its quota goes to the second.
    batch.delete_namespaced_job(running, ns, propagation_policy="Background")
    core.delete_collection_namespaced_pod(ns, label_selector=f"{JOB_NAME_LABEL}={running}", grace_period_seconds=0)
    wait_for(f"Workload of Job {waiting} admitted", lambda: admitted() == [waiting], seconds=60)
    wait_for(f"Job {waiting} unsuspended", lambda: not is_suspended(batch, ns, waiting))
    assert wait_for(f"the Pod of Job {waiting} bound", lambda: bound_node(core, ns, waiting), seconds=60) in gpu_nodes


# --- gpu-class beside Kueue ------------------------------------------------------------------------
# The namespaces below are opted in to gpu-class and managed by Kueue; the GPU nodes are the shared
# fleet's (fleet.py: H100 and A100-40GB among them) and whatever else the session holds, so what a
# class can take is read from what gpu-class wrote, never assumed.

PRODUCT = "nvidia.com/gpu.product"
PODSET_LABEL = "kueue.x-k8s.io/podset"
QUOTA = 4  # GPUs of each flavor in the queues `gpuclass kueue` prints here


@pytest.fixture(scope="module")
def class_queues(kueue: Kueue) -> dict[str, dict[str, Any]]:
    """What `gpuclass kueue --quota QUOTA` prints, applied: every flavor, and a ClusterQueue per class."""
    printed = subprocess.run([local_cluster.gpuclass_path(), "kueue", "--quota", str(QUOTA)], capture_output=True,
                             text=True, check=True).stdout
    objects = [o for o in yaml.safe_load_all(printed) if o]
    kueue.apply(*objects)
    queues = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterQueue"}
    for name in ("gpu-class-high", "gpu-class-economy"):
        wait_for(f"ClusterQueue {name} to be active", lambda name=name: kueue.is_active("clusterqueues", name),
                 seconds=60)
    flavors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"}
    return {"queues": queues, "flavors": flavors}


@pytest.fixture
def placed_namespace(core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, kueue: Kueue,
                     class_queues: dict[str, Any], fleet: None) -> Iterator[str]:
    """Opted in to gpu-class and managed by Kueue, with LocalQueues `high` and `economy` on the class queues."""
    name = make_namespace(core, "e2e-kq", labels={"gpu-class.io/inject": "enabled", KUEUE_LABEL[0]: KUEUE_LABEL[1]})
    for queue in ("high", "economy"):
        kueue.apply_local_queue(name, queue, cluster_queue_name=f"gpu-class-{queue}")
        wait_for(f"LocalQueue {queue}", lambda queue=queue: (kueue.get("localqueues", queue, name) or {}).get(
            "status", {}).get("conditions"), seconds=30)
    yield name
    batch.delete_collection_namespaced_job(name, propagation_policy="Background")
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)


def class_job(name: str, *, gpu_class: str, count: int, queue: str, limit: bool = False) -> dict[str, Any]:
    """A Job of one Pod as a user writes it for gpu-class: the class and count, the limit only if `limit`."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/cuda:12"}
    if limit:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(count)}}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {"parallelism": 1, "completions": 1, "template": {
            "metadata": {"annotations": {"gpu-class.io/class": gpu_class, "gpu-class.io/count": str(count)}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}}},
    }


def wire(obj: Any) -> dict[str, Any]:
    """A client model as the API server wrote it (camelCase keys, no nulls)."""
    result: dict[str, Any] = kubernetes.client.ApiClient().sanitize_for_serialization(obj)
    return result


def required_products(template_spec: Mapping[str, Any]) -> set[str]:
    terms = template_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {v for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"] if e["key"] == PRODUCT
            for v in e["values"]}


def flavor_product(class_queues: Mapping[str, Any], flavor: str) -> str:
    return str(class_queues["flavors"][flavor]["spec"]["nodeLabels"][PRODUCT])


def quota_for(class_queues: Mapping[str, Any], queue: str, products: set[str]) -> int:
    """The GPUs a class's queue can admit for a pod set whose affinity allows `products`: Kueue assigns
    only the flavors whose nodeLabels the affinity admits."""
    (group,) = class_queues["queues"][queue]["spec"]["resourceGroups"]
    return sum(QUOTA for f in group["flavors"] if flavor_product(class_queues, f["name"]) in products)


def assigned_flavor(workload: Mapping[str, Any], podset: str = "main") -> str | None:
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        if assignment["name"] == podset:
            return str(assignment["flavors"]["nvidia.com/gpu"])
    return None


@pytest.mark.parametrize("limit", [False, True], ids=["class-only", "limit-written-too"])
def test_queued_class_jobs_never_hold_more_gpus_than_the_quota_and_bind_on_their_flavor(
        core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, kueue: Kueue,
        class_queues: dict[str, Any], placed_namespace: str, limit: bool) -> None:
    ns = placed_namespace
    batch.create_namespaced_job(ns, class_job("probe", gpu_class="high", count=2, queue="high", limit=limit))
    spec = wire(batch.read_namespaced_job("probe", ns))["spec"]
    # decided at the Job, where Kueue counts it
    assert spec["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert spec["template"]["metadata"]["annotations"]["gpu-class.io/types"], spec["template"]
    quota = quota_for(class_queues, "gpu-class-high", required_products(spec["template"]["spec"]))
    assert quota >= 4, f"the fleet gives class high two flavors at least, got {quota} GPUs"
    jobs = ["probe"] + [f"train-{i}" for i in range(quota // 2 + 1)]  # two more than the quota holds
    with watching_bound_gpus(core, ns) as seen:
        for name in jobs[1:]:
            batch.create_namespaced_job(ns, class_job(name, gpu_class="high", count=2, queue="high", limit=limit))

        def settled() -> dict[str, tuple[str, int]] | None:
            bound = seen.now()
            admitted = [w for w in kueue.workloads(ns) if is_admitted(w)]
            return bound if len(admitted) == quota // 2 and len(bound) == quota // 2 else None

        bound = wait_for(f"{quota // 2} Jobs admitted and their Pods bound", settled, seconds=60)
        # more time changes nothing: the rest wait suspended, their Workloads not admitted
        time.sleep(5)
        assert settled() == bound
        suspended = [j for j in jobs if batch.read_namespaced_job(j, ns).spec.suspend]
        assert len(suspended) == len(jobs) - quota // 2
        # each Pod on the type of the flavor its Workload was admitted to
        for pod_name, (node, gpus) in bound.items():
            pod = core.read_namespaced_pod(pod_name, ns)
            job = pod.metadata.labels[JOB_NAME_LABEL]
            flavor = assigned_flavor(kueue.workload_of(ns, "Job", job) or {})
            assert flavor is not None and gpus == 2
            assert node_label(core, node, PRODUCT) == flavor_product(class_queues, flavor)
            assert pod.metadata.labels[PODSET_LABEL] == "main"
        # one admitted Job goes: the next one is admitted and binds, still within the quota
        first = next(iter(bound))
        batch.delete_namespaced_job(core.read_namespaced_pod(first, ns).metadata.labels[JOB_NAME_LABEL], ns,
                                    propagation_policy="Background")
        # the garbage collector deletes the Job's Pods too, at once (no grace period): whichever comes first
        delete_if_present(lambda: core.delete_namespaced_pod(first, ns, grace_period_seconds=0))
        after = wait_for("the next Job admitted and bound in its place",
                         lambda: (b := settled()) is not None and first not in b and b, seconds=60)
        assert len(after) == quota // 2
        # at every Pod event, never more than the quota bound
        seen.assert_never_above(quota)
    print(f"\nat most {seen.peak} GPUs bound over {seen.events} Pod events, quota {quota}")


def test_plain_pods_and_a_pod_group_are_counted_as_gpu_class_placed_them(
        core: kubernetes.client.CoreV1Api, kueue: Kueue, class_queues: dict[str, Any], placed_namespace: str) -> None:
    ns = placed_namespace

    def pod(name: str, count: int, group: str | None = None) -> dict[str, Any]:
        labels = {QUEUE_LABEL: "high", **({"kueue.x-k8s.io/pod-group-name": group} if group else {})}
        annotations = {"gpu-class.io/class": "high", "gpu-class.io/count": str(count),
                       **({"kueue.x-k8s.io/pod-group-total-count": "2"} if group else {})}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels,
                                                                "annotations": annotations},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": "registry.example/cuda:12"}]}}

    # a pod group of two roles: 1 GPU and 2 GPUs. gpu-class runs before Kueue's webhook, so the role
    # hash Kueue computes sees the GPUs: two pod sets
    for name, count in (("role-a", 1), ("role-b", 2)):
        core.create_namespaced_pod(ns, pod(name, count, group="pair"))
    hashes = {core.read_namespaced_pod(n, ns).metadata.annotations["kueue.x-k8s.io/role-hash"]
              for n in ("role-a", "role-b")}
    assert len(hashes) == 2
    workload = wait_for("the pod group's Workload admitted", lambda: next(
        (w for w in kueue.workloads(ns) if is_admitted(w) and len(w["spec"]["podSets"]) == 2), None), seconds=60)
    asked = sorted(int(ps["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                   for ps in workload["spec"]["podSets"])
    assert asked == [1, 2]
    for name in ("role-a", "role-b"):
        node = wait_bound(core, ns, name, seconds=60)
        podset = next(ps["name"] for ps in workload["spec"]["podSets"]
                      if ps["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] ==
                      core.read_namespaced_pod(name, ns).spec.containers[0].resources.limits["nvidia.com/gpu"])
        flavor = assigned_flavor(workload, podset)
        assert flavor is not None and node_label(core, node, PRODUCT) == flavor_product(class_queues, flavor)

    # plain Pods of 2 GPUs each: as many start as the quota left in each flavor holds, the others stay gated
    products = required_products(wire(core.read_namespaced_pod("role-b", ns))["spec"])
    (group,) = class_queues["queues"]["gpu-class-high"]["spec"]["resourceGroups"]
    left = {f["name"]: QUOTA for f in group["flavors"] if flavor_product(class_queues, f["name"]) in products}
    for ps in workload["spec"]["podSets"]:
        left[str(assigned_flavor(workload, ps["name"]))] -= int(
            ps["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    fit = sum(v // 2 for v in left.values())
    assert fit >= 1, left
    singles = [f"single-{i}" for i in range(fit + 2)]
    with watching_bound_gpus(core, ns) as seen:
        for name in singles:
            core.create_namespaced_pod(ns, pod(name, 2))

        def started() -> list[str] | None:
            singles_bound = [n for n in singles if n in seen.now()]
            return singles_bound if len(singles_bound) == fit else None

        wait_for(f"{fit} of the plain Pods started", started, seconds=60)
        gated = [n for n in singles if core.read_namespaced_pod(n, ns).spec.scheduling_gates]
        assert len(gated) == len(singles) - fit
        seen.assert_never_above(3 + 2 * fit)


def test_a_class_is_admitted_only_to_flavors_of_its_types_in_a_shared_queue(
        core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, kueue: Kueue,
        class_queues: dict[str, Any], placed_namespace: str) -> None:
    """One queue for every class, T4's flavor first: a `high` Job never gets it (T4 is not in high), an
    `economy` Job does (T4 is economy's slowest, its first)."""
    ns = placed_namespace
    t4 = next(n for n, f in class_queues["flavors"].items() if "T4" in f["metadata"]["annotations"]["gpu-class.io/types"]
              .split(",") and f["spec"]["nodeLabels"][PRODUCT] == node_label(core, "e2e-t4", PRODUCT))
    h100 = next(n for n, f in class_queues["flavors"].items() if f["spec"]["nodeLabels"][PRODUCT] ==
                node_label(core, "e2e-h100-big", PRODUCT))
    shared = f"{ns}-shared"
    kueue.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": shared},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                          "flavors": [{"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}
                                      for f in (t4, h100)]}]}})
    wait_for("the shared ClusterQueue active", lambda: kueue.is_active("clusterqueues", shared), seconds=60)
    kueue.apply_local_queue(ns, "shared", cluster_queue_name=shared)
    for name, gpu_class in (("fast", "high"), ("cheap", "economy")):
        batch.create_namespaced_job(ns, class_job(name, gpu_class=gpu_class, count=1, queue="shared"))
    for name, flavor in (("fast", h100), ("cheap", t4)):
        workload = wait_for(f"{name}'s Workload admitted", lambda name=name: next(
            (w for w in [kueue.workload_of(ns, "Job", name)] if w and is_admitted(w)), None), seconds=60)
        assert assigned_flavor(workload) == flavor
        pod = wait_for(f"{name}'s Pod", lambda name=name: core.list_namespaced_pod(
            ns, label_selector=f"{JOB_NAME_LABEL}={name}").items, seconds=60)[0]
        node = wait_bound(core, ns, pod.metadata.name, seconds=60)
        assert node_label(core, node, PRODUCT) == flavor_product(class_queues, flavor)


def test_a_kueue_started_pod_gpu_class_did_not_decide_at_its_job_is_refused(
        core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, kueue: Kueue,
        class_queues: dict[str, Any], fleet: None) -> None:
    """A Job queued before its namespace opted in to gpu-class: Kueue counted no GPUs for its template.
    Once it starts, its Pod asks gpu-class for GPUs the quota never counted, and is refused."""
    ns = make_namespace(core, "e2e-kq-late", labels={KUEUE_LABEL[0]: KUEUE_LABEL[1]})
    try:
        kueue.apply({**local_queue(ns, "high", cluster_queue_name="gpu-class-high"), "spec": {
            "clusterQueue": "gpu-class-high", "stopPolicy": "Hold"}})
        batch.create_namespaced_job(ns, class_job("late", gpu_class="high", count=2, queue="high"))
        container = wire(batch.read_namespaced_job("late", ns))["spec"]["template"]["spec"]["containers"][0]
        assert "limits" not in container.get("resources", {}), "queued before the opt-in: no GPUs in the template"
        core.patch_namespace(ns, {"metadata": {"labels": {"gpu-class.io/inject": "enabled"}}})
        # gpu-class's own view must hold the opt-in before Kueue lets the Job start
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "annotations": {
            "gpu-class.io/class": "high"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        wait_for("gpu-class to see the namespace opted in", lambda: TYPES in (dry_run_create(core, ns, probe).get(
            "metadata", {}).get("annotations") or {}), seconds=30)
        kueue.apply(local_queue(ns, "high", cluster_queue_name="gpu-class-high"))  # stopPolicy back to None
        wait_for("the Job started by Kueue", lambda: batch.read_namespaced_job("late", ns).spec.suspend is False,
                 seconds=60)
        events = wait_for("the Job controller's FailedCreate with gpu-class's refusal", lambda: [
            e.message for e in core.list_namespaced_event(ns, field_selector="involvedObject.name=late").items
            if e.reason == "FailedCreate" and "counted its quota from the pod template" in (e.message or "")],
            seconds=60)
        assert "write the limit (nvidia.com/gpu: 2) in the workload's pod template" in events[0]
        assert core.list_namespaced_pod(ns).items == []
    finally:
        batch.delete_collection_namespaced_job(ns, propagation_policy="Background")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        core.delete_namespace(ns)


ECONOMY_TYPES = set(load_default_catalog().classes["economy"].types)  # what the e2e webhook serves
H100_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": [H100]}]}]}}}


def test_forged_marks_beside_kueue_get_a_tenant_nothing_outside_its_namespaces_class(
        core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, kueue: Kueue,
        class_queues: dict[str, Any], fleet: None) -> None:
    """A namespace allowed only economy, with a LocalQueue on class high's ClusterQueue (Kueue's quota would
    let it run there) beside one on economy's: Kueue's marks and gpu-class's types, written by the tenant on a
    queued Job's template and on a queued Pod, with an affinity for H100, are refused by Kueue for want of a
    flavor their affinity admits and never admitted, while an honest economy Job of the same namespace is admitted
    and binds on its flavor's type."""
    ns = make_namespace(core, "e2e-kq-tenant", labels={
        "gpu-class.io/inject": "enabled", "gpu-class.io/default-class": "economy", KUEUE_LABEL[0]: KUEUE_LABEL[1]},
        annotations={"gpu-class.io/allowed-classes": "economy"})
    try:
        for queue in ("high", "economy"):
            kueue.apply(local_queue(ns, queue, cluster_queue_name=f"gpu-class-{queue}"))
            wait_for(f"LocalQueue {queue}", lambda queue=queue: (kueue.get("localqueues", queue, ns) or {}).get(
                "status", {}).get("conditions"), seconds=30)
        with pytest.raises(kubernetes.client.ApiException) as refused:
            batch.create_namespaced_job(ns, class_job("high", gpu_class="high", count=1, queue="high"))
        assert refused.value.status == 403 and "not allowed in namespace" in refused.value.body

        # the limit written: Kueue's podset label on a template without one is refused outright
        job = class_job("forged", gpu_class="economy", count=1, queue="high", limit=True)
        template = job["spec"]["template"]
        template["metadata"]["labels"] = {PODSET_LABEL: "main"}
        template["metadata"]["annotations"][TYPES] = "H100"
        template["spec"]["affinity"] = H100_AFFINITY
        batch.create_namespaced_job(ns, job)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "forged-pod", "labels": {QUEUE_LABEL: "high", PODSET_LABEL: "main"},
            "annotations": {TYPES: "H100"}}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "affinity": H100_AFFINITY,
            "containers": [{"name": "main", "image": "registry.example/cuda:12",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        core.create_namespaced_pod(ns, pod)
        batch.create_namespaced_job(ns, class_job("honest", gpu_class="economy", count=1, queue="economy"))

        # the honest one: admitted to an economy flavor, its Pod bound on that flavor's type, where it may land
        honest = wait_for("the honest Job's Workload admitted", lambda: next(
            (w for w in [kueue.workload_of(ns, "Job", "honest")] if w and is_admitted(w)), None), seconds=60)
        flavor = assigned_flavor(honest)
        assert flavor in {f["name"] for g in class_queues["queues"]["gpu-class-economy"]["spec"]["resourceGroups"]
                          for f in g["flavors"]}, flavor
        honest_pod = wait_for("the honest Job's Pod", lambda: core.list_namespaced_pod(
            ns, label_selector=f"{JOB_NAME_LABEL}=honest").items, seconds=60)[0].metadata.name
        node = wait_bound(core, ns, honest_pod, seconds=60)
        assert node_label(core, node, PRODUCT) == flavor_product(class_queues, flavor)
        assert TYPE_OF.get(node) in ECONOMY_TYPES and node in landing_nodes(read_pod(core, ns, honest_pod),
                                                                             read_nodes(core))

        # the forged ones: each Workload refused with Kueue's word for it, none admitted
        forged = {"Job": "forged", "Pod": "forged-pod"}
        refusals = {kind: wait_for(f"Kueue's refusal of the forged {kind}", lambda kind=kind, name=name: quota_refusal(
            kueue.workload_of(ns, kind, name)), seconds=60) for kind, name in forged.items()}
        # every H100 flavor of the queue refused for the affinity gpu-class kept, not for want of quota
        labels = {name: f["spec"]["nodeLabels"] for name, f in class_queues["flavors"].items()}
        h100_flavors = [f["name"] for g in class_queues["queues"]["gpu-class-high"]["spec"]["resourceGroups"]
                        for f in g["flavors"] if labels[f["name"]].get(PRODUCT) == H100]
        assert h100_flavors
        for kind, message in refusals.items():
            assert message.startswith("couldn't assign flavors to pod set main") and all(
                f"flavor {f} doesn't match node affinity" in message for f in h100_flavors), (kind, message)
        print("\nKueue's refusals of the forged workloads: " + ", ".join(
            f"{kind}: {m.count('node affinity')} flavors not matching its affinity" for kind, m in refusals.items()))
        assert not any(is_admitted(kueue.workload_of(ns, kind, name) or {}) for kind, name in forged.items())
        assert is_suspended(batch, ns, "forged") and not core.list_namespaced_pod(
            ns, label_selector=f"{JOB_NAME_LABEL}=forged").items
        held = read_pod(core, ns, "forged-pod")
        assert held["spec"].get("schedulingGates") and not held["spec"].get("nodeName"), held["spec"]
        assert not escapes(held, read_nodes(core), ECONOMY_TYPES), held["spec"].get("affinity")
    finally:
        batch.delete_collection_namespaced_job(ns, propagation_policy="Background")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        core.delete_namespace(ns)


# --- many tenants: one cohort, each GPU promised once ------------------------------------------------


def cohort_quota(cohort: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(flavor, resource) -> nominalQuota of a Cohort."""
    return {(f["name"], r["name"]): int(r["nominalQuota"]) for g in (cohort.get("spec") or {}).get(
        "resourceGroups", []) for f in g["flavors"] for r in f["resources"]}


def node_devices(core: kubernetes.client.CoreV1Api, node_labels: Mapping[str, str], resource: str) -> int:
    """The devices of `resource` Pods could be given on the nodes a flavor's nodeLabels select, as the API server
    holds them now: on nodes Ready, not cordoned, and without a NoSchedule or NoExecute taint but the GPU's."""
    gpu_taints = set(load_default_catalog().gpu_taint_keys)

    def usable(node: Any) -> bool:
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        reserved = [t for t in node.spec.taints or [] if t.effect in ("NoSchedule", "NoExecute")
                    and t.key not in gpu_taints]
        return ready and not node.spec.unschedulable and not reserved

    selector = ",".join(f"{k}={v}" for k, v in node_labels.items())
    return sum(int((n.status.allocatable or {}).get(resource, "0"))
               for n in core.list_node(label_selector=selector).items if usable(n))


def test_three_tenants_share_one_cohort_whose_quotas_add_up_to_the_cluster_gpus(
        core: kubernetes.client.CoreV1Api, batch: kubernetes.client.BatchV1Api, kueue: Kueue,
        cluster: local_cluster.Cluster, fleet: None) -> None:
    """`gpuclass kueue --kubeconfig ... --tenant` x3, applied to the real Kueue: every GPU of the cluster
    promised once over the tenants' cohorts, and one tenant alone borrows the others' unused share, never
    more than exists."""
    labels = {"gpu-class.io/inject": "enabled", KUEUE_LABEL[0]: KUEUE_LABEL[1]}
    namespaces = {t: make_namespace(core, f"e2e-kt-{t}", labels=labels) for t in ("vision", "nlp", "speech")}
    root = f"e2e-kt-{namespaces['vision'].rsplit('-', 1)[1]}"
    try:
        printed = subprocess.run(
            [local_cluster.gpuclass_path(), "kueue", "--kubeconfig", str(cluster.kubeconfig), "--cohort", root,
             *(a for t, ns in namespaces.items() for a in ("--tenant", f"{t}={ns}"))],
            capture_output=True, text=True, check=True).stdout
        objects = [o for o in yaml.safe_load_all(printed) if o]
        kueue.apply(*objects)
        flavors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"}
        queues = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterQueue"}
        for name in queues:
            wait_for(f"ClusterQueue {name} active", lambda name=name: kueue.is_active("clusterqueues", name),
                     seconds=60)
        # as Kueue holds them: one root, a cohort per tenant under it, whose quotas add up to the nodes' devices
        cohorts = {t: kueue.get("cohorts", f"{root}-{t}") or {} for t in namespaces}
        assert (kueue.get("cohorts", root) or {}).get("spec", {}).get("resourceGroups") is None
        assert {c["spec"]["parentName"] for c in cohorts.values()} == {root}
        summed: dict[tuple[str, str], int] = {}
        for c in cohorts.values():
            for key, quota in cohort_quota(c).items():
                summed[key] = summed.get(key, 0) + quota
        assert summed == {(f, r): node_devices(core, flavors[f]["spec"]["nodeLabels"], r) for f, r in summed}
        fleet_products = {node_label(core, n, PRODUCT) for n in ("e2e-h100-big", "e2e-a100", "e2e-t4")}
        assert fleet_products <= {v for f in flavors.values() for v in f["spec"]["nodeLabels"].values()}

        # vision alone: its class-high Jobs of 2 GPUs borrow what nlp and speech leave, up to what exists
        ns = namespaces["vision"]
        batch.create_namespaced_job(ns, class_job("probe", gpu_class="high", count=2, queue="high"))
        spec = wire(batch.read_namespaced_job("probe", ns))["spec"]
        products = required_products(spec["template"]["spec"])
        (group,) = queues[f"{root}-vision-high"]["spec"]["resourceGroups"]
        usable = [f["name"] for f in group["flavors"] if flavors[f["name"]]["spec"]["nodeLabels"].get(PRODUCT)
                  in products]
        total = sum(summed.get((f, "nvidia.com/gpu"), 0) for f in usable)
        own = sum(cohort_quota(cohorts["vision"]).get((f, "nvidia.com/gpu"), 0) for f in usable)
        assert total > own + 2, f"the fleet gives class high more than vision's own share: {total} vs {own}"
        jobs = ["probe"] + [f"train-{i}" for i in range(total // 2)]  # one more than the cohort holds
        with watching_bound_gpus(core, ns) as seen:
            for name in jobs[1:]:
                batch.create_namespaced_job(ns, class_job(name, gpu_class="high", count=2, queue="high"))

            def admitted_gpus() -> int | None:
                admitted = [w for w in kueue.workloads(ns) if is_admitted(w)]
                return 2 * len(admitted) if len(admitted) == total // 2 else None

            # more than vision's own share: borrowed from the other tenants' cohorts
            assert wait_for(f"{total // 2} Jobs admitted (vision's own share: {own} GPUs)", admitted_gpus,
                            seconds=90) > own
            time.sleep(5)  # and no more: the last Job waits
            assert admitted_gpus() == 2 * (total // 2)
            assert len([j for j in jobs if is_suspended(batch, ns, j)]) == 1
            seen.assert_never_above(total)  # more GPUs bound than exist for the class, at any Pod event
    finally:
        for ns in namespaces.values():
            batch.delete_collection_namespaced_job(ns, propagation_policy="Background")
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            core.delete_namespace(ns)
