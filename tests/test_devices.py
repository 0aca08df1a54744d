"""Any device a node offers: MIG slices (both strategies), AMD Instinct next to NVIDIA, memory per device.

Table-driven over the built-in catalog with real label sets (tests/fixtures/nodes, SOURCES.md) and
label sets built from the formats GFD and the AMD labeller publish. Every patch is applied and the
Pod validated against the Kubernetes schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest

from builders import assert_valid_pod, fixture_labels, make_device_node, make_pod
from webhook.core.catalog.builtin import default_catalog_text
from webhook.core.catalog.loading import load_catalog_text
from webhook.core.reports.explain import explain_text
from webhook.core.scheduling.extender import PodNeeds, judge_node
from webhook.core.view.inventory import InventoryState, build_snapshot
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.patch import build_patch
from webhook.core.admission.planner import Decision, plan
from webhook.core.admission.review import Review

# the built-in catalog, with classes that mix vendors and resources (the built-in classes do not)
CATALOG = load_catalog_text(
    default_catalog_text()
    + "  - {name: any-big, types: [H100, MI300X, A100-80GB-3g.40gb]}\n"
    + "  - {name: any-slice, types: [A100-40GB-3g.20gb, A100-40GB-3g.20gb-single]}\n",
    "catalog",
)
AMD_TAINT = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}

MIXED_A100_80 = make_device_node(  # GFD's labels verbatim; the node offers two profiles, no whole GPU
    "a100-80-mixed", fixture_labels("nvidia-a100-80gb-pcie_mig-mixed_openshift_EXCERPT.yaml"),
    {"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "0"},
)
SINGLE_A100_40 = make_device_node(  # after `all-1g.5gb`: the product names the slice, each is one nvidia.com/gpu
    "a100-40-single", fixture_labels("a100-sxm4-40gb_gce_after-mig-all-1g.5gb.yaml"), {"nvidia.com/gpu": "7"},
)
# a node whose labels disagree with what it offers: status.allocatable is the truth
MISLABELLED_A100_40 = make_device_node(
    "a100-40-mislabelled",
    {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed",
     "nvidia.com/mig-3g.21gb.count": "16", "nvidia.com/gpu.memory": "40960"},
    {"nvidia.com/mig-3g.20gb": "16"},
)
MI300X = make_device_node("mi300x", fixture_labels("amd-instinct-mi300x-oam_labels.yaml"), {"amd.com/gpu": "8"},
                          taints=[AMD_TAINT])
MI300X_CLOUD = make_device_node(  # some clouds: no product name, the virtual function's device id
    "mi300x-vf", {"amd.com/gpu.device-id": "74b5", "amd.com/gpu.vram": "192G", "amd.com/gpu.family": "AI"},
    {"amd.com/gpu": "8"},
)
MI300X_LEGACY = make_device_node(  # older labellers put the value in the key, the count in the value
    "mi300x-legacy", {"beta.amd.com/gpu.device-id.74a1": "8", "beta.amd.com/gpu.vram.192G": "8"},
    {"amd.com/gpu": "8"},
)
H100 = make_device_node(
    "h100", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"},
    {"nvidia.com/gpu": "8"},
)
MIG_INVALID = make_device_node(
    "a100-invalid", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-INVALID"}, {"nvidia.com/gpu": "0"},
)
SLICE_MEMORY = make_device_node(  # GFD's per-profile memory label, below the profile's nominal 10 GB
    "h100-mixed", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-1g.10gb.memory": "9728",
                   "nvidia.com/gpu.memory": "81559"},
    {"nvidia.com/mig-1g.10gb": "7"},
)

C = "gpu-class.io/class"
M = "gpu-class.io/min-memory"


@dataclass
class Case:
    id: str
    pod: dict[str, Any]
    nodes: list[dict[str, Any]]
    outcome: str
    resource: str | None = None
    types: tuple[str, ...] = ()
    required: dict[str, list[str]] = field(default_factory=dict)
    message: tuple[str, ...] = ()


def limit(resource: str, count: str = "1") -> list[dict[str, Any]]:
    return [{"name": "main", "image": "registry.example/train:1.0", "resources": {"limits": {resource: count}}}]


CASES = [
    Case("mixed-mig-slice", make_pod({C: "small-slices"}), [MIXED_A100_80], "patched", "nvidia.com/mig-1g.10gb",
         ("A100-80GB-1g.10gb",), {"nvidia.com/gpu.product": ["NVIDIA-A100-80GB-PCIe"]}),
    Case("single-mig-slice", make_pod({C: "small-slices"}), [SINGLE_A100_40], "patched", "nvidia.com/gpu",
         ("A100-40GB-1g.5gb-single",), {"nvidia.com/gpu.product": ["A100-SXM4-40GB-MIG-1g.5gb"]}),
    Case("cost-picks-the-smallest-slice-and-its-resource", make_pod({C: "small-slices"}),
         [MIXED_A100_80, SINGLE_A100_40], "patched", "nvidia.com/gpu", ("A100-40GB-1g.5gb-single",),
         {"nvidia.com/gpu.product": ["A100-SXM4-40GB-MIG-1g.5gb"]}),
    Case("pod-limit-keeps-its-slice-resource", make_pod({C: "small-slices"}, containers=limit("nvidia.com/mig-1g.10gb")),
         [MIXED_A100_80, SINGLE_A100_40], "patched", "nvidia.com/mig-1g.10gb", ("A100-80GB-1g.10gb",),
         {"nvidia.com/gpu.product": ["NVIDIA-A100-80GB-PCIe"]}),
    Case("allocatable-not-labels-names-the-resource", make_pod({C: "any-slice"}), [MISLABELLED_A100_40], "patched",
         "nvidia.com/mig-3g.20gb", ("A100-40GB-3g.20gb",), {"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-40GB"]}),
    Case("a-slice-is-never-the-whole-gpu", make_pod({C: "high"}), [MIXED_A100_80, SINGLE_A100_40], "refused",
         message=("types GB300, GB200, B300, B200, H200, H100-NVL", "Present: A100-40GB-1g.5gb-single", "A100-80GB-1g.10gb")),
    Case("mig-invalid-is-never-valid", make_pod({C: "high"}), [MIG_INVALID], "refused", message=("no GPU nodes",)),
    Case("amd-by-product-name", make_pod({C: "instinct"}), [MI300X], "patched", "amd.com/gpu", ("MI300X",),
         {"amd.com/gpu.product-name": ["AMD_Instinct_MI300X_OAM"]}),
    Case("amd-by-device-id-alone", make_pod({C: "instinct"}), [MI300X_CLOUD], "patched", "amd.com/gpu", ("MI300X",),
         {"amd.com/gpu.device-id": ["74b5"]}),
    Case("amd-legacy-keys", make_pod({C: "instinct"}), [MI300X_LEGACY], "patched", "amd.com/gpu", ("MI300X",),
         {"beta.amd.com/gpu.device-id.74a1": ["8"]}),
    Case("mixed-vendors-performance-picks-the-fastest", make_pod({C: "any-big"}), [H100, MI300X], "patched",
         "amd.com/gpu", ("MI300X",), {"amd.com/gpu.product-name": ["AMD_Instinct_MI300X_OAM"]}),
    Case("mixed-vendors-limit-fixes-the-resource", make_pod({C: "any-big"}, containers=limit("nvidia.com/gpu", "2")),
         [H100, MI300X], "patched", "nvidia.com/gpu", ("H100",), {"nvidia.com/gpu.product": ["NVIDIA-H100-80GB-HBM3"]}),
    Case("limit-on-a-resource-the-class-does-not-use", make_pod({C: "instinct"}, containers=limit("nvidia.com/gpu")),
         [H100, MI300X], "refused", message=("asks for nvidia.com/gpu", "ask for one of amd.com/gpu")),
    Case("two-resources-refused", make_pod({C: "any-big"}, containers=limit("nvidia.com/gpu") + [
        {"name": "side", "image": "registry.example/side:1", "resources": {"limits": {"amd.com/gpu": "1"}}}]),
         [H100, MI300X], "refused", message=("nvidia.com/gpu and amd.com/gpu", "one GPU resource only")),
    Case("min-memory-keeps-whole-gpus", make_pod({C: "any-big", M: "48G"}, containers=limit("nvidia.com/gpu")),
         [H100, MIXED_A100_80], "patched", "nvidia.com/gpu", ("H100",),
         {"nvidia.com/gpu.product": ["NVIDIA-H100-80GB-HBM3"]}),
    Case("min-memory-drops-the-slice", make_pod({C: "any-big", M: "40960Mi"},
                                                 containers=limit("nvidia.com/mig-3g.40gb")),
         [MIXED_A100_80], "patched", "nvidia.com/mig-3g.40gb", ("A100-80GB-3g.40gb",),
         {"nvidia.com/gpu.product": ["NVIDIA-A100-80GB-PCIe"]}),
    Case("min-memory-over-the-slice", make_pod({C: "any-big", M: "41Gi"}, containers=limit("nvidia.com/mig-3g.40gb")),
         [MIXED_A100_80], "refused", message=("at least 41 GiB", "largest memory present: 40 GiB")),
    Case("min-memory-from-vram-label", make_pod({C: "any-big", M: "100Gi"}), [H100, MI300X_CLOUD], "patched",
         "amd.com/gpu", ("MI300X",), {"amd.com/gpu.device-id": ["74b5"]}),
    Case("min-memory-nobody-has", make_pod({C: "any-big", M: "300Gi"}), [H100, MI300X], "refused",
         message=("at least 300 GiB", "largest memory present: 192 GiB")),
    Case("min-memory-mig-profile-label-first", make_pod({C: "small-slices", M: "10Gi"}), [SLICE_MEMORY], "refused",
         message=("largest memory present: 9.5 GiB",)),
    Case("min-memory-malformed", make_pod({C: "any-big", M: "40 GB"}), [H100], "refused",
         message=("gpu-class.io/min-memory", '"40Gi"', "'40 GB'")),
]
def decide(case: Case) -> tuple[Decision, Snapshot]:
    snapshot = build_snapshot(CATALOG, case.nodes)
    return plan(case.pod, snapshot, CATALOG, namespace="ml"), snapshot


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_device_decisions(case: Case) -> None:
    decision, snapshot = decide(case)
    assert decision.outcome == case.outcome, decision.message
    for text in case.message:
        assert text in decision.message
    if case.outcome != "patched":
        return
    placement = decision.placement
    assert placement is not None
    assert (placement.resource, placement.types) == (case.resource, case.types)
    assert dict((k, list(v)) for k, v in placement.required) == case.required
    patched = jsonpatch.apply_patch(case.pod, build_patch(case.pod, placement))
    assert_valid_pod(patched)
    limits = patched["spec"]["containers"][0]["resources"]["limits"]
    assert limits[case.resource] == str(placement.count)
    assert [r for r in limits if r in CATALOG.resources] == [case.resource], "one GPU resource per Pod"
    again = plan(patched, snapshot, CATALOG, namespace="ml")
    assert again.placement is not None and build_patch(patched, again.placement) == [], "idempotent"


def test_amd_nodes_get_their_taint_tolerated() -> None:
    decision, _ = decide(CASES[[c.id for c in CASES].index("amd-by-product-name")])
    assert decision.placement is not None
    assert [(t.key, t.effect) for t in decision.placement.tolerations] == [("amd.com/gpu", "NoSchedule")]


def test_a_mixed_node_offers_one_type_per_profile_it_has() -> None:
    info = node_info_from_object(MIXED_A100_80, CATALOG)
    assert info is not None
    assert [(o.type_name, o.resource, o.allocatable) for o in info.offers] == [
        ("A100-80GB-1g.10gb", "nvidia.com/mig-1g.10gb", 1), ("A100-80GB-3g.40gb", "nvidia.com/mig-3g.40gb", 2),
    ]
    assert node_info_from_object(MIG_INVALID, CATALOG) is not None  # a GPU node, offering no type
    assert node_info_from_object(MIG_INVALID, CATALOG).offers == ()  # type: ignore[union-attr]


def test_a_slice_held_does_not_use_a_whole_gpu() -> None:
    """Accounting is per resource: a Pod holding one 1g.10gb slice leaves the node's 3g.40gb slices free."""
    state = InventoryState(catalog=CATALOG, synced=True)
    state.replace_nodes([i for i in (node_info_from_object(n, CATALOG) for n in [MIXED_A100_80, H100]) if i])
    state.replace_pods([("ml/a", "a100-80-mixed", {"nvidia.com/mig-1g.10gb": 1})])
    snapshot = state.publish()
    assert snapshot.groups("A100-80GB-1g.10gb")[0].free_gpus == 0
    assert snapshot.groups("A100-80GB-3g.40gb")[0].free_gpus == 2
    state.set_pod("ml/b", "h100", {"nvidia.com/gpu": 3})
    snapshot = state.publish()
    assert snapshot.groups("H100")[0].free_gpus == 5 and snapshot.groups("A100-80GB-3g.40gb")[0].free_gpus == 2
    info = snapshot.nodes["a100-80-mixed"]
    slice_pod = PodNeeds(types=("A100-80GB-3g.40gb",), gpus=2, class_name="any-big", resource="nvidia.com/mig-3g.40gb")
    verdict = judge_node("a100-80-mixed", info, slice_pod, snapshot, from_cache=True)
    assert (verdict.passed, verdict.free_gpus, verdict.type_name) == (True, 2, "A100-80GB-3g.40gb")
    small = PodNeeds(types=("A100-80GB-1g.10gb",), gpus=1, class_name="small-slices", resource="nvidia.com/mig-1g.10gb")
    verdict = judge_node("a100-80-mixed", info, small, snapshot, from_cache=True)
    assert (verdict.passed, verdict.resolvable, verdict.reason) == (False, True, "gpu-class: 0 GPUs free, Pod needs 1")


def _h100(name: str, *, cordoned: bool = False) -> dict[str, Any]:
    node = make_device_node(name, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": "8"})
    node["spec"] = {**node.get("spec", {}), "unschedulable": cordoned}
    return node


BINDS = [  # (pod, node or None to remove it, its devices)
    ("ml/a", "h100-0", {"nvidia.com/gpu": 3}),
    ("ml/b", "h100-0", {"nvidia.com/gpu": 8}),  # over allocatable: the node's free devices stop at 0
    ("ml/a", None, {}),
    ("ml/c", "h100-cordoned", {"nvidia.com/gpu": 2}),  # a cordoned node counts no free devices either way
    ("ml/d", "a100-80-mixed", {"nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-3g.40gb": 1}),
    ("ml/d", "h100-1", {"nvidia.com/gpu": 1}),  # moved to another node
    ("ml/e", "gone", {"nvidia.com/gpu": 4}),  # a node the inventory does not hold
    ("ml/b", None, {}),
]


@pytest.mark.parametrize("steps", [pytest.param(i, id=f"after-{i}-binds") for i in range(1, len(BINDS) + 1)])
def test_binds_keep_every_group_summary_as_a_full_recount_has_it(steps: int) -> None:
    """set_pod adjusts the touched groups' free devices instead of walking them; the result is the recount's."""
    nodes = [_h100("h100-0"), _h100("h100-1"), _h100("h100-cordoned", cordoned=True), MIXED_A100_80, H100]
    state = InventoryState(catalog=CATALOG, synced=True)
    state.replace_nodes([i for i in (node_info_from_object(n, CATALOG) for n in nodes) if i])
    state.replace_pods([])
    for pod, node, devices in BINDS[:steps]:
        state.set_pod(pod, node, devices)
    incremental = state.publish()
    state.replace_pods([(pod, node, devices) for pod, (node, devices) in state.pods.items()])
    recounted = state.publish()
    assert incremental.groups_by_type == recounted.groups_by_type
    assert sum(g.free_gpus for g in recounted.groups("H100")) < 24  # the binds did change something


def test_explain_names_the_resource_and_why_not_the_others() -> None:
    pod = make_pod({C: "any-big"})
    decision, snapshot = decide(Case("", pod, [H100, MI300X, MIXED_A100_80], "patched"))
    text = explain_text(Review(decision, []), "ml", pod, CATALOG)
    assert "resource amd.com/gpu: chosen (best valid type MI300X by strategy performance)" in text
    assert "resource nvidia.com/gpu: not chosen (its best valid type H100 comes after MI300X" in text
    assert "resource nvidia.com/mig-3g.40gb: not chosen (its best valid type A100-80GB-3g.40gb" in text
    assert "container main: 1 amd.com/gpu (limit added)" in text
    fixed = make_pod({C: "any-big"}, containers=limit("nvidia.com/mig-3g.40gb"))
    decision, _ = decide(Case("", fixed, [H100, MI300X, MIXED_A100_80], "patched"))
    text = explain_text(Review(decision, []), "ml", fixed, CATALOG)
    assert "resource nvidia.com/mig-3g.40gb: chosen (the Pod asks for it)" in text
    assert "resource amd.com/gpu: not chosen (the Pod asks for nvidia.com/mig-3g.40gb)" in text
