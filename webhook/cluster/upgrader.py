"""The upgrader's I/O (`gpuclass upgrader`): leader election, reading Pods and their owners, evictions, Events.

What to move is decided in webhook.core.after_bind.upgrade (pure). This module runs one pass every
`interval_seconds` while it holds the Lease:

1. the inventory snapshot the webhook's own watch keeps (watch.LiveInventory: Nodes, GPU Pods,
   free devices, Pods waiting for a node), so the room judged is the room the strict path sees;
2. the unfinished Pods gpu-class placed, listed as the API holds them, and the controller of each
   opted-in one read by kind, namespace and name and kept only when its UID is the one the Pod's
   ownerReference names (a ReplicaSet's workload is the Deployment that controls it);
3. decide_moves; for a group, the PodDisruptionBudgets that select its Pods must allow all of them at
   once, or none of it is evicted;
4. each move through the Eviction API (policy/v1), so PodDisruptionBudgets hold: a 429 is a move
   held back by a PDB, not counted as made; then an Event on the Pod and on its owner.

The evictions of the last window are kept on the Lease (annotation gpu-class.io/upgrade-history), so
a new leader does not move again a Pod its predecessor moved.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Protocol, Sequence

import kubernetes
from kubernetes.client.exceptions import ApiException

from ..core.catalog.model import Catalog
from ..core.view.pods import pod_group
from ..core.view.snapshot import Snapshot
from ..core.after_bind.lease import held_spec, may_hold, micro_time
from ..core.after_bind.upgrade import (
    Eviction, Held, History, Move, Owner, PodState, UpgradeDecision, UpgradeSettings, controller_ref, decide_moves,
    disruptions_allowed, is_opted_in, is_recreating_ref, job_recreates, read_pod_state, ref_group, with_refused,
)
from .query import REQUEST_TIMEOUT_SECONDS
from .watch import UNFINISHED_PODS

log = logging.getLogger("gpu-class.upgrader")

# An owner read this long ago is read again. A pass judges on owners it may have read earlier (one GET per
# controller per pass would be hundreds a second at 5,000 nodes); the owners of every Pod about to be
# evicted are read afresh first, so a move never rests on an owner the cache still holds but the API does not.
OWNER_REFRESH_SECONDS = 600.0
# Only the Nodes' labels are read (a Pod's nodeSelector), as metadata: under half the bytes of whole Nodes.
NODE_METADATA = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"}

HISTORY_ANNOTATION = "gpu-class.io/upgrade-history"
EVENT_REASON = "MovedUp"
COMPONENT = "gpu-class-upgrader"


class UpgradeObserver(Protocol):
    """Told what each pass did (for metrics)."""

    def moved(self, move: Move) -> None: ...

    def held(self, held: Sequence[Held]) -> None:
        """The Pods held back at this pass, each with its reason."""

    def evicted(self, outcome: str) -> None:
        """One Eviction asked for: evicted, pdb (429), gone (404) or error."""

    def leading(self, leader: bool) -> None: ...


class NoUpgradeObserver:
    def moved(self, move: Move) -> None:
        pass

    def held(self, held: Sequence[Held]) -> None:
        pass

    def evicted(self, outcome: str) -> None:
        pass

    def leading(self, leader: bool) -> None:
        pass


@dataclass(frozen=True)
class UpgraderConfig:
    settings: UpgradeSettings = UpgradeSettings()
    interval_seconds: float = 10.0
    lease_namespace: str = "gpu-class-system"
    lease_name: str = "gpu-class-upgrader"
    lease_duration_seconds: int = 15
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    dry_run: bool = False  # decide and log, evict nothing


def _json(response: Any) -> Any:
    return json.loads(response.data)


def _reader(api_client: kubernetes.client.ApiClient, group: str, kind: str) -> Callable[[str, str], Any] | None:
    apps = kubernetes.client.AppsV1Api(api_client)
    readers: dict[tuple[str, str], Callable[..., Any]] = {
        ("apps", "ReplicaSet"): apps.read_namespaced_replica_set,
        ("apps", "StatefulSet"): apps.read_namespaced_stateful_set,
        ("batch", "Job"): kubernetes.client.BatchV1Api(api_client).read_namespaced_job,
    }
    if (group, kind) == ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"):
        custom = kubernetes.client.CustomObjectsApi(api_client)
        return lambda name, ns: custom.get_namespaced_custom_object(
            group, "v1", ns, "leaderworkersets", name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)
    read = readers.get((group, kind))
    if read is None:
        return None
    return lambda name, ns: read(name, ns, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)


def owner_from_object(obj: Mapping[str, Any], group: str, kind: str) -> Owner:
    """The controller as the decision reads it: its workload is its own controller's, when it has one."""
    metadata = obj.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    above = controller_ref(obj)
    workload = (f"{above.get('kind')}/{namespace}/{above.get('name')}" if above is not None
                else f"{kind}/{namespace}/{name}")
    return Owner(group, kind, namespace, name, str(metadata.get("uid") or ""), workload,
                 recreates=job_recreates(obj) if (group, kind) == ("batch", "Job") else True)


class Upgrader:
    """One leader's passes: read, decide, evict, tell."""

    def __init__(self, api_client: kubernetes.client.ApiClient, catalog: Catalog, snapshot: Callable[[], Snapshot],
                 config: UpgraderConfig = UpgraderConfig(), observer: UpgradeObserver | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.api_client = api_client
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.coordination = kubernetes.client.CoordinationV1Api(api_client)
        self.policy = kubernetes.client.PolicyV1Api(api_client)
        self.catalog = catalog
        self.snapshot = snapshot
        self.config = config
        self.observer = observer or NoUpgradeObserver()
        self.clock = clock
        self.history = History()
        self.leader = False
        self._owners: dict[str, tuple[float, Owner | None]] = {}  # by UID: when read, and what (None: not found)

    # --- leader election --------------------------------------------------------------------------------------

    def hold_lease(self) -> bool:
        """Take or renew the Lease; True while this replica leads. The history travels on the Lease."""
        c = self.config
        now = self.clock()
        try:
            lease = _json(self.coordination.read_namespaced_lease(
                c.lease_name, c.lease_namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS))
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading lease %s/%s: %s", c.lease_namespace, c.lease_name, exc.reason)
                return self._lead(False)
            lease = None
        spec = (lease or {}).get("spec") or {}
        if not may_hold(spec, c.identity, now):
            return self._lead(False)
        if not self.leader and lease is not None:
            self.history = History(evictions=_history_from(lease))
        annotations = {HISTORY_ANNOTATION: _history_text(self.history)}
        body: Any = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": c.lease_name, "namespace": c.lease_namespace, "annotations": annotations},
                "spec": held_spec(spec, c.identity, now, c.lease_duration_seconds)}
        try:
            if lease is None:
                self.coordination.create_namespaced_lease(c.lease_namespace, body,
                                                          _request_timeout=REQUEST_TIMEOUT_SECONDS)
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                self.coordination.replace_namespaced_lease(c.lease_name, c.lease_namespace, body,
                                                           _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:  # 409: another candidate wrote first
            log.info("lease %s/%s not taken: %s", c.lease_namespace, c.lease_name, exc.reason)
            return self._lead(False)
        return self._lead(True)

    def _lead(self, leader: bool) -> bool:
        if leader != self.leader:
            log.info("%s the lease %s/%s as %s", "holding" if leader else "not holding", self.config.lease_namespace,
                     self.config.lease_name, self.config.identity)
            self.observer.leading(leader)
        self.leader = leader
        if not leader:
            self.history = History()
        return leader

    # --- reading ----------------------------------------------------------------------------------------------

    def list_placed_pods(self) -> list[dict[str, Any]]:
        # a consistent list (not resourceVersion "0"): a Pod list older than the last eviction would show its Pod
        # still running and its replacement not yet made, so the workload's move not in flight. Since Kubernetes
        # 1.31 the API server answers it from its watch cache once that has caught up (ConsistentListFromCache)
        response = self.core.list_pod_for_all_namespaces(field_selector=UNFINISHED_PODS, _preload_content=False,
                                                         _request_timeout=REQUEST_TIMEOUT_SECONDS)
        return [p for p in _json(response).get("items") or []
                if "gpu-class.io/types" in ((p.get("metadata") or {}).get("annotations") or {})]

    def read_owners(self, pods: Sequence[Mapping[str, Any]], *, afresh: bool = False) -> dict[str, Owner]:
        """The controllers of the opted-in Pods, by UID, as the API holds them: one read per controller, kept for
        OWNER_REFRESH_SECONDS unless `afresh`. Owners no Pod of `pods` names are forgotten, unless `afresh`."""
        now = self.clock()
        owners: dict[str, Owner] = {}
        named: set[str] = set()
        for pod in pods:
            ref = controller_ref(pod)
            class_name = ((pod.get("metadata") or {}).get("annotations") or {}).get("gpu-class.io/class")
            if ref is None or not is_recreating_ref(ref) or not is_opted_in(pod, self.catalog, class_name):
                continue
            uid = str(ref.get("uid"))
            if uid in named:
                continue
            named.add(uid)
            cached = self._owners.get(uid)
            if cached is None or afresh or now - cached[0] >= OWNER_REFRESH_SECONDS:
                namespace = str((pod.get("metadata") or {}).get("namespace") or "")
                cached = self._owners[uid] = (now, self._read_owner(ref, namespace, uid))
            if cached[1] is not None:
                owners[uid] = cached[1]
        if not afresh:
            self._owners = {uid: v for uid, v in self._owners.items() if uid in named}
        return owners

    def _read_owner(self, ref: Mapping[str, Any], namespace: str, uid: str) -> Owner | None:
        group, kind, name = ref_group(ref), str(ref.get("kind")), str(ref.get("name"))
        read = _reader(self.api_client, group, kind)
        try:
            obj = _json(read(name, namespace)) if read is not None else None
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading %s %s/%s: %s", kind, namespace, name, exc.reason)
            return None
        if obj is None or (obj.get("metadata") or {}).get("uid") != uid:
            return None
        return owner_from_object(obj, group, kind)

    # --- one pass ---------------------------------------------------------------------------------------------

    def run_once(self) -> UpgradeDecision:
        snapshot = self.snapshot()
        # only Pods that may move (opted in) or hold a group back (a member of one) are read further
        pods = [p for p in self.list_placed_pods() if may_move(p, self.catalog)]
        by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
        nodes = _json(self.core.list_node(_preload_content=False, _headers=NODE_METADATA,
                                          _request_timeout=REQUEST_TIMEOUT_SECONDS))
        node_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes.get("items") or []}
        now = self.clock()

        def decide(owners: Mapping[str, Owner]) -> UpgradeDecision:
            states = [s for p in pods if (s := read_pod_state(p, self.catalog, owners)) is not None]
            return decide_moves(now, snapshot, self.catalog, states, self.history, self.config.settings, node_labels)

        owners = self.read_owners(pods)
        verified: set[str] = set()
        while True:  # until every Pod to be evicted has its owner read afresh: each round reads more, so it ends
            decision = decide(owners)
            moving = [by_uid[p.uid] for m in decision.moves for p in m.pods]
            uids = {str((controller_ref(p) or {}).get("uid")) for p in moving} - verified
            if not uids:
                break
            fresh = self.read_owners([p for p in moving if str((controller_ref(p) or {}).get("uid")) in uids],
                                     afresh=True)
            verified |= uids
            if all(fresh.get(uid) == owners.get(uid) for uid in uids):
                break
            # an owner changed or went since it was read: decide again on the API's word
            owners = {**{u: o for u, o in owners.items() if u not in uids}, **fresh}
        if self.config.dry_run:
            for move in decision.moves:
                log.info("dry run, not evicted: %s: would be %s", ", ".join(p.ref for p in move.pods), move.message())
            self.history = replace(decision.history, evictions=self.history.evictions)
            self.observer.held(decision.held)
            return replace(decision, moves=())
        refused: list[Move] = []
        for move in decision.moves:
            if not self._evict(move, by_uid):
                refused.append(move)
        decision = with_refused(decision, refused)
        self.history = decision.history
        for move in decision.moves:
            self.observer.moved(move)
            log.info("%s: %s", ", ".join(p.ref for p in move.pods), move.message())
            self._tell(move, by_uid)
        self.observer.held(decision.held)
        for held in decision.held:
            log.debug("held back (%s): %s: %s", held.reason, ", ".join(p.ref for p in held.pods), held.detail)
        return decision

    def _evict(self, move: Move, by_uid: Mapping[str, Mapping[str, Any]]) -> bool:
        """Evict the move's Pods; False when none was (a PDB, or it was gone). A group's PDBs are read first."""
        if len(move.pods) > 1 and not self._pdbs_allow(move.pods, by_uid):
            self.observer.evicted("pdb")
            return False
        evicted = 0
        for pod in move.pods:
            body: Any = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": pod.name, "namespace": pod.namespace}}
            try:
                self.core.create_namespaced_pod_eviction(pod.name, pod.namespace, body,
                                                         _request_timeout=REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                outcome = "pdb" if exc.status == 429 else "gone" if exc.status == 404 else "error"
                self.observer.evicted(outcome)
                if outcome == "error":
                    log.warning("evicting %s: %s %s", pod.ref, exc.status, exc.reason)
                if evicted:
                    log.warning("group move of %s stopped after %d of %d Pods: %s", pod.group, evicted,
                                len(move.pods), outcome)
                return evicted > 0
            self.observer.evicted("evicted")
            evicted += 1
        return True

    def _pdbs_allow(self, pods: Sequence[PodState], by_uid: Mapping[str, Mapping[str, Any]]) -> bool:
        namespace = pods[0].namespace
        try:
            pdbs = _json(self.policy.list_namespaced_pod_disruption_budget(
                namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)).get("items") or []
        except ApiException as exc:
            log.warning("listing PodDisruptionBudgets in %s: %s", namespace, exc.reason)
            return False
        labels = [((by_uid.get(p.uid) or {}).get("metadata") or {}).get("labels") or {} for p in pods]
        return disruptions_allowed(pdbs, labels)

    def _tell(self, move: Move, by_uid: Mapping[str, Mapping[str, Any]]) -> None:
        """An Event on each moved Pod and on its controller."""
        now = micro_time(self.clock())
        for pod in move.pods:
            targets: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                        "uid": pod.uid}]
            ref = controller_ref(by_uid.get(pod.uid) or {})
            if ref is not None:
                targets.append({"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind"),
                                "namespace": pod.namespace, "name": ref.get("name"), "uid": ref.get("uid")})
            for target in targets:
                event: Any = {"apiVersion": "v1", "kind": "Event",
                         "metadata": {"generateName": f"{target['name']}.", "namespace": pod.namespace},
                         "involvedObject": target, "reason": EVENT_REASON, "type": "Normal",
                         "message": move.message() if target["kind"] == "Pod" else f"{pod.name} {move.message()}",
                         "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
                         "reportingInstance": self.config.identity, "firstTimestamp": now[:19] + "Z",
                         "lastTimestamp": now[:19] + "Z", "count": 1}
                try:
                    self.core.create_namespaced_event(pod.namespace, event, _request_timeout=REQUEST_TIMEOUT_SECONDS)
                except ApiException as exc:
                    log.warning("event on %s %s/%s: %s", target["kind"], pod.namespace, target["name"], exc.reason)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                if self.hold_lease():
                    self.run_once()
            except Exception:  # one failed pass must not end the controller: log it, try again next interval
                log.exception("upgrade pass failed")
            took = time.monotonic() - started
            log.debug("pass took %.2f s", took)
            # busy at most a quarter of the time: a pass reads every Pod gpu-class placed, seconds at 15,000 nodes
            stop.wait(max(self.config.interval_seconds - took, 3 * took))


def may_move(pod: Mapping[str, Any], catalog: Catalog) -> bool:
    """Whether the decision needs the Pod: it opted in, or it is in a group (whose other Pods may have)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return is_opted_in(pod, catalog, annotations.get("gpu-class.io/class")) or pod_group(pod) is not None


def _history_text(history: History) -> str:
    return json.dumps([[e.at_seconds, e.pod_uid, e.pod, e.workload] for e in history.evictions[-1000:]])


def _history_from(lease: Mapping[str, Any]) -> tuple[Eviction, ...]:
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(HISTORY_ANNOTATION)
    try:
        return tuple(Eviction(float(a), str(u), str(p), str(w)) for a, u, p, w in json.loads(text or "[]"))
    except (ValueError, TypeError):
        log.warning("lease annotation %s unreadable; starting with no history", HISTORY_ANNOTATION)
        return ()
