"""`python -m bench pod_events`: the Pod watch's CPU per event, by kind of event, reading every line in full
(as the watch did) and looking at the raw line first (as it does), interleaved in one run.

In-process, no I/O. A `LiveInventory` that is not started (it applies each event as it reads it) holds
`--held` GPU Pods bound to GPU nodes, listed as the watch lists them; lines written as the API server writes
them are fed to the pods reflector's own `read` (the line, then the check, the decode, the reduce and the
apply). Kinds of event:

  cpu        a Deployment's Pod asking for no GPU, bound and running, its status updated (what most Pod
             events of a busy cluster are: CPU services, batch, CI)
  gpu        a GPU Pod the view holds, its status updated (decoded either way)
  bookmark   a BOOKMARK (decoded either way: its resourceVersion is what the watch resumes from)

Each round runs every kind in both arms (`decode`: the check off; `check`: on), the arms' order swapped
from one round to the next. CPU is the thread's own (`time.thread_time`), so other work on the machine
does not count; reported: the median over the rounds of µs per event, and the median of the per-round ratios.

    python -m bench pod_events [--events 2000] [--rounds 7] [--held 5000] [--output bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.common.commit import REPO_ROOT, measured_at
from bench.common.noapi import NoApi
from bench.common.workload import make_cluster_pod, make_deployment_pod, put_in_served_order

RESULTS = REPO_ROOT / "bench" / "RESULTS.md"
SECTION = "pod-events"
KINDS = ("cpu", "gpu", "bookmark")
ARMS = ("decode", "check")
TS = "2025-11-20T09:14:07Z"


def running(pod: dict[str, Any], *, name: str, uid: str, node: str, gpus: int) -> dict[str, Any]:
    """The Deployment's Pod (bench/common/workload.py) as a watch sends it once it runs on `node`."""
    meta = pod["metadata"]
    meta.update(name=name, uid=uid, resourceVersion="1", creationTimestamp=TS)
    meta["annotations"].pop("gpu-class.io/class")
    spec, status = pod["spec"], pod["status"]
    if gpus:
        meta["annotations"].update({"gpu-class.io/class": "high", "gpu-class.io/types": "H100,A100"})
        spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    spec["nodeName"] = node
    status.update(phase="Running", hostIP="10.0.3.17", podIP="100.64.3.9", startTime=TS, conditions=[
        {"type": t, "status": "True", "lastTransitionTime": TS}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")])
    status["containerStatuses"] = [{
        "name": c["name"], "ready": True, "restartCount": 0, "image": c["image"],
        "imageID": c["image"].split(":")[0] + "@sha256:" + "ab" * 32, "containerID": "containerd://" + "cd" * 32,
        "started": True, "state": {"running": {"startedAt": TS}}} for c in spec["containers"]]
    return put_in_served_order(pod)


HELD_UID = "22222222-0000-4000-8000-000000000000"


def gpu_pod_held() -> dict[str, Any]:
    """The GPU Pod whose status updates the gpu events are; the view holds it from its list."""
    return running(make_deployment_pod(), name="trainer-7d9c6b5f4-held0", uid=HELD_UID, node="gpu-node-0", gpus=1)


def event_lines(kind: str, count: int, first_rv: int) -> list[bytes]:
    """`count` watch lines of one kind, each with a resourceVersion of its own (and for cpu, a Pod of its own)."""
    if kind == "bookmark":
        return [b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"%d"}}}'
                % (first_rv + i) for i in range(count)]
    pod = gpu_pod_held() if kind == "gpu" else running(
        make_deployment_pod(), name="web-7d9c6b5f4-{name}", uid="{uid}", node="cpu-node-0", gpus=0)
    template = json.dumps({"type": "MODIFIED", "object": pod}, separators=(",", ":")).replace(
        '"resourceVersion":"1"', '"resourceVersion":"{rv}"')
    return [template.replace("{name}", f"{i:05x}").replace("{uid}", f"00000000-0000-4000-8000-{i:012x}").replace(
        "{rv}", str(first_rv + i)).encode() for i in range(count)]


def inventory_holding(held: int) -> Any:
    """A LiveInventory, not started, with `held` GPU Pods bound and the gpu events' Pod (their uids are what
    the check looks up)."""
    from webhook.core.catalog.loading import load_default_catalog
    from webhook.cluster.watch import LiveInventory

    api: Any = NoApi()  # stands in for the kubernetes client's CoreV1Api
    inventory = LiveInventory(load_default_catalog(), api=api, watch_pods=True)
    pods = [make_cluster_pod(i, f"gpu-node-{i % 500}", 1) for i in range(held)]
    for i, pod in enumerate(pods):
        pod["metadata"]["uid"] = f"11111111-0000-4000-8000-{i:012x}"
    inventory.pods_watch.replace([v for v in map(inventory.pods_watch.reduce, [*pods, gpu_pod_held()]) if v is not None])
    return inventory


def cpu_us_per_event(read: Callable[[bytes], None], lines: Sequence[bytes]) -> float:
    started = time.thread_time()
    for line in lines:
        read(line)
    return (time.thread_time() - started) / len(lines) * 1e6


def measure(events: int, rounds: int, held: int) -> dict[tuple[str, str], list[float]]:
    """µs per event, per round, for each (kind, arm)."""
    inventory = inventory_holding(held)
    pods = next(r for r in inventory.reflectors if r.name == "pods")
    check = pods.skip
    lines = {k: event_lines(k, events, 1000) for k in KINDS}
    per_round: dict[tuple[str, str], list[float]] = {(k, a): [] for k in KINDS for a in ARMS}
    for r in range(rounds + 1):  # round 0 warms up and is not counted
        for kind in KINDS:
            for arm in (ARMS if r % 2 else ARMS[::-1]):
                pods.skip = check if arm == "check" else None
                pods.skipped = 0
                us = cpu_us_per_event(pods.read, lines[kind])
                skipped = pods.skipped
                if arm == "decode" or kind != "cpu":
                    assert skipped == 0, f"{kind}/{arm}: {skipped} events skipped"
                else:
                    assert skipped == events, f"{kind}/{arm}: {skipped} of {events} events skipped"
                if r:
                    per_round[(kind, arm)].append(us)
    if len(inventory.state.pods) != held + 1:
        raise AssertionError(f"the bench's events changed the view: {len(inventory.state.pods)} Pods held, not {held + 1}")
    return per_round


LABELS = {"cpu": "a Pod asking for no GPU, status update", "gpu": "a GPU Pod the view holds, status update",
          "bookmark": "BOOKMARK"}


def report(per_round: dict[tuple[str, str], list[float]], sizes: dict[str, int]) -> str:
    rows = ["| event | bytes | µs per event, every line decoded | µs per event, raw line checked first | "
            "checked / decoded (median of rounds) |", "| --- | ---: | ---: | ---: | ---: |"]
    for kind in KINDS:
        before, after = per_round[(kind, "decode")], per_round[(kind, "check")]
        ratio = statistics.median(a / b for a, b in zip(after, before))
        rows.append(f"| {LABELS[kind]} | {sizes[kind]:,} | {statistics.median(before):.1f} | "
                    f"{statistics.median(after):.1f} | {ratio:.2f} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench pod_events", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=2000, help="events of each kind per arm and round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--held", type=int, default=5000, help="GPU Pods bound in the view")
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    per_round = measure(args.events, args.rounds, args.held)
    sizes = {k: len(event_lines(k, 1, 1000)[0]) for k in KINDS}
    table = report(per_round, sizes)
    print(table)
    from bench.common.sections import write_section

    command = " ".join(["python -m bench pod_events", *(argv if argv is not None else sys.argv[1:])]).strip()
    header = (f"## The Pod watch's CPU per event (`{command}`)\n\n{measured_at()}, {os.cpu_count()} CPUs, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python {sys.version.split()[0]}: "
              f"{args.events:,} events of each kind per arm and round, {args.rounds} rounds (arms in turn), "
              f"{args.held:,} GPU Pods in the view. Each line goes through the pods reflector's own read: decoded, reduced "
              f"and applied (the view unchanged: nothing is published), or, checked first, skipped with its "
              f"resourceVersion kept. CPU time of the reading thread (time.thread_time).\n\n")
    write_section(args.output, SECTION, header + table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
