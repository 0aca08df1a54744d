"""A group kept within one NVLink domain on the real control plane: GB200 NVL72 racks as GPU Feature Discovery
labels them (nvidia.com/gpu.clique), the Job controller's burst, gpu-class-scheduler.

Two racks of 18 nodes x 4 GPUs; rack 1 has 4 nodes taken, so only rack 2 holds a group of 16 Pods x 4 GPUs. Left to
the scheduler alone, a group spreads over both: each Pod's node is chosen for that Pod.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter
from typing import Any, Iterator

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

import local_cluster
from bench.groups.groups import GroupSpec, wait_settled
from kubeobjects import (create_node, delete_nodes, fixture_labels, make_namespace, make_pod, other_gpu_nodes_cordoned,
                         wait_for)

SUFFIX = uuid.uuid4().hex[:6]
CLIQUE = "nvidia.com/gpu.clique"
# GFD writes <ClusterUUID>.<CliqueId>: the NVLink domain's fabric cluster and its clique within it
RACKS = {f"9c1f4d1e-{SUFFIX}.1": 18, f"9c1f4d1e-{SUFFIX}.2": 18}
RACK_1, RACK_2 = RACKS
TAKEN_ON_RACK_1 = 4
GPUS = 4  # per node, and per Pod of a group
RUNS = 10
REQUIRED, PREFERRED = "gpu-class.io/group-required-topology", "gpu-class.io/group-preferred-topology"


def node_name(rack: str, i: int) -> str:
    return f"e2e-gb200-{rack.rsplit('.', 1)[1]}-{SUFFIX}-{i}"


# a GB200 compute tray's labels as published (tests/fixtures/SOURCES.md), each rack's clique in place of its own
TRAY_LABELS = fixture_labels("nvidia-gb200_oke-bm-gpu-gb200-4_clique_EXCERPT.yaml")
NODES = {node_name(rack, i): rack for rack, count in RACKS.items() for i in range(count)}


@pytest.fixture(scope="module")
def racks(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """The two racks, nothing else with room, and rack 1's first nodes taken by Pods of a namespace not opted in."""
    fill = make_namespace(core, "e2e-nvl-fill")
    with other_gpu_nodes_cordoned(core):
        for name, rack in NODES.items():
            create_node(core, name, {**TRAY_LABELS, CLIQUE: rack}, gpus=GPUS)
        for i in range(TAKEN_ON_RACK_1):
            take(core, fill, node_name(RACK_1, i))
        try:
            yield fill
        finally:
            delete_nodes(core, list(NODES))
            core.delete_namespace(fill)


def take(core: kubernetes.client.CoreV1Api, namespace: str, node: str) -> None:
    """Every GPU of `node` held by a Pod bound there directly (no webhook, no scheduler)."""
    pod = make_pod(f"take-{node}", gpus=GPUS)
    pod["spec"].update(nodeName=node, tolerations=[{"operator": "Exists"}])
    core.create_namespaced_pod(namespace, pod)


def job(name: str, pods: int, topology: tuple[str, str]) -> dict[str, Any]:
    annotations = {"gpu-class.io/class": "high", "gpu-class.io/group": name, "gpu-class.io/group-size": str(pods),
                   topology[0]: topology[1]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": annotations}, "spec": {
                         "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "schedulerName": local_cluster.STRICT_SCHEDULER,
                         "containers": [{"name": "main", "image": "registry.example/train:1",
                                         "resources": {"limits": {"nvidia.com/gpu": str(GPUS)},
                                                       "requests": {"cpu": "100m"}}}]}}}}


def job_pods(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> list[dict[str, Any]]:
    data = core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={name}",
                                    _preload_content=False).data
    return list(json.loads(data)["items"])


def racks_of(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter(NODES[p["spec"]["nodeName"]] for p in pods if p["spec"].get("nodeName"))


def run_job(api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str, name: str,
            pods: int, topology: tuple[str, str]) -> list[dict[str, Any]]:
    kubernetes.client.BatchV1Api(api_client).create_namespaced_job(namespace, job(name, pods, topology))
    return wait_settled(core, namespace, GroupSpec(name, pods, GPUS, sized=True, free_best=()))


def drop_job(api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str,
             name: str) -> None:
    kubernetes.client.BatchV1Api(api_client).delete_namespaced_job(name, namespace, propagation_policy="Background")
    selector = f"batch.kubernetes.io/job-name={name}"
    core.delete_collection_namespaced_pod(namespace, label_selector=selector, grace_period_seconds=0)
    wait_for(f"the Pods of {name} gone", lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items)


def test_a_group_of_16_lands_whole_in_the_rack_with_room(
        api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str, racks: str) -> None:
    for run in range(RUNS):
        name = f"nvl-{run}"
        pods = run_job(api_client, core, namespace, name, 16, (REQUIRED, CLIQUE))
        assert racks_of(pods) == {RACK_2: 16}, (run, racks_of(pods))
        drop_job(api_client, core, namespace, name)


def test_a_group_waits_whole_until_one_rack_holds_it(
        api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api, namespace: str, racks: str) -> None:
    """Rack 2 with 4 nodes taken too: neither rack holds 16, none of the group starts; once rack 2 frees, all of it
    starts there."""
    for i in range(TAKEN_ON_RACK_1):
        take(core, racks, node_name(RACK_2, i))
    pods = run_job(api_client, core, namespace, "nvl-wait", 16, (REQUIRED, CLIQUE))
    assert racks_of(pods) == {}
    messages = {c["message"] for p in pods for c in p["status"]["conditions"] if c["type"] == "PodScheduled"}
    assert any("waits for a nvidia.com/gpu.clique domain with room for all of it" in m for m in messages), messages
    for i in range(TAKEN_ON_RACK_1):
        core.delete_namespaced_pod(f"take-{node_name(RACK_2, i)}", racks, grace_period_seconds=0)

    def bound() -> Counter[str] | None:
        now = racks_of(job_pods(core, namespace, "nvl-wait"))
        return now if sum(now.values()) == 16 else None

    assert wait_for("the waiting group bound", bound, seconds=120) == {RACK_2: 16}
    drop_job(api_client, core, namespace, "nvl-wait")


def test_larger_than_any_rack_waits_when_required_and_spans_two_when_preferred(
        cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api,
        namespace: str, racks: str) -> None:
    """20 Pods x 4 GPUs: more than one rack's 18 nodes hold."""
    pods = run_job(api_client, core, namespace, "nvl-20", 20, (REQUIRED, CLIQUE))
    assert racks_of(pods) == {}
    messages = {c["message"] for p in pods for c in p["status"]["conditions"] if c["type"] == "PodScheduled"}
    assert messages and all("group nvl-20 of 20 Pods waits for a nvidia.com/gpu.clique domain with room for all of it"
                            in m for m in messages), messages
    drop_job(api_client, core, namespace, "nvl-20")

    pods = run_job(api_client, core, namespace, "nvl-wide", 20, (PREFERRED, CLIQUE))
    spread = racks_of(pods)
    assert sum(spread.values()) == 20 and len(spread) == 2, spread
    explained = subprocess.run([local_cluster.gpuclass_path(), "explain", f"pod/{pods[0]['metadata']['name']}",
                                "-n", namespace, f"--kubeconfig={cluster.kubeconfig}"],
                               capture_output=True, text=True, timeout=60)
    says = (f"group nvl-wide: kept in as few nvidia.com/gpu.clique domains as the scheduler can (preferred); "
            f"runs in 2: {RACK_1} x {spread[RACK_1]}, {RACK_2} x {spread[RACK_2]}")
    assert says in explained.stdout, explained
    drop_job(api_client, core, namespace, "nvl-wide")
