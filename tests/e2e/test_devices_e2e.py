"""A MIG slice and an AMD GPU placed through the real API server, webhook and scheduler.

The nodes are this module's own (unique names, deleted afterwards): a mixed-strategy A100 40GB
whose status.allocatable offers nvidia.com/mig-3g.20gb, with GFD's labels for that strategy, and an
AMD Instinct MI300X node with the AMD labeller's labels (tests/fixtures/nodes, SOURCES.md) offering
amd.com/gpu. The scheduler binds only where the resource the webhook chose is allocatable, so a
wrong resource or a wrong affinity leaves the Pod Pending.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import kubernetes
import pytest

import local_cluster
from kubeobjects import TYPES, create_node, delete_nodes, fixture_labels, make_pod, read_pod, wait_bound

SUFFIX = uuid.uuid4().hex[:6]
MIG_NODE = f"e2e-devices-a100-mig-{SUFFIX}"
AMD_NODE = f"e2e-devices-mi300x-{SUFFIX}"
# GFD's labels on an A100 40GB under the mixed strategy (format of the mixed-strategy fixture, with
# the 40GB board's product and the per-profile count and memory labels GFD adds)
MIG_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.memory": "40960", "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig-3g.20gb.count": "2", "nvidia.com/mig-3g.20gb.memory": "19968",
}
AMD_TAINT = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def device_nodes(core: kubernetes.client.CoreV1Api) -> Iterator[None]:
    delete_nodes(core, [MIG_NODE, AMD_NODE])
    create_node(core, MIG_NODE, MIG_LABELS, gpus=2, resource="nvidia.com/mig-3g.20gb")
    create_node(core, AMD_NODE, fixture_labels("amd-instinct-mi300x-oam_labels.yaml"), gpus=8,
                resource="amd.com/gpu", taints=(AMD_TAINT,))
    yield
    delete_nodes(core, [MIG_NODE, AMD_NODE])


pytestmark = pytest.mark.usefixtures("device_nodes")


def _limits(pod: dict[str, object]) -> dict[str, str]:
    spec = pod["spec"]
    assert isinstance(spec, dict)
    return dict(spec["containers"][0]["resources"]["limits"])


@pytest.mark.parametrize("scheduler", [None, local_cluster.STRICT_SCHEDULER, local_cluster.EXTENDER_SCHEDULER],
                         ids=["default-scheduler", "strict-profiles", "with-extender"])
def test_a_mig_pod_lands_on_the_slice_its_node_offers(core: kubernetes.client.CoreV1Api, namespace: str,
                                                       scheduler: str | None) -> None:
    """No GPU limit written by the user: the class and the memory floor pick the 3g.20gb slice, and
    the webhook sets the limit on the profile's own resource."""
    name = "slice-" + (scheduler or "default")
    pod = make_pod(name, gpu_class="mig", gpus=None, scheduler=scheduler,
                   annotations={"gpu-class.io/min-memory": "19Gi"})
    core.create_namespaced_pod(namespace, pod)
    assert wait_bound(core, namespace, name) == MIG_NODE
    stored = read_pod(core, namespace, name)
    assert _limits(stored) == {"nvidia.com/mig-3g.20gb": "1"}
    assert stored["metadata"]["annotations"][TYPES] == "A100-40GB-3g.20gb"


def test_an_amd_pod_lands_on_the_instinct_node(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, make_pod("rocm", gpu_class="instinct", gpus=None))
    assert wait_bound(core, namespace, "rocm") == AMD_NODE
    stored = read_pod(core, namespace, "rocm")
    assert _limits(stored) == {"amd.com/gpu": "1"}
    assert stored["metadata"]["annotations"][TYPES] == "MI300X"
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in stored["spec"]["tolerations"]
