"""The GPUs a namespace's Pods hold, at every change: a list, then a watch of Pods from its resourceVersion, the
bound GPUs summed again at each event. A quota test asserts on the most ever held, so an over-bind shorter than
any poll interval is caught, and a watch that could not follow (expired, cut) fails the test rather than
leaving a gap."""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import kubernetes

GPU = "nvidia.com/gpu"


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """The GPUs of a Pod's containers' limits."""
    return sum(int((((c.get("resources") or {}).get("limits")) or {}).get(GPU, "0"))
               for c in (pod.get("spec") or {}).get("containers") or [])


@dataclass
class BoundGpus:
    """What the watch saw: the Pods bound now (name -> (node, GPUs)), the most GPUs bound at any event and the Pods
    then, and how many events it summed."""

    bound: dict[str, tuple[str, int]] = field(default_factory=dict)
    peak: int = 0
    at_peak: dict[str, tuple[str, int]] = field(default_factory=dict)
    events: int = 0
    error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, kind: str, pod: Mapping[str, Any]) -> None:
        """One event: a bound Pod not being deleted holds its GPUs; any other state holds none (a Pod being deleted
        has given its quota back to Kueue, though Kueue's finalizer may keep it a while)."""
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName")
        with self.lock:
            self.events += 1
            if kind != "DELETED" and node and not pod["metadata"].get("deletionTimestamp"):
                self.bound[name] = (node, pod_gpus(pod))
            else:
                self.bound.pop(name, None)
            total = sum(g for _, g in self.bound.values())
            if total > self.peak:
                self.peak, self.at_peak = total, dict(self.bound)

    def now(self) -> dict[str, tuple[str, int]]:
        """The Pods bound now, as of the last event; fails when the watch stopped following."""
        with self.lock:
            if self.error is not None:
                raise AssertionError(f"the Pod watch stopped: {self.error}")
            return dict(self.bound)

    def assert_never_above(self, quota: int) -> None:
        self.now()
        assert self.peak <= quota, f"{self.peak} GPUs bound at once against {quota}, {self.events} events in: " \
                                   f"{self.at_peak}"


def _follow(core: kubernetes.client.CoreV1Api, namespace: str, seen: BoundGpus, resource_version: str,
            stop: threading.Event) -> None:
    w = kubernetes.watch.Watch()
    try:
        while not stop.is_set():
            for event in w.stream(core.list_namespaced_pod, namespace, resource_version=resource_version,
                                  allow_watch_bookmarks=True, timeout_seconds=5, deserialize=False):
                if event["type"] != "BOOKMARK":
                    seen.apply(event["type"], event["object"])
                resource_version = event["object"]["metadata"]["resourceVersion"]
                if stop.is_set():
                    break
    except Exception as e:  # noqa: BLE001 (any end of the watch is the test's failure, said by now())
        with seen.lock:
            seen.error = f"{type(e).__name__}: {e}"


@contextlib.contextmanager
def watching_bound_gpus(core: kubernetes.client.CoreV1Api, namespace: str) -> Iterator[BoundGpus]:
    """BoundGpus of the namespace's Pods, followed in a thread while the block runs."""
    seen = BoundGpus()
    doc = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
    for pod in doc["items"]:
        seen.apply("ADDED", pod)
    stop = threading.Event()
    thread = threading.Thread(target=_follow, args=(core, namespace, seen, doc["metadata"]["resourceVersion"], stop),
                              daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(10)
