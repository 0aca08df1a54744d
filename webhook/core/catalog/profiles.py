"""The strategies a class orders its types by, and the strict scheduler's profile that scores each.

The names here are the install's: deploy/scheduler writes the same profiles, and the webhook routes a
Pod to one by name.
"""

from __future__ import annotations

from typing import Literal, Mapping, get_args

Strategy = Literal["performance", "cost", "balanced", "binpack"]

STRATEGIES: tuple[str, ...] = get_args(Strategy)

# The strict scheduler deploy/scheduler installs. A strict scheduler runs one profile per way of
# scoring: NAME orders by the Pod's preferred affinity (performance, cost), NAME-binpack and
# NAME-balanced score by the share of each node's GPUs in use. Each has a twin NAME...-slices for
# Pods that request MIG slices: NodeResourcesFit's score costs a few microseconds per node for every
# resource it lists, requested or not (kube-scheduler parses each name), and listing the fifteen
# slice resources beside whole GPUs tripled the time to score 5,000 nodes for every GPU Pod.
STRICT_SCHEDULER = "gpu-class-scheduler"
PROFILE_SUFFIX: Mapping[Strategy, str] = {"performance": "", "cost": "", "binpack": "-binpack", "balanced": "-balanced"}
SLICES_SUFFIX = "-slices"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def profile_suffix(strategy: Strategy, resource: str) -> str:
    """The suffix of the strict profile that scores a Pod of `strategy` requesting `resource`."""
    return PROFILE_SUFFIX[strategy] + (SLICES_SUFFIX if resource.startswith(MIG_RESOURCE_PREFIX) else "")


# Every strict profile's suffix: a strict scheduler runs a profile of each (computed once: the
# admission path asks on every Pod)
PROFILE_SUFFIXES: tuple[str, ...] = tuple(
    s + r for s in dict.fromkeys(PROFILE_SUFFIX.values()) for r in ("", SLICES_SUFFIX))
