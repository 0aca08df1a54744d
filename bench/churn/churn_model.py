"""What `python -m bench churn` changes, measures and judges, and how it reports it. Pure: no I/O.

The churn (plan_burst): each burst is a shuffled mix of node deletes, adds and relabels (MIX), on the
placement benchmark's fleet as it stands after the bursts before. Relabels change the node's
`nvidia.com/gpu.product` (its GPUs stay): `move` takes a node of the class to another type of the class,
`out` takes it to a type outside the class, `in` brings a GPU node of another class into it. The best
type stays a minority but is churned in every burst: its first delete and its first move take a
best-type node (while there is one), and an add, move or in lands on the best type one time in
BEST_SHARE_DENOMINATOR, so best-type nodes come and go under the streams.

The judgement (judge_narrowing, placement_percent, holds): gpu-class-scheduler's own counters,
`gpu_class_scheduler_prefilter_cycles_total` by outcome and `gpu_class_scheduler_index_repairs_total`,
differenced across each window; and bench/placement/placement_model.py's judge of the Pods of the
stream that follows each burst, once the scheduler and the webhook have seen the whole burst.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from bench.common.scrape import read_counter, read_scheduler_times, read_value
from bench.placement.placement_model import (
    BEST_NODES, CPU_NODE_CORES, GPU_NODES_IN_20, OTHER_GPU_NODES, NodeSpec, Verdicts, Workload,
)
from webhook.core.catalog.model import Catalog

ChangeKind = Literal["delete", "add", "move", "out", "in"]
CHANGE_KINDS: tuple[ChangeKind, ...] = ("delete", "add", "move", "out", "in")
CHANGE_TITLE: Mapping[ChangeKind, str] = {
    "delete": "deletes", "add": "adds", "move": "relabels to another type of the class",
    "out": "relabels out of the class", "in": "relabels into the class",
}
# Changes of each kind in ten: three deletes, three adds, four relabels.
MIX: Mapping[ChangeKind, int] = {"delete": 3, "add": 3, "move": 2, "out": 1, "in": 1}
BEST_SHARE_DENOMINATOR = 20  # one add, move or in in 20 lands on the best type
CLASS = "high"  # performance: the best type with room, the one order NodeLabelIndex narrows to its best level
BEST_PRODUCT = "NVIDIA-H100-80GB-HBM3"  # make_fleet's best-type nodes of class `high`
POD_GPUS = (1, 1, 2, 4)
POD_CPU_MILLIS = (500, 1000, 2000)

# gpu-class-scheduler's counters (deploy/scheduler/plugin/nodelabelindex/metrics.go)
CYCLES = "gpu_class_scheduler_prefilter_cycles_total"
REPAIRS = "gpu_class_scheduler_index_repairs_total"
Outcome = Literal["narrowed", "widened", "fell_back", "unnarrowed", "waiting"]
OUTCOMES: tuple[Outcome, ...] = ("narrowed", "widened", "fell_back", "unnarrowed", "waiting")


# --- the churn ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Products:
    """The GPU products the churn writes: the class's best type's, its other types' and other classes'
    (those of the fleet: bench/placement/placement_model.py's BEST_NODES and OTHER_GPU_NODES)."""
    best: str
    in_class: tuple[str, ...]  # the class's products other than the best
    out_of_class: tuple[str, ...]


# Each product's node shape, for an add: GPUs, CPU cores, memory GiB (the first of the fleet's nodes of it).
SHAPES: Mapping[str, tuple[int, int, int]] = {
    product: (gpus, cores, gib) for _, product, gpus, cores, gib in reversed((*BEST_NODES, *OTHER_GPU_NODES))
}


def fleet_products(catalog: Catalog, gpu_class: str = CLASS, best: str = BEST_PRODUCT) -> Products:
    """The fleet's GPU products, split by whether the catalog puts their type in `gpu_class`."""
    types = set(catalog.classes[gpu_class].types)
    ordered = sorted(p for p in SHAPES if p != best)
    return Products(best, tuple(p for p in ordered if catalog.type_of_product(p) in types),
                    tuple(p for p in ordered if catalog.type_of_product(p) not in types))


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    node: str
    product: str = ""  # the node's product after it (a relabel's new label, an add's; "" for a delete or CPU node)
    was: str = ""  # before it (a delete's or relabel's)
    added: NodeSpec | None = None  # an add's node


def burst_counts(size: int) -> dict[ChangeKind, int]:
    """How many changes of each kind a burst of `size` makes: MIX scaled, the rounding given to the kinds
    in MIX's order, so they add up to `size`."""
    whole = sum(MIX.values())
    counts = {k: size * n // whole for k, n in MIX.items()}
    for k in list(MIX)[: size - sum(counts.values())]:
        counts[k] += 1
    return counts


def plan_burst(nodes: Mapping[str, NodeSpec], size: int, tag: str, products: Products, seed: int = 47) -> list[Change]:
    """A burst of `size` changes to the fleet `nodes` (by name), in the order they are written.

    No node is changed twice in one burst. A kind whose nodes run out (no node of the class left to
    move) makes fewer changes: the plan says what it does, and the report counts what was planned.
    """
    rng = random.Random(f"{seed}-{tag}")
    counts = burst_counts(size)
    used: set[str] = set()
    in_class = {products.best, *products.in_class}

    def pick(pool: Sequence[str], first_best: bool) -> str | None:
        free = [n for n in pool if n not in used]
        best = [n for n in free if nodes[n].product == products.best]
        if not free:
            return None
        name = best[0] if first_best and best else rng.choice(free)
        used.add(name)
        return name

    def target(choices: Sequence[str], was: str) -> str:
        if rng.randrange(BEST_SHARE_DENOMINATOR) == 0 and was != products.best:
            return products.best
        return rng.choice([p for p in choices if p != was])

    names = sorted(nodes)
    of_class = [n for n in names if nodes[n].product in in_class]
    other_gpu = [n for n in names if nodes[n].product and nodes[n].product not in in_class]
    changes: list[Change] = []
    for i in range(counts["delete"]):
        if (name := pick(names, first_best=i == 0)) is not None:
            changes.append(Change("delete", name, was=nodes[name].product))
    for i in range(counts["move"]):
        if (name := pick(of_class, first_best=i == 0)) is not None:
            was = nodes[name].product
            # the first move takes a best-type node off the best type
            product = rng.choice(products.in_class) if was == products.best else target(products.in_class, was)
            changes.append(Change("move", name, product, was))
    for _ in range(counts["out"]):
        if (name := pick(of_class, first_best=False)) is not None:
            changes.append(Change("out", name, rng.choice(products.out_of_class), nodes[name].product))
    for _ in range(counts["in"]):
        if (name := pick(other_gpu, first_best=False)) is not None:
            changes.append(Change("in", name, target(products.in_class, nodes[name].product), nodes[name].product))
    for i in range(counts["add"]):
        changes.append(_add(f"ch-{tag}-{i}", rng, products))
    rng.shuffle(changes)
    return changes


def _add(name: str, rng: random.Random, products: Products) -> Change:
    """A new node: a GPU node GPU_NODES_IN_20 times in 20, as the fleet has them, tainted as most are."""
    if rng.randrange(20) >= GPU_NODES_IN_20:
        cores = rng.choice(CPU_NODE_CORES)
        return Change("add", f"{name}-cpu", added=NodeSpec(f"{name}-cpu", "", 0, cores * 1000, cores * 4 * 1024,
                                                           tainted=False))
    if rng.randrange(BEST_SHARE_DENOMINATOR) == 0:
        product = products.best
    else:
        product = rng.choice([*products.in_class, *products.out_of_class])
    gpus, cores, gib = SHAPES[product]
    node = NodeSpec(f"{name}-gpu", product, gpus, cores * 1000, gib * 1024, tainted=rng.randrange(3) != 2)
    return Change("add", node.name, product, added=node)


def apply_changes(nodes: Mapping[str, NodeSpec], changes: Sequence[Change]) -> dict[str, NodeSpec]:
    """The fleet after the changes."""
    after = dict(nodes)
    for c in changes:
        if c.kind == "delete":
            del after[c.node]
        elif c.kind == "add":
            assert c.added is not None
            after[c.node] = c.added
        else:
            after[c.node] = dataclasses.replace(after[c.node], product=c.product)
    return after


def count_changes(changes: Sequence[Change]) -> dict[ChangeKind, int]:
    return {k: sum(c.kind == k for c in changes) for k in CHANGE_KINDS}


def best_type_changes(changes: Sequence[Change], best: str) -> int:
    """Changes that took a node onto or off the best type (a delete of one, an add of one, a relabel to or from it)."""
    return sum((c.was == best) != (c.product == best) for c in changes)


def make_pods(tag: str, count: int, seed: int = 47) -> list[Workload]:
    """`count` single class Pods of 1 to 4 GPUs, named after `tag` (unique in the run)."""
    rng = random.Random(f"{seed}-pods-{tag}")
    return [Workload(f"{tag}-{i}", CLASS, rng.choice(POD_GPUS), rng.choice(POD_CPU_MILLIS)) for i in range(count)]


# --- the scheduler's counters -------------------------------------------------------------

@dataclass(frozen=True)
class Counters:
    """gpu-class-scheduler's counters at one moment: PreFilter cycles by outcome, repairs, and its PreFilter
    extension point's time (every PreFilter plugin of the cycle; summed over the profiles)."""
    cycles: Mapping[str, float]
    repairs: float
    prefilter_seconds: float
    prefilter_runs: float


def read_counters(text: str) -> Counters:
    """From the text of the scheduler's /metrics; ValueError when it has no NodeLabelIndex counters (a binary
    without them would read as a scheduler that never narrows)."""
    repairs = read_value(text, REPAIRS)
    cycles = read_counter(text, CYCLES, "outcome")
    if repairs is None or not cycles:
        raise ValueError(f"the scheduler's /metrics has no {CYCLES} or {REPAIRS}: not NodeLabelIndex's build")
    times = read_scheduler_times(text)
    return Counters(cycles, repairs, times.get("PreFilter sum", 0.0), times.get("PreFilter count", 0.0))


@dataclass(frozen=True)
class Spent:
    """What a window cost: PreFilter cycles by outcome, repairs, PreFilter's time."""
    cycles: Mapping[str, int]
    repairs: int
    prefilter_seconds: float = 0.0
    prefilter_runs: int = 0

    def of(self, outcome: Outcome) -> int:
        return self.cycles.get(outcome, 0)

    @property
    def prefilter_ms(self) -> float | None:
        """Mean PreFilter time per cycle, ms."""
        return 1000 * self.prefilter_seconds / self.prefilter_runs if self.prefilter_runs else None


def spent_between(before: Counters, after: Counters) -> Spent:
    cycles = {o: round(after.cycles.get(o, 0.0) - before.cycles.get(o, 0.0)) for o in OUTCOMES}
    return Spent({o: n for o, n in cycles.items() if n}, round(after.repairs - before.repairs),
                 after.prefilter_seconds - before.prefilter_seconds,
                 round(after.prefilter_runs - before.prefilter_runs))


def add_spent(spent: Sequence[Spent]) -> Spent:
    cycles: dict[str, int] = {}
    for s in spent:
        for o, n in s.cycles.items():
            cycles[o] = cycles.get(o, 0) + n
    return Spent(cycles, sum(s.repairs for s in spent), sum(s.prefilter_seconds for s in spent),
                 sum(s.prefilter_runs for s in spent))


# --- the judgement --------------------------------------------------------------------------

Narrowing = Literal["narrowing", "recovered", "fell back", "not narrowed"]
NARROWING_HOLDS: tuple[Narrowing, ...] = ("narrowing", "recovered")


def judge_narrowing(stream: Spent, last: Spent) -> Narrowing:
    """Whether PreFilter still narrows once the scheduler has seen a burst: `stream`, the cycles of the
    stream after it, `last`, those of the stream's last Pod alone (created after the others were bound).

    narrowing: every cycle of the stream kept to the class (narrowed or widened), no repair, and the
    last Pod's was narrowed. recovered: some cycles fell back (the index disagreed with the snapshot)
    or the index was repaired, but the last Pod's narrowed: a repair in the stream's first cycle
    narrows that very cycle, so only the repair tells of the drift. fell back:
    the last Pod's cycle went to every node of the cluster: as far as this phase shows, for good. not
    narrowed: the last Pod had no narrowed cycle at all (unnarrowed, or no cycle counted).
    """
    if last.of("fell_back"):
        return "fell back"
    if not last.of("narrowed"):
        return "not narrowed"
    if stream.of("fell_back") or stream.of("unnarrowed") or stream.repairs:
        return "recovered"
    return "narrowing"


def placement_percent(v: Verdicts) -> float | None:
    """Pods bound where the class promised at their bind, of those bound or wrongly left Pending; None with
    none (refused at admission are reported apart: the webhook's answer, not the scheduler's)."""
    judged = v.placed + v.wrongly_pending
    return 100.0 * v.right / judged if judged else None


@dataclass
class Phase:
    """A burst and the streams around it (`start`: the fleet before any burst; `end`: after a quiet pause)."""
    name: str
    changes: Mapping[ChangeKind, int] = field(default_factory=dict)
    best_changes: int = 0  # of them, onto or off the best type
    nodes: int = 0  # fleet nodes after it
    best_nodes: int = 0  # of them, of the best type
    write_seconds: float = 0.0  # the burst's writes, first to last answer
    during: Spent | None = None  # the burst's window: its writes and the Pods created meanwhile
    during_pods: int = 0
    during_bound: int = 0
    during_in_flight: int = 0  # of them, bound before the burst's last write was answered
    after: Spent = field(default_factory=lambda: Spent({}, 0))  # the stream after the burst, last Pod included
    last: Spent = field(default_factory=lambda: Spent({}, 0))  # the stream's last Pod alone
    verdicts: Verdicts = field(default_factory=Verdicts)  # the stream after the burst

    @property
    def narrowing(self) -> Narrowing:
        return judge_narrowing(self.after, self.last)

    @property
    def placement(self) -> float | None:
        return placement_percent(self.verdicts)


def holds(phases: Sequence[Phase]) -> list[str]:
    """Why the run does not meet "PreFilter still narrowing (no cycle fell back for good), and placement
    100%" after every burst: one line per phase that fails it; empty when it holds."""
    failures = []
    for p in phases:
        if p.narrowing not in NARROWING_HOLDS:
            failures.append(f"{p.name}: {p.narrowing} (the last Pod's cycles: {_by(p.last.cycles)})")
        if p.placement is None or p.placement < 100.0:
            wrong = "; ".join(p.verdicts.wrong[:5])
            failures.append(f"{p.name}: placement {_pct(p.placement)}" + (f" ({wrong})" if wrong else ""))
    return failures


# --- the report -------------------------------------------------------------------------

def _by(mapping: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(mapping.items())) or "none"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%" if value in (0.0, 100.0) else f"{value:.1f}%"


def _cycles(s: Spent | None) -> str:
    return "-" if s is None else f"{s.of('narrowed')} / {s.of('widened')} / {s.of('fell_back')}"


def _ms(s: Spent | None) -> str:
    ms = s.prefilter_ms if s else None
    return "-" if ms is None else f"{ms:.2f}"


@dataclass(frozen=True)
class Setting:
    """What the report says the run was."""
    command: str
    stamp: str  # `Commit abc1234, 2026-12-05 15:00 UTC`
    kube_version: str
    nodes: int  # the fleet before the bursts
    best_type: str
    best_nodes: int  # best-type nodes before the bursts
    bursts: Sequence[int]
    pods: int  # Pods in each stream after a burst
    during: int  # Pods created while each burst is written
    wall_seconds: float


def render(runs: Sequence[Sequence[Phase]], s: Setting) -> str:
    """The report of one or more runs, each from a fresh fleet."""
    changes = sum(sum(p.changes.values()) for p in runs[0]) if runs else 0
    failures = [f"run {i}, {f}" for i, phases in enumerate(runs, 1) for f in holds(phases)]
    lines = [
        "## Narrowing through node churn (`python -m bench churn`)",
        "",
        f"{s.stamp}. Command: `{s.command}`; Kubernetes {s.kube_version}, gpu-class-scheduler, {len(runs)} "
        f"run{'s' if len(runs) != 1 else ''}, each from a fresh fleet of {s.nodes:,} nodes "
        f"(bench/placement/placement_model.py's: the best type of class `{CLASS}`, {s.best_type}, "
        f"{s.best_nodes} nodes), {s.wall_seconds:.0f} s wall. In each run, {changes:,} node changes in bursts of "
        f"{', '.join(str(b) for b in s.bursts)}, each a shuffled mix of "
        + ", ".join(f"{MIX[k]} {CHANGE_TITLE[k]}" for k in CHANGE_KINDS) + " in ten, written 8 at a time "
        "(bench/churn/churn_model.py: the best type churned in every burst). While each burst is written, "
        f"{s.during} class-`{CLASS}` Pods are created one after another (in brackets: those bound before the last "
        "write was answered); once gpu-class-scheduler and the webhook have seen the whole burst (a barrier), "
        f"{s.pods} more, one after another, the last once the others are bound; `end`: the same after "
        "a quiet pause. The Pods stay bound, so the best type fills and its room moves as nodes come and go. "
        "Cycles: gpu-class-scheduler's `gpu_class_scheduler_prefilter_cycles_total` over the window, narrowed / "
        "widened / fell back (every node of the cluster); repairs: its `gpu_class_scheduler_index_repairs_total` "
        "over the burst and the stream after it. PreFilter: its extension point's mean ms per cycle in the stream "
        "after the burst (every PreFilter plugin). Placement: the Pods after the burst bound on the best type with "
        "room at their bind, as bench/placement/placement_model.py judges them (the Pods created during a burst are "
        "counted, not judged: the nodes change under them). Narrowing: narrowing (no cycle of the stream fell "
        "back, no repair), recovered (some did, or the index was repaired; the last Pod's narrowed), fell back (the "
        "last Pod's did: for good, as far as the phase shows).",
        "",
        "| run | phase | changes (delete / add / move / out / in) | best-type changes | nodes after (best type) "
        "| written s | during: cycles n / w / fb | Pods during: bound (while written) | after: cycles n / w / fb "
        "| repairs | PreFilter ms | placement | refused | narrowing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, phases in enumerate(runs, 1):
        for p in phases:
            kinds = " / ".join(str(p.changes.get(k, 0)) for k in CHANGE_KINDS) if p.changes else "-"
            repairs = (p.during.repairs if p.during else 0) + p.after.repairs
            during = f"{p.during_bound} of {p.during_pods} ({p.during_in_flight})" if p.during_pods else "-"
            lines.append(
                f"| {i} | {p.name} | {kinds} | {p.best_changes if p.changes else '-'} | {p.nodes:,} ({p.best_nodes}) "
                f"| {f'{p.write_seconds:.1f}' if p.changes else '-'} | {_cycles(p.during)} | {during} "
                f"| {_cycles(p.after)} | {repairs} | {_ms(p.after)} "
                f"| {p.verdicts.right}/{p.verdicts.placed + p.verdicts.wrongly_pending} ({_pct(p.placement)}) "
                f"| {p.verdicts.refused} | {p.narrowing} |")
    lines.append("")
    for i, phases in enumerate(runs, 1):
        total = add_spent([x for p in phases for x in (p.during, p.after) if x is not None])
        after = add_spent([p.after for p in phases])
        placed = sum(p.verdicts.placed + p.verdicts.wrongly_pending for p in phases)
        right = sum(p.verdicts.right for p in phases)
        lines.append(f"Run {i}: {sum(sum(p.changes.values()) for p in phases):,} node changes; cycles "
                     f"{_by(dict(total.cycles))}; {total.repairs} repairs; placement {right}/{placed}; PreFilter "
                     f"{_ms(after)} ms per cycle after the bursts.")
    lines += ["", ("Holds: after every burst PreFilter still narrows (no cycle fell back for good) and every judged "
                   "Pod was bound on the best type with room." if not failures else
                   "Does not hold: " + "; ".join(failures) + ".")]
    return "\n".join(lines) + "\n"
