"""gpu-class-scheduler as deploy/scheduler ships it, two replicas with leader election, loses its leader in the middle
of a stream of class Pods: SIGKILLed, or cut off from the API server. Every Pod is bound, on the type the webhook
promised, by one replica only, and the other takes over within the shipped lease settings.

The replicas run the shipped KubeSchedulerConfiguration (profiles and leaderElection, read from
deploy/scheduler/config.yaml) as the gpu-class-scheduler ServiceAccount, on the shipped Lease; the session's own
gpu-class-scheduler is stopped meanwhile (scheduler_replicas.session_scheduler_stopped says why). The Pods select
the test's own nodes by a label: H100 nodes with room for all of them, and an A100 node the order must leave alone.
Each replica's log (-v=2) says which Pods it bound and when, and when it took or lost the Lease.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

import local_cluster
from fleet import H100_LABELS
from kubeobjects import TYPES, create_node, delete_nodes, fixture_labels, make_pod, wait_for
from scheduler_replicas import (ACQUIRED, LOST, WAITING, Bind, Replica, cut_off_leader_stops_within_seconds,
                                direct_kubeconfig, lease, proxied_kubeconfig, session_scheduler_stopped,
                                shipped_lease_settings)
from tcp_proxy import running_proxy

SUFFIX = uuid.uuid4().hex[:6]
POOL = "gpu-class.io/e2e-failover"  # on the test's nodes; the Pods select it
H100_NODES = [f"failover-h100-{i}-{SUFFIX}" for i in range(4)]
A100_NODE = f"failover-a100-{SUFFIX}"
NODE_TYPES = {**{n: "H100" for n in H100_NODES}, A100_NODE: "A100-40GB"}
GPUS_PER_H100_NODE = 80  # 320 in all: room for every Pod on H100
PODS = 300
FAIL_AFTER_BOUND = 100  # the leader fails once it has bound this many
CREATE_EVERY_SECONDS = 0.1  # the stream: a Pod every 0.1 s, so it goes on through the failover
SETTINGS = shipped_lease_settings()
GAP_BAR_SECONDS = SETTINGS.lease_seconds + 5


@pytest.fixture
def nodes(core: kubernetes.client.CoreV1Api) -> Iterator[None]:
    for name in H100_NODES:
        create_node(core, name, {**H100_LABELS, POOL: SUFFIX}, gpus=GPUS_PER_H100_NODE)
    create_node(core, A100_NODE, {**fixture_labels("a100-sxm4-40gb_gce_before-mig.yaml"), POOL: SUFFIX}, gpus=8)
    try:
        yield
    finally:
        delete_nodes(core, [*H100_NODES, A100_NODE])


@dataclass
class Stream:
    """Creates PODS class `high` Pods, one every CREATE_EVERY_SECONDS, in a thread of its own."""

    core: kubernetes.client.CoreV1Api
    namespace: str
    created: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        for i in range(PODS):
            time.sleep(max(0.0, started + i * CREATE_EVERY_SECONDS - time.monotonic()))
            pod = make_pod(f"high-{i:03d}", gpu_class="high", gpus=1, scheduler=local_cluster.STRICT_SCHEDULER)
            pod["spec"]["nodeSelector"] = {POOL: SUFFIX}
            try:
                self.core.create_namespaced_pod(self.namespace, pod)
                self.created.append(pod["metadata"]["name"])
            except ApiException as e:
                self.refused.append(f"{pod['metadata']['name']}: {e.status} {e.reason}")

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(PODS * CREATE_EVERY_SECONDS + 60)


@dataclass(frozen=True)
class Outcome:
    """What the API holds once the stream is bound, and what each replica says it bound."""

    nodes: dict[str, str]  # Pod name -> node
    promised: dict[str, str]  # Pod name -> the first type of its gpu-class.io/types (the webhook's patch)
    bound_at: dict[str, float]  # Pod name -> its PodScheduled condition's time (whole seconds)


def bound_outcome(core: kubernetes.client.CoreV1Api, namespace: str, stream: Stream) -> Outcome:
    stream.join()
    assert stream.refused == [] and len(stream.created) == PODS, stream.refused

    def all_bound() -> list[kubernetes.client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace).items
        return pods if len(pods) == PODS and all(p.spec.node_name for p in pods) else None
    pods = wait_for(f"all {PODS} Pods bound", all_bound, seconds=SETTINGS.lease_seconds + 60, interval=1.0)
    scheduled = {p.metadata.name: next(c.last_transition_time.timestamp() for c in p.status.conditions
                                       if c.type == "PodScheduled" and c.status == "True") for p in pods}
    return Outcome({p.metadata.name: p.spec.node_name for p in pods},
                   {p.metadata.name: p.metadata.annotations[TYPES].split(",")[0] for p in pods}, scheduled)


def name_of(bind: Bind) -> str:
    return bind.pod.split("/", 1)[1]


def assert_bound_once_on_the_promised_type(outcome: Outcome, failed: Replica, survivor: Replica,
                                           failed_at: float) -> tuple[list[Bind], list[Bind]]:
    """Every Pod on its promised type (H100, where there was room for all), each bound by one replica once: the
    failed leader before it failed, the survivor after. Returns (the failed leader's binds, the survivor's)."""
    assert Counter(outcome.promised.values()) == {"H100": PODS}, Counter(outcome.promised.values())
    wrong = {pod: node for pod, node in outcome.nodes.items() if NODE_TYPES[node] != outcome.promised[pod]}
    assert wrong == {}, wrong
    before, after = failed.binds(), survivor.binds()
    for replica, made in ((failed, before), (survivor, after)):
        assert all(b.node == outcome.nodes[name_of(b)] for b in made), f"{replica.name} logged another node"
        assert len({b.pod for b in made}) == len(made), f"{replica.name} bound a Pod twice"
        # the API server's answer to a binding of a Pod that is bound already, which kube-scheduler logs
        assert "is already assigned to node" not in replica.log_file.read_text(errors="replace"), \
            f"{replica.name} tried to bind a bound Pod"
    assert not {b.pod for b in before} & {b.pod for b in after}, "a Pod bound by both replicas"
    assert len(before) >= FAIL_AFTER_BOUND and after, (len(before), len(after))
    assert all(b.at >= failed_at for b in after), "the survivor bound before the leader failed"
    # A bind the API made but whose answer the failed leader never logged (killed or cut off meanwhile) was made
    # before the failure: the API's record of it is older.
    unlogged = set(outcome.nodes) - {name_of(b) for b in before + after}
    late = {pod: outcome.bound_at[pod] - failed_at for pod in unlogged if outcome.bound_at[pod] > failed_at + 1}
    assert late == {}, late
    return before, after


def report(case: str, failed_at: float, before: list[Bind], after: list[Bind], survivor: Replica) -> float:
    gap = min(b.at for b in after) - failed_at
    took = survivor.logged(ACQUIRED)
    assert took is not None
    print(f"\n{case}: the next bind {gap:.1f} s after the leader failed (the survivor took the Lease after "
          f"{took - failed_at:.1f} s; the last bind before, {failed_at - max(b.at for b in before):.2f} s before it); "
          f"{len(before)} bound before, {len(after)} after, {PODS - len(before) - len(after)} in flight; lease "
          f"{SETTINGS.lease_seconds:.0f} s, renew deadline {SETTINGS.renew_deadline_seconds:.0f} s, retry "
          f"{SETTINGS.retry_seconds:.0f} s")
    return gap


def stream_to_pair(pair: list[Replica], leader: Replica, standby: Replica, core: kubernetes.client.CoreV1Api,
                   namespace: str) -> Stream:
    """`leader` leading and `standby` in sync and waiting on the Lease (both added to `pair`, for the fixture to
    stop), the stream started, and returned once the leader has bound FAIL_AFTER_BOUND of its Pods."""
    pair.extend([leader, standby])
    leader.start()
    wait_for(f"{leader.name} leading", lambda: leader.logged(ACQUIRED), seconds=60)
    standby.start()
    wait_for(f"{standby.name} waiting on the Lease", lambda: standby.logged(WAITING), seconds=60)
    assert standby.logged(ACQUIRED) is None
    stream = Stream(core, namespace)
    stream.start()
    wait_for(f"{leader.name} binding {FAIL_AFTER_BOUND} Pods", lambda: len(leader.binds()) >= FAIL_AFTER_BOUND,
             seconds=PODS * CREATE_EVERY_SECONDS + 30, interval=0.1)
    return stream


@pytest.fixture
def pair_only(cluster: local_cluster.Cluster) -> Iterator[list[Replica]]:
    """The session's gpu-class-scheduler stopped; the test appends its replicas, stopped afterwards."""
    replicas: list[Replica] = []
    with session_scheduler_stopped(cluster):
        try:
            yield replicas
        finally:
            for r in replicas:
                r.stop()


def test_the_leader_killed_under_load(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
                                      namespace: str, nodes: None, pair_only: list[Replica]) -> None:
    transitions = int(lease(cluster).get("leaseTransitions") or 0)
    leader, standby = (Replica(cluster, f"failover-kill-{w}-{SUFFIX}", direct_kubeconfig(cluster)) for w in "ab")
    stream = stream_to_pair(pair_only, leader, standby, core, namespace)
    killed_at = time.time()
    os.kill(leader.pid(), signal.SIGKILL)

    outcome = bound_outcome(core, namespace, stream)
    before, after = assert_bound_once_on_the_promised_type(outcome, leader, standby, killed_at)
    gap = report("leader killed", killed_at, before, after, standby)
    assert gap < GAP_BAR_SECONDS
    held = lease(cluster)
    assert held["leaseDurationSeconds"] == SETTINGS.lease_seconds
    assert held["leaseTransitions"] == transitions + 2  # the session's scheduler to a, a to b


def test_the_leader_cut_off_from_the_api_server_under_load(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str, nodes: None,
        pair_only: list[Replica]) -> None:
    """The leader reaches the API server through a proxy, which is cut: it cannot renew its Lease, stops leading
    within its renew deadline and exits (kube-scheduler does when it loses the Lease, for its Pod to be restarted);
    the other takes the Lease once it runs out. Restarted with the proxy healed, the first comes back as the
    standby."""
    assert cluster.ports is not None
    with running_proxy("127.0.0.1", cluster.ports.apiserver) as proxy:
        cut_name = f"failover-cut-a-{SUFFIX}"
        leader = Replica(cluster, cut_name, proxied_kubeconfig(cluster, cut_name, proxy.address))
        standby = Replica(cluster, f"failover-cut-b-{SUFFIX}", direct_kubeconfig(cluster))
        stream = stream_to_pair(pair_only, leader, standby, core, namespace)
        cut_at = time.time()
        proxy.cut()
        assert proxy.is_refusing()

        # it stops leading within its renew deadline (after the retry that failed first), and exits
        wait_for(f"{leader.name} losing the Lease and exiting", lambda: not leader.is_running(),
                 seconds=cut_off_leader_stops_within_seconds(SETTINGS) + 10)
        lost_at = leader.logged(LOST)
        assert lost_at is not None, f"{leader.name} exited without losing the Lease"
        assert lost_at - cut_at <= cut_off_leader_stops_within_seconds(SETTINGS) + 2
        # restarted, as the kubelet restarts its container, once the other leads (restarted at once, it would see
        # the Lease as new and wait a whole lease duration from then: the other, which has watched it since
        # before the cut, takes it first either way)
        wait_for(f"{standby.name} leading", lambda: standby.logged(ACQUIRED), seconds=SETTINGS.lease_seconds + 15)
        proxy.heal()
        leader.start()

        outcome = bound_outcome(core, namespace, stream)
        before, after = assert_bound_once_on_the_promised_type(outcome, leader_first_life(leader), standby, cut_at)
        gap = report("leader cut off", cut_at, before, after, standby)
        assert gap < GAP_BAR_SECONDS
        # it bound nothing once cut off, and stopped leading before the other began
        assert max(b.at for b in before) <= cut_at + 1
        took = standby.logged(ACQUIRED)
        assert took is not None and lost_at < took
        # back, it waits on the Lease the other holds, binding nothing
        wait_for(f"{leader.name} back and waiting on the Lease", lambda: leader.logged(WAITING), seconds=60)
        assert leader.binds() == [] and leader.logged(ACQUIRED) is None


def leader_first_life(replica: Replica) -> Replica:
    """The replica as it was before its restart: its log from the start."""
    return Replica(replica.cluster, replica.name, replica.kubeconfig, log_offset=0)
