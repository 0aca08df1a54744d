"""`python -m bench placement`: do Pods land where their class promised, on the real scheduler, at scale?

On the local control plane (tests/e2e/local-cluster), a fleet of 100, 1,000, 5,000 and 15,000 nodes
(bench/placement/placement_model.py: the best type of each class a handful of nodes, most nodes CPU-only,
most GPU nodes tainted, CPU work on the best type's nodes), grown from one size to the next. At
each size, streams for all four strategies (single Pods, Deployments and Jobs, 1 to 8 GPUs, enough
to fill the best type and spill over), each run on every path of --paths:

  (a) the stock default scheduler with the webhook alone;
  (b) gpu-class-scheduler: the strict profiles (deploy/scheduler) on our build of kube-scheduler,
      whose NodeLabelIndex plugin gives each Pod's cycle only the nodes of its class's types;
  (c) gpu-class-extender: the same, with gpu-class's extender;
  (d) gpu-class-stock: the same profiles on the stock kube-scheduler binary, which filters every node.

The paths take turns: each strategy's stream runs on all of them, one after the other from the same
cluster state, starting with a different path from one strategy to the next. One watch per stream
times each Pod from ADDED to bound; the binds, replayed in that watch's order, are judged as
bench/placement/placement_model.py says. Then bursts: 30 one-GPU Pods created at once, in rounds that
alternate the paths, give Pods per second (first Pod added to last bound). kube-scheduler's own
metrics give each path's time per scheduling attempt of the streams, and its PreFilter, Filter and
Score extension points.

With --sick-percent, that share of each GPU type's nodes is unhealthy (placement_model.sicken):
gpu-class promises only healthy nodes, so a Pod bound to a sick one is wrong, and the report says
per path how many Pods were.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import kubernetes

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

from bench.common.percentiles import median, percentile  # noqa: E402
from bench.placement.judge_catalog import JudgeCatalog  # noqa: E402
from bench.placement.placement_cluster import (  # noqa: E402
    barrier, cluster_state, create_nodes, delete_nodes, drop_namespace, make_namespace, run_stream, scheduler_times,
)
from bench.placement.placement_model import (  # noqa: E402
    BEST_NODES, KINDS, SICK_CONDITION, Kind, NodeSpec, NodeState, Outcome, Verdicts, Workload, allowed_types, judge,
    make_fleet, make_streams, merge, pods_per_second, utilisation_spread,
)
from bench.common.commit import measured_at  # noqa: E402
from bench.common.sections import write_section  # noqa: E402
from webhook.core.catalog.loading import load_catalog_text  # noqa: E402
from webhook.core.catalog.model import Catalog  # noqa: E402

Path_ = Literal["default", "profiles", "extender", "stock"]
PATHS: tuple[Path_, ...] = ("default", "profiles", "extender", "stock")
SCHEDULER: Mapping[Path_, str | None] = {"default": None, "profiles": local_cluster.STRICT_SCHEDULER,
                                         "extender": local_cluster.EXTENDER_SCHEDULER,
                                         "stock": local_cluster.STOCK_SCHEDULER}
PATH_TITLE = {"default": "(a) default scheduler", "profiles": f"(b) {local_cluster.STRICT_SCHEDULER}",
              "extender": f"(c) {local_cluster.EXTENDER_SCHEDULER}",
              "stock": f"(d) {local_cluster.STOCK_SCHEDULER} (the profiles on the stock binary)"}
SIZES = (100, 1000, 5000, 15000)
# kube-scheduler's extension points reported per attempt, beside the attempt itself.
SCHEDULER_POINTS = ("PreFilter", "Filter", "Score")
# A workload none of whose Pods was bound for this long counts the rest as Pending. The scheduler
# decides in milliseconds, but an unschedulable Pod waits in its backoff queue (1 s, doubling).
PENDING_SECONDS = 3.0
BURST_CLASS = "standard"


@dataclass(frozen=True)
class StreamResult:
    size: int
    strategy: str
    path: Path_
    verdicts: Mapping[Kind, Verdicts]
    spread: float | None  # balanced: max - min share of GPUs in use between the class's types at the end


@dataclass(frozen=True)
class BurstResult:
    size: int
    path: Path_
    pods_per_second: float
    verdicts: Verdicts


@dataclass
class SizeRun:
    size: int
    fleet_seconds: float = 0.0
    seconds: float = 0.0
    streams: list[StreamResult] = field(default_factory=list)
    bursts: list[BurstResult] = field(default_factory=list)
    # per path, kube-scheduler's mean ms per scheduling attempt of the streams: attempt, Filter, Score
    scheduler_ms: dict[Path_, dict[str, float]] = field(default_factory=dict)
    sick: list[NodeSpec] = field(default_factory=list)  # the fleet's sick nodes


def read_catalog_text() -> str:
    """The catalog the webhook under test runs with (its built-in one), as `gpuclass catalog` prints it."""
    return subprocess.run([local_cluster.gpuclass_path(), "catalog"], capture_output=True, text=True,
                          check=True).stdout


def read_catalog() -> Catalog:
    """The catalog the webhook under test runs with, read as the webhook reads it."""
    return load_catalog_text(read_catalog_text(), "gpuclass catalog")


def read_judge_catalog() -> JudgeCatalog:
    """The same catalog, read by the judge's own code (judge_catalog.py), which judges the webhook's answers."""
    return JudgeCatalog.from_yaml(read_catalog_text())


def _turn(paths: Sequence[Path_], i: int) -> list[Path_]:
    """The paths, starting from the i-th: each path goes first in turn."""
    return [paths[(i + k) % len(paths)] for k in range(len(paths))]


def run_sizes(cluster: local_cluster.Cluster, sizes: Sequence[int], streams: Mapping[str, Sequence[Workload]],
              paths: Sequence[Path_] = PATHS, pending_seconds: float = PENDING_SECONDS, burst_pods: int = 30,
              burst_rounds: int = 5, log: Callable[[str], None] = print, sick_percent: float = 0.0) -> list[SizeRun]:
    """Grow the fleet to each size in turn and run every stream and burst on every path there."""
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    core: Any = kubernetes.client.CoreV1Api(api)
    catalog = read_judge_catalog()
    if sick_percent and SICK_CONDITION not in catalog.unhealthy_conditions:
        raise RuntimeError(f"--sick-percent: the webhook's catalog does not count {'='.join(SICK_CONDITION)} as "
                           f"unhealthy (its unhealthyConditions: {catalog.unhealthy_conditions}); the sick nodes "
                           "would not be sick to it")
    # left by an interrupted run on a kept cluster
    delete_nodes(core, [n.metadata.name for n in core.list_node().items if n.metadata.name.startswith("pl-")])
    fill_ns = make_namespace(core, "pl-fill", opted_in=False)
    made: list[NodeSpec] = []
    barrier_node: str | None = None
    runs = []
    try:
        for size in sorted(sizes):
            started = time.monotonic()
            fleet = make_fleet(size, sick_percent)
            create_nodes(core, fleet[len(made):], fill_ns)
            made = fleet
            if barrier_node:
                delete_nodes(core, [barrier_node])
            barrier_node = f"pl-barrier-{size}"
            barrier(api, cluster, barrier_node, [SCHEDULER[p] for p in paths], fill_ns)
            run = SizeRun(size, fleet_seconds=time.monotonic() - started, sick=[n for n in fleet if n.sick])
            log(f"placement: {size} nodes made in {run.fleet_seconds:.0f} s")
            before = {p: scheduler_times(cluster, scheduler_port(cluster, p)) for p in paths}
            for s, (strategy, workloads) in enumerate(streams.items()):
                for path in _turn(paths, s):
                    outcomes, start = _on_path(api, catalog, f"pl-{strategy[:4]}-{path[:3]}", workloads, path,
                                               pending_seconds, together=False)
                    verdicts = judge(start, outcomes, catalog)
                    types = {t for w in workloads for t in allowed_types(catalog, w)}
                    run.streams.append(StreamResult(size, strategy, path, verdicts,
                                                    utilisation_spread(start, outcomes, sorted(types))
                                                    if strategy == "balanced" else None))
                    log(f"placement: {size} nodes, {strategy}, {path}: " + _brief(merge(list(verdicts.values()))))
            for p in paths:
                after = scheduler_times(cluster, scheduler_port(cluster, p))
                spent = {k: v - before[p].get(k, 0.0) for k, v in after.items()}
                if spent.get("attempt count"):
                    run.scheduler_ms[p] = {k: 1000 * spent.get(f"{k} sum", 0.0) / spent["attempt count"]
                                           for k in ("attempt", *SCHEDULER_POINTS)}
            burst = [Workload(f"burst-{i}", BURST_CLASS, 1, 500) for i in range(burst_pods)]
            for r in range(burst_rounds if burst else 0):
                for path in _turn(paths, r):
                    outcomes, start = _on_path(api, catalog, f"pl-burst-{path[:3]}", burst, path, pending_seconds,
                                               together=True)
                    result = BurstResult(size, path, pods_per_second(outcomes),
                                         judge(start, outcomes, catalog)["single"])
                    run.bursts.append(result)
                    log(f"placement: {size} nodes, burst, {path}: {result.pods_per_second:.1f} Pods/s, "
                        + _brief(result.verdicts))
            run.seconds = time.monotonic() - started
            runs.append(run)
    finally:
        drop_namespace(core, fill_ns)
        delete_nodes(core, [n.name for n in made] + ([barrier_node] if barrier_node else []))
    return runs


def scheduler_port(cluster: local_cluster.Cluster, path: Path_) -> int:
    """Where the path's kube-scheduler serves its /metrics."""
    assert cluster.ports is not None
    return int({"default": cluster.ports.scheduler, "profiles": cluster.ports.gpu_scheduler,
                "extender": cluster.ports.extender_scheduler, "stock": cluster.ports.stock_scheduler}[path])


def _on_path(api: Any, catalog: JudgeCatalog, prefix: str, workloads: Sequence[Workload], path: Path_,
             pending_seconds: float, *, together: bool) -> tuple[list[Outcome], dict[str, NodeState]]:
    """A stream on one path, in a namespace of its own: its outcomes and the state it started from."""
    core: Any = kubernetes.client.CoreV1Api(api)
    ns = make_namespace(core, prefix, opted_in=True)
    try:
        start = cluster_state(core, catalog)
        return run_stream(api, ns, workloads, SCHEDULER[path], pending_seconds, together=together), start
    finally:
        drop_namespace(core, ns)


def _brief(v: Verdicts) -> str:
    return (f"{v.right}/{v.placed} right, {v.wrongly_pending} wrongly and {v.rightly_pending} rightly Pending"
            + (f", {v.on_sick} on sick nodes" if v.on_sick else "")
            + (f"; {'; '.join(v.wrong[:3])}" if v.wrong else ""))


# --- the report -------------------------------------------------------------------------

def _fidelity(v: Verdicts) -> str:
    return f"{100 * v.right / v.placed:.1f}%" if v.placed else "-"


def _ms(v: Verdicts, fraction: float) -> str:
    return f"{1000 * percentile(sorted(v.seconds_to_bind), fraction):.0f}" if v.seconds_to_bind else "-"


def _side_by_side(cells: Sequence[str]) -> str:
    return " / ".join(cells)


def _on_sick(run: SizeRun, path: Path_) -> int:
    """The path's Pods, streams and bursts, bound to a sick node."""
    return (merge([r.verdicts[k] for r in run.streams if r.path == path for k in KINDS]).on_sick
            + sum(b.verdicts.on_sick for b in run.bursts if b.path == path))


def _sick_fleet(runs: Sequence[SizeRun]) -> str:
    """The header's sentence on the sick nodes: how many of each sign, those of the best types."""
    if not any(r.sick for r in runs):
        return ""
    sizes = "; ".join(f"{r.size:,} nodes: {len(r.sick)} sick, {sum(n.sick == 'allocatable' for n in r.sick)} with "
                      f"allocatable GPUs one below capacity, {sum(n.sick == 'condition' for n in r.sick)} with "
                      f"{'='.join(SICK_CONDITION)}" for r in runs)
    best_nodes = tuple({f"pl-{short}-" for short, *_ in BEST_NODES})
    best = ", ".join(f"{n.name} ({n.sick})" for n in runs[-1].sick if n.name.startswith(best_nodes))
    return (f" Sick nodes: {sizes}; of the best types' handful, {best}. Only healthy nodes are promised: "
            "a Pod bound to a sick node is wrong, and the best type with room is judged on healthy nodes.")


def _sick_line(run: SizeRun, paths: Sequence[Path_]) -> list[str]:
    if not run.sick:
        return []
    return ["", "Pods bound to a sick node (streams and bursts): "
            + _side_by_side([str(_on_sick(run, p)) for p in paths]) + "."]


def render(runs: Sequence[SizeRun], command: str, paths: Sequence[Path_] = PATHS) -> str:
    sick = _sick_fleet(runs)
    lines = [
        "## Placement at scale" + (" with sick nodes" if sick else "") + " (`python -m bench placement`)",
        "",
        f"{measured_at()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Command: `{command}`; Kubernetes {local_cluster.kube_version()}; "
        + ", ".join(f"{r.size:,} nodes {r.seconds:.0f} s (fleet {r.fleet_seconds:.0f} s)" for r in runs)
        + ". Fidelity: Pods bound where the strategy promised, at the moment they were bound "
        "(bench/placement/placement_model.py says how each strategy is judged); create-to-bind: from the Pod's ADDED "
        "to its bound event in one watch; Pods/s: bursts of one-GPU `standard` Pods created at once, "
        "median of the rounds; refused at admission: single Pods the backstop refused because the webhook did "
        "not answer the API server within its 5 s timeout." + sick,
        "",
        "Paths: " + ", ".join(PATH_TITLE[p] for p in paths) + ".",
        "",
        "| nodes | path | Pods placed | fidelity | wrongly Pending | rightly Pending | create-to-bind p50 ms "
        "| p99 ms | scheduler attempt ms (Filter) | Pods/s (burst) | burst fidelity | refused at admission |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for path in paths:
            v = merge([r.verdicts[k] for r in run.streams if r.path == path for k in KINDS])
            bursts = [b for b in run.bursts if b.path == path]
            rate = f"{median([b.pods_per_second for b in bursts]):.1f}" if bursts else "-"
            burst_fidelity = _fidelity(merge([b.verdicts for b in bursts])) if bursts else "-"
            refused = v.refused + sum(b.verdicts.refused for b in bursts)
            own = run.scheduler_ms.get(path)
            attempt = f"{own['attempt']:.1f} ({own['Filter']:.1f})" if own else "-"
            lines.append(f"| {run.size:,} | {PATH_TITLE[path]} | {v.placed} | {_fidelity(v)} | {v.wrongly_pending} "
                         f"| {v.rightly_pending} | {_ms(v, 0.5)} | {_ms(v, 0.99)} | {attempt} | {rate} "
                         f"| {burst_fidelity} | {refused} |")
    for run in runs:
        lines += ["", f"### {run.size:,} nodes", "",
                  "Each cell: " + " / ".join(PATH_TITLE[p].split(" ")[0] for p in paths) + ".", "",
                  "| strategy | kind | Pods placed | fidelity | wrongly Pending | rightly Pending "
                  "| create-to-bind p50 ms | p99 ms |",
                  "|---|---|---|---|---|---|---|---|"]
        strategies = list(dict.fromkeys(r.strategy for r in run.streams))
        for strategy in strategies:
            for kind in KINDS:
                vs = [next(r.verdicts[kind] for r in run.streams if r.strategy == strategy and r.path == p)
                      for p in paths]
                lines.append(f"| {strategy} | {kind} | {_side_by_side([str(v.placed) for v in vs])} "
                             f"| {_side_by_side([_fidelity(v) for v in vs])} "
                             f"| {_side_by_side([str(v.wrongly_pending) for v in vs])} "
                             f"| {_side_by_side([str(v.rightly_pending) for v in vs])} "
                             f"| {_side_by_side([_ms(v, 0.5) for v in vs])} "
                             f"| {_side_by_side([_ms(v, 0.99) for v in vs])} |")
        packed = []
        for strategy in ("performance", "cost"):
            vs = [merge([r.verdicts[k] for r in run.streams if r.strategy == strategy and r.path == p for k in KINDS])
                  for p in paths]
            packed.append(f"{strategy} " + _side_by_side([f"{100 * v.packed / v.right:.0f}%" if v.right else "-"
                                                          for v in vs]))
        spread = [f"{100 * r.spread:.0f}" for p in paths for r in run.streams
                  if r.strategy == "balanced" and r.path == p and r.spread is not None]
        lines += ["", "Right binds packed within the best type (the profile's MostAllocated): " + "; ".join(packed)
                  + ". Balanced: spread of the share of GPUs in use between the class's types at the end, "
                  f"points: {_side_by_side(spread)}."]
        lines += _sick_line(run, paths)
        if run.scheduler_ms:
            lines += ["", "kube-scheduler's own time per scheduling attempt of these streams (mean ms, from its "
                      "metrics; Score runs only where more than one node is feasible): "
                      + "; ".join(f"{k} " + _side_by_side([f"{run.scheduler_ms[p].get(k, 0):.1f}"
                                                           if p in run.scheduler_ms else "-" for p in paths])
                                  for k in (*SCHEDULER_POINTS, "attempt")) + "."]
        wrong = [f"- {r.strategy} {r.path}: " + "; ".join(merge(list(r.verdicts.values())).wrong[:3])
                 for r in run.streams if any(v.wrong for v in r.verdicts.values())]
        if wrong:
            lines += ["", "First misplacements:", *wrong]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench placement", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="fleet sizes, grown in turn (default %(default)s)")
    p.add_argument("--pods", type=int, default=60, help="Pods per strategy's stream (default %(default)s)")
    p.add_argument("--burst", type=int, default=30, help="Pods per burst, 0 for none (default %(default)s)")
    p.add_argument("--rounds", type=int, default=5, help="burst rounds per path (default %(default)s)")
    p.add_argument("--paths", default=",".join(PATHS),
                   help="the schedulers compared, taking turns (default %(default)s)")
    p.add_argument("--sick-percent", type=float, default=0.0,
                   help="share of each GPU type's nodes made unhealthy, rounded up (default %(default)s)")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    paths = [path for path in PATHS if path in args.paths.split(",")]
    unknown = set(args.paths.split(",")) - set(PATHS)
    if unknown or not paths:
        p.error(f"--paths: unknown {', '.join(sorted(unknown)) or 'none given'}; choose from {', '.join(PATHS)}")
    if not 0 <= args.sick_percent < 100:
        p.error(f"--sick-percent: {args.sick_percent:g} is not a share of a type's nodes (at least 0, below 100)")
    with local_cluster.running(args.cluster_dir) as cluster:
        runs = run_sizes(cluster, sizes, make_streams(args.seed, args.pods), paths, burst_pods=args.burst,
                         burst_rounds=args.rounds, log=lambda line: print(line, file=sys.stderr, flush=True),
                         sick_percent=args.sick_percent)
    command = "python -m bench placement" + (" " + " ".join(argv) if argv else "")
    text = render(runs, command, paths)
    print(text)
    # its own section: a run with sick nodes does not replace the healthy fleet's figures
    write_section(args.output, "placement-sick" if args.sick_percent else "placement", text)
    return 0
