"""`python -m bench apiserver`: what gpu-class costs a Pod create on the real API server, against the
floor of the webhook mechanism, and how fast it sees changes.

On the local control plane (tests/e2e/local-cluster), every arm is a namespace, and every webhook is
registered as gpu-class is (deploy/'s MutatingWebhookConfiguration: rules, matchConditions, timeout,
failure policy), each selecting its own namespace:
- none: no webhook;
- no-op: a no-op webhook (bench/common/variant.py --app baseline: the same gunicorn settings, worker, TLS and
  Flask, answering allowed with no patch);
- no-op + patch: the same no-op answering with the patch and warnings gpu-class answers for this Pod
  (the API server's own work on the patch: encoding the Pod, applying the patch, decoding, defaulting);
- no-op + 1-op patch: the same, answering with a patch of one small operation (is that work the
  patch's, or any mutation's?);
- no-op + patch + policies: the no-op answering with gpu-class's patch, in a namespace where a copy of each of
  gpu-class's admission policies that judge Pod creates applies (the placement backstop and the tenant boundary:
  what the API server runs for a Pod of gpu-class's namespaces besides the webhook);
- gpu-class: the server the local cluster runs (`gpuclass serve`, watching the cluster), its policies as installed.
Creates go to the arms in turn, one create each (the order rotating), so drift on a shared machine
falls on every arm alike. The added latency of an arm is its percentile less none's.

Scenarios: steady; while the webhook's watch processes bursts of 1,000 binds of Pods it placed (each
judged against the class's promise, gpu_class_placements_total); with 5,000 GPU nodes and their GPU Pods
in the inventory (`--fleet`, `--pods-per-node`), optionally while a process of its own makes `--churn` watch
events a second of Pods that ask for no GPU, in a namespace of their own (what most of a busy cluster's Pod
events are). At the fleet's size the replica is also started anew: how long until every worker's view is
whole, its memory, and the watch streams it holds on the API server. Next to the client's view, the API server's own
(`apiserver_admission_webhook_admission_duration_seconds`): how long each webhook call took.
Also: node change to the first admission that sees it. Writes its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import copy
import http.client
import json
import multiprocessing
import ssl
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

from bench.common.commit import measured_at  # noqa: E402
from bench.common.kubeapi import Api, ApiError  # noqa: E402
from bench.common.percentiles import rounded_rank_percentile  # noqa: E402
from bench.common.procs import (ServerProcess, children_of, free_port, memory_of, start_server,  # noqa: E402
                                variant_command)
from bench.common.scrape import read_counter  # noqa: E402
from bench.common.polling import wait_until
from bench.common.sections import command_line, write_section  # noqa: E402
from bench.common.workload import make_cluster_pod, make_deployment_pod, make_fleet  # noqa: E402

ARM_LABEL = "bench.gpu-class.io/arm"
INJECT_LABEL = "gpu-class.io/inject"  # what selects gpu-class's namespaces, for its webhook and its policies
# what selects the namespaces of the copies of gpu-class's policies: the policies arm's, and a probe's of its own
# that no webhook serves, where a Pod each policy refuses shows that the copies are in effect
COPIES_LABEL = "bench.gpu-class.io/policies"
COPIES_PROBE_NAMESPACE = "bench-policies-probe"
NODE_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
BENCH_LABEL = {"bench.gpu-class.io/object": "apiserver"}  # on every Node the bench makes: one delete finds them
WEBHOOK_SECONDS = "apiserver_admission_webhook_admission_duration_seconds"
# the Pods of the measured creates: their scheduler does not exist, so no scheduling rides along
UNSCHEDULED = "bench-no-such-scheduler"
CHURN_NAMESPACE = "bench-churn"
CHURN_CONNECTIONS = 4  # one create and one delete a round each: one connection alone keeps up with ~100 events/s
# gpu-class's added latency over that of the no-op answering with the same patch (the yardstick: what
# any webhook giving this Pod this patch costs)
TARGET_P50, TARGET_P99 = 1.1, 1.3
YARDSTICK = "no-op + patch"
# the no-op webhooks: (arm, slug naming its namespace label, webhook and configuration)
POLICIES = "no-op + patch + policies"
NOOPS = (("no-op", "noop"), ("no-op + patch", "noop-patch"), ("no-op + 1-op patch", "noop-1op"),
         (POLICIES, "noop-policies"))
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
# arms every run has: the yardstick needs none and the same-patch no-op beside gpu-class
ARMS = ("none", "noop", "noop-patch", "noop-1op", "noop-policies", "gpu-class")
REQUIRED_ARMS = ("none", "noop-patch", "gpu-class")
ONE_OP = {"patchType": "JSONPatch", "patch": base64.b64encode(
    b'[{"op":"add","path":"/metadata/annotations/bench.gpu-class.io~1mutated","value":"true"}]').decode()}


@dataclass(frozen=True)
class Arm:
    name: str
    namespace: str
    webhook: str | None  # the webhook's name, as the API server's metrics label it


def measured_pod() -> bytes:
    """A Deployment's Pod (bench/common/workload.py), named by the API server, for a scheduler that does not exist."""
    pod = make_deployment_pod()
    pod["metadata"].pop("ownerReferences", None)  # the garbage collector would delete a Pod whose owner is missing
    pod["metadata"].pop("managedFields", None)
    pod["metadata"].pop("namespace", None)  # the arm's, from the request's path
    pod["spec"]["schedulerName"] = UNSCHEDULED
    pod["spec"]["serviceAccountName"] = "default"  # the one every namespace has
    pod["spec"].pop("serviceAccount", None)
    return json.dumps(pod).encode()


# --- the API server's view ------------------------------------------------------------------------

def webhook_seconds(api: Api) -> dict[str, tuple[float, float]]:
    """(sum of seconds, calls) of each webhook's admission calls so far, by webhook name."""
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(api.call("GET", "/metrics")):
        if family.name != WEBHOOK_SECONDS:
            continue
        for sample in family.samples:
            name = sample.labels.get("name", "")
            if sample.name.endswith("_sum"):
                found.setdefault(name, [0.0, 0.0])[0] += sample.value
            elif sample.name.endswith("_count"):
                found.setdefault(name, [0.0, 0.0])[1] += sample.value
    return {k: (v[0], v[1]) for k, v in found.items()}


def mean_call_ms(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], name: str | None) -> float | None:
    if name is None or name not in after:
        return None
    seconds = after[name][0] - before.get(name, (0.0, 0.0))[0]
    calls = after[name][1] - before.get(name, (0.0, 0.0))[1]
    return seconds / calls * 1000 if calls else None


# --- the arms -------------------------------------------------------------------------------------

def noop_hook(template: dict[str, Any], slug: str, port: int) -> dict[str, Any]:
    """gpu-class's MutatingWebhookConfiguration, calling the no-op at `port`, for the namespace of arm `slug`."""
    hook = copy.deepcopy(template)
    hook["metadata"] = {"name": f"bench-{slug}.gpu-class.io"}
    for webhook in hook["webhooks"]:
        webhook["name"] = f"pods.{slug}.bench.gpu-class.io"
        webhook["clientConfig"]["url"] = f"https://127.0.0.1:{port}/mutate"
        for requirement in _namespace_requirements(webhook["namespaceSelector"]):
            requirement.update(key=ARM_LABEL, values=[slug])
    return hook


def _namespace_requirements(node: Any) -> Iterator[dict[str, Any]]:
    """Every label selector requirement on gpu-class's namespace label under `node`."""
    if isinstance(node, dict):
        if node.get("key") == INJECT_LABEL and "operator" in node:
            yield node
        else:
            for value in node.values():
                yield from _namespace_requirements(value)
    elif isinstance(node, list):
        for value in node:
            yield from _namespace_requirements(value)


def _judges_pod_creates(spec: dict[str, Any]) -> bool:
    return any("pods" in rule.get("resources", []) and {"CREATE", "*"} & set(rule.get("operations", []))
               for rule in spec["matchConstraints"].get("resourceRules", []))


def gpu_class_policies(install: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The names of gpu-class's admission policies that judge Pod creates in its namespaces (the placement
    backstop, the tenant boundary): what the API server runs for such a create besides the webhook."""
    names = tuple(o["metadata"]["name"] for o in install if o["kind"] == POLICY_KINDS[0]
                  and any(_namespace_requirements(o["spec"])) and _judges_pod_creates(o["spec"]))
    if not names:
        raise RuntimeError(f"the install has no admission policy judging Pod creates in namespaces of {INJECT_LABEL}")
    return names


def copy_name(name: str) -> str:
    return f"bench-copy.{name}"


def policy_copies(install: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """gpu-class's admission policies that judge Pod creates in its namespaces, and their bindings, copied to select
    the namespaces labelled COPIES_LABEL instead: the same CEL, parameters and actions, under names of their own."""
    policies = gpu_class_policies(install)
    copies = []
    for obj in install:
        binding = obj["kind"] == POLICY_KINDS[1]
        if obj["kind"] not in POLICY_KINDS or (obj["spec"]["policyName"] if binding else obj["metadata"]["name"]) not in policies:
            continue
        made = copy.deepcopy(obj)
        for requirement in _namespace_requirements(made["spec"]):
            requirement.update(key=COPIES_LABEL, operator="In", values=["copied"])
        made["metadata"] = {"name": copy_name(obj["metadata"]["name"])}
        if binding:
            made["spec"]["policyName"] = copy_name(obj["spec"]["policyName"])
        copies.append(made)
    return copies


def start_noop(cluster: local_cluster.Cluster, workdir: Path, label: str, port: int,
               answer: dict[str, Any] | None) -> ServerProcess:
    answer_file = None
    if answer is not None:
        answer_file = workdir / f"{label}-answer.json"
        answer_file.write_text(json.dumps(answer))
    cert_dir = cluster.dir / "webhook"
    # gpu-class's defaults: 2 workers of 1 thread
    command = variant_command(app="baseline", port=port, cert_dir=cert_dir, nodes_file=None, workers=2, threads=1,
                              answer_file=answer_file)
    return start_server(label, command, port=port, ca_file=cert_dir / "ca.crt", log_file=workdir / f"{label}.log",
                        workers=2, startup_timeout_seconds=60)


def _probe_pod(annotations: dict[str, str], gpus: int = 0, node: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "probe-", "annotations": annotations},
            "spec": spec | ({"nodeName": node} if node else {})}


# For each policy copied, a Pod it alone refuses in the probe's namespace (bounded to class high, served by no
# webhook): a class Pod gpu-class did not place; a Pod placed on H100 that names its node
COPY_PROBES = {
    "gpu-class.io-placement": _probe_pod({"gpu-class.io/class": "high"}),
    "gpu-class.io-boundary": _probe_pod({"gpu-class.io/class": "high", "gpu-class.io/types": "H100"}, gpus=1,
                                        node="bench-h100"),
}


def wait_copies_in_effect(api: Api, policies: Sequence[str]) -> None:
    """Until each copied policy refuses its probe: the API server applies policies asynchronously."""
    missing = set(policies) - set(COPY_PROBES)
    if missing:
        raise RuntimeError(f"no probe for the copy of {', '.join(sorted(missing))}: add a Pod it refuses to COPY_PROBES")
    for policy in policies:
        body = json.dumps(COPY_PROBES[policy]).encode()

        def refused() -> bool:
            status, data = api.raw("POST", f"/api/v1/namespaces/{COPIES_PROBE_NAMESPACE}/pods?dryRun=All", body)
            return status == 403 and f"ValidatingAdmissionPolicy '{copy_name(policy)}'" in data.decode(errors="replace")

        wait_until(f"the API server to apply {copy_name(policy)}", refused)


def remove_policy_copies(cluster: local_cluster.Cluster) -> None:
    """The copies policy_copies() made, by their names (left by an interrupted run too)."""
    for kind in reversed(POLICY_KINDS):
        names = cluster.kubectl("get", kind.lower(), "-o", "name").stdout.split()
        ours = [n for n in names if n.split("/", 1)[1].startswith(copy_name(""))]
        if ours:
            cluster.kubectl("delete", "--ignore-not-found", *ours)


def gpu_class_answer(cluster: local_cluster.Cluster, namespace: str, pod: bytes) -> dict[str, Any]:
    """What gpu-class answers for the measured Pod now: its patch and warnings, for the no-op to repeat."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace,
        "operation": "CREATE", "userInfo": {"username": "admin"}, "object": json.loads(pod), "dryRun": False}}
    response = json.loads(_webhook_call(cluster, "POST", "/mutate", json.dumps(review).encode()))["response"]
    if "patch" not in response:
        raise RuntimeError(f"gpu-class did not patch the measured Pod: {response}")
    return {k: v for k, v in response.items() if k in ("patchType", "patch", "warnings")}


def patch_bytes(answer: dict[str, Any]) -> int:
    return len(base64.b64decode(answer["patch"]))


# --- creates --------------------------------------------------------------------------------------

def interleaved_creates(api: Api, arms: Sequence[Arm], pod: bytes, per_arm: int | None,
                        until: Callable[[], bool] | None = None) -> dict[str, list[float]]:
    """Creates in every arm in turn (the order rotating), `per_arm` each or until `until()`: ms each."""
    samples: dict[str, list[float]] = {a.name: [] for a in arms}
    i = 0
    while (per_arm is None or i < per_arm) and not (until is not None and i and until()):
        for k in range(len(arms)):
            arm = arms[(i + k) % len(arms)]
            path = f"/api/v1/namespaces/{arm.namespace}/pods"
            started = time.perf_counter()
            status, data = api.raw("POST", path, pod)
            elapsed = (time.perf_counter() - started) * 1000
            if status != 201:
                raise RuntimeError(f"create in {arm.namespace}: HTTP {status}: {data[:300]!r}")
            samples[arm.name].append(elapsed)
        i += 1
    return samples


def delete_pods(api: Api, namespace: str) -> None:
    delete_all(api, f"/api/v1/namespaces/{namespace}/pods", "gracePeriodSeconds=0")


def delete_bench_nodes(api: Api) -> None:
    delete_all(api, "/api/v1/nodes", "labelSelector=" + ",".join(f"{k}={v}" for k, v in BENCH_LABEL.items()))


def delete_all(api: Api, collection: str, query: str) -> None:
    """Every object of the collection that `query` selects deleted. A delete of thousands of objects on a loaded
    API server can outlast its 60 s request timeout (504, the rest deleted or not): it is asked again until none
    is left."""
    selector = "&".join(q for q in query.split("&") if q.startswith("labelSelector="))

    def gone() -> bool:
        try:
            api.call("DELETE", f"{collection}?{query}")
        except ApiError as e:
            if e.status not in (0, 504):  # 0: our own 60 s read timeout, the same wait seen from this side
                raise
        return not api.call("GET", f"{collection}?limit=1" + (f"&{selector}" if selector else ""))["items"]

    wait_until(f"every object of {collection}?{query} to go", gone, seconds=900)


def create_all(cluster: local_cluster.Cluster, path_and_body: Sequence[tuple[str, dict[str, Any]]], threads: int = 6) -> None:
    """Create many objects quickly, each thread over its own connection."""
    local = threading.local()

    def one(item: tuple[str, dict[str, Any]]) -> None:
        if not hasattr(local, "api"):
            local.api = Api(cluster)
        local.api.call("POST", item[0], item[1], expect=(201,))

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, path_and_body):
            pass


def gpu_node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {**NODE_LABELS, **BENCH_LABEL}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "capacity": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def bind_all(cluster_dir: str, namespace: str, names: Sequence[str], nodes: Sequence[str]) -> None:
    """In a process of its own: bind every Pod, one after the other, as fast as the API server takes them."""
    api = Api(local_cluster.Cluster(Path(cluster_dir)))
    for i, name in enumerate(names):
        api.call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i % len(nodes)]}}, expect=(201,))


@dataclass
class Scenario:
    name: str
    samples: dict[str, list[float]]
    call_ms: dict[str, float | None]
    patch_bytes: int
    note: str = ""
    seconds: float = 0.0

    def added(self, arm: str, q: float) -> float:
        return rounded_rank_percentile(self.samples[arm], q) - rounded_rank_percentile(self.samples["none"], q)

    def ratio(self, q: float, over: str = "no-op") -> float | None:
        """gpu-class's added latency over that of `over`; None where `over` added nothing measurable
        (its percentile at or below no webhook's: noise, no ratio to judge)."""
        base = self.added(over, q)
        return self.added("gpu-class", q) / base if base > 0 else None


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _verdict(p50: float | None, p99: float | None) -> str:
    if p50 is None or p99 is None:
        return "no verdict (a no-op added nothing measurable)"
    return "PASS" if p50 <= TARGET_P50 and p99 <= TARGET_P99 else "FAIL"


@dataclass
class Bench:
    cluster: local_cluster.Cluster
    api: Api
    workdir: Path
    pod: bytes
    arms: list[Arm]
    template: dict[str, Any]
    ports: dict[str, int] = field(default_factory=dict)  # the no-ops of this run, by slug
    servers: dict[str, ServerProcess] = field(default_factory=dict)

    def start_noops(self) -> int:
        """(Re)start the no-ops, the patched one with what gpu-class answers now; the patch's size."""
        for server in self.servers.values():
            server.stop()
        answer = gpu_class_answer(self.cluster, "bench-gpu-class", self.pod)
        answers = {"noop": None, "noop-patch": answer, "noop-1op": ONE_OP, "noop-policies": answer}
        self.servers = {slug: start_noop(self.cluster, self.workdir, slug, self.ports[slug], answers[slug])
                        for slug in self.ports}
        return patch_bytes(answer)

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()

    def _wait_called(self, arm: Arm) -> None:
        """Until a create in the arm's namespace reaches its webhook (configuration changes apply asynchronously)."""
        def calls() -> float:
            return webhook_seconds(self.api).get(arm.webhook or "", (0.0, 0.0))[1]

        def called() -> bool:
            before = calls()
            interleaved_creates(self.api, [arm], self.pod, 3)
            return calls() > before

        wait_until(f"the API server to call {arm.webhook}", called)

    def prepare(self) -> int:
        """The no-ops (re)started on what gpu-class answers now, every webhook called: the patch's size."""
        _wait_gpu_class_synced(self.cluster)
        size = self.start_noops()
        for arm in self.arms:  # every arm's configuration in effect, its server warm
            if arm.webhook is not None:
                self._wait_called(arm)
        for arm in self.arms:
            delete_pods(self.api, arm.namespace)
        return size

    def run(self, name: str, per_arm: int | None, until: Callable[[], bool] | None = None,
            note: str = "", size: int | None = None) -> Scenario:
        """Interleaved creates in every arm (after prepare(), unless `size` says it was done)."""
        size = self.prepare() if size is None else size
        started = time.monotonic()
        metrics_before = webhook_seconds(self.api)
        samples = interleaved_creates(self.api, self.arms, self.pod, per_arm, until)
        metrics_after = webhook_seconds(self.api)
        scenario = Scenario(name, samples, {a.name: mean_call_ms(metrics_before, metrics_after, a.webhook) for a in self.arms},
                            size, note, time.monotonic() - started)
        for arm in self.arms:
            delete_pods(self.api, arm.namespace)
        return scenario


def measure_binds(bench: Bench, bursts: int, binds: int, per_arm: int) -> Scenario:
    """Creates measured while a process of its own binds `binds` GPU Pods, burst after burst, at least
    `bursts` times and until every arm has `per_arm` creates; the webhook's watch sees every bind (bound
    GPU Pods are what it accounts)."""
    namespace = "bench-binds"
    nodes = [f"bench-bind-{i}" for i in range(max(1, binds // 8))]
    create_all(bench.cluster, [("/api/v1/nodes", gpu_node(n)) for n in nodes])
    merged: dict[str, list[float]] = {a.name: [] for a in bench.arms}
    calls: dict[str, list[float]] = {a.name: [] for a in bench.arms}
    size, seconds, done = bench.prepare(), 0.0, 0
    while done < bursts or min(map(len, merged.values())) < per_arm:
        done += 1
        names = [f"bound-{uuid.uuid4().hex[:10]}" for _ in range(binds)]
        pending = []
        for name in names:
            pod = make_cluster_pod(0, None, 1)
            # as gpu-class leaves the Pods it places: the watch judges each bind (core/reports/fidelity.py)
            pod["metadata"] = {"name": name, "annotations": {"gpu-class.io/class": "high", "gpu-class.io/types": "H100"}}
            pod["spec"]["schedulerName"] = UNSCHEDULED
            pending.append((f"/api/v1/namespaces/{namespace}/pods", pod))
        create_all(bench.cluster, pending)
        binder = multiprocessing.get_context("fork").Process(
            target=bind_all, args=(str(bench.cluster.dir), namespace, names, nodes))
        binder.start()
        scenario = bench.run("binds", None, until=lambda: not binder.is_alive(), size=size)
        binder.join()
        if binder.exitcode != 0:
            raise RuntimeError(f"binding the burst failed ({binder.exitcode})")
        for arm, values in scenario.samples.items():
            merged[arm] += values
            if scenario.call_ms[arm] is not None:
                calls[arm].append(scenario.call_ms[arm] or 0.0)
        seconds += scenario.seconds
        delete_pods(bench.api, namespace)
    delete_bench_nodes(bench.api)
    return Scenario(f"while the watch processes {done} bursts of {binds:,} Pod binds", merged,
                    {a: statistics.fmean(v) if v else None for a, v in calls.items()}, size,
                    f"{done} x {binds:,} binds of Pods gpu-class placed (class high), from a process of their own, "
                    "as fast as the API server took them; gpu-class's watch judges each (gpu_class_placements_total); "
                    "creates measured while each burst ran", seconds)


def fleet_pods(node_names: Sequence[str], per_node: int) -> list[dict[str, Any]]:
    """`per_node` bound GPU Pods on each node: 1, 1, 2, 4 or 8 GPUs for one a node, else 1 each (the nodes hold 8)."""
    pods = []
    for n, node in enumerate(node_names):
        for k in range(per_node):
            i = n * per_node + k
            pod = make_cluster_pod(i, node, (1, 1, 2, 4, 8)[i % 5] if per_node == 1 else 1)
            pod["metadata"] = {"name": f"fleet-{i:06d}"}
            pods.append(pod)
    return pods


def churn(cluster_dir: str, namespace: str, per_second: float, stop: Any, events: Any) -> None:
    """In a process of its own, until `stop` is set: Pods that ask for no GPU created and deleted in `namespace`,
    `per_second` watch events in all (each Pod one ADDED and one DELETED: no scheduler takes it), over
    CHURN_CONNECTIONS connections, paced; `events` counts those made."""
    cluster = local_cluster.Cluster(Path(cluster_dir))
    path = f"/api/v1/namespaces/{namespace}/pods"
    interval = 2 * CHURN_CONNECTIONS / per_second  # each round is two events

    def run(k: int) -> None:
        api = Api(cluster)
        due = time.monotonic()
        i = k
        while not stop.is_set():
            pod = make_cluster_pod(i, None, 0, "Pending")
            name = f"churn-{i:08d}"
            pod["metadata"] = {"name": name, "labels": pod["metadata"]["labels"]}
            pod["spec"]["schedulerName"] = UNSCHEDULED
            api.call("POST", path, pod, expect=(201,))
            api.call("DELETE", f"{path}/{name}?gracePeriodSeconds=0")
            with events.get_lock():
                events.value += 2
            i += CHURN_CONNECTIONS
            due += interval
            stop.wait(max(0.0, due - time.monotonic()))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(CHURN_CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@dataclass(frozen=True)
class Replica:
    """gpu-class's replica started anew at the fleet's size."""

    first_sync_seconds: float  # from the start of `gpuclass serve` until every worker's view was whole
    workers: int
    pss_mib: float  # the gunicorn master and its workers, proportional set sizes summed
    rss_mib: float  # the same, resident sizes summed (pages shared since fork counted in each)
    watches: int  # the API server's open watch streams, gpu-class running less gpu-class stopped

    def sentence(self) -> str:
        return (f"The replica started anew at this size (`gpuclass serve`, {self.workers} workers): every worker's view "
                f"whole after {self.first_sync_seconds:.1f} s; memory {self.pss_mib:,.0f} MiB (PSS of the master and "
                f"its workers; {self.rss_mib:,.0f} MiB RSS summed); {self.watches} watch streams on the API server "
                "(`apiserver_longrunning_requests{verb=\"WATCH\"}`, gpu-class running less stopped)")


def api_server_watches(api: Api) -> int:
    _, text = api.raw("GET", "/metrics")
    return int(read_counter(text.decode(), "apiserver_longrunning_requests", "verb").get("WATCH", 0))


def measure_replica(cluster: local_cluster.Cluster, api: Api) -> Replica:
    """gpu-class stopped and started again: its first sync, memory and watch streams at the size it holds."""
    cluster.stop("gpuclass")
    stopped = api_server_watches(api)
    started = time.monotonic()
    local_cluster.start_webhook(cluster)  # returns once every worker says its view is whole
    first_sync = time.monotonic() - started
    # each reflector opens its watch right after its list: count once the count stands still
    counts = [api_server_watches(api)]
    while len(counts) < 3 or counts[-1] != counts[-3]:
        time.sleep(1)
        counts.append(api_server_watches(api))
    master = cluster.pid("gpuclass")
    assert master is not None
    workers = children_of(master)
    memory = [memory_of(p) for p in (master, *workers)]
    return Replica(first_sync, len(workers), sum(m.pss_kib for m in memory) / 1024,
                   sum(m.rss_kib for m in memory) / 1024, counts[-1] - stopped)


def measure_fleet(bench: Bench, nodes: int, per_arm: int, pods_per_node: int = 1, churn_per_second: float = 0.0) -> Scenario:
    namespace = "bench-fleet"
    fleet = make_fleet(nodes)
    for node in fleet:  # as a list returns them: what the API server sets itself goes
        node["metadata"] = {"name": node["metadata"]["name"], "labels": {**node["metadata"]["labels"], **BENCH_LABEL},
                            "annotations": node["metadata"].get("annotations", {})}
    create_all(bench.cluster, [("/api/v1/nodes", n) for n in fleet])
    pods = fleet_pods([n["metadata"]["name"] for n in fleet], pods_per_node)
    create_all(bench.cluster, [(f"/api/v1/namespaces/{namespace}/pods", pod) for pod in pods])
    _wait_inventory(bench.cluster, len(fleet))
    replica = measure_replica(bench.cluster, bench.api)
    name, notes = f"{nodes:,} GPU nodes and {len(pods):,} GPU Pods in the inventory", [replica.sentence()]
    stop, events = multiprocessing.get_context("fork").Event(), multiprocessing.get_context("fork").Value("l", 0)
    churner, churn_started = None, time.monotonic()
    if churn_per_second:
        churner = multiprocessing.get_context("fork").Process(
            target=churn, args=(str(bench.cluster.dir), CHURN_NAMESPACE, churn_per_second, stop, events))
        churner.start()
    try:
        scenario = bench.run(name, per_arm)
    finally:
        stop.set()
        if churner is not None:
            churner.join()
    churn_seconds = time.monotonic() - churn_started
    if churner is not None:
        if churner.exitcode != 0:
            raise RuntimeError(f"the churn of Pod events failed ({churner.exitcode})")
        name += f", {churn_per_second:,.0f} Pod events a second asked of Pods without GPUs"
        notes.append(f"Beside the creates, a process of its own created and deleted Pods that ask for no GPU in "
                     f"namespace {CHURN_NAMESPACE} (not opted in; no scheduler takes them): {churn_per_second:,.0f} "
                     f"watch events a second asked, {events.value / churn_seconds:,.0f} made ({events.value:,} "
                     f"events in {churn_seconds:.0f} s: the creates and the arms' preparation before them)")
    delete_pods(bench.api, namespace)
    delete_pods(bench.api, CHURN_NAMESPACE)
    delete_bench_nodes(bench.api)
    return replace(scenario, name=name, note=". ".join(notes))


def _wait_gpu_class_synced(cluster: local_cluster.Cluster) -> None:
    """Until every worker's view is whole (on a busy machine a worker's first lists can take longer than the
    15 s a worker waits before it accepts, and it refuses class Pods until then)."""
    wait_until("every gpu-class worker to sync its inventory",
               lambda: local_cluster.synced_workers(cluster) == local_cluster.WEBHOOK_WORKERS, seconds=120)


def _wait_inventory(cluster: local_cluster.Cluster, at_least: int) -> None:
    """Until gpu-class's workers hold the fleet (/readyz says how many nodes the answering worker has)."""
    def nodes() -> int:  # new connections: each worker answers some
        return min(int(json.loads(_webhook_call(cluster, "GET", "/readyz")).get("nodes", 0)) for _ in range(4))

    wait_until("gpu-class's inventory to hold the fleet", lambda: nodes() >= at_least * 0.9, seconds=300)
    time.sleep(3)  # the Pods' watch, after the Nodes'


def _webhook_call(cluster: local_cluster.Cluster, method: str, path: str, body: bytes | None = None) -> bytes:
    """One request to the cluster's gpu-class over a new TLS connection."""
    context = ssl.create_default_context(cafile=str(cluster.dir / "webhook" / "ca.crt"))
    assert cluster.ports is not None
    conn = http.client.HTTPSConnection("127.0.0.1", cluster.ports.webhook, context=context, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        return conn.getresponse().read()
    finally:
        conn.close()


# --- how fast a change reaches the decision -------------------------------------------------------

def measure_node_changes(api: Api, namespace: str, changes: int) -> list[float]:
    """Milliseconds from a node's create (or delete) returning to the first dry run that sees it."""
    probe = json.loads(measured_pod())

    def offers_h100() -> bool:
        # With no H100 node the class has no type present: refused.
        status, data = api.raw("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", json.dumps(probe).encode())
        if status == 403:
            return False
        return status == 201 and "gpu-class.io/types" in (json.loads(data)["metadata"].get("annotations") or {})

    seen: list[float] = []
    node = gpu_node("bench-h100")
    for i in range(changes):
        present = i % 2 == 0
        if present:
            api.call("POST", "/api/v1/nodes", node)
        else:
            api.call("DELETE", "/api/v1/nodes/bench-h100")
        changed = time.perf_counter()
        while offers_h100() != present:
            if time.perf_counter() - changed > 30:
                raise RuntimeError("the webhook did not see a node change within 30 s")
        seen.append((time.perf_counter() - changed) * 1000)
    return seen


# --- the report -------------------------------------------------------------------------------------

def _where_it_goes(sc: Scenario) -> str:
    """gpu-class's added p50, part by part, as far as the arms that ran tell."""
    parts = []
    if "no-op" in sc.samples:
        parts += [f"the webhook call itself (the no-op) {sc.added('no-op', 0.5):+.2f} ms",
                  f"the API server's work on the mutation (no-op + patch less no-op) "
                  f"{sc.added(YARDSTICK, 0.5) - sc.added('no-op', 0.5):+.2f} ms"]
        if "no-op + 1-op patch" in sc.samples:
            parts[-1] += (f", with a one-operation patch "
                          f"{sc.added('no-op + 1-op patch', 0.5) - sc.added('no-op', 0.5):+.2f} ms")
    else:
        parts.append(f"the webhook call and the API server's work on the patch (no-op + patch) {sc.added(YARDSTICK, 0.5):+.2f} ms")
    over = YARDSTICK
    if POLICIES in sc.samples:
        parts.append(f"gpu-class's admission policies (no-op + patch + policies less no-op + patch) "
                     f"{sc.added(POLICIES, 0.5) - sc.added(YARDSTICK, 0.5):+.2f} ms")
        over = POLICIES
    parts.append(f"gpu-class's own (less {over}) {sc.added('gpu-class', 0.5) - sc.added(over, 0.5):+.2f} ms")
    policies = (f"; over the same with gpu-class's policies: {_times(sc.ratio(0.5, POLICIES))} at p50, "
                f"{_times(sc.ratio(0.99, POLICIES))} at p99" if POLICIES in sc.samples else "")
    return (f"Where gpu-class's added p50 goes: {'; '.join(parts)}. Over the no-op answering with the same patch: "
            f"{_times(sc.ratio(0.5, YARDSTICK))} at p50, {_times(sc.ratio(0.99, YARDSTICK))} at p99{policies} (the "
            f"patch: {sc.patch_bytes:,} bytes); {sc.seconds:.0f} s of creates.")


def render(scenarios: Sequence[Scenario], node_ms: list[float], wall_seconds: float, command: str,
           heading: str = "## On the real API server (`python -m bench apiserver`)") -> str:
    lines = [
        heading,
        "",
        f"{measured_at()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Command: `{command}`; local control plane (tests/e2e/local-cluster), Kubernetes "
        f"{local_cluster.kube_version()}; {wall_seconds:.0f} s wall. Client-side latency of a Pod create (a "
        "Deployment's Pod, bench/common/workload.py, for a scheduler that does not exist), over one kept-alive "
        "connection, in each arm's namespace in turn, one create each (the arms of this run are the rows below): "
        "none (no webhook), no-op (a no-op webhook: "
        "bench/common/variant.py's baseline, the same gunicorn settings, worker, TLS and Flask, 2 workers x 1 thread, "
        "answering allowed with no patch), no-op + patch (the same, answering with gpu-class's patch and "
        "warnings for this Pod: the API server's own work on the patch), no-op + 1-op patch (the same, with a "
        "patch of one small operation), no-op + patch + policies (the same as no-op + patch, in a namespace "
        "where a copy of each of gpu-class's admission policies that judge Pod creates applies: the placement "
        "backstop and the tenant boundary) and gpu-class (`gpuclass serve`, watching the cluster, its policies as "
        "installed). Every webhook is deploy/'s MutatingWebhookConfiguration, its URL and namespace changed. Added: the arm's percentile less none's. API server: the mean of "
        f"`{WEBHOOK_SECONDS}` for the arm's webhook over the same creates (the call, as the API server times it).",
    ]
    verdicts = []
    for sc in scenarios:
        lines += ["", f"### {sc.name[0].upper() + sc.name[1:]}", ""]
        if sc.note:
            lines += [sc.note + ".", ""]
        lines += ["| arm | creates | p50 ms | p99 ms | added p50 ms | added p99 ms | API server's webhook call, mean ms |",
                  "|---|---|---|---|---|---|---|"]
        for arm, values in sc.samples.items():
            call = sc.call_ms.get(arm)
            added = "-" if arm == "none" else f"{sc.added(arm, 0.5):+.2f} | {sc.added(arm, 0.99):+.2f}"
            lines.append(f"| {arm} | {len(values)} | {rounded_rank_percentile(values, 0.5):.2f} | {rounded_rank_percentile(values, 0.99):.2f} | "
                         + (added if arm != "none" else "- | -") + f" | {'-' if call is None else f'{call:.2f}'} |")
        lines += ["", _where_it_goes(sc)]
        verdicts.append(sc)
    lines += ["", "Why a patch costs the API server what it does, whatever the patch: for any webhook answer with a "
              "non-empty JSON patch, it encodes the whole Pod to JSON, applies the patch, decodes and defaults the "
              "result and compares it with the Pod before (k8s.io/apiserver, admission/plugin/webhook/mutating/"
              "dispatcher.go), and because the object changed it runs the whole mutating admission chain, the "
              "in-tree plugins included, a second time (admission/reinvocation.go). A webhook that mutates pays that "
              "on every create; only a webhook that answers without a patch does not."]
    lines += ["", "gpu-class's added latency over that of the no-op answering with the same patch, against the "
              f"targets (p50 <= {TARGET_P50}x, p99 <= {TARGET_P99}x); over the plain no-op's where it ran:", "",
              "| scenario | p50 | p99 | result | over the no-op: p50 | p99 |", "|---|---|---|---|---|---|"]
    for sc in verdicts:
        p50, p99 = sc.ratio(0.5, YARDSTICK), sc.ratio(0.99, YARDSTICK)
        plain = [_times(sc.ratio(0.5)), _times(sc.ratio(0.99))] if "no-op" in sc.samples else ["-", "-"]
        lines.append("| " + " | ".join([sc.name, _times(p50), _times(p99), _verdict(p50, p99), *plain]) + " |")
    lines += [
        "",
        f"Node change to the first admission that sees it, {len(node_ms)} changes (create and delete of a GPU "
        f"node, dry-run creates back to back): p50 {rounded_rank_percentile(node_ms, 0.5):.1f} ms, "
        f"max {max(node_ms):.1f} ms. This includes one dry-run round trip (the first probe after the change "
        "usually already sees it).",
    ]
    return "\n".join(lines) + "\n"


def setup(cluster: local_cluster.Cluster, api: Api, workdir: Path, slugs: Sequence[str] = ARMS) -> Bench:
    install = local_cluster.render_install(cluster)
    template = next(o for o in install if o["kind"] == "MutatingWebhookConfiguration")
    noops = [(name, slug) for name, slug in NOOPS if slug in slugs]
    bench = Bench(cluster, api, workdir, measured_pod(), [], template, ports={slug: free_port() for _, slug in noops})
    arms = [Arm("none", "bench-none", None),
            *(Arm(name, f"bench-{slug}", f"pods.{slug}.bench.gpu-class.io") for name, slug in noops),
            Arm("gpu-class", "bench-gpu-class", template["webhooks"][0]["name"])]
    labels: dict[str, dict[str, str]] = {"bench-none": {}, **{f"bench-{slug}": {ARM_LABEL: slug} for _, slug in noops},
                                         "bench-gpu-class": {INJECT_LABEL: "enabled"}}
    if "noop-policies" in slugs:
        labels["bench-noop-policies"][COPIES_LABEL] = "copied"
        labels[COPIES_PROBE_NAMESPACE] = {COPIES_LABEL: "copied"}
    annotations = {COPIES_PROBE_NAMESPACE: {"gpu-class.io/allowed-classes": "high"}}
    for namespace in (*labels, "bench-binds", "bench-fleet", CHURN_NAMESPACE):
        api.call("DELETE", f"/api/v1/namespaces/{namespace}", expect=(200, 202, 404))  # left by an interrupted run
    for namespace in (*labels, "bench-binds", "bench-fleet", CHURN_NAMESPACE):
        wait_until(f"namespace {namespace} to go", lambda: api.raw("GET", f"/api/v1/namespaces/{namespace}")[0] == 404, 180)
        api.call("POST", "/api/v1/namespaces", {"metadata": {
            "name": namespace, "labels": labels.get(namespace, {}), "annotations": annotations.get(namespace, {})}})
        wait_until(f"the default ServiceAccount of {namespace}", lambda: bool(api.call(
            "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts?fieldSelector=metadata.name=default")["items"]))
    delete_bench_nodes(api)
    remove_policy_copies(cluster)
    local_cluster.apply(cluster, [noop_hook(template, slug, bench.ports[slug]) for _, slug in noops])
    if "noop-policies" in slugs:
        local_cluster.apply(cluster, policy_copies(install))
        wait_copies_in_effect(api, gpu_class_policies(install))
    bench.arms = arms
    return bench


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench apiserver", description=__doc__.split("\n\n")[0])
    p.add_argument("--creates", type=int, default=3000, help="Pod creates per arm and scenario (default 3,000)")
    p.add_argument("--bursts", type=int, default=3,
                   help="bursts of binds, at least (default 3; more until every arm has --creates; 0: skip)")
    p.add_argument("--arms", default=",".join(ARMS),
                   help=f"the arms, of {', '.join(ARMS)} (default all; {', '.join(REQUIRED_ARMS)} always)")
    p.add_argument("--binds", type=int, default=1000, help="Pod binds per burst (default 1,000)")
    p.add_argument("--fleet", type=int, default=5000, help="GPU nodes in the inventory (default 5,000; 0: skip)")
    p.add_argument("--pods-per-node", type=int, default=1, help="bound GPU Pods on each fleet node (default 1)")
    p.add_argument("--churn", type=float, default=0.0,
                   help="watch events a second of Pods without GPUs, in a namespace of their own, while the fleet's "
                        "creates are measured (default 0: none)")
    p.add_argument("--section", default=None,
                   help="the section of --output to write (default: apiserver, or apiserver-partial for a run "
                        "without every scenario)")
    p.add_argument("--node-changes", type=int, default=20)
    p.add_argument("--label", default="", help="said in the section's heading, e.g. `run 1 of 2`")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench" / "out" / "apiserver")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    slugs = [a for a in args.arms.split(",") if a]
    if args.pods_per_node < 1 or args.churn < 0:
        p.error("--pods-per-node must be at least 1 and --churn at least 0")
    if args.node_changes < 2 or args.node_changes % 2:
        p.error(f"--node-changes {args.node_changes}: give an even number, 2 or more (each node created is deleted again)")
    if set(slugs) - set(ARMS) or set(REQUIRED_ARMS) - set(slugs):
        p.error(f"--arms {args.arms}: give arms of {', '.join(ARMS)}, with {', '.join(REQUIRED_ARMS)}")
    started = time.monotonic()
    args.workdir.mkdir(parents=True, exist_ok=True)
    with local_cluster.running(args.cluster_dir) as cluster:
        api = Api(cluster)
        bench = setup(cluster, api, args.workdir, slugs)
        try:
            api.call("DELETE", "/api/v1/nodes/bench-h100", expect=(200, 404))
            node_ms = measure_node_changes(api, "bench-gpu-class", args.node_changes)
            api.call("POST", "/api/v1/nodes", gpu_node("bench-h100"))
            scenarios = [bench.run("steady", args.creates)]
            if args.bursts:
                scenarios.append(measure_binds(bench, args.bursts, args.binds, args.creates))
            if args.fleet:
                scenarios.append(measure_fleet(bench, args.fleet, args.creates, args.pods_per_node, args.churn))
        finally:
            bench.stop()
            remove_policy_copies(cluster)
            for hook in (f"bench-{slug}.gpu-class.io" for _, slug in NOOPS):
                cluster.kubectl("delete", "mutatingwebhookconfiguration", hook, "--ignore-not-found")
            api.call("DELETE", "/api/v1/nodes/bench-h100", expect=(200, 404))
    argv = list(sys.argv[1:] if argv is None else argv)
    label = f", {args.label}" if args.label else ""
    text = render(scenarios, node_ms, time.monotonic() - started, command_line("apiserver", argv),
                  f"## On the real API server{label} (`{command_line('apiserver', argv, measuring_only=True)}`)")
    print(text)
    # a run without every scenario keeps its own section: the full run's figures stay
    write_section(args.output, args.section or ("apiserver" if args.bursts and args.fleet else "apiserver-partial"), text)
    return 0
