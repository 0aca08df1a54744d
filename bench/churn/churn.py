"""`python -m bench churn`: does NodeLabelIndex keep narrowing, and placement stay right, through node churn?

In the manner of Kubernetes' scheduler_perf churn: on the local control plane (tests/e2e/local-cluster),
the placement benchmark's fleet (5,000 nodes by default, bench/placement/placement_model.py: the best
type of class `high`, H100, three nodes among thousands), then bursts of node changes (`--bursts`,
1,000 changes in all by default: deletes, adds, and relabels that move nodes between GPU types and in
and out of the class; bench/churn/churn_model.py plans them), written 8 at a time while class Pods are
created one after another (`--during`). After each burst, once gpu-class-scheduler and the webhook have
seen all of it (placement_cluster's barrier), a stream of `--pods` class Pods, the last on its own; then,
after a quiet pause, a last stream (`end`). `--runs` (2) such runs, each from a fresh fleet.

Per phase, from gpu-class-scheduler's own /metrics: the PreFilter cycles by outcome (narrowed, widened,
fell back to every node) in the burst's window and in the stream after it, the index's repairs and
PreFilter's time; and the placement of the stream after it, judged from the cluster as it stood when the
stream began (bench/placement/placement_model.py's judge). The Pods of every phase stay bound, so the
best type fills and the best nodes with room move as nodes come and go.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

import kubernetes
from kubernetes.client.exceptions import ApiException

from bench.churn.churn_model import (
    BEST_PRODUCT, Change, Counters, Phase, Products, Setting, Spent, apply_changes, best_type_changes, count_changes,
    fleet_products, holds, make_pods, plan_burst, read_counters, render, spent_between,
)
from bench.common.commit import measured_at
from bench.common.sections import write_section
from bench.placement.judge_catalog import JudgeCatalog
from bench.placement.placement import PENDING_SECONDS, REPO_ROOT, read_catalog, read_judge_catalog
from bench.placement.placement_cluster import (
    PRODUCT_LABEL, barrier, cluster_state, create_node, create_nodes, delete_nodes, drop_namespace, make_namespace,
    parallel, run_stream, scheduler_metrics,
)
from bench.placement.placement_model import NodeSpec, Outcome, judge, make_fleet, merge
from webhook.core.catalog.model import Catalog

sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))
import local_cluster  # noqa: E402  (tests/e2e is not a package)

CoreApi = Any
SCHEDULER = local_cluster.STRICT_SCHEDULER
DEFAULT_BURSTS = (100, 150, 200, 250, 300)


def write_change(core: CoreApi, change: Change, fill_ns: str) -> None:
    if change.kind == "delete":
        try:
            core.delete_node(change.node, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise
    elif change.kind == "add":
        assert change.added is not None
        create_node(core, change.added, fill_ns)
    else:
        core.patch_node(change.node, {"metadata": {"labels": {PRODUCT_LABEL: change.product}}}, _preload_content=False)


class Run:
    """The cluster, its fleet as the bench has written it, and the namespaces of the run."""

    def __init__(self, cluster: local_cluster.Cluster, catalog: Catalog, judged: JudgeCatalog,
                 args: argparse.Namespace, log: Callable[[str], None]) -> None:
        self.api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.api.configuration.connection_pool_maxsize = 16
        self.core: CoreApi = kubernetes.client.CoreV1Api(self.api)
        self.cluster, self.catalog, self.args, self.log = cluster, catalog, args, log
        self.judged = judged  # the same catalog, read by the placement judge's own code
        self.nodes: dict[str, NodeSpec] = {}
        self.barrier_node: str | None = None
        self.fill_ns = self.pods_ns = ""

    def counters(self) -> Counters:
        """gpu-class-scheduler's counters now, from its /metrics."""
        assert self.cluster.ports is not None
        return read_counters(scheduler_metrics(self.cluster, self.cluster.ports.gpu_scheduler))

    def see_all(self, tag: str) -> None:
        """Until gpu-class-scheduler and the webhook have seen every write so far."""
        if self.barrier_node:
            delete_nodes(self.core, [self.barrier_node])
        self.barrier_node = f"ch-barrier-{tag}-{uuid.uuid4().hex[:4]}"
        barrier(self.api, self.cluster, self.barrier_node, [SCHEDULER], self.fill_ns)

    def stream(self, phase: Phase, tag: str) -> None:
        """The stream after a burst, the last Pod on its own: placement judged from the cluster's state now."""
        pods = make_pods(tag, self.args.pods)
        start = cluster_state(self.core, self.judged)
        before = self.counters()
        outcomes: list[Outcome] = run_stream(self.api, self.pods_ns, pods[:-1], SCHEDULER, PENDING_SECONDS)
        before_last = self.counters()
        outcomes += run_stream(self.api, self.pods_ns, pods[-1:], SCHEDULER, PENDING_SECONDS)
        after = self.counters()
        phase.after, phase.last = spent_between(before, after), spent_between(before_last, after)
        phase.verdicts = merge(list(judge(start, outcomes, self.judged).values()))

    def burst(self, number: int, size: int, products: Products) -> Phase:
        tag = f"b{number}"
        changes = plan_burst(self.nodes, size, tag, products)
        phase = Phase(f"burst {number}", count_changes(changes), best_type_changes(changes, BEST_PRODUCT))
        during = make_pods(f"{tag}-during", self.args.during)
        before = self.counters()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            streaming = pool.submit(run_stream, self.api, self.pods_ns, during, SCHEDULER, PENDING_SECONDS)
            started = time.monotonic()
            parallel(lambda c: write_change(self.core, c, self.fill_ns), changes)
            written = time.monotonic()
            outcomes = streaming.result()
        phase.during = spent_between(before, self.counters())
        phase.during_pods, phase.during_bound = len(during), sum(o.node is not None for o in outcomes)
        phase.during_in_flight = sum(o.bound is not None and o.bound < written for o in outcomes)
        phase.write_seconds = written - started
        self.nodes = apply_changes(self.nodes, changes)
        self.see_all(tag)
        self._count(phase)
        self.stream(phase, tag)
        return phase

    def _count(self, phase: Phase) -> None:
        phase.nodes = len(self.nodes)
        phase.best_nodes = sum(n.product == BEST_PRODUCT for n in self.nodes.values())

    def run(self) -> list[Phase]:
        # left by an interrupted run on a kept cluster
        delete_nodes(self.core, [n.metadata.name for n in self.core.list_node().items
                                 if n.metadata.name.startswith(("pl-", "ch-"))])
        fleet = make_fleet(self.args.nodes)
        self.nodes = {n.name: n for n in fleet}
        self.fill_ns = make_namespace(self.core, "ch-fill", opted_in=False)
        self.pods_ns = make_namespace(self.core, "ch-pods", opted_in=True)
        products = fleet_products(self.catalog)
        phases: list[Phase] = []
        try:
            started = time.monotonic()
            create_nodes(self.core, fleet, self.fill_ns)
            self.see_all("start")
            self.log(f"churn: {len(fleet)} nodes made in {time.monotonic() - started:.0f} s")
            phases.append(self._quiet("start"))
            for i, size in enumerate(self.args.bursts, 1):
                phases.append(self.burst(i, size, products))
                self._say(phases[-1])
            time.sleep(self.args.settle_seconds)
            phases.append(self._quiet("end"))
        finally:
            drop_namespace(self.core, self.pods_ns)
            drop_namespace(self.core, self.fill_ns)
            delete_nodes(self.core, [*self.nodes, *([self.barrier_node] if self.barrier_node else [])])
        return phases

    def _quiet(self, name: str) -> Phase:
        phase = Phase(name)
        self._count(phase)
        self.stream(phase, name)
        self._say(phase)
        return phase

    def _say(self, p: Phase) -> None:
        self.log(f"churn: {p.name}: {dict(p.changes)}; nodes {p.nodes} ({p.best_nodes} best); "
                 f"during {_brief(p.during)}, "
                 f"{p.during_bound}/{p.during_pods} bound; after {_brief(p.after)}; last {_brief(p.last)}; "
                 f"placement {p.verdicts.right}/{p.verdicts.placed + p.verdicts.wrongly_pending}"
                 + (f" ({'; '.join(p.verdicts.wrong[:3])})" if p.verdicts.wrong else "") + f"; {p.narrowing}")


def _brief(s: Spent | None) -> str:
    return "-" if s is None else f"{dict(s.cycles)} repairs {s.repairs}"


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(int(x) for x in text.split(","))
    if not sizes or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: burst sizes are positive, comma-separated")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench churn", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000, help="fleet size (default %(default)s)")
    p.add_argument("--bursts", type=_sizes, default=DEFAULT_BURSTS,
                   help="node changes per burst, comma-separated (default %(default)s: 1,000 in all)")
    p.add_argument("--pods", type=int, default=20, help="Pods in the stream after each burst (default %(default)s)")
    p.add_argument("--during", type=int, default=20,
                   help="Pods created while each burst is written (default %(default)s)")
    p.add_argument("--runs", type=int, default=2, help="runs, each from a fresh fleet (default %(default)s)")
    p.add_argument("--settle-seconds", type=float, default=5.0,
                   help="the quiet pause before the last stream (default %(default)s)")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    if args.pods < 2:
        p.error("--pods: at least 2 (the last Pod is judged on its own)")
    if args.runs < 1:
        p.error("--runs: at least 1")
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    catalog, judged = read_catalog(), read_judge_catalog()
    runs = []
    with local_cluster.running(args.cluster_dir) as cluster:
        for i in range(args.runs):
            log(f"churn: run {i + 1} of {args.runs}")
            runs.append(Run(cluster, catalog, judged, args, log).run())
    command = "python -m bench churn" + (" " + " ".join(argv) if argv else "")
    text = render(runs, Setting(command, f"{measured_at()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                                  local_cluster.kube_version(), args.nodes,
                                  catalog.type_of_product(BEST_PRODUCT) or BEST_PRODUCT, runs[0][0].best_nodes,
                                  args.bursts, args.pods, args.during, time.monotonic() - started))
    print(text)
    # the default run is the one the docs cite; any other is a section of its own
    defaults = (args.nodes, args.bursts, args.pods, args.during, args.runs) == (5000, DEFAULT_BURSTS, 20, 20, 2)
    write_section(args.output, "churn" if defaults else "churn-variant", text)
    return 1 if any(holds(phases) for phases in runs) else 0
