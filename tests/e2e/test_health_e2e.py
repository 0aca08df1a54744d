"""GPU health on the real control plane: class Pods never land on a node whose allocatable GPUs are below its
capacity, or that has an unhealthy condition, while healthy nodes of the type have room; nor once those are full.

Without the placement's exclusion the default scheduler would prefer the unhealthy nodes: they have the most GPUs
free, and its scoring spreads Pods to the least allocated node.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Iterator

import kubernetes
import pytest

import local_cluster
from fleet import H100_LABELS
from kubeobjects import (create_node, delete_nodes, make_pod, other_gpu_nodes_cordoned, read_pod, wait_bound, wait_for,
                        webhook_metrics)

SUFFIX = uuid.uuid4().hex[:6]
HEALTHY = (f"e2e-health-{SUFFIX}-ok-1", f"e2e-health-{SUFFIX}-ok-2")
BELOW_CAPACITY = f"e2e-health-{SUFFIX}-xid"  # 7 of its 8 GPUs allocatable
CONDITION = f"e2e-health-{SUFFIX}-condition"  # AcceleratedHardwareReady False
HEALTHY_GPUS = 2  # per healthy node


def unhealthy_h100(cluster: local_cluster.Cluster) -> float | None:
    found = re.search(r'^gpu_class_inventory_gpus\{(?=[^}]*type="H100")(?=[^}]*health="unhealthy")[^}]*\} (\S+)$',
                      webhook_metrics(cluster), re.M)
    return None if found is None else float(found.group(1))


@pytest.fixture
def nodes(core: kubernetes.client.CoreV1Api, cluster: local_cluster.Cluster) -> Iterator[None]:
    names = [*HEALTHY, BELOW_CAPACITY, CONDITION]
    with other_gpu_nodes_cordoned(core):
        delete_nodes(core, names)
        for name in HEALTHY:
            create_node(core, name, H100_LABELS, gpus=HEALTHY_GPUS)
        create_node(core, BELOW_CAPACITY, H100_LABELS, gpus=7)
        core.patch_node_status(BELOW_CAPACITY, {"status": {"capacity": {"nvidia.com/gpu": "8"}}})
        create_node(core, CONDITION, H100_LABELS, gpus=8)
        core.patch_node_status(CONDITION, {"status": {"conditions": [
            {"type": "AcceleratedHardwareReady", "status": "False", "reason": "XidError",
             "lastHeartbeatTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}})
        # both unhealthy nodes' 8 GPUs, as every worker sees them (the gauge is the most any worker sees)
        wait_for("the webhook to count 16 unhealthy H100 GPUs", lambda: unhealthy_h100(cluster) == 16)
        try:
            yield
        finally:
            delete_nodes(core, names)


def test_class_pods_stay_off_unhealthy_nodes(core: kubernetes.client.CoreV1Api, namespace: str,
                                             nodes: None) -> None:
    names = [f"p{i}" for i in range(len(HEALTHY) * HEALTHY_GPUS)]
    for name in names:
        core.create_namespaced_pod(namespace, make_pod(name, gpu_class="high"))
    bound = [wait_bound(core, namespace, name) for name in names]
    assert sorted(bound) == sorted(HEALTHY * HEALTHY_GPUS)

    # the healthy nodes are full: the next Pod waits rather than take an unhealthy node's GPUs
    core.create_namespaced_pod(namespace, make_pod("waits", gpu_class="high"))
    time.sleep(5)
    pod = read_pod(core, namespace, "waits")
    assert pod["spec"].get("nodeName") is None, pod["spec"].get("nodeName")
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert all({"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted([BELOW_CAPACITY, CONDITION])}
               in t["matchExpressions"] for t in terms["nodeSelectorTerms"])
