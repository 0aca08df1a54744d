"""`python -m bench wait`: do Pods waiting for their best type (gpu-class.io/max-wait) cost the scheduler?

On the local control plane (tests/e2e/local-cluster), the placement benchmark's fleet (5,000 nodes by
default, bench/placement/placement_model.py): the best type of class `high`, H100, is three 8-GPU nodes,
all of their GPUs taken before each arm by one-GPU Pods bound there directly; the class's lesser types
(L40S, A100) are hundreds of nodes with room. Arms in turn (bench/wait/wait_model.py's arm_order):

  none: no waiting Pods;
  waiting: `--waiting` class-`high` Pods with `gpu-class.io/max-wait` (1h: no budget ends during the
    run), created through the webhook for gpu-class-scheduler; the arm goes on once the scheduler has
    tried each and found it Unschedulable for H100.

In each arm, on gpu-class-scheduler's own counters: (a) its attempts over a quiet interval, in which
nothing in the cluster changes (a waiting Pod retried on a timer would show here); (b) `--others`
single class-`high` Pods without a wait, one after another (each lands on a lesser type at once):
their create-to-bind times, and the attempts they took; (c) one event of each kind (bench/wait/
wait_model.py's EVENTS) and the attempts and queued Pods that followed it. In the last waiting arm,
(d) nothing more happening, kube-scheduler's own flush of Pods left unschedulable for 5 minutes, and
what it costs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

import kubernetes
from kubernetes.client.exceptions import ApiException

from bench.common.commit import measured_at
from bench.common.polling import wait_until
from bench.common.sections import write_section
from bench.placement.placement import PENDING_SECONDS, REPO_ROOT, read_catalog
from bench.placement.placement_cluster import (
    barrier, create_nodes, delete_nodes, drop_namespace, make_namespace, parallel, pod_template, run_stream,
    scheduler_metrics,
)
from bench.placement.placement_model import GPU, NodeSpec, Workload, make_fleet
from bench.wait.wait_model import (
    EVENTS, FLUSH_EVENT, Arm, ArmRun, Cost, Counters, EventCost, EventKind, Setting, arm_order, cost_between,
    is_busy_loop, read_counters, render,
)
from webhook.core.catalog.model import Catalog

sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))
import local_cluster  # noqa: E402  (tests/e2e is not a package)

CoreApi = Any
WAIT_CLASS = "high"
BEST_PRODUCT = "NVIDIA-H100-80GB-HBM3"  # make_fleet's best-type nodes of class `high`
LESSER_NODE = ("NVIDIA-A100-SXM4-80GB", 8, 64, 512)  # product, GPUs, cores, GiB: the lesser type an event adds
SCHEDULER = local_cluster.STRICT_SCHEDULER
SETTLE_STILL_SECONDS = 4.0  # counters unchanged this long: the scheduler has done what the event set off
MAX_WAIT_ANNOTATION = "gpu-class.io/max-wait"


class Scheduler:
    """gpu-class-scheduler's counters, read from its /metrics."""

    def __init__(self, cluster: local_cluster.Cluster) -> None:
        assert cluster.ports is not None
        self.cluster, self.port = cluster, cluster.ports.gpu_scheduler

    def read(self) -> Counters:
        return read_counters(scheduler_metrics(self.cluster, self.port))

    def settled(self, least_seconds: float = SETTLE_STILL_SECONDS, most_seconds: float = 120.0) -> Counters:
        """The counters once they have stood still for SETTLE_STILL_SECONDS (and at least `least_seconds`
        have passed): what a change set off has run its course, backoffs included."""
        started = changed = time.monotonic()
        last = self.read()
        while True:
            time.sleep(0.5)
            now_counters, now = self.read(), time.monotonic()
            if now_counters != last:
                last, changed = now_counters, now
            if now - changed >= SETTLE_STILL_SECONDS and now - started >= least_seconds:
                return last
            if now - started > most_seconds:
                raise RuntimeError(f"gpu-class-scheduler's counters still moving after {most_seconds:.0f} s")


def _pods(core: CoreApi, namespace: str) -> list[dict[str, Any]]:
    return list(json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"])


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def take_best(core: CoreApi, namespace: str, best: Sequence[NodeSpec], cpu_node: str) -> None:
    """Every GPU of the best type taken by a one-GPU Pod bound there directly (no webhook, no scheduler),
    and a CPU Pod on a CPU-only node, for the events to delete."""
    def held(node: NodeSpec, i: int) -> dict[str, Any]:
        return {"metadata": {"name": f"held-{node.name}-{i}"},
                "spec": {"nodeName": node.name, "tolerations": [{"operator": "Exists"}],
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "gpu", "image": "registry.example/batch:1",
                                         "resources": {"limits": {GPU: "1"}, "requests": {"cpu": "10m"}}}]}}
    pods = [held(n, i) for n in best for i in range(n.gpus)]
    pods.append({"metadata": {"name": "cpu-work"},
                 "spec": {"nodeName": cpu_node, "terminationGracePeriodSeconds": 0,
                          "containers": [{"name": "cpu", "image": "registry.example/batch:1",
                                          "resources": {"requests": {"cpu": "100m"}}}]}})
    parallel(lambda p: core.create_namespaced_pod(namespace, p, _preload_content=False), pods)


def create_waiting(core: CoreApi, namespace: str, count: int, max_wait: str) -> None:
    """`count` class-`high` one-GPU Pods with a wait, through the webhook, for gpu-class-scheduler. A
    create the backstop refused (the webhook did not answer in time: it fails open) is made again."""
    def create(i: int) -> None:
        pod = pod_template(Workload(f"waiting-{i}", WAIT_CLASS, 1, 500), SCHEDULER, "Never")
        pod["metadata"]["name"] = f"waiting-{i}"
        pod["metadata"]["annotations"][MAX_WAIT_ANNOTATION] = max_wait
        for _ in range(5):
            try:
                core.create_namespaced_pod(namespace, pod, _preload_content=False)
                return
            except ApiException as e:
                if not (e.status == 403 and "gpu-class did not place this Pod" in str(e.body)):
                    raise
        raise RuntimeError(f"waiting-{i}: refused five times by the backstop")
    parallel(create, range(count))


def wait_all_tried(core: CoreApi, namespace: str, count: int, best_type: str) -> None:
    """Until the scheduler has tried every waiting Pod and found it Unschedulable; each must still hold its
    wait and name the best type first (the webhook keeps both on the strict path), or nothing is measured."""
    def tried() -> bool:
        pods = _pods(core, namespace)
        return len(pods) == count and all(_unschedulable(p) for p in pods)
    wait_until(f"{count} waiting Pods tried by the scheduler", tried, seconds=600, interval=1.0)
    for p in _pods(core, namespace):
        annotations = p["metadata"].get("annotations") or {}
        best_first = annotations.get("gpu-class.io/types", "").split(",")[0] == best_type
        if MAX_WAIT_ANNOTATION not in annotations or not best_first:
            raise RuntimeError(f"{p['metadata']['name']}: no wait for {best_type} kept by the webhook: {annotations}")
        if p["spec"].get("nodeName"):
            raise RuntimeError(f"{p['metadata']['name']} was bound while {best_type} was full")


def _bound(core: CoreApi, namespace: str | None) -> int:
    return sum(bool(p["spec"].get("nodeName")) for p in _pods(core, namespace)) if namespace else 0


def run_event(core: CoreApi, scheduler: Scheduler, kind: EventKind, held_ns: str, wait_ns: str | None,
              tag: str, best: NodeSpec, added: list[str]) -> EventCost:
    """One event, and what followed it until the scheduler's counters stood still."""
    bound_before = _bound(core, wait_ns)
    before = scheduler.read()
    started = time.monotonic()
    if kind == "cpu-node-added":
        node = NodeSpec(f"wt-{tag}-cpu", "", 0, 16000, 64 * 1024, tainted=False)
        create_nodes(core, [node], held_ns)
        added.append(node.name)
    elif kind == "lesser-node-added":
        product, gpus, cores, gib = LESSER_NODE
        node = NodeSpec(f"wt-{tag}-a100", product, gpus, cores * 1000, gib * 1024, tainted=True)
        create_nodes(core, [node], held_ns)
        added.append(node.name)
    elif kind == "cpu-pod-deleted":
        core.delete_namespaced_pod("cpu-work", held_ns, grace_period_seconds=0)
    else:
        core.delete_namespaced_pod(f"held-{best.name}-0", held_ns, grace_period_seconds=0)
    after = scheduler.settled()
    return EventCost(kind, cost_between(before, after, time.monotonic() - started),
                     _bound(core, wait_ns) - bound_before)


def wait_flush(scheduler: Scheduler, most_seconds: float = 420.0) -> Cost:
    """Nothing changing, until kube-scheduler's own flush (FLUSH_EVENT) has queued Pods and what it set off
    has run its course: its cost."""
    before, started = scheduler.read(), time.monotonic()
    wait_until("kube-scheduler's flush of unschedulable Pods",
               lambda: scheduler.read().queued.get(FLUSH_EVENT, 0.0) > before.queued.get(FLUSH_EVENT, 0.0),
               seconds=most_seconds, interval=2.0)
    return cost_between(before, scheduler.settled(), time.monotonic() - started)


def run_arm(api: Any, cluster: local_cluster.Cluster, catalog: Catalog, arm: Arm, round_: int, *,
            fleet: Sequence[NodeSpec], waiting: int, others: int, quiet_seconds: float, max_wait: str, events: bool,
            flush: bool,
            log: Callable[[str], None]) -> ArmRun:
    core: CoreApi = kubernetes.client.CoreV1Api(api)
    scheduler = Scheduler(cluster)
    best = [n for n in fleet if n.product == BEST_PRODUCT]
    best_type = catalog.type_of_product(BEST_PRODUCT) or BEST_PRODUCT
    cpu_node = next(n.name for n in fleet if not n.product)
    tag = f"{arm[:4]}{round_}-{uuid.uuid4().hex[:4]}"
    held_ns = make_namespace(core, "wt-held", opted_in=False)
    wait_ns = make_namespace(core, "wt-wait", opted_in=True) if arm == "waiting" else None
    others_ns = make_namespace(core, "wt-other", opted_in=True)
    added: list[str] = []
    run = ArmRun(arm, round_, waiting if wait_ns else 0)
    try:
        take_best(core, held_ns, best, cpu_node)
        if wait_ns:
            create_waiting(core, wait_ns, waiting, max_wait)
            wait_all_tried(core, wait_ns, waiting, best_type)
            log(f"wait: {arm} {round_ + 1}: {waiting} Pods waiting for {best_type}")
        before = scheduler.settled()
        started = time.monotonic()
        time.sleep(quiet_seconds)
        run.quiet = cost_between(before, scheduler.read(), time.monotonic() - started)
        log(f"wait: {arm} {round_ + 1}: quiet {run.quiet}")
        before, started = scheduler.read(), time.monotonic()
        outcomes = run_stream(api, others_ns, [Workload(f"other-{i}", WAIT_CLASS, 1, 500) for i in range(others)],
                              SCHEDULER, PENDING_SECONDS)
        run.others = cost_between(before, scheduler.settled(), time.monotonic() - started)
        product_of = {n.name: n.product for n in fleet}
        for o in outcomes:
            if o.seconds_to_bind is not None:
                run.others_seconds.append(o.seconds_to_bind)
            where = (catalog.type_of_product(product_of.get(o.node, "")) or o.node) if o.node else "Pending"
            run.others_types[where] = run.others_types.get(where, 0) + 1
        log(f"wait: {arm} {round_ + 1}: others {run.others}, {run.others_types}")
        for kind in EVENTS if events else ():
            run.events.append(run_event(core, scheduler, kind, held_ns, wait_ns, tag, best[0], added))
            log(f"wait: {arm} {round_ + 1}: {run.events[-1]}")
        if wait_ns and flush:
            run.flush = wait_flush(scheduler)
            log(f"wait: {arm} {round_ + 1}: flush {run.flush}")
        if wait_ns:
            run.still_waiting = waiting - _bound(core, wait_ns)
            if is_busy_loop(run.quiet, run.waiting):
                log(f"wait: {arm} {round_ + 1}: the waiting Pods were retried on their own: {run.quiet}")
    finally:
        # the waiting Pods first: a bound Pod deleted while they wait would bring them back
        for ns in (wait_ns, others_ns, held_ns):
            if ns:
                drop_namespace(core, ns)
        delete_nodes(core, added)
    return run


def run_all(cluster: local_cluster.Cluster, args: argparse.Namespace,
            log: Callable[[str], None]) -> tuple[list[ArmRun], Catalog, list[NodeSpec]]:
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    core: CoreApi = kubernetes.client.CoreV1Api(api)
    catalog = read_catalog()
    # left by an interrupted run on a kept cluster
    delete_nodes(core, [n.metadata.name for n in core.list_node().items if n.metadata.name.startswith(("pl-", "wt-"))])
    fleet = make_fleet(args.nodes)
    fill_ns = make_namespace(core, "wt-fill", opted_in=False)
    barrier_node = f"wt-barrier-{uuid.uuid4().hex[:4]}"
    runs = []
    try:
        started = time.monotonic()
        create_nodes(core, fleet, fill_ns)
        barrier(api, cluster, barrier_node, [SCHEDULER], fill_ns)
        log(f"wait: {len(fleet)} nodes made in {time.monotonic() - started:.0f} s")
        order = arm_order(args.rounds)
        last_waiting = max(i for i, (arm, _) in enumerate(order) if arm == "waiting")
        for i, (arm, r) in enumerate(order):
            runs.append(run_arm(api, cluster, catalog, arm, r, fleet=fleet, waiting=args.waiting, others=args.others,
                                quiet_seconds=args.quiet_seconds, max_wait=args.max_wait, events=not args.no_events,
                                flush=i == last_waiting and not args.no_flush, log=log))
    finally:
        drop_namespace(core, fill_ns)
        delete_nodes(core, [n.name for n in fleet] + [barrier_node])
    return runs, catalog, fleet


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench wait", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000, help="fleet size (default %(default)s)")
    p.add_argument("--waiting", type=int, default=200, help="waiting Pods in a `waiting` arm (default %(default)s)")
    p.add_argument("--others", type=int, default=20, help="other Pods per arm (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of both arms (default %(default)s)")
    p.add_argument("--quiet-seconds", type=float, default=60.0, help="the quiet interval (default %(default)s)")
    p.add_argument("--max-wait", default="1h", help="the waiting Pods' gpu-class.io/max-wait (default %(default)s)")
    p.add_argument("--no-events", action="store_true", help="leave out the events")
    p.add_argument("--no-flush", action="store_true",
                   help="leave out the wait for kube-scheduler's 5-minute flush in the last waiting arm")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    with local_cluster.running(args.cluster_dir) as cluster:
        runs, catalog, fleet = run_all(cluster, args, log)
    best = [n for n in fleet if n.product == BEST_PRODUCT]
    command = "python -m bench wait" + (" " + " ".join(argv) if argv else "")
    text = render(runs, Setting(command, f"{measured_at()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                                local_cluster.kube_version(), len(fleet),
                                catalog.type_of_product(BEST_PRODUCT) or BEST_PRODUCT, sum(n.gpus for n in best),
                                args.waiting, args.max_wait, args.others, time.monotonic() - started))
    print(text)
    # the default run is the one the docs cite; any other is a section of its own
    defaults = (args.nodes, args.waiting, args.rounds) == (5000, 200, 2) and not (args.no_events or args.no_flush)
    write_section(args.output, "wait" if defaults else "wait-variant", text)
    return 0
