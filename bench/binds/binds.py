"""`python -m bench binds`: what judging each bind (webhook/core/reports/fidelity.py) costs the watch, in-process.

A LiveInventory that is not started (no threads, no HTTP) holds a fleet of GPU nodes
(bench/common/workload.py's mix, a bound GPU Pod on each) and 1,000 Pods gpu-class placed and not yet
bound: half of class high (performance), half of class standard (balanced), each with the types the
planner gives it on that fleet. The bench then feeds it the 1,000 bind events as its Pod watch
would: each event's JSON line read as the watch reads it (watch._events), then handed to the
inventory, which applies it, publishes a snapshot and reports the bind to its observer. The
observer is the server's own (webhook.serving.metrics.InventoryMetrics): in one arm it judges and
counts every bind, in the other the same observer skips the judgment. Arms alternate round by round (a fresh inventory each round).

Reported per bind event: CPU time of the thread that handles it (time.thread_time: the watch thread's
own work, whatever else runs on the machine), the whole event and the judgment alone, mean and p99
over every round, and the burst's total. Writes its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from webhook.cluster.watch import HERALDS, LiveInventory, _events
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.catalog.model import Catalog
from webhook.core.view.pods import UnboundGpuPod
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.planner import plan
from webhook.serving.metrics import InventoryMetrics

from bench.common.noapi import NoApi
from bench.common.sections import write_section
from bench.common.workload import make_cluster_pod, make_fleet

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
CLASSES = ("high", "standard")  # performance: a type order; balanced: every node's share


class TimedMetrics(InventoryMetrics):
    """The server's observer, judging each bind or not, with the CPU time its judgments took."""

    def __init__(self, catalog: Catalog, *, judge: bool) -> None:
        super().__init__(catalog)
        self.judge = judge
        self.judgment_seconds: list[float] = []

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        if self.judge:
            started = time.thread_time()
            super().bound(pod, node, before, counted)
            self.judgment_seconds.append(time.thread_time() - started)


def placed_pod(index: int, class_name: str, types: Sequence[str], node: str | None,
               required: Sequence[tuple[str, Sequence[str]]] = ()) -> dict[str, Any]:
    """A Pod as the webhook leaves it: class and types written, with the required affinity (`required`: label
    key, values) the inventory believes the types by; one GPU."""
    pod = make_cluster_pod(index, node, 1, "Pending")
    pod["metadata"].update(name=f"placed-{index:05d}", namespace="ml-team", uid=f"uid-placed-{index:05d}",
                           creationTimestamp="2025-01-01T00:00:00Z",
                           annotations={"gpu-class.io/class": class_name, "gpu-class.io/types": ",".join(types)})
    if required:
        pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": k, "operator": "In", "values": list(v)}]}
                                  for k, v in required]}}}
    return pod


@dataclass
class Round:
    judged: bool
    event_seconds: list[float] = field(default_factory=list)
    judgment_seconds: list[float] = field(default_factory=list)


def run_round(catalog: Catalog, fleet: list[dict[str, Any]], binds: int, *, judge: bool) -> Round:
    observer = TimedMetrics(catalog, judge=judge)
    api: Any = NoApi()  # stands in for the kubernetes client's CoreV1Api
    inventory = LiveInventory(catalog, api=api, observer=observer)
    observer.watching(tuple(r.name for r in inventory.reflectors), ())
    inventory.nodes_watch.replace([i for i in map(inventory.nodes_watch.reduce, fleet) if i is not None])
    inventory.namespaces_watch.replace([])
    heralds = [r.replace for r in inventory.reflectors if r.name in {h.resource for h in HERALDS}]
    replaces: list[Callable[[list[Any]], None]] = [inventory.dra_watch.replace_slices, inventory.dra_watch.replace_classes,
                                                   inventory.dra_watch.replace_claims, inventory.dra_watch.replace_templates,
                                                   inventory.pools_watch.replace, *heralds]
    for replace in replaces:
        replace([])  # a device-plugin fleet: DRA, NodePools and their heralds read, and empty
    names = [n["metadata"]["name"] for n in fleet]
    bound = [make_cluster_pod(i, names[i], 1) for i in range(len(names))]
    inventory.pods_watch.replace([v for v in map(inventory.pods_watch.reduce, bound) if v is not None])
    snapshot = inventory.snapshot()
    types = {c: plan(placed_pod(0, c, (), None), snapshot, catalog, namespace="ml-team").placement for c in CLASSES}
    allowed = {c: p.types if p is not None else () for c, p in types.items()}
    required = {c: p.required if p is not None else () for c, p in types.items()}
    waiting = [placed_pod(i, CLASSES[i % 2], allowed[CLASSES[i % 2]], None, required[CLASSES[i % 2]])
               for i in range(binds)]
    inventory.pods_watch.replace([v for v in map(inventory.pods_watch.reduce, bound + waiting) if v is not None])
    # each Pod bound to a node of its best type, round robin: what a scheduler keeping the order does
    nodes_of = {t: [n.name for n in inventory.snapshot().nodes.values() if n.offer(t) and n.schedulable]
                for c in CLASSES for t in allowed[c]}
    lines: list[bytes] = []
    for i, pod in enumerate(waiting):
        best = next(t for t in allowed[CLASSES[i % 2]] if nodes_of[t])
        pod["spec"]["nodeName"] = nodes_of[best][i % len(nodes_of[best])]
        lines.append(json.dumps({"type": "MODIFIED", "object": pod}).encode() + b"\n")
    # as a server worker does once its inventory has synced (server.py): the cyclic GC leaves what is
    # there by then alone, so a collection set off during the burst walks only what came after
    gc.collect()
    gc.freeze()
    result = Round(judge)
    for line in lines:
        started = time.thread_time()
        event = next(_events([line]))
        inventory.pods_watch.apply(event["type"], event["object"])
        result.event_seconds.append(time.thread_time() - started)
    result.judgment_seconds = observer.judgment_seconds
    gc.unfreeze()
    return result


def _us(values: Sequence[float], q: float | None = None) -> str:
    if not values:
        return "-"
    if q is None:
        return f"{statistics.fmean(values) * 1e6:,.0f}"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6:,.0f}"


def render(results: dict[int, list[Round]], binds: int, seconds: float, command: str) -> str:
    lines = [
        f"## Judging binds on the watch (`{command}`)",
        "",
        f"Command: `{command}`; {seconds:.0f} s wall. In-process, the server's own inventory and observer fed "
        f"{binds:,} bind events of Pods gpu-class placed (half of class high, half standard), alternating rounds "
        "with and without judging each bind; CPU time of the thread handling each event (bench/binds/binds.py).",
        "",
        "| GPU nodes | judged | bind events | per event, mean us | per event, p99 us | judgment, mean us | "
        "judgment, p99 us | burst of 1,000, ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for nodes, rounds in results.items():
        for judged in (False, True):
            events = [s for r in rounds if r.judged == judged for s in r.event_seconds]
            judgments = [s for r in rounds if r.judged == judged for s in r.judgment_seconds]
            per_burst = statistics.fmean(events) * 1000 * 1000 if events else 0.0
            lines.append(f"| {nodes:,} | {'yes' if judged else 'no'} | {len(events):,} | {_us(events)} | "
                         f"{_us(events, 0.99)} | {_us(judgments)} | {_us(judgments, 0.99)} | {per_burst:,.1f} |")
    lines.append("")
    for nodes, rounds in results.items():
        judgment = statistics.fmean(s for r in rounds if r.judged for s in r.judgment_seconds)
        event = statistics.fmean(s for r in rounds if r.judged for s in r.event_seconds)
        without = statistics.fmean(s for r in rounds if not r.judged for s in r.event_seconds)
        # the judgment is timed directly; the difference of the arms' means is noisier (other work, caches)
        lines.append(f"- {nodes:,} GPU nodes: the judgment takes {judgment * 1e6:,.0f} us of a bind event's "
                     f"{event * 1e6:,.0f} us ({judgment / event:.0%}), {judgment * 1e6:,.0f} ms of CPU for a burst of "
                     f"1,000 binds, in the one worker that counts. Judged bind events against those not judged: "
                     f"{(event - without) * 1e6:+,.0f} us each (the judgment, and what its allocations and memory "
                     "traffic cost the rest, collections and caches, within the rounds' noise).")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench binds", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[100, 5000], help="fleet sizes (default 100 5000)")
    p.add_argument("--binds", type=int, default=1000, help="bind events per round (default 1,000)")
    p.add_argument("--rounds", type=int, default=5, help="rounds per arm and size (default 5)")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--no-write", action="store_true", help="print the section, leave bench/RESULTS.md alone")
    args = p.parse_args(argv)
    started = time.monotonic()
    catalog = load_default_catalog()
    results: dict[int, list[Round]] = {}
    for nodes in args.nodes:
        fleet = make_fleet(nodes)
        results[nodes] = [run_round(catalog, fleet, args.binds, judge=i % 2 == 1) for i in range(2 * args.rounds)]
    command = "python -m bench binds" + (" " + " ".join(argv) if argv else "")
    text = render(results, args.binds, time.monotonic() - started, command)
    print(text)
    if not args.no_write:
        write_section(args.output, "binds", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
