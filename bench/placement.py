"""`python -m bench placement`: do Pods land on the GPU type their class promised, on the real scheduler?

A mixed cluster on the local control plane (tests/e2e/local-cluster): several GPU types from real
product names, nodes of different CPU and memory sizes, some partly filled by CPU-only Pods (so
the scheduler's resource-balancing scores pull against the preferences), some GPU nodes tainted.
Streams of Pods for every strategy (single Pods and Deployments, 1 to 8 GPUs, enough to fill the
best types), created one workload at a time, each run on two paths:

  (a) the stock default scheduler with the webhook alone;
  (b) gpu-class-scheduler: the strict profiles of the stock scheduler (deploy/scheduler);
  (c) gpu-class-extender: the same profiles with gpu-class's extender.

The order in which the scheduler bound the Pods is read from a watch; replaying the binds in that
order against the cluster's capacity tells, for every Pod at the moment it was bound, which
choice the strategy promised:

  performance: the fastest type (catalog score) of its class with a node that could hold it;
  cost: the slowest such type;
  balanced: the node with the largest share of its GPUs free once the Pod is placed;
  binpack: the node with the largest share of its GPUs in use once the Pod is placed
(the shares as kube-scheduler's NodeResourcesFit scores them: whole percent, rounded down).

Ties are all right answers. A Pod left Pending while a node of its class could hold it is
"wrongly Pending".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

from bench.sections import write_section  # noqa: E402

# The client's models are typed; the API takes the plain dict bodies we send, and answers are
# read as the JSON they are.
CoreApi = Any

Path_ = Literal["default", "profiles", "extender"]
PATHS: tuple[Path_, ...] = ("default", "profiles", "extender")
SCHEDULER = {"default": None, "profiles": local_cluster.STRICT_SCHEDULER, "extender": local_cluster.EXTENDER_SCHEDULER}
PATH_TITLE = {"default": "(a) default scheduler", "profiles": f"(b) {local_cluster.STRICT_SCHEDULER}",
              "extender": f"(c) {local_cluster.EXTENDER_SCHEDULER}"}
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
# The built-in catalog's classes, one per strategy.
STRATEGY_CLASS = {"performance": "high", "cost": "economy", "balanced": "standard", "binpack": "inference"}
# A workload not bound by then counts as Pending. The scheduler decides in milliseconds, but an
# unschedulable Pod waits in its backoff queue (1 s, doubling) before the next try.
PENDING_SECONDS = 3.0


@dataclass(frozen=True)
class NodeSpec:
    name: str
    product: str
    gpus: int
    cpu_millis: int
    memory_mib: int
    tainted: bool = True
    filled_cpu_millis: int = 0  # taken by CPU-only Pods before the streams start


@dataclass(frozen=True)
class Workload:
    name: str
    gpu_class: str
    gpus: int
    cpu_millis: int
    replicas: int = 0  # 0: a single Pod; else a Deployment of this many replicas


@dataclass
class Outcome:
    """One Pod of a stream: where it was bound (None: Pending), in bind order."""
    pod: str
    workload: Workload
    node: str | None
    types: tuple[str, ...]


def make_fleet(scale: int = 1) -> list[NodeSpec]:
    """A few dozen nodes at scale 1: every size and fill differs somewhat, as in a real cluster."""
    rng = random.Random(7)
    shapes = [  # product, nodes, GPUs per node, CPU cores, memory GiB
        ("NVIDIA-H100-80GB-HBM3", 3, 8, 96, 1024),
        ("NVIDIA-L40S", 4, 4, 48, 384),
        ("NVIDIA-A100-SXM4-80GB", 3, 8, 64, 512),
        ("A100-SXM4-40GB", 2, 8, 64, 512),
        ("NVIDIA-A30", 2, 4, 32, 256),
        ("NVIDIA-A10", 3, 4, 32, 192),
        ("NVIDIA-L4", 4, 4, 16, 128),
        ("Tesla-T4", 4, 4, 16, 64),
        ("Tesla-V100-SXM2-16GB", 2, 8, 48, 384),
    ]
    nodes = []
    for product, count, gpus, cpu, mem in shapes:
        for i in range(count * scale):
            base = product.lower().replace("nvidia-", "").replace("tesla-", "")[:12].strip("-")
            # Every other node is busy with CPU work: the least-allocated scores then favour its
            # emptier neighbours of slower types.
            fill = int(cpu * 1000 * rng.uniform(0.4, 0.8)) if i % 2 == 0 else 0
            nodes.append(NodeSpec(f"pl-{base}-{i}", product, gpus, cpu * 1000, mem * 1024,
                                  tainted=(i % 3 != 2), filled_cpu_millis=fill))
    for i in range(3 * scale):
        nodes.append(NodeSpec(f"pl-cpu-{i}", "", 0, 64_000, 256 * 1024, tainted=False,
                              filled_cpu_millis=32_000 if i == 0 else 0))
    return nodes


def make_streams(seed: int = 11, pods_per_class: int = 30) -> dict[str, list[Workload]]:
    """Per strategy: single Pods and Deployments, 1 to 8 GPUs, enough to overflow the best types."""
    rng = random.Random(seed)
    streams: dict[str, list[Workload]] = {}
    for strategy, gpu_class in STRATEGY_CLASS.items():
        counts = [1, 1, 1, 2, 2, 4] + ([8] if gpu_class in ("high", "standard") else [])
        workloads: list[Workload] = []
        pods = 0
        while pods < pods_per_class:
            gpus = rng.choice(counts)
            cpu = rng.choice([500, 2000, 4000, 8000])
            replicas = rng.choice([0, 0, 0, 3]) if gpus <= 2 else 0
            workloads.append(Workload(f"{strategy[:4]}-{len(workloads)}", gpu_class, gpus, cpu, replicas))
            pods += max(1, replicas)
        streams[strategy] = workloads
    return streams


# --- the catalog as the judge reads it ------------------------------------------

@dataclass(frozen=True)
class Catalog:
    score: Mapping[str, float]
    type_of_product: Mapping[str, str]


def read_catalog() -> Catalog:
    text = subprocess.run([local_cluster.gpuclass_path(), "catalog"], capture_output=True, text=True, check=True).stdout
    doc = yaml.safe_load(text)
    return Catalog({t["name"]: float(t["score"]) for t in doc["types"]},
                   {p: t["name"] for t in doc["types"] for p in t.get("products", [])})


# --- judging ----------------------------------------------------------------------

@dataclass
class NodeState:
    name: str
    gpu_type: str | None
    gpus: int
    free_gpus: int
    free_cpu_millis: int

    def holds(self, w: Workload) -> bool:
        return self.free_gpus >= w.gpus and self.free_cpu_millis >= w.cpu_millis


def _cpu_millis(quantity: str | None) -> int:
    if not quantity:
        return 0
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(GPUs, CPU millis) a Pod holds on its node: its containers' requests (limits default them)."""
    gpus = cpu = 0
    for c in pod["spec"].get("containers", []):
        resources = c.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        gpus += int(wanted.get(GPU, 0))
        cpu += _cpu_millis(wanted.get("cpu"))
    return gpus, cpu


def cluster_state(core: CoreApi, catalog: Catalog) -> dict[str, NodeState]:
    """The schedulable GPU nodes as the cluster holds them now, less what bound Pods take.

    Read from the API rather than from the fleet's spec, so nodes and Pods the benchmark did not
    make (another test's, on a shared cluster) are judged too.
    """
    nodes: dict[str, NodeState] = {}
    for node in json.loads(core.list_node(_preload_content=False).data)["items"]:
        labels = node["metadata"].get("labels") or {}
        product = labels.get("nvidia.com/gpu.product") or labels.get("gpu-type") or ""
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
        foreign = [t for t in node["spec"].get("taints") or [] if t["key"] != GPU]  # class Pods tolerate GPU taints
        if not ready or node["spec"].get("unschedulable") or foreign:
            continue
        allocatable = node["status"].get("allocatable") or {}
        gpus = int(allocatable.get(GPU, 0))
        nodes[node["metadata"]["name"]] = NodeState(node["metadata"]["name"], catalog.type_of_product.get(product),
                                                    gpus, gpus, _cpu_millis(allocatable.get("cpu")))
    pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
    for pod in pods:
        state = nodes.get(pod["spec"].get("nodeName") or "")
        if state and pod["status"].get("phase") not in ("Succeeded", "Failed"):
            gpus, cpu = _requests(pod)
            state.free_gpus -= gpus
            state.free_cpu_millis -= cpu
    return nodes


@dataclass
class Verdicts:
    placed: int = 0
    right: int = 0
    wrongly_pending: int = 0
    rightly_pending: int = 0
    wrong: list[str] = field(default_factory=list)


def judge(strategy: str, start: Mapping[str, NodeState], outcomes: Sequence[Outcome], catalog: Catalog) -> Verdicts:
    """Replay the binds in order from the cluster's state before the stream (`start`)."""
    nodes = {name: dataclasses.replace(n) for name, n in start.items()}
    verdicts = Verdicts()
    for o in outcomes:
        fitting = [n for n in nodes.values() if n.gpu_type in o.types and n.holds(o.workload)]
        if o.node is None:
            if fitting:
                verdicts.wrongly_pending += 1
                verdicts.wrong.append(f"{o.pod} Pending while {fitting[0].name} could hold it")
            else:
                verdicts.rightly_pending += 1
            continue
        verdicts.placed += 1
        chosen = nodes[o.node]
        if chosen in fitting and chosen in promised(strategy, fitting, o.workload, catalog):
            verdicts.right += 1
        else:
            verdicts.wrong.append(f"{o.pod} ({o.workload.gpus} GPUs) on {o.node} ({chosen.gpu_type})")
        chosen.free_gpus -= o.workload.gpus
        chosen.free_cpu_millis -= o.workload.cpu_millis
    return verdicts


def promised(strategy: str, fitting: Sequence[NodeState], w: Workload, catalog: Catalog) -> list[NodeState]:
    """The nodes the strategy allows at this moment (every one of them equally right)."""
    if strategy in ("performance", "cost"):
        pick = max if strategy == "performance" else min
        best = pick(catalog.score[n.gpu_type] for n in fitting if n.gpu_type)
        return [n for n in fitting if n.gpu_type and catalog.score[n.gpu_type] == best]
    in_use = strategy == "binpack"
    best_score = max(share_score(n, w, in_use=in_use) for n in fitting)
    return [n for n in fitting if share_score(n, w, in_use=in_use) == best_score]


def share_score(n: NodeState, w: Workload, *, in_use: bool) -> int:
    """NodeResourcesFit's MostAllocated (in_use) or LeastAllocated score once the Pod is placed."""
    used_after = n.gpus - n.free_gpus + w.gpus
    return (used_after if in_use else n.gpus - used_after) * 100 // n.gpus


def utilisation_spread(start: Mapping[str, NodeState], outcomes: Sequence[Outcome], types: Sequence[str]) -> float:
    """max - min over the class's types of the share of their GPUs in use at the end."""
    total: dict[str, int] = defaultdict(int)
    used: dict[str, int] = defaultdict(int)
    for n in start.values():
        if n.gpu_type is not None and n.gpu_type in types:
            total[n.gpu_type] += n.gpus
            used[n.gpu_type] += n.gpus - n.free_gpus
    for o in outcomes:
        t = start[o.node].gpu_type if o.node is not None and o.node in start else None
        if t is not None:
            used[t] += o.workload.gpus
    shares = [used[t] / total[t] for t in total if total[t]]
    return max(shares) - min(shares) if shares else 0.0


# --- running on the cluster ---------------------------------------------------------

def create_fleet(core: CoreApi, fleet: Sequence[NodeSpec], fill_namespace: str) -> None:
    delete_fleet(core, fleet)  # left by an interrupted run on a kept cluster
    for n in fleet:
        labels = {"kubernetes.io/hostname": n.name, "kubernetes.io/os": "linux",
                  "topology.kubernetes.io/zone": f"zone-{hash(n.name) % 3}"}
        if n.product:
            labels["nvidia.com/gpu.product"] = n.product
        core.create_node({"metadata": {"name": n.name, "labels": labels}})
        # TaintNodesByCondition tainted it not-ready; no node lifecycle controller lifts it here.
        core.patch_node(n.name, {"spec": {"taints": [GPU_TAINT] if n.tainted and n.gpus else []}})
        allocatable = {"cpu": f"{n.cpu_millis}m", "memory": f"{n.memory_mib}Mi", "pods": "110",
                       **({GPU: str(n.gpus)} if n.gpus else {})}
        core.patch_node_status(n.name, {"status": {"capacity": allocatable, "allocatable": allocatable,
                                                   "conditions": [{"type": "Ready", "status": "True"}]}})
        if n.filled_cpu_millis:
            core.create_namespaced_pod(fill_namespace, {
                "metadata": {"name": f"fill-{n.name}"},
                "spec": {"nodeName": n.name, "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "cpu", "image": "registry.example/batch:1",
                                         "resources": {"requests": {"cpu": f"{n.filled_cpu_millis}m",
                                                                    "memory": "1Gi"}}}]}})


def delete_fleet(core: CoreApi, fleet: Sequence[NodeSpec]) -> None:
    for n in fleet:
        try:
            core.delete_node(n.name)
        except ApiException as e:
            if e.status != 404:
                raise


class BindRecorder:
    """Watches a namespace's Pods and records the order in which they were bound."""

    def __init__(self, core: CoreApi, namespace: str) -> None:
        self.order: list[tuple[str, str]] = []
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(core, namespace), daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self, core: CoreApi, namespace: str) -> None:
        rv = core.list_namespaced_pod(namespace).metadata.resource_version
        self._ready.set()
        while not self._stop.is_set():
            response = core.list_namespaced_pod(namespace, watch=True, resource_version=rv, timeout_seconds=5,
                                                _preload_content=False)
            # Whole lines: a chunk of the stream can end in the middle of an event.
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                pod = json.loads(line)["object"]
                rv = pod["metadata"].get("resourceVersion", rv)
                name, node = pod["metadata"].get("name"), pod["spec"].get("nodeName")
                if name and node and name not in self._seen:
                    with self._lock:
                        self._seen.add(name)
                        self.order.append((name, node))

    def count(self) -> int:
        with self._lock:
            return len(self.order)

    def bound(self, names: set[str]) -> set[str]:
        with self._lock:
            return names & self._seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _pod_manifest(w: Workload, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.example/cuda:12",
                        "resources": {"limits": {GPU: str(w.gpus)},
                                      "requests": {"cpu": f"{w.cpu_millis}m", "memory": "4Gi"}}}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"annotations": {"gpu-class.io/class": w.gpu_class}, "labels": {"workload": w.name}},
            "spec": spec}


def run_stream(api: Any, namespace: str, workloads: Sequence[Workload], scheduler: str | None,
               pending_seconds: float = PENDING_SECONDS) -> list[Outcome]:
    core: CoreApi = kubernetes.client.CoreV1Api(api)
    apps: Any = kubernetes.client.AppsV1Api(api)
    recorder = BindRecorder(core, namespace)
    workload_of: dict[str, Workload] = {}
    types_of: dict[str, tuple[str, ...]] = {}  # gpu-class.io/types as the webhook wrote it
    pending: list[tuple[int, str]] = []  # (binds seen when it was found Pending, Pod)
    try:
        for w in workloads:
            manifest = _pod_manifest(w, scheduler)
            if w.replicas:
                apps.create_namespaced_deployment(namespace, {
                    "metadata": {"name": w.name},
                    "spec": {"replicas": w.replicas, "selector": {"matchLabels": {"workload": w.name}},
                             "template": manifest}})
            else:
                core.create_namespaced_pod(namespace, {**manifest, "metadata": {**manifest["metadata"],
                                                                                "name": w.name}})
            deadline = time.monotonic() + pending_seconds
            while True:
                listed = core.list_namespaced_pod(namespace, label_selector=f"workload={w.name}").items
                names = {p.metadata.name for p in listed}
                for p in listed:
                    workload_of[p.metadata.name] = w
                    listed_types = (p.metadata.annotations or {}).get("gpu-class.io/types", "")
                    types_of[p.metadata.name] = tuple(t for t in listed_types.split(",") if t)
                if len(names) == max(1, w.replicas) and recorder.bound(names) == names:
                    break
                if time.monotonic() > deadline:
                    binds_so_far = recorder.count()
                    pending.extend((binds_so_far, n) for n in sorted(names - recorder.bound(names)))
                    if w.replicas:
                        # A Deployment keeps retrying: shrink it to the replicas that were bound, so it
                        # cannot fill later capacity. Its ReplicaSet deletes unscheduled Pods first.
                        apps.patch_namespaced_deployment_scale(
                            w.name, namespace, {"spec": {"replicas": len(recorder.bound(names))}})
                    for n in names - recorder.bound(names):
                        try:
                            core.delete_namespaced_pod(n, namespace, grace_period_seconds=0)
                        except ApiException as e:
                            if e.status != 404:  # the scale-down may have taken it already
                                raise
                    break
                time.sleep(0.05)
    finally:
        recorder.stop()
    # A Pending Pod is judged at the moment it was found Pending: after the binds seen by then.
    events: list[tuple[int, int, str, str | None]] = [
        (i, 1, n, node) for i, (n, node) in enumerate(recorder.order) if n in workload_of]
    events += [(i, 0, n, None) for i, n in pending]
    return [Outcome(n, workload_of[n], node, types_of[n]) for _, _, n, node in sorted(events, key=lambda e: e[:2])]


@dataclass
class StreamResult:
    strategy: str
    path: Path_
    verdicts: Verdicts
    spread: float | None


def run_all(cluster: local_cluster.Cluster, fleet: Sequence[NodeSpec], streams: Mapping[str, Sequence[Workload]],
            paths: Sequence[Path_] = PATHS, pending_seconds: float = PENDING_SECONDS) -> list[StreamResult]:
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core: CoreApi = kubernetes.client.CoreV1Api(api)
    catalog = read_catalog()
    fill_ns = _namespace(core, "pl-fill", opted_in=False)
    results = []
    try:
        create_fleet(core, fleet, fill_ns)
        _wait_inventory(core, fleet)
        for strategy, workloads in streams.items():
            for path in paths:
                ns = _namespace(core, f"pl-{strategy[:4]}-{path[:3]}", opted_in=True)
                start = cluster_state(core, catalog)
                outcomes = run_stream(api, ns, workloads, SCHEDULER[path], pending_seconds)
                types = sorted({t for o in outcomes for t in o.types})
                results.append(StreamResult(strategy, path, judge(strategy, start, outcomes, catalog),
                                            utilisation_spread(start, outcomes, types)
                                            if strategy == "balanced" else None))
                _drop_namespace(core, ns)
    finally:
        _drop_namespace(core, fill_ns)
        delete_fleet(core, fleet)
    return results


def _namespace(core: CoreApi, prefix: str, *, opted_in: bool) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": name,
                                        "labels": {"gpu-class.io/inject": "enabled"} if opted_in else {}}})
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no default ServiceAccount in {name} after 30 s")
        time.sleep(0.1)
    return name


def _drop_namespace(core: CoreApi, name: str) -> None:
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    kubernetes.client.AppsV1Api(core.api_client).delete_collection_namespaced_deployment(name)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    # The webhook's accounting must have let go of these Pods before the next stream is judged
    # against an empty cluster.
    deadline = time.monotonic() + 30
    while core.list_namespaced_pod(name).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Pods of {name} still there after 30 s")
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        time.sleep(0.2)
    time.sleep(1.0)
    core.delete_namespace(name)


def _wait_inventory(core: CoreApi, fleet: Sequence[NodeSpec]) -> None:
    """Until an 8-GPU `high` Pod is placed: the webhook has seen the fleet's H100 nodes."""
    ns = _namespace(core, "pl-probe", opted_in=True)
    try:
        pod = _pod_manifest(Workload("probe", "high", 8, 100), None)
        pod["metadata"]["name"] = "probe"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                stored = json.loads(core.create_namespaced_pod(ns, pod, dry_run="All", _preload_content=False).data)
                if "H100" in stored["metadata"]["annotations"].get("gpu-class.io/types", ""):
                    return
            except ApiException:
                pass
            time.sleep(0.2)
        raise RuntimeError("the webhook did not see the benchmark's nodes within 30 s")
    finally:
        core.delete_namespace(ns)


def render(results: Sequence[StreamResult], command: str, wall_seconds: float, fleet_size: int) -> str:
    lines = [
        "## Placement on the real scheduler (`python -m bench placement`)",
        "",
        f"Command: `{command}`; {fleet_size} nodes, Kubernetes {local_cluster.kube_version()}, "
        f"{wall_seconds:.0f} s wall. Fidelity: Pods bound where the strategy promised, at the moment they "
        "were bound (bench/placement.py says how each strategy is judged).",
        "",
        "| strategy | path | Pods placed | right | fidelity | wrongly Pending | rightly Pending | GPU use spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        v = r.verdicts
        fidelity = f"{100 * v.right / v.placed:.1f}%" if v.placed else "-"
        spread = f"{100 * r.spread:.0f} pts" if r.spread is not None else ""
        path = PATH_TITLE[r.path]
        lines.append(f"| {r.strategy} | {path} | {v.placed} | {v.right} | {fidelity} | {v.wrongly_pending} "
                     f"| {v.rightly_pending} | {spread} |")
    wrong = [f"- {r.strategy} {r.path}: " + "; ".join(r.verdicts.wrong[:4]) for r in results if r.verdicts.wrong]
    if wrong:
        lines += ["", "First misplacements:", *wrong]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench placement", description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=30, help="Pods per strategy (default 30)")
    p.add_argument("--scale", type=int, default=1, help="fleet multiplier (default 1: 30 nodes)")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    started = time.monotonic()
    with local_cluster.running(args.cluster_dir) as cluster:
        fleet = make_fleet(args.scale)
        results = run_all(cluster, fleet, make_streams(args.seed, args.pods))
    command = "python -m bench placement" + (" " + " ".join(argv) if argv else "")
    text = render(results, command, time.monotonic() - started, len(fleet))
    print(text)
    write_section(args.output, "placement", text)
    return 0
