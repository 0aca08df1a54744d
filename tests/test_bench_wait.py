"""The waiting-Pods benchmark's pure side (bench/wait/wait_model.py): the arms' order, the counters, the
busy-loop verdict and the report."""

from __future__ import annotations

import pytest

from bench.wait.wait_model import (
    ArmRun, Cost, Counters, EventCost, Setting, arm_order, cost_between, is_busy_loop, per_minute, read_counter,
    read_counters, render,
)

METRICS = "\n".join([
    "# HELP scheduler_schedule_attempts_total [STABLE] Number of attempts to schedule pods, by the result.",
    "# TYPE scheduler_schedule_attempts_total counter",
    'scheduler_schedule_attempts_total{profile="gpu-class-scheduler",result="scheduled"} 20',
    'scheduler_schedule_attempts_total{profile="gpu-class-scheduler",result="unschedulable"} 200',
    'scheduler_schedule_attempts_total{profile="gpu-class-scheduler-binpack",result="scheduled"} 3',
    'scheduler_queue_incoming_pods_total{event="NodeAdd",queue="active"} 150',
    'scheduler_queue_incoming_pods_total{event="NodeAdd",queue="backoff"} 50',
    'scheduler_queue_incoming_pods_total{event="PodAdd",queue="active"} 223',
    'scheduler_schedule_attempts_total_other{result="scheduled"} 9',  # another metric: not counted
])


@pytest.mark.parametrize(("rounds", "expected"), [
    pytest.param(1, [("none", 0), ("waiting", 0)], id="one-round"),
    pytest.param(2, [("none", 0), ("waiting", 0), ("waiting", 1), ("none", 1)], id="abba"),
    pytest.param(3, [("none", 0), ("waiting", 0), ("waiting", 1), ("none", 1), ("none", 2), ("waiting", 2)],
                 id="three-rounds"),
    pytest.param(0, [], id="none"),
])
def test_arm_order(rounds: int, expected: list[tuple[str, int]]) -> None:
    assert arm_order(rounds) == expected


@pytest.mark.parametrize(("metric", "label", "expected"), [
    pytest.param("scheduler_schedule_attempts_total", "result", {"scheduled": 23, "unschedulable": 200},
                 id="attempts-summed-over-profiles"),
    pytest.param("scheduler_queue_incoming_pods_total", "event", {"NodeAdd": 200, "PodAdd": 223},
                 id="queued-summed-over-queues"),
    pytest.param("scheduler_schedule_attempts_total", "missing", {}, id="no-such-label"),
    pytest.param("scheduler_pending_pods", "queue", {}, id="no-such-metric"),
])
def test_read_counter(metric: str, label: str, expected: dict[str, float]) -> None:
    assert read_counter(METRICS, metric, label) == expected


def test_cost_between_keeps_what_changed() -> None:
    before = read_counters(METRICS)
    after = Counters({"scheduled": 25, "unschedulable": 400}, {"NodeAdd": 400, "PodAdd": 223, "AssignedPodDelete": 1})
    cost = cost_between(before, after, 10.0)
    assert cost == Cost(10.0, {"scheduled": 2, "unschedulable": 200}, {"AssignedPodDelete": 1, "NodeAdd": 200})
    assert cost.total_attempts == 202
    assert cost.queued_by_cluster == 201


@pytest.mark.parametrize(("queued", "expected"), [
    pytest.param({"UnscheduledPodAdd": 200, "ScheduleAttemptFailure": 3, "BackoffComplete": 3}, 0,
                 id="own-events-only"),
    pytest.param({"PodAdd": 1, "NodeAdd": 200, "UnschedulableTimeout": 200}, 400, id="node-and-flush"),
    pytest.param({}, 0, id="nothing"),
])
def test_queued_by_cluster(queued: dict[str, int], expected: int) -> None:
    assert Cost(1.0, {}, queued).queued_by_cluster == expected


@pytest.mark.parametrize(("attempts", "waiting", "busy"), [
    pytest.param(0, 200, False, id="quiet"),
    pytest.param(199, 200, False, id="fewer-than-one-each"),
    pytest.param(200, 200, True, id="one-each"),
    pytest.param(1200, 200, True, id="backoff-loop"),
    pytest.param(50, 0, False, id="no-waiting-pods"),
])
def test_is_busy_loop(attempts: int, waiting: int, busy: bool) -> None:
    assert is_busy_loop(Cost(60.0, {"unschedulable": attempts} if attempts else {}, {}), waiting) is busy


@pytest.mark.parametrize(("attempts", "seconds", "expected"), [
    pytest.param(30, 60.0, 30.0, id="a-minute"),
    pytest.param(30, 30.0, 60.0, id="half-a-minute"),
    pytest.param(5, 0.0, 0.0, id="no-time"),
])
def test_per_minute(attempts: int, seconds: float, expected: float) -> None:
    assert per_minute(Cost(seconds, {"scheduled": attempts}, {})) == expected


SETTING = Setting("python -m bench wait --nodes 500", "Commit abc1234, 2026-12-05 15:00 UTC", "v1.37.2", 500,
                  "H100", 24, 20, "1h", 3, 300.0)


def make_run(arm: str, round_: int, *, waiting: int, quiet: int, others_ms: tuple[float, ...],
             event_attempts: int = 0) -> ArmRun:
    run = ArmRun(arm, round_, waiting)  # type: ignore[arg-type]
    run.quiet = Cost(60.0, {"unschedulable": quiet} if quiet else {}, {})
    run.others = Cost(5.0, {"scheduled": len(others_ms)}, {})
    run.others_seconds = [ms / 1000 for ms in others_ms]
    run.others_types = {"L40S": len(others_ms)}
    woken = {"unschedulable": event_attempts} if event_attempts else {}
    queued = {"NodeAdd": event_attempts} if event_attempts else {}
    run.events = [EventCost("lesser-node-added", Cost(4.0, woken, queued), 0),
                  EventCost("best-pod-deleted", Cost(4.0, {"scheduled": 1} if waiting else {}, {}), int(waiting > 0))]
    run.still_waiting = waiting - 1 if waiting else 0
    return run


def test_render() -> None:
    runs = [make_run("none", 0, waiting=0, quiet=0, others_ms=(10, 20, 30)),
            make_run("waiting", 0, waiting=20, quiet=0, others_ms=(20, 40, 60), event_attempts=20)]
    text = render(runs, SETTING)
    lines = text.splitlines()
    assert lines[0] == "## Waiting Pods on the scheduler (`python -m bench wait`)"
    assert lines[2].startswith("Commit abc1234, 2026-12-05 15:00 UTC. Command: `python -m bench wait --nodes 500`;")
    assert "| none | 1 | 0 | 0 in 60 s (0.0) | none | - | scheduled 3 | 20 | 30 | 3 on L40S | - |" in lines
    assert "| waiting | 1 | 20 | 0 in 60 s (0.0) | none | no | scheduled 3 | 40 | 60 | 3 on L40S | 1 of 20 |" in lines
    assert ("Other Pods, all rounds of an arm together: none: p50 20 ms, p90 30 ms (3 Pods; medians of the rounds' "
            "p50 20 ms); waiting: p50 40 ms, p90 60 ms (3 Pods; medians of the rounds' p50 40 ms).") in lines
    assert ("| a node of a lesser type of the class added (8 GPUs free) | 0 | 20 (unschedulable 20) | none "
            "| NodeAdd 20 | 0 |") in lines
    assert ("| a one-GPU Pod deleted from a best-type node (one GPU freed there) | 0 | 1 (scheduled 1) | none | none "
            "| 1 |") in lines


def test_render_says_busy_loop() -> None:
    text = render([make_run("waiting", 0, waiting=20, quiet=120, others_ms=(5,))], SETTING)
    assert "| waiting | 1 | 20 | 120 in 60 s (120.0): unschedulable 120 | none | yes |" in text


def test_render_without_events() -> None:
    run = make_run("none", 0, waiting=0, quiet=0, others_ms=(5,))
    run.events = []
    assert "What one event costs" not in render([run], SETTING)


def test_render_says_what_the_flush_cost() -> None:
    run = make_run("waiting", 1, waiting=20, quiet=0, others_ms=(5,))
    run.flush = Cost(305.0, {"unschedulable": 19}, {"UnschedulableTimeout": 19, "ScheduleAttemptFailure": 19})
    text = render([run], SETTING)
    assert ("kube-scheduler's own flush of the Pods left unschedulable for 5 minutes (its "
            "podMaxInUnschedulablePodsDuration, a timer per Pod of every scheduler, not gpu-class's): waiting round 2, "
            "19 waiting Pods: 19 attempts (unschedulable 19), queued ScheduleAttemptFailure 19, UnschedulableTimeout "
            "19, in the 305 s after the last event.") in text
