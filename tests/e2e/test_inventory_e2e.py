"""The live inventory against a real watch: each change to the cluster reaches the next admission."""

from __future__ import annotations

import time
from typing import Callable

import kubernetes
import pytest

import local_cluster
from builders import record_decoded_lines
from kubeobjects import (
    TYPES, create_node, delete_nodes, dry_run_create, expired_restarts, make_pod, set_node_status, wait_for,
)
from webhook.cluster import watch
from webhook.core.catalog.loading import load_default_catalog

L4_LABELS = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034", "nvidia.com/gpu.count": "4"}
NODE = "e2e-live-l4"

# The fleet's T4 keeps the `inference` class satisfiable while the L4 node comes and goes.
pytestmark = pytest.mark.usefixtures("fleet")


def _l4_offered(core: kubernetes.client.CoreV1Api, namespace: str) -> Callable[[], bool]:
    """Whether an `inference` Pod admitted now may go to L4 (its dry run lists L4 among its types)."""
    def probe() -> bool:
        pod = dry_run_create(core, namespace, make_pod("probe", gpu_class="inference"))
        return "L4" in (pod["metadata"].get("annotations", {}).get(TYPES) or "").split(",")
    return probe


def _until(what: str, probe: Callable[[], bool], expected: bool, seconds: float = 30.0) -> float:
    """Seconds until the probe answers `expected`."""
    started = time.monotonic()
    wait_for(what, lambda: probe() == expected, seconds=seconds)
    return time.monotonic() - started


@pytest.fixture
def l4_node(core: kubernetes.client.CoreV1Api) -> object:
    delete_nodes(core, [NODE, NODE + "-2"])
    yield NODE
    delete_nodes(core, [NODE, NODE + "-2"])


def test_node_changes_reach_the_next_admission(core: kubernetes.client.CoreV1Api, namespace: str, l4_node: str) -> None:
    offered = _l4_offered(core, namespace)
    assert not offered()
    create_node(core, NODE, L4_LABELS, gpus=4)
    seen = {"new node": _until("a new L4 node to be offered", offered, True)}

    core.patch_node(NODE, {"spec": {"unschedulable": True}})
    seen["cordon"] = _until("a cordoned L4 node to be dropped", offered, False)
    core.patch_node(NODE, {"spec": {"unschedulable": False}})
    seen["uncordon"] = _until("an uncordoned L4 node to be offered", offered, True)

    set_node_status(core, NODE, ready=False)
    seen["not ready"] = _until("a NotReady L4 node to be dropped", offered, False)
    set_node_status(core, NODE, ready=True)
    seen["ready again"] = _until("a Ready-again L4 node to be offered", offered, True)

    core.delete_node(NODE)
    seen["deleted"] = _until("a deleted L4 node to be dropped", offered, False)
    print("seconds from node change to the first admission that saw it:",
          ", ".join(f"{k} {v:.2f}" for k, v in seen.items()))


def test_compaction_and_api_server_restart_force_a_relist(cluster: local_cluster.Cluster,
                                                          core: kubernetes.client.CoreV1Api, namespace: str,
                                                          l4_node: str) -> None:
    offered = _l4_offered(core, namespace)
    create_node(core, NODE, L4_LABELS, gpus=4)
    _until("the L4 node to be offered", offered, True)
    expired_before = expired_restarts(cluster, "nodes")

    # Changes made while the API server is away, then compacted out of etcd's history: a watch
    # that resumes from its last resourceVersion gets 410 Gone and must list again to see them.
    core.delete_node(NODE)
    cluster.compact_etcd()
    cluster.restart_apiserver()

    _until("the deleted L4 node to be dropped after the restart", offered, False, seconds=60)
    create_node(core, NODE + "-2", L4_LABELS, gpus=4)
    _until("a node created after the restart to be offered", offered, True, seconds=60)
    wait_for("a 410 relist of nodes in the webhook's metrics",
             lambda: expired_restarts(cluster, "nodes") > expired_before, seconds=30)


def test_the_pod_watch_skips_the_real_api_servers_cpu_pod_events_undecoded(
        core: kubernetes.client.CoreV1Api, plain_namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The raw-line check (webhook/core/view/pod_lines.py) knows the head the API server writes: a CPU Pod's events
    are skipped undecoded, a GPU Pod's are read and counted, and a held Pod's deletion forgets it."""
    decoded = record_decoded_lines(monkeypatch)
    inventory = watch.LiveInventory(load_default_catalog(), core).start()
    try:
        assert inventory.wait_until_synced(60)
        pods = next(r for r in inventory.reflectors if r.name == "pods")
        skipped_before = pods.skipped
        cpu = make_pod("cpu-web", gpus=None)
        cpu["spec"]["nodeName"] = "e2e-cpu-0"
        core.create_namespaced_pod(plain_namespace, cpu)
        core.patch_namespaced_pod("cpu-web", plain_namespace, {"metadata": {"labels": {"revision": "2"}}})
        core.delete_namespaced_pod("cpu-web", plain_namespace, grace_period_seconds=0)
        gpu = make_pod("gpu-train", gpus=2)
        gpu["spec"]["nodeName"] = "e2e-t4"
        core.create_namespaced_pod(plain_namespace, gpu)

        def in_use() -> int:
            return inventory.snapshot().requested.get(("e2e-t4", "nvidia.com/gpu"), 0)

        # events come in order: once the GPU Pod is counted, the CPU Pod's three events have been read
        wait_for("the GPU Pod counted", lambda: in_use() == 2)
        assert pods.skipped >= skipped_before + 3
        assert not [line for line in decoded if b'"cpu-web"' in line], "a CPU Pod's event was decoded"
        core.delete_namespaced_pod("gpu-train", plain_namespace, grace_period_seconds=0)
        wait_for("the deleted GPU Pod forgotten", lambda: in_use() == 0)
    finally:
        inventory.stop()
