"""The placement benchmark's cluster and streams, and how a stream is judged. Pure: no I/O.

The fleet is a realistic mix at any size: the best type of each stream's class is a handful of
nodes (3 H100 for `performance`, 3 T4 for `cost`), the same at every size, their CPU half taken by
other work (so a scheduler that weighs emptier nodes is pulled away from them); of the rest, 45%
are GPU nodes of several types and sizes (1 to 8 GPUs, two thirds of them tainted, half of them
partly filled with CPU work) and 55% CPU-only nodes. make_fleet(n) is the first n
nodes of one sequence, so a larger fleet holds every node of a smaller one.

With a share of sick nodes (make_fleet's sick_percent), that share of each GPU type's nodes, rounded
up (so the best types' handful has one: of 3 nodes, 1), is unhealthy as gpu-class reads health
(docs/operators/live-inventory.md, "Health"): the first node of each product and every one after
that the share reaches, the same nodes at every size. Sick nodes take turns, in fleet order, between
the two signs: allocatable GPUs below capacity (the device plugin holding a failed GPU out) and
the catalog's unhealthy condition (SICK_CONDITION, a node health agent's).

How a stream is judged (judge): the binds are replayed in the order the watch saw them, from the
cluster's state before the stream; each Pod, at the moment it was bound, is right when its node is
one its class's strategy promised then, out of the nodes of its class's types that could hold it
(GPUs, CPU and memory free, as the scheduler counts them). What the Pod was allowed is computed
from the catalog (allowed_types), never read from the `gpu-class.io/types` the webhook wrote: that
is the answer under test, and a webhook that left the best type out of it would otherwise be judged
by its own mistake. For the same reason the judge reads the catalog with its own code (judge_catalog.py:
which type a node's labels name, each class's order) and scores shares with its own arithmetic, not the
webhook's or the extender's. The streams ask for nothing that narrows a class (no exclude-types, min-memory
or group), so the class's types are all a Pod may get:

  performance: a node of the first such type in the class's order (fastest first);
  cost: a node of the last such type in that order;
  balanced: a node with the largest share of its GPUs free once the Pod is placed;
  binpack: a node with the largest share of its GPUs in use once the Pod is placed.

Shares are whole percent, rounded down, as kube-scheduler's NodeResourcesFit scores them; ties are
all right answers. Only healthy nodes are promised: a Pod bound to a sick node is wrong (and counted
in `on_sick`), and the best type with room is the best one with a healthy node that can hold it.
A Pod found Pending while a healthy node of its allowed types could hold it is "wrongly
Pending" (judged after the binds seen by then). For `performance` and `cost` the profile also
packs within the best type; `packed` counts the right binds that went to a node of that type with
the largest share of its GPUs in use once placed.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Mapping, Sequence

from bench.placement.judge_catalog import JudgeCatalog

GPU = "nvidia.com/gpu"
# The built-in catalog's classes, one per strategy.
STRATEGY_CLASS = {"performance": "high", "cost": "economy", "balanced": "standard", "binpack": "inference"}
Kind = Literal["single", "deployment", "job"]
KINDS: tuple[Kind, ...] = ("single", "deployment", "job")
POD_MEMORY_MIB = 4096
# How a sick node shows it: allocatable GPUs below capacity, or this node condition (the catalog's
# default unhealthyConditions entry).
Sickness = Literal["", "allocatable", "condition"]
SICK_CONDITION = ("AcceleratedHardwareReady", "False")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    product: str  # nvidia.com/gpu.product; "" for a CPU-only node
    gpus: int
    cpu_millis: int
    memory_mib: int
    tainted: bool
    filled_cpu_millis: int = 0  # taken by a CPU-only Pod before the streams start
    sick: Sickness = ""  # healthy, or how it is unhealthy


# The handful of best-type nodes, first in every fleet: product, GPUs, CPU cores, memory GiB.
BEST_NODES = (("h100", "NVIDIA-H100-80GB-HBM3", 8, 96, 1024),) * 3 + (("t4", "Tesla-T4", 4, 16, 64),) * 3
# The other GPU nodes, in turn: every class has several types of several sizes among them, and the
# types `high` and `economy` fall back to are many nodes (more than the default scheduler's sample
# at 5,000 nodes: it stops filtering at 10% of them feasible).
OTHER_GPU_NODES = (
    ("l40s", "NVIDIA-L40S", 4, 48, 384),
    ("a100-80", "NVIDIA-A100-SXM4-80GB", 8, 64, 512),
    ("l4", "NVIDIA-L4", 1, 8, 32),
    ("a10g", "NVIDIA-A10G", 4, 48, 192),
    ("a100-40", "A100-SXM4-40GB", 8, 64, 512),
    ("a30", "NVIDIA-A30", 2, 32, 256),
    ("a100-80", "NVIDIA-A100-SXM4-80GB", 8, 64, 512),
    ("v100", "Tesla-V100-SXM2-16GB", 8, 48, 384),
    ("l4", "NVIDIA-L4", 4, 16, 128),
    ("a10", "NVIDIA-A10", 2, 32, 192),
    ("l40", "NVIDIA-L40", 4, 48, 384),
    ("a100-40", "A100-SXM4-40GB", 8, 64, 512),
)
GPU_NODES_IN_20 = 9  # of the other nodes, 9 in 20 have GPUs; the rest are CPU-only
CPU_NODE_CORES = (16, 32, 64)


def make_fleet(size: int, sick_percent: float = 0.0) -> list[NodeSpec]:
    """The first `size` nodes of the benchmark's cluster (at least the best-type handful), with
    `sick_percent` of each GPU type's nodes, rounded up, unhealthy (sicken)."""
    nodes = []
    for i, (short, product, gpus, cores, gib) in enumerate(BEST_NODES):
        fill = int(cores * 1000 * random.Random(f"best-{i}").uniform(0.5, 0.75))
        nodes.append(NodeSpec(f"pl-{short}-{i % 3}", product, gpus, cores * 1000, gib * 1024,
                              tainted=i % 3 != 2, filled_cpu_millis=fill))
    gpu_nodes = 0
    for j in range(max(0, size - len(BEST_NODES))):
        rng = random.Random(f"node-{j}")  # each node's own: a smaller fleet is a prefix of a larger one
        if j % 20 < GPU_NODES_IN_20:
            short, product, gpus, cores, gib = OTHER_GPU_NODES[gpu_nodes % len(OTHER_GPU_NODES)]
            fill = int(cores * 1000 * rng.uniform(0.2, 0.6)) if rng.random() < 0.5 else 0
            nodes.append(NodeSpec(f"pl-{j}-{short}", product, gpus, cores * 1000, gib * 1024,
                                  tainted=gpu_nodes % 3 != 2, filled_cpu_millis=fill))
            gpu_nodes += 1
        else:
            cores = rng.choice(CPU_NODE_CORES)
            nodes.append(NodeSpec(f"pl-{j}-cpu", "", 0, cores * 1000, cores * 4 * 1024, tainted=False))
    return sicken(nodes, sick_percent)


def sicken(nodes: Sequence[NodeSpec], sick_percent: float) -> list[NodeSpec]:
    """The nodes with `sick_percent` of each product's nodes sick: the i-th node of a product (from 0)
    is sick when ceil((i + 1) * share) > ceil(i * share), so of its first k nodes ceil(k * share) are,
    whatever the fleet's size; the sick ones take turns between the two signs, allocatable first."""
    if not 0 <= sick_percent < 100:
        raise ValueError(f"sick_percent must be at least 0 and below 100, not {sick_percent}")
    share = Fraction(str(sick_percent)) / 100  # exact: 5% of 20 nodes is 1, not 1.0000000000000002
    seen: dict[str, int] = defaultdict(int)
    signs: tuple[Sickness, Sickness] = ("allocatable", "condition")
    out, sick = [], 0
    for n in nodes:
        i = seen[n.product]
        if n.product:
            seen[n.product] += 1
        if n.product and math.ceil((i + 1) * share) > math.ceil(i * share):
            n = dataclasses.replace(n, sick=signs[sick % 2])
            sick += 1
        out.append(n)
    return out


def is_sick(capacity: Mapping[str, Any], allocatable: Mapping[str, Any], conditions: Sequence[Mapping[str, Any]],
            unhealthy: Sequence[tuple[str, str]]) -> bool:
    """Whether a node's status (as the API serves it) is unhealthy for its GPUs: fewer allocatable
    than capacity, or a condition of `unhealthy` (the catalog's unhealthyConditions). Read from the
    status here, not from the webhook's answer: that is what is under test."""
    held_out = int(capacity.get(GPU, allocatable.get(GPU, 0))) > int(allocatable.get(GPU, 0))
    return held_out or any((c.get("type"), c.get("status")) in unhealthy for c in conditions)


@dataclass(frozen=True)
class Workload:
    name: str
    gpu_class: str
    gpus: int  # per Pod
    cpu_millis: int  # per Pod
    kind: Kind = "single"
    pods: int = 1  # a Deployment's replicas, a Job's parallelism
    indexed: bool = False  # a Job with completionMode Indexed (completions = parallelism)


def make_streams(seed: int = 11, pods_per_class: int = 60) -> dict[str, list[Workload]]:
    """Per strategy: single Pods, Deployments (2-5 replicas) and Jobs (parallelism 3-6, indexed or not),
    1 to 8 GPUs a Pod, in a random order, enough to fill the best type and spill over."""
    rng = random.Random(seed)
    streams: dict[str, list[Workload]] = {}
    for strategy, gpu_class in STRATEGY_CLASS.items():
        # only where the class has 8-GPU nodes, or the webhook would refuse the Pods
        counts = [1, 1, 1, 2, 2, 4] + ([8] if gpu_class in ("high", "standard") else [])
        workloads: list[Workload] = []
        pods = 0
        while pods < pods_per_class:
            # a single Pod is one Pod, the others 2 to 6: about as many Pods of each kind
            kind: Kind = rng.choice(("single", "single", "single", "single", "deployment", "job"))
            name = f"{strategy[:4]}-{len(workloads)}"
            cpu = rng.choice([500, 1000, 2000, 4000])
            if kind == "single":
                w = Workload(name, gpu_class, rng.choice(counts), cpu)
            elif kind == "deployment":
                w = Workload(name, gpu_class, rng.choice(counts[:-1]), cpu, kind, rng.randint(2, 5))
            else:
                w = Workload(name, gpu_class, rng.choice(counts[:-1]), cpu, kind, rng.randint(3, 6),
                             indexed=rng.random() < 0.5)
            workloads.append(w)
            pods += w.pods
        streams[strategy] = workloads
    return streams


# --- judging ----------------------------------------------------------------------

@dataclass
class NodeState:
    name: str
    gpu_type: str | None
    gpus: int
    free_gpus: int
    free_cpu_millis: int
    free_memory_mib: int
    sick: bool = False  # unhealthy (is_sick): never promised

    def holds(self, w: Workload) -> bool:
        return (self.free_gpus >= w.gpus and self.free_cpu_millis >= w.cpu_millis
                and self.free_memory_mib >= POD_MEMORY_MIB)


@dataclass(frozen=True)
class Outcome:
    """One Pod of a stream: where it was bound (None: found Pending), in bind order."""
    pod: str
    workload: Workload
    node: str | None
    group: str = ""  # Pods created together: one workload's, or a burst's
    added: float = 0.0  # monotonic times of its ADDED event and of the event that showed it bound,
    bound: float | None = None  # as one watch saw them
    refused: bool = False  # at admission: never made

    @property
    def seconds_to_bind(self) -> float | None:
        return None if self.bound is None else self.bound - self.added


@dataclass
class Verdicts:
    placed: int = 0
    right: int = 0
    packed: int = 0  # performance and cost: right binds on a fullest node of the best type
    wrongly_pending: int = 0
    rightly_pending: int = 0
    refused: int = 0  # refused at admission because the webhook did not answer in time
    on_sick: int = 0  # binds to a sick node (all wrong)
    seconds_to_bind: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


def judge(start: Mapping[str, NodeState], outcomes: Sequence[Outcome],
          catalog: JudgeCatalog) -> dict[Kind, Verdicts]:
    """Replay the binds from the cluster's state before the stream (`start`); verdicts by kind.

    Each Pod is judged by its class's strategy in `catalog`. kube-scheduler decides one Pod after
    another but binds each asynchronously, so a watch can show the Pods it decided in a row (a
    Deployment's replicas, a burst) bound in another order. Such a run of binds of one group is
    replayed in an order in which each Pod took a node the strategy promised, as far as there is
    one: at each step the first Pod in watch order whose node is the profile's choice (promised,
    and packed for `performance` and `cost`), else the first whose node is promised, else the first
    Pod left (which is wrong).
    """
    nodes = {name: dataclasses.replace(n) for name, n in start.items()}
    verdicts: dict[Kind, Verdicts] = {k: Verdicts() for k in KINDS}
    for run in _runs(outcomes):
        if run[0].refused:
            verdicts[run[0].workload.kind].refused += 1
            continue
        if run[0].node is None:
            o = run[0]
            fitting = _fitting(nodes, o.workload, allowed_types(catalog, o.workload))
            v = verdicts[o.workload.kind]
            if fitting:
                v.wrongly_pending += 1
                v.wrong.append(f"{o.pod} Pending while {fitting[0].name} could hold it")
            else:
                v.rightly_pending += 1
            continue
        left = list(run)
        while left:
            # (right, and packed as well) per workload in the run, in the state before this bind
            choices: dict[Workload, tuple[list[NodeState], list[NodeState]]] = {}
            for x in left:
                if x.workload not in choices:
                    choices[x.workload] = _choices(nodes, x.workload, catalog)
            o = next((x for i in (1, 0) for x in left if nodes[x.node or ""] in choices[x.workload][i]), left[0])
            left.remove(o)
            right, packed = choices[o.workload]
            v = verdicts[o.workload.kind]
            v.placed += 1
            if o.seconds_to_bind is not None:
                v.seconds_to_bind.append(o.seconds_to_bind)
            chosen = nodes[o.node or ""]
            if chosen in right:
                v.right += 1
                v.packed += chosen in packed and catalog.strategy(o.workload.gpu_class) in ("performance", "cost")
            else:
                v.on_sick += chosen.sick
                v.wrong.append(f"{o.pod} ({o.workload.gpus} GPUs) on {o.node} ({chosen.gpu_type}"
                               + (", sick)" if chosen.sick else ")"))
            chosen.free_gpus -= o.workload.gpus
            chosen.free_cpu_millis -= o.workload.cpu_millis
            chosen.free_memory_mib -= POD_MEMORY_MIB
    return verdicts


def allowed_types(catalog: JudgeCatalog, w: Workload) -> tuple[str, ...]:
    """The types the catalog lets a Pod of the workload have, best first for its class's strategy:
    fastest first, slowest first for `cost`. From the catalog alone, by the judge's own reading of it:
    neither the webhook's answer for the Pod nor its (or the extender's) order plays a part."""
    return catalog.promised_order(w.gpu_class)


def _fitting(nodes: Mapping[str, NodeState], w: Workload, allowed: Sequence[str]) -> list[NodeState]:
    """The healthy nodes of the allowed types that can hold a Pod of the workload now."""
    return [n for n in nodes.values() if n.gpu_type in allowed and not n.sick and n.holds(w)]


def _choices(nodes: Mapping[str, NodeState], w: Workload,
             catalog: JudgeCatalog) -> tuple[list[NodeState], list[NodeState]]:
    """The nodes the strategy promised the Pod now, and those of them its profile prefers: for
    `performance` and `cost`, the ones with the largest share of GPUs in use once it is placed."""
    allowed = allowed_types(catalog, w)
    strategy = catalog.strategy(w.gpu_class)
    right = promised(strategy, _fitting(nodes, w, allowed), w, allowed)
    return right, promised("binpack", right, w, allowed) if strategy in ("performance", "cost") else right


def _runs(outcomes: Sequence[Outcome]) -> list[list[Outcome]]:
    """Consecutive binds of one group together; each Pending Pod alone."""
    runs: list[list[Outcome]] = []
    for o in outcomes:
        if o.node is not None and runs and runs[-1][0].node is not None and runs[-1][0].group == o.group:
            runs[-1].append(o)
        else:
            runs.append([o])
    return runs


def promised(strategy: str, fitting: Sequence[NodeState], w: Workload, order: Sequence[str]) -> list[NodeState]:
    """The nodes the strategy allows at this moment (every one of them equally right); `order`: the
    Pod's allowed types, best first."""
    if not fitting:
        return []
    if strategy in ("performance", "cost"):
        rank = {t: i for i, t in enumerate(order)}
        best = min(rank.get(n.gpu_type or "", len(order)) for n in fitting)
        return [n for n in fitting if rank.get(n.gpu_type or "") == best]
    in_use = strategy == "binpack"
    best_share = max(percent_after(n, w.gpus, in_use=in_use) for n in fitting)
    return [n for n in fitting if percent_after(n, w.gpus, in_use=in_use) == best_share]


def percent_after(n: NodeState, gpus: int, *, in_use: bool) -> int:
    """The whole percent of the node's GPUs in use (`in_use`) or free once `gpus` more are taken, rounded down
    as NodeResourcesFit scores it. The judge's own arithmetic: the extender's share_after is under test."""
    free_after = max(n.free_gpus - gpus, 0)
    return ((n.gpus - free_after) if in_use else free_after) * 100 // n.gpus if n.gpus > 0 else 0


def utilisation_spread(start: Mapping[str, NodeState], outcomes: Sequence[Outcome], types: Sequence[str]) -> float:
    """max - min over the given types of the share of their healthy nodes' GPUs in use at the end."""
    total: dict[str, int] = defaultdict(int)
    used: dict[str, int] = defaultdict(int)
    for n in start.values():
        if n.gpu_type is not None and n.gpu_type in types and not n.sick:
            total[n.gpu_type] += n.gpus
            used[n.gpu_type] += n.gpus - n.free_gpus
    for o in outcomes:
        t = start[o.node].gpu_type if o.node is not None and o.node in start and not start[o.node].sick else None
        if t is not None:
            used[t] += o.workload.gpus
    shares = [used[t] / total[t] for t in total if total[t]]
    return max(shares) - min(shares) if shares else 0.0


def merge(verdicts: Sequence[Verdicts]) -> Verdicts:
    """The verdicts of several streams or kinds together."""
    out = Verdicts()
    for v in verdicts:
        out.placed += v.placed
        out.right += v.right
        out.packed += v.packed
        out.wrongly_pending += v.wrongly_pending
        out.rightly_pending += v.rightly_pending
        out.refused += v.refused
        out.on_sick += v.on_sick
        out.seconds_to_bind += v.seconds_to_bind
        out.wrong += v.wrong
    return out


def pods_per_second(outcomes: Sequence[Outcome]) -> float:
    """Pods bound per second, from the first Pod added to the last one bound."""
    bound = [o.bound for o in outcomes if o.bound is not None]
    if not bound:
        return 0.0
    span = max(bound) - min(o.added for o in outcomes if not o.refused)
    return len(bound) / span if span > 0 else 0.0
