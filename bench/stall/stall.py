"""`python -m bench stall`: honest admissions while slow and oversized requests attack the webhook, and what the
tenant boundary's policy adds to a create, on the local control plane.

1. Stall. Dry-run creates of class Pods (economy and high in turn, one GPU) in an opted-in namespace, timed by
   the client, in rounds of two arms taking turns: quiet, and attacked (slow TLS clients announcing 3,000,000
   bytes and sending a byte a second, reconnecting when cut, and senders of 25 MiB bodies at full speed, all on
   the webhook's port: bench/stall/attack.py). /readyz polled every 0.2 s throughout; the server's own count of
   the requests it cut (gpu_class_admission_requests_total, outcomes too-slow, too-large, busy) over each arm.
2. Boundary. Dry-run creates of class-economy Pods in a namespace annotated gpu-class.io/allowed-classes:
   economy, and in the opted-in namespace of part 1 (not bounded: the binding selects it too), in rounds of two
   states taking turns: with the ValidatingAdmissionPolicyBinding gpu-class.io-boundary, and without it (deleted,
   then put back from the rendered install; always put back at the end).

It makes two GPU nodes (a T4 and an H100, so that both classes have a type) and two namespaces, and removes them
after. Writes its section of bench/RESULTS.md (bench/stall/stall_model.py renders it); the exit status is 1 when a
create was answered wrong (not created and placed), not when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

from bench.common.commit import measured_at  # noqa: E402
from bench.common.kubeapi import Api  # noqa: E402
from bench.common.polling import wait_until  # noqa: E402
from bench.common.procs import children_of, cpu_seconds  # noqa: E402
from bench.common.sections import write_section  # noqa: E402
from bench.stall.attack import Attacker, ReadyzPoller, Target  # noqa: E402
from bench.stall.stall_model import (  # noqa: E402
    ATTACKED, BOUNDARY_ARMS, BOUNDARY_BINDING, BOUNDED, MIB, OPEN, STALL_ARMS, WITH, ArmRun, AttackPlan, Part,
    Setting, arm_order, boundary_arm, classes_in_turn, command_line, is_boundary_refusal, judge_create, make_honest_pod, make_probe_pod,
    counts_between, namespaces_in_turn, policy_step_timing, read_cuts, render, webhook_timing,
)

STALL_NAMESPACE = "bench-stall"
BOUNDARY_NAMESPACE = "bench-stall-boundary"
BOUNDED_CLASSES = "economy"
STALL_CLASSES = ("economy", "high")
NODES = (("bench-stall-t4", "Tesla-T4"), ("bench-stall-h100", "NVIDIA-H100-80GB-HBM3"))  # economy's, high's
PROBE_NODE = NODES[0][0]
BENCH_LABEL = {"bench.gpu-class.io/object": "stall"}
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
WARM_CREATES = 20  # per namespace, before the rounds: connections and caches warm, not measured
PARTS = ("stall", "boundary")

Log = Callable[[str], None]


def gpu_node(name: str, product: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, **BENCH_LABEL}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def encode(pod: dict[str, Any]) -> bytes:
    return json.dumps(pod).encode()


@dataclass
class Bench:
    cluster: local_cluster.Cluster
    api: Api
    target: Target
    attacker: Attacker
    poller: ReadyzPoller
    binding: dict[str, Any]
    warmup_seconds: float
    settle_seconds: float
    log: Log
    boundary_present: bool = True
    workers_seen: set[int] = field(default_factory=set)

    # -- the servers' own accounts
    def webhook_pids(self) -> list[int]:
        master = self.cluster.pid("gpuclass")
        if master is None:
            raise RuntimeError("gpuclass serve is not running:\n" + self.cluster.log_tail("gpuclass"))
        workers = children_of(master)
        self.workers_seen.update(workers)
        return [master, *workers]

    def webhook_cpu(self) -> float:
        total = 0.0
        for pid in self.webhook_pids():
            try:
                total += cpu_seconds(pid)
            except OSError:
                pass  # a worker gone meanwhile
        return total

    def apiserver_cpu(self) -> float:
        pid = self.cluster.pid("kube-apiserver")
        return cpu_seconds(pid) if pid is not None else 0.0

    def webhook_metrics(self) -> str:
        context = ssl.create_default_context(cafile=self.target.ca_file)
        with urllib.request.urlopen(self.cluster.webhook_metrics_url, context=context, timeout=10) as r:
            return str(r.read().decode())

    def apiserver_metrics(self) -> str:
        return str(self.api.call("GET", "/metrics"))

    # -- creates
    def create(self, namespace: str, body: bytes) -> tuple[int, dict[str, Any]]:
        status, data = self.api.raw("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", body)
        try:
            answer = json.loads(data)
        except ValueError:
            answer = {"message": data[:300].decode(errors="replace")}
        return status, answer if isinstance(answer, dict) else {"message": str(answer)[:300]}

    def creates(self, namespace: str, bodies: Sequence[bytes]) -> tuple[list[float], int, str]:
        """Each create's milliseconds, how many were wrong, the first wrong one's answer."""
        latencies: list[float] = []
        wrong, first = 0, ""
        for body in bodies:
            started = time.perf_counter()
            status, answer = self.create(namespace, body)
            latencies.append((time.perf_counter() - started) * 1000)
            if (problem := judge_create(status, answer)) is not None:
                wrong += 1
                first = first or problem
        return latencies, wrong, first

    # -- one arm
    def run_arm(self, part: Part, arm: str, round_: int, namespace: str, bodies: Sequence[bytes],
                attacked: bool) -> ArmRun:
        time.sleep(self.settle_seconds)  # before every arm alike: what the arm before left behind settles
        cuts_before = read_cuts(self.webhook_metrics())
        self.poller.take()
        if attacked:
            self.attacker.begin()
            time.sleep(self.warmup_seconds)
        metrics_before = self.apiserver_metrics()
        cpu_before, api_cpu_before = self.webhook_cpu(), self.apiserver_cpu()
        started = time.monotonic()
        latencies, wrong, first = self.creates(namespace, bodies)
        window = time.monotonic() - started
        cpu, api_cpu = self.webhook_cpu() - cpu_before, self.apiserver_cpu() - api_cpu_before
        metrics_after = self.apiserver_metrics()
        polls = self.poller.take()
        tally = self.attacker.end() if attacked else None
        cuts = counts_between(cuts_before, read_cuts(self.webhook_metrics()))
        run = ArmRun(part, arm, round_, tuple(latencies), wrong, first, window, tuple(polls), cuts, tally, cpu, api_cpu,
                     webhook_timing(metrics_after).minus(webhook_timing(metrics_before)),
                     policy_step_timing(metrics_after).minus(policy_step_timing(metrics_before)))
        ordered = sorted(latencies)
        self.log(f"stall: round {round_ + 1}, {arm}: {len(latencies)} creates, p50 {ordered[len(ordered) // 2]:.1f} ms, "
                 f"max {ordered[-1]:.1f} ms, {wrong} wrong, /readyz {sum(p.status != 200 for p in polls)} of "
                 f"{len(polls)} failed, cut {cuts}" + (f", attack {tally}" if tally else ""))
        return run

    # -- the boundary's binding
    def boundary_in_force(self) -> bool:
        status, answer = self.create(BOUNDARY_NAMESPACE, encode(make_probe_pod(BOUNDED_CLASSES, PROBE_NODE)))
        if is_boundary_refusal(status, answer):
            return True
        if status == 201:
            return False
        raise RuntimeError(f"the boundary's probe Pod was answered HTTP {status}: {answer.get('message', answer)}")

    def set_boundary(self, present: bool) -> None:
        if present:
            local_cluster.apply(self.cluster, [self.binding])
        else:
            self.api.call("DELETE", f"{BINDINGS}/{BOUNDARY_BINDING}", expect=(200, 404))
        self.boundary_present = present
        wait_until(f"the API server to {'enforce' if present else 'drop'} the binding {BOUNDARY_BINDING}",
                   lambda: self.boundary_in_force() == present, seconds=120)


def measure_stall(b: Bench, rounds: int, creates: int) -> list[ArmRun]:
    bodies = [encode(make_honest_pod(c)) for c in classes_in_turn(STALL_CLASSES, creates)]
    return [b.run_arm("stall", arm, r, STALL_NAMESPACE, bodies, attacked=arm == ATTACKED)
            for r, arm in arm_order(STALL_ARMS, rounds)]


def measure_boundary(b: Bench, rounds: int, creates: int) -> list[ArmRun]:
    """Each round: the binding present and deleted, in turn; in each state, creates in the bounded namespace and in
    the opted-in one it does not bound, in turn. The same class-economy Pod everywhere."""
    bodies = [encode(make_honest_pod(BOUNDED_CLASSES)) for _ in range(creates)]
    namespace = {BOUNDED: BOUNDARY_NAMESPACE, OPEN: STALL_NAMESPACE}
    runs = []
    for r, binding in arm_order(BOUNDARY_ARMS, rounds):
        if (binding == WITH) != b.boundary_present:
            b.set_boundary(binding == WITH)
        for kind in namespaces_in_turn(r):
            runs.append(b.run_arm("boundary", boundary_arm(kind, binding), r, namespace[kind], bodies, attacked=False))
    return runs


# --- the cluster's objects ---------------------------------------------------------------------------------------


def make_namespaces(api: Api) -> None:
    spaces = {STALL_NAMESPACE: {}, BOUNDARY_NAMESPACE: {"gpu-class.io/allowed-classes": BOUNDED_CLASSES}}
    drop_namespaces(api)  # left by an interrupted run on a kept cluster
    for name, annotations in spaces.items():
        api.call("POST", "/api/v1/namespaces", {"metadata": {
            "name": name, "labels": {"gpu-class.io/inject": "enabled", **BENCH_LABEL}, "annotations": annotations}})
        wait_until(f"the default ServiceAccount of {name}", lambda: bool(api.call(
            "GET", f"/api/v1/namespaces/{name}/serviceaccounts?fieldSelector=metadata.name=default")["items"]))


def drop_namespaces(api: Api) -> None:
    for name in (STALL_NAMESPACE, BOUNDARY_NAMESPACE):
        api.call("DELETE", f"/api/v1/namespaces/{name}", expect=(200, 202, 404))
    for name in (STALL_NAMESPACE, BOUNDARY_NAMESPACE):
        wait_until(f"namespace {name} to go", lambda: api.raw("GET", f"/api/v1/namespaces/{name}")[0] == 404, 180)


def make_nodes(api: Api) -> None:
    drop_nodes(api)
    for name, product in NODES:
        api.call("POST", "/api/v1/nodes", gpu_node(name, product))


def drop_nodes(api: Api) -> None:
    for name, _ in NODES:
        api.call("DELETE", f"/api/v1/nodes/{name}", expect=(200, 404))


def wait_placed(b: Bench) -> None:
    """Until gpu-class places each class in both namespaces (its view holds the nodes), and the boundary is in
    force and admits the honest Pods."""
    for namespace, classes in ((STALL_NAMESPACE, STALL_CLASSES), (BOUNDARY_NAMESPACE, (BOUNDED_CLASSES,))):
        for class_name in classes:
            body = encode(make_honest_pod(class_name))
            wait_until(f"gpu-class to place a class-{class_name} Pod in {namespace}",
                       lambda: judge_create(*b.create(namespace, body)) is None, seconds=120)
    b.set_boundary(True)


def boundary_binding(cluster: local_cluster.Cluster) -> dict[str, Any]:
    return next(o for o in local_cluster.render_install(cluster)
                if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["metadata"]["name"] == BOUNDARY_BINDING)


# --- the command ----------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench stall", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6, help="rounds of each part, every arm once a round (default %(default)s)")
    p.add_argument("--creates", type=int, default=100, help="creates per arm and round (default %(default)s)")
    p.add_argument("--parts", default=",".join(PARTS), help="which to run, of %(default)s (default both)")
    p.add_argument("--slow", type=int, default=AttackPlan.slow_connections,
                   help="slow connections held open while attacked (default %(default)s)")
    p.add_argument("--slow-declared-bytes", type=int, default=AttackPlan.slow_declared_bytes,
                   help="the Content-Length each slow connection announces (default %(default)s)")
    p.add_argument("--oversized", type=int, default=AttackPlan.oversized_senders,
                   help="senders of oversized requests while attacked (default %(default)s)")
    p.add_argument("--oversized-mib", type=float, default=AttackPlan.oversized_body_bytes / MIB,
                   help="their bodies' size, MiB (default %(default)g; the server's limit is 19)")
    p.add_argument("--attack-nice", type=int, default=19,
                   help="the attacking process's niceness (default %(default)s: on a shared machine its own CPU "
                        "should not stand in for the webhook's; 0 to attack at the bench's priority)")
    p.add_argument("--warmup-seconds", type=float, default=4.0,
                   help="the attack runs this long before an attacked arm's first create (default %(default)s)")
    p.add_argument("--settle-seconds", type=float, default=2.0,
                   help="pause before every arm, and after the binding is seen to change (default %(default)s)")
    p.add_argument("--section", default="stall", help="the section of --output written (default %(default)s)")
    p.add_argument("--label", default="", help="said in the section's heading, e.g. `run 1 of 2`")
    p.add_argument("--note", default="", help="a paragraph under the section's heading")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    if not parts or set(parts) - set(PARTS):
        p.error(f"--parts {args.parts}: give some of {', '.join(PARTS)}")
    if args.rounds < 1 or args.creates < 1 or args.slow < 0 or args.oversized < 0:
        p.error("--rounds and --creates must be at least 1, --slow and --oversized at least 0")
    plan = AttackPlan(slow_connections=args.slow, slow_declared_bytes=args.slow_declared_bytes,
                      oversized_senders=args.oversized, oversized_body_bytes=int(args.oversized_mib * MIB))
    log: Log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    stall: list[ArmRun] = []
    boundary: list[ArmRun] = []
    with local_cluster.running(args.cluster_dir) as cluster:
        assert cluster.ports is not None
        target = Target("127.0.0.1", cluster.ports.webhook, str(cluster.dir / "webhook" / "ca.crt"))
        attacker = Attacker(target, plan, args.attack_nice)
        attacker.start()  # forks: before any thread of ours
        api = Api(cluster)
        try:
            b = Bench(cluster, api, target, attacker, ReadyzPoller(target), boundary_binding(cluster),
                      args.warmup_seconds, args.settle_seconds, log)
        except BaseException:
            attacker.close()
            raise
        workers_before = set(b.webhook_pids()[1:])
        try:
            make_nodes(api)
            make_namespaces(api)
            wait_placed(b)
            for namespace, classes in ((STALL_NAMESPACE, STALL_CLASSES), (BOUNDARY_NAMESPACE, (BOUNDED_CLASSES,))):
                b.creates(namespace, [encode(make_honest_pod(c)) for c in classes_in_turn(classes, WARM_CREATES)])
            b.poller.start()
            if "stall" in parts:
                stall = measure_stall(b, args.rounds, args.creates)
            if "boundary" in parts:
                boundary = measure_boundary(b, args.rounds, args.creates)
        finally:
            b.poller.stop()
            attacker.close()
            local_cluster.apply(cluster, [b.binding])  # whatever happened: the boundary as installed
            drop_namespaces(api)
            drop_nodes(api)
        workers_after = set(b.webhook_pids()[1:])
    argv = list(sys.argv[2:] if argv is None else argv)
    workers = (f"gpuclass serve's workers were the same {len(workers_before)} processes throughout"
               if b.workers_seen == workers_before == workers_after else
               f"gpuclass serve's workers changed: {sorted(workers_before)} at the start, {sorted(workers_after)} at "
               f"the end, {sorted(b.workers_seen)} seen")
    text = render(stall, boundary, Setting(
        command_line(argv), command_line(argv, measuring_only=True),
        f"{measured_at()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", local_cluster.kube_version(),
        args.label, args.note, workers, args.rounds, args.creates, plan, args.attack_nice, args.warmup_seconds,
        args.settle_seconds, time.monotonic() - started, os.cpu_count() or 0), BOUNDED_CLASSES)
    print(text)
    write_section(args.output, args.section, text)
    return 1 if any(run.wrong for run in (*stall, *boundary)) else 0
