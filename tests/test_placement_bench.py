"""The placement benchmark's judge and fleet (bench/placement/placement_model.py): what counts as right, Pending, a mix.
The judge's own reading of a catalog (bench/placement/judge_catalog.py): the types a node's labels name and each
class's order, checked by hand and against the webhook's and the extender's, so a bug they share cannot hide."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from typing import Callable

import pytest

from bench.placement.judge_catalog import JudgeCatalog
from bench.placement.placement_cluster import cpu_millis, memory_mib, read_scheduler_times
from bench.placement.placement_model import (
    BEST_NODES, GPU, KINDS, SICK_CONDITION, STRATEGY_CLASS, NodeSpec, NodeState, Outcome, Verdicts, Workload, allowed_types,
    is_sick, judge, make_fleet, make_streams, merge, pods_per_second, promised, sicken, utilisation_spread,
)
from tests.builders import make_node, make_pod
from webhook.core.catalog.builtin import default_catalog_text
from webhook.core.catalog.loading import load_catalog_text, load_default_catalog
from webhook.core.scheduling.extender import PodNeeds, type_order
from webhook.core.view.inventory import build_snapshot
from webhook.core.admission.planner import plan

# One class per strategy over the same four types (fastest first), as STRATEGY_CLASS names them, and
# two that leave types out.
CATALOG_TEXT = """
types:
  - {name: H200, score: 989, memoryGiB: 141, products: [NVIDIA-H200]}
  - {name: H100, score: 756, memoryGiB: 80, products: [NVIDIA-H100-80GB-HBM3]}
  - {name: L40S, score: 362, memoryGiB: 48, products: [NVIDIA-L40S]}
  - {name: A100, score: 312, memoryGiB: 40, products: [A100-SXM4-40GB]}
  - {name: T4, score: 65, memoryGiB: 16, products: [Tesla-T4]}
classes:
  - {name: high, types: [H100, L40S, A100, T4]}
  - {name: economy, types: [H100, L40S, A100, T4], strategy: cost}
  - {name: standard, types: [H100, L40S, A100, T4], strategy: balanced}
  - {name: inference, types: [H100, L40S, A100, T4], strategy: binpack}
  - {name: no-h100, types: [L40S, A100, T4]}
  - {name: h200, types: [H200]}
"""
CATALOG = JudgeCatalog.from_yaml(CATALOG_TEXT)
BUILT_IN = load_default_catalog()  # the bench's webhook runs the built-in catalog
JUDGED_BUILT_IN = JudgeCatalog.from_yaml(default_catalog_text())  # the same, as the judge reads it
ONE = Workload("w", "high", 1, 500)
JOB = Workload("j", "high", 1, 500, "job", 3)


def node(name: str, gpu_type: str, gpus: int, free: int | None = None, cpu: int = 64_000,
         sick: bool = False) -> NodeState:
    return NodeState(name, gpu_type, gpus, gpus if free is None else free, cpu, 512 * 1024, sick)


def one(strategy: str, gpus: int = 1) -> Workload:
    """A one-Pod workload of the class with the strategy."""
    return Workload("w", STRATEGY_CLASS[strategy], gpus, 500)


def bound(pod: str, node_name: str, w: Workload = ONE, group: str | None = None) -> Outcome:
    return Outcome(pod, w, node_name, w.name if group is None else group, added=1.0, bound=1.25)


def pending(pod: str, w: Workload = ONE) -> Outcome:
    return Outcome(pod, w, None, w.name, added=1.0)


CLUSTER = {n.name: n for n in (node("h100-a", "H100", 8, free=2), node("h100-b", "H100", 8),
                               node("l40s-a", "L40S", 4), node("a100-a", "A100", 8, free=6), node("t4-a", "T4", 4))}


def tally(v: Verdicts) -> tuple[int, int, int, int, int]:
    return v.placed, v.right, v.packed, v.wrongly_pending, v.rightly_pending


@pytest.mark.parametrize("outcomes, expected", [
    pytest.param([bound("p", "h100-a")], (1, 1, 1, 0, 0), id="performance-fullest-best-type-packed"),
    pytest.param([bound("p", "h100-b")], (1, 1, 0, 0, 0), id="performance-best-type-not-packed"),
    pytest.param([bound("p", "l40s-a")], (1, 0, 0, 0, 0), id="performance-second-type-wrong"),
    pytest.param([bound("p", "l40s-a", Workload("w", "no-h100", 1, 500))], (1, 1, 1, 0, 0),
                 id="performance-best-of-the-class-in-the-catalog"),
    pytest.param([bound("p", "l40s-a", one("performance", 8))], (1, 0, 0, 0, 0), id="eight-gpus-fit-the-empty-h100-only"),
    pytest.param([bound("p", "t4-a", one("cost"))], (1, 1, 1, 0, 0), id="cost-slowest-type"),
    pytest.param([bound("p", "a100-a", one("cost"))], (1, 0, 0, 0, 0), id="cost-faster-type-wrong"),
    # shares once placed: h100-a 7/8 used (87), a100-a 3/8 (37), h100-b 1/8 (12), l40s 1/4 (25), t4 1/4 (25)
    pytest.param([bound("p", "h100-a", one("binpack"))], (1, 1, 0, 0, 0), id="binpack-fullest-share"),
    pytest.param([bound("p", "a100-a", one("binpack"))], (1, 0, 0, 0, 0), id="binpack-less-full-wrong"),
    pytest.param([bound("p", "h100-b", one("balanced"))], (1, 1, 0, 0, 0), id="balanced-emptiest-share"),
    pytest.param([bound("p", "l40s-a", one("balanced"))], (1, 0, 0, 0, 0), id="balanced-fewer-free-share-wrong"),
    pytest.param([pending("p")], (0, 0, 0, 1, 0), id="pending-while-room-is-wrong"),
    pytest.param([pending("p", one("performance", 16))], (0, 0, 0, 0, 1), id="pending-with-no-room-is-right"),
    pytest.param([pending("p", Workload("w", "h200", 1, 500))], (0, 0, 0, 0, 1), id="pending-no-node-of-the-class"),
    # the second Pod sees the first one's GPUs taken: h100-a has 1 left after 1, none after 2
    pytest.param([bound("a", "h100-a", Workload("w", "high", 2, 500)), bound("b", "h100-b", Workload("v", "high", 1, 500))],
                 (2, 2, 2, 0, 0), id="binds-replayed-in-order"),
    pytest.param([bound("a", "h100-a", Workload("w", "high", 2, 500)), pending("b", Workload("v", "high", 8, 500))],
                 (1, 1, 1, 1, 0), id="pending-judged-after-the-binds-before-it"),
])
def test_judge(outcomes: list[Outcome], expected: tuple[int, ...]) -> None:
    assert tally(merge(list(judge(CLUSTER, outcomes, CATALOG).values()))) == expected


@pytest.mark.parametrize("gpu_class, expected", [
    pytest.param("high", ("H100", "L40S", "A100", "T4"), id="performance-fastest-first"),
    pytest.param("economy", ("T4", "A100", "L40S", "H100"), id="cost-slowest-first"),
    pytest.param("no-h100", ("L40S", "A100", "T4"), id="only-the-class-types"),
])
def test_allowed_types_come_from_the_catalog(gpu_class: str, expected: tuple[str, ...]) -> None:
    assert allowed_types(CATALOG, Workload("w", gpu_class, 1, 500)) == expected


# --- the judge's own reading of a catalog ---------------------------------------------------------------

P, HAND = "nvidia.com/gpu.product", "gpu-type"
AMD = "amd.com/gpu.product-name"


@pytest.mark.parametrize("labels, resource, expected", [
    pytest.param({P: "NVIDIA-A100-SXM4-80GB"}, GPU, "A100-80GB", id="a-product"),
    pytest.param({P: "A100-SXM4-40GB"}, GPU, "A100-40GB", id="a-product-of-an-older-driver"),
    pytest.param({P: "NVIDIA-A10"}, GPU, "A10", id="a10-is-not-a100"),
    pytest.param({P: "NVIDIA-A10G"}, GPU, "A10G", id="a10g-is-not-a10"),
    pytest.param({P: "NVIDIA-L4"}, GPU, "L4", id="l4-is-not-l40"),
    pytest.param({P: "NVIDIA-L40S"}, GPU, "L40S", id="l40s-is-not-l40"),
    pytest.param({P: "NVIDIA-H20"}, GPU, "H20", id="h20-is-not-h200"),
    pytest.param({P: "NVIDIA-H100-NVL"}, GPU, "H100-NVL", id="h100-nvl-is-not-h100"),
    pytest.param({P: "Tesla-T4-SHARED"}, GPU, "T4", id="time-sliced"),
    pytest.param({P: "NVIDIA-A1"}, GPU, None, id="a-prefix-of-a-product-is-none"),
    pytest.param({P: "NVIDIA-A100-SXM4-80GB-X"}, GPU, None, id="a-product-with-more-is-none"),
    pytest.param({P: "nvidia-a100-sxm4-80gb"}, GPU, None, id="case-counts"),
    pytest.param({P: "NVIDIA-A100-SXM4-40GB-MIG-INVALID"}, GPU, None, id="mig-invalid-is-no-type"),
    pytest.param({P: "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"}, GPU, "H100-3g.40gb-single", id="single-strategy-mig"),
    pytest.param({HAND: "Tesla-T4"}, GPU, "T4", id="the-hand-set-key"),
    pytest.param({P: "Tesla-T4", HAND: "NVIDIA-H100-80GB-HBM3"}, GPU, "T4", id="the-first-product-key-wins"),
    pytest.param({P: "", HAND: "Tesla-T4"}, GPU, "T4", id="an-empty-first-key-is-absent"),
    pytest.param({P: "NVIDIA-H100-80GB-HBM3"}, "nvidia.com/mig-3g.40gb", "H100-3g.40gb", id="mixed-mig-by-match"),
    pytest.param({AMD: "AMD_Instinct_MI300X_OAM"}, "amd.com/gpu", "MI300X", id="a-match-key"),
    pytest.param({AMD: "AMD_Instinct_MI300X_VF"}, "amd.com/gpu", "MI300X", id="a-match-glob"),
    pytest.param({AMD: "AMD_Instinct_MI300X_OAM"}, GPU, None, id="another-resource-is-not-a-gpu-type"),
    pytest.param({"kubernetes.io/hostname": "NVIDIA-A10"}, GPU, None, id="a-key-no-type-reads"),
])
def test_the_judge_types_a_node_by_its_labels(labels: dict[str, str], resource: str, expected: str | None) -> None:
    """Written by hand from the catalog's YAML and docs/users/classes.md: exact or glob, never a substring."""
    assert JUDGED_BUILT_IN.gpu_type_of_labels(labels, resource) == expected


def test_the_judges_globs_match_whole_values() -> None:
    judged = JudgeCatalog.from_yaml("""
types:
  - {name: H100, score: 756, memoryGiB: 80, products: ["NVIDIA-H100-PCIe*"]}
  - {name: T4, score: 65, memoryGiB: 16, products: [Tesla-T4]}
classes:
  - {name: any, types: [T4, H100], strategy: cost}
""")
    assert judged.types_of_labels({P: "NVIDIA-H100-PCIe-80GB"}) == ("H100",)
    assert judged.types_of_labels({P: "X-NVIDIA-H100-PCIe"}) == ()
    assert judged.promised_order("any") == ("T4", "H100"), "ordered by score, whatever order the class lists"


def label_values_near(catalog_text: str) -> list[dict[str, str]]:
    """Node labels close to what the catalog names: every value under every key it reads, and each value cut short,
    lengthened, recased, without or with `NVIDIA-`, or marked -MIG-INVALID (where a matcher that compared
    substrings or prefixes, ignored case or forgot -MIG-INVALID names a type it must not)."""
    judged = JudgeCatalog.from_yaml(catalog_text)
    products = {v for n in judged.names for v in n.products}
    by_key: dict[str, set[str]] = {k: set(products) for k in judged.product_labels}
    for n in judged.names:
        for key, values in n.labels:
            by_key.setdefault(key, set()).update(values)
    labels = []
    for key, values in by_key.items():
        near = set()
        for v in values:
            v = v.replace("*", "X").replace("?", "Y").replace("[", "Z")
            near |= {v, v[:-1], v[:-3], v + "0", v + "-X", v.lower(), v.removeprefix("NVIDIA-"), "NVIDIA-" + v,
                     v + "-MIG-INVALID", v[1:]}
        labels += [{key: v} for v in sorted(near) if v]
    return labels + [{judged.product_labels[0]: "", judged.product_labels[-1]: v} for v in sorted(products)]


def test_the_judge_and_the_webhook_name_the_same_types_for_every_label() -> None:
    """The webhook's catalog.matches_of_labels is under test; the judge's reading is written apart from it, so a
    bug in either (a substring or prefix match, a lost glob) shows as a difference here, not as both wrong alike."""
    differ = {}
    for labels in label_values_near(default_catalog_text()):
        webhook = tuple(t for t, _, _ in BUILT_IN.matches_of_labels(labels))
        if webhook != JUDGED_BUILT_IN.types_of_labels(labels):
            differ[str(labels)] = (webhook, JUDGED_BUILT_IN.types_of_labels(labels))
    assert differ == {}, f"{len(differ)} label sets typed differently (webhook, judge): {list(differ.items())[:5]}"


def test_the_judge_and_the_extender_order_every_class_alike() -> None:
    """extender.type_order (which the strict profiles share) is under test: compared, not trusted."""
    differ = {}
    for name, judged in JUDGED_BUILT_IN.classes.items():
        gpu_class = BUILT_IN.classes[name]
        extender = type_order(PodNeeds(types=gpu_class.types, gpus=1, class_name=name), BUILT_IN, gpu_class.strategy)
        if extender != JUDGED_BUILT_IN.promised_order(name) or gpu_class.strategy != judged.strategy:
            differ[name] = (extender, JUDGED_BUILT_IN.promised_order(name))
    assert set(JUDGED_BUILT_IN.classes) >= set(STRATEGY_CLASS.values()) and differ == {}, differ


def test_a_class_the_judge_cannot_read_is_named() -> None:
    with pytest.raises(ValueError, match="no class 'fp8' that lists its types; the judge reads only classes with"):
        JUDGED_BUILT_IN.promised_order("fp8")


def test_refused_pods_are_counted_apart() -> None:
    refused = Outcome("r", ONE, None, refused=True)
    v = merge(list(judge(CLUSTER, [refused, bound("p", "h100-a")], CATALOG).values()))
    assert (tally(v), v.refused) == ((1, 1, 1, 0, 0), 1)


def test_judge_leaves_the_starting_state_alone() -> None:
    judge(CLUSTER, [bound("a", "h100-a", one("binpack")), bound("b", "h100-a", one("binpack"))], CATALOG)
    assert CLUSTER["h100-a"].free_gpus == 2


def test_cpu_counts_as_room() -> None:
    cluster = {"h100": node("h100", "H100", 8, cpu=1000), "l40s": node("l40s", "L40S", 4)}
    w = Workload("w", "high", 1, 2000)
    assert tally(merge(list(judge(cluster, [bound("p", "l40s", w)], CATALOG).values()))) == (1, 1, 1, 0, 0)


Webhook = Callable[[Workload], tuple[str, ...]]


FLEET = make_fleet(40)


def _strict_path(webhook: Webhook, strategy: str) -> Verdicts:
    """A stream of the bench through a webhook and a scheduler that honours its answer exactly (the
    strict profiles: the best of the types the webhook allowed, by the class's strategy), judged."""
    start = {n.name: NodeState(n.name, JUDGED_BUILT_IN.gpu_type_of_labels({"nvidia.com/gpu.product": n.product}, GPU),
                               n.gpus, n.gpus, n.cpu_millis - n.filled_cpu_millis, n.memory_mib)
             for n in FLEET if n.gpus}
    state = {name: NodeState(**vars(n)) for name, n in start.items()}
    outcomes = []
    for w in make_streams(pods_per_class=30)[strategy]:
        allowed = webhook(w)
        for i in range(w.pods):
            fitting = [n for n in state.values() if n.gpu_type in allowed and n.holds(w)]
            right = promised(strategy, fitting, w, allowed)
            chosen = (promised("binpack", right, w, allowed) if strategy in ("performance", "cost") else right)[:1]
            outcomes.append(Outcome(f"{w.name}-{i}", w, chosen[0].name if chosen else None, w.name, 1.0,
                                    1.5 if chosen else None))
            for n in chosen:
                n.free_gpus, n.free_cpu_millis = n.free_gpus - w.gpus, n.free_cpu_millis - w.cpu_millis
                n.free_memory_mib -= 4096
    return merge(list(judge(start, outcomes, JUDGED_BUILT_IN).values()))


@functools.cache
def _planner(w: Workload) -> tuple[str, ...]:
    """What the webhook's planner allows a Pod of the workload on the bench's fleet."""
    snapshot = build_snapshot(BUILT_IN, [make_node(n.name, n.product, gpus=n.gpus) for n in FLEET if n.gpus])
    pod = make_pod({"gpu-class.io/class": w.gpu_class, "gpu-class.io/count": str(w.gpus)})
    decision = plan(pod, snapshot, BUILT_IN, namespace="ml")
    assert decision.placement is not None, decision.message
    return decision.placement.types


@pytest.mark.parametrize("strategy", ["performance", "cost"])
def test_a_webhook_that_drops_the_best_type_scores_below_full_fidelity(strategy: str) -> None:
    honest = _strict_path(_planner, strategy)
    wrong = _strict_path(lambda w: _planner(w)[1:], strategy)
    assert honest.placed >= 30 and (honest.right, honest.wrongly_pending) == (honest.placed, 0), honest.wrong
    assert wrong.placed > 0 and wrong.right < wrong.placed, "the judge trusted the webhook's types"


@pytest.mark.parametrize("group, expected_right", [
    pytest.param("j", 3, id="one-group-in-an-order-that-fits"),
    pytest.param(None, 2, id="separate-groups-in-watch-order"),
])
def test_alike_pods_bound_out_of_order(group: str | None, expected_right: int) -> None:
    # balanced: the scheduler put the 1st on h100-b (the emptiest), then the 2nd and 3rd on the next
    # emptiest; the watch showed the 2nd's bind first. In one group, the order that fits is found.
    cluster = {"h100-b": node("h100-b", "H100", 8), "a100-a": node("a100-a", "A100", 8, free=7),
               "a100-b": node("a100-b", "A100", 8, free=7)}
    job = Workload("j", "standard", 1, 500, "job", 3)
    outcomes = [bound("j-1", "a100-a", job, group=group or "j-1"), bound("j-0", "h100-b", job, group=group or "j-0"),
                bound("j-2", "a100-b", job, group=group or "j-2")]
    assert judge(cluster, outcomes, CATALOG)["job"].right == expected_right


def test_alike_pods_out_of_order_are_judged_packed_where_an_order_allows() -> None:
    # performance: the scheduler filled h100-a (1 free) with the 1st Pod, then packed the 2nd onto
    # h100-b; the watch showed the 2nd's bind first
    cluster = {"h100-a": node("h100-a", "H100", 8, free=1), "h100-b": node("h100-b", "H100", 8, free=4)}
    outcomes = [bound("j-1", "h100-b", JOB), bound("j-0", "h100-a", JOB)]
    v = judge(cluster, outcomes, CATALOG)["job"]
    assert (v.right, v.packed) == (2, 2)


def test_verdicts_by_kind() -> None:
    deployment = Workload("d", "high", 1, 500, "deployment", 2)
    verdicts = judge(CLUSTER, [bound("s", "h100-a"), bound("d-0", "l40s-a", deployment)], CATALOG)
    assert (tally(verdicts["single"]), tally(verdicts["deployment"]), tally(verdicts["job"])) == (
        (1, 1, 1, 0, 0), (1, 0, 0, 0, 0), (0, 0, 0, 0, 0))
    assert verdicts["deployment"].wrong == ["d-0 (1 GPUs) on l40s-a (L40S)"]
    assert verdicts["single"].seconds_to_bind == [0.25]


def test_utilisation_spread() -> None:
    # H100 10 of 16 used after the Pod; A100 2 of 8
    outcomes = [bound("p", "h100-a", Workload("w", "high", 4, 500))]
    assert utilisation_spread(CLUSTER, outcomes, ["H100", "A100"]) == pytest.approx(10 / 16 - 2 / 8)


def test_pods_per_second() -> None:
    outcomes = [Outcome("a", ONE, "n", "", added=10.0, bound=10.5),
                Outcome("b", ONE, "n", "", added=10.1, bound=12.0), Outcome("c", ONE, None, "", added=10.2),
                Outcome("refused", ONE, None, refused=True)]
    assert pods_per_second(outcomes) == pytest.approx(2 / 2.0)


def test_every_fleet_holds_the_smaller_ones_and_the_same_best_nodes() -> None:
    small, large = make_fleet(100), make_fleet(1000)
    assert large[:100] == small
    assert len({n.name for n in large}) == 1000
    assert Counter(n.product for n in large[:len(BEST_NODES)]) == {"NVIDIA-H100-80GB-HBM3": 3, "Tesla-T4": 3}
    assert all(n.product not in ("NVIDIA-H100-80GB-HBM3", "Tesla-T4") for n in large[len(BEST_NODES):])


def test_fleet_mix() -> None:
    fleet = make_fleet(1000)
    gpu = [n for n in fleet if n.gpus]
    assert 0.4 < len(gpu) / len(fleet) < 0.5  # most nodes CPU-only
    assert sum(n.tainted for n in gpu) / len(gpu) > 0.6  # most GPU nodes tainted
    assert {n.gpus for n in gpu} == {1, 2, 4, 8}
    assert all(n.filled_cpu_millis >= n.cpu_millis // 2 for n in fleet[:len(BEST_NODES)])


def test_streams_mix_every_kind_and_fill_the_best_type() -> None:
    streams = make_streams()
    assert set(streams) == {"performance", "cost", "balanced", "binpack"}
    for workloads in streams.values():
        assert {w.kind for w in workloads} == {"single", "deployment", "job"}
        assert all(3 <= w.pods <= 6 for w in workloads if w.kind == "job")
        assert all(2 <= w.pods <= 5 for w in workloads if w.kind == "deployment")
    jobs = [w for workloads in streams.values() for w in workloads if w.kind == "job"]
    assert {w.indexed for w in jobs} == {True, False}
    # more GPUs than the 3 H100 nodes (24) and the 3 T4 nodes (12) hold
    assert sum(w.gpus * w.pods for w in streams["performance"]) > 24
    assert sum(w.gpus * w.pods for w in streams["cost"]) > 12


@pytest.mark.parametrize("quantity, millis", [("500m", 500), ("2", 2000), ("1.5", 1500), (None, 0)])
def test_cpu_millis(quantity: str | None, millis: int) -> None:
    assert cpu_millis(quantity) == millis


@pytest.mark.parametrize("quantity, mib", [("4Gi", 4096), ("512Mi", 512), ("2048Ki", 2), ("1Ti", 1024 * 1024),
                                            (str(3 * 1024 * 1024), 3), (None, 0)])
def test_memory_mib(quantity: str | None, mib: int) -> None:
    assert memory_mib(quantity) == mib


def test_scheduler_times_add_up_the_profiles() -> None:
    text = "\n".join([
        '# TYPE scheduler_scheduling_attempt_duration_seconds histogram',
        'scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="scheduled",le="0.1"} 2',
        'scheduler_scheduling_attempt_duration_seconds_sum{profile="a",result="scheduled"} 0.5',
        'scheduler_scheduling_attempt_duration_seconds_count{profile="a",result="scheduled"} 3',
        'scheduler_scheduling_attempt_duration_seconds_sum{profile="a-binpack",result="unschedulable"} 0.25',
        'scheduler_scheduling_attempt_duration_seconds_count{profile="a-binpack",result="unschedulable"} 1',
        'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="a",status="Success"} 0.125',
        'scheduler_framework_extension_point_duration_seconds_sum{extension_point="PreFilter",profile="a",status="Success"} 0.5',
        'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Score",profile="a",status="Success"} 0.0625',
        'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Bind",profile="a",status="Success"} 9',
    ])
    assert read_scheduler_times(text) == {"attempt sum": 0.75, "attempt count": 4, "Filter sum": 0.125,
                                          "PreFilter sum": 0.5, "Score sum": 0.0625}


# --- sick nodes ----------------------------------------------------------------------------

# h100-a is sick; h100-b healthy; the L40S node healthy, the A100 one sick
SICK_CLUSTER = {n.name: n for n in (node("h100-a", "H100", 8, sick=True), node("h100-b", "H100", 8, free=2),
                                    node("l40s-a", "L40S", 4), node("a100-a", "A100", 8, sick=True),
                                    node("t4-a", "T4", 4))}
ALL_H100_SICK = {**SICK_CLUSTER, "h100-b": node("h100-b", "H100", 8, sick=True)}


@pytest.mark.parametrize("cluster, outcomes, expected, on_sick", [
    pytest.param(SICK_CLUSTER, [bound("p", "h100-b")], (1, 1, 1, 0, 0), 0, id="healthy-best-type-right"),
    pytest.param(SICK_CLUSTER, [bound("p", "h100-a")], (1, 0, 0, 0, 0), 1, id="sick-best-type-node-wrong"),
    # h100-b has 2 free: a 4-GPU Pod's best type with room is L40S, the sick H100 node's room not counted
    pytest.param(SICK_CLUSTER, [bound("p", "l40s-a", Workload("w", "high", 4, 500))], (1, 1, 1, 0, 0), 0,
                 id="best-type-with-room-judged-on-healthy-nodes"),
    pytest.param(ALL_H100_SICK, [bound("p", "l40s-a")], (1, 1, 1, 0, 0), 0, id="every-best-type-node-sick"),
    pytest.param(SICK_CLUSTER, [bound("p", "a100-a", one("balanced"))], (1, 0, 0, 0, 0), 1,
                 id="balanced-emptiest-but-sick-wrong"),
    pytest.param(SICK_CLUSTER, [bound("p", "l40s-a", one("balanced"))], (1, 1, 0, 0, 0), 0,
                 id="balanced-emptiest-healthy-right"),
    pytest.param(SICK_CLUSTER, [bound("p", "a100-a", one("cost", 8))], (1, 0, 0, 0, 0), 1,
                 id="cost-only-a-sick-node-fits"),
    pytest.param(SICK_CLUSTER, [pending("p", one("performance", 8))], (0, 0, 0, 0, 1), 0,
                 id="pending-when-only-sick-nodes-hold-it-is-right"),
    pytest.param(SICK_CLUSTER, [pending("p", one("performance", 4))], (0, 0, 0, 1, 0), 0,
                 id="pending-while-a-healthy-node-holds-it-is-wrong"),
])
def test_judge_with_sick_nodes(cluster: dict[str, NodeState], outcomes: list[Outcome], expected: tuple[int, ...],
                               on_sick: int) -> None:
    v = merge(list(judge(cluster, outcomes, CATALOG).values()))
    assert (tally(v), v.on_sick) == (expected, on_sick)


def test_a_bind_to_a_sick_node_says_so() -> None:
    assert judge(SICK_CLUSTER, [bound("p", "h100-a")], CATALOG)["single"].wrong == ["p (1 GPUs) on h100-a (H100, sick)"]


def test_sick_nodes_are_left_out_of_the_spread() -> None:
    # healthy H100 6 of 8 in use, plus 1: 7/8; T4 0 of 4. The sick H100 node's 8 free GPUs do not count.
    outcomes = [bound("p", "h100-b")]
    assert utilisation_spread(SICK_CLUSTER, outcomes, ["H100", "T4"]) == pytest.approx(7 / 8)


def _gpu_nodes(product: str, count: int) -> list[NodeSpec]:
    return [NodeSpec(f"{product}-{i}", product, 8, 64_000, 512 * 1024, tainted=False) for i in range(count)]


@pytest.mark.parametrize("percent, count, sick_at", [
    pytest.param(0, 40, [], id="none"),
    pytest.param(5, 3, [0], id="the-best-types-handful-has-one"),
    pytest.param(5, 20, [0], id="five-percent-of-20-is-1"),
    pytest.param(5, 21, [0, 20], id="of-21-rounded-up-2"),
    pytest.param(5, 40, [0, 20], id="five-percent-of-40-is-2"),
    pytest.param(10, 30, [0, 10, 20], id="ten-percent-of-30"),
    pytest.param(50, 4, [0, 2], id="half"),
    pytest.param(2.5, 80, [0, 40], id="a-fraction-of-a-percent"),
])
def test_sicken_takes_the_share_of_each_product_rounded_up(percent: float, count: int, sick_at: list[int]) -> None:
    nodes = sicken(_gpu_nodes("NVIDIA-L4", count), percent)
    assert [i for i, n in enumerate(nodes) if n.sick] == sick_at


def test_sicken_counts_each_product_apart_and_alternates_the_signs() -> None:
    cpu = NodeSpec("cpu", "", 0, 16_000, 64 * 1024, tainted=False)
    nodes = sicken([*_gpu_nodes("Tesla-T4", 3), cpu, *_gpu_nodes("NVIDIA-L4", 3), cpu], 5)
    assert [(n.name, n.sick) for n in nodes if n.sick] == [("Tesla-T4-0", "allocatable"), ("NVIDIA-L4-0", "condition")]


@pytest.mark.parametrize("percent", [-1, 100, 150])
def test_sicken_refuses_a_share_that_is_not_one(percent: float) -> None:
    with pytest.raises(ValueError, match="sick_percent"):
        sicken(_gpu_nodes("NVIDIA-L4", 3), percent)


def test_a_sick_fleet_is_the_healthy_one_with_the_same_sick_nodes_at_every_size() -> None:
    small, large = make_fleet(500, 5), make_fleet(5000, 5)
    assert large[:500] == small
    assert [dataclasses.replace(n, sick="") for n in large] == make_fleet(5000)
    sick = [n for n in large if n.sick]
    assert not any(n.sick for n in large if not n.gpus)
    # the best types' first node each: one H100 by allocatable, one T4 by the condition
    assert [(n.name, n.sick) for n in sick[:2]] == [("pl-h100-0", "allocatable"), ("pl-t4-0", "condition")]
    by_product = Counter(n.product for n in large if n.gpus)
    sick_by_product = Counter(n.product for n in sick)
    assert all(sick_by_product[p] == -(-k * 5 // 100) for p, k in by_product.items()), sick_by_product
    assert abs(sum(n.sick == "allocatable" for n in sick) - sum(n.sick == "condition" for n in sick)) <= 1


UNHEALTHY = (SICK_CONDITION,)
READY = {"type": "Ready", "status": "True"}


@pytest.mark.parametrize("capacity, allocatable, conditions, sick", [
    pytest.param({GPU: "8"}, {GPU: "8"}, [READY], False, id="healthy"),
    pytest.param({GPU: "9"}, {GPU: "8"}, [READY], True, id="allocatable-below-capacity"),
    pytest.param({}, {GPU: "8"}, [READY], False, id="no-capacity-reported"),
    pytest.param({GPU: "8"}, {GPU: "8"}, [READY, {"type": "AcceleratedHardwareReady", "status": "False"}], True,
                 id="the-unhealthy-condition"),
    pytest.param({GPU: "8"}, {GPU: "8"}, [READY, {"type": "AcceleratedHardwareReady", "status": "True"}], False,
                 id="the-condition-healthy"),
    pytest.param({GPU: "8"}, {GPU: "8"}, [{"type": "GPUHealthy", "status": "False"}], False,
                 id="a-condition-the-catalog-does-not-name"),
    pytest.param({"cpu": "4"}, {"cpu": "3"}, [READY], False, id="cpu-below-capacity-is-not-gpu-sickness"),
])
def test_is_sick(capacity: dict[str, str], allocatable: dict[str, str], conditions: list[dict[str, str]],
                 sick: bool) -> None:
    assert is_sick(capacity, allocatable, conditions, UNHEALTHY) is sick


def test_the_built_in_catalog_counts_the_benchs_condition_as_unhealthy() -> None:
    assert SICK_CONDITION in BUILT_IN.unhealthy_conditions


def test_the_report_counts_each_paths_pods_on_sick_nodes() -> None:
    from bench.placement.placement import Path_, SizeRun, StreamResult, render

    fleet = make_fleet(100, 5)
    run = SizeRun(100, sick=[n for n in fleet if n.sick])
    paths: tuple[tuple[Path_, int], ...] = (("profiles", 0), ("default", 1))
    for strategy in STRATEGY_CLASS:
        for path, on_sick in paths:
            run.streams.append(StreamResult(100, strategy, path, {k: Verdicts(placed=2, right=2 - on_sick,
                                                                               on_sick=on_sick) for k in KINDS}, None))
    text = render([run], "python -m bench placement --sick-percent 5", ["profiles", "default"])
    assert text.startswith("## Placement at scale with sick nodes")
    assert "of the best types' handful, pl-h100-0 (allocatable), pl-t4-0 (condition)" in text
    assert "Pods bound to a sick node (streams and bursts): 0 / 12." in text  # 4 strategies x 3 kinds on (a)
    healthy = render([SizeRun(100, streams=run.streams)], "python -m bench placement", ["profiles", "default"])
    assert "sick" not in healthy
