"""`gpuclass upgrader` on the real control plane with the strict path (gpu-class-scheduler): a Deployment that opted
in (gpu-class.io/upgrade: "true") moves from A100 to H100 when H100 frees, one replica at a time under a
PodDisruptionBudget of maxUnavailable 1, each once; a bare Pod that opted in never moves; a PodDisruptionBudget
stricter than the upgrader's own one move in flight refuses the eviction, and nothing moves past it.

The upgrader runs as a process with deploy/upgrader's ServiceAccount, so the RBAC it ships is what it may do. There
are no kubelets: the test plays one (`FakeKubelet`), marking each bound Pod Running and Ready a moment after it is
bound, as the ReplicaSet and disruption controllers need to count it available. The nodes are the test's own, and the
Pods select them by a label. The upgrader judges room on the nodes a Pod's nodeSelector admits, but the webhook's
room for a group counts every node of a type (docs/users/groups.md), so the session's other GPU nodes are cordoned
while a test runs: else a group would start on H100 for the shared nodes' room, where its Pods may not go.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Iterator

import kubernetes
import pytest

import local_cluster
from upgrading import LEASE, SETTLE_SECONDS, FakeKubelet, kubelet_standing_in, metric, running_upgrader
from fleet import H100_LABELS
from kubeobjects import (create_node, delete_if_present, delete_nodes, fixture_labels, make_pod,
                         other_gpu_nodes_cordoned, pod_removals, wait_for, webhook_free_gpus)

SUFFIX = uuid.uuid4().hex[:6]
POOL = "gpu-class.io/e2e-upgrade"  # on the test's nodes; the Pods select it
H100_NODE, A100_NODE = f"upg-h100-{SUFFIX}", f"upg-a100-{SUFFIX}"


def no_pod_waits(core: kubernetes.client.CoreV1Api) -> bool:
    """No Pod anywhere waits for a node: a Pod left by an earlier test's namespace, still being deleted, would be
    given room first (the upgrader reserves room for waiting Pods) and could take this test's nodes."""
    return not core.list_pod_for_all_namespaces(field_selector="spec.nodeName=").items


@pytest.fixture
def nodes(core: kubernetes.client.CoreV1Api) -> Iterator[None]:
    wait_for("no Pod waiting for a node", lambda: no_pod_waits(core), seconds=60)
    with other_gpu_nodes_cordoned(core):
        a100 = fixture_labels("a100-sxm4-40gb_gce_before-mig.yaml")
        create_node(core, H100_NODE, {**H100_LABELS, POOL: SUFFIX}, gpus=4)
        create_node(core, A100_NODE, {**a100, POOL: SUFFIX}, gpus=4)
        try:
            yield
        finally:
            delete_nodes(core, [H100_NODE, A100_NODE])


@pytest.fixture
def kubelet(core: kubernetes.client.CoreV1Api, namespace: str) -> Iterator[FakeKubelet]:
    with kubelet_standing_in(core, namespace) as k:
        yield k


@pytest.fixture
def upgrader(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api) -> Iterator[int]:
    """One upgrader, with no Lease left from an earlier one; yields its metrics port."""
    coordination = kubernetes.client.CoordinationV1Api(core.api_client)
    delete_if_present(coordination.delete_namespaced_lease, LEASE, local_cluster.WEBHOOK_NAMESPACE)
    with running_upgrader(cluster, "one") as (_, port):
        yield port


def pod_template(app: str, *, upgrade: bool) -> dict[str, Any]:
    pod = make_pod(app, gpu_class="high", gpus=1, scheduler=local_cluster.STRICT_SCHEDULER,
                   annotations={"gpu-class.io/upgrade": "true"} if upgrade else None)
    pod["spec"]["nodeSelector"] = {POOL: SUFFIX}
    pod["spec"]["restartPolicy"] = "Always"
    return pod


def test_a_deployment_moves_up_one_replica_at_a_time_and_a_bare_pod_never(
        api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str, nodes: None,
        kubelet: FakeKubelet, upgrader: int) -> None:
    apps = kubernetes.client.AppsV1Api(api_client)
    # H100 holds 4: two bare Pods that did not opt in take 2 of them first
    for i in range(2):
        core.create_namespaced_pod(namespace, {**pod_template(f"blocker-{i}", upgrade=False),
                                               "metadata": {"name": f"blocker-{i}",
                                                            "annotations": {"gpu-class.io/class": "high"}}})
    wait_for("the blockers on H100", lambda: len(kubelet.on(H100_NODE, "blocker-")) == 2, seconds=60)
    kubernetes.client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "infer"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "infer"}}}})
    pod = pod_template("infer", upgrade=True)
    template = {"metadata": {"labels": {"app": "infer"}, "annotations": pod["metadata"]["annotations"]},
                "spec": pod["spec"]}
    apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "infer"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "infer"}}, "template": template}})
    wait_for("2 replicas on H100 and 2 on A100",
             lambda: (len(kubelet.on(H100_NODE, "infer-")), len(kubelet.on(A100_NODE, "infer-"))) == (2, 2), seconds=60)
    # a bare Pod that opted in, on A100 (H100 is full)
    core.create_namespaced_pod(namespace, pod_template("bare", upgrade=True))
    wait_for("the bare Pod on A100", lambda: kubelet.on(A100_NODE, "bare") == ["bare"], seconds=60)
    on_a100 = {uid for uid, (n, node, _) in kubelet.bound.items() if node == A100_NODE and n.startswith("infer-")}
    wait_for("every Pod Ready and the PDB counting them",
             lambda: len(kubelet.ready) == 7 and (kubernetes.client.PolicyV1Api(api_client)
                                                   .read_namespaced_pod_disruption_budget("infer", namespace)
                                                   .status.current_healthy) == 4, seconds=60)
    time.sleep(6)  # past --min-on-node-seconds: from here only the settle time holds them
    assert metric(upgrader, "gpu_class_upgrade_moves_total") == 0, "nothing moves while H100 is full"

    room_at = time.time()
    for i in range(2):
        core.delete_namespaced_pod(f"blocker-{i}", namespace, grace_period_seconds=0)

    def moved() -> bool:
        return len(kubelet.on(H100_NODE, "infer-")) == 4 and not kubelet.on(A100_NODE, "infer-")
    wait_for("both A100 replicas on H100", moved, seconds=SETTLE_SECONDS + 30)
    done_at = time.time()

    # one at a time: the second left A100 only after the first's replacement was Ready on H100
    left = sorted(kubelet.gone[uid] for uid in on_a100)
    replacements = sorted((t, uid) for uid, (n, node, t) in kubelet.bound.items()
                          if node == H100_NODE and n.startswith("infer-") and t >= room_at)
    assert len(left) == 2 and len(replacements) == 2
    first_ready = kubelet.ready[replacements[0][1]]
    assert left[0] >= room_at + SETTLE_SECONDS - 1, "nothing moved before the room had settled"
    assert left[1] >= first_ready, "the second replica left before the first one's replacement was Ready"
    # each moved once, and nothing else was evicted: the bare Pod stays
    time.sleep(5)
    assert metric(upgrader, "gpu_class_upgrade_moves_total") == 2
    assert metric(upgrader, 'gpu_class_upgrade_evictions_total\\{outcome="evicted"\\}') == 2
    assert kubelet.on(A100_NODE, "bare") == ["bare"]
    events = [e for e in core.list_namespaced_event(namespace).items if e.reason == "MovedUp"]
    on_pods = sorted(e.involved_object.name for e in events if e.involved_object.kind == "Pod")
    assert on_pods == sorted(kubelet.bound[uid][0] for uid in on_a100), "one Event per moved Pod, each moved once"
    assert all(re.fullmatch(r"moved from A100-40GB to H100: H100 had room for \d+ s", e.message)
               for e in events if e.involved_object.kind == "Pod")
    assert sum(e.involved_object.kind == "ReplicaSet" for e in events) == 2
    print(f"\nroom to first move {left[0] - room_at:.1f} s, to second move {left[1] - room_at:.1f} s, "
          f"to both on H100 {done_at - room_at:.1f} s; evictions {metric(upgrader, 'gpu_class_upgrade_evictions_total'):.0f}"
          f" for {metric(upgrader, 'gpu_class_upgrade_moves_total'):.0f} moves")


def create_blockers(core: kubernetes.client.CoreV1Api, namespace: str, kubelet: FakeKubelet, names: list[str]) -> None:
    """Bare Pods that did not opt in, each taking one H100 GPU."""
    for name in names:
        core.create_namespaced_pod(namespace, {**pod_template(name, upgrade=False),
                                               "metadata": {"name": name, "annotations": {"gpu-class.io/class": "high"}}})
    wait_for(f"{', '.join(names)} on H100", lambda: set(names) <= set(kubelet.on(H100_NODE, "")), seconds=60)


def create_deployment(api_client: kubernetes.client.ApiClient, namespace: str, name: str, replicas: int, *,
                      upgrade: bool) -> None:
    pod = pod_template(name, upgrade=upgrade)
    template = {"metadata": {"labels": {"app": name}, "annotations": pod["metadata"]["annotations"]}, "spec": pod["spec"]}
    kubernetes.client.AppsV1Api(api_client).create_namespaced_deployment(namespace, {
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}})


def test_a_burst_moves_nothing_room_for_one_moves_one_and_no_opt_in_never_moves(
        api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str, nodes: None,
        kubelet: FakeKubelet, upgrader: int) -> None:
    create_blockers(core, namespace, kubelet, [f"blocker-{i}" for i in range(4)])  # H100 full
    create_deployment(api_client, namespace, "infer", 2, upgrade=True)
    create_deployment(api_client, namespace, "plain", 1, upgrade=False)
    wait_for("3 replicas on A100", lambda: len(kubelet.on(A100_NODE, "infer-") + kubelet.on(A100_NODE, "plain-")) == 3,
             seconds=60)
    wait_for("every Pod Ready", lambda: len(kubelet.ready) == 7, seconds=30)
    time.sleep(6)  # past --min-on-node-seconds

    # a burst: room for one for less than the settle time, then taken by a Pod that did not opt in
    core.delete_namespaced_pod("blocker-0", namespace, grace_period_seconds=0)
    time.sleep(SETTLE_SECONDS / 2)
    create_blockers(core, namespace, kubelet, ["blocker-0b"])
    time.sleep(SETTLE_SECONDS + 5)
    assert metric(upgrader, "gpu_class_upgrade_moves_total") == 0, "a burst of room shorter than the settle time"
    assert len(kubelet.on(A100_NODE, "infer-")) == 2

    # room for one: one replica moves, the other stays
    room_at = time.time()
    core.delete_namespaced_pod("blocker-1", namespace, grace_period_seconds=0)
    wait_for("one replica on H100", lambda: len(kubelet.on(H100_NODE, "infer-")) == 1, seconds=SETTLE_SECONDS + 30)
    print(f"\nroom for one to moved: {time.time() - room_at:.1f} s")
    time.sleep(SETTLE_SECONDS + 5)
    assert (len(kubelet.on(H100_NODE, "infer-")), len(kubelet.on(A100_NODE, "infer-"))) == (1, 1)
    assert metric(upgrader, "gpu_class_upgrade_moves_total") == 1

    # room for one more takes the other replica; then room the Deployment without the opt-in never takes
    core.delete_namespaced_pod("blocker-2", namespace, grace_period_seconds=0)
    wait_for("both replicas on H100", lambda: len(kubelet.on(H100_NODE, "infer-")) == 2, seconds=SETTLE_SECONDS + 30)
    core.delete_namespaced_pod("blocker-3", namespace, grace_period_seconds=0)
    time.sleep(SETTLE_SECONDS + 10)
    assert len(kubelet.on(A100_NODE, "plain-")) == 1 and metric(upgrader, "gpu_class_upgrade_moves_total") == 2


def test_a_budget_stricter_than_one_move_in_flight_refuses_the_eviction_and_nothing_moves_past_it(
        cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api,
        namespace: str, nodes: None, kubelet: FakeKubelet, upgrader: int) -> None:
    """A PDB of minAvailable = every replica allows no disruption, though the upgrader's own limit (one move in
    flight per workload) would allow one: the API refuses the eviction (429) and no Pod of the set leaves its node;
    the same room once the budget allows one moves one, so the budget alone held it."""
    policy = kubernetes.client.PolicyV1Api(api_client)
    create_blockers(core, namespace, kubelet, [f"blocker-{i}" for i in range(4)])  # H100 full
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "infer"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "infer"}}}})
    create_deployment(api_client, namespace, "infer", 2, upgrade=True)
    wait_for("2 replicas on A100", lambda: len(kubelet.on(A100_NODE, "infer-")) == 2, seconds=60)

    def budget() -> tuple[int, int]:
        status = policy.read_namespaced_pod_disruption_budget("infer", namespace).status
        return status.current_healthy, status.disruptions_allowed
    wait_for("both replicas Ready and the PDB counting them, allowing none", lambda: budget() == (2, 0), seconds=60)
    replicas = {uid: name for uid, (name, node, _) in kubelet.bound.items() if name.startswith("infer-")}
    time.sleep(6)  # past --min-on-node-seconds
    refused_from = time.time()
    for i in range(2):  # room on H100 for both
        core.delete_namespaced_pod(f"blocker-{i}", namespace, grace_period_seconds=0)
    wait_for("the upgrader's eviction refused by the PDB",
             lambda: metric(upgrader, 'gpu_class_upgrade_evictions_total\\{outcome="pdb"\\}') >= 2,
             seconds=SETTLE_SECONDS + 30)
    time.sleep(3)  # more passes, each refused
    refused_until = time.time()
    assert metric(upgrader, 'gpu_class_upgrade_held_back\\{reason="pdb"\\}') >= 1
    assert metric(upgrader, "gpu_class_upgrade_moves_total") == 0
    assert metric(upgrader, 'gpu_class_upgrade_evictions_total\\{outcome="evicted"\\}') == 0
    # nothing moved past it: the same Pods, on A100, none gone, as the API server's audit log says too
    assert kubelet.on(A100_NODE, "infer-") == sorted(replicas.values()) and not set(replicas) & set(kubelet.gone)
    removals = pod_removals(cluster.audit_log.read_text(errors="replace"), refused_from, refused_until)
    of_replicas = [r for r in removals if any(f"/{name}" in r for name in replicas.values())]
    assert of_replicas and all(r.endswith("eviction: 429") for r in of_replicas), removals

    relaxed_at = time.time()
    policy.patch_namespaced_pod_disruption_budget("infer", namespace, {"spec": {"minAvailable": 1}})
    wait_for("a replica on H100 once the budget allows one", lambda: kubelet.on(H100_NODE, "infer-"), seconds=30)
    assert metric(upgrader, 'gpu_class_upgrade_evictions_total\\{outcome="evicted"\\}') >= 1
    print(f"\n{len(of_replicas)} evictions refused (429) in the {refused_until - refused_from:.1f} s after the room "
          f"appeared, none evicted; with minAvailable 1, a replica on H100 {time.time() - relaxed_at:.1f} s later")


def test_a_group_moves_only_when_one_type_has_room_for_all_of_it(
        cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api,
        namespace: str, nodes: None, kubelet: FakeKubelet, upgrader: int) -> None:
    create_blockers(core, namespace, kubelet, ["blocker-0", "blocker-1"])  # H100: room for 2
    # the group's type is the webhook's choice, from its view: it must see the room the test made, no more
    wait_for("the webhook seeing room for 2 on H100", lambda: webhook_free_gpus(cluster, "H100") == 2, seconds=30)
    pod = pod_template("train", upgrade=True)
    pod["spec"]["restartPolicy"] = "Never"
    annotations = {**pod["metadata"]["annotations"], "gpu-class.io/group": "train", "gpu-class.io/group-size": "3"}
    kubernetes.client.BatchV1Api(api_client).create_namespaced_job(namespace, {
        "metadata": {"name": "train"},
        # an evicted Pod does not count as failed, so the Job replaces it at once rather than after its backoff
        "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                 "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                 "template": {"metadata": {"annotations": annotations}, "spec": pod["spec"]}}})
    wait_for("the group of 3 on A100", lambda: len(kubelet.on(A100_NODE, "train-")) == 3, seconds=60)
    wait_for("every Pod Ready", lambda: len(kubelet.ready) == 5, seconds=30)
    time.sleep(6 + SETTLE_SECONDS + 5)
    assert metric(upgrader, "gpu_class_upgrade_moves_total") == 0, "H100 has room for 2 of the 3"
    first = set(kubelet.on(A100_NODE, "train-"))

    room_at = time.time()
    core.delete_namespaced_pod("blocker-0", namespace, grace_period_seconds=0)
    # the Job controller replaces evicted Pods after its own delay (about 10 s for one Pod, more for several)
    wait_for("the group of 3 on H100", lambda: len(kubelet.on(H100_NODE, "train-")) == 3, seconds=SETTLE_SECONDS + 120)
    print(f"\nroom for the group to all 3 on H100: {time.time() - room_at:.1f} s")
    assert not kubelet.on(A100_NODE, "train-") and not first & set(kubelet.on(H100_NODE, "train-"))
    assert metric(upgrader, "gpu_class_upgrade_moves_total") == 1
    assert metric(upgrader, 'gpu_class_upgrade_evictions_total\\{outcome="evicted"\\}') == 3


def test_one_upgrader_leads_and_another_takes_over_when_it_stops(cluster: local_cluster.Cluster,
                                                               core: kubernetes.client.CoreV1Api) -> None:
    coordination = kubernetes.client.CoordinationV1Api(core.api_client)
    delete_if_present(coordination.delete_namespaced_lease, LEASE, local_cluster.WEBHOOK_NAMESPACE)
    with running_upgrader(cluster, "a") as (a, a_port), running_upgrader(cluster, "b") as (b, b_port):
        def leaders() -> tuple[float, float] | None:
            try:
                return metric(a_port, "gpu_class_upgrade_leader"), metric(b_port, "gpu_class_upgrade_leader")
            except OSError:  # not serving metrics yet
                return None
        first = wait_for("one of the two leading", lambda: (found := leaders()) is not None and sum(found) == 1
                         and found, seconds=60)
        time.sleep(5)
        assert leaders() == first, "the leader renews its Lease; the other never takes it"
        leader, (other, other_port) = (a, (b, b_port)) if first == (1, 0) else (b, (a, a_port))
        leader.kill()  # gone without a word: the Lease must run out
        stopped = time.time()
        wait_for("the other leading", lambda: metric(other_port, "gpu_class_upgrade_leader") == 1, seconds=30)
        took = time.time() - stopped
        lease = coordination.read_namespaced_lease(LEASE, local_cluster.WEBHOOK_NAMESPACE)
        assert lease.spec.lease_transitions == 1 and lease.spec.lease_duration_seconds == 15
        print(f"\ntaken over {took:.1f} s after the leader was killed (Lease of 15 s)")
        assert took <= 15 + 3
