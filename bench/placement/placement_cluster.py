"""The placement benchmark's side on the local control plane: the fleet, the streams, the watch.

Nodes are API objects without kubelets (tests/e2e/local_cluster.py): created with their labels,
taints and status in one call, then patched once to lift the `not-ready` taint that the API
server's TaintNodesByCondition admission puts on every new Node (no node lifecycle controller runs
to lift it). A barrier then makes sure every scheduler and every webhook worker has seen the whole
fleet before a stream starts: a node written last, a Pod per scheduler that only it can take, and
the extender's answer about it on several connections at once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import json
import ssl
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import kubernetes
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from webhook.core.catalog.model import Catalog

from bench.common.scrape import read_scheduler_times
from bench.placement.judge_catalog import JudgeCatalog
from bench.placement.placement_model import (
    GPU, POD_MEMORY_MIB, SICK_CONDITION, NodeSpec, NodeState, Outcome, Workload, is_sick,
)

# The client's models are typed; the API takes the plain dict bodies we send, and answers are
# read as the JSON they are.
Api = Any

PRODUCT_LABEL = "nvidia.com/gpu.product"  # GFD's, as the fleet's nodes carry it
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
T = TypeVar("T")
THREADS = 8  # concurrent API calls when writing the fleet: the API server on 2 cores is saturated by then
BARRIER_LABELS = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}  # a type no stream's class has


# --- quantities --------------------------------------------------------------------

def cpu_millis(quantity: str | None) -> int:
    if not quantity:
        return 0
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def memory_mib(quantity: str | None) -> int:
    """Whole MiB of a memory quantity (the binary suffixes and plain bytes: what this benchmark writes)."""
    if not quantity:
        return 0
    for suffix, factor in (("Ki", 1 / 1024), ("Mi", 1), ("Gi", 1024), ("Ti", 1024 * 1024)):
        if quantity.endswith(suffix):
            return int(float(quantity[:-2]) * factor)
    return int(quantity) // (1024 * 1024)


# --- the fleet -------------------------------------------------------------------------

def parallel(call: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
    """call() on each item, THREADS at a time: the results in order."""
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(call, items))  # re-raises the first failure


def _create_node(core: Api, name: str, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]],
                 allocatable: Mapping[str, str], capacity: Mapping[str, str] | None = None,
                 conditions: Sequence[Mapping[str, str]] = ()) -> None:
    try:
        core.delete_node(name)  # left by an interrupted run on a kept cluster
    except ApiException as e:
        if e.status != 404:
            raise
    core.create_node({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}},
        "spec": {"taints": list(taints)},
        "status": {"capacity": capacity or allocatable, "allocatable": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}, *conditions]},
    }, _preload_content=False)
    # TaintNodesByCondition added `not-ready` at create; this write is the node lifecycle controller's.
    core.patch_node(name, {"spec": {"taints": list(taints)}}, _preload_content=False)


def create_node(core: Api, n: NodeSpec, fill_namespace: str) -> None:
    """The node, and a CPU-only Pod bound to it if it is partly filled."""
    labels = {"topology.kubernetes.io/zone": f"zone-{sum(map(ord, n.name)) % 3}",
              **({PRODUCT_LABEL: n.product} if n.product else {})}
    allocatable = {"cpu": f"{n.cpu_millis}m", "memory": f"{n.memory_mib}Mi", "pods": "110",
                   **({GPU: str(n.gpus)} if n.gpus else {})}
    # sick: one GPU more in capacity than allocatable (held out by the device plugin), or the condition
    capacity = {**allocatable, GPU: str(n.gpus + 1)} if n.sick == "allocatable" else allocatable
    conditions = [{"type": SICK_CONDITION[0], "status": SICK_CONDITION[1]}] if n.sick == "condition" else []
    _create_node(core, n.name, labels, [GPU_TAINT] if n.tainted else [], allocatable, capacity, conditions)
    if n.filled_cpu_millis:
        core.create_namespaced_pod(fill_namespace, {
            "metadata": {"name": f"fill-{n.name}"},
            "spec": {"nodeName": n.name, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "cpu", "image": "registry.example/batch:1",
                                     "resources": {"requests": {"cpu": f"{n.filled_cpu_millis}m",
                                                                "memory": "1Gi"}}}]}},
            _preload_content=False)


def create_nodes(core: Api, nodes: Sequence[NodeSpec], fill_namespace: str) -> None:
    """The nodes, and a CPU-only Pod bound to each that is partly filled."""
    parallel(lambda n: create_node(core, n, fill_namespace), nodes)


def delete_nodes(core: Api, names: Iterable[str]) -> None:
    def delete(name: str) -> None:
        try:
            core.delete_node(name, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise
    parallel(delete, names)


def barrier(api: Api, cluster: Any, name: str, schedulers: Sequence[str | None], namespace: str,
            seconds: float = 120.0) -> None:
    """Until every scheduler and every webhook worker has seen all that was written before: node
    `name` is written last, each scheduler binds a Pod that fits it alone (so its Node and Pod
    caches have caught up), and the extender knows the node on connections that reach every
    webhook worker (held_connections)."""
    core: Api = kubernetes.client.CoreV1Api(api)
    _create_node(core, name, BARRIER_LABELS, [], {"cpu": "8", "memory": "32Gi", "pods": "110", "amd.com/gpu": "8"})
    pods = []
    for scheduler in schedulers:
        pod = f"barrier-{uuid.uuid4().hex[:6]}"
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": pod},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": name}, "terminationGracePeriodSeconds": 0,
                     **({"schedulerName": scheduler} if scheduler else {}),
                     "containers": [{"name": "c", "image": "registry.example/pause:1",
                                     "resources": {"requests": {"cpu": "10m"}}}]}}, _preload_content=False)
        pods.append(pod)
    deadline = time.monotonic() + seconds
    try:
        while not all(core.read_namespaced_pod(p, namespace).spec.node_name for p in pods):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the schedulers did not bind the barrier Pods to {name} within {seconds:.0f} s")
            time.sleep(0.2)
        while not _extender_knows(cluster, name):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the webhook's workers did not see node {name} within {seconds:.0f} s")
            time.sleep(0.2)
    finally:
        for p in pods:
            core.delete_namespaced_pod(p, namespace, grace_period_seconds=0)


@contextlib.contextmanager
def held_connections(cluster: Any, count: int = 4, *,
                     extender: bool = False) -> Iterator[list[http.client.HTTPSConnection]]:
    """Connections to the webhook, each to be used in turn and kept open while the next is used.

    A new connection goes to the worker holding fewer (webhook/serving/balance.py), so four of
    them reach both workers of the local cluster twice. Each connects at its first request and must
    ask at once: the server closes one that stays silent, and a worker's one thread would wait on it.
    With `extender`, to the extender's listener, as the scheduler calls it (its client certificate).
    """
    webhook_dir = cluster.dir / "webhook"
    context = ssl.create_default_context(cafile=str(webhook_dir / "ca.crt"))
    if extender:
        context.load_cert_chain(str(webhook_dir / "client.crt"), str(webhook_dir / "client.key"))
    port = cluster.ports.extender if extender else cluster.ports.webhook
    held = [http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10) for _ in range(count)]
    try:
        yield held
    finally:
        for c in held:
            c.close()


def _extender_knows(cluster: Any, node: str) -> bool:
    args = json.dumps({"Pod": {"metadata": {"name": "barrier", "namespace": "barrier", "uid": "barrier",
                                            "annotations": {"gpu-class.io/types": "MI300X"}},
                               "spec": {"containers": [{"name": "c",
                                                        "resources": {"limits": {"amd.com/gpu": "1"}}}]}},
                       "NodeNames": [node]})
    try:
        with held_connections(cluster, extender=True) as held:
            answers = []
            for c in held:
                c.request("POST", "/filter", args, {"Content-Type": "application/json"})
                answers.append(json.loads(c.getresponse().read()))
    except (OSError, http.client.HTTPException):  # a connection closed under load: ask again
        return False
    return all(node in (a.get("NodeNames") or []) for a in answers)


def _gpu_type(catalog: JudgeCatalog | Catalog, labels: Mapping[str, Any]) -> str | None:
    if isinstance(catalog, JudgeCatalog):
        return catalog.gpu_type_of_labels(labels, GPU)
    return next((t for t, _, _ in catalog.matches_of_labels(labels) if catalog.types[t].resource == GPU), None)


def cluster_state(core: Api, catalog: JudgeCatalog | Catalog) -> dict[str, NodeState]:
    """The schedulable GPU nodes as the cluster holds them now, less what bound Pods take; each
    node's type is what the catalog makes of its labels, and whether it is sick what its status says
    (is_sick, with the catalog's unhealthy conditions). The placement judge passes its own reading of
    the catalog (JudgeCatalog), so a node is typed by the judge's label matching, not the webhook's;
    a webhook Catalog types it as the inventory does.

    Read from the API rather than from the fleet's spec, so nodes and Pods the benchmark did not
    make (another test's, on a shared cluster) are judged too.
    """
    nodes: dict[str, NodeState] = {}
    for node in json.loads(core.list_node(_preload_content=False).data)["items"]:
        labels = node["metadata"].get("labels") or {}
        gpu_type = _gpu_type(catalog, labels)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
        foreign = [t for t in node["spec"].get("taints") or [] if t["key"] != GPU]  # class Pods tolerate GPU taints
        allocatable = node["status"].get("allocatable") or {}
        gpus = int(allocatable.get(GPU, 0))
        if not ready or node["spec"].get("unschedulable") or foreign or not gpus:
            continue
        sick = is_sick(node["status"].get("capacity") or {}, allocatable, node["status"].get("conditions") or [],
                       catalog.unhealthy_conditions)
        nodes[node["metadata"]["name"]] = NodeState(node["metadata"]["name"], gpu_type, gpus, gpus,
                                                    cpu_millis(allocatable.get("cpu")),
                                                    memory_mib(allocatable.get("memory")), sick)
    for pod in json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]:
        state = nodes.get(pod["spec"].get("nodeName") or "")
        if state is None or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for c in pod["spec"].get("containers", []):
            resources = c.get("resources") or {}
            wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            state.free_gpus -= int(wanted.get(GPU, 0))
            state.free_cpu_millis -= cpu_millis(wanted.get("cpu"))
            state.free_memory_mib -= memory_mib(wanted.get("memory"))
    return nodes


def scheduler_metrics(cluster: Any, port: int) -> str:
    """The text of the /metrics of the kube-scheduler listening on `port`."""
    # It serves /metrics with a certificate it made itself at start: there is nothing to verify it by.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
    return str(urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10).read().decode())


def scheduler_times(cluster: Any, port: int) -> dict[str, float]:
    """kube-scheduler's own account so far (bench/common/scrape.py's read_scheduler_times)."""
    return read_scheduler_times(scheduler_metrics(cluster, port))


# --- streams -----------------------------------------------------------------------------

@dataclass
class PodRecord:
    workload: str
    added: float  # monotonic time of its ADDED event
    node: str | None = None
    bound: float | None = None  # monotonic time of the first event that shows it bound
    refused: bool = False  # a scheduler has marked it PodScheduled=False, Unschedulable


class BindRecorder:
    """Watches a namespace's Pods: when each was added and bound, and the order of the binds."""

    def __init__(self, core: Api, namespace: str) -> None:
        self.pods: dict[str, PodRecord] = {}
        self.order: list[str] = []  # bound Pods, in the order the watch showed them bound
        self.changed = threading.Condition()
        self.error: str | None = None
        self._stop = threading.Event()
        rv = core.list_namespaced_pod(namespace).metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(core, namespace, rv), daemon=True)
        self._thread.start()

    def _run(self, core: Api, namespace: str, rv: str) -> None:
        while not self._stop.is_set():
            response = core.list_namespaced_pod(namespace, watch=True, resource_version=rv, timeout_seconds=5,
                                                _preload_content=False)
            # Whole lines: a chunk of the stream can end in the middle of an event.
            for line in iter_resp_lines(response):
                if line.strip():
                    rv = self._record(json.loads(line), time.monotonic()) or rv

    def _record(self, event: Mapping[str, Any], now: float) -> str | None:
        pod = event["object"]
        if event["type"] == "ERROR":  # 410 Gone: nothing compacts etcd during a run, so it is a fault
            with self.changed:
                self.error = str(pod.get("message"))
                self.changed.notify_all()
            self._stop.set()
            return None
        metadata = pod["metadata"]
        with self.changed:
            record = self.pods.get(metadata["name"])
            if record is None and event["type"] == "ADDED":
                record = self.pods[metadata["name"]] = PodRecord((metadata.get("labels") or {}).get("workload", ""), now)
            node = pod["spec"].get("nodeName")
            if record is not None and not record.refused:
                record.refused = any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                                     for c in (pod.get("status") or {}).get("conditions") or [])
            if record is not None and node and record.node is None:
                record.node, record.bound = node, now
                self.order.append(metadata["name"])
            self.changed.notify_all()
        return str(metadata.get("resourceVersion") or "") or None

    def of(self, workload: str) -> dict[str, PodRecord]:
        return {name: r for name, r in self.pods.items() if r.workload == workload}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def pod_template(w: Workload, scheduler: str | None, restart: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": restart, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.example/cuda:12",
                        "resources": {"limits": {GPU: str(w.gpus)},
                                      "requests": {"cpu": f"{w.cpu_millis}m", "memory": f"{POD_MEMORY_MIB}Mi"}}}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"annotations": {"gpu-class.io/class": w.gpu_class}, "labels": {"workload": w.name}},
            "spec": spec}


def create_workload(api: Api, namespace: str, w: Workload, scheduler: str | None) -> bool:
    """Whether it was created: a single Pod that the webhook did not answer in time (it fails open)
    is refused by the backstop. A controller's Pods refused so are made again by the controller."""
    core: Api = kubernetes.client.CoreV1Api(api)
    apps: Api = kubernetes.client.AppsV1Api(api)
    batch: Api = kubernetes.client.BatchV1Api(api)
    if w.kind == "single":
        pod = pod_template(w, scheduler, "Never")
        pod["metadata"]["name"] = w.name
        try:
            core.create_namespaced_pod(namespace, pod, _preload_content=False)
        except ApiException as e:
            if e.status == 403 and "gpu-class did not place this Pod" in str(e.body):
                return False
            raise
    elif w.kind == "deployment":
        apps.create_namespaced_deployment(namespace, {
            "metadata": {"name": w.name},
            "spec": {"replicas": w.pods, "selector": {"matchLabels": {"workload": w.name}},
                     "template": pod_template(w, scheduler, "Always")}}, _preload_content=False)
    else:
        batch.create_namespaced_job(namespace, {
            "metadata": {"name": w.name},
            # Pods deleted while Pending count as failures: they must not fail the Job, whose
            # controller would then delete its bound Pods too.
            "spec": {"parallelism": w.pods, "backoffLimit": 1000,
                     **({"completions": w.pods, "completionMode": "Indexed"} if w.indexed else {}),
                     "template": pod_template(w, scheduler, "Never")}}, _preload_content=False)
    return True


def shrink_workload(api: Api, namespace: str, w: Workload, bound: int) -> None:
    """Keep a Deployment or Job at the Pods it has bound, so it cannot take later capacity. Both
    controllers delete unscheduled Pods first."""
    if w.kind == "deployment":
        kubernetes.client.AppsV1Api(api).patch_namespaced_deployment_scale(
            w.name, namespace, {"spec": {"replicas": bound}})
    elif w.kind == "job":
        kubernetes.client.BatchV1Api(api).patch_namespaced_job(w.name, namespace, {"spec": {"parallelism": bound}})


def wait_workload(recorder: BindRecorder, w: Workload, pending_seconds: float,
                  created_seconds: float = 60.0) -> dict[str, PodRecord]:
    """Until all of the workload's Pods are bound, or none was bound for `pending_seconds` since the
    last change and every unbound one was refused by its scheduler: its Pods, as recorded then.

    A Pod is Pending when the scheduler tried it and found no node, not merely when it has not been
    bound in time: on a loaded control plane the scheduler can hear of a Pod seconds after its create
    (a run once saw 2 s), and a Pod judged then would be deleted before the scheduler ever tried it.
    After `created_seconds` it is judged whatever the scheduler said."""
    started = last_change = time.monotonic()
    progress: tuple[int, int] = (-1, -1)
    with recorder.changed:
        while True:
            if recorder.error:
                raise RuntimeError(f"the Pod watch failed: {recorder.error}")
            pods = recorder.of(w.name)
            now_progress = (len(pods), sum(r.node is not None for r in pods.values()))
            now = time.monotonic()
            if now_progress != progress:
                progress, last_change = now_progress, now
            tried = all(r.refused for r in pods.values() if r.node is None)
            if len(pods) >= w.pods and (progress[1] == len(pods) or now - last_change > pending_seconds
                                        and (tried or now - started > created_seconds)):
                return pods
            if len(pods) < w.pods and now - started > created_seconds:
                raise RuntimeError(f"{w.name}: {len(pods)} of {w.pods} Pods made within {created_seconds:.0f} s")
            recorder.changed.wait(0.1)


def run_stream(api: Api, namespace: str, workloads: Sequence[Workload], scheduler: str | None,
               pending_seconds: float, *, together: bool = False) -> list[Outcome]:
    """Create the workloads one at a time (each once the one before is bound or found Pending), or
    all at once (`together`); the Pods in bind order, the Pending ones where they were found so."""
    core: Api = kubernetes.client.CoreV1Api(api)
    recorder = BindRecorder(core, namespace)
    pending: list[tuple[int, str]] = []  # (binds seen when it was found Pending, Pod)
    of_workload: dict[str, Workload] = {}
    refused: list[Workload] = []
    try:
        for batch in ([workloads] if together else [[w] for w in workloads]):
            created = parallel(lambda w: create_workload(api, namespace, w, scheduler), batch)
            refused += [w for w, made in zip(batch, created) if not made]
            for w in (w for w, made in zip(batch, created) if made):
                pods = wait_workload(recorder, w, pending_seconds)
                of_workload.update((name, w) for name in pods)
                unbound = sorted(name for name, r in pods.items() if r.node is None)
                if unbound:
                    with recorder.changed:
                        pending.extend((len(recorder.order), name) for name in unbound)
                    shrink_workload(api, namespace, w, len(pods) - len(unbound))
                    for name in unbound:
                        try:
                            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
                        except ApiException as e:
                            if e.status != 404:  # the controller may have taken it already
                                raise
    finally:
        recorder.stop()
    found_pending = {name for _, name in pending}
    # A Pending Pod is judged at the moment it was found Pending: after the binds seen by then.
    events: list[tuple[int, int, str]] = [(i, 1, n) for i, n in enumerate(recorder.order)
                                          if n in of_workload and n not in found_pending]
    events += [(i, 0, n) for i, n in pending]
    outcomes = [Outcome(w.name, w, None, refused=True) for w in refused]
    for _, is_bind, name in sorted(events):
        r = recorder.pods[name]
        outcomes.append(Outcome(name, of_workload[name], r.node if is_bind else None,
                                "" if together else of_workload[name].name, r.added, r.bound if is_bind else None))
    return outcomes


# --- namespaces --------------------------------------------------------------------------

def make_namespace(core: Api, prefix: str, *, opted_in: bool) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": name,
                                        "labels": {"gpu-class.io/inject": "enabled"} if opted_in else {}}})
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no default ServiceAccount in {name} after 30 s")
        time.sleep(0.1)
    return name


def drop_namespace(core: Api, name: str) -> None:
    """Delete the namespace once its Pods are gone (and so let go of by the webhook's accounting)."""
    kubernetes.client.AppsV1Api(core.api_client).delete_collection_namespaced_deployment(name)
    kubernetes.client.BatchV1Api(core.api_client).delete_collection_namespaced_job(name, propagation_policy="Background")
    deadline = time.monotonic() + 60
    while core.list_namespaced_pod(name).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Pods of {name} still there after 60 s")
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        time.sleep(0.2)
    # The next stream is judged from the cluster's state: the webhook's watch must have seen
    # these Pods go.
    time.sleep(1.0)
    core.delete_namespace(name)
