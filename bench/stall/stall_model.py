"""What `python -m bench stall` measures, how it sums it up and how it reports it. Pure: no I/O.

Two experiments on the local control plane, each in rounds whose arms take turns (the first arm of a round
alternating), so that drift on a shared machine falls on both arms alike:

- stall: honest dry-run creates of class Pods, quiet against attacked, the attack being slow clients (headers
  announcing a large body, then a byte a second, reconnecting when cut) and oversized requests (bodies over the
  server's limit, sent at full speed, again and again) on the webhook's own port; beside them, /readyz polled
  as the kubelet would, and the server's own count of the requests it cut;
- boundary: honest dry-run creates in a namespace with `gpu-class.io/allowed-classes`, with the boundary
  policy's binding against without it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, NamedTuple, Sequence

from prometheus_client.parser import text_string_to_metric_families

from bench.common import sections
from bench.common.percentiles import rounded_rank_percentile
from bench.common.scrape import read_counter

JsonObj = dict[str, Any]
Part = Literal["stall", "boundary"]

QUIET, ATTACKED = "quiet", "attacked"
WITH, WITHOUT = "with the binding", "without it"  # the boundary's binding, present or deleted
STALL_ARMS = (QUIET, ATTACKED)
BOUNDARY_ARMS = (WITH, WITHOUT)
# The boundary's arms: in the namespace it bounds, and in one opted in without gpu-class.io/allowed-classes (the
# binding selects every opted-in namespace; there its validations hold at once)
BOUNDED, OPEN = "bounded", "not bounded"
BOUNDED_WITH, BOUNDED_WITHOUT = f"{BOUNDED}, {WITH}", f"{BOUNDED}, {WITHOUT}"
OPEN_WITH, OPEN_WITHOUT = f"{OPEN}, {WITH}", f"{OPEN}, {WITHOUT}"


def boundary_arm(kind: str, binding: str) -> str:
    """`bounded, with the binding`: the arm of namespace kind BOUNDED or OPEN, with the binding WITH or WITHOUT."""
    return f"{kind}, {binding}"


def namespaces_in_turn(round_: int) -> tuple[str, str]:
    """The namespace kinds in the order a round measures them under one state of the binding, alternating."""
    return (BOUNDED, OPEN) if round_ % 2 == 0 else (OPEN, BOUNDED)

CUT_OUTCOMES = ("too-slow", "too-large", "busy")  # gpu_class_admission_requests_total's outcomes for a cut request
ADMISSIONS = "gpu_class_admission_requests_total"
WEBHOOK_SECONDS = "apiserver_admission_webhook_admission_duration_seconds"
ADMISSION_STEP_SECONDS = "apiserver_admission_controller_admission_duration_seconds"
WEBHOOK_NAME = "pods.gpu-class.io"  # deploy/base/webhook.yaml's, as the API server's metrics label it
BOUNDARY_BINDING = "gpu-class.io-boundary"
CLASS_ANNOTATION, TYPES_ANNOTATION = "gpu-class.io/class", "gpu-class.io/types"
MIB = 1024 * 1024

TARGET_P99_RATIO = 1.3  # attacked over quiet
TARGET_READYZ_FAILURES = 0
READYZ_TIMEOUT_SECONDS = 2.0  # the Deployment's readinessProbe timeoutSeconds (deploy/base/deployment.yaml)


# --- the attack and the probe, as counted -----------------------------------------------------------------


@dataclass(frozen=True)
class AttackPlan:
    """What the attacking process sends to the webhook's port while an attacked arm runs."""

    slow_connections: int = 50
    slow_declared_bytes: int = 3_000_000  # the Content-Length each slow client announces
    slow_interval_seconds: float = 1.0  # one byte of body each
    # the first connections opened evenly over this (the server's read deadline), so that cuts and reconnections
    # come all the time rather than in waves that a short arm could fall between
    slow_ramp_seconds: float = 3.0
    oversized_senders: int = 10
    oversized_body_bytes: int = 25 * MIB  # over the server's 19 MiB limit
    chunk_bytes: int = 256 * 1024  # what an oversized sender writes at a time
    max_episode_seconds: float = 600.0  # the attack stops by itself after this, whatever the bench does


@dataclass
class AttackTally:
    """What one attack episode did, as its clients saw it. Answers are keyed by HTTP status (`408`), or
    `no answer` (the server closed, or reset, before an answer was read), or `stopped` (the bench ended it)."""

    slow_opened: int = 0
    slow_open_failed: int = 0
    slow_ended: dict[str, int] = field(default_factory=dict)
    # connection-seconds the slow clients held once the ramp was over, and the seconds that counts over: how many
    # were open on average
    slow_held_seconds: float = 0.0
    slow_counted_seconds: float = 0.0
    oversized_begun: int = 0
    oversized_open_failed: int = 0
    oversized_ended: dict[str, int] = field(default_factory=dict)
    oversized_bytes: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the attacking process's

    def merge(self, other: AttackTally) -> AttackTally:
        return AttackTally(
            self.slow_opened + other.slow_opened, self.slow_open_failed + other.slow_open_failed,
            add_counts(self.slow_ended, other.slow_ended), self.slow_held_seconds + other.slow_held_seconds,
            self.slow_counted_seconds + other.slow_counted_seconds,
            self.oversized_begun + other.oversized_begun,
            self.oversized_open_failed + other.oversized_open_failed,
            add_counts(self.oversized_ended, other.oversized_ended), self.oversized_bytes + other.oversized_bytes,
            self.seconds + other.seconds, self.cpu_seconds + other.cpu_seconds)


def add_counts(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in sorted({*a, *b})}


def answer_status(reply: bytes) -> str:
    """`408` for a reply that begins `HTTP/1.1 408 ...`; `no answer` for none, `garbled` for anything else."""
    if not reply:
        return "no answer"
    parts = reply.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return parts[1].decode()
    return "garbled"


class Poll(NamedTuple):
    """One /readyz probe: when it began (monotonic seconds), its HTTP status (0: no answer within the timeout,
    or the connection failed) and how long it took."""

    at: float
    status: int
    ms: float


def failed_polls(polls: Sequence[Poll]) -> int:
    return sum(p.status != 200 for p in polls)


# --- the creates ---------------------------------------------------------------------------------------------


def make_honest_pod(class_name: str) -> JsonObj:
    """A Pod as a user writes it: the class annotation and one GPU, named by the API server."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": f"honest-{class_name}-", "labels": {"app": "bench-stall"},
                     "annotations": {CLASS_ANNOTATION: class_name}},
        "spec": {"containers": [{
            "name": "main", "image": "registry.example/train:1", "command": ["python", "train.py"],
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                          "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}}}]},
    }


def make_probe_pod(class_name: str, node_name: str) -> JsonObj:
    """A class Pod that names its node: the webhook places it, the boundary refuses it in a bounded namespace
    (a GPU Pod there may not name its node). Whether it is refused says whether the binding is in force."""
    pod = make_honest_pod(class_name)
    pod["metadata"]["generateName"] = "boundary-probe-"
    pod["spec"]["nodeName"] = node_name
    return pod


def classes_in_turn(classes: Sequence[str], count: int) -> list[str]:
    return [classes[i % len(classes)] for i in range(count)]


def judge_create(status: int, body: JsonObj) -> str | None:
    """None when a dry-run create came back created and placed by gpu-class; else what was wrong."""
    if status != 201:
        return f"HTTP {status}: {str(body.get('message', body))[:300]}"
    if TYPES_ANNOTATION not in (body.get("metadata", {}).get("annotations") or {}):
        return "created without gpu-class.io/types: the webhook's call failed open"
    return None


def is_boundary_refusal(status: int, body: JsonObj) -> bool:
    return status == 403 and f"'{BOUNDARY_BINDING}'" in str(body.get("message", ""))


def arm_order(arms: tuple[str, str], rounds: int) -> list[tuple[int, str]]:
    """(round, arm) in the order they run: both arms every round, the first one alternating."""
    return [(r, arm) for r in range(rounds) for arm in (arms if r % 2 == 0 else arms[::-1])]


# --- the servers' own counts -----------------------------------------------------------------------------------


def read_cuts(metrics_text: str) -> dict[str, float]:
    """The requests the webhook cut so far, by outcome (every class summed), from its /metrics."""
    counts = read_counter(metrics_text, ADMISSIONS, "outcome")
    return {outcome: counts.get(outcome, 0.0) for outcome in CUT_OUTCOMES}


def counts_between(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


class Timing(NamedTuple):
    """A histogram's sum (seconds) and count, or their differences over an arm."""

    seconds: float
    calls: float

    def minus(self, earlier: Timing) -> Timing:
        return Timing(self.seconds - earlier.seconds, self.calls - earlier.calls)

    def plus(self, other: Timing) -> Timing:
        return Timing(self.seconds + other.seconds, self.calls + other.calls)

    @property
    def mean_ms(self) -> float | None:
        return self.seconds / self.calls * 1000 if self.calls > 0 else None


def read_timing(metrics_text: str, metric: str, labels: Mapping[str, str]) -> Timing:
    """The sum and count of histogram `metric` over its series whose labels include `labels`."""
    seconds = calls = 0.0
    # the API server serves thousands of other series: only this metric's lines (and its type) are parsed
    mine = "\n".join(line for line in metrics_text.splitlines()
                     if line.startswith((metric, f"# TYPE {metric} ")))
    for family in text_string_to_metric_families(mine):
        if family.name != metric:
            continue
        for sample in family.samples:
            if any(sample.labels.get(k) != v for k, v in labels.items()):
                continue
            if sample.name == f"{metric}_sum":
                seconds += sample.value
            elif sample.name == f"{metric}_count":
                calls += sample.value
    return Timing(seconds, calls)


def webhook_timing(apiserver_metrics: str) -> Timing:
    """gpu-class's calls, as the API server times them."""
    return read_timing(apiserver_metrics, WEBHOOK_SECONDS, {"name": WEBHOOK_NAME, "operation": "CREATE"})


def policy_step_timing(apiserver_metrics: str) -> Timing:
    """The API server's ValidatingAdmissionPolicy step on creates: every policy bound, evaluated."""
    return read_timing(apiserver_metrics, ADMISSION_STEP_SECONDS,
                       {"name": "ValidatingAdmissionPolicy", "operation": "CREATE"})


# --- arms and their summaries ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArmRun:
    """One arm of one round."""

    part: Part
    arm: str
    round: int
    latencies_ms: tuple[float, ...]  # each create's, client-side
    wrong: int  # creates not created-and-placed
    first_wrong: str
    window_seconds: float  # from the arm's first create to its last answer
    polls: tuple[Poll, ...] = ()  # /readyz from the arm's start (the attack's, for an attacked arm) to its end
    cuts: Mapping[str, float] = field(default_factory=dict)  # requests the webhook cut, by outcome, over the same
    attack: AttackTally | None = None
    webhook_cpu_seconds: float = 0.0  # gpuclass serve, master and workers, over the window of creates
    apiserver_cpu_seconds: float = 0.0
    webhook_call: Timing = Timing(0.0, 0.0)  # the API server's view of gpu-class's calls over the arm
    policy_step: Timing = Timing(0.0, 0.0)  # the API server's ValidatingAdmissionPolicy step over the arm


class Percentiles(NamedTuple):
    n: int
    p50: float
    p99: float
    max: float


def percentiles(values: Sequence[float]) -> Percentiles:
    """p50 and p99 by rounded rank (as bench apiserver reports them), of any order."""
    return Percentiles(len(values), rounded_rank_percentile(values, 0.5), rounded_rank_percentile(values, 0.99),
                       max(values, default=0.0))


def ratio(over: float, base: float) -> float | None:
    return over / base if base > 0 else None


def pooled(runs: Sequence[ArmRun], arm: str) -> list[float]:
    return [ms for run in runs if run.arm == arm for ms in run.latencies_ms]


def per_round_ratios(runs: Sequence[ArmRun], over: str, base: str, q: float) -> list[float]:
    """Each round's percentile of arm `over` over that of `base` (rounds where both ran)."""
    out = []
    for r in sorted({run.round for run in runs}):
        a = [ms for run in runs if run.round == r and run.arm == over for ms in run.latencies_ms]
        b = [ms for run in runs if run.round == r and run.arm == base for ms in run.latencies_ms]
        value = ratio(rounded_rank_percentile(a, q), rounded_rank_percentile(b, q)) if a and b else None
        if value is not None:
            out.append(value)
    return out


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    latency: Percentiles
    wrong: int
    polls: int
    failed_polls: int
    poll_p99_ms: float
    cuts: dict[str, float]
    webhook_cores: float  # CPU seconds per second of the arms' windows
    apiserver_cores: float
    webhook_call: Timing
    policy_step: Timing
    attack: AttackTally | None


def summarize_arm(runs: Sequence[ArmRun], arm: str) -> ArmSummary:
    mine = [r for r in runs if r.arm == arm]
    polls = [p for r in mine for p in r.polls]
    window = sum(r.window_seconds for r in mine)
    cuts: dict[str, float] = {}
    attack: AttackTally | None = None
    webhook_call, policy_step = Timing(0.0, 0.0), Timing(0.0, 0.0)
    for r in mine:
        cuts = {k: cuts.get(k, 0.0) + r.cuts.get(k, 0.0) for k in (*CUT_OUTCOMES, *r.cuts)}
        if r.attack is not None:
            attack = r.attack if attack is None else attack.merge(r.attack)
        webhook_call, policy_step = webhook_call.plus(r.webhook_call), policy_step.plus(r.policy_step)
    return ArmSummary(
        arm, percentiles(pooled(mine, arm)), sum(r.wrong for r in mine), len(polls), failed_polls(polls),
        rounded_rank_percentile([p.ms for p in polls], 0.99), cuts,
        sum(r.webhook_cpu_seconds for r in mine) / window if window else 0.0,
        sum(r.apiserver_cpu_seconds for r in mine) / window if window else 0.0, webhook_call, policy_step, attack)


@dataclass(frozen=True)
class StallVerdict:
    p50_ratio: float | None
    p99_ratio: float | None
    round_p50_ratio: float | None  # the median of the per-round ratios
    round_p99_ratio: float | None
    failed_polls: int  # in attacked arms
    cuts: dict[str, float]  # in attacked arms

    @property
    def p99_met(self) -> bool:
        return self.p99_ratio is not None and self.p99_ratio <= TARGET_P99_RATIO

    @property
    def readyz_met(self) -> bool:
        return self.failed_polls <= TARGET_READYZ_FAILURES


def judge_stall(runs: Sequence[ArmRun]) -> StallVerdict:
    quiet, attacked = percentiles(pooled(runs, QUIET)), percentiles(pooled(runs, ATTACKED))
    by_round = {q: per_round_ratios(runs, ATTACKED, QUIET, q) for q in (0.5, 0.99)}
    under_attack = summarize_arm(runs, ATTACKED)
    return StallVerdict(ratio(attacked.p50, quiet.p50), ratio(attacked.p99, quiet.p99),
                        statistics.median(by_round[0.5]) if by_round[0.5] else None,
                        statistics.median(by_round[0.99]) if by_round[0.99] else None,
                        under_attack.failed_polls, under_attack.cuts)


@dataclass(frozen=True)
class BoundaryCost:
    added_p50_ms: float
    added_p99_ms: float
    p50_ratio: float | None
    p99_ratio: float | None
    round_added_p50_ms: float | None  # the median of the rounds' differences
    round_added_p99_ms: float | None
    added_step_ms: float | None  # the API server's ValidatingAdmissionPolicy step, mean per create, with less without


def judge_boundary(runs: Sequence[ArmRun], kind: str = BOUNDED) -> BoundaryCost:
    """The binding's cost to creates in namespaces of `kind`: with it less without it."""
    with_arm, without_arm = boundary_arm(kind, WITH), boundary_arm(kind, WITHOUT)
    with_, without = percentiles(pooled(runs, with_arm)), percentiles(pooled(runs, without_arm))
    rounds: dict[float, list[float]] = {0.5: [], 0.99: []}
    for r in sorted({run.round for run in runs}):
        a = [ms for run in runs if run.round == r and run.arm == with_arm for ms in run.latencies_ms]
        b = [ms for run in runs if run.round == r and run.arm == without_arm for ms in run.latencies_ms]
        if a and b:
            for q in rounds:
                rounds[q].append(rounded_rank_percentile(a, q) - rounded_rank_percentile(b, q))
    step_with = summarize_arm(runs, with_arm).policy_step.mean_ms
    step_without = summarize_arm(runs, without_arm).policy_step.mean_ms
    return BoundaryCost(
        with_.p50 - without.p50, with_.p99 - without.p99, ratio(with_.p50, without.p50), ratio(with_.p99, without.p99),
        statistics.median(rounds[0.5]) if rounds[0.5] else None,
        statistics.median(rounds[0.99]) if rounds[0.99] else None,
        step_with - step_without if step_with is not None and step_without is not None else None)


# --- the report ---------------------------------------------------------------------------------------------------

def command_line(argv: Sequence[str], *, measuring_only: bool = False) -> str:
    """`python -m bench stall ...` as a shell takes it (bench.common.sections.command_line)."""
    return sections.command_line("stall", argv, measuring_only=measuring_only)


@dataclass(frozen=True)
class Setting:
    """What the report says the run was."""

    command: str
    measuring: str  # for the heading
    stamp: str  # `Commit abc1234, 2026-12-05 15:00 UTC`
    kube_version: str
    label: str
    note: str
    workers: str  # whether gpuclass serve's workers were the same processes throughout
    rounds: int
    creates: int  # per arm and round
    plan: AttackPlan
    attack_nice: int
    warmup_seconds: float
    settle_seconds: float
    wall_seconds: float
    cores: int


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else (f"{value:+.2f}" if signed else f"{value:.2f}")


def _counts(counts: Mapping[str, float]) -> str:
    return " / ".join(f"{counts.get(k, 0.0):,.0f}" for k in CUT_OUTCOMES)


def _answers(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def _pass(met: bool) -> str:
    return "PASS" if met else "FAIL"


def _attack_words(plan: AttackPlan) -> str:
    words = []
    if plan.slow_connections:
        words.append(
            f"{plan.slow_connections} TLS connections that each send headers announcing a body of "
            f"{plan.slow_declared_bytes:,} bytes, then one byte every {plan.slow_interval_seconds:g} s (the first ones "
            f"opened evenly over {plan.slow_ramp_seconds:g} s, so that cuts and new connections come all the time, "
            "not in waves), and open again when cut")
    if plan.oversized_senders:
        words.append(f"{plan.oversized_senders} senders of POST /mutate with bodies of "
                     f"{plan.oversized_body_bytes / MIB:g} MiB at full speed, again and again")
    return "; and ".join(words) or "nothing"


def _attack_seen(plan: AttackPlan, attack: AttackTally) -> list[str]:
    seen = []
    if plan.slow_connections:
        held = attack.slow_held_seconds / attack.slow_counted_seconds if attack.slow_counted_seconds else 0.0
        seen.append(
            f"slow connections held open {held:.1f} on average once the first {plan.slow_connections} had opened, "
            f"opened {attack.slow_opened:,} ({attack.slow_opened / attack.seconds:.1f}/s; {attack.slow_open_failed} "
            f"failed to open), ended by {_answers(attack.slow_ended)}")
    if plan.oversized_senders:
        seen.append(
            f"oversized requests {attack.oversized_begun:,} ({attack.oversized_begun / attack.seconds:.1f}/s; "
            f"{attack.oversized_open_failed} failed to open), {attack.oversized_bytes / MIB:,.0f} MiB sent "
            f"({attack.oversized_bytes / MIB / attack.seconds:,.0f} MiB/s), ended by {_answers(attack.oversized_ended)}")
    return seen


def render_stall(runs: Sequence[ArmRun], s: Setting) -> list[str]:
    plan = s.plan
    lines = [
        "### Honest creates under slow and oversized requests", "",
        f"{s.rounds} rounds of {s.creates} creates per arm, the arms taking turns (the first alternating). Quiet: "
        "nothing else on the webhook's port. Attacked: from a process of its own "
        f"(nice {s.attack_nice}, so that on {s.cores} shared cores the attacker's own CPU does not stand in for the "
        f"webhook's), {_attack_words(plan)}; the attack starts "
        f"{s.warmup_seconds:g} s before the arm's first create (past the server's first cuts), and stops after "
        f"its last, {s.settle_seconds:g} s before the next arm. /readyz polled every 0.2 s on a new TLS connection "
        f"through both arms (as the kubelet probes: a failure is any answer but 200, or none within "
        f"{READYZ_TIMEOUT_SECONDS:g} s). Cut: the webhook's own `{ADMISSIONS}` by outcome (too-slow / too-large / "
        "busy) from the arm's start (the attack's) to its end. CPU: cores busy while the arm's creates ran (CPU "
        f"seconds per second of wall). API server's call: the mean of `{WEBHOOK_SECONDS}` for gpu-class over the "
        f"arm's creates; policy step: of `{ADMISSION_STEP_SECONDS}` for its ValidatingAdmissionPolicy step (every "
        "policy bound; here the boundary's binding as installed, in a namespace it does not bound).",
        "",
        "| arm | creates | p50 ms | p99 ms | max ms | wrong | /readyz polls | failed | /readyz p99 ms "
        "| cut: too-slow / too-large / busy | webhook CPU | API server CPU | API server's call, mean ms "
        "| policy step, mean ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in STALL_ARMS:
        a = summarize_arm(runs, arm)
        lines.append(f"| {arm} | {a.latency.n:,} | {a.latency.p50:.2f} | {a.latency.p99:.2f} | {a.latency.max:.2f} "
                     f"| {a.wrong} | {a.polls:,} | {a.failed_polls} | {a.poll_p99_ms:.1f} | {_counts(a.cuts)} "
                     f"| {a.webhook_cores:.2f} | {a.apiserver_cores:.2f} | {_ms(a.webhook_call.mean_ms)} "
                     f"| {_ms(a.policy_step.mean_ms)} |")
    v = judge_stall(runs)
    attack = summarize_arm(runs, ATTACKED).attack
    lines += [
        "",
        f"Attacked over quiet: p50 {_times(v.p50_ratio)}, p99 {_times(v.p99_ratio)} (target p99 <= "
        f"{TARGET_P99_RATIO}x: {_pass(v.p99_met)}); the median of the rounds' own ratios: p50 "
        f"{_times(v.round_p50_ratio)}, p99 {_times(v.round_p99_ratio)}. /readyz while attacked: {v.failed_polls} "
        f"failed (target {TARGET_READYZ_FAILURES}: {_pass(v.readyz_met)}). Cut by the server while attacked: "
        + ", ".join(f"{k} {v.cuts.get(k, 0.0):,.0f}" for k in CUT_OUTCOMES) + ".",
    ]
    if attack is not None and attack.seconds > 0:
        lines += [
            "",
            f"The attack as its clients saw it, over {attack.seconds:.0f} s: " + "; ".join(_attack_seen(plan, attack))
            + f"; the attacker's CPU {attack.cpu_seconds:.0f} s.",
        ]
    lines += ["", "| round | quiet p50 / p99 ms | attacked p50 / p99 ms | p99 ratio | cut: too-slow / too-large / busy "
              "| slow opened | oversized sent | /readyz failed |", "|---|---|---|---|---|---|---|---|"]
    for r, quiet, hit in _pairs_by_round(runs, QUIET, ATTACKED):
        q, h = percentiles(quiet.latencies_ms), percentiles(hit.latencies_ms)
        lines.append(f"| {r + 1} | {q.p50:.2f} / {q.p99:.2f} | {h.p50:.2f} / {h.p99:.2f} | {_times(ratio(h.p99, q.p99))} "
                     f"| {_counts(hit.cuts)} | {hit.attack.slow_opened if hit.attack else 0:,} "
                     f"| {hit.attack.oversized_begun if hit.attack else 0:,} | {failed_polls(hit.polls)} |")
    lines += _wrong_lines(runs)
    return lines


def _added(c: BoundaryCost) -> str:
    return (f"p50 {c.added_p50_ms:+.2f} ms ({_times(c.p50_ratio)}), p99 {c.added_p99_ms:+.2f} ms "
            f"({_times(c.p99_ratio)}); the median of the rounds' own differences: p50 "
            f"{_ms(c.round_added_p50_ms, True)} ms, p99 {_ms(c.round_added_p99_ms, True)} ms; the API server's policy "
            f"step, mean per create: {_ms(c.added_step_ms, True)} ms")


def render_boundary(runs: Sequence[ArmRun], s: Setting, namespace_classes: str) -> list[str]:
    lines = [
        "", "### What the tenant boundary adds to a create", "",
        f"{s.rounds} rounds; in each, the ValidatingAdmissionPolicyBinding `{BOUNDARY_BINDING}` as installed, and "
        "deleted (the two states taking turns, the first alternating: deleted, then a probe Pod the boundary "
        "refuses, a GPU Pod naming its node, created until the API server no longer refuses it, then "
        f"{s.settle_seconds:g} s more; put back from the rendered install, and probed, the same way); in each state "
        f"{s.creates} creates of class-economy Pods in a namespace annotated `gpu-class.io/allowed-classes: "
        f"{namespace_classes}` (bounded) and {s.creates} in an opted-in namespace without it (not bounded), the "
        "order alternating. The backstop's other binding, gpu-class.io-placement, stays. Policy step: the mean of "
        f"the API server's `{ADMISSION_STEP_SECONDS}` for its ValidatingAdmissionPolicy step on creates (every "
        "policy bound) over the arm.",
        "",
        "| arm | creates | p50 ms | p99 ms | max ms | wrong | policy step, mean ms | API server's call, mean ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    kinds = [kind for kind in (BOUNDED, OPEN) if any(r.arm.startswith(f"{kind},") for r in runs)]
    for arm in (boundary_arm(kind, binding) for kind in kinds for binding in BOUNDARY_ARMS):
        a = summarize_arm(runs, arm)
        lines.append(f"| {arm} | {a.latency.n:,} | {a.latency.p50:.2f} | {a.latency.p99:.2f} | {a.latency.max:.2f} "
                     f"| {a.wrong} | {_ms(a.policy_step.mean_ms)} | {_ms(a.webhook_call.mean_ms)} |")
    lines.append("")
    lines.append(" ".join(f"Added by the binding, {kind}: {_added(judge_boundary(runs, kind))}." for kind in kinds))
    lines += [
        "",
        "| round | namespace | with p50 / p99 ms | without p50 / p99 ms | added p50 ms | added p99 ms | policy step "
        "with / without, mean ms |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = sorted((r, i, kind, w, wo) for i, kind in enumerate(kinds)
                  for r, w, wo in _pairs_by_round(runs, boundary_arm(kind, WITH), boundary_arm(kind, WITHOUT)))
    for r, _, kind, w, wo in rows:
        pw, pwo = percentiles(w.latencies_ms), percentiles(wo.latencies_ms)
        lines.append(f"| {r + 1} | {kind} | {pw.p50:.2f} / {pw.p99:.2f} | {pwo.p50:.2f} / {pwo.p99:.2f} "
                     f"| {pw.p50 - pwo.p50:+.2f} | {pw.p99 - pwo.p99:+.2f} "
                     f"| {_ms(w.policy_step.mean_ms)} / {_ms(wo.policy_step.mean_ms)} |")
    lines += _wrong_lines(runs)
    return lines


def _pairs_by_round(runs: Sequence[ArmRun], first: str, second: str) -> list[tuple[int, ArmRun, ArmRun]]:
    """(round, run of `first`, run of `second`) for each round that has both, in round order."""
    by_arm = {(run.round, run.arm): run for run in runs}
    return [(r, by_arm[(r, first)], by_arm[(r, second)]) for r in sorted({run.round for run in runs})
            if (r, first) in by_arm and (r, second) in by_arm]


def _wrong_lines(runs: Sequence[ArmRun]) -> list[str]:
    wrong = [r for r in runs if r.wrong]
    if not wrong:
        return []
    return ["", "Wrong answers: " + "; ".join(f"round {r.round + 1}, {r.arm}: {r.wrong} (first: {r.first_wrong})"
                                               for r in wrong) + "."]


def render(stall: Sequence[ArmRun], boundary: Sequence[ArmRun], s: Setting, namespace_classes: str) -> str:
    label = f", {s.label}" if s.label else ""
    title = {(True, True): "Honest creates under slow and oversized requests, and the boundary's cost",
             (True, False): "Honest creates under slow and oversized requests",
             (False, True): "What the tenant boundary adds to a create"}.get((bool(stall), bool(boundary)), "Stall")
    lines = [f"## {title}{label} (`{s.measuring}`)", ""]
    if s.note:
        lines += [s.note, ""]
    lines += [
        f"{s.stamp}. Command: `{s.command}`; local control plane (tests/e2e/local-cluster), Kubernetes "
        f"{s.kube_version}, `gpuclass serve` with 2 workers of 1 thread; {s.cores} cores; {s.wall_seconds:.0f} s wall. "
        "Every create is a dry run (`dryRun=All`: admission runs whole, the webhook and every policy included, "
        "nothing is stored) of a class Pod with one `nvidia.com/gpu`, one after another over one kept-alive "
        "connection, timed by the client; wrong: not answered 201 with the webhook's gpu-class.io/types. Nodes: "
        f"one of T4 (class economy) and one of H100 (class high). {s.workers}.",
        "",
    ]
    if stall:
        lines += render_stall(stall, s)
    if boundary:
        lines += render_boundary(boundary, s, namespace_classes)
    return "\n".join(lines) + "\n"
