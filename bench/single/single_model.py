"""What `python -m bench single` measures and how it judges it. Pure: no I/O.

The layout is the one issue 47 measured "as a new user would": a class whose best type is a handful of
nodes among thousands of nodes of its next type. At 5,000 nodes, 3 H100 nodes among 3,333 A100 nodes (both
of class `high`, 8 GPUs each, every GPU free) and 1,664 CPU-only nodes; the same proportions at any other
size, at least 3 H100 nodes (so that the Pods of an arm always fit on H100). make_layout(n) is the first n
nodes of one sequence, so that a fleet grows from one size to the next by adding nodes.

Each arm is one path's stream of single Pods, created one after another; its figures are the Pods'
create-to-bind times, the share bound on H100, and the differences of the path's kube-scheduler counters
across the arm (attempts, and the time its PreFilter, Filter and Score extension points took).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import AbstractSet as Set, Literal, Mapping, Sequence

from bench.common import sections
from bench.common.percentiles import percentile
from bench.placement.placement_model import NodeSpec

Path_ = Literal["default", "profiles", "extender"]
PATHS: tuple[Path_, ...] = ("default", "profiles", "extender")
# kube-scheduler's own times per cycle, as bench/placement/placement_cluster.py's read_scheduler_times keys them
POINTS = ("PreFilter", "Filter", "Score", "attempt")
PREFILTER_OUTCOMES = "gpu_class_scheduler_prefilter_cycles_total"  # NodeLabelIndex's cycles by outcome


@dataclass(frozen=True)
class NodeKind:
    name: str  # the catalog's type name; "CPU-only" for a node without GPUs
    short: str  # in node names
    product: str  # nvidia.com/gpu.product; "" for a CPU-only node
    gpus: int
    cores: int
    memory_gib: int


BEST = NodeKind("H100", "h100", "NVIDIA-H100-80GB-HBM3", 8, 96, 1024)
NEXT = NodeKind("A100-80GB", "a100", "NVIDIA-A100-SXM4-80GB", 8, 64, 512)
CPU = NodeKind("CPU-only", "cpu", "", 0, 32, 128)
# The layout: at REFERENCE_NODES nodes, REFERENCE_BEST H100 nodes, and of the others
# REFERENCE_NEXT A100 nodes; the rest CPU-only.
REFERENCE_NODES, REFERENCE_BEST, REFERENCE_NEXT = 5000, 3, 3333
MIN_BEST = 3


def best_count(size: int) -> int:
    """H100 nodes among the first `size`: the issue's share, rounded up, and at least MIN_BEST."""
    return min(size, max(MIN_BEST, math.ceil(size * REFERENCE_BEST / REFERENCE_NODES)))


def next_count(others: int) -> int:
    """A100 nodes among the first `others` nodes that are not H100."""
    return others * REFERENCE_NEXT // (REFERENCE_NODES - REFERENCE_BEST)


def kind_at(j: int) -> NodeKind:
    """The kind of the j-th node (from 0): where the counts step up, so any prefix holds its share."""
    if best_count(j + 1) > best_count(j):
        return BEST
    others = j - best_count(j)
    return NEXT if next_count(others + 1) > next_count(others) else CPU


def make_layout(size: int) -> list[NodeSpec]:
    """The first `size` nodes: GPU nodes tainted for GPUs (the webhook gives class Pods the toleration),
    no other work on any node."""
    nodes = []
    for j in range(size):
        k = kind_at(j)
        nodes.append(NodeSpec(f"sg-{j}-{k.short}", k.product, k.gpus, k.cores * 1000, k.memory_gib * 1024,
                              tainted=k.gpus > 0))
    return nodes


def layout_counts(nodes: Sequence[NodeSpec]) -> dict[str, int]:
    """Nodes by kind name, in the order BEST, NEXT, CPU."""
    by_product = {k.product: k.name for k in (BEST, NEXT, CPU)}
    counts = {k.name: 0 for k in (BEST, NEXT, CPU)}
    for n in nodes:
        counts[by_product[n.product]] += 1
    return counts


def arm_order(paths: Sequence[Path_], rounds: int) -> list[tuple[int, Path_]]:
    """(round, path) in the order the arms run: every path once a round, each round starting one path
    further on, so that no path always goes first after a new size or last before the next round."""
    return [(r, paths[(r + k) % len(paths)]) for r in range(rounds) for k in range(len(paths))]


# --- one arm ---------------------------------------------------------------------------

def read_outcomes(text: str) -> dict[str, float]:
    """NodeLabelIndex's PreFilter cycles by outcome, from kube-scheduler's /metrics text (none on a
    scheduler without the plugin)."""
    return {m.group(1): float(m.group(2))
            for m in re.finditer(rf'^{PREFILTER_OUTCOMES}\{{outcome="(\w+)"\}} (\S+)$', text, re.M)}


@dataclass(frozen=True)
class Spent:
    """What a path's kube-scheduler did across an arm: attempts, seconds per extension point (POINTS),
    and NodeLabelIndex's cycles by outcome."""
    attempts: int
    seconds: Mapping[str, float]
    outcomes: Mapping[str, int]


def spent_between(before: Mapping[str, float], after: Mapping[str, float],
                  outcomes_before: Mapping[str, float], outcomes_after: Mapping[str, float]) -> Spent:
    """From two readings of read_scheduler_times (`attempt count`, `PreFilter sum`, ...) and of
    read_outcomes."""
    def less(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)
    outcomes = {k: round(v - outcomes_before.get(k, 0.0)) for k, v in sorted(outcomes_after.items())}
    return Spent(round(less("attempt count")), {p: less(f"{p} sum") for p in POINTS},
                 {k: v for k, v in outcomes.items() if v})


def add_spent(spents: Sequence[Spent]) -> Spent:
    outcomes: dict[str, int] = {}
    for s in spents:
        for k, v in s.outcomes.items():
            outcomes[k] = outcomes.get(k, 0) + v
    return Spent(sum(s.attempts for s in spents), {p: sum(s.seconds.get(p, 0.0) for s in spents) for p in POINTS},
                 dict(sorted(outcomes.items())))


@dataclass(frozen=True)
class PodTimes:
    """One Pod of an arm, on the bench's monotonic clock."""
    sent: float  # its create call was sent
    added: float | None  # one watch saw it ADDED
    bound: float | None  # the same watch saw it bound (None: found Pending, or refused)
    node: str | None
    refused: bool = False  # by the backstop at admission: the webhook did not answer in time


@dataclass(frozen=True)
class Arm:
    """One path's stream of single Pods at one size."""
    size: int
    path: Path_
    round: int
    seconds_to_bind: tuple[float, ...]  # each bound Pod's, from its create call to its bound event
    watch_seconds: tuple[float, ...]  # the same Pods', from the watch's ADDED to its bound event
    on_best: int  # Pods bound on BEST
    pending: int  # Pods found Pending
    refused: int
    spent: Spent


def make_arm(size: int, path: Path_, round_: int, pods: Sequence[PodTimes], best_nodes: Set[str],
             spent: Spent) -> Arm:
    bound = [p for p in pods if p.bound is not None]
    return Arm(size, path, round_, tuple(p.bound - p.sent for p in bound if p.bound is not None),
               tuple(p.bound - p.added for p in bound if p.bound is not None and p.added is not None),
               sum(p.node in best_nodes for p in bound), sum(p.bound is None and not p.refused for p in pods),
               sum(p.refused for p in pods), spent)


# --- the summary and the verdicts --------------------------------------------------------

@dataclass(frozen=True)
class Summary:
    """One path at one size, all its rounds together."""
    size: int
    path: Path_
    bound: int
    on_best: int
    pending: int
    refused: int
    p50_ms: float
    p90_ms: float
    round_p50_ms: tuple[float, ...]  # each round's p50, in round order
    watch_p50_ms: float  # from the watch's ADDED instead of the create call
    ms_per_cycle: Mapping[str, float]  # per POINTS: the extension point's time over the attempts
    attempts: int
    outcomes: Mapping[str, int]

    @property
    def best_share(self) -> float:
        return self.on_best / self.bound if self.bound else 0.0


def _ms(seconds: Sequence[float], fraction: float) -> float:
    return 1000 * percentile(sorted(seconds), fraction)


def summarize(arms: Sequence[Arm]) -> list[Summary]:
    """Per size (ascending) and path (in PATHS order): the arms of every round together."""
    out = []
    for size in sorted({a.size for a in arms}):
        for path in (p for p in PATHS if any(a.size == size and a.path == p for a in arms)):
            mine = sorted((a for a in arms if a.size == size and a.path == path), key=lambda a: a.round)
            seconds = [s for a in mine for s in a.seconds_to_bind]
            spent = add_spent([a.spent for a in mine])
            per_cycle = {p: 1000 * spent.seconds[p] / spent.attempts if spent.attempts else 0.0 for p in POINTS}
            out.append(Summary(size, path, len(seconds), sum(a.on_best for a in mine), sum(a.pending for a in mine),
                               sum(a.refused for a in mine), _ms(seconds, 0.5), _ms(seconds, 0.9),
                               tuple(_ms(a.seconds_to_bind, 0.5) for a in mine),
                               _ms([s for a in mine for s in a.watch_seconds], 0.5), per_cycle, spent.attempts,
                               spent.outcomes))
    return out


@dataclass(frozen=True)
class Verdict:
    claim: str
    holds: bool | None  # None: not measured (a path or a size missing)
    detail: str


def p50_verdicts(summaries: Sequence[Summary], path: Path_ = "profiles", against: Path_ = "default") -> list[Verdict]:
    """Per size: `path`'s create-to-bind p50 at or below `against`'s."""
    out = []
    for size in sorted({s.size for s in summaries}):
        of = {s.path: s for s in summaries if s.size == size}
        claim = f"{size:,} nodes: {path} p50 at or below {against}'s"
        if path not in of or against not in of or not of[path].bound or not of[against].bound:
            out.append(Verdict(claim, None, "not measured"))
            continue
        mine, theirs = of[path].p50_ms, of[against].p50_ms
        out.append(Verdict(claim, mine <= theirs, f"{mine:.1f} ms against {theirs:.1f} ms"))
    return out


def prefilter_flat(summaries: Sequence[Summary], path: Path_ = "profiles", factor: float = 1.5) -> Verdict:
    """`path`'s PreFilter mean per cycle, largest over smallest across the sizes, within `factor`."""
    means = {s.size: s.ms_per_cycle["PreFilter"] for s in summaries if s.path == path and s.attempts}
    claim = f"{path} PreFilter mean per cycle within {factor:g}x across the sizes"
    if len(means) < 2 or min(means.values()) <= 0:
        return Verdict(claim, None, "fewer than two sizes measured")
    ratio = max(means.values()) / min(means.values())
    detail = ", ".join(f"{m:.2f} ms at {size:,}" for size, m in sorted(means.items())) + f": {ratio:.2f}x"
    return Verdict(claim, ratio <= factor, detail)


# --- the report -------------------------------------------------------------------------

PATH_TITLE: Mapping[Path_, str] = {"default": "default scheduler", "profiles": "gpu-class-scheduler",
                                   "extender": "gpu-class-extender"}


# Options that say where and under what heading the report goes, not what is measured.
def command_line(argv: Sequence[str], *, measuring_only: bool = False) -> str:
    """`python -m bench single ...` as a shell takes it (bench.common.sections.command_line)."""
    return sections.command_line("single", argv, measuring_only=measuring_only)


@dataclass(frozen=True)
class Setting:
    """What the report says the run was."""
    command: str  # as run (command_line)
    measuring: str  # what it measured, for the heading (command_line, measuring_only)
    stamp: str  # `Commit abc1234, 2026-12-05 15:00 UTC`
    kube_version: str
    label: str  # said in the heading (`before ...`); "" for none
    note: str  # a paragraph under the heading; "" for none
    pods: int  # per arm
    rounds: int
    size_seconds: Mapping[int, tuple[float, float]]  # per size: (wall, of which making the fleet)
    wall_seconds: float


def _yes(v: Verdict) -> str:
    return {True: "yes", False: "no", None: "not measured"}[v.holds]


def _by(outcomes: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in outcomes.items()) or "-"


def render(arms: Sequence[Arm], s: Setting) -> str:
    summaries = summarize(arms)
    sizes = sorted({a.size for a in arms})
    label = f", {s.label}" if s.label else ""
    lines = [f"## Single Pods one after another, the class most of the nodes{label} (`{s.measuring}`)", ""]
    if s.note:
        lines += [s.note, ""]
    layouts = "; ".join(f"{size:,} nodes: " + ", ".join(f"{n:,} {k}" for k, n in layout_counts(make_layout(size)).items())
                        + f" ({s.size_seconds[size][0]:.0f} s, fleet {s.size_seconds[size][1]:.0f} s)"
                        for size in sizes if size in s.size_seconds)
    lines += [
        f"{s.stamp}. Command: `{s.command}`; Kubernetes {s.kube_version}; {s.wall_seconds:.0f} s wall. "
        f"Nodes (bench/single/single_model.py, grown from one size to the next): {layouts}; {BEST.name} and "
        f"{NEXT.name} are both of class `high`, 8 GPUs a node, all free. Arms: {s.pods} single class-`high` Pods "
        "(one GPU) on one path, each created once the one before was bound, the paths taking turns over "
        f"{s.rounds} rounds from the same cluster state (each arm's Pods deleted before the next). Create-to-bind: "
        "from the client's create call (admission included, as a user sees it) to the Pod's bound event in one watch; "
        "ADDED-to-bind: from the watch's ADDED instead (bench/placement's measure; short whenever the bench's "
        "watch reader, on these shared cores, reads ADDED late: a smoke run had Pods at 1 ms against kube-scheduler's "
        "own attempt of 5 ms). Per cycle: the path's kube-scheduler's own time in "
        "each extension point (`scheduler_framework_extension_point_duration_seconds`) and per attempt "
        "(`scheduler_scheduling_attempt_duration_seconds`) over the arms, divided by its attempts; outcomes: "
        f"NodeLabelIndex's `{PREFILTER_OUTCOMES}`.",
        "",
        "| nodes | path | Pods bound | on H100 | create-to-bind p50 ms | p90 ms | p50 per round ms "
        "| ADDED-to-bind p50 ms | attempts "
        "| PreFilter ms per cycle | Filter | Score | attempt | PreFilter outcomes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in summaries:
        c = m.ms_per_cycle
        missing = (f", {m.pending} Pending" if m.pending else "") + (f", {m.refused} refused" if m.refused else "")
        lines.append(f"| {m.size:,} | {PATH_TITLE[m.path]} | {m.bound}{missing} | {m.on_best} ({100 * m.best_share:.0f}%) "
                     f"| {m.p50_ms:.1f} | {m.p90_ms:.1f} | {' / '.join(f'{x:.1f}' for x in m.round_p50_ms)} "
                     f"| {m.watch_p50_ms:.1f} | {m.attempts} | {c['PreFilter']:.2f} | {c['Filter']:.2f} | {c['Score']:.2f} "
                     f"| {c['attempt']:.2f} | {_by(m.outcomes)} |")
    verdicts = [*p50_verdicts(summaries), prefilter_flat(summaries)]
    lines += ["", "Issue 47's bar: " + "; ".join(f"{v.claim}: {_yes(v)} ({v.detail})" for v in verdicts) + "."]
    return "\n".join(lines) + "\n"
