"""Choosing by need: the built-in catalog's classes over today's GPUs, classes defined by `requires`, a Pod's
gpu-class.io/requires and min-compute-capability, and products no type claims placed by their labels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pytest

from builders import make_bare_node, make_node, make_pod, make_slice, nvidia_device_classes, nvidia_gpus
from webhook.core.catalog.loading import load_catalog_text, load_default_catalog
from webhook.core.reports.explain import explain_json, explain_text
from webhook.core.view.inventory import build_snapshot
from webhook.core.view.snapshot import placing_catalog
from webhook.core.reports.inventory_report import build_report, render_table
from webhook.core.admission.planner import plan
from webhook.core.admission.review import Request, review_pod

BUILT_IN = load_default_catalog()
C = "gpu-class.io/class"


def gfd_node(name: str, product: str, family: str, compute: str, memory_mib: int | None) -> dict[str, Any]:
    """A node as GPU Feature Discovery labels it (product, family, compute capability, memory in MiB)."""
    major, minor = compute.split(".")
    labels = {"nvidia.com/gpu.family": family, "nvidia.com/gpu.compute.major": major,
              "nvidia.com/gpu.compute.minor": minor}
    if memory_mib is not None:
        labels["nvidia.com/gpu.memory"] = str(memory_mib)
    return make_node(name, product, gpus=8, labels=labels)


# The cluster of the issue: one node of each product GFD names today, and a made-up product of a
# generation the catalog does not know.
TODAY = [
    gfd_node("b300", "NVIDIA-B300-SXM6-AC", "blackwell", "10.3", 275040),
    gfd_node("b200", "NVIDIA-B200", "blackwell", "10.0", 183359),
    gfd_node("gb200", "NVIDIA-GB200", "blackwell", "10.0", 189471),
    gfd_node("h100", "NVIDIA-H100-80GB-HBM3", "hopper", "9.0", 81559),
    gfd_node("h20", "NVIDIA-H20", "hopper", "9.0", 97871),
    gfd_node("a100", "NVIDIA-A100-SXM4-80GB", "ampere", "8.0", 81920),
    gfd_node("rtx-pro", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "blackwell", "12.0", 97887),
    gfd_node("l4", "NVIDIA-L4", "ada-lovelace", "8.9", 23034),
    gfd_node("x300", "NVIDIA-X300", "x-next", "11.0", 307200),
]
SNAPSHOT = build_snapshot(BUILT_IN, TODAY)

BLACKWELL = {"GB200", "B300", "B200", "RTX-PRO-6000"}
HOPPER = {"H100", "H20"}


@dataclass(frozen=True)
class Case:
    id: str
    annotations: Mapping[str, str]
    outcome: str
    types: tuple[str, ...] = ()  # the placement's order
    message: tuple[str, ...] = ()  # parts of the refusal
    reasons: Mapping[str, str] = field(default_factory=dict)  # type -> part of its verdict's reason


CASES = [
    # Blackwell data-centre GPUs first; H20 (148) is not in `high`; L4 never; X300 only by requirements
    Case("high-offers-blackwell-before-hopper", {C: "high"}, "patched",
         ("GB200", "B300", "B200", "H100", "RTX-PRO-6000", "A100-80GB")),
    Case("fp8-class-blackwell-hopper-ada-never-ampere", {C: "fp8"}, "patched",
         ("GB200", "B300", "B200", "NVIDIA-X300", "H100", "RTX-PRO-6000", "H20", "L4")),
    Case("fp4-class-only-blackwell-and-the-newer-x300", {C: "fp4"}, "patched",
         ("GB200", "B300", "B200", "NVIDIA-X300", "RTX-PRO-6000")),
    Case("pod-requires-fp8-narrows-large-memory", {C: "large-memory", "gpu-class.io/requires": "fp8"}, "patched",
         ("H20", "RTX-PRO-6000", "H100", "B200", "B300", "GB200"),
         reasons={"A100-80GB": "does not meet the Pod's need: no fp8 tensor cores"}),
    Case("pod-min-compute-capability-keeps-blackwell", {C: "high", "gpu-class.io/min-compute-capability": "10.0"},
         "patched", ("GB200", "B300", "B200", "RTX-PRO-6000"),
         reasons={"H100": "compute capability 9.0, needs 10.0 or above"}),
    Case("pod-narrows-a-requires-class", {C: "fp8", "gpu-class.io/min-compute-capability": "10.3"}, "patched",
         ("B300", "NVIDIA-X300", "RTX-PRO-6000"), reasons={"GB200": "compute capability 10.0, needs 10.3"}),
    Case("refusal-names-types-meeting-the-need", {C: "standard", "gpu-class.io/requires": "fp4"}, "refused",
         message=("the Pod needs fp4: types of class standard meeting it: none",
                  "present in other classes: GB200, B300, B200, NVIDIA-X300, RTX-PRO-6000")),
    Case("bad-precision-refused", {C: "high", "gpu-class.io/requires": "fp7"}, "refused",
         message=("gpu-class.io/requires lists tensor-core precisions",)),
    Case("bad-compute-capability-refused", {C: "high", "gpu-class.io/min-compute-capability": "nine"}, "refused",
         message=("must be a CUDA compute capability major.minor",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_choosing_by_need(case: Case) -> None:
    decision = plan(make_pod(dict(case.annotations)), SNAPSHOT, BUILT_IN, namespace="ml")
    assert decision.outcome == case.outcome, decision.message
    if case.outcome == "patched":
        assert decision.placement is not None and decision.placement.types == case.types
        # never Ampere where the need is fp8, never a type the need rules out
        assert not ({"A100-80GB"} & set(case.types) and "fp8" in str(case.annotations))
    for part in case.message:
        assert part in decision.message
    verdicts = {v.type_name: v for v in decision.verdicts}
    for type_name, part in case.reasons.items():
        assert not verdicts[type_name].valid and part in verdicts[type_name].reason


def test_high_orders_blackwell_before_hopper_and_keeps_h20_and_l4_out() -> None:
    high = BUILT_IN.classes["high"].types
    assert max(high.index(t) for t in ("B300", "B200", "GB200", "GB300")) < high.index("H200") < high.index("H100")
    assert "L4" not in high and "H20" not in high
    assert BUILT_IN.classes["large-memory"].types.index("H20") > BUILT_IN.classes["large-memory"].types.index("H100")
    assert set(BUILT_IN.classes["fp4"].types) == BLACKWELL | {"GB300"}
    assert HOPPER < set(BUILT_IN.classes["fp8"].types) and not {"A100-80GB", "A100-40GB", "A800"} & set(
        BUILT_IN.classes["fp8"].types)


def review(pod: dict[str, Any]) -> Any:
    request = Request(api_version="admission.k8s.io/v1", uid="u", operation="CREATE", kind="Pod", group="",
                      sub_resource="", namespace="ml", object=pod, name=pod["metadata"]["name"])
    return review_pod(request, SNAPSHOT, BUILT_IN)


def test_x300_is_shown_as_placed_by_its_labels() -> None:
    pod = make_pod({C: "fp4"})
    result = review(pod)
    catalog = placing_catalog(BUILT_IN, SNAPSHOT)
    text = explain_text(result, "ml", pod, catalog)
    assert "NVIDIA-X300 (placed by its labels)" in text
    assert "placed by its labels (not in the catalog: the score of B300" in text
    rows = {t["type"]: t for t in explain_json(result, "ml", pod, catalog)["types"]}
    assert rows["NVIDIA-X300"]["placedByLabels"] and not rows["B300"]["placedByLabels"]
    assert any("NVIDIA-X300 placed by its labels" in w for w in result.decision.warnings)
    x300 = catalog.types["NVIDIA-X300"]
    assert x300.facts is not None and x300.facts.compute_capability == (11, 0) and x300.memory_gib == 300
    assert x300.score == BUILT_IN.types["B300"].score
    report = build_report(SNAPSHOT, BUILT_IN)
    (placed,) = [t for t in report["types"] if t["placedByLabels"]]
    assert placed["name"] == "NVIDIA-X300" and placed["gpus"]["allocatable"] == 8
    assert "NVIDIA-X300*" in render_table(report) and "* placed by its labels" in render_table(report)
    assert "NVIDIA-X300" in next(c for c in report["classes"] if c["name"] == "fp8")["types"]
    assert "NVIDIA-X300" not in next(c for c in report["classes"] if c["name"] == "high")["types"]


@pytest.mark.parametrize("node, reason", [
    pytest.param(gfd_node("x", "NVIDIA-X300", "x-next", "11.0", None), "lack nvidia.com/gpu.memory",
                 id="no-memory-label"),
    pytest.param(make_node("x", "NVIDIA-X300"), "lack nvidia.com/gpu.family, nvidia.com/gpu.compute.major",
                 id="no-gfd-labels"),
    pytest.param(gfd_node("x", "NVIDIA-X300-MIG-1g.10gb", "x-next", "11.0", 10240), "a MIG slice",
                 id="a-mig-slice-is-no-whole-gpu"),
    pytest.param(gfd_node("x", "NVIDIA-OLD", "kepler", "3.0", 4096),
                 "no type of the catalog has compute capability 3.0", id="older-than-any-type"),
])
def test_too_little_information_stays_out_and_says_why(node: dict[str, Any], reason: str) -> None:
    snapshot = build_snapshot(BUILT_IN, [node])
    assert not snapshot.label_types
    (unknown,) = build_report(snapshot, BUILT_IN)["unknownProducts"]
    assert reason in unknown["reason"]
    decision = plan(make_pod({C: "fp8"}), snapshot, BUILT_IN, namespace="ml")
    assert decision.outcome == "refused"


REQUIRES = """\
types:
  - {name: old, score: 100, memoryGiB: 40, products: [OLD], architecture: Ampere, computeCapability: "8.0",
     precisions: [fp16, bf16]}
  - {name: new, score: 900, memoryGiB: 80, products: [NEW], architecture: Hopper, computeCapability: "9.0",
     precisions: [fp8, fp16, bf16]}
  - {name: slice, score: 50, memoryGiB: 10, products: [NEW-MIG-1g.10gb]}
classes:
  - {name: named, types: [old, new]}
  - {name: needy, requires: {minComputeCapability: "8.0", minMemoryGiB: 40}, strategy: cost}
"""


def test_requires_class_takes_types_with_facts_only_and_label_types_join_it_alone() -> None:
    catalog = load_catalog_text(REQUIRES)
    assert catalog.classes["needy"].types == ("new", "old")  # the slice states no facts: it meets no need
    snapshot = build_snapshot(catalog, [gfd_node("x", "NVIDIA-X300", "x-next", "11.0", 307200)])
    placing = placing_catalog(catalog, snapshot)
    assert placing.classes["needy"].types == ("new", "NVIDIA-X300", "old")
    assert placing.classes["named"].types == ("new", "old")
    decision = plan(make_pod({C: "needy"}), snapshot, catalog, namespace="ml")
    assert decision.placement is not None and decision.placement.types == ("NVIDIA-X300",)


@pytest.mark.parametrize("text, message", [
    pytest.param(REQUIRES.replace('minComputeCapability: "8.0"', 'minComputeCapability: "eight"'),
                 "must be a CUDA compute capability", id="bad-capability"),
    pytest.param(REQUIRES.replace("strategy: cost}", "strategy: cost, types: [old]}"), "give 'requires' alone",
                 id="requires-with-names"),
    pytest.param(REQUIRES.replace("precisions: [fp16, bf16]}", "precisions: [fp16, int3]}"),
                 "'int3' is not a precision", id="unknown-precision"),
    pytest.param(REQUIRES.replace("minMemoryGiB: 40}", "minMemoryGiB: 400}"), "selects no type", id="nothing-meets"),
    pytest.param(REQUIRES.replace("architecture: Ampere, ", ""), "need its 'architecture' too",
                 id="facts-without-architecture"),
])
def test_requires_errors(text: str, message: str) -> None:
    from webhook.core.catalog.model import CatalogError

    with pytest.raises(CatalogError) as info:
        load_catalog_text(text, "c.yaml")
    assert message in str(info.value)


def dra_gpus(product: str, architecture: str, compute: str, memory: str) -> list[dict[str, Any]]:
    """Eight whole GPUs as NVIDIA's DRA driver publishes them, with the attributes that say what they are."""
    return nvidia_gpus(8, product, memory=memory, architecture=architecture, compute=compute)


# The same cluster, its GPUs published as DRA devices on nodes without GPU labels.
DRA_TODAY = [
    ("b300", dra_gpus("NVIDIA B300 SXM6 AC", "Blackwell", "10.3.0", "275040Mi")),
    ("b200", dra_gpus("NVIDIA B200", "Blackwell", "10.0.0", "183359Mi")),
    ("gb200", dra_gpus("NVIDIA GB200", "Blackwell", "10.0.0", "189471Mi")),
    ("h100", dra_gpus("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "81559Mi")),
    ("h20", dra_gpus("NVIDIA H20", "Hopper", "9.0.0", "97871Mi")),
    ("a100", dra_gpus("NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0", "81920Mi")),
    ("rtx-pro", dra_gpus("NVIDIA RTX PRO 6000 Blackwell Server Edition", "Blackwell", "12.0.0", "97887Mi")),
    ("l4", dra_gpus("NVIDIA L4", "Ada Lovelace", "8.9.0", "23034Mi")),
    ("x300", dra_gpus("NVIDIA X300", "X-Next", "11.0.0", "300Gi")),
]
DRA_SNAPSHOT = build_snapshot(BUILT_IN, [
    *(make_bare_node(name) for name, _ in DRA_TODAY), *(make_slice(name, devices) for name, devices in DRA_TODAY),
    *nvidia_device_classes()])


@pytest.mark.parametrize("case", [c for c in CASES if c.outcome == "patched"],
                         ids=[c.id for c in CASES if c.outcome == "patched"])
def test_choosing_by_need_on_dra_devices(case: Case) -> None:
    """DRA devices are placed in the order labelled nodes are, the unknown X300 by its attributes."""
    decision = plan(make_pod(dict(case.annotations)), DRA_SNAPSHOT, BUILT_IN, namespace="ml")
    assert decision.placement is not None and decision.placement.types == case.types, decision.message
    assert {k for k, _ in decision.placement.required} == {"kubernetes.io/hostname"}


def test_dra_device_with_too_little_information_stays_out() -> None:
    devices = dra_gpus("NVIDIA X300", "X-Next", "11.0.0", "300Gi")
    for d in devices:
        del d["attributes"]["cudaComputeCapability"]
    snapshot = build_snapshot(BUILT_IN, [make_bare_node("x300"), make_slice("x300", devices), *nvidia_device_classes()])
    (problem,) = snapshot.dra.problems
    assert "by its attributes: too little information: no cudaComputeCapability" in problem.reason
    assert not snapshot.label_types


def test_label_types_are_the_same_seen_again_through_the_placing_catalog() -> None:
    """The extender reduces the nodes the scheduler sends with the catalog it decides with: a label type
    is made again the same, not taken for a product named like a type."""
    placing = placing_catalog(BUILT_IN, SNAPSHOT)
    x300 = next(n for n in TODAY if n["metadata"]["name"] == "x300")
    again = placing.type_from_labels(x300["metadata"]["labels"])
    assert again.gpu_type == placing.types["NVIDIA-X300"]
