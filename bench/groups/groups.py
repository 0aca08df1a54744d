"""`python -m bench groups`: does every group of Pods (gpu-class.io/group) run on one GPU type, on the real scheduler?

A pool on the local control plane (tests/e2e/local-cluster) for class `high`: its best type, H200, on
three 8-GPU nodes, partly filled before each group by GPU Pods bound to them directly, and its next
type, H100-NVL, on five 8-GPU nodes that hold any group. Indexed Jobs, one at a time, as a user
submits them: parallelism 4 to 8, 1 to 4 GPUs per Pod, three in four with gpu-class.io/group-size,
each on three paths: (a) the stock default scheduler, (b) gpu-class-scheduler (the strict profiles),
(c) gpu-class-extender. After each group, its Job is deleted.

Judged for each group against the cluster as it was when its Job was created (every node of the
class's types, the session's other nodes included):

  mixed: its bound Pods are on more than one GPU product;
  stranded: a Pod left Pending while a type of the class had room for every Pod of the group (for a
    type, the sum over its ready nodes of free GPUs // GPUs per Pod: Pods of one size fill every
    node's share, in whatever order they are bound);
  spilled whole: the best type present could not hold the group, and all of it ran on another;
and, on the strict path, whether a sized group ran on the first type of the class that could hold it
whole, and an unsized one on the first type with room for one Pod, with as many Pods as that type had
room for and the rest Pending there.

Before each Job, the run waits until the webhook's workers see the fill and the last group's Pods
gone (probes on connections held at once, so each worker answers): the watch is milliseconds behind
the API server, and a decision on a view older than the test's own change would judge the watch's
lag rather than the placement.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import kubernetes
from kubernetes.client.exceptions import ApiException

from bench.placement.placement import PATH_TITLE, PATHS, REPO_ROOT, SCHEDULER, Path_, read_catalog
from bench.placement.placement_cluster import GPU_TAINT, cluster_state, drop_namespace, held_connections, make_namespace
from bench.placement.placement_model import GPU, NodeState
from webhook.core.catalog.model import Catalog
from bench.common.commit import measured_at
from bench.common.sections import write_section

sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))
import local_cluster  # noqa: E402  (tests/e2e is not a package)

CoreApi = Any
GROUP_CLASS = "high"
BEST, NEXT = "H200", "H100-NVL"
POOL = {BEST: ("NVIDIA-H200", "grp-h200", 3), NEXT: ("NVIDIA-H100-NVL", "grp-h100nvl", 5)}  # product, prefix, nodes
NODE_GPUS = 8
SETTLE_SECONDS = 120.0  # a failure bound only: a group settles within a second or two


@dataclass(frozen=True)
class GroupSpec:
    name: str
    pods: int
    gpus: int
    sized: bool
    free_best: tuple[int, ...]  # free GPUs on each best-type node when the Job is created


def make_groups(seed: int, count: int) -> list[GroupSpec]:
    rng = random.Random(seed)
    return [GroupSpec(f"g{i:02d}", rng.randint(4, 8), rng.randint(1, 4), i % 4 != 3,
                      tuple(rng.randint(0, NODE_GPUS - 1) for _ in range(POOL[BEST][2])))
            for i in range(count)]


@dataclass
class Result:
    spec: GroupSpec
    path: Path_
    holding: list[str]  # types that could hold the whole group when its Job was created, class order
    first_room: str | None  # the first type of the class with room for one of its Pods then
    room_there: int  # how many of its Pods that type had room for
    products: dict[str, int] = field(default_factory=dict)  # GPU product label value -> Pods bound there
    types: list[str] = field(default_factory=list)  # the types of those products
    pending: int = 0
    reasons: list[str] = field(default_factory=list)  # the scheduler's message for each Pending Pod

    @property
    def mixed(self) -> bool:
        return len(self.products) > 1

    @property
    def stranded(self) -> bool:
        return self.spec.sized and bool(self.holding) and self.pending > 0

    @property
    def spilled_whole(self) -> bool:
        return self.spec.sized and bool(self.holding) and self.holding[0] != self.first_room and not self.pending

    @property
    def as_promised(self) -> bool:
        """Strict path: the type and the Pods bound that the class's order and the size promise."""
        if self.spec.sized and self.holding:
            return self.types == [self.holding[0]] and self.pending == 0
        return self.types == [self.first_room] and self.pending == self.spec.pods - min(self.spec.pods, self.room_there)


def class_types(catalog: Catalog) -> list[str]:
    """The group class's types, best first, as the catalog orders them."""
    return list(catalog.classes[GROUP_CLASS].types)


def rooms(state: Mapping[str, NodeState], types: Sequence[str], gpus: int) -> dict[str, int]:
    """Pods of `gpus` GPUs each that every type of the class has room for now."""
    room = {t: 0 for t in types}
    for n in state.values():
        if n.gpu_type in room:
            room[n.gpu_type] += max(n.free_gpus, 0) // gpus
    return room


# --- the pool -------------------------------------------------------------------------

def pool_nodes() -> list[tuple[str, str, str]]:
    """(name, type, product) of every node of the pool."""
    return [(f"{prefix}-{i}", t, product) for t, (product, prefix, n) in POOL.items() for i in range(n)]


def create_pool(core: CoreApi) -> None:
    delete_pool(core)  # left by an interrupted run on a kept cluster
    for name, _, product in pool_nodes():
        core.create_node({"metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "nvidia.com/gpu.product": product}}})
        core.patch_node(name, {"spec": {"taints": [GPU_TAINT]}})  # in place of the not-ready taint
        allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(NODE_GPUS)}
        core.patch_node_status(name, {"status": {"capacity": allocatable, "allocatable": allocatable,
                                                 "conditions": [{"type": "Ready", "status": "True"}]}})


def delete_pool(core: CoreApi) -> None:
    for name, _, _ in pool_nodes():
        try:
            core.delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise


def fill_best(core: CoreApi, namespace: str, free: Sequence[int]) -> None:
    """GPU Pods bound straight to the best type's nodes (no webhook, no scheduler), leaving `free` GPUs each."""
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    _wait_gone(core, namespace, "")
    best = [name for name, t, _ in pool_nodes() if t == BEST]
    for node, left in zip(best, free):
        if left < NODE_GPUS:
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": f"fill-{node}"},
                "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "gpu", "image": "registry.example/batch:1",
                                         "resources": {"limits": {GPU: str(NODE_GPUS - left)}}}]}})


# --- waiting for the webhook's view ----------------------------------------------------------

def _probe_review(namespace: str, size: int, exclude: Sequence[str]) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace, "annotations": {
        "gpu-class.io/class": GROUP_CLASS, "gpu-class.io/count": "1", "gpu-class.io/group": f"probe-{uuid.uuid4().hex}",
        "gpu-class.io/group-size": str(size), "gpu-class.io/exclude-types": ",".join(exclude)}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1"}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uuid.uuid4().hex, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace,
        "operation": "CREATE", "object": pod}}).encode()


def _has_room(conn: http.client.HTTPSConnection, namespace: str, size: int, exclude: Sequence[str]) -> bool:
    """Whether the worker behind `conn` sees room for `size` one-GPU Pods on the one type not excluded."""
    conn.request("POST", "/mutate", _probe_review(namespace, size, exclude), {"Content-Type": "application/json"})
    response = json.loads(conn.getresponse().read())["response"]
    return response["allowed"] and not any("no type has room" in w for w in response.get("warnings", []))


def wait_webhook_sees(cluster: local_cluster.Cluster, namespace: str, free: Mapping[str, int],
                      types: Sequence[str], seconds: float = 30.0) -> None:
    """Until every worker sees exactly `free` GPUs on each of the pool's types (asked on
    held_connections, which reach every worker)."""

    def sees(conn: http.client.HTTPSConnection, t: str) -> bool:
        others = [x for x in types if x != t]  # room for exactly free[t] one-GPU Pods, not one more
        return ((free[t] == 0 or _has_room(conn, namespace, free[t], others))
                and not _has_room(conn, namespace, free[t] + 1, others))

    deadline = time.monotonic() + seconds
    while True:
        try:
            with held_connections(cluster) as conns:
                seen = all(sees(c, t) for c in conns for t in POOL)
        except (OSError, http.client.HTTPException):  # a connection closed under load: ask again
            seen = False
        if seen:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the webhook's workers did not see {dict(free)} free GPUs within {seconds:.0f} s")
        time.sleep(0.1)


# --- one group ------------------------------------------------------------------------

def job_manifest(spec: GroupSpec, scheduler: str | None) -> dict[str, Any]:
    annotations = {"gpu-class.io/class": GROUP_CLASS, "gpu-class.io/group": spec.name,
                   **({"gpu-class.io/group-size": str(spec.pods)} if spec.sized else {})}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.example/train:1",
                        "resources": {"limits": {GPU: str(spec.gpus)}, "requests": {"cpu": "100m"}}}]}
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": spec.name},
            "spec": {"completionMode": "Indexed", "completions": spec.pods, "parallelism": spec.pods,
                     "backoffLimit": 0, "template": {"metadata": {"annotations": annotations}, "spec": pod_spec}}}


def _unschedulable(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message when it tried the Pod and found no node; None when it has not (yet)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "")
    return None


def _job_pods(core: CoreApi, namespace: str, job: str) -> list[dict[str, Any]]:
    data = core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}",
                                    _preload_content=False).data
    return list(json.loads(data)["items"])


def wait_settled(core: CoreApi, namespace: str, spec: GroupSpec) -> list[dict[str, Any]]:
    """Every Pod of the group created, and each bound or tried by the scheduler and found no node."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        pods = _job_pods(core, namespace, spec.name)
        if len(pods) == spec.pods and all(p["spec"].get("nodeName") or _unschedulable(p) is not None for p in pods):
            return pods
        if time.monotonic() > deadline:
            raise RuntimeError(f"group {spec.name} did not settle within {SETTLE_SECONDS:.0f} s: {len(pods)} Pods")
        time.sleep(0.1)


def _wait_gone(core: CoreApi, namespace: str, selector: str) -> None:
    deadline = time.monotonic() + 60
    while core.list_namespaced_pod(namespace, label_selector=selector).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Pods of {namespace} ({selector or 'all'}) still there after 60 s")
        core.delete_collection_namespaced_pod(namespace, label_selector=selector, grace_period_seconds=0)
        time.sleep(0.1)


def run_group(cluster: local_cluster.Cluster, api: Any, namespace: str, fill_namespace: str, spec: GroupSpec,
              path: Path_, catalog: Catalog, types: Sequence[str]) -> Result:
    core: CoreApi = kubernetes.client.CoreV1Api(api)
    batch: Any = kubernetes.client.BatchV1Api(api)
    fill_best(core, fill_namespace, spec.free_best)
    state = cluster_state(core, catalog)
    one_gpu = rooms(state, types, 1)
    wait_webhook_sees(cluster, namespace, {t: one_gpu[t] for t in POOL}, types)
    room = rooms(state, types, spec.gpus)
    first_room = next((t for t in types if room[t] > 0), None)
    result = Result(spec, path, [t for t in types if room[t] >= spec.pods], first_room,
                    room[first_room] if first_room else 0)
    batch.create_namespaced_job(namespace, job_manifest(spec, SCHEDULER[path]))
    try:
        pods = wait_settled(core, namespace, spec)
    finally:
        batch.delete_namespaced_job(spec.name, namespace, propagation_policy="Background")
        _wait_gone(core, namespace, f"batch.kubernetes.io/job-name={spec.name}")
    product_of = {n.metadata.name: (n.metadata.labels or {}).get("nvidia.com/gpu.product", "") for n in
                  core.list_node().items}
    for p in pods:
        node = p["spec"].get("nodeName")
        if node:
            product = product_of.get(node) or f"(node {node})"
            result.products[product] = result.products.get(product, 0) + 1
        else:
            result.pending += 1
            result.reasons.append(_unschedulable(p) or "")
    result.types = sorted({catalog.type_of_product(p) or p for p in result.products})
    return result


def run_all(cluster: local_cluster.Cluster, groups: Sequence[GroupSpec],
            paths: Sequence[Path_] = PATHS, pause_seconds: float = 0.0) -> list[Result]:
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core: CoreApi = kubernetes.client.CoreV1Api(api)
    catalog = read_catalog()
    types = class_types(catalog)
    fill_ns = make_namespace(core, "grp-fill", opted_in=False)
    results = []
    try:
        create_pool(core)
        for path in paths:
            ns = make_namespace(core, f"grp-{path[:3]}", opted_in=True)
            try:
                for g in groups:
                    results.append(run_group(cluster, api, ns, fill_ns, g, path, catalog, types))
                    time.sleep(pause_seconds)
            finally:
                drop_namespace(core, ns)
    finally:
        drop_namespace(core, fill_ns)
        delete_pool(core)
    return results


def render(results: Sequence[Result], command: str, wall_seconds: float) -> str:
    lines = [
        f"## One GPU type per group on the real scheduler (`{command}`)",
        "",
        f"{measured_at()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Command: `{command}`; Kubernetes {local_cluster.kube_version()}, {wall_seconds:.0f} s wall. Indexed Jobs "
        f"of class {GROUP_CLASS}, parallelism 4-8, 1-4 GPUs per Pod, created one at a time while {BEST} (3 x 8 "
        f"GPUs) is partly full; {NEXT} (5 x 8) holds any group. bench/groups/groups.py says how each group is judged.",
        "",
        "| path | groups | sized | mixed | stranded | sized spilled whole | unsized with Pods waiting "
        "| as the strict order promises |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in dict.fromkeys(r.path for r in results):
        rs = [r for r in results if r.path == path]
        sized = [r for r in rs if r.spec.sized]
        waiting = [r for r in rs if not r.spec.sized and r.pending]
        promised = f"{sum(r.as_promised for r in rs)} of {len(rs)}" if path != "default" else "-"
        lines.append(f"| {PATH_TITLE[path]} | {len(rs)} | {len(sized)} | {sum(r.mixed for r in rs)} "
                     f"| {sum(r.stranded for r in rs)} | {sum(r.spilled_whole for r in rs)} "
                     f"| {len(waiting)} of {len(rs) - len(sized)} | {promised} |")
    wrong = [f"- {r.path} {r.spec.name} ({r.spec.pods} x {r.spec.gpus} GPUs, "
             f"{'sized' if r.spec.sized else 'no size'}, {BEST} free {'+'.join(map(str, r.spec.free_best))}): "
             f"{', '.join(f'{n} on {p}' for p, n in r.products.items())}, {r.pending} Pending" for r in results
             if r.mixed or r.stranded or (r.path != "default" and not r.as_promised)]
    if wrong:
        lines += ["", "Groups not as promised:", *wrong]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench groups", description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=40, help="groups per path (default 40)")
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    p.add_argument("--pause-seconds", type=float, default=0.0,
                   help="wait between groups (the extender counts a Pod it sent to one node for up to 10 s)")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    asked = args.paths.split(",")
    if not asked or set(asked) - set(PATHS):
        p.error(f"--paths {args.paths}: name paths among {', '.join(PATHS)}")
    paths = [path for path in PATHS if path in asked]
    started = time.monotonic()
    with local_cluster.running(args.cluster_dir) as cluster:
        results = run_all(cluster, make_groups(args.seed, args.groups), paths, args.pause_seconds)
    command = "python -m bench groups" + (" " + " ".join(argv) if argv else "")
    text = render(results, command, time.monotonic() - started)
    print(text)
    # a run of some paths, or paused, is a section of its own: it does not replace the full run's
    write_section(args.output, "groups" if paths == list(PATHS) and not args.pause_seconds else "groups-variant", text)
    return 0
