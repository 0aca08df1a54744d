"""`python -m bench upgrade --live`: the upgrader on the real control plane at the size users run.

A local control plane (tests/e2e/local_cluster.py: etcd, kube-apiserver, kube-controller-manager, gpu-class-scheduler
and the webhook, the default install's path) with a fleet of `--nodes` nodes, the best type a minority: 3% H100 nodes,
two thirds A100-40GB nodes, 8 GPUs each, the rest CPU nodes. Every H100 node is full (a bare 8-GPU Pod on each).
Opted in (gpu-class.io/upgrade: "true"): Deployments of 4 one-GPU replicas of class high, each with a
PodDisruptionBudget of maxUnavailable 1, and Indexed Jobs of 2 that replace a disrupted Pod; beside them, one
Deployment that did not opt in and bare Pods that did. All land on A100. Then some H100 nodes' Pods end, making room
for fewer Pods than opted in. The kubelets are a stand-in (tests/e2e/upgrading.py) that marks bound Pods Ready.

Reported: moves against the room made, evictions per move, Pods moved twice, what never moved, the time from the
room to the last replacement on H100, and how long the upgrader's passes took (its log). Writes the "upgrade-live"
section of RESULTS.md.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import kubernetes

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)
from kubeobjects import make_pod  # noqa: E402
from upgrading import kubelet_standing_in, metric, running_upgrader  # noqa: E402

from bench.common.commit import measured_at  # noqa: E402
from bench.common.polling import wait_until  # noqa: E402
from bench.common.sections import write_section  # noqa: E402
from bench.placement.placement_cluster import create_nodes, drop_namespace, make_namespace  # noqa: E402
from bench.placement.placement_model import NodeSpec  # noqa: E402

H100, A100 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"
OPT_IN = {"gpu-class.io/upgrade": "true"}


def fleet(nodes: int) -> list[NodeSpec]:
    h100 = max(3, nodes * 3 // 100)
    a100 = nodes * 2 // 3
    return ([NodeSpec(f"up-h100-{i}", H100, 8, 96_000, 1_048_576, True) for i in range(h100)]
            + [NodeSpec(f"up-a100-{i}", A100, 8, 96_000, 1_048_576, True) for i in range(a100)]
            + [NodeSpec(f"up-cpu-{i}", "", 0, 32_000, 131_072, False) for i in range(nodes - h100 - a100)])


def pod_spec(name: str, *, gpus: int = 1, upgrade: bool = True, restart: str = "Always") -> dict[str, Any]:
    pod: dict[str, Any] = make_pod(name, gpu_class="high", gpus=gpus, scheduler=local_cluster.STRICT_SCHEDULER,
                   annotations=OPT_IN if upgrade else None)
    pod["spec"]["restartPolicy"] = restart
    return pod


def deployment(name: str, replicas: int, *, upgrade: bool) -> dict[str, Any]:
    pod = pod_spec(name, upgrade=upgrade)
    return {"metadata": {"name": name}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}, "annotations": pod["metadata"]["annotations"]},
                     "spec": pod["spec"]}}}


def job(name: str, pods: int) -> dict[str, Any]:
    pod = pod_spec(name, restart="Never")
    return {"metadata": {"name": name}, "spec": {
        "completionMode": "Indexed", "completions": pods, "parallelism": pods,
        "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        "template": {"metadata": {"annotations": pod["metadata"]["annotations"]}, "spec": pod["spec"]}}}


@dataclass
class Outcome:
    nodes: int
    opted_in: int
    room: int
    moves: float
    evictions: float
    moved_twice: int
    on_h100: int
    unmoved_bare: int
    unmoved_plain: int
    room_to_last_seconds: float
    passes: list[float]


def run(cluster: local_cluster.Cluster, nodes: int, deployments: int, jobs: int, freed: int,
        log: Callable[[str], None]) -> Outcome:
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    # typed Any: they take the manifests as plain dicts, as the API server does
    core: Any = kubernetes.client.CoreV1Api(api)
    apps: Any = kubernetes.client.AppsV1Api(api)
    batch: Any = kubernetes.client.BatchV1Api(api)
    policy: Any = kubernetes.client.PolicyV1Api(api)
    specs = fleet(nodes)
    fill = make_namespace(core, "up-fill", opted_in=False)
    started = time.monotonic()
    create_nodes(core, specs, fill)
    log(f"{nodes} nodes in {time.monotonic() - started:.0f} s")
    ns = make_namespace(core, "up", opted_in=True)
    h100_nodes = [s.name for s in specs if s.product == H100]
    with kubelet_standing_in(core, ns) as kubelet, running_upgrader(
            cluster, "live", "--moves-per-minute=120", "--window-seconds=3600") as (upgrader, port):
        for name in h100_nodes:  # the best type full: a bare 8-GPU Pod on each of its nodes, placed by gpu-class
            full = pod_spec(f"full-{name}", gpus=8, upgrade=False)
            full["spec"]["nodeSelector"] = {"kubernetes.io/hostname": name}
            core.create_namespaced_pod(ns, full)
        wait_until("H100 full", lambda: sum(n in h100_nodes for _, n, _ in kubelet.bound.values()) == len(h100_nodes), 300)
        for i in range(deployments):
            policy.create_namespaced_pod_disruption_budget(ns, {
                "metadata": {"name": f"serve-{i}"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": f"serve-{i}"}}}})
            apps.create_namespaced_deployment(ns, deployment(f"serve-{i}", 4, upgrade=True))
        for i in range(jobs):
            batch.create_namespaced_job(ns, job(f"train-{i}", 2))
        apps.create_namespaced_deployment(ns, deployment("plain", 2, upgrade=False))
        for i in range(2):
            core.create_namespaced_pod(ns, pod_spec(f"bare-{i}"))
        opted = deployments * 4 + jobs * 2
        total = len(h100_nodes) + opted + 2 + 2
        wait_until("every Pod bound and Ready", lambda: len(kubelet.ready) >= total, 600)
        on_a100 = {uid for uid, (n, node, _) in kubelet.bound.items() if node.startswith("up-a100")}
        time.sleep(8)  # past the minimum time on a node (5 s)
        assert metric(port, "gpu_class_upgrade_moves_total") == 0, "nothing moves while H100 is full"
        room_at = time.time()
        for name in h100_nodes[:freed]:
            core.delete_namespaced_pod(f"full-{name}", ns, grace_period_seconds=0)
        room = freed * 8

        def moved_in() -> list[float]:
            return sorted(t for uid, (n, node, t) in kubelet.bound.items()
                          if node in h100_nodes and t >= room_at and not n.startswith("full-"))
        wait_until(f"{room} replacements on H100", lambda: len(moved_in()) >= room, 900)
        time.sleep(30)  # room is gone: nothing more may move
        last = max(moved_in())
        evicted = {uid for uid in kubelet.gone if uid in on_a100}
        replacements = {uid for uid, (n, node, t) in kubelet.bound.items() if t >= room_at}
        outcome = Outcome(
            nodes=nodes, opted_in=opted, room=room, moves=metric(port, "gpu_class_upgrade_moves_total"),
            evictions=metric(port, 'gpu_class_upgrade_evictions_total\\{outcome="evicted"\\}'),
            moved_twice=len(replacements & set(kubelet.gone)), on_h100=len(moved_in()),
            unmoved_bare=sum(1 for n, node, _ in kubelet.bound.values()
                             if n.startswith("bare-") and node.startswith("up-a100")),
            unmoved_plain=sum(1 for uid, (n, node, _) in kubelet.bound.items()
                              if n.startswith("plain-") and uid not in kubelet.gone),
            room_to_last_seconds=last - room_at, passes=pass_seconds(cluster))
        assert evicted <= on_a100
        upgrader.terminate()
    drop_namespace(core, ns)
    return outcome


def pass_seconds(cluster: local_cluster.Cluster) -> list[float]:
    """The upgrader's passes as its debug log times them (one `pass took` line each)."""
    found: list[float] = []
    for path in (cluster.dir / "logs").glob("upgrader-live-*.log"):
        found += [float(v) for v in re.findall(r"pass took ([0-9.]+) s", path.read_text(errors="replace"))]
    return found


def render(o: Outcome, command: str, seconds: float) -> str:
    passes = sorted(o.passes)
    median = passes[len(passes) // 2] if passes else float("nan")
    return "\n".join([
        f"## The upgrader on the real control plane (`{command}`)",
        "",
        f"{measured_at()}. Command: `{command}`; {seconds:.0f} s wall. bench/upgrade/live.py says what runs: "
        f"{o.nodes:,} nodes (3% H100, two thirds A100-40GB), H100 full, {o.opted_in} opted-in Pods (Deployments of 4 "
        "under a PDB of maxUnavailable 1, Indexed Jobs of 2) on A100, beside a Deployment that did not opt in and 2 "
        f"bare Pods that did; then room for {o.room} one-GPU Pods on H100.",
        "",
        "| room made | moves | evictions | moved twice | replacements on H100 | bare Pods moved | not opted in, moved "
        "| room to the last replacement bound, s | passes | pass median s | pass max s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {o.room} | {o.moves:.0f} | {o.evictions:.0f} | {o.moved_twice} | {o.on_h100} | {2 - o.unmoved_bare} | "
        f"{2 - o.unmoved_plain} | {o.room_to_last_seconds:.1f} | {len(passes)} | {median:.2f} | "
        f"{(passes[-1] if passes else float('nan')):.2f} |",
        ""])


def main(argv: Sequence[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench upgrade --live", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--deployments", type=int, default=10)
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--freed", type=int, default=4, help="H100 nodes whose Pod ends (8 GPUs of room each)")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.freed * 8 >= args.deployments * 4 + args.jobs * 2:
        p.error("--freed must make room for fewer Pods than opt in, so that room, not Pods, runs out")
    started = time.monotonic()
    with local_cluster.running(args.cluster_dir) as cluster:
        outcome = run(cluster, args.nodes, args.deployments, args.jobs, args.freed,
                      lambda line: print(line, file=sys.stderr, flush=True))
    command = "python -m bench upgrade --live" + (" " + " ".join(argv) if argv else "")
    text = render(outcome, command, time.monotonic() - started)
    print(text)
    write_section(args.output, "upgrade-live", text)
    return 0
