"""The churn benchmark's pure side (bench/churn/churn_model.py): the bursts it plans, the scheduler's counters,
the narrowing and placement verdicts and the report."""

from __future__ import annotations

from functools import cache

import pytest

from bench.churn.churn_model import (
    BEST_PRODUCT, CHANGE_KINDS, CHANGE_TITLE, MIX, Change, Counters, Phase, Products, Setting, Spent, add_spent,
    apply_changes, best_type_changes, burst_counts, count_changes, fleet_products, holds, judge_narrowing, make_pods,
    placement_percent, plan_burst, read_counters, render, spent_between,
)
from bench.placement.placement_model import NodeSpec, Verdicts, make_fleet
from webhook.core.catalog.loading import load_default_catalog

PREFILTER = ('scheduler_framework_extension_point_duration_seconds_{}'
             '{{extension_point="PreFilter",profile="{}",status="Success"}}')
METRICS = "\n".join([
    "# HELP gpu_class_scheduler_prefilter_cycles_total [ALPHA] Scheduling cycles NodeLabelIndex's PreFilter ran.",
    "# TYPE gpu_class_scheduler_prefilter_cycles_total counter",
    'gpu_class_scheduler_prefilter_cycles_total{outcome="fell_back"} 2',
    'gpu_class_scheduler_prefilter_cycles_total{outcome="narrowed"} 120',
    'gpu_class_scheduler_prefilter_cycles_total{outcome="unnarrowed"} 7',
    'gpu_class_scheduler_prefilter_cycles_total{outcome="waiting"} 0',
    'gpu_class_scheduler_prefilter_cycles_total{outcome="widened"} 3',
    "# TYPE gpu_class_scheduler_index_repairs_total counter",
    "gpu_class_scheduler_index_repairs_total 1",
    PREFILTER.format("sum", "a") + " 0.5",
    PREFILTER.format("count", "a") + " 100",
    PREFILTER.format("count", "b") + " 32",
    'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="a",status="Success"} 9',
])


@cache
def products() -> Products:
    return fleet_products(load_default_catalog())


def fleet(size: int = 2000) -> dict[str, NodeSpec]:
    return {n.name: n for n in make_fleet(size)}


# --- the counters --------------------------------------------------------------------------

def test_read_counters() -> None:
    counters = read_counters(METRICS)
    assert counters == Counters({"fell_back": 2, "narrowed": 120, "unnarrowed": 7, "waiting": 0, "widened": 3}, 1.0,
                                0.5, 132.0)


@pytest.mark.parametrize("left_out", [
    pytest.param("gpu_class_scheduler_index_repairs_total 1", id="no-repairs"),
    pytest.param("gpu_class_scheduler_prefilter_cycles_total{", id="no-cycles"),
])
def test_read_counters_refuses_a_scheduler_without_them(left_out: str) -> None:
    text = "\n".join(line for line in METRICS.splitlines() if not line.startswith(left_out))
    with pytest.raises(ValueError, match="not NodeLabelIndex's build"):
        read_counters(text)


def test_spent_between_keeps_what_changed() -> None:
    before = read_counters(METRICS)
    after = Counters({"fell_back": 2, "narrowed": 140, "unnarrowed": 7, "waiting": 0, "widened": 4}, 3.0, 0.6, 152.0)
    spent = spent_between(before, after)
    assert spent.cycles == {"narrowed": 20, "widened": 1}
    assert spent.repairs == 2
    assert spent.prefilter_ms == pytest.approx(5.0)  # 0.1 s over 20 runs
    assert spent.of("fell_back") == 0


def test_add_spent() -> None:
    total = add_spent([Spent({"narrowed": 3, "fell_back": 1}, 1, 0.25, 4), Spent({"narrowed": 2}, 0, 0.25, 2)])
    assert total == Spent({"narrowed": 5, "fell_back": 1}, 1, 0.5, 6)


# --- the verdicts --------------------------------------------------------------------------

@pytest.mark.parametrize(("stream", "last", "expected", "repairs"), [
    pytest.param({"narrowed": 20}, {"narrowed": 1}, "narrowing", 0, id="all-narrowed"),
    pytest.param({"narrowed": 19, "widened": 2}, {"narrowed": 1, "widened": 1}, "narrowing", 0,
                 id="widened-after-best-refused"),
    pytest.param({"narrowed": 15, "fell_back": 5}, {"narrowed": 1}, "recovered", 0, id="fell-back-then-repaired"),
    pytest.param({"narrowed": 19, "unnarrowed": 1}, {"narrowed": 1}, "recovered", 0, id="one-unnarrowed"),
    pytest.param({"narrowed": 1, "fell_back": 19}, {"fell_back": 1}, "fell back", 0, id="fell-back-to-the-end"),
    pytest.param({"narrowed": 19, "fell_back": 1}, {"narrowed": 1, "fell_back": 1}, "fell back", 0,
                 id="last-pod-fell-back-once"),
    pytest.param({"unnarrowed": 20}, {"unnarrowed": 1}, "not narrowed", 0, id="never-narrowed"),
    pytest.param({"narrowed": 19}, {}, "not narrowed", 0, id="last-pod-not-counted"),
    pytest.param({"narrowed": 20}, {"narrowed": 1}, "recovered", 1, id="repaired-in-the-first-cycle"),
])
def test_judge_narrowing(stream: dict[str, int], last: dict[str, int], expected: str, repairs: int) -> None:
    assert judge_narrowing(Spent(stream, repairs), Spent(last, 0)) == expected


@pytest.mark.parametrize(("verdicts", "expected"), [
    pytest.param(Verdicts(placed=20, right=20), 100.0, id="all-right"),
    pytest.param(Verdicts(placed=20, right=19), 95.0, id="one-wrong"),
    pytest.param(Verdicts(placed=19, right=19, wrongly_pending=1), 95.0, id="wrongly-pending-counts"),
    pytest.param(Verdicts(placed=20, right=20, rightly_pending=3), 100.0, id="rightly-pending-not-judged"),
    pytest.param(Verdicts(placed=19, right=19, refused=1), 100.0, id="refused-reported-apart"),
    pytest.param(Verdicts(), None, id="nothing-judged"),
])
def test_placement_percent(verdicts: Verdicts, expected: float | None) -> None:
    assert placement_percent(verdicts) == expected


def make_phase(name: str, *, after: dict[str, int], last: dict[str, int], right: int = 20, placed: int = 20,
               wrong: tuple[str, ...] = (), changes: int = 0, repairs: int = 0) -> Phase:
    phase = Phase(name, {"delete": changes} if changes else {}, nodes=5000, best_nodes=3)
    phase.after, phase.last = Spent(after, repairs, 0.02, 20), Spent(last, 0)
    phase.verdicts = Verdicts(placed=placed, right=right, wrong=list(wrong))
    if changes:
        phase.during = Spent({"narrowed": 18, "fell_back": 2}, 0)
        phase.during_pods, phase.during_bound, phase.during_in_flight = 20, 20, 12
    return phase


GOOD = make_phase("burst 1", after={"narrowed": 20}, last={"narrowed": 1}, changes=100)


@pytest.mark.parametrize(("phase", "failures"), [
    pytest.param(GOOD, [], id="holds"),
    pytest.param(make_phase("burst 2", after={"narrowed": 10, "fell_back": 10}, last={"narrowed": 1}, repairs=1), [],
                 id="recovered-holds"),
    pytest.param(make_phase("burst 2", after={"fell_back": 20}, last={"fell_back": 1}),
                 ["burst 2: fell back (the last Pod's cycles: fell_back 1)"], id="fell-back-for-good"),
    pytest.param(make_phase("burst 3", after={"narrowed": 20}, last={"narrowed": 1}, right=19,
                            wrong=("b3-4 (1 GPUs) on pl-10-l40s (L40S)",)),
                 ["burst 3: placement 95.0% (b3-4 (1 GPUs) on pl-10-l40s (L40S))"], id="one-pod-wrong"),
    pytest.param(make_phase("end", after={}, last={}, right=0, placed=0),
                 ["end: not narrowed (the last Pod's cycles: none)", "end: placement -"], id="nothing-ran"),
])
def test_holds(phase: Phase, failures: list[str]) -> None:
    assert holds([GOOD, phase]) == failures


# --- the churn -------------------------------------------------------------------------------

def test_fleet_products_split_by_the_class() -> None:
    p = products()
    assert p.best == BEST_PRODUCT
    assert set(p.in_class) == {"NVIDIA-L40S", "NVIDIA-A100-SXM4-80GB", "A100-SXM4-40GB"}
    assert "NVIDIA-L4" in p.out_of_class and "Tesla-T4" in p.out_of_class
    assert BEST_PRODUCT not in p.in_class + p.out_of_class


@pytest.mark.parametrize(("size", "expected"), [
    pytest.param(100, {"delete": 30, "add": 30, "move": 20, "out": 10, "in": 10}, id="hundred"),
    pytest.param(7, {"delete": 3, "add": 3, "move": 1, "out": 0, "in": 0}, id="seven"),
    pytest.param(1, {"delete": 1, "add": 0, "move": 0, "out": 0, "in": 0}, id="one"),
])
def test_burst_counts(size: int, expected: dict[str, int]) -> None:
    assert burst_counts(size) == expected
    assert sum(burst_counts(size).values()) == size


@pytest.mark.parametrize("size", [100, 250])
def test_plan_burst_keeps_its_promises(size: int) -> None:
    nodes, p = fleet(), products()
    changes = plan_burst(nodes, size, "b1", p)
    assert count_changes(changes) == burst_counts(size)
    touched = [c.node for c in changes]
    assert len(touched) == len(set(touched)), "a node changed twice in one burst"
    of_class = {p.best, *p.in_class}
    for c in changes:
        if c.kind == "add":
            assert c.node not in nodes and c.added is not None and c.added.name == c.node
            assert c.added.product == c.product
        else:
            assert c.node in nodes and c.was == nodes[c.node].product
        if c.kind == "move":
            assert c.was in of_class and c.product in of_class and c.product != c.was
        elif c.kind == "out":
            assert c.was in of_class and c.product in p.out_of_class
        elif c.kind == "in":
            assert c.was in p.out_of_class and c.product in of_class
    # the best type is churned in every burst: a best-type node deleted and one moved off it
    assert any(c.kind == "delete" and c.was == p.best for c in changes)
    assert any(c.kind == "move" and c.was == p.best and c.product != p.best for c in changes)
    assert [c.kind for c in changes] != sorted(c.kind for c in changes), "the kinds are not interleaved"


def test_plan_burst_is_repeatable_and_differs_per_burst() -> None:
    nodes, p = fleet(), products()
    assert plan_burst(nodes, 50, "b1", p) == plan_burst(nodes, 50, "b1", p)
    assert plan_burst(nodes, 50, "b1", p) != plan_burst(nodes, 50, "b2", p)


def test_plan_burst_with_no_best_node_left() -> None:
    p = products()
    nodes = {n: s for n, s in fleet().items() if s.product != p.best}
    changes = plan_burst(nodes, 100, "b1", p)
    assert not any(c.was == p.best for c in changes)
    assert count_changes(changes) == burst_counts(100)


def test_plan_burst_makes_fewer_when_a_kind_runs_out() -> None:
    p = products()
    nodes = {n: s for n, s in fleet(200).items() if not s.product}  # CPU nodes only: nothing to relabel
    counts = count_changes(plan_burst(nodes, 100, "b1", p))
    assert counts == {"delete": 30, "add": 30, "move": 0, "out": 0, "in": 0}


def test_apply_changes() -> None:
    nodes = fleet(40)
    gpu = next(n for n in nodes.values() if n.product == "NVIDIA-L40S")
    added = NodeSpec("ch-b1-0-gpu", BEST_PRODUCT, 8, 96000, 1024 * 1024, tainted=True)
    changes = [Change("delete", "pl-h100-0", was=BEST_PRODUCT), Change("add", added.name, BEST_PRODUCT, added=added),
               Change("out", gpu.name, "NVIDIA-L4", gpu.product)]
    after = apply_changes(nodes, changes)
    assert "pl-h100-0" not in after and after[added.name] == added
    assert after[gpu.name].product == "NVIDIA-L4" and after[gpu.name].gpus == gpu.gpus  # a relabel keeps the GPUs
    assert len(after) == len(nodes)
    assert nodes["pl-h100-0"].product == BEST_PRODUCT  # the fleet given is left as it was
    assert best_type_changes(changes, BEST_PRODUCT) == 2


def test_best_type_changes_counts_each_crossing() -> None:
    changes = [Change("move", "a", BEST_PRODUCT, "NVIDIA-L40S"), Change("move", "b", "NVIDIA-L40S", BEST_PRODUCT),
               Change("move", "c", "NVIDIA-L40S", "NVIDIA-A100-SXM4-80GB"), Change("delete", "d", was="NVIDIA-L4")]
    assert best_type_changes(changes, BEST_PRODUCT) == 2


def test_make_pods() -> None:
    pods = make_pods("b1", 20)
    assert [w.name for w in pods] == [f"b1-{i}" for i in range(20)]
    assert {w.gpu_class for w in pods} == {"high"} and {w.kind for w in pods} == {"single"}
    assert make_pods("b1", 20) == pods and make_pods("b2", 20) != pods


# --- the report -------------------------------------------------------------------------------

SETTING = Setting("python -m bench churn --nodes 500", "Commit abc1234, 2026-12-05 15:00 UTC", "v1.37.2", 500, "H100",
                  3, (100,), 20, 20, 300.0)


def test_render() -> None:
    start = make_phase("start", after={"narrowed": 20}, last={"narrowed": 1})
    text = render([[start, GOOD], [start]], SETTING)
    lines = text.splitlines()
    assert lines[0] == "## Narrowing through node churn (`python -m bench churn`)"
    assert lines[2].startswith("Commit abc1234, 2026-12-05 15:00 UTC. Command: `python -m bench churn --nodes 500`;")
    assert "2 runs, each from a fresh fleet of 500 nodes" in lines[2]
    assert "100 node changes in bursts of 100, each a shuffled mix of 3 deletes, 3 adds" in lines[2]
    quiet = "| - | - | 5,000 (3) | - | - | - | 20 / 0 / 0 | 0 | 1.00 | 20/20 (100%) | 0 | narrowing |"
    assert f"| 1 | start {quiet}" in lines and f"| 2 | start {quiet}" in lines
    assert ("| 1 | burst 1 | 100 / 0 / 0 / 0 / 0 | 0 | 5,000 (3) | 0.0 | 18 / 0 / 2 | 20 of 20 (12) | 20 / 0 / 0 | 0 "
            "| 1.00 | 20/20 (100%) | 0 | narrowing |") in lines
    assert ("Run 1: 100 node changes; cycles fell_back 2, narrowed 58; 0 repairs; placement 40/40; "
            "PreFilter 1.00 ms per cycle after the bursts.") in lines
    assert ("Run 2: 0 node changes; cycles narrowed 20; 0 repairs; placement 20/20; PreFilter 1.00 ms per cycle "
            "after the bursts.") in lines
    assert lines[-1].startswith("Holds: after every burst PreFilter still narrows")


def test_render_says_what_does_not_hold() -> None:
    bad = make_phase("burst 2", after={"fell_back": 20}, last={"fell_back": 1}, changes=150)
    text = render([[GOOD], [GOOD, bad]], SETTING)
    assert text.splitlines()[-1] == "Does not hold: run 2, burst 2: fell back (the last Pod's cycles: fell_back 1)."
    assert "| 2 | burst 2 | 150 / 0 / 0 / 0 / 0 |" in text and text.count("| fell back |") == 1


def test_every_kind_is_titled_and_mixed() -> None:
    assert set(CHANGE_TITLE) == set(MIX) == set(CHANGE_KINDS) == set(count_changes([]))
