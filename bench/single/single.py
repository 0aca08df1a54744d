"""`python -m bench single`: single Pods one after another where the class is most of the nodes, per path.

On the local control plane (tests/e2e/local-cluster), the layout issue 47 measured "as a new user would"
(bench/single/single_model.py): at 5,000 nodes, 3 H100 nodes with room among 3,333 A100 nodes of the same
class (`high`) and 1,664 CPU-only nodes; the same proportions at the other sizes (--sizes, default 1,000,
5,000 and 15,000), the fleet grown from one size to the next as bench/placement grows its own. At each
size, arms of --pods single class-`high` Pods, each created once the one before was bound, on each path
of --paths in turn, over --rounds rounds (single_model.arm_order), each arm's Pods deleted before the next
so that H100 keeps its room:

  default:  the stock default scheduler with the webhook alone;
  profiles: gpu-class-scheduler, the default install's strict path (NodeLabelIndex narrows each cycle);
  extender: gpu-class-extender, the strict profiles with gpu-class's extender (optional).

Reported per size and path: create-to-bind p50 and p90 (from the client's create call to the bound
event in one watch; from the watch's ADDED too, as bench/placement times it), the share of Pods bound on H100, and the path's kube-scheduler's own PreFilter, Filter, Score and
attempt time per cycle from its metrics; then issue 47's bar: gpu-class-scheduler's p50 at or below the
default scheduler's at each size, and its PreFilter mean per cycle within 1.5x across the sizes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import kubernetes

from bench.common.commit import measured_at
from bench.common.scrape import read_scheduler_times
from bench.common.sections import write_section
from bench.placement.placement import PENDING_SECONDS, REPO_ROOT, SCHEDULER, scheduler_port
from bench.placement.placement_cluster import (
    BindRecorder, barrier, create_nodes, create_workload, delete_nodes, drop_namespace, make_namespace,
    scheduler_metrics, wait_workload,
)
from bench.placement.placement_model import NodeSpec, Workload
from bench.single.single_model import (
    BEST, PATHS, Arm, Path_, PodTimes, Setting, Spent, arm_order, command_line, make_arm, make_layout, read_outcomes,
    render, spent_between,
)

sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))
import local_cluster  # noqa: E402  (tests/e2e is not a package)

SIZES = (1000, 5000, 15000)
DEFAULT_PATHS: tuple[Path_, ...] = ("default", "profiles")
POD_CLASS = "high"
METRICS_SECONDS = 10.0  # kube-scheduler counts an attempt once its bind is done: a moment after the watch sees it


class Counters:
    """One path's kube-scheduler, read before and after an arm."""

    def __init__(self, cluster: local_cluster.Cluster, path: Path_) -> None:
        self.cluster, self.port = cluster, scheduler_port(cluster, path)

    def read(self) -> tuple[dict[str, float], dict[str, float]]:
        text = scheduler_metrics(self.cluster, self.port)
        return read_scheduler_times(text), read_outcomes(text)

    def spent_since(self, before: tuple[dict[str, float], dict[str, float]], bound: int) -> Spent:
        """Since `before`, once the attempts of the `bound` Pods are counted (or METRICS_SECONDS passed)."""
        deadline = time.monotonic() + METRICS_SECONDS
        while True:
            after = self.read()
            spent = spent_between(before[0], after[0], before[1], after[1])
            if spent.attempts >= bound or time.monotonic() > deadline:
                return spent
            time.sleep(0.1)


def run_pods(api: Any, namespace: str, pods: int, scheduler: str | None) -> list[PodTimes]:
    """`pods` single class Pods, each created once the one before is bound (or found Pending): when each
    create call was sent, and when one watch saw the Pod ADDED and bound.

    bench/placement's run_stream times from the ADDED event alone; on these 2 shared cores the watch's
    reader often reads ADDED late, so that time comes out short (a smoke run at 200 nodes: Pods at 1 ms
    from ADDED against kube-scheduler's own attempt of 5 ms; one at 0.1 ms). The create call, on the same
    clock, has no such floor: it is what a user who created the Pod sees, as issue 47 timed it."""
    recorder = BindRecorder(kubernetes.client.CoreV1Api(api), namespace)
    times = []
    try:
        for i in range(pods):
            w = Workload(f"single-{i}", POD_CLASS, 1, 500)
            sent = time.monotonic()
            if not create_workload(api, namespace, w, scheduler):
                times.append(PodTimes(sent, None, None, None, refused=True))
                continue
            r = wait_workload(recorder, w, PENDING_SECONDS)[w.name]
            times.append(PodTimes(sent, r.added, r.bound, r.node))
    finally:
        recorder.stop()
    return times


def run_arm(api: Any, cluster: local_cluster.Cluster, size: int, path: Path_, round_: int, pods: int,
            best_nodes: set[str]) -> Arm:
    """One path's stream of single Pods, in a namespace of its own, deleted (and its Pods) after it."""
    core: Any = kubernetes.client.CoreV1Api(api)
    counters = Counters(cluster, path)
    ns = make_namespace(core, f"sg-{path[:3]}", opted_in=True)
    try:
        before = counters.read()
        times = run_pods(api, ns, pods, SCHEDULER[path])
        spent = counters.spent_since(before, sum(t.bound is not None for t in times))
    finally:
        drop_namespace(core, ns)
    return make_arm(size, path, round_, times, best_nodes, spent)


def run_sizes(cluster: local_cluster.Cluster, sizes: Sequence[int], paths: Sequence[Path_], pods: int, rounds: int,
              log: Callable[[str], None]) -> tuple[list[Arm], dict[int, tuple[float, float]]]:
    """Grow the fleet to each size in turn and run every path's arms there: the arms, and per size its
    (wall, fleet) seconds."""
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    core: Any = kubernetes.client.CoreV1Api(api)
    # left by an interrupted run on a kept cluster
    delete_nodes(core, [n.metadata.name for n in core.list_node().items if n.metadata.name.startswith("sg-")])
    barrier_ns = make_namespace(core, "sg-barrier", opted_in=False)
    made: list[NodeSpec] = []
    arms: list[Arm] = []
    size_seconds: dict[int, tuple[float, float]] = {}
    try:
        for size in sorted(sizes):
            started = time.monotonic()
            fleet = make_layout(size)
            create_nodes(core, fleet[len(made):], barrier_ns)
            made = fleet
            barrier(api, cluster, f"sg-barrier-{size}", [SCHEDULER[p] for p in paths], barrier_ns)
            delete_nodes(core, [f"sg-barrier-{size}"])  # the MI300X node: no Pod of the class can use it
            fleet_seconds = time.monotonic() - started
            log(f"single: {size} nodes made in {fleet_seconds:.0f} s")
            best_nodes = {n.name for n in fleet if n.product == BEST.product}
            for round_, path in arm_order(paths, rounds):
                arm = run_arm(api, cluster, size, path, round_, pods, best_nodes)
                arms.append(arm)
                log(f"single: {size} nodes, round {round_ + 1}, {path}: {len(arm.seconds_to_bind)} bound, "
                    f"{arm.on_best} on {BEST.name}, ms from the create call "
                    f"{[round(1000 * x) for x in arm.seconds_to_bind]}, from ADDED "
                    f"{[round(1000 * x) for x in arm.watch_seconds]}, {arm.spent}")
            size_seconds[size] = (time.monotonic() - started, fleet_seconds)
    finally:
        drop_namespace(core, barrier_ns)
        delete_nodes(core, [n.name for n in made])
    return arms, size_seconds


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench single", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="fleet sizes, grown in turn (default %(default)s)")
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                   help=f"the schedulers compared, taking turns, of {', '.join(PATHS)} (default %(default)s)")
    p.add_argument("--pods", type=int, default=20, help="Pods per arm (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of every path's arm (default %(default)s)")
    p.add_argument("--section", default="single", help="the section of --output written (default %(default)s)")
    p.add_argument("--label", default="", help="said in the section's heading, e.g. `before ...`")
    p.add_argument("--note", default="", help="a paragraph under the section's heading")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    named = args.paths.split(",")
    paths = [path for path in PATHS if path in named]
    unknown = set(named) - set(PATHS)
    if unknown or not paths:
        p.error(f"--paths: unknown {', '.join(sorted(unknown)) or 'none given'}; choose from {', '.join(PATHS)}")
    room = BEST.gpus * min(len([n for n in make_layout(s) if n.product == BEST.product]) for s in sizes)
    if args.pods > room:
        p.error(f"--pods {args.pods}: more one-GPU Pods than the {room} GPUs of {BEST.name} at the smallest size")
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    with local_cluster.running(args.cluster_dir) as cluster:
        arms, size_seconds = run_sizes(cluster, sizes, paths, args.pods, args.rounds, log)
    argv = list(sys.argv[1:] if argv is None else argv)
    text = render(arms, Setting(command_line(argv), command_line(argv, measuring_only=True), f"{measured_at()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                                local_cluster.kube_version(), args.label, args.note, args.pods, args.rounds,
                                size_seconds, time.monotonic() - started))
    print(text)
    write_section(args.output, args.section, text)
    return 0
