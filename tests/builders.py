"""Small builders for Nodes, Pods, catalogs and AdmissionReviews used across the tests."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import kubernetes_validate
import yaml

from webhook.core.view.affinity import NodeTerm
from webhook.core.catalog.loading import load_catalog_text
from webhook.core.catalog.model import Catalog
from webhook.core.view.pods import UnboundGpuPod

# the oldest Kubernetes minor still supported upstream when this was written; schemas ship with kubernetes-validate
K8S_VERSION = "1.35"

TEST_CATALOG_YAML = """
gpuResource: nvidia.com/gpu
productLabels: [nvidia.com/gpu.product, gpu-type]
gpuTaintKeys: [nvidia.com/gpu]
onUnsatisfiable: deny
types:
  - {name: H200, score: 989, memoryGiB: 141, products: [NVIDIA-H200]}
  - {name: H100, score: 989, memoryGiB: 80, products: [NVIDIA-H100-80GB-HBM3, "NVIDIA-H100-PCIe*"]}
  - {name: A100, score: 312, memoryGiB: 40, products: [A100-SXM4-40GB, NVIDIA-A100-SXM4-80GB]}
  - {name: A10, score: 125, memoryGiB: 24, products: [NVIDIA-A10]}
  - {name: L40S, score: 362, memoryGiB: 48, products: [NVIDIA-L40S]}
  - {name: L4, score: 121, memoryGiB: 24, products: [NVIDIA-L4]}
  - {name: H20, score: 148, memoryGiB: 96, products: [NVIDIA-H20]}
  - {name: T4, score: 65, memoryGiB: 16, products: [Tesla-T4, Tesla-T4-SHARED]}
  - {name: V100, score: 112, memoryGiB: 16, products: [Tesla-V100-SXM2-16GB], scalable: true}
classes:
  - {name: high, types: [H100, A100, H200]}
  - {name: standard, minScore: 100, maxScore: 400}
  - {name: economy, maxScore: 130, strategy: cost}
  - {name: big, minMemoryGiB: 40}
  - {name: balanced, types: [A100, L4, T4], strategy: balanced}
  - {name: packed, types: [A100, L4, T4], strategy: binpack}
  - {name: scalable, types: [V100, T4]}
  - {name: a10, types: [A10]}
  - {name: l4, types: [L4]}
  - {name: h20, types: [H20]}
"""


def make_catalog(extra: str = "") -> Catalog:
    return load_catalog_text(TEST_CATALOG_YAML + extra, "test-catalog.yaml")


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def make_node(
    name: str,
    product: str | None = None,
    *,
    gpus: int | str = 8,
    label_key: str = "nvidia.com/gpu.product",
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    taints: Iterable[Mapping[str, str]] = (GPU_TAINT,),
) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if product is not None:
        all_labels[label_key] = product
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": [dict(t) for t in taints]} if product is not None else {},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", **({"nvidia.com/gpu": str(gpus)} if product else {})},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def make_namespace(
    name: str, *, inject: bool = True, default_class: str | None = None, allowed: str | None = None
) -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": name}
    if inject:
        labels["gpu-class.io/inject"] = "enabled"
    if default_class:
        labels["gpu-class.io/default-class"] = default_class
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if allowed is not None:
        meta["annotations"] = {"gpu-class.io/allowed-classes": allowed}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def placed_terms(types: Iterable[str], catalog: Catalog | None = None) -> tuple[NodeTerm, ...]:
    """The required node affinity term the webhook writes beside gpu-class.io/types, as NodeTerms: the
    types' exact products under nvidia.com/gpu.product (of the test catalog unless given)."""
    catalog = catalog or _test_catalog()
    values = tuple(p for t in types for p in catalog.types[t].exact_products)
    return (((PRODUCT_LABEL, values),),) if values else ()


def placed_affinity(types: Iterable[str], catalog: Catalog | None = None) -> dict[str, Any]:
    """spec.affinity with the required node affinity the webhook writes beside gpu-class.io/types."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)} for key, values in term]}
        for term in placed_terms(types, catalog)]}}}


PRODUCT_LABEL = "nvidia.com/gpu.product"
_CATALOGS: dict[str, Catalog] = {}


def _test_catalog() -> Catalog:
    return _CATALOGS.setdefault("test", make_catalog())


def make_unbound_pod(uid: str, class_name: str | None = "high", types: tuple[str, ...] = ("H100",), *,
                     gated: bool = False) -> UnboundGpuPod:
    """A GPU Pod the watch has seen unbound: one nvidia.com/gpu, gpu-class placed it where `types` is not empty
    (with the affinity the webhook writes, which is what the inventory believes the types by)."""
    return UnboundGpuPod(uid, "ml", uid, "nvidia.com/gpu", 1, class_name, types, gated=gated,
                         node_terms=placed_terms(types))


def make_pod(
    annotations: Mapping[str, str] | None = None,
    *,
    name: str = "train",
    containers: list[dict[str, Any]] | None = None,
    gpu_limit: str | None = None,
    affinity: dict[str, Any] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    extra_spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    if containers is None:
        container: dict[str, Any] = {"name": "main", "image": "registry.example/train:1.0"}
        if gpu_limit is not None:
            container["resources"] = {"limits": {"nvidia.com/gpu": gpu_limit}}
        containers = [container]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", **({"annotations": dict(annotations)} if annotations else {})},
        "spec": {"containers": containers, **(extra_spec or {})},
    }
    if affinity is not None:
        pod["spec"]["affinity"] = affinity
    if tolerations is not None:
        pod["spec"]["tolerations"] = tolerations
    return pod


def make_review(pod: Mapping[str, Any], *, operation: str = "CREATE", kind: str = "Pod", uid: str = "uid-1",
                namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": copy.deepcopy(dict(pod)),
            "oldObject": None,
            "dryRun": False,
        },
    }


def assert_valid_pod(pod: Mapping[str, Any]) -> None:
    """Validate against the published Kubernetes Pod schema (strict: unknown fields fail)."""
    try:
        kubernetes_validate.validate(dict(pod), K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(f"patched Pod is not a valid Pod: {exc.message} at {list(exc.path)}") from None


# a small mixed cluster for tests that need "some" inventory
CATALOG_NODES = [
    make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8),
    make_node("a100-a", "A100-SXM4-40GB", gpus=4),
    make_node("t4-a", "Tesla-T4", gpus=1),
    make_node("cpu-a"),
]


def make_device_node(
    name: str,
    labels: Mapping[str, str],
    allocatable: Mapping[str, str],
    *,
    ready: bool = True,
    taints: Iterable[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A Node with the given labels (a real label set) and allocatable devices of any resource."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", **allocatable},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def fixture_labels(name: str) -> dict[str, str]:
    """The labels of a Node in tests/fixtures/nodes (published label sets, see SOURCES.md)."""
    import pathlib

    import yaml

    node = yaml.safe_load((pathlib.Path(__file__).parent / "fixtures" / "nodes" / name).read_text())
    return {str(k): str(v) for k, v in node["metadata"]["labels"].items()}


# --- Dynamic Resource Allocation: objects as NVIDIA's and AMD's DRA drivers publish them ------------
# tests/fixtures/dra holds one device of each, written from the drivers' source (SOURCES.md); these
# builders copy it to make nodes of several GPUs.

DRA_FIXTURES = Path(__file__).parent / "fixtures" / "dra"
NVIDIA_DRIVER = "gpu.nvidia.com"
AMD_DRIVER = "gpu.amd.com"


def dra_fixture(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DRA_FIXTURES / name).read_text()) if d]


def nvidia_device_classes(*, extended_resource: bool = True) -> list[dict[str, Any]]:
    """The chart's DeviceClasses; without `extended_resource`, as on clusters older than resource.k8s.io/v1."""
    classes = dra_fixture("nvidia-deviceclasses.yaml")
    if not extended_resource:
        for c in classes:
            c["spec"].pop("extendedResourceName", None)
    return classes


def amd_device_class(extended_resource: str | None = None) -> dict[str, Any]:
    """AMD's DeviceClass, which maps no extended resource; `extended_resource` adds the mapping."""
    (device_class,) = dra_fixture("amd-deviceclass.yaml")
    if extended_resource:
        device_class["spec"]["extendedResourceName"] = extended_resource
    return device_class


def _copies(template: dict[str, Any], count: int, name: Callable[[int], str], start: int) -> list[dict[str, Any]]:
    devices = []
    for i in range(start, start + count):
        device = copy.deepcopy(template)
        device["name"] = name(i)
        attributes = device["attributes"]
        if "uuid" in attributes:
            attributes["uuid"] = {"string": f"GPU-{i:08x}-0000-0000-0000-000000000000"}
        attributes["resource.kubernetes.io/pciBusID"] = {"string": f"0000:{0x18 + i:02x}:00.0"}
        devices.append(device)
    return devices


def nvidia_gpus(count: int, product: str = "NVIDIA H100 80GB HBM3", *, memory: str | None = "81559Mi",
                start: int = 0, architecture: str | None = None, compute: str | None = None) -> list[dict[str, Any]]:
    """Whole GPUs as NVIDIA's driver publishes them (fixture nvidia-h100-resourceslice.yaml). A product other
    than the fixture's H100 has the `architecture` and `cudaComputeCapability` given, none when not given."""
    (slice_,) = dra_fixture("nvidia-h100-resourceslice.yaml")
    template = slice_["spec"]["devices"][0]
    attributes = template["attributes"]
    if product != attributes["productName"]["string"]:
        attributes.pop("architecture")
        attributes.pop("cudaComputeCapability")
    if architecture is not None:
        attributes["architecture"] = {"string": architecture}
    if compute is not None:
        attributes["cudaComputeCapability"] = {"version": compute}
    template["attributes"]["productName"] = {"string": product}
    if memory is None:
        template.pop("capacity")
    else:
        template["capacity"]["memory"]["value"] = memory
    return _copies(template, count, lambda i: f"gpu-{i}", start)


def nvidia_migs(count: int, profile: str, product: str = "NVIDIA H100 80GB HBM3", *, memory: str = "40192Mi",
                start: int = 0) -> list[dict[str, Any]]:
    """MIG devices as NVIDIA's driver publishes them (mig.go: CommonAttributesMig, CommonCapacitiesMig)."""
    (gpu,) = nvidia_gpus(1, product)
    attributes = {k: v for k, v in gpu["attributes"].items() if not k.startswith("resource.kubernetes.io/")}
    attributes.update({"type": {"string": "mig"}, "profile": {"string": profile},
                       "parentUUID": attributes["uuid"]})
    template = {"name": "", "attributes": attributes,
                "capacity": {"multiprocessors": {"value": "60"}, "memory": {"value": memory}}}
    return _copies(template, count, lambda i: f"gpu-0-mig-{profile.replace('.', '')}-{i}", start)


def amd_gpus(count: int, product: str = "AMD_Instinct_MI300X_OAM", *, memory: str = "192Gi",
             start: int = 0) -> list[dict[str, Any]]:
    """Whole GPUs as AMD's driver publishes them (fixture amd-mi300x-resourceslice.yaml)."""
    (slice_,) = dra_fixture("amd-mi300x-resourceslice.yaml")
    template = slice_["spec"]["devices"][0]
    template["attributes"]["productName"] = {"string": product}
    template["capacity"]["memory"]["value"] = memory
    return _copies(template, count, lambda i: f"gpu-{i + 1}-{128 + i}", start)


def make_slice(node: str | None, devices: list[dict[str, Any]], *, driver: str = NVIDIA_DRIVER,
               name: str | None = None, pool: str | None = None, generation: int = 1) -> dict[str, Any]:
    """A ResourceSlice of `driver` for `node` (None: one with allNodes), one slice in its pool."""
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": pool or node or "shared", "generation": generation,
                                                       "resourceSliceCount": 1}, "devices": devices}
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node or 'shared'}-{driver}"}, "spec": spec}


def make_claim(name: str, devices: list[tuple[str, str, str]], *, namespace: str = "ml") -> dict[str, Any]:
    """A ResourceClaim whose allocation holds `devices` ((driver, pool, device) each)."""
    results = [{"request": "gpu", "driver": d, "pool": p, "device": n} for d, p, n in devices]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"allocation": {"devices": {"results": results}}} if devices else {}}


# --- ComputeDomains of NVIDIA's DRA driver: the claims a multi-node NVLink job brings beside its GPUs ---------

COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"


def compute_domain_device_classes() -> list[dict[str, Any]]:
    """The chart's DeviceClasses for ComputeDomains: the default channel's and the daemon's."""
    return dra_fixture("compute-domain-deviceclasses.yaml")


def compute_domain_devices() -> list[dict[str, Any]]:
    """channel-0 and daemon-0, as the ComputeDomain kubelet plugin publishes them on each node."""
    (slice_,) = dra_fixture("compute-domain-resourceslice.yaml")
    return list(slice_["spec"]["devices"])


def channel_claim_template(namespace: str = "ml", name: str | None = None) -> dict[str, Any]:
    """The ResourceClaimTemplate the ComputeDomain controller makes for a ComputeDomain's channel."""
    (template,) = dra_fixture("compute-domain-channel-claimtemplate.yaml")
    template["metadata"]["namespace"] = namespace
    if name is not None:
        template["metadata"]["name"] = name
    return template


def device_requests(*classes: str | tuple[str, ...]) -> dict[str, Any]:
    """A claim's spec.devices: a request per class, `exactly` for a name, `firstAvailable` for a tuple of names."""
    requests = [{"name": f"r{i}", "exactly": {"deviceClassName": c}} if isinstance(c, str) else
                {"name": f"r{i}", "firstAvailable": [{"name": f"s{j}", "deviceClassName": n} for j, n in enumerate(c)]}
                for i, c in enumerate(classes)]
    return {"devices": {"requests": requests}}


def make_claim_template(name: str, *classes: str | tuple[str, ...], namespace: str = "ml") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": device_requests(*classes)}}


def make_resource_claim(name: str, *classes: str | tuple[str, ...], namespace: str = "ml") -> dict[str, Any]:
    """A ResourceClaim of the Pod's author (not made from a template), not allocated."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": device_requests(*classes)}


def make_bare_node(name: str, *, labels: Mapping[str, str] | None = None, ready: bool = True,
                   unschedulable: bool = False) -> dict[str, Any]:
    """A Node with no GPU labels and no GPU allocatable: its GPUs, if any, are DRA devices."""
    node = make_device_node(name, dict(labels or {}), {}, ready=ready)
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


class FlagWait(NamedTuple):
    """One wait on a RecordedFlag."""

    timeout_seconds: float | None  # what the waiter was ready to sit out
    already_set: bool  # the flag was up before the wait began: it did not block at all
    ended_by_flag: bool  # False: the wait ran out its timeout


class RecordedFlag(threading.Event):
    """A threading.Event that records every wait on it, so that a test can say why a wait ended (its flag, or
    its timeout) without reading the clock: put it where the code under test waits (a reflector's `recheck`)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[FlagWait] = []

    def wait(self, timeout: float | None = None) -> bool:
        already = self.is_set()
        ended_by_flag = super().wait(timeout)
        self.waits.append(FlagWait(timeout, already, ended_by_flag))
        return ended_by_flag


def record_decoded_lines(monkeypatch: Any) -> list[bytes]:
    """Every watch line the live inventory decodes from now on (its lines skipped undecoded are not)."""
    from webhook.cluster import reflector as watch

    decoded: list[bytes] = []
    parse = watch._parse

    def recorded(data: bytes) -> Any:
        decoded.append(data)
        return parse(data)
    monkeypatch.setattr(watch, "_parse", recorded)
    return decoded
