"""The stall benchmark's pure side (bench/stall/stall_model.py): answers and metrics read, arms in turn, the
percentiles, ratios and differences it reports, and the report itself; and that it attacks loopback only."""

from __future__ import annotations

import pytest

from bench.stall.attack import Target
from bench.stall.stall_model import (
    ATTACKED, BOUNDARY_ARMS, BOUNDED_WITH, BOUNDED_WITHOUT, OPEN, OPEN_WITH, OPEN_WITHOUT, QUIET, STALL_ARMS, WITH,
    WITHOUT, ArmRun, AttackPlan, AttackTally, Poll, Setting, Timing,
    answer_status, arm_order, classes_in_turn, command_line, counts_between, is_boundary_refusal, judge_boundary,
    judge_create, judge_stall, make_honest_pod, namespaces_in_turn, make_probe_pod, percentiles, policy_step_timing, read_cuts, render,
    webhook_timing,
)

WEBHOOK_METRICS = """\
# HELP gpu_class_admission_requests_total AdmissionReviews answered, by outcome and class
# TYPE gpu_class_admission_requests_total counter
gpu_class_admission_requests_total{class="high",outcome="placed"} 120.0
gpu_class_admission_requests_total{class="",outcome="too-slow"} 7.0
gpu_class_admission_requests_total{class="",outcome="too-large"} 3.0
gpu_class_admission_requests_total{class="economy",outcome="too-slow"} 1.0
gpu_class_admission_requests_total{class="",outcome="bad-request"} 2.0
"""

APISERVER_METRICS = """\
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu-class.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} 40
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.gpu-class.io",operation="CREATE",rejected="false",type="admit"} 0.2
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.gpu-class.io",operation="CREATE",rejected="false",type="admit"} 40
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.gpu-class.io",operation="CREATE",rejected="true",type="admit"} 0.05
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.gpu-class.io",operation="CREATE",rejected="true",type="admit"} 10
apiserver_admission_webhook_admission_duration_seconds_sum{name="other.example.com",operation="CREATE",rejected="false",type="admit"} 9
apiserver_admission_webhook_admission_duration_seconds_count{name="other.example.com",operation="CREATE",rejected="false",type="admit"} 1
# TYPE apiserver_admission_controller_admission_duration_seconds histogram
apiserver_admission_controller_admission_duration_seconds_sum{name="ValidatingAdmissionPolicy",operation="CREATE",rejected="false",type="validate"} 0.3
apiserver_admission_controller_admission_duration_seconds_count{name="ValidatingAdmissionPolicy",operation="CREATE",rejected="false",type="validate"} 100
apiserver_admission_controller_admission_duration_seconds_sum{name="ValidatingAdmissionPolicy",operation="UPDATE",rejected="false",type="validate"} 5
apiserver_admission_controller_admission_duration_seconds_count{name="ValidatingAdmissionPolicy",operation="UPDATE",rejected="false",type="validate"} 1
"""


@pytest.mark.parametrize(("reply", "status"), [
    pytest.param(b"HTTP/1.1 408 REQUEST TIMEOUT\r\nContent-Length: 2\r\n\r\n{}", "408", id="cut"),
    pytest.param(b"HTTP/1.1 413 REQUEST ENTITY TOO LARGE\r\n", "413", id="too-large"),
    pytest.param(b"", "no answer", id="closed-without-answer"),
    pytest.param(b"\x15\x03\x03", "garbled", id="not-http"),
    pytest.param(b"HTTP/1.1", "garbled", id="no-status"),
])
def test_answer_status(reply: bytes, status: str) -> None:
    assert answer_status(reply) == status


def test_arms_take_turns_the_first_alternating() -> None:
    assert arm_order(STALL_ARMS, 3) == [(0, QUIET), (0, ATTACKED), (1, ATTACKED), (1, QUIET), (2, QUIET), (2, ATTACKED)]
    assert arm_order(BOUNDARY_ARMS, 2) == [(0, WITH), (0, WITHOUT), (1, WITHOUT), (1, WITH)]
    assert [namespaces_in_turn(r) for r in range(2)] == [("bounded", "not bounded"), ("not bounded", "bounded")]


def test_classes_in_turn() -> None:
    assert classes_in_turn(("economy", "high"), 5) == ["economy", "high", "economy", "high", "economy"]


def test_cuts_are_read_by_outcome_over_every_class() -> None:
    cuts = read_cuts(WEBHOOK_METRICS)
    assert cuts == {"too-slow": 8.0, "too-large": 3.0, "busy": 0.0}
    assert counts_between({"too-slow": 5.0, "too-large": 3.0, "busy": 0.0}, cuts) == {
        "too-slow": 3.0, "too-large": 0.0, "busy": 0.0}


def test_the_api_servers_timings_are_read_for_gpu_class_and_the_policy_step_on_creates() -> None:
    call = webhook_timing(APISERVER_METRICS)
    assert call.seconds == pytest.approx(0.25) and call.calls == 50.0
    assert call.mean_ms == pytest.approx(5.0)
    step = policy_step_timing(APISERVER_METRICS)
    assert step.seconds == pytest.approx(0.3) and step.calls == 100.0
    assert step.minus(Timing(0.1, 60.0)).mean_ms == pytest.approx(5.0)
    assert Timing(0.0, 0.0).mean_ms is None


@pytest.mark.parametrize(("status", "body", "wrong"), [
    pytest.param(201, {"metadata": {"annotations": {"gpu-class.io/types": "T4"}}}, None, id="placed"),
    pytest.param(201, {"metadata": {"annotations": {"gpu-class.io/class": "high"}}}, "failed open", id="unplaced"),
    pytest.param(201, {"metadata": {}}, "failed open", id="no-annotations"),
    pytest.param(403, {"message": "denied"}, "HTTP 403: denied", id="refused"),
])
def test_judge_create(status: int, body: dict[str, object], wrong: str | None) -> None:
    answer = judge_create(status, body)
    assert answer == wrong if wrong is None else wrong in (answer or "")


@pytest.mark.parametrize(("status", "message", "refused"), [
    pytest.param(403, "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'gpu-class.io-boundary' with binding "
                      "'gpu-class.io-boundary' denied request: ...", True, id="the-boundary"),
    pytest.param(403, "ValidatingAdmissionPolicy 'gpu-class.io-placement' with binding 'gpu-class.io-placement' "
                      "denied request", False, id="the-placement-backstop"),
    pytest.param(201, "", False, id="created"),
])
def test_is_boundary_refusal(status: int, message: str, refused: bool) -> None:
    assert is_boundary_refusal(status, {"message": message}) is refused


def test_the_probe_is_an_honest_pod_naming_its_node() -> None:
    honest, probe = make_honest_pod("economy"), make_probe_pod("economy", "n1")
    assert honest["metadata"]["annotations"] == {"gpu-class.io/class": "economy"}
    assert honest["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nodeName" not in honest["spec"] and probe["spec"]["nodeName"] == "n1"


def test_percentiles_by_rounded_rank() -> None:
    p = percentiles([float(x) for x in range(100, 0, -1)])
    assert (p.n, p.p50, p.p99, p.max) == (100, 51.0, 99.0, 100.0)
    assert percentiles([]) == (0, 0.0, 0.0, 0.0)


def test_tallies_merge() -> None:
    a = AttackTally(slow_opened=2, slow_ended={"408": 2}, oversized_begun=1, oversized_ended={"413": 1},
                    oversized_bytes=10, seconds=1.0)
    b = AttackTally(slow_opened=1, slow_ended={"408": 1, "stopped": 1}, slow_held_seconds=3.0, slow_counted_seconds=1.0,
                    seconds=2.0)
    m = a.merge(b)
    assert (m.slow_opened, m.slow_ended, m.slow_held_seconds, m.slow_counted_seconds, m.oversized_begun,
            m.oversized_ended, m.seconds) == (3, {"408": 3, "stopped": 1}, 3.0, 1.0, 1, {"413": 1}, 3.0)


def run(arm: str, round_: int, latencies: list[float], **kw: object) -> ArmRun:
    part = "stall" if arm in STALL_ARMS else "boundary"  # the boundary's arms name their namespace's kind
    return ArmRun(part, arm, round_, tuple(latencies), 0, "", 1.0, **kw)  # type: ignore[arg-type]


def test_stall_ratios_pooled_and_per_round() -> None:
    runs = [run(QUIET, 0, [10.0] * 97 + [20.0] * 3), run(ATTACKED, 0, [11.0] * 97 + [24.0] * 3),
            run(ATTACKED, 1, [11.0] * 100, polls=(Poll(0.0, 200, 5.0), Poll(0.2, 0, 2000.0)),
                cuts={"too-slow": 4.0, "too-large": 2.0, "busy": 0.0}),
            run(QUIET, 1, [10.0] * 100)]
    v = judge_stall(runs)
    assert v.p50_ratio == pytest.approx(1.1) and v.p99_ratio == pytest.approx(1.2)
    assert v.round_p99_ratio == pytest.approx((24 / 20 + 11 / 10) / 2)
    assert v.p99_met and not v.readyz_met and v.failed_polls == 1
    assert v.cuts == {"too-slow": 4.0, "too-large": 2.0, "busy": 0.0}


def test_boundary_cost_is_with_less_without() -> None:
    runs = [run(BOUNDED_WITH, 0, [12.0] * 100, policy_step=Timing(0.2, 100.0)),
            run(OPEN_WITH, 0, [9.0] * 100, policy_step=Timing(0.1, 100.0)),
            run(BOUNDED_WITHOUT, 0, [10.0] * 100, policy_step=Timing(0.05, 100.0)),
            run(OPEN_WITHOUT, 0, [9.0] * 100, policy_step=Timing(0.05, 100.0)),
            run(BOUNDED_WITHOUT, 1, [11.0] * 100, policy_step=Timing(0.05, 100.0)),
            run(BOUNDED_WITH, 1, [11.0] * 100, policy_step=Timing(0.2, 100.0))]
    c = judge_boundary(runs)
    assert c.added_p50_ms == pytest.approx(1.0) and c.p50_ratio == pytest.approx(12 / 11)
    assert c.round_added_p50_ms == pytest.approx(1.0)  # the median of +2 and 0
    assert c.added_step_ms == pytest.approx(1.5)
    open_ = judge_boundary(runs, OPEN)
    assert open_.added_p50_ms == 0.0 and open_.added_step_ms == pytest.approx(0.5)


def setting(**kw: object) -> Setting:
    values: dict[str, object] = dict(
        command="python -m bench stall --section s --cluster-dir /tmp/c", measuring="python -m bench stall",
        stamp="Commit abc1234, 2026-12-07 00:00 UTC", kube_version="v1.37.2", label="run 1 of 2", note="",
        workers="gpuclass serve's workers were the same 2 processes throughout", rounds=1, creates=100,
        plan=AttackPlan(), attack_nice=19, warmup_seconds=4.0, settle_seconds=2.0, wall_seconds=300.0, cores=2)
    values.update(kw)
    return Setting(**values)  # type: ignore[arg-type]


def test_render_states_the_verdicts_and_the_rounds() -> None:
    tally = AttackTally(slow_opened=100, slow_ended={"408": 50, "stopped": 50}, slow_held_seconds=100.0,
                        slow_counted_seconds=2.0,
                        oversized_begun=60, oversized_ended={"413": 60}, oversized_bytes=60 * 25 * 1024 * 1024,
                        seconds=5.0, cpu_seconds=3.0)
    stall = [run(QUIET, 0, [10.0] * 100), run(ATTACKED, 0, [10.5] * 99 + [14.0], attack=tally,
                                            cuts={"too-slow": 50.0, "too-large": 60.0, "busy": 0.0})]
    boundary = [run(BOUNDED_WITH, 0, [12.0] * 100), run(BOUNDED_WITHOUT, 0, [11.0] * 100)]
    text = render(stall, boundary, setting(), "economy")
    assert text.startswith("## Honest creates under slow and oversized requests, and the boundary's cost, run 1 of 2 "
                           "(`python -m bench stall`)\n")
    assert "p99 1.05x (target p99 <= 1.3x: PASS)" in text
    assert "/readyz while attacked: 0 failed (target 0: PASS)" in text
    assert "too-slow 50, too-large 60, busy 0" in text
    assert "slow connections held open 50.0 on average once the first 50 had opened" in text
    assert "and 10 senders of POST /mutate" in text and "{" not in text
    assert "| 1 | 10.00 / 10.00 | 10.50 / 10.50 | 1.05x | 50 / 60 / 0 | 100 | 60 | 0 |" in text
    assert "Added by the binding, bounded: p50 +1.00 ms (1.09x)" in text
    assert "| 1 | bounded | 12.00 / 12.00 | 11.00 / 11.00 | +1.00 | +1.00 | - / - |" in text
    assert "| not bounded" not in text and "Added by the binding, not bounded" not in text  # no such arm ran
    assert "Wrong answers" not in text


def test_render_names_wrong_answers_and_a_missed_target() -> None:
    stall = [run(QUIET, 0, [10.0] * 100),
             ArmRun("stall", ATTACKED, 0, (20.0,) * 100, 2, "HTTP 500: boom", 1.0)]
    text = render(stall, [], setting(label=""), "economy")
    assert "(target p99 <= 1.3x: FAIL)" in text and "What the tenant boundary adds" not in text
    assert "Wrong answers: round 1, attacked: 2 (first: HTTP 500: boom)." in text
    assert text.startswith("## Honest creates under slow and oversized requests (`")


def test_render_says_only_what_attacked() -> None:
    tally = AttackTally(oversized_begun=10, oversized_ended={"413": 10}, oversized_bytes=10 * 1024 * 1024, seconds=5.0)
    stall = [run(QUIET, 0, [10.0] * 100), run(ATTACKED, 0, [10.0] * 100, attack=tally)]
    text = render(stall, [], setting(plan=AttackPlan(slow_connections=0)), "economy")
    assert "TLS connections that each send headers" not in text and "slow connections held open" not in text
    assert "Attacked: from a process of its own (nice 19, so that on 2 shared cores the attacker's own CPU does not " \
           "stand in for the webhook's), 10 senders of POST /mutate with bodies of 25 MiB" in text
    assert "over 5 s: oversized requests 10 (2.0/s; 0 failed to open), 10 MiB sent (2 MiB/s), ended by 413 10; " \
           "the attacker's CPU 0 s." in text
    boundary_only = render([], [run(BOUNDED_WITH, 0, [12.0] * 100), run(BOUNDED_WITHOUT, 0, [11.0] * 100)],
                           setting(label=""), "economy")
    assert boundary_only.startswith("## What the tenant boundary adds to a create (`")


def test_the_heading_leaves_out_where_the_report_goes() -> None:
    argv = ["--rounds", "2", "--output", "/tmp/x.md", "--section=s", "--label", "run 1 of 2"]
    assert command_line(argv, measuring_only=True) == "python -m bench stall --rounds 2"
    assert command_line(argv) == "python -m bench stall --rounds 2 --output /tmp/x.md --section=s --label 'run 1 of 2'"


@pytest.mark.parametrize("host", ["10.0.0.1", "192.168.1.5", "::ffff:8.8.8.8"])
def test_only_loopback_is_attacked(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        Target(host, 8443, "ca.crt")


def test_loopback_targets_are_taken() -> None:
    assert Target("127.0.0.1", 8443, "ca.crt").port == 8443
    assert Target("::1", 8443, "ca.crt").host == "::1"


def test_the_command_parses_its_options() -> None:
    from bench.stall.stall import build_parser

    parser = build_parser()
    assert parser.prog == "python -m bench stall"
    args = parser.parse_args([])
    assert (args.rounds, args.creates, args.slow, args.oversized, args.oversized_mib, args.parts) == (
        6, 100, 50, 10, 25.0, "stall,boundary")
    assert parser.parse_args(["--rounds", "2", "--creates", "10", "--attack-nice", "0"]).attack_nice == 0
