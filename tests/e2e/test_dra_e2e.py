"""GPUs published through Dynamic Resource Allocation, on the real control plane: the scheduler allocates.

No DRA driver runs: the ResourceSlices and DeviceClasses are made by hand as NVIDIA's and AMD's
drivers publish them (tests/fixtures/dra, builders). The webhook keeps the Pod's nvidia.com/gpu (or
amd.com/gpu) limit and names the nodes of the types it allows; kube-scheduler serves the limit from
DRA devices through the DeviceClass's extendedResourceName, allocates them in a ResourceClaim it
makes for the Pod, and the tests read that claim's status.allocation.

The types used here (H200, H100-NVL; AMD's MI300X) are on no other test's nodes. The shared fleet's
device-plugin GPUs, when present, are of the same classes; a Pod that must land on a test's own nodes
excludes the other types of its class (`only`). kube-scheduler learns of a new slice or DeviceClass
from its own watch, a moment after the webhook may have: without the exclusion, a Pod created in that
moment goes, rightly for what the scheduler knew, to a fleet node of a lesser type.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator, Mapping

import kubernetes
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

import local_cluster
from builders import (
    AMD_DRIVER, COMPUTE_DOMAIN_DRIVER, NVIDIA_DRIVER, amd_device_class, amd_gpus, channel_claim_template,
    compute_domain_device_classes, compute_domain_devices, dra_fixture, make_claim_template, make_slice,
    nvidia_device_classes, nvidia_gpus,
)
from kubeobjects import (
    GPU_TAINT, TYPES, create_node, delete_if_present, delete_nodes, dry_run_create, expired_restarts,
    force_delete_pods, make_pod, read_by_every_worker, read_pod, wait_bound, wait_for, webhook_metrics,
)
from test_fidelity_e2e import samples
from webhook.cluster.reflector import OFF_RECHECK_SECONDS
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.admission.annotations import EXCLUDE_ANNOTATION as EXCLUDE_TYPES

H200, H100_NVL = "NVIDIA H200", "NVIDIA H100 NVL"
GFD_H100_NVL = {"nvidia.com/gpu.product": "NVIDIA-H100-NVL", "nvidia.com/gpu.memory": "95830"}
AMD_TAINT = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}
# how the API server passes on the webhook's own refusal
WEBHOOK_REFUSAL = 'admission webhook "pods.gpu-class.io" denied the request: '
SCHEDULERS = {"strict-profiles": local_cluster.STRICT_SCHEDULER, "with-extender": local_cluster.EXTENDER_SCHEDULER}


def only(gpu_class: str, *types: str) -> dict[str, str]:
    """The annotation that leaves a Pod of `gpu_class` nothing but `types`, in the class's order."""
    others = [t for t in load_default_catalog().classes[gpu_class].types if t not in types]
    return {EXCLUDE_TYPES: ",".join(others)}


@pytest.fixture(scope="module")
def resource_api(api_client: kubernetes.client.ApiClient) -> kubernetes.client.ResourceV1Api:
    return kubernetes.client.ResourceV1Api(api_client)


@pytest.fixture(scope="module")
def nvidia_classes(resource_api: kubernetes.client.ResourceV1Api) -> Iterator[None]:
    """NVIDIA's DeviceClasses as its chart installs them: gpu.nvidia.com maps nvidia.com/gpu."""
    classes = nvidia_device_classes()
    for c in classes:
        delete_if_present(resource_api.delete_device_class, c["metadata"]["name"])
        resource_api.create_device_class(c)
    yield
    for c in classes:
        delete_if_present(resource_api.delete_device_class, c["metadata"]["name"])


class DraNodes:
    """Nodes of one test, their slices, and cleanup: unique names, so claims of earlier tests never matter."""

    def __init__(self, core: kubernetes.client.CoreV1Api, resource: kubernetes.client.ResourceV1Api) -> None:
        self.core, self.resource = core, resource
        self.suffix = uuid.uuid4().hex[:6]
        self.nodes: list[str] = []
        self.slices: list[str] = []

    def add(self, name: str, devices: list[dict[str, Any]] | None = None, *, labels: Mapping[str, str] | None = None,
            driver: str = NVIDIA_DRIVER, device_plugin_gpus: int = 0,
            taints: tuple[Mapping[str, str], ...] = (GPU_TAINT,)) -> str:
        node = f"e2e-dra-{name}-{self.suffix}"
        create_node(self.core, node, dict(labels or {}), gpus=device_plugin_gpus, taints=taints)
        self.nodes.append(node)
        if devices:
            self.publish(node, devices, driver=driver)
        return node

    def publish(self, node: str, devices: list[dict[str, Any]], *, driver: str = NVIDIA_DRIVER) -> None:
        """The node's ResourceSlice, as its driver publishes it."""
        slice_ = make_slice(node, devices, driver=driver)
        self.resource.create_resource_slice(slice_)
        self.slices.append(slice_["metadata"]["name"])

    def cleanup(self) -> None:
        for name in self.slices:
            delete_if_present(self.resource.delete_resource_slice, name)
        delete_nodes(self.core, self.nodes)


@pytest.fixture
def dra_nodes(core: kubernetes.client.CoreV1Api,
              resource_api: kubernetes.client.ResourceV1Api) -> Iterator[DraNodes]:
    nodes = DraNodes(core, resource_api)
    yield nodes
    nodes.cleanup()


def allocation(resource: kubernetes.client.ResourceV1Api, core: kubernetes.client.CoreV1Api, namespace: str,
               pod: str) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each device the claim kube-scheduler made for the Pod holds; [] without one."""
    claim_name = (read_pod(core, namespace, pod).get("status", {}).get("extendedResourceClaimStatus") or {}).get(
        "resourceClaimName")
    if not claim_name:
        return []
    response = resource.read_namespaced_resource_claim(claim_name, namespace, _preload_content=False)
    claim = json.loads(response.data)
    results = claim["status"]["allocation"]["devices"]["results"]
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def placed(core: kubernetes.client.CoreV1Api, resource: kubernetes.client.ResourceV1Api, namespace: str, name: str,
           pod: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    core.create_namespaced_pod(namespace, pod)
    node = wait_bound(core, namespace, name)
    return node, allocation(resource, core, namespace, name)


pytestmark = pytest.mark.usefixtures("nvidia_classes")


def test_a_class_pod_gets_the_best_types_device_on_nodes_with_no_device_plugin(
        core: kubernetes.client.CoreV1Api, resource_api: kubernetes.client.ResourceV1Api, namespace: str,
        dra_nodes: DraNodes) -> None:
    """The issue's report: two nodes whose GPUs are published only as ResourceSlices, one with the GFD
    product label and one without, NVIDIA's DeviceClass: a Pod of class `high` was refused. Now it is
    admitted, named to both nodes, and allocated the best type's device."""
    bare = dra_nodes.add("h200", nvidia_gpus(2, H200, memory="143771Mi"))
    labelled = dra_nodes.add("h100nvl", nvidia_gpus(2, H100_NVL, memory="95830Mi"), labels=GFD_H100_NVL)
    def train(name: str) -> dict[str, Any]:
        return make_pod(name, gpu_class="high", gpus=None, scheduler=local_cluster.STRICT_SCHEDULER,
                        annotations=only("high", "H200", "H100-NVL"))

    pod = train("train")
    admitted = dry_run_create(core, namespace, pod)
    assert admitted["metadata"]["annotations"][TYPES] == "H200,H100-NVL"
    assert admitted["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    terms = admitted["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    named = {(e["key"], v) for t in terms for e in t["matchExpressions"] for v in e["values"]}
    assert {("kubernetes.io/hostname", bare), ("nvidia.com/gpu.product", "NVIDIA-H100-NVL")} <= named

    node, devices = placed(core, resource_api, namespace, "train", pod)
    assert node == bare
    assert devices in ([(NVIDIA_DRIVER, bare, "gpu-0")], [(NVIDIA_DRIVER, bare, "gpu-1")])
    # the labelled node, named by its product label only, is where the scheduler goes once the best
    # type's devices are taken
    more = [placed(core, resource_api, namespace, name, train(name)) for name in ("train-1", "train-2")]
    assert [(n, [d[:2] for d in held]) for n, held in more] == [(bare, [(NVIDIA_DRIVER, bare)]),
                                                                (labelled, [(NVIDIA_DRIVER, labelled)])]


@pytest.mark.parametrize("scheduler", SCHEDULERS.values(), ids=SCHEDULERS.keys())
def test_a_stream_fills_the_best_type_then_the_next_device_by_device(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
        resource_api: kubernetes.client.ResourceV1Api, namespace: str, dra_nodes: DraNodes, scheduler: str) -> None:
    h200 = dra_nodes.add("h200", nvidia_gpus(2, H200, memory="143771Mi"))
    nvl = dra_nodes.add("h100nvl", nvidia_gpus(3, H100_NVL, memory="95830Mi"))
    before = samples(webhook_metrics(cluster), "gpu_class_placements_total")
    got = [placed(core, resource_api, namespace, f"p{i}",
                  make_pod(f"p{i}", gpu_class="high", gpus=None, scheduler=scheduler,
                           annotations=only("high", "H200", "H100-NVL"))) for i in range(5)]
    assert [node for node, _ in got] == [h200, h200, nvl, nvl, nvl]
    assert all(len(devices) == 1 and devices[0][1] == node for node, devices in got)
    held = [devices[0] for _, devices in got]
    assert len(set(held)) == len(held), "a device given twice"

    def added() -> dict[tuple[str, str], float]:
        after = samples(webhook_metrics(cluster), "gpu_class_placements_total")
        return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}

    # judged on DRA devices as on the device plugin's: the best type while it had a free device, then
    # an honest fallback
    wait_for("the webhook to count every bind", lambda: added() == {("high", "best"): 2, ("high", "fallback"): 3},
             seconds=30)


def test_balanced_binds_on_dra_devices_are_judged_as_the_scheduler_saw_the_node(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
        resource_api: kubernetes.client.ResourceV1Api, namespace: str, dra_nodes: DraNodes) -> None:
    """kube-scheduler allocates the claim for the Pod before it binds it, and the webhook's claims watch
    often sees that first: judged with the Pod's own device still counted, the node it chose would
    look fuller than the other and a kept promise would count as broken. The strict balanced profile
    keeps the promise: every bind counts as best."""
    nodes = {dra_nodes.add(f"l40s-{i}", nvidia_gpus(4, "NVIDIA L40S", memory="46068Mi")) for i in range(2)}
    # L40S only (the shared fleet's A100 and V100 are in class standard too, and a balanced Pod may go to
    # either when its share of GPUs free is the largest): the promise is about these two nodes
    before = samples(webhook_metrics(cluster), "gpu_class_placements_total")
    got = [placed(core, resource_api, namespace, f"p{i}",
                  make_pod(f"p{i}", gpu_class="standard", gpus=None, scheduler=local_cluster.STRICT_SCHEDULER,
                           annotations=only("standard", "L40S"))) for i in range(4)]
    assert all(node in nodes and len(devices) == 1 for node, devices in got), got
    assert sorted(sum(1 for n, _ in got if n == node) for node in nodes) == [2, 2]  # least allocated: spread

    def added() -> dict[tuple[str, str], float]:
        after = samples(webhook_metrics(cluster), "gpu_class_placements_total")
        return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}

    wait_for("the webhook to count every bind", lambda: added() == {("standard", "best"): 4}, seconds=30)


@pytest.mark.parametrize("dra_first", [True, False], ids=["dra-type-first", "device-plugin-type-first"])
def test_a_mixed_cluster_keeps_one_order(core: kubernetes.client.CoreV1Api,
                                         resource_api: kubernetes.client.ResourceV1Api, namespace: str,
                                         dra_nodes: DraNodes, dra_first: bool) -> None:
    """Device-plugin nodes and DRA nodes of one class: the class's order holds across both, and the
    device plugin's GPUs come without a claim."""
    if dra_first:
        best = dra_nodes.add("h200", nvidia_gpus(2, H200, memory="143771Mi"))
        second = dra_nodes.add("h100nvl-plugin", labels=GFD_H100_NVL, device_plugin_gpus=2)
    else:
        best = dra_nodes.add("h200-plugin", labels={"nvidia.com/gpu.product": "NVIDIA-H200"}, device_plugin_gpus=2)
        second = dra_nodes.add("h100nvl", nvidia_gpus(2, H100_NVL, memory="95830Mi"))
    got = [placed(core, resource_api, namespace, f"p{i}",
                  make_pod(f"p{i}", gpu_class="high", gpus=None, scheduler=local_cluster.STRICT_SCHEDULER,
                           annotations=only("high", "H200", "H100-NVL"))) for i in range(4)]
    assert [node for node, _ in got] == [best, best, second, second]
    dra_node = best if dra_first else second
    assert [bool(devices) for node, devices in got] == [node == dra_node for node, _ in got]


def test_classes_by_need_take_dra_devices_by_their_attributes(
        core: kubernetes.client.CoreV1Api, resource_api: kubernetes.client.ResourceV1Api, namespace: str,
        dra_nodes: DraNodes) -> None:
    """Class fp4 (defined by `requires`, not by names) on devices as NVIDIA's driver publishes them: a B200,
    which the catalog names; an X300, which no type claims, placed by its architecture,
    cudaComputeCapability and memory; an H100, which has no FP4. The scheduler allocates B200's device,
    then X300's; a Pod that needs compute capability 11.0 gets X300's alone."""
    b200 = dra_nodes.add("b200", nvidia_gpus(1, "NVIDIA B200", memory="183359Mi", architecture="Blackwell",
                                             compute="10.0.0"))
    x300 = dra_nodes.add("x300", nvidia_gpus(2, "NVIDIA X300", memory="300Gi", architecture="X-Next",
                                             compute="11.0.0"))
    dra_nodes.add("h100", nvidia_gpus(2))
    pod = make_pod("p0", gpu_class="fp4", gpus=None, scheduler=local_cluster.STRICT_SCHEDULER)

    def types_of(candidate: dict[str, Any]) -> str:
        try:
            return str(dry_run_create(core, namespace, candidate)["metadata"]["annotations"][TYPES])
        except ApiException:
            return ""
    wait_for("the webhook to place fp4 on B200 and X300", lambda: types_of(pod) == "B200,NVIDIA-X300")

    got = [placed(core, resource_api, namespace, f"p{i}",
                  make_pod(f"p{i}", gpu_class="fp4", gpus=None, scheduler=local_cluster.STRICT_SCHEDULER))
           for i in range(2)]
    assert [node for node, _ in got] == [b200, x300]
    assert all(len(devices) == 1 and devices[0][1] == node for node, devices in got)

    newest = make_pod("newest", gpu_class="fp4", gpus=None, scheduler=local_cluster.STRICT_SCHEDULER,
                      annotations={"gpu-class.io/min-compute-capability": "11.0"})
    assert types_of(newest) == "NVIDIA-X300"
    node, devices = placed(core, resource_api, namespace, "newest", newest)
    assert node == x300 and len(devices) == 1 and devices[0] != got[1][1][0]


def test_amd_devices_need_a_deviceclass_that_maps_amd_gpu(
        core: kubernetes.client.CoreV1Api, resource_api: kubernetes.client.ResourceV1Api, namespace: str,
        dra_nodes: DraNodes) -> None:
    """AMD's DeviceClass as its chart ships it maps no extended resource: an `instinct` Pod is refused,
    told why. With `extendedResourceName: amd.com/gpu` added, it gets an MI300X device."""
    device_class = amd_device_class()
    delete_if_present(resource_api.delete_device_class, device_class["metadata"]["name"])
    resource_api.create_device_class(device_class)
    try:
        node = dra_nodes.add("mi300x", amd_gpus(8), driver=AMD_DRIVER, taints=(AMD_TAINT,))
        pod = make_pod("rocm", gpu_class="instinct", gpus=None, scheduler=local_cluster.STRICT_SCHEDULER)
        told = "DRA devices not placed on: 8 AMD_Instinct_MI300X_OAM: no DeviceClass maps amd.com/gpu"
        wait_for("the refusal to name the AMD DeviceClass", lambda: told in _refusal(core, namespace, pod))

        resource_api.patch_device_class(device_class["metadata"]["name"], {"spec": {"extendedResourceName": "amd.com/gpu"}})
        wait_for("the MI300X devices to be offered", lambda: _refusal(core, namespace, pod) == "")
        bound, devices = placed(core, resource_api, namespace, "rocm", pod)
        assert bound == node and len(devices) == 1 and devices[0][:2] == (AMD_DRIVER, node)
        stored = read_pod(core, namespace, "rocm")
        assert stored["metadata"]["annotations"][TYPES] == "MI300X"
        assert stored["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "1"}
    finally:
        delete_if_present(resource_api.delete_device_class, device_class["metadata"]["name"])


def _refusal(core: kubernetes.client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> str:
    """The webhook's refusal of a dry-run create; "" when the Pod is admitted."""
    try:
        dry_run_create(core, namespace, pod)
    except ApiException as e:
        return str(json.loads(e.body or "{}").get("message", e.body))
    return ""


@pytest.fixture
def compute_domains(cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient,
                    resource_api: kubernetes.client.ResourceV1Api) -> Iterator[None]:
    """NVIDIA's ComputeDomain CRD and its DeviceClasses, as the driver's chart installs them (tests/fixtures/dra)."""
    (crd,) = dra_fixture("compute-domain-crd.yaml")
    classes = compute_domain_device_classes()
    local_cluster.apply(cluster, [crd])
    for c in classes:
        delete_if_present(resource_api.delete_device_class, c["metadata"]["name"])
        resource_api.create_device_class(c)
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)

    def established() -> bool:
        conditions = extensions.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)
    wait_for("the ComputeDomain CRD established", established)
    yield
    for c in classes:
        delete_if_present(resource_api.delete_device_class, c["metadata"]["name"])


def _claim_devices(resource: kubernetes.client.ResourceV1Api, core: kubernetes.client.CoreV1Api, namespace: str,
                   pod: str, claim: str) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each device allocated to the claim the resourceclaim controller made for the Pod's
    `claim` (status.resourceClaimStatuses)."""
    statuses = read_pod(core, namespace, pod).get("status", {}).get("resourceClaimStatuses") or []
    (name,) = [s["resourceClaimName"] for s in statuses if s["name"] == claim]
    made = json.loads(resource.read_namespaced_resource_claim(name, namespace, _preload_content=False).data)
    return [(r["driver"], r["pool"], r["device"]) for r in made["status"]["allocation"]["devices"]["results"]]


def test_a_class_pod_with_a_compute_domain_channel_gets_its_gpus_and_its_channel(
        cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api,
        resource_api: kubernetes.client.ResourceV1Api, namespace: str, dra_nodes: DraNodes,
        compute_domains: None) -> None:
    """A worker of a multi-node NVLink job, as NVIDIA's DRA driver runs one (demo/specs/imex): a ComputeDomain, the
    ResourceClaimTemplate its controller makes for the channel, and a Pod of class `high` that names it. The webhook
    places the GPUs and leaves the claim to its driver: kube-scheduler binds the Pod where it can allocate both,
    an H200 device and the node's channel 0. Until the template exists the Pod is refused, saying so."""
    node = dra_nodes.add("gb-h200", nvidia_gpus(4, H200, memory="143771Mi"))
    dra_nodes.publish(node, compute_domain_devices(), driver=COMPUTE_DOMAIN_DRIVER)
    (domain,) = dra_fixture("compute-domain.yaml")
    kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "resource.nvidia.com", "v1beta1", namespace, "computedomains", domain)
    template = channel_claim_template(namespace, domain["spec"]["channel"]["resourceClaimTemplate"]["name"])
    pod = make_pod("worker-0", gpu_class="high", gpus=4, scheduler=local_cluster.STRICT_SCHEDULER,
                   annotations=only("high", "H200"))
    pod["spec"]["resourceClaims"] = [{"name": "compute-domain-channel",
                                      "resourceClaimTemplateName": template["metadata"]["name"]}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "compute-domain-channel"}]
    told = f"no ResourceClaimTemplate '{namespace}/{template['metadata']['name']}' in the webhook's view"
    assert told in _refusal(core, namespace, pod)

    # The ComputeDomain controller's part (no controller runs here): the template, finalizer and all, written
    # through Go's JSON as the controller writes it (kubectl). The API server keeps its opaque parameters as
    # sent and compares them byte for byte on the update that lifts the finalizer; the Python client's JSON
    # (spaces after separators) would make that update a change of the immutable spec.
    local_cluster.apply(cluster, [template])
    try:
        wait_for("the template in the webhook's view", lambda: _refusal(core, namespace, pod) == "")
        admitted = dry_run_create(core, namespace, pod)
        assert admitted["metadata"]["annotations"][TYPES] == "H200"
        assert admitted["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
        bound, gpus = placed(core, resource_api, namespace, "worker-0", pod)
        assert bound == node
        assert sorted(d[:2] for d in gpus) == [(NVIDIA_DRIVER, node)] * 4
        assert _claim_devices(resource_api, core, namespace, "worker-0", "compute-domain-channel") == [
            (COMPUTE_DOMAIN_DRIVER, node, "channel-0")]
    finally:
        force_delete_pods(core, namespace)
        # its finalizer is the controller's to lift
        resource_api.patch_namespaced_resource_claim_template(template["metadata"]["name"], namespace,
                                                              {"metadata": {"finalizers": None}},
                                                              _content_type="application/merge-patch+json")


def test_a_class_pod_with_a_claim_that_may_give_a_gpu_is_refused_with_what_to_do(
        core: kubernetes.client.CoreV1Api, resource_api: kubernetes.client.ResourceV1Api, namespace: str,
        dra_nodes: DraNodes) -> None:
    dra_nodes.add("h200", nvidia_gpus(1, H200))
    resource_api.create_namespaced_resource_claim_template(namespace, make_claim_template(
        "one-gpu", "gpu.nvidia.com", namespace=namespace))
    pod = make_pod("own", gpu_class="high", gpus=None)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    told = (f"claim 'gpu': ResourceClaimTemplate '{namespace}/one-gpu' uses DeviceClass gpu.nvidia.com of driver "
            "gpu.nvidia.com, whose devices are GPUs")
    wait_for("the template in the webhook's view", lambda: told in _refusal(core, namespace, pod))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(namespace, pod)
    message = json.loads(info.value.body)["message"]
    assert told in message and "drop such claims to let gpu-class place it" in message


# a `high` Pod with no GPU count: what the webhook offers it
H200_PROBE = make_pod("probe", gpu_class="high", gpus=None)


def h200(core: kubernetes.client.CoreV1Api, namespace: str) -> str:
    """The webhook's answer to a `high` Pod: "offered" (admitted with H200 among its types) or "not
    offered" (admitted without it, or refused by the webhook itself for want of a node of the
    class); anything else (the API server away, the backstop's refusal, a Pod admitted unplaced) is
    no answer from the webhook and says neither."""
    try:
        admitted = dry_run_create(core, namespace, H200_PROBE)
    except ApiException as e:
        message = str(json.loads(e.body or "{}").get("message", e.body)) if e.body else str(e.reason)
        if e.status == 403 and message.startswith(WEBHOOK_REFUSAL + "gpu-class: no ready, schedulable node offers"):
            return "not offered"
        return f"no answer: {e.status} {message}"
    except urllib3.exceptions.HTTPError as e:  # the API server restarting
        return f"no answer: {e}"
    types = (admitted["metadata"].get("annotations") or {}).get(TYPES)
    if types is None:
        return "no answer: admitted unplaced"
    return "offered" if "H200" in types.split(",") else "not offered"


def test_slices_are_listed_again_after_compaction(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
                                                  resource_api: kubernetes.client.ResourceV1Api, namespace: str,
                                                  dra_nodes: DraNodes) -> None:
    """A slice deleted while the API server is away, its event compacted out of etcd: the watch resumes
    with 410 Gone and lists the slices again, as it does Nodes."""
    dra_nodes.add("h200", nvidia_gpus(1, H200))

    def answered(expected: str) -> str:
        answer = h200(core, namespace)
        return answer if answer == expected else ""

    wait_for("the H200 device to be offered", lambda: answered("offered"))
    before = expired_restarts(cluster, "resourceslices")
    gone = dra_nodes.slices.pop()

    def delete_unseen_and_compact() -> None:
        # With the API server down no event, and no bookmark newer than the compaction, can reach the
        # webhook: its watch must resume from a revision etcd no longer has
        assert cluster.delete_from_etcd("resourceslices", gone) == 1
        cluster.compact_etcd()

    cluster.restart_apiserver(while_stopped=delete_unseen_and_compact)
    wait_for("the deleted slice's device to be dropped", lambda: answered("not offered"), seconds=60)
    wait_for("a 410 relist of resourceslices in the webhook's metrics",
             lambda: expired_restarts(cluster, "resourceslices") > before, seconds=30)


# kube-apiserver without resource.k8s.io/v1, as before an upgrade to a release that serves it. On 1.35 and later the
# DRA feature gate is locked on and the Node authorizer's informer of ResourceSlices never syncs without the API
# (/readyz fails "informer-sync" for good), so this server authorizes by RBAC alone: the webhook needs no more.
DRA_NOT_SERVED = {"--runtime-config": "resource.k8s.io/v1=false", "--authorization-mode": "RBAC"}


def test_dra_served_after_the_webhook_started_is_read_by_its_herald(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
        resource_api: kubernetes.client.ResourceV1Api, namespace: str, dra_nodes: DraNodes) -> None:
    """The webhook started while the API server does not serve DRA; the API server restarted serving it (an
    upgrade, or a reconfiguration), a driver publishes its slice at once: every worker reads DRA because it
    watches DRA's APIService, before any could have asked again at its own minute (OFF_RECHECK_SECONDS), and a
    class Pod whose GPUs only DRA offers is admitted with them. An order of events, not a time a loaded machine
    can miss."""
    node = dra_nodes.add("h200")  # the Node now: its slice can only be made once the API is served
    served_as = cluster.flags("kube-apiserver", DRA_NOT_SERVED)
    try:
        # Nothing revived meanwhile: kube-scheduler 1.37 syncs its DRA informers before it runs for its lease, so a
        # strict scheduler that lost it cannot lead again until DRA is back (the restart that serves it revives it)
        cluster.restart("kube-apiserver", flags=DRA_NOT_SERVED)
        cluster.wait_ready("kube-apiserver", cluster.apiserver_ready)
        cluster.wait_policies_configured()
        cluster.stop("gpuclass")  # started anew against an API server without DRA
        recheck_at = time.monotonic() + OFF_RECHECK_SECONDS  # a worker finds DRA off after this
        local_cluster.start_webhook(cluster)
        wait_for("every worker to find DRA off", lambda: not any(
            read_by_every_worker(cluster, r) for r in ("deviceclasses", "resourceslices", "resourceclaims")))
        assert read_by_every_worker(cluster, "apiservices")  # the herald is watched (the RBAC in deploy/ allows it)
        assert h200(core, namespace) == "not offered"
        times: dict[str, float] = {}

        def publish_as_soon_as_served() -> None:
            def served() -> bool:
                try:
                    resource_api.list_resource_slice(limit=1, _request_timeout=2)
                except (ApiException, urllib3.exceptions.HTTPError):
                    return False
                return True
            wait_for("resource.k8s.io/v1 served", served, seconds=120, interval=0.05)
            times["served"] = time.monotonic()
            dra_nodes.publish(node, nvidia_gpus(1, H200))
            wait_for("every worker to read ResourceSlices", lambda: read_by_every_worker(cluster, "resourceslices"),
                     seconds=70, interval=0.1)
            times["read"] = time.monotonic()

        cluster.restart_apiserver(flags=served_as, while_starting=publish_as_soon_as_served)
        assert times["read"] < recheck_at, "read no sooner than a worker's own recheck would have read it"
        cluster.restart_for_new_apis()  # what else watches DRA lists it again, for the tests after this one
        print(f"DRA served to every worker reading it: {times['read'] - times['served']:.2f} s")
        # the API server judges Pods again (restart_apiserver waited for its admission policies)
        wait_for("the H200 device offered", lambda: h200(core, namespace) == "offered", seconds=30, interval=0.1)

        # admitted for real, as a user would create it
        pod = make_pod("train", gpu_class="high", annotations=only("high", "H200"))
        core.create_namespaced_pod(namespace, pod)
        assert read_pod(core, namespace, "train")["metadata"]["annotations"][TYPES] == "H200"
        assert read_by_every_worker(cluster, "resourceslices")  # the gauge says DRA is read again
    finally:
        if cluster.flags("kube-apiserver", DRA_NOT_SERVED) != served_as:
            cluster.restart_apiserver(flags=served_as)
            cluster.restart_for_new_apis()


def test_the_dra_benchmark_runs(cluster: local_cluster.Cluster) -> None:
    """A small run of `python -m bench dra` (bench/dra/dra.py), so the measurement keeps working."""
    from bench.dra import dra

    results = dra.run_streams(cluster, pods=6, paths=("profiles", "first-available"))
    profiles = results[0]
    assert (profiles.placed, profiles.right, profiles.wrongly_pending) == (6, 6, 0), profiles.wrong
    assert results[1].placed == 6
    costs = [dra.naming_cost(10, labelled, repeats=3) for labelled in (True, False)]
    assert costs[0].patch_bytes < costs[1].patch_bytes  # ten hostnames per type against one product each
    text = dra.render(results, costs, "python -m bench dra", 1.0)
    assert "| (b) gpu-class, gpu-class-scheduler | 6 | 6/6 (100%) | 0 |" in text
