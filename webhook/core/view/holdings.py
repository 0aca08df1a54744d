"""The inventory state's Pods: the devices bound Pods hold, per node and per group, the devices in use on each
node, and the GPU Pods not yet bound.

What Pod events change (requested, unbound_pods, pod_groups) are persistent maps: InventoryState says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from immutables import Map

from ..catalog.model import Catalog
from .merged_nodes import MergedNodes
from .pods import GroupName, Holding, UnboundGpuPod, enforced_types
from .product_groups import GroupSummaries
from .snapshot import Snapshot, placing_catalog


@dataclass
class PodHoldings:
    """What Pods hold: the devices of each bound, unfinished Pod on its node, their sum per (node, resource),
    each group's Pods, and the devices in use per node (`requested`, what publish() hands over). A change of
    devices in use on a node moves the free counts of its product groups at once.

    Also the GPU Pods seen unbound, with the gpu-class.io/types their own affinity enforces (enforced_types)."""

    catalog: Catalog
    merged: MergedNodes  # the nodes: what claims hold of their DRA devices, and which groups each is in
    groups: GroupSummaries
    # devices requested per (node, resource) by Pods bound to it, and per Pod so deletions can be undone
    pod_requested: dict[tuple[str, str], int] = field(default_factory=dict)
    pods: dict[str, Holding] = field(default_factory=dict)
    # the group of each accounted Pod that has one; each group's Pods (the inner maps are replaced,
    # never changed: snapshots share them)
    pod_group_of: dict[str, GroupName] = field(default_factory=dict)
    pod_groups: Map[GroupName, Mapping[str, Holding]] = field(default_factory=Map)
    unbound_pods: Map[str, UnboundGpuPod] = field(default_factory=Map)  # by uid
    # published: pod_requested, where the node serves the resource from DRA the devices claims hold
    requested: Map[tuple[str, str], int] = field(default_factory=Map)
    # unbound Pods, as they came, whose gpu-class.io/types their affinity did not enforce when judged (by uid)
    unenforced: dict[str, UnboundGpuPod] = field(default_factory=dict, repr=False)

    # --- GPU requests of bound Pods ------------------------------------------------------
    def set_pod(self, pod_key: str, node_name: str | None, gpus: Mapping[str, int],
                group: GroupName | None = None) -> bool:
        """Account a Pod's devices (per resource) to its node; node None or no devices (finished, unbound) removes it."""
        held = {r: n for r, n in gpus.items() if n > 0}
        new = (node_name, held) if node_name and held else None
        old = self.pods.get(pod_key)
        old_group = self.pod_group_of.get(pod_key)
        new_group = group if new is not None else None
        if old == new and old_group == new_group:
            return False
        if old is not None:
            self._add_requests(old[0], old[1], -1)
            del self.pods[pod_key]
        if new is not None:
            self.pods[pod_key] = new
            self._add_requests(new[0], new[1], 1)
        if old_group is not None or new_group is not None:
            self._regroup(pod_key, old_group, new_group)
        return True

    def _regroup(self, pod_key: str, old: GroupName | None, new: GroupName | None) -> None:
        with self.pod_groups.mutate() as groups:
            if old is not None:
                members = {k: h for k, h in groups.get(old, {}).items() if k != pod_key}
                if members:
                    groups[old] = members
                elif old in groups:
                    del groups[old]
                del self.pod_group_of[pod_key]
            if new is not None:
                groups[new] = {**groups.get(new, {}), pod_key: self.pods[pod_key]}
                self.pod_group_of[pod_key] = new
            self.pod_groups = groups.finish()

    def replace_pods(self, pods: Iterable[tuple[str, str | None, Mapping[str, int]]],
                     groups: Mapping[str, GroupName] | None = None) -> None:
        """All accounted Pods at once: (key, node, devices per resource), and the group of each Pod key that has one."""
        self.pods = {}
        for key, node, held in pods:
            positive = {r: n for r, n in held.items() if n > 0}
            if node and positive:
                self.pods[key] = (node, positive)
        self.pod_group_of = {k: g for k, g in (groups or {}).items() if k in self.pods}
        by_group: dict[GroupName, dict[str, Holding]] = {}
        for key, name in self.pod_group_of.items():
            by_group.setdefault(name, {})[key] = self.pods[key]
        self.pod_groups = Map(by_group)
        requested: dict[tuple[str, str], int] = {}
        for node_name, held in self.pods.values():
            for resource, n in held.items():
                requested[(node_name, resource)] = requested.get((node_name, resource), 0) + n
        self.pod_requested = requested
        self.recount_requested()
        self.groups.rebuild(self.merged.nodes.values(), self.requested)

    # --- GPU Pods not yet bound --------------------------------------------------------------
    def set_unbound_pod(self, uid: str, pod: UnboundGpuPod | None, snapshot: Snapshot) -> bool:
        """Keep the Pod of `uid` as known unbound, judged on `snapshot`, or (None: bound, finished, deleted)
        forget it."""
        pod = None if pod is None else self._enforced(pod, snapshot)
        if pod is None:
            self.unenforced.pop(uid, None)
        if self.unbound_pods.get(uid) == pod:
            return False
        self.unbound_pods = self.unbound_pods.delete(uid) if pod is None else self.unbound_pods.set(uid, pod)
        return True

    def replace_unbound_pods(self, pods: Iterable[UnboundGpuPod], snapshot: Snapshot) -> None:
        self.unenforced = {}
        self.unbound_pods = Map((p.uid, self._enforced(p, snapshot)) for p in pods)

    def _enforced(self, pod: UnboundGpuPod, snapshot: Snapshot) -> UnboundGpuPod:
        """The Pod with the types its own affinity enforces (enforced_types), judged with the catalog and the
        nodes of `snapshot`. One whose list its affinity does not enforce is kept as it came, to be judged
        again when the nodes change: its affinity may name a DRA node by hostname, or a product no type
        claims, that the view did not hold yet (the Pods' list may come before the nodes')."""
        types = pod.types and enforced_types(pod.types, pod.node_terms, (pod.resource,),
                                             placing_catalog(self.catalog, snapshot), snapshot.types_of_host)
        if types == pod.types or not pod.node_terms:  # without terms no view of the nodes could enforce them
            self.unenforced.pop(pod.uid, None)
        else:
            self.unenforced[pod.uid] = pod
        return pod if types == pod.types else replace(pod, types=types)

    def judge_again(self, snapshot: Snapshot) -> None:
        """Judge the Pods whose listed types were not enforced again, on the nodes of `snapshot`."""
        for uid, pod in list(self.unenforced.items()):
            kept = self.unbound_pods.get(uid)
            judged = self._enforced(pod, snapshot)
            if judged.types and kept == replace(pod, types=()):  # still the Pod as it was judged before
                self.unbound_pods = self.unbound_pods.set(uid, judged)

    # --- devices in use per node -------------------------------------------------------------
    def _add_requests(self, node_name: str, held: Mapping[str, int], sign: int) -> None:
        for resource, n in held.items():
            total = self.pod_requested.get((node_name, resource), 0) + sign * n
            if total > 0:
                self.pod_requested[(node_name, resource)] = total
            else:
                self.pod_requested.pop((node_name, resource), None)
        self.use_changed(node_name)

    def use_changed(self, node_name: str) -> bool:
        """Count the node's devices in use again; where they changed, its groups' free counts move."""
        if not self.set_requested(node_name):
            return False
        node = self.merged.nodes.get(node_name)
        if node is not None:
            self.groups.free_changed(node, self.requested)
        return True

    def _held(self, name: str) -> dict[tuple[str, str], int]:
        """A node's devices in use per resource: what claims hold of those it serves from DRA (once
        claims are read), what bound Pods request of the others."""
        merged = self.merged
        from_claims = merged.dra_taken.get(name, {}) if merged.claims_read else {}
        return {(name, r): n for r in self.catalog.resources
                if (n := from_claims[r] if r in from_claims else self.pod_requested.get((name, r), 0)) > 0}

    def set_requested(self, name: str) -> bool:
        """Count the node's devices in use again, without moving its groups; whether they changed."""
        held = self._held(name)
        old = {(name, r): self.requested[(name, r)] for r in self.catalog.resources if (name, r) in self.requested}
        if held == old:
            return False
        with self.requested.mutate() as requested:
            for key in old.keys() - held.keys():
                del requested[key]
            requested.update(held)
            self.requested = requested.finish()
        return True

    def recount_requested(self) -> None:
        """Every node's devices in use counted anew: after a full list."""
        names = {n for n, _ in self.pod_requested} | set(self.merged.dra_taken)
        self.requested = Map((k, v) for name in names for k, v in self._held(name).items())
