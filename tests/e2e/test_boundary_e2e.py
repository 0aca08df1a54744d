"""The tenant boundary holds when the webhook does not (docs/operators/security.md, "The tenant boundary").

In a namespace allowed only `economy` (and one allowed only `small-slices`), every Pod of the table of
attacks is tried three ways: the webhook serving, the webhook stopped (the API server fails open and
admits what it sent unchanged), and the webhook under slow connections that try to hold its threads.
No Pod of the table may bind, or be able to bind, outside its namespace's types: each one is either
refused at create, or created with a final spec whose nodeSelector and required affinity the test
matches against the fleet's node labels itself (not the webhook's code, not its annotations), and
judged again by where the scheduler bound it. The honest Pods beside them are placed where their
class runs while the webhook serves, and refused with a message to retry while it is stopped.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Mapping

import kubernetes
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

import local_cluster
from fleet import FLEET, H100_LABELS, TYPE_OF
from kubeobjects import force_delete_pods, make_namespace, make_pod, read_pod, wait_for
from tests.test_provenance import matches  # Kubernetes' node selector requirement, the tests' own model

pytestmark = pytest.mark.usefixtures("fleet")

ECONOMY = {"Tesla-T4", "Tesla-V100S-PCIE-32GB"}  # the fleet's economy products, as their labels say
ECONOMY_NODES = {n.name for n in FLEET if n.gpu_type in ("T4", "V100")}
PRODUCT = "nvidia.com/gpu.product"
H100 = H100_LABELS[PRODUCT]
H100_NODE = "e2e-h100-big"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists"}
CLASS, TYPES = "gpu-class.io/class", "gpu-class.io/types"


def _term(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": values} if values is not None else {})}


def _required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


def attack(name: str, *, gpus: int = 1, resource: str = "nvidia.com/gpu", annotations: Mapping[str, str] | None = None,
           labels: Mapping[str, str] | None = None, spec: Mapping[str, Any] | None = None,
           init_gpus: bool = False) -> dict[str, Any]:
    """A Pod aimed past its namespace's classes: tolerating the GPU taint, asking `gpus` of `resource`."""
    pod = make_pod(name, gpus=None, annotations=annotations)
    limits = {resource: str(gpus)}
    if init_gpus:
        pod["spec"]["initContainers"] = [{"name": "init", "image": "registry.example/cuda:12",
                                          "resources": {"limits": limits}}]
    else:
        pod["spec"]["containers"][0]["resources"]["limits"] = limits
    if labels:
        pod["metadata"]["labels"] = dict(labels)
    pod["spec"]["tolerations"] = [GPU_TOLERATION]
    pod["spec"].update(spec if spec is not None else {"nodeSelector": {PRODUCT: H100}})
    return pod


def _oversized() -> dict[str, Any]:
    # 0.57 MiB as stored; the API server's encoder writes each `<` as `\u003c`: a 3.4 MiB AdmissionReview
    pod = attack("oversized", annotations={TYPES: "T4"})
    pod["spec"]["containers"][0]["env"] = [{"name": "PADDING", "value": "<" * 600_000}]
    return pod


ECONOMY_ATTACKS: dict[str, Callable[[], dict[str, Any]]] = {
    "forged-types-and-h100-selector": lambda: attack("forged-types", annotations={CLASS: "economy", TYPES: "T4"}),
    "classless-with-h100-selector": lambda: attack("classless", gpus=8),
    "oversized-request": _oversized,
    "gpu-in-an-init-container": lambda: attack("init-gpu", init_gpus=True),
    "a-second-term-to-h100": lambda: attack("or-term", annotations={CLASS: "economy"}, spec={
        "affinity": _required([_term(PRODUCT, "In", ["Tesla-T4"])], [_term(PRODUCT, "In", [H100])])}),
    "not-in-economy": lambda: attack("not-in", spec={"affinity": _required([_term(PRODUCT, "NotIn", ["Tesla-T4"])])}),
    "by-hostname": lambda: attack("hostname", spec={"nodeSelector": {"kubernetes.io/hostname": H100_NODE}}),
    "unsatisfiable-on-purpose": lambda: attack("unsatisfiable", annotations={
        CLASS: "economy", "gpu-class.io/min-memory": "80Gi", TYPES: ""}),
    "absurd-value": lambda: attack("absurd", annotations={CLASS: "economy", "gpu-class.io/min-memory": "1e400"}),
    "node-named": lambda: attack("node-named", annotations={CLASS: "economy"}, spec={"nodeName": H100_NODE}),
    "kueue-marks-and-h100": lambda: attack("kueue-marks", labels={"kueue.x-k8s.io/podset": "main"}, annotations={
        CLASS: "economy", TYPES: "T4", "kueue.x-k8s.io/pod-suspending-parent": "batch/v1/Job"}),
}
SLICES_ATTACKS: dict[str, Callable[[], dict[str, Any]]] = {
    # Under the mixed strategy the whole GPU's product also names its slices: only the resource tells them apart
    "whole-gpus-by-a-slice-product": lambda: attack("whole-gpus", gpus=8, labels={"kueue.x-k8s.io/podset": "main"},
                                                    annotations={CLASS: "small-slices"}, spec={"affinity": _required(
                                                        [_term(PRODUCT, "In", [H100, "NVIDIA-H200"])])}),
    "a-big-slice": lambda: attack("big-slice", resource="nvidia.com/mig-3g.40gb", annotations={CLASS: "small-slices"}),
}


# --- judging where a Pod can land, with a matcher of the test's own ---------------------------

def nodes_it_can_land_on(pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, str]]) -> set[str]:
    """The fleet's nodes the Pod's final nodeSelector and required node affinity admit."""
    spec = pod["spec"]
    if spec.get("nodeName"):
        return {spec["nodeName"]}
    selector = spec.get("nodeSelector") or {}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    found = set()
    for name, labels in nodes.items():
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        if required is None or any(all(matches(r, labels) for r in t.get("matchExpressions") or [])
                                   for t in required):
            found.add(name)
    return found


def fleet_labels(core: kubernetes.client.CoreV1Api) -> dict[str, dict[str, str]]:
    """Every node's labels as the API server holds them: GPU nodes and CPU nodes alike."""
    return {n.metadata.name: dict(n.metadata.labels or {}) for n in core.list_node().items}


def allowed_nodes(labels: Mapping[str, Mapping[str, str]], products: set[str]) -> set[str]:
    return {name for name, ls in labels.items() if ls.get(PRODUCT) in products}


# --- the three ways the webhook can be ---------------------------------------------------------

@contextlib.contextmanager
def slow_connections(cluster: local_cluster.Cluster, count: int) -> Iterator[None]:
    """`count` TLS connections to the webhook that announce a 3 MB body and send a byte every second."""
    host, port = cluster.webhook_url.split("//", 1)[1].split(":")
    context = ssl.create_default_context(cafile=str(cluster.dir / "webhook" / "ca.crt"))
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection((host, int(port.split("/")[0])), timeout=5) as raw, \
                        context.wrap_socket(raw, server_hostname=host) as tls:
                    tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Content-Length: 3000000\r\n\r\n")
                    while not stop.wait(1.0):
                        tls.sendall(b"{")
            except (OSError, ssl.SSLError):
                stop.wait(0.2)  # the server cut it: open the next one

    threads = [threading.Thread(target=trickle, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    try:
        time.sleep(2)  # held before the first Pod is sent
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(10)


@pytest.fixture(params=["serving", "stopped", "stalled"])
def webhook(request: pytest.FixtureRequest, cluster: local_cluster.Cluster) -> Iterator[str]:
    mode: str = request.param
    if mode == "stopped":
        cluster.stop("gpuclass")
        try:
            yield mode
        finally:
            local_cluster.start_webhook(cluster)
    elif mode == "stalled":
        with slow_connections(cluster, 8):
            yield mode
    else:
        yield mode


@pytest.fixture
def bounded(core: kubernetes.client.CoreV1Api) -> Iterator[dict[str, str]]:
    """A namespace allowed only economy, and one allowed only small-slices; no default class in either."""
    names = {
        "economy": make_namespace(core, "e2e-economy-only", labels={"gpu-class.io/inject": "enabled"},
                                  annotations={"gpu-class.io/allowed-classes": "economy"}),
        "small-slices": make_namespace(core, "e2e-slices-only", labels={"gpu-class.io/inject": "enabled"},
                                       annotations={"gpu-class.io/allowed-classes": "small-slices"}),
    }
    yield names
    for name in names.values():
        force_delete_pods(core, name)
        core.delete_namespace(name)


def _create(core: kubernetes.client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> str | None:
    """None when created, else the refusal (which must be gpu-class's, inside the API server or the webhook)."""
    try:
        core.create_namespaced_pod(namespace, pod)
    except ApiException as e:
        assert e.status in (400, 403, 422) and "gpu-class" in e.body, (pod["metadata"]["name"], e.status, e.body)
        return str(e.body)
    return None


def scheduler_gave_up(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def test_no_pod_of_the_table_lands_outside_its_namespaces_classes(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, bounded: dict[str, str], webhook: str) -> None:
    labels = fleet_labels(core)
    allowed = {
        "economy": allowed_nodes(labels, ECONOMY),
        # the fleet has no MIG node: nothing is inside small-slices
        "small-slices": set(),
    }
    assert allowed["economy"] == ECONOMY_NODES
    outcomes: dict[str, str] = {}
    created: list[tuple[str, str, str]] = []
    for class_name, attacks in (("economy", ECONOMY_ATTACKS), ("small-slices", SLICES_ATTACKS)):
        ns = bounded[class_name]
        for case, build in attacks.items():
            pod = build()
            refusal = _create(core, ns, pod)
            if refusal is not None:
                outcomes[case] = "refused"
                continue
            stored = read_pod(core, ns, pod["metadata"]["name"])
            reach = nodes_it_can_land_on(stored, labels)
            assert reach <= allowed[class_name], (webhook, case, "can land on", sorted(reach - allowed[class_name]))
            outcomes[case] = "confined" if reach else "nowhere"
            created.append((case, ns, pod["metadata"]["name"]))
    # and where the scheduler put those created: bound inside, or given up on
    for case, ns, name in created:
        pod = wait_for(f"{webhook}: {case} bound or found unschedulable", lambda: (
            p if (p := read_pod(core, ns, name))["spec"].get("nodeName") or scheduler_gave_up(p) else None), seconds=60)
        node = pod["spec"].get("nodeName")
        assert node is None or node in ECONOMY_NODES, (webhook, case, node, TYPE_OF.get(node))
    print(f"\n{webhook}: {outcomes}")  # the record docs/operators/security.md's table is read from
    # While the webhook is stopped nothing of the table is placed by it: every one is refused.
    if webhook == "stopped":
        assert set(outcomes.values()) == {"refused"}, outcomes


def test_honest_pods_are_placed_while_the_webhook_serves_and_told_to_retry_while_it_is_stopped(
        core: kubernetes.client.CoreV1Api, bounded: dict[str, str], webhook: str) -> None:
    ns = bounded["economy"]
    by_class = make_pod("by-class", gpu_class="economy")
    # a Pod that keeps itself to economy's types passes the boundary whatever the webhook's state
    self_placed = make_pod("self-placed")
    self_placed["spec"]["tolerations"] = [GPU_TOLERATION]
    self_placed["spec"]["affinity"] = _required([_term(PRODUCT, "In", sorted(ECONOMY))])
    assert _create(core, ns, self_placed) is None
    node = wait_for("the self-placed Pod bound", lambda: read_pod(core, ns, "self-placed")["spec"].get("nodeName"))
    assert node in ECONOMY_NODES
    refusal = _create(core, ns, by_class)
    if webhook == "stopped":
        assert refusal is not None and "retry once the webhook is back" in refusal.lower(), refusal
        return
    assert refusal is None
    node = wait_for("the class Pod bound", lambda: read_pod(core, ns, "by-class")["spec"].get("nodeName"))
    assert node in ECONOMY_NODES


def test_no_pod_of_the_table_is_created_while_the_api_server_starts(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, bounded: dict[str, str]) -> None:
    """An API server that has just started finds the boundary's BoundaryTable kind through discovery it resets
    every 30 s; until it does, gpu-class.io-boundary refuses every Pod of a served namespace ("failed to configure
    policy", kubernetes#124237) and admits none. With the webhook stopped (the API server fails open on it), each
    attack of the table is tried from the first moment the new API server answers until its policies judge Pods
    again, and once more after: none is created, whether the window shows on this start or not."""
    ns = bounded["economy"]
    seen: dict[str, int] = {"not ready": 0, "unconfigured": 0, "judged": 0}

    def attack_all() -> None:
        for case, build in ECONOMY_ATTACKS.items():
            try:
                core.create_namespaced_pod(ns, build())
            except ApiException as e:
                if e.status >= 500:  # still starting: not an answer
                    continue
                if e.status == 403 and "not yet ready to handle request" in e.body:  # the policies not loaded yet
                    seen["not ready"] += 1
                    continue
                assert e.status in (400, 403, 422) and "gpu-class" in e.body, (case, e.status, e.body)
                seen["unconfigured" if "failed to configure policy" in e.body else "judged"] += 1
                continue
            except urllib3.exceptions.HTTPError:  # not listening yet
                continue
            raise AssertionError(f"{case} was created while the API server started")

    def while_starting() -> None:
        deadline = time.monotonic() + local_cluster.READY_SECONDS + local_cluster.POLICIES_CONFIGURED_SECONDS
        while time.monotonic() < deadline:
            attack_all()
            with contextlib.suppress(OSError):  # not listening yet
                if cluster.policies_configured():
                    return
        raise AssertionError("the API server's policies did not judge Pods again")

    cluster.stop("gpuclass")
    try:
        cluster.restart_apiserver(while_starting=while_starting)
        attack_all()
    finally:
        local_cluster.start_webhook(cluster)
    assert seen["judged"] >= len(ECONOMY_ATTACKS), seen
    assert not core.list_namespaced_pod(ns).items
    print(f"\nattacks refused while the boundary's table was not yet found, and judged: {seen}")


CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "h100"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
            "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}}]}}},
}


def claim(name: str, *device_classes: str) -> dict[str, Any]:
    """A ResourceClaim of one request whose alternatives are devices of `device_classes`, in that order."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "devices", "firstAvailable": [
                {"name": f"option-{i}", "deviceClassName": c} for i, c in enumerate(device_classes)]}]}}}


@pytest.fixture
def nic_class(api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """A DeviceClass pinned to a NIC driver, once the boundary's table lists it as no GPU's."""
    resource = kubernetes.client.ResourceV1Api(api_client)
    name = f"nic-{uuid.uuid4().hex[:6]}.example.com"
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                                  "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]}})
    tables = kubernetes.client.CustomObjectsApi(api_client)
    wait_for(f"{name} in the boundary's table", lambda: f",{name}," in (tables.get_namespaced_custom_object(
        "gpu-class.io", "v1alpha1", local_cluster.WEBHOOK_NAMESPACE, "boundarytables", "gpu-class-boundary")
        .get("data") or {}).get("otherDeviceClasses", ""))
    yield name
    resource.delete_device_class(name)


def test_a_gpu_claim_is_refused_in_a_bounded_namespace_and_other_devices_are_not(
        api_client: kubernetes.client.ApiClient, bounded: dict[str, str], namespace: str, nic_class: str) -> None:
    resource = kubernetes.client.ResourceV1Api(api_client)
    ns = bounded["economy"]
    refusals = []
    for create, body in ((resource.create_namespaced_resource_claim_template, CLAIM_TEMPLATE),
                         (resource.create_namespaced_resource_claim, claim("nic-or-gpu", nic_class, "gpu.nvidia.com")),
                         (resource.create_namespaced_resource_claim, claim("mig", "mig.nvidia.com")),
                         (resource.create_namespaced_resource_claim, claim("unknown", "unknown.example.com"))):
        with pytest.raises(ApiException) as refused:
            create(ns, body)
        assert refused.value.status == 403 and "gpu-class.io-boundary-claims" in refused.value.body, refused.value.body
        refusals.append(refused.value.body)
    assert "DeviceClass gpu.nvidia.com may hand out any GPU" in refusals[1]  # the NIC alternative is not what fails
    # devices no GPU type is made of pass; so do GPU claims where no class is the boundary
    resource.create_namespaced_resource_claim(ns, claim("nic", nic_class))
    resource.create_namespaced_resource_claim_template(namespace, CLAIM_TEMPLATE)
