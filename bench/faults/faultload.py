"""A steady stream of Pod creations from controllers, as workloads make them: Deployments scaled up
and down, and Jobs whose Pods run a while and succeed. For bench/faults/faults.py, on the local control
plane (tests/e2e/local-cluster).

Every namespace gets the same stream at the same moments. Half of it comes from Deployments: every
`replicas / rate` seconds one of them is scaled from 0 to `replicas` or back (the ReplicaSet
controller creates and deletes the Pods); the other half from Jobs: every `2 * completions / rate`
seconds a Job of `completions` Pods, `parallelism` at a time, whose Pods this module marks
Succeeded `run_seconds` after they are bound, standing in for the kubelet the cluster does not have
(the Job controller then creates the next ones, and the TTL controller deletes the finished Job).
Calls that fail (the API server restarting) are tried again on the next tick: the stream goes on.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from bench.common.kubeapi import MERGE_PATCH, Api, ApiError

NODE_LABEL = "bench.gpu-class.io/faults-node"
GPU_CLASS = "high"
SCHEDULER = "gpu-class-scheduler"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
TICK_SECONDS = 0.25


@dataclass(frozen=True)
class Stream:
    """`rate` Pods per second in each namespace, half from Deployments, half from Jobs. Larger rates
    take larger steps (more replicas per scale-up, more Pods per Job), so the calls that drive the
    stream stay about one a second whatever the rate: the controllers do the rest."""

    rate: float
    deployments: int = 4
    run_seconds: float = 2.0

    @property
    def replicas(self) -> int:
        return max(2, math.ceil(self.rate))

    @property
    def job_completions(self) -> int:
        return max(2, math.ceil(self.rate))

    @property
    def job_parallelism(self) -> int:
        return max(1, self.job_completions // 2)

    @property
    def deployment_interval(self) -> float:
        # two toggles (up, down) create `replicas` Pods: half the rate
        return self.replicas / self.rate

    @property
    def job_interval(self) -> float:
        return 2 * self.job_completions / self.rate

    def bound_pods(self) -> int:
        """About the most Pods bound at once in one namespace: half the Deployments up, one more on its
        way, and the Jobs of the last few intervals running."""
        jobs_running = max(1.0, 3 * (self.run_seconds + 2) / self.job_interval)
        return (self.deployments // 2 + 1) * self.replicas + math.ceil(jobs_running * self.job_parallelism)


def pod_spec(restart_policy: str) -> dict[str, Any]:
    return {
        "schedulerName": SCHEDULER, "restartPolicy": restart_policy, "terminationGracePeriodSeconds": 0,
        "nodeSelector": {NODE_LABEL: "true"},
        "containers": [{"name": "main", "image": "registry.example/cuda:12",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "10m"}}}],
    }


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": {"gpu-class.io/class": GPU_CLASS}},
                                  "spec": pod_spec("Always")}}}


def job(stream: Stream) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "job-"},
            "spec": {"completions": stream.job_completions, "parallelism": stream.job_parallelism,
                     "ttlSecondsAfterFinished": 0,
                     "template": {"metadata": {"annotations": {"gpu-class.io/class": GPU_CLASS}},
                                  "spec": pod_spec("Never")}}}


def gpu_node(name: str, gpus: int = 8) -> dict[str, Any]:
    allocatable = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {**H100, NODE_LABEL: "true", "kubernetes.io/hostname": name}},
            "status": {"capacity": allocatable, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Bench"}]}}


def create_nodes(api: Api, count: int, prefix: str = "faults-h100") -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        api.call("DELETE", f"/api/v1/nodes/{name}", expect=(200, 404))
        api.call("POST", "/api/v1/nodes", gpu_node(name))
        # The API server's TaintNodesByCondition admission taints a new Node not-ready; the node
        # lifecycle controller (off: no kubelets) would lift it once the Node is Ready.
        api.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": []}}, content_type=MERGE_PATCH)
    return names


def delete_nodes(api: Api, prefix: str = "faults-h100") -> None:
    for node in api.call("GET", f"/api/v1/nodes?labelSelector={NODE_LABEL}%3Dtrue")["items"]:
        if node["metadata"]["name"].startswith(prefix):
            api.call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}", expect=(200, 404))


@dataclass(frozen=True)
class Settled:
    seconds: float
    missing: tuple[str, ...]  # what had not converged (empty: everything did)


@dataclass
class Load:
    """The stream in every namespace, driven from two threads (the controllers' clients, the kubelet)."""

    api_factory: Callable[[], Api]
    namespaces: Sequence[str]
    stream: Stream
    asked: Counter[str] = field(default_factory=Counter)  # Pods asked of the controllers, by namespace
    failed_calls: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def deployment_names(self) -> list[str]:
        return [f"d-{i}" for i in range(self.stream.deployments)]

    def setup(self, api: Api) -> None:
        for namespace in self.namespaces:
            for i, name in enumerate(self.deployment_names()):
                # every other one up: each toggle then scales one up or one down
                api.call("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments",
                         deployment(name, self.stream.replicas if i % 2 else 0))

    def start(self) -> None:
        self._stop.clear()
        # a thread per namespace for each, so one namespace's slow calls do not hold back another's
        self._threads = [threading.Thread(target=target, args=(ns,), name=f"faults-{target.__name__}-{ns}", daemon=True)
                         for ns in self.namespaces for target in (self._drive, self._kubelet)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _try(self, api: Api, method: str, path: str, body: Any, **kwargs: Any) -> bool:
        try:
            api.call(method, path, body, **kwargs)
            return True
        except ApiError:
            with self._lock:
                self.failed_calls += 1
            return False

    def _drive(self, ns: str) -> None:
        api = self.api_factory()
        names = self.deployment_names()
        scaled = {name: self.stream.replicas if i % 2 else 0 for i, name in enumerate(names)}
        due_toggle = due_job = time.monotonic()
        turn = 0
        while not self._stop.wait(TICK_SECONDS):
            now = time.monotonic()
            if now >= due_toggle:
                name = names[turn % len(names)]
                want = 0 if scaled[name] else self.stream.replicas
                if self._try(api, "PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
                             {"spec": {"replicas": want}}, content_type=MERGE_PATCH):
                    self.asked[ns] += want
                    scaled[name] = want
                    turn += 1
                    due_toggle += self.stream.deployment_interval
            if now >= due_job:
                if self._try(api, "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job(self.stream)):
                    self.asked[ns] += self.stream.job_completions
                    due_job += self.stream.job_interval
        api.close()

    def _kubelet(self, ns: str) -> None:
        """A Job's Pod succeeds `run_seconds` after it is first seen bound."""
        api = self.api_factory()
        bound_at: dict[str, float] = {}
        while not self._stop.wait(0.5):
            try:
                pods = api.call("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=batch.kubernetes.io%2Fjob-name"
                                       "&fieldSelector=status.phase%3DPending")["items"]
            except ApiError:
                continue
            now = time.monotonic()
            for pod in pods:
                if not pod["spec"].get("nodeName"):
                    continue
                uid = pod["metadata"]["uid"]
                if now - bound_at.setdefault(uid, now) >= self.stream.run_seconds:
                    self._try(api, "PATCH", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status",
                              {"status": {"phase": "Succeeded"}}, content_type=MERGE_PATCH)
        api.close()

    def settle(self, api: Api, seconds: float) -> Settled:
        """After stop(): until every Deployment has its replicas, every Job has finished and every Pod
        is bound; what had not, when `seconds` ran out."""
        started = time.monotonic()
        kubelets = [threading.Thread(target=self._kubelet, args=(ns,), daemon=True) for ns in self.namespaces]
        self._stop.clear()
        for t in kubelets:  # the Jobs still running need their Pods to finish
            t.start()
        try:
            while True:
                missing = self.unconverged(api)
                if not missing or time.monotonic() - started > seconds:
                    return Settled(time.monotonic() - started, tuple(missing))
                time.sleep(0.5)
        finally:
            self._stop.set()
            for t in kubelets:
                t.join(timeout=60)

    def unconverged(self, api: Api) -> list[str]:
        missing = []
        for ns in self.namespaces:
            pods = [p for p in api.call("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
                    if not p["metadata"].get("deletionTimestamp")]
            per_app = Counter(p["metadata"].get("labels", {}).get("app") for p in pods)
            for d in api.call("GET", f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]:
                name, want = d["metadata"]["name"], d["spec"]["replicas"]
                if per_app[name] != want:
                    missing.append(f"{ns}/{name}: {per_app[name]} of {want} Pods")
            jobs = api.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
            if jobs:
                missing.append(f"{ns}: {len(jobs)} Job(s) not finished")
            unbound = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")
                       and p["status"].get("phase") == "Pending"]
            if unbound:
                missing.append(f"{ns}: {len(unbound)} Pod(s) not bound")
        return missing

