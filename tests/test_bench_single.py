"""The single-Pods benchmark's pure side (bench/single/single_model.py): the layout, the arms' order, the
scheduler's counters, the summary, issue 47's verdicts and the report."""

from __future__ import annotations

import pytest

from bench.single.single_model import (
    BEST, CPU, NEXT, Arm, PodTimes, Setting, Spent, Summary, arm_order, command_line, layout_counts, make_arm, make_layout,
    p50_verdicts, prefilter_flat, read_outcomes, render, spent_between, summarize,
)


@pytest.mark.parametrize(("size", "best", "next_", "cpu"), [
    pytest.param(5000, 3, 3333, 1664, id="the-issue's-5000"),
    pytest.param(15000, 9, 9999, 4992, id="the-issue's-15000-same-proportions"),
    pytest.param(1000, 3, 664, 333, id="1000-keeps-three-h100"),
    pytest.param(5001, 4, 3333, 1664, id="the-fourth-h100-after-5000"),
    pytest.param(2, 2, 0, 0, id="h100-first"),
    pytest.param(0, 0, 0, 0, id="empty"),
])
def test_layout_counts(size: int, best: int, next_: int, cpu: int) -> None:
    assert layout_counts(make_layout(size)) == {BEST.name: best, NEXT.name: next_, CPU.name: cpu}


@pytest.mark.parametrize(("small", "large"), [
    pytest.param(1000, 5000, id="1000-in-5000"),
    pytest.param(5000, 15000, id="5000-in-15000"),
    pytest.param(1, 1000, id="1-in-1000"),
])
def test_a_smaller_layout_is_a_prefix_of_a_larger(small: int, large: int) -> None:
    assert make_layout(large)[:small] == make_layout(small)


@pytest.mark.parametrize(("index", "kind", "gpus", "tainted"), [
    pytest.param(0, BEST, 8, True, id="h100-first"),
    pytest.param(5000, BEST, 8, True, id="the-fourth-h100"),
    pytest.param(3, CPU, 0, False, id="cpu-untainted"),
    pytest.param(4, NEXT, 8, True, id="a100-tainted"),
])
def test_node_shapes(index: int, kind: object, gpus: int, tainted: bool) -> None:
    node = make_layout(index + 1)[index]
    assert (node.product, node.gpus, node.tainted, node.filled_cpu_millis) == (
        getattr(kind, "product"), gpus, tainted, 0)
    assert node.name == f"sg-{index}-{getattr(kind, 'short')}"


def test_node_names_are_unique_at_15000() -> None:
    names = [n.name for n in make_layout(15000)]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(("paths", "rounds", "expected"), [
    pytest.param(("default", "profiles"), 2,
                 [(0, "default"), (0, "profiles"), (1, "profiles"), (1, "default")], id="two-paths-abba"),
    pytest.param(("default", "profiles", "extender"), 2,
                 [(0, "default"), (0, "profiles"), (0, "extender"), (1, "profiles"), (1, "extender"), (1, "default")],
                 id="three-paths-rotate"),
    pytest.param(("profiles",), 3, [(0, "profiles"), (1, "profiles"), (2, "profiles")], id="one-path"),
    pytest.param(("default", "profiles"), 0, [], id="no-rounds"),
])
def test_arm_order(paths: tuple[str, ...], rounds: int, expected: list[tuple[int, str]]) -> None:
    assert arm_order(paths, rounds) == expected  # type: ignore[arg-type]


METRICS = "\n".join([
    "# HELP gpu_class_scheduler_prefilter_cycles_total Scheduling cycles NodeLabelIndex's PreFilter ran",
    "# TYPE gpu_class_scheduler_prefilter_cycles_total counter",
    'gpu_class_scheduler_prefilter_cycles_total{outcome="fell_back"} 0',
    'gpu_class_scheduler_prefilter_cycles_total{outcome="narrowed"} 42',
    'gpu_class_scheduler_prefilter_cycles_total{outcome="widened"} 3',
    'gpu_class_scheduler_prefilter_cycles_total_other{outcome="narrowed"} 9',  # another metric: not read
])


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param(METRICS, {"fell_back": 0, "narrowed": 42, "widened": 3}, id="outcomes"),
    pytest.param("scheduler_schedule_attempts_total{result=\"scheduled\"} 20\n", {}, id="stock-scheduler-has-none"),
])
def test_read_outcomes(text: str, expected: dict[str, float]) -> None:
    assert read_outcomes(text) == expected


def test_spent_between_keeps_what_changed() -> None:
    before = {"attempt count": 10.0, "attempt sum": 0.5, "PreFilter sum": 0.02, "Filter sum": 0.1}
    after = {"attempt count": 30.0, "attempt sum": 0.9, "PreFilter sum": 0.12, "Filter sum": 0.1, "Score sum": 0.04}
    spent = spent_between(before, after, {"narrowed": 42.0, "widened": 3.0}, {"narrowed": 60.0, "widened": 3.0,
                                                                                 "fell_back": 2.0})
    assert spent.attempts == 20
    assert spent.seconds == pytest.approx({"PreFilter": 0.1, "Filter": 0.0, "Score": 0.04, "attempt": 0.4})
    assert spent.outcomes == {"fell_back": 2, "narrowed": 18}


def spent(attempts: int, prefilter_ms: float, filter_ms: float = 0.0, outcomes: dict[str, int] | None = None) -> Spent:
    return Spent(attempts, {"PreFilter": prefilter_ms / 1000, "Filter": filter_ms / 1000, "Score": 0.0,
                            "attempt": 2 * (prefilter_ms + filter_ms) / 1000}, outcomes or {})


def arm(size: int, path: str, round_: int, ms: tuple[float, ...], on_best: int, s: Spent, pending: int = 0) -> Arm:
    """The watch saw each Pod ADDED 5 ms after its create call."""
    return Arm(size, path, round_, tuple(x / 1000 for x in ms), tuple((x - 5) / 1000 for x in ms),  # type: ignore[arg-type]
               on_best, pending, 0, s)


NOTHING = Spent(0, {}, {})


@pytest.mark.parametrize(("pods", "seconds", "watch", "on_best", "pending", "refused"), [
    pytest.param([PodTimes(1.0, 1.005, 1.020, "sg-0-h100")], (0.020,), (0.015,), 1, 0, 0, id="bound-on-best"),
    pytest.param([PodTimes(1.0, 1.005, 1.030, "sg-4-a100")], (0.030,), (0.025,), 0, 0, 0, id="bound-on-next"),
    pytest.param([PodTimes(1.0, 1.005, None, None)], (), (), 0, 1, 0, id="pending"),
    pytest.param([PodTimes(1.0, None, None, None, refused=True)], (), (), 0, 0, 1, id="refused-not-pending"),
    pytest.param([PodTimes(1.0, None, 1.010, "sg-0-h100")], (0.010,), (), 1, 0, 0, id="added-unseen-still-timed"),
    pytest.param([PodTimes(1.0, 1.019, 1.019, "sg-1-h100"), PodTimes(2.0, 2.002, 2.012, "sg-1-h100")],
                 (0.019, 0.012), (0.0, 0.010), 2, 0, 0, id="added-read-late"),
])
def test_make_arm(pods: list[PodTimes], seconds: tuple[float, ...], watch: tuple[float, ...], on_best: int,
                  pending: int, refused: int) -> None:
    a = make_arm(5000, "profiles", 1, pods, {"sg-0-h100", "sg-1-h100", "sg-2-h100"}, NOTHING)
    assert [round(x, 6) for x in a.seconds_to_bind] == list(seconds)
    assert [round(x, 6) for x in a.watch_seconds] == list(watch)
    assert (a.on_best, a.pending, a.refused, a.size, a.path, a.round) == (on_best, pending, refused, 5000, "profiles", 1)


ARMS = [
    arm(1000, "default", 0, (10, 20, 30, 40), 1, spent(4, 0.4, 40)),
    arm(1000, "profiles", 0, (5, 15, 25, 35), 4, spent(4, 4.0, 2, {"narrowed": 4})),
    arm(1000, "profiles", 1, (45, 55, 65, 75), 4, spent(4, 4.0, 2, {"narrowed": 4})),
    arm(1000, "default", 1, (50, 60, 70, 80), 2, spent(4, 0.4, 40)),
    arm(5000, "profiles", 0, (30, 30, 30, 30), 4, spent(4, 20.0, 4, {"narrowed": 3, "widened": 1})),
    arm(5000, "default", 0, (20, 20, 20, 20), 1, spent(5, 0.5, 100), pending=1),
]


def ms(x: float) -> float:
    return round(x, 6)


def test_summarize() -> None:
    by = {(m.size, m.path): m for m in summarize(ARMS)}
    assert list(by) == [(1000, "default"), (1000, "profiles"), (5000, "default"), (5000, "profiles")]
    d, g = by[(1000, "default")], by[(1000, "profiles")]
    # nearest rank over both rounds' eight Pods: the 4th and the 8th (of 10..80 / 5..75)
    assert (d.bound, ms(d.p50_ms), ms(d.p90_ms), tuple(map(ms, d.round_p50_ms))) == (8, 40, 80, (20, 60))
    assert (ms(g.p50_ms), tuple(map(ms, g.round_p50_ms))) == (35, (15, 55))
    assert (ms(d.watch_p50_ms), ms(g.watch_p50_ms)) == (35, 30)  # from ADDED, over both rounds
    assert (d.on_best, d.best_share, g.best_share) == (3, 3 / 8, 1.0)
    assert d.ms_per_cycle == pytest.approx({"PreFilter": 0.1, "Filter": 10.0, "Score": 0.0, "attempt": 20.2})
    assert (g.attempts, g.outcomes) == (8, {"narrowed": 8})
    assert (by[(5000, "default")].pending, by[(5000, "default")].attempts) == (1, 5)  # the Pending Pod's attempt too
    assert by[(5000, "profiles")].outcomes == {"narrowed": 3, "widened": 1}


def summary(size: int, path: str, p50_ms: float, prefilter_ms: float, bound: int = 20) -> Summary:
    return Summary(size, path, bound, 0, 0, 0, p50_ms, p50_ms, (p50_ms,), p50_ms,  # type: ignore[arg-type]
                   {"PreFilter": prefilter_ms, "Filter": 0.0, "Score": 0.0, "attempt": 0.0}, bound, {})


@pytest.mark.parametrize(("ours", "theirs", "holds"), [
    pytest.param(20.0, 21.0, True, id="below"),
    pytest.param(21.0, 21.0, True, id="equal-is-at"),
    pytest.param(21.1, 21.0, False, id="above"),
])
def test_p50_verdict(ours: float, theirs: float, holds: bool) -> None:
    [v] = p50_verdicts([summary(5000, "default", theirs, 0.1), summary(5000, "profiles", ours, 5.0)])
    assert v.holds is holds
    assert v.claim == "5,000 nodes: profiles p50 at or below default's"
    assert v.detail == f"{ours:.1f} ms against {theirs:.1f} ms"


@pytest.mark.parametrize("summaries", [
    pytest.param([summary(5000, "profiles", 20, 5)], id="no-default"),
    pytest.param([summary(5000, "profiles", 20, 5), summary(5000, "default", 20, 0, bound=0)], id="default-bound-none"),
])
def test_p50_verdict_not_measured(summaries: list[Summary]) -> None:
    assert [v.holds for v in p50_verdicts(summaries)] == [None]


def test_p50_verdict_per_size() -> None:
    verdicts = p50_verdicts([summary(1000, "default", 20, 0.1), summary(1000, "profiles", 10, 1),
                             summary(5000, "default", 20, 0.1), summary(5000, "profiles", 30, 5)])
    assert [(v.claim.split(":")[0], v.holds) for v in verdicts] == [("1,000 nodes", True), ("5,000 nodes", False)]


@pytest.mark.parametrize(("means", "holds", "detail"), [
    pytest.param({1000: 1.0, 5000: 1.2, 15000: 1.5}, True, "1.00 ms at 1,000, 1.20 ms at 5,000, 1.50 ms at 15,000: 1.50x",
                 id="flat-at-the-bound"),
    pytest.param({1000: 1.3, 5000: 5.1, 15000: 20.2}, False, "1.30 ms at 1,000, 5.10 ms at 5,000, 20.20 ms at 15,000: "
                 "15.54x", id="follows-the-class"),
    pytest.param({1000: 2.0, 5000: 1.0}, False, "2.00 ms at 1,000, 1.00 ms at 5,000: 2.00x", id="falling-counts-too"),
    pytest.param({1000: 1.0, 15000: 1.49}, True, "1.00 ms at 1,000, 1.49 ms at 15,000: 1.49x", id="two-sizes"),
])
def test_prefilter_flat(means: dict[int, float], holds: bool, detail: str) -> None:
    summaries = [summary(size, "profiles", 10, m) for size, m in means.items()]
    summaries += [summary(size, "default", 10, 100 * m) for size, m in means.items()]  # not its path: not read
    v = prefilter_flat(summaries)
    assert (v.holds, v.detail) == (holds, detail)


@pytest.mark.parametrize("summaries", [
    pytest.param([summary(5000, "profiles", 10, 5.0)], id="one-size"),
    pytest.param([summary(1000, "profiles", 10, 0.0), summary(5000, "profiles", 10, 5.0)], id="nothing-measured"),
    pytest.param([summary(1000, "default", 10, 1.0), summary(5000, "default", 10, 5.0)], id="no-profiles"),
])
def test_prefilter_flat_not_measured(summaries: list[Summary]) -> None:
    assert prefilter_flat(summaries).holds is None


SETTING = Setting("python -m bench single --sizes 1000,5000 --note 'Measured on main.'",
                  "python -m bench single --sizes 1000,5000", "Commit abc1234, 2026-12-05 15:00 UTC", "v1.37.2",
                  "before the change", "Measured on main.", 4, 2, {1000: (60.0, 20.0), 5000: (200.0, 90.0)}, 260.0)


def test_render() -> None:
    lines = render(ARMS, SETTING).splitlines()
    assert lines[0] == ("## Single Pods one after another, the class most of the nodes, before the change "
                        "(`python -m bench single --sizes 1000,5000`)")
    assert lines[2] == "Measured on main."
    assert lines[4].startswith("Commit abc1234, 2026-12-05 15:00 UTC. Command: `python -m bench single --sizes "
                               "1000,5000 --note 'Measured on main.'`; Kubernetes v1.37.2; 260 s wall. Nodes (bench/single/single_model.py, "
                               "grown from one size to the next): 1,000 nodes: 3 H100, 664 A100-80GB, 333 CPU-only "
                               "(60 s, fleet 20 s); 5,000 nodes: 3 H100, 3,333 A100-80GB, 1,664 CPU-only (200 s, "
                               "fleet 90 s);")
    assert ("| 1,000 | default scheduler | 8 | 3 (38%) | 40.0 | 80.0 | 20.0 / 60.0 | 35.0 | 8 | 0.10 | 10.00 | 0.00 | 20.20 "
            "| - |") in lines
    assert ("| 1,000 | gpu-class-scheduler | 8 | 8 (100%) | 35.0 | 75.0 | 15.0 / 55.0 | 30.0 | 8 | 1.00 | 0.50 | 0.00 "
            "| 3.00 | narrowed 8 |") in lines
    assert "| 5,000 | default scheduler | 4, 1 Pending | 1 (25%) | 20.0 | 20.0 | 20.0 | 15.0 | 5 | 0.10 | 20.00 | 0.00 " \
           "| 40.20 | - |" in lines
    assert lines[-1] == ("Issue 47's bar: 1,000 nodes: profiles p50 at or below default's: yes (35.0 ms against 40.0 ms); "
                         "5,000 nodes: profiles p50 at or below default's: no (30.0 ms against 20.0 ms); profiles "
                         "PreFilter mean per cycle within 1.5x across the sizes: no (1.00 ms at 1,000, 5.00 ms at "
                         "5,000: 5.00x).")


def test_render_without_label_or_note() -> None:
    lines = render(ARMS[:1], Setting("python -m bench single", "python -m bench single", "Commit abc1234", "v1.37.2", "", "", 4, 1,
                                     {1000: (60.0, 20.0)}, 60.0)).splitlines()
    assert lines[0] == "## Single Pods one after another, the class most of the nodes (`python -m bench single`)"
    assert lines[2].startswith("Commit abc1234. Command:")
    assert lines[-1].endswith("profiles PreFilter mean per cycle within 1.5x across the sizes: not measured (fewer "
                              "than two sizes measured).")


@pytest.mark.parametrize(("argv", "full", "measuring"), [
    pytest.param([], "python -m bench single", "python -m bench single", id="defaults"),
    pytest.param(["--sizes", "1000,5000", "--note", "Measured on main's 6757fc3.", "--label", "before it"],
                 "python -m bench single --sizes 1000,5000 --note 'Measured on main'\"'\"'s 6757fc3.' --label 'before it'",
                 "python -m bench single --sizes 1000,5000", id="report-options-left-out-of-the-heading"),
    pytest.param(["--section=single-before", "--paths", "default,profiles,extender", "--output", "/tmp/r.md"],
                 "python -m bench single --section=single-before --paths default,profiles,extender --output /tmp/r.md",
                 "python -m bench single --paths default,profiles,extender", id="equals-form"),
])
def test_command_line(argv: list[str], full: str, measuring: str) -> None:
    assert command_line(argv) == full
    assert command_line(argv, measuring_only=True) == measuring
