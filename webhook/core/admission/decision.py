"""What an admission decides: a Decision, and for a Pod gpu-class places, its Placement. Pure records.

Each step of the decision (planner.decide lists them) may end it with a Decision; patch.py turns a
Placement into a JSON Patch, review.py a Decision into an AdmissionReview's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..view.nodes import Taint
from .groups import GroupPlan

Outcome = Literal["out-of-scope", "refused", "patched", "admitted-unsatisfiable"]

MALFORMED = "gpu-class: malformed Pod: "  # the start of the refusal of a Pod without the shape the webhook reads


@dataclass(frozen=True)
class TypeVerdict:
    """Why one type of the class is or is not valid for the Pod (shown by `gpuclass explain`)."""

    type_name: str
    valid: bool
    reason: str
    max_allocatable: int = 0
    free_gpus: int = 0
    resource: str = ""
    max_memory_mib: float | None = None
    allocatable_gpus: int = 0  # over usable nodes: with free_gpus, the share balanced and binpack read


@dataclass(frozen=True)
class Preference:
    weight: int
    type_name: str
    label_key: str
    products: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    container_index: int
    container_name: str
    count: int
    set_limit: bool
    class_name: str
    types: tuple[str, ...]  # valid types, preferred first
    required: tuple[tuple[str, tuple[str, ...]], ...]  # (label key, product values) of all valid nodes
    preferences: tuple[Preference, ...]
    tolerations: tuple[Taint, ...]  # taints to tolerate; value and effect "" mean any
    scheduler_name: str | None = None
    record_class: bool = False  # the class came from a default: write it, so the extender sees the strategy
    resource: str = "nvidia.com/gpu"  # the extended resource the limit is set on
    group: GroupPlan | None = None  # gpu-class.io/group: the label and Pod affinity that keep it on one product
    max_wait: str | None = None  # gpu-class.io/max-wait as gpu-class-scheduler keeps it; None: the Pod does not wait
    drop_max_wait: bool = False  # the Pod wrote a wait no scheduler of its keeps: the annotation goes
    avoid_hosts: tuple[str, ...] = ()  # kubernetes.io/hostname of the nodes unhealthy for its types: kept off them


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    message: str = ""
    class_name: str | None = None
    placement: Placement | None = None
    warnings: tuple[str, ...] = ()
    verdicts: tuple[TypeVerdict, ...] = ()
    resource: str | None = None  # the resource chosen for the Pod
    resource_notes: tuple[tuple[str, str], ...] = ()  # (resource, why it was or was not chosen)
    group: GroupPlan | None = None  # for a Pod with gpu-class.io/group
    # left as it came because its own node affinity keeps it to its class (provenance.py): what it carries,
    # gpu-class.io/types included, is the decision it came with. Any other Pod answered without a placement
    # loses a gpu-class.io/types of its own (review.py)
    kept_as_decided: bool = False

    @property
    def allowed(self) -> bool:
        return self.outcome != "refused"
