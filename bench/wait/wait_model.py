"""What `python -m bench wait` measures and how it reports it. Pure: no I/O.

The arms take turns (arm_order); each one's figures are differences of gpu-class-scheduler's own
counters (`scheduler_schedule_attempts_total` by result, `scheduler_queue_incoming_pods_total` by
the event that moved a Pod to the active or backoff queue) across a phase, and the create-to-bind
times of the other Pods, as one watch saw them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from bench.common.percentiles import median, percentile
from bench.common.scrape import read_counter

Arm = Literal["none", "waiting"]
ARMS: tuple[Arm, ...] = ("none", "waiting")
EventKind = Literal["cpu-node-added", "lesser-node-added", "cpu-pod-deleted", "best-pod-deleted"]
# Unrelated first, the one that helps a waiting Pod last (it binds one of them).
EVENTS: tuple[EventKind, ...] = ("cpu-node-added", "lesser-node-added", "cpu-pod-deleted", "best-pod-deleted")
EVENT_TITLE: Mapping[EventKind, str] = {
    "cpu-node-added": "a CPU-only node added",
    "lesser-node-added": "a node of a lesser type of the class added (8 GPUs free)",
    "cpu-pod-deleted": "a CPU Pod deleted from a CPU-only node",
    "best-pod-deleted": "a one-GPU Pod deleted from a best-type node (one GPU freed there)",
}
ATTEMPTS = "scheduler_schedule_attempts_total"
QUEUED = "scheduler_queue_incoming_pods_total"
# Events that bring Pods into the queue without anything in the cluster changing for them: a new
# Pod, a Pod's own failed attempt, its backoff ending.
OWN_EVENTS = ("UnscheduledPodAdd", "PodAdd", "ScheduleAttemptFailure", "BackoffComplete")
# kube-scheduler's own flush: a Pod left unschedulable for 5 minutes (its podMaxInUnschedulablePodsDuration)
# goes back to the queue whatever happened.
FLUSH_EVENT = "UnschedulableTimeout"


def arm_order(rounds: int) -> list[tuple[Arm, int]]:
    """(arm, round) in the order they run: none then waiting, then waiting then none, and so on
    (ABBA), so a drift of the shared machine over the run falls on both arms alike."""
    order: list[tuple[Arm, int]] = []
    for r in range(rounds):
        arms = ARMS if r % 2 == 0 else tuple(reversed(ARMS))
        order += [(a, r) for a in arms]
    return order


@dataclass(frozen=True)
class Counters:
    """The scheduler's counters at one moment: attempts by result, Pods queued by event."""
    attempts: Mapping[str, float]
    queued: Mapping[str, float]


def read_counters(text: str) -> Counters:
    return Counters(read_counter(text, ATTEMPTS, "result"), read_counter(text, QUEUED, "event"))


def _less(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, int]:
    return {k: round(v - before.get(k, 0.0)) for k, v in sorted(after.items()) if round(v - before.get(k, 0.0))}


@dataclass(frozen=True)
class Cost:
    """What a phase cost the scheduler: attempts by result, Pods queued by the event that queued them."""
    seconds: float
    attempts: Mapping[str, int]
    queued: Mapping[str, int]

    @property
    def total_attempts(self) -> int:
        return sum(self.attempts.values())

    @property
    def queued_by_cluster(self) -> int:
        """Pods brought back by a change in the cluster (a node, another Pod, a timeout), not by their own
        creation, failure or backoff."""
        return sum(n for event, n in self.queued.items() if event not in OWN_EVENTS)


def cost_between(before: Counters, after: Counters, seconds: float) -> Cost:
    return Cost(seconds, _less(after.attempts, before.attempts), _less(after.queued, before.queued))


@dataclass(frozen=True)
class EventCost:
    kind: EventKind
    cost: Cost
    bound_waiting: int  # waiting Pods bound after it


@dataclass
class ArmRun:
    arm: Arm
    round: int
    waiting: int  # waiting Pods when the quiet interval began (0 in `none`)
    quiet: Cost | None = None
    others: Cost | None = None
    others_seconds: list[float] = field(default_factory=list)  # create-to-bind of each other Pod
    others_types: dict[str, int] = field(default_factory=dict)  # the GPU type each other Pod landed on
    events: list[EventCost] = field(default_factory=list)
    flush: Cost | None = None  # from the last event until kube-scheduler's flush has run its course
    still_waiting: int = 0  # waiting Pods not bound at the arm's end


def is_busy_loop(quiet: Cost, waiting: int) -> bool:
    """Whether the waiting Pods were retried on their own over a quiet interval: as many attempts as
    there are waiting Pods, or more (a retry per Pod per interval; kube-scheduler's backoff alone, at
    most 10 s, would give six per Pod a minute)."""
    return waiting > 0 and quiet.total_attempts >= waiting


def per_minute(cost: Cost) -> float:
    return 60.0 * cost.total_attempts / cost.seconds if cost.seconds > 0 else 0.0


# --- the report -------------------------------------------------------------------------

def _ms(seconds: Sequence[float], fraction: float) -> str:
    return f"{1000 * percentile(sorted(seconds), fraction):.0f}" if seconds else "-"


def _by(mapping: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(mapping.items())) or "none"


@dataclass(frozen=True)
class Setting:
    """What the report says the run was."""
    command: str
    stamp: str  # `Commit abc1234, 2026-12-05 15:00 UTC`
    kube_version: str
    nodes: int
    best_type: str
    best_gpus: int  # GPUs of the best type, all taken by Pods bound there before each arm
    waiting: int  # waiting Pods per `waiting` arm
    max_wait: str
    others: int  # other Pods per arm
    wall_seconds: float


def render(runs: Sequence[ArmRun], s: Setting) -> str:
    arms = [a for a in ARMS if any(r.arm == a for r in runs)]
    lines = [
        "## Waiting Pods on the scheduler (`python -m bench wait`)",
        "",
        f"{s.stamp}. Command: `{s.command}`; Kubernetes {s.kube_version}, {s.nodes:,} nodes "
        f"(bench/placement/placement_model.py's fleet), {s.wall_seconds:.0f} s wall. Before each arm, the "
        f"{s.best_gpus} GPUs of the best type of class `high`, {s.best_type}, are taken by one-GPU Pods bound there "
        f"directly. Arms, in turn: none (no waiting Pods), waiting ({s.waiting} class-`high` Pods with "
        f"`gpu-class.io/max-wait: {s.max_wait}`, each Unschedulable for {s.best_type} before the arm goes on). "
        "Attempts: gpu-class-scheduler's `scheduler_schedule_attempts_total` over the phase, by result; queued: "
        "its `scheduler_queue_incoming_pods_total`, Pods moved to the active or backoff queue by a change in the "
        "cluster (not by their own creation, failure or backoff). Other Pods: "
        f"{s.others} single class-`high` Pods without a wait, created one after another, each once the one before "
        "was bound; create-to-bind from the Pod's ADDED to its bound event in one watch.",
        "",
        "| arm | round | waiting Pods | quiet interval: attempts (per minute) | queued by a change | busy loop "
        "| other Pods: attempts | other Pods p50 ms | p90 ms | where they went | waiting Pods bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        quiet = (f"{r.quiet.total_attempts} in {r.quiet.seconds:.0f} s ({per_minute(r.quiet):.1f})"
                 + (f": {_by(r.quiet.attempts)}" if r.quiet.attempts else "") if r.quiet else "-")
        queued = _by({k: v for k, v in r.quiet.queued.items() if k not in OWN_EVENTS}) if r.quiet else "-"
        busy = ("yes" if is_busy_loop(r.quiet, r.waiting) else "no") if r.quiet and r.waiting else "-"
        others = _by(r.others.attempts) if r.others else "-"
        went = ", ".join(f"{n} on {t}" for t, n in sorted(r.others_types.items())) or "-"
        bound = f"{r.waiting - r.still_waiting} of {r.waiting}" if r.waiting else "-"
        lines.append(f"| {r.arm} | {r.round + 1} | {r.waiting} | {quiet} | {queued} | {busy} | {others} "
                     f"| {_ms(r.others_seconds, 0.5)} | {_ms(r.others_seconds, 0.9)} | {went} | {bound} |")
    lines += ["", "Other Pods, all rounds of an arm together: "
              + "; ".join(f"{a}: p50 {_ms(_all(runs, a), 0.5)} ms, p90 {_ms(_all(runs, a), 0.9)} ms "
                          f"({len(_all(runs, a))} Pods; medians of the rounds' p50 "
                          f"{_median_p50(runs, a)} ms)" for a in arms) + "."]
    kinds = [k for k in EVENTS if any(e.kind == k for r in runs for e in r.events)]
    if kinds:
        lines += ["", "What one event costs: attempts after it (until the counters stood still for a few seconds), by "
                  "result, and the Pods it queued; each cell is the arm's rounds, one after the other.", "",
                  "| event | " + " | ".join(f"{a}: attempts" for a in arms) + " | "
                  + " | ".join(f"{a}: queued by it" for a in arms) + " | waiting Pods bound |",
                  "|---|" + "---|" * (2 * len(arms) + 1)]
        for k in kinds:
            cells = []
            for a in arms:
                cells.append(" / ".join(f"{e.cost.total_attempts}" + (f" ({_by(e.cost.attempts)})"
                                                                      if e.cost.attempts else "")
                                        for e in _events(runs, a, k)) or "-")
            for a in arms:
                cells.append(" / ".join(_by({q: n for q, n in e.cost.queued.items() if q not in OWN_EVENTS})
                                        for e in _events(runs, a, k)) or "-")
            bound = " / ".join(str(e.bound_waiting) for e in _events(runs, "waiting", k)) or "-"
            lines.append(f"| {EVENT_TITLE[k]} | " + " | ".join(cells) + f" | {bound} |")
    flushes = [(r, r.flush) for r in runs if r.flush is not None]
    if flushes:
        lines += ["", "Nothing else happening, kube-scheduler's own flush of the Pods left unschedulable for 5 minutes "
                  "(its podMaxInUnschedulablePodsDuration, a timer per Pod of every scheduler, not gpu-class's): "
                  + "; ".join(f"{r.arm} round {r.round + 1}, {r.still_waiting} waiting Pods: "
                              f"{f.total_attempts} attempts ({_by(f.attempts)}), queued {_by(dict(f.queued))}, "
                              f"in the {f.seconds:.0f} s after the last event" for r, f in flushes) + "."]
    return "\n".join(lines) + "\n"


def _all(runs: Sequence[ArmRun], arm: Arm) -> list[float]:
    return [x for r in runs if r.arm == arm for x in r.others_seconds]


def _median_p50(runs: Sequence[ArmRun], arm: Arm) -> str:
    p50s = [percentile(sorted(r.others_seconds), 0.5) for r in runs if r.arm == arm and r.others_seconds]
    return f"{1000 * median(p50s):.0f}" if p50s else "-"


def _events(runs: Sequence[ArmRun], arm: Arm, kind: EventKind) -> list[EventCost]:
    return [e for r in runs if r.arm == arm for e in r.events if e.kind == kind]
