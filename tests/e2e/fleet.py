"""The GPU nodes most end-to-end tests share: real GFD label sets, GPU counts chosen so counts tell them apart.

Tests that change nodes (cordon, delete, readiness) make nodes of their own instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from kubeobjects import fixture_labels

H100_LABELS = {
    # The GFD label format, as on H100 SXM nodes (no H100 node in the shared fixtures).
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.present": "true",
}


@dataclass(frozen=True)
class FleetNode:
    name: str
    gpu_type: str  # the built-in catalog's type for its product
    labels: Mapping[str, str]
    gpus: int
    zone: str
    taints: tuple[Mapping[str, str], ...] = field(default=({"key": "nvidia.com/gpu", "value": "present",
                                                            "effect": "NoSchedule"},))


FLEET = (
    FleetNode("e2e-h100-big", "H100", H100_LABELS, gpus=8, zone="zone-a"),
    FleetNode("e2e-h100-small", "H100", H100_LABELS, gpus=2, zone="zone-a"),
    FleetNode("e2e-a100", "A100-40GB", fixture_labels("a100-sxm4-40gb_gce_before-mig.yaml"), gpus=8, zone="zone-b"),
    FleetNode("e2e-t4", "T4", fixture_labels("tesla-t4_openshift_driver580.yaml"), gpus=4, zone="zone-b"),
    FleetNode("e2e-v100s", "V100", fixture_labels("v100s-pcie-32gb_vmware_openshift.yaml"), gpus=4, zone="zone-a",
              taints=()),
)
CPU_NODES = ("e2e-cpu-0",)
TYPE_OF = {n.name: n.gpu_type for n in FLEET}
