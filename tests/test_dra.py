"""GPUs published through DRA: ResourceSlices, DeviceClasses and ResourceClaims merged into the nodes.

The objects are those NVIDIA's and AMD's DRA drivers publish (tests/fixtures/dra, builders), read
with the built-in catalog. What the scheduler does with them is tests/e2e/test_dra_e2e.py's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import (
    AMD_DRIVER, NVIDIA_DRIVER, amd_device_class, amd_gpus, make_bare_node, make_claim, make_device_node, make_pod,
    make_slice, nvidia_device_classes, nvidia_gpus, nvidia_migs,
)
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.view.dra import DeviceProblem, slice_from_object
from webhook.core.catalog.quantity import quantity_mib
from webhook.core.view.inventory import InventoryState, build_snapshot
from webhook.core.view.namespaces import namespace_info_from_object
from webhook.core.view.nodes import Offer, node_info_from_object
from webhook.core.view.pods import pod_gpu_requests
from webhook.core.view.snapshot import Snapshot
from webhook.core.view.dra import claim_from_object, device_class_from_object
from webhook.core.admission.planner import plan

CATALOG = load_default_catalog()
H100 = "NVIDIA H100 80GB HBM3"
GFD_H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@dataclass
class Case:
    id: str
    objects: list[dict[str, Any]]
    offers: dict[str, list[tuple[str, str, str, int]]]  # node -> (type, label key, value, devices)
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (driver, product, part of the reason)
    requested: dict[tuple[str, str], int] = field(default_factory=dict)


CASES = [
    Case("dra-only-node-named-by-hostname",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(4)), *nvidia_device_classes()],
         {"n1": [("H100", "kubernetes.io/hostname", "n1", 4)]}),
    Case("gfd-labelled-dra-node-named-by-its-product",
         [make_device_node("n1", GFD_H100, {}), make_slice("n1", nvidia_gpus(8)), *nvidia_device_classes()],
         {"n1": [("H100", "nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3", 8)]}),
    Case("label-of-another-type-is-a-problem",
         [make_device_node("n1", {"gpu-type": "NVIDIA-A100-SXM4-80GB"}, {}),
          make_slice("n1", nvidia_gpus(2)), *nvidia_device_classes()],
         {},
         [(NVIDIA_DRIVER, H100, "node n1's label gpu-type=NVIDIA-A100-SXM4-80GB names A100-80GB, its devices are "
                               "H100: a A100-80GB Pod could be given them; fix the label")]),
    Case("no-deviceclass-maps-the-resource",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(2)), *nvidia_device_classes(extended_resource=False)],
         {}, [(NVIDIA_DRIVER, H100, "no DeviceClass maps nvidia.com/gpu (the resource of H100)")]),
    Case("no-deviceclass-at-all",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(2))],
         {}, [(NVIDIA_DRIVER, H100, "give the DeviceClass that selects these devices extendedResourceName: "
                                   "nvidia.com/gpu")]),
    Case("device-plugin-serves-the-resource-there",
         [make_device_node("n1", GFD_H100, {"nvidia.com/gpu": "8"}), make_slice("n1", nvidia_gpus(8)),
          *nvidia_device_classes()],
         {"n1": [("H100", "nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3", 8)]},
         [(NVIDIA_DRIVER, H100, "the node's device plugin offers nvidia.com/gpu")]),
    Case("two-types-one-resource-on-a-node",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(2) + nvidia_gpus(2, "NVIDIA A100-SXM4-80GB", start=2)),
          *nvidia_device_classes()],
         {}, [(NVIDIA_DRIVER, H100, "the node has devices of types A100-80GB, H100, all served as nvidia.com/gpu"),
              (NVIDIA_DRIVER, "NVIDIA A100-SXM4-80GB", "the scheduler may give a Pod any of them")]),
    Case("amd-class-maps-nothing-as-shipped",
         [make_bare_node("n1"), make_slice("n1", amd_gpus(8), driver=AMD_DRIVER), amd_device_class()],
         {}, [(AMD_DRIVER, "AMD_Instinct_MI300X_OAM", "no DeviceClass maps amd.com/gpu (the resource of MI300X)")]),
    Case("amd-class-given-amd.com/gpu",
         [make_bare_node("n1"), make_slice("n1", amd_gpus(8), driver=AMD_DRIVER), amd_device_class("amd.com/gpu")],
         {"n1": [("MI300X", "kubernetes.io/hostname", "n1", 8)]}),
    Case("mig-slices-need-a-class-of-their-own",
         [make_bare_node("n1"), make_slice("n1", nvidia_migs(2, "3g.40gb")), *nvidia_device_classes()],
         {}, [(NVIDIA_DRIVER, H100, "no DeviceClass maps nvidia.com/mig-3g.40gb (the resource of H100-3g.40gb)")]),
    Case("mig-slices-with-a-class",
         [make_bare_node("n1"), make_slice("n1", nvidia_migs(2, "3g.40gb")), *nvidia_device_classes(),
          {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig-3g40gb"},
           "spec": {"extendedResourceName": "nvidia.com/mig-3g.40gb"}}],
         {"n1": [("H100-3g.40gb", "kubernetes.io/hostname", "n1", 2)]}),
    Case("driver-nobody-maps",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(1), driver="tpu.example.com"), *nvidia_device_classes()],
         {}, [("tpu.example.com", H100, "no type of the catalog names driver tpu.example.com")]),
    Case("attribute-of-the-wrong-type",
         [make_bare_node("n1"), *nvidia_device_classes(),
          make_slice("n1", [{**d, "attributes": {**d["attributes"], "productName": {"int": 100}}} for d in nvidia_gpus(1)])],
         {}, [(NVIDIA_DRIVER, "", "attribute productName is int; the catalog matches text")]),
    Case("unknown-product",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(1, "NVIDIA GeForce RTX 5090")), *nvidia_device_classes()],
         {}, [(NVIDIA_DRIVER, "NVIDIA GeForce RTX 5090", "no type of the catalog matches")]),
    Case("slice-of-a-node-not-in-the-cluster",
         [make_slice("n9", nvidia_gpus(1)), *nvidia_device_classes()],
         {}, [(NVIDIA_DRIVER, H100, "node n9 is not in the cluster")]),
    Case("slice-not-local-to-a-node",
         [make_slice(None, nvidia_gpus(1)), *nvidia_device_classes()],
         {}, [(NVIDIA_DRIVER, H100, "not local to one node: devices on several nodes (allNodes)")]),
    Case("tainted-device",
         [make_bare_node("n1"), *nvidia_device_classes(),
          make_slice("n1", [{**d, "taints": [{"key": "gpu.example.com/unhealthy", "effect": "NoSchedule"}]}
                            for d in nvidia_gpus(1)] + nvidia_gpus(1, start=1))],
         # an unhealthy device of its type (test_health.py counts it), not a device of no type
         {"n1": [("H100", "kubernetes.io/hostname", "n1", 1)]}),
    Case("newest-generation-of-a-pool-only",
         [make_bare_node("n1"), *nvidia_device_classes(), make_slice("n1", nvidia_gpus(8), name="old"),
          make_slice("n1", nvidia_gpus(4), name="new", generation=2)],
         {"n1": [("H100", "kubernetes.io/hostname", "n1", 4)]}),
    Case("claims-hold-devices",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(4)), *nvidia_device_classes(),
          make_claim("a", [(NVIDIA_DRIVER, "n1", "gpu-0"), (NVIDIA_DRIVER, "n1", "gpu-1")]),
          make_claim("b", [(NVIDIA_DRIVER, "n1", "gpu-3")]), make_claim("unallocated", [])],
         {"n1": [("H100", "kubernetes.io/hostname", "n1", 4)]}, requested={("n1", "nvidia.com/gpu"): 3}),
    Case("two-drivers-two-resources-one-node",
         [make_bare_node("n1"), make_slice("n1", nvidia_gpus(2)), make_slice("n1", amd_gpus(2), driver=AMD_DRIVER),
          *nvidia_device_classes(), amd_device_class("amd.com/gpu")],
         {"n1": [("H100", "kubernetes.io/hostname", "n1", 2), ("MI300X", "kubernetes.io/hostname", "n1", 2)]}),
]


def _offers(snapshot: Snapshot) -> dict[str, list[tuple[str, str, str, int]]]:
    """The offers with devices (a labelled node without any is kept, offering nothing)."""
    return {name: sorted((o.type_name, o.label_key, o.value, o.allocatable) for o in info.offers if o.allocatable)
            for name, info in snapshot.nodes.items() if any(o.allocatable for o in info.offers)}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_dra_devices_become_offers_or_problems(case: Case) -> None:
    snapshot = build_snapshot(CATALOG, case.objects)
    assert _offers(snapshot) == case.offers
    found = {(p.driver, p.product, p.reason) for p in snapshot.dra.problems}
    for driver, product, reason in case.problems:
        assert any(d == driver and p == product and reason in r for d, p, r in found), found
    assert len(found) == len(case.problems), found
    assert dict(snapshot.requested) == case.requested


def test_problems_count_devices_and_nodes() -> None:
    objects = [make_bare_node("n1"), make_bare_node("n2"), make_slice("n1", nvidia_gpus(2, "NVIDIA T1000")),
               make_slice("n2", nvidia_gpus(3, "NVIDIA T1000")), *nvidia_device_classes()]
    (problem,) = build_snapshot(CATALOG, objects).dra.problems
    assert problem == DeviceProblem(NVIDIA_DRIVER, "NVIDIA T1000",
                                    "no type of the catalog matches type='gpu', productName='NVIDIA T1000'; by its "
                                    "attributes: too little information: no architecture, cudaComputeCapability", 5, 2)


def test_a_dra_offer_carries_the_devices_memory_and_the_smallest_counts() -> None:
    objects = [make_bare_node("n1"), make_bare_node("n2"), make_bare_node("n3"), *nvidia_device_classes(),
               make_slice("n1", nvidia_gpus(1, memory="40960Mi") + nvidia_gpus(1, memory="81559Mi", start=1)),
               make_slice("n2", nvidia_gpus(2, memory=None)),
               make_slice("n3", amd_gpus(1, memory="0"), driver=AMD_DRIVER), amd_device_class("amd.com/gpu")]
    nodes = build_snapshot(CATALOG, objects).nodes
    assert nodes["n1"].offers[0].memory_mib == 40960
    assert nodes["n2"].offers[0].memory_mib == 80 * 1024  # no capacity: the type's memoryGiB
    assert nodes["n3"].offers[0].memory_mib == 192 * 1024  # 0 is AMD's "unreadable"


@pytest.mark.parametrize("text, mib", [
    ("81559Mi", 81559), ("85520809984", 85520809984 / 2**20), ("80Gi", 81920), ("1e3", 1000 / 2**20),
    ("0", None), ("", None), ("lots", None), (None, None),
])
def test_quantity_mib(text: Any, mib: float | None) -> None:
    assert quantity_mib(text) == mib


def test_bound_pods_count_where_the_device_plugin_serves_claims_where_dra_does() -> None:
    """A Pod placed on a DRA node holds nvidia.com/gpu and the claim the scheduler made for it: the
    devices are counted once, from the claim (a Pod's own claims take devices too)."""
    state = InventoryState(catalog=CATALOG, synced=True)
    state.replace_device_classes([device_class_from_object(c) for c in nvidia_device_classes()])  # type: ignore[misc]
    state.replace_slices([slice_from_object(make_slice("dra", nvidia_gpus(4)), CATALOG)])  # type: ignore[list-item]
    state.replace_nodes([node_info_from_object(make_bare_node("dra"), CATALOG, keep_all=True),  # type: ignore[list-item]
                         node_info_from_object(make_device_node("dp", GFD_H100, {"nvidia.com/gpu": "4"}), CATALOG)])
    for name, node in (("on-dra", "dra"), ("on-dp", "dp")):
        pod = make_pod(gpu_limit="2", extra_spec={"nodeName": node})
        state.set_pod(f"ml/{name}", *pod_gpu_requests(pod, CATALOG.resources))
    assert dict(state.publish().requested) == {("dp", "nvidia.com/gpu"): 2}
    state.set_claim(*claim_from_object(make_claim("on-dra-claim", [(NVIDIA_DRIVER, "dra", "gpu-0"),
                                                                  (NVIDIA_DRIVER, "dra", "gpu-1")])))
    snapshot = state.publish()
    assert dict(snapshot.requested) == {("dp", "nvidia.com/gpu"): 2, ("dra", "nvidia.com/gpu"): 2}
    assert [g.free_gpus for g in snapshot.groups("H100")] == [2, 2]
    # claims not readable (no RBAC): the Pods' requests are what is known
    state.replace_claims([], read=False)
    assert dict(state.publish().requested) == {("dp", "nvidia.com/gpu"): 2, ("dra", "nvidia.com/gpu"): 2}


def _dra_events(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [("ADDED", o) for o in objects]


def _apply(state: InventoryState, kind: str, obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    deleted = kind == "DELETED"
    if obj["kind"] == "Node":
        info = node_info_from_object(obj, CATALOG, keep_all=True)
        state.remove_node(name) if deleted or info is None else state.upsert_node(info)
    elif obj["kind"] == "ResourceSlice":
        sliced = slice_from_object(obj, CATALOG)
        state.remove_slice(name) if deleted or sliced is None else state.upsert_slice(sliced)
    elif obj["kind"] == "DeviceClass":
        device_class = device_class_from_object(obj)
        state.remove_device_class(name) if deleted or device_class is None else state.upsert_device_class(device_class)
    elif obj["kind"] == "ResourceClaim":
        key, devices = claim_from_object(obj)
        state.set_claim(key, frozenset() if deleted else devices)
    elif obj["kind"] == "Namespace":
        info_ns = namespace_info_from_object(obj)
        assert info_ns is not None
        state.upsert_namespace(info_ns)


def _world(rng: random.Random) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [*nvidia_device_classes(), amd_device_class("amd.com/gpu")]
    for i in range(6):
        node = f"n{i}"
        labels = GFD_H100 if rng.random() < 0.3 else {}
        objects.append(make_device_node(node, labels, {"nvidia.com/gpu": "4"} if rng.random() < 0.2 else {}))
        kind = rng.choice(["h100", "a100", "amd", "mixed", "none"])
        devices = {"h100": lambda: nvidia_gpus(4), "a100": lambda: nvidia_gpus(2, "NVIDIA A100-SXM4-80GB"),
                   "amd": lambda: amd_gpus(8), "none": lambda: [],
                   "mixed": lambda: nvidia_gpus(1) + nvidia_gpus(1, "NVIDIA L4", start=1)}[kind]()
        driver = AMD_DRIVER if kind == "amd" else NVIDIA_DRIVER
        objects.append(make_slice(node, devices, driver=driver))
        if devices and rng.random() < 0.5:
            objects.append(make_claim(f"c{i}", [(driver, node, devices[0]["name"])]))
    return objects


@pytest.mark.parametrize("seed", range(8))
def test_events_in_any_order_give_the_snapshot_a_full_list_gives(seed: int) -> None:
    """The watch applies objects one by one, in whatever order they come (a slice before its node, a
    claim before its slice); the result must be what reading them all at once gives."""
    rng = random.Random(seed)
    objects = _world(rng)
    expected = build_snapshot(CATALOG, objects)
    state = InventoryState(catalog=CATALOG, synced=True)
    shuffled = objects[:]
    rng.shuffle(shuffled)
    # churn on the way: some objects come, go and come back
    for obj in shuffled:
        _apply(state, "ADDED", obj)
        if rng.random() < 0.3:
            _apply(state, "DELETED", obj)
            _apply(state, "ADDED", obj)
    got = state.publish()
    assert dict(got.nodes) == dict(expected.nodes)
    assert dict(got.groups_by_type) == dict(expected.groups_by_type)
    assert dict(got.requested) == dict(expected.requested)
    assert got.dra == expected.dra


def test_a_class_pod_on_a_dra_only_cluster_is_placed_by_hostname() -> None:
    """The issue's report: two nodes whose GPUs are DRA devices only, one with the GFD product label and
    one without, and NVIDIA's DeviceClass: every Pod of class high was refused."""
    objects = [make_device_node("labelled", GFD_H100, {}), make_bare_node("bare"),
               make_slice("labelled", nvidia_gpus(8)), make_slice("bare", nvidia_gpus(4, "NVIDIA A100-SXM4-80GB")),
               *nvidia_device_classes()]
    decision = plan(make_pod({"gpu-class.io/class": "high"}), build_snapshot(CATALOG, objects), CATALOG, namespace="ml")
    assert decision.placement is not None, decision.message
    assert decision.placement.types == ("H100", "A100-80GB")
    assert decision.placement.required == (("kubernetes.io/hostname", ("bare",)),
                                           ("nvidia.com/gpu.product", ("NVIDIA-H100-80GB-HBM3",)))
    assert [(p.type_name, p.label_key, p.products) for p in decision.placement.preferences] == [
        ("H100", "nvidia.com/gpu.product", ("NVIDIA-H100-80GB-HBM3",)), ("A100-80GB", "kubernetes.io/hostname", ("bare",))]
    assert decision.placement.resource == "nvidia.com/gpu"


def test_offer_flags_dra_devices() -> None:
    objects = [make_bare_node("n1"), make_slice("n1", nvidia_gpus(1)), *nvidia_device_classes()]
    (offer,) = build_snapshot(CATALOG, objects).nodes["n1"].offers
    assert offer == Offer("H100", "kubernetes.io/hostname", "n1", "nvidia.com/gpu", 1, 81559.0, dra=True)


def test_a_refusal_says_which_dra_devices_are_not_placed_on_and_why() -> None:
    """AMD's DeviceClass maps no extended resource: the Pod cannot get those GPUs, and is told why."""
    objects = [make_bare_node("n1"), make_slice("n1", amd_gpus(8), driver=AMD_DRIVER), amd_device_class()]
    decision = plan(make_pod({"gpu-class.io/class": "instinct"}), build_snapshot(CATALOG, objects), CATALOG,
                    namespace="ml")
    assert decision.outcome == "refused"
    assert ("Present: no GPU nodes. DRA devices not placed on: 8 AMD_Instinct_MI300X_OAM: no DeviceClass maps "
            "amd.com/gpu (the resource of MI300X) (gpuclass inventory lists them).") in decision.message
    fine = build_snapshot(CATALOG, [make_device_node("h", GFD_H100, {"nvidia.com/gpu": "1"})])
    assert "DRA" not in plan(make_pod({"gpu-class.io/class": "high", "gpu-class.io/count": "2"}), fine, CATALOG,
                             namespace="ml").message


def test_a_dra_placement_patch_is_a_valid_pod_and_placing_it_again_changes_nothing() -> None:
    """Reinvocation (a later webhook changed the Pod) sends the webhook its own output: nothing to add."""
    import jsonpatch

    from builders import assert_valid_pod
    from webhook.core.admission.patch import build_patch

    objects = [make_device_node("labelled", GFD_H100, {}), make_bare_node("bare"),
               make_slice("labelled", nvidia_gpus(8)), make_slice("bare", nvidia_gpus(4, "NVIDIA A100-SXM4-80GB")),
               *nvidia_device_classes()]
    snapshot = build_snapshot(CATALOG, objects)
    pod = make_pod({"gpu-class.io/class": "high"})
    decision = plan(pod, snapshot, CATALOG, namespace="ml")
    assert decision.placement is not None
    patched = jsonpatch.apply_patch(pod, build_patch(pod, decision.placement))
    assert_valid_pod(patched)
    again = plan(patched, snapshot, CATALOG, namespace="ml")
    assert again.placement is not None and build_patch(patched, again.placement) == []


@pytest.mark.parametrize("junk", [
    pytest.param({"spec": "x"}, id="spec-not-an-object"),
    pytest.param({"spec": {"driver": NVIDIA_DRIVER, "nodeName": "n1", "devices": "x"}}, id="devices-not-a-list"),
    pytest.param({"spec": {"driver": NVIDIA_DRIVER, "nodeName": "n1", "pool": ["x"],
                           "devices": [5, {"name": "gpu-0", "attributes": ["x"], "capacity": "x", "taints": "x"},
                                       {"name": "gpu-1", "capacity": {"memory": "x"}}]}}, id="devices-of-the-wrong-shape"),
    pytest.param({"spec": {"driver": NVIDIA_DRIVER, "nodeName": "n1", "pool": {"generation": "new"},
                           "devices": [{"name": "gpu-0", "attributes": {"productName": {"string": 5}}}]}},
                 id="values-of-the-wrong-type"),
])
def test_a_slice_of_the_wrong_shape_is_read_as_far_as_it_goes(junk: dict[str, Any]) -> None:
    """The API server validates slices, but files given to --nodes are not: no crash, and devices it
    can read are reported as not placed on with the reason."""
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "junk"}, **junk}
    snapshot = build_snapshot(CATALOG, [make_bare_node("n1"), obj, *nvidia_device_classes(),
                                        {"kind": "ResourceClaim", "metadata": "x", "status": {"allocation": "x"}},
                                        {"kind": "DeviceClass", "metadata": {"name": "c"}, "spec": "x"}])
    assert not any(info.offers for info in snapshot.nodes.values())
    assert all(p.reason for p in snapshot.dra.problems)


@pytest.mark.parametrize("size, outcome, says", [
    pytest.param("3", "patched", "", id="fits-on-one-node"),
    pytest.param("6", "refused", "the most one type holds is 4 such Pods (H100", id="more-than-one-node-holds"),
])
def test_a_group_on_nodes_named_by_hostname_meets_on_one_node(size: str, outcome: str, says: str) -> None:
    """A group's Pods meet on one value of the label the type is named by; DRA nodes no product label
    names are each a value of their own, so a group there must fit one node (gpu-class.io/group)."""
    objects = [*(make_bare_node(f"n{i}") for i in range(3)), *(make_slice(f"n{i}", nvidia_gpus(4)) for i in range(3)),
               *nvidia_device_classes()]
    pod = make_pod({"gpu-class.io/class": "high", "gpu-class.io/group": "g", "gpu-class.io/group-size": size})
    decision = plan(pod, build_snapshot(CATALOG, objects), CATALOG, namespace="ml")
    assert decision.outcome == outcome, decision.message
    assert says in decision.message
