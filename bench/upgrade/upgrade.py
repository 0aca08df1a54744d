"""`python -m bench upgrade`: what one pass of `gpuclass upgrader` costs at 1,000 to 15,000 nodes, in-process.

The fleet has the best type a minority: 3% H100 nodes, two thirds A100-80GB nodes, the rest CPU nodes, 8 GPUs
per GPU node. Every GPU is held by a one-GPU Pod of class high that gpu-class placed, four Pods per ReplicaSet;
the Pods on A100 of one ReplicaSet in four opted in (gpu-class.io/upgrade: "true"). Two layouts:

- full: no H100 GPU free (the steady state of a busy cluster: nothing can move up);
- room: 4 GPUs free on one H100 node in ten (some Pods can move; the pass judges every candidate).

A pass is what webhook/cluster/upgrader.py does: decode the list of unfinished Pods, decode the Node list it
reads labels from (as metadata only), keep the Pods that opted in or are in a group, read each one's state (webhook.core.after_bind.upgrade.read_pod_state) and decide (decide_moves) on the
webhook's own inventory snapshot. The API is not called: the bytes it would send are made once and decoded each
pass, so the figures are the upgrader's CPU, not the API server's. Reported per layout and size: CPU ms of each
stage (time.process_time, mean of the rounds) and the bytes read.
Writes its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from webhook.cluster.upgrader import may_move
from webhook.cluster.watch import HERALDS, LiveInventory
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.catalog.model import Catalog
from webhook.core.after_bind.upgrade import History, Owner, UpgradeSettings, decide_moves, read_pod_state

from bench.common.noapi import NoApi
from bench.common.sections import write_section
from bench.common.workload import FLEET, make_cluster_pod, make_gpu_node

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
H100, A100 = FLEET[0], FLEET[1]
TYPES = "H100,A100-80GB"  # what the webhook writes for class high on this fleet
# and the required node affinity it writes beside them, which the upgrader believes the types by
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100.product, H100.product]}]}]}}}
NOW = 1_800_000_000.0


@dataclass
class Inputs:
    inventory: LiveInventory
    pods_bytes: bytes
    nodes_bytes: bytes  # the full Node list
    node_metadata_bytes: bytes  # the same list as PartialObjectMetadata
    owners: dict[str, Owner]
    pods: int


def _cpu_node(index: int) -> dict[str, Any]:
    name = f"cpu-{index:05d}"
    node = make_gpu_node(index, A100)
    node["metadata"]["name"] = name
    node["metadata"]["labels"] = {k: v for k, v in node["metadata"]["labels"].items() if "nvidia" not in k}
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["status"]["allocatable"] = {k: v for k, v in node["status"]["allocatable"].items() if "nvidia" not in k}
    node["status"]["capacity"] = dict(node["status"]["allocatable"])
    return node


def build(catalog: Catalog, nodes: int, room: bool) -> Inputs:
    h100 = max(3, nodes * 3 // 100)
    a100 = nodes * 2 // 3
    gpu_nodes = [make_gpu_node(i, H100) for i in range(h100)] + [make_gpu_node(h100 + i, A100) for i in range(a100)]
    cpu_nodes = [_cpu_node(i) for i in range(nodes - h100 - a100)]
    pods: list[dict[str, Any]] = []
    owners: dict[str, Owner] = {}
    for n, node in enumerate(gpu_nodes):
        name = node["metadata"]["name"]
        on_h100 = n < h100
        held = 4 if on_h100 and room and n % 10 == 0 else 8
        for slot in range(held):
            i = len(pods)
            rs = i // 4
            pod = make_cluster_pod(i, name, 1)
            uid = f"rs-{rs:06d}"
            pod["metadata"].update(name=f"w{rs}-{i:07d}", uid=f"pod-{i:07d}", creationTimestamp="2025-01-01T00:00:00Z")
            pod["metadata"]["ownerReferences"][0].update(name=f"w{rs}", uid=uid)
            opted = not on_h100 and rs % 4 == 0
            pod["metadata"]["annotations"] = {"gpu-class.io/class": "high", "gpu-class.io/types": TYPES,
                                              **({"gpu-class.io/upgrade": "true"} if opted else {})}
            pod["spec"]["affinity"] = AFFINITY
            if opted:
                owners[uid] = Owner("apps", "ReplicaSet", pod["metadata"]["namespace"], f"w{rs}", uid,
                                    f"Deployment/{pod['metadata']['namespace']}/w{rs}")
            pods.append(pod)
    api: Any = NoApi()  # stands in for the kubernetes client's CoreV1Api
    inventory = LiveInventory(catalog, api=api)
    inventory.nodes_watch.replace([i for i in map(inventory.nodes_watch.reduce, gpu_nodes + cpu_nodes) if i is not None])
    inventory.namespaces_watch.replace([])
    heralds = [r.replace for r in inventory.reflectors if r.name in {h.resource for h in HERALDS}]
    replaces: list[Callable[[list[Any]], None]] = [inventory.dra_watch.replace_slices, inventory.dra_watch.replace_classes,
                                                   inventory.dra_watch.replace_claims, inventory.dra_watch.replace_templates,
                                                   inventory.pools_watch.replace, *heralds]
    for replace in replaces:
        replace([])
    inventory.pods_watch.replace([v for v in map(inventory.pods_watch.reduce, pods) if v is not None])
    all_nodes = gpu_nodes + cpu_nodes
    metadata = [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": n["metadata"]}
                for n in all_nodes]
    return Inputs(inventory, json.dumps({"items": pods}).encode(), json.dumps({"items": all_nodes}).encode(),
                  json.dumps({"items": metadata}).encode(), owners, len(pods))


@dataclass
class Pass:
    decode_pods_ms: float
    decode_nodes_ms: float
    states_ms: float
    decide_ms: float
    moves: int
    held: int


def _timed(work: Callable[[], Any]) -> tuple[Any, float]:
    started = time.process_time()
    result = work()
    return result, (time.process_time() - started) * 1000


def one_pass(catalog: Catalog, inputs: Inputs) -> Pass:
    snapshot = inputs.inventory.snapshot()
    items, decode_pods = _timed(lambda: [p for p in json.loads(inputs.pods_bytes)["items"] if may_move(p, catalog)])
    nodes, decode_nodes = _timed(lambda: json.loads(inputs.node_metadata_bytes)["items"])
    node_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    states, read = _timed(lambda: [s for p in items if (s := read_pod_state(p, catalog, inputs.owners)) is not None])
    # settle already reached (the room is an hour old), so the pass decides as it would with moves to make
    history = History(room_since={})
    decision, decide = _timed(lambda: decide_moves(NOW, snapshot, catalog, states, history,
                                                   UpgradeSettings(settle_seconds=0), node_labels))
    return Pass(decode_pods, decode_nodes, read, decide, len(decision.moves), len(decision.held))


def render(rows: list[tuple[int, str, Inputs, list[Pass]]], rounds: int, seconds: float, command: str) -> str:
    lines = [
        f"## One upgrader pass (`{command}`)",
        "",
        f"Command: `{command}`; {seconds:.0f} s wall, {rounds} rounds per row. In-process (bench/upgrade/upgrade.py): "
        "the best type a minority (3% H100 nodes, two thirds A100-80GB, the rest CPU nodes, 8 GPUs each), every GPU "
        "held by a one-GPU Pod of class high, four per ReplicaSet, one ReplicaSet in four on A100 opted in. `full`: no "
        "H100 GPU free; `room`: 4 free on one H100 node in ten. CPU ms per pass, mean of the rounds. `owners`: the "
        "controllers of opted-in Pods, each read once and kept 10 minutes (webhook/cluster/upgrader.py), so a pass "
        "reads none but those of the Pods it evicts.",
        "",
        "| nodes | layout | Pods | Pod list MB | Node labels MB (whole Nodes MB) | owners | decode Pods ms "
        "| decode Nodes ms | read states ms | decide ms | pass ms | moves | held |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for nodes, layout, inputs, passes in rows:
        def mean(f: Callable[[Pass], float]) -> float:
            return statistics.fmean(f(p) for p in passes)
        total = mean(lambda p: p.decode_pods_ms + p.decode_nodes_ms + p.states_ms + p.decide_ms)
        lines.append(
            f"| {nodes:,} | {layout} | {inputs.pods:,} | {len(inputs.pods_bytes) / 1e6:.1f} | "
            f"{len(inputs.node_metadata_bytes) / 1e6:.1f} ({len(inputs.nodes_bytes) / 1e6:.1f}) | "
            f"{len(inputs.owners):,} | {mean(lambda p: p.decode_pods_ms):,.0f} | "
            f"{mean(lambda p: p.decode_nodes_ms):,.0f} | {mean(lambda p: p.states_ms):,.0f} | "
            f"{mean(lambda p: p.decide_ms):,.0f} | {total:,.0f} | {passes[0].moves} | {passes[0].held} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--live"]:
        from bench.upgrade.live import main as live_main

        return live_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench upgrade", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 15000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md",
                        help="the results file whose `upgrade` section is written")
    args = parser.parse_args(argv)
    if args.rounds < 1 or any(n < 100 for n in args.nodes):
        parser.error("--rounds must be at least 1 and every --nodes at least 100")
    catalog = load_default_catalog()
    command = "python -m bench upgrade" + (" " + " ".join(argv) if argv else "")
    started = time.monotonic()
    rows = []
    for nodes in args.nodes:
        for layout in ("full", "room"):
            inputs = build(catalog, nodes, layout == "room")
            passes = [one_pass(catalog, inputs) for _ in range(args.rounds)]
            rows.append((nodes, layout, inputs, passes))
            print(f"{nodes} nodes, {layout}: done", file=sys.stderr)
    text = render(rows, args.rounds, time.monotonic() - started, command)
    print(text)
    write_section(args.output, "upgrade", text)
    return 0
