"""The watch of Pods: the GPUs each node has in use, the groups (gpu-class.io/group) whose Pods run where, and
the GPU Pods not yet bound, which the scheduler extender counts (view.pods.UnboundGpuPod).

The busiest watch of a large cluster: the line of a Pod that cannot change the view is told apart before it
is decoded (core/view/pod_lines.py), and what is queued for the applier is a few fields, never a whole Pod.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping, NamedTuple

import kubernetes

from ..core.view.dra import extended_resource_claim
from ..core.view.pods import GroupName, UnboundGpuPod, pod_gpu_requests, pod_group, unbound_gpu_pod
from ..core.view.pod_lines import resource_needles, skipped_pod_event
from .feed import Feed, feeding

# Bound Pods hold GPUs; unbound ones are known to the scheduler extender (view.pods.UnboundGpuPod). One
# watch over both, so the event that binds a Pod moves it from one to the other at once.
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class PodView(NamedTuple):
    """A listed Pod as the pods watch keeps it."""

    key: str  # namespace/name
    node: str | None
    gpus: dict[str, int]  # devices held per resource
    group: GroupName | None
    unbound: UnboundGpuPod | None  # the Pod, when it is a known unbound GPU Pod


class PodsWatch:
    """Unfinished Pods: those bound hold GPUs, those not yet bound are known GPU Pods. A Pod that finishes
    leaves the selection, and the API server sends it as DELETED."""

    def __init__(self, feed: Feed, api: kubernetes.client.CoreV1Api) -> None:
        self.catalog = feed.catalog
        self.state = feed.state
        self.observer = feed.observer
        self.feed = feed
        self._submit = feed.submit  # bound once: it is called for every event
        # the Pods the view holds (namespace/name; bound with GPUs, or known unbound) as the pods watch has read
        # them, ahead of the applier: whatever their next event says, it is decoded. Only the pods
        # reflector's thread reads and writes it. Keyed as the state keys bound Pods, the two mostly share each
        # key's string: about 2 MB at 60,000 GPU Pods, where a set of uids would cost some 7 MB.
        self._held_pods: set[str] = set()
        self._pod_needles = resource_needles(self.catalog.resources)
        list_pods = functools.partial(api.list_pod_for_all_namespaces, field_selector=UNFINISHED_PODS)
        self.reflector = feeding(feed, "pods", list_pods, self.reduce, self.replace, self.apply)
        self.reflector.skip = self.skip_line

    def reduce(self, obj: dict[str, Any]) -> PodView | None:
        node, gpus = pod_gpu_requests(obj, self.catalog.resources)
        unbound = unbound_gpu_pod(obj, self.catalog.resources)
        return PodView(_pod_key(obj), node, gpus, pod_group(obj), unbound) if (node and gpus) or unbound else None

    def replace(self, pods: list[PodView]) -> None:
        self._held_pods = {p.key for p in pods}

        def apply() -> bool:
            self.state.replace_pods(((p.key, p.node, p.gpus) for p in pods),
                                    {p.key: p.group for p in pods if p.group is not None})
            self.state.replace_unbound_pods(p.unbound for p in pods if p.unbound is not None)
            return self.feed.mark_synced("pods")
        self._submit(apply, wait=True)

    def skip_line(self, line: bytes) -> str | None:
        return skipped_pod_event(line, self._pod_needles, self._held_pods)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        gone = kind == "DELETED"
        node, gpus = (None, {}) if gone else pod_gpu_requests(obj, self.catalog.resources)
        unbound = None if gone else unbound_gpu_pod(obj, self.catalog.resources)
        uid = (obj.get("metadata") or {}).get("uid")
        # what the applier needs, not the Pod: a backlog of queued events holds no whole Pods
        key, group, claim = _pod_key(obj), pod_group(obj), extended_resource_claim(obj)
        if (node and gpus) or unbound is not None:
            self._held_pods.add(key)
        else:
            self._held_pods.discard(key)

        def apply() -> bool:
            was = self.state.unbound_pods.get(uid) if isinstance(uid, str) and uid else None
            if was is not None and node is not None and gpus:
                # the inventory the scheduler bound against: every change before this one, published
                # now, but for the Pod's own DRA claim, which the claims' watch may have delivered first
                self.feed.flush()
                bind = (was, node, self.state.snapshot, self.state.counted_for(claim, node))
                # outside the lock: the other watches need not wait while the bind is judged
                self.feed.later(lambda: self.observer.bound(*bind))
            accounted = self.state.set_pod(key, node, gpus, group)
            known = self.state.set_unbound_pod(uid, unbound) if isinstance(uid, str) and uid else False
            return accounted or known
        self._submit(apply)


def _pod_key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
