"""GPU Pods as the view holds them: what a bound Pod holds on its node, the GPU Pods not yet bound, and the
marks the webhook writes on the Pods it places. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

from .affinity import Hosts, NodeTerm, keeps_within, no_hosts, required_terms, resource_sets
from ..catalog.model import Catalog
from ..catalog.wait import parse_wait
from .nodes import parse_gpu_count
from .own_constraints import NO_CONSTRAINTS, OwnConstraints, own_constraints

GROUP_LABEL = "gpu-class.io/group"  # written by the webhook on the Pods of a group (groups.py)
CLASS_ANNOTATION = "gpu-class.io/class"
TYPES_ANNOTATION = "gpu-class.io/types"  # written by the webhook on every Pod it places, best first
MAX_WAIT_ANNOTATION = "gpu-class.io/max-wait"  # how long gpu-class-scheduler keeps the Pod to its best type

GroupName = tuple[str, str]  # (namespace, gpu-class.io/group): Pods of one namespace share a group
Holding = tuple[str, Mapping[str, int]]  # (node, devices per resource) of one bound, unfinished Pod


@dataclass(frozen=True)
class UnboundGpuPod:
    """A GPU Pod the watch has seen that no node holds yet: not bound (no spec.nodeName), not finished.

    `resource` is the first of the catalog's resources the Pod requests and `devices` how many of it
    one node must offer (pod_gpus), as the scheduler extender reads the Pod. `types` is what the
    webhook allowed it (gpu-class.io/types, best first; empty: gpu-class did not place it). The
    annotation is anyone's to write, so InventoryState keeps it only where the Pod's required node
    affinity (`node_terms`, which the scheduler enforces) keeps the Pod to those types (enforced_types).
    """

    uid: str
    namespace: str
    name: str
    resource: str
    devices: int
    class_name: str | None
    types: tuple[str, ...] = ()
    created_seconds: float | None = None  # metadata.creationTimestamp, Unix time
    group: GroupName | None = None  # the gpu-class.io/group label the webhook wrote
    gated: bool = False  # spec.schedulingGates: held back (by a queue such as Kueue), not yet asking for a node
    max_wait_seconds: int | None = None  # gpu-class.io/max-wait: kept to its best type this long after creation
    node_terms: tuple[NodeTerm, ...] = ()  # its required node affinity's `In` expressions (affinity.required_terms)
    own: OwnConstraints = NO_CONSTRAINTS  # its own nodeSelector, affinity, tolerations (own_constraints.py)

    def waits_by_choice(self, now_seconds: float) -> bool:
        """Whether it is within its max-wait: kept to its best type by its own choice, not stuck."""
        return self.max_wait_seconds is not None and self.created_seconds is not None and (
            now_seconds < self.created_seconds + self.max_wait_seconds + 1)  # the scheduler's second of truncation

    @property
    def placed(self) -> bool:
        """gpu-class placed it: it carries the types the webhook wrote."""
        return bool(self.types)


TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_gpus(obj: Mapping[str, Any], resource: str, target: tuple[int, int] | None = None) -> int:
    """GPUs a Pod needs on one node: app containers add up; an init container runs alone.

    `target` (container index, GPUs) counts that app container as having those GPUs: the planner
    asks before its patch has given them.
    """
    spec = obj.get("spec") or {}

    def gpus(container: Any) -> int:
        resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
        value = (resources.get("limits") or {}).get(resource, (resources.get("requests") or {}).get(resource))
        return parse_gpu_count(value)

    app = sum(target[1] if target and i == target[0] else gpus(c) for i, c in enumerate(spec.get("containers") or []))
    init = max((gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(app, init)


def pod_group(obj: Mapping[str, Any]) -> GroupName | None:
    """The group a Pod was placed in: the label the webhook wrote, with the Pod's namespace."""
    metadata = obj.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(GROUP_LABEL)
    return (str(metadata.get("namespace") or ""), name) if isinstance(name, str) and name else None


def pod_gpu_requests(obj: Mapping[str, Any], resources: Iterable[str]) -> tuple[str | None, dict[str, int]]:
    """(node, devices per resource) a Pod holds: bound and not finished; only resources it holds."""
    node = (obj.get("spec") or {}).get("nodeName") or None
    if node is None or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None, {}
    held = {r: pod_gpus(obj, r) for r in resources}
    return str(node), {r: n for r, n in held.items() if n > 0}


def unbound_gpu_pod(obj: Mapping[str, Any], resources: Iterable[str]) -> UnboundGpuPod | None:
    """The Pod as a known unbound GPU Pod; None when it is bound, finished, has no uid or requests no GPU."""
    metadata = obj.get("metadata") or {}
    uid = metadata.get("uid")
    if (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    held = next(((r, n) for r in resources if (n := pod_gpus(obj, r)) > 0), None)
    if not isinstance(uid, str) or not uid or held is None:
        return None
    annotations = metadata.get("annotations") or {}
    class_name = annotations.get(CLASS_ANNOTATION)
    return UnboundGpuPod(uid=uid, namespace=str(metadata.get("namespace") or ""), name=str(metadata.get("name") or ""),
                         resource=held[0], devices=held[1],
                         class_name=class_name if isinstance(class_name, str) else None,
                         types=split_types(annotations.get(TYPES_ANNOTATION)),
                         created_seconds=timestamp_seconds(metadata.get("creationTimestamp")), group=pod_group(obj),
                         gated=bool((obj.get("spec") or {}).get("schedulingGates")),
                         max_wait_seconds=parse_wait(annotations.get(MAX_WAIT_ANNOTATION)),
                         node_terms=required_terms(obj), own=own_constraints(obj))


def enforced_types(types: tuple[str, ...], node_terms: Sequence[NodeTerm], resources: Sequence[str],
                   catalog: Catalog, hosts: Hosts = no_hosts) -> tuple[str, ...]:
    """The gpu-class.io/types a Pod lists, when its required node affinity keeps it to them for the GPU
    resources it holds; () when it does not (all or nothing: a part of the list would be an order the
    webhook never wrote).

    Anyone who creates a Pod can write the annotation, and a Pod the webhook leaves alone (its namespace
    not opted in, or created while the webhook was down) keeps what its author wrote. Readers that act on
    it for other Pods' sake (the upgrader reserving room, the extender counting GPUs, the pending metrics)
    must not take a string's word: the affinity is what the scheduler and kubelet enforce, and the webhook
    writes it beside the types on every Pod it places, so the list is believed exactly as far as it is true."""
    listed = frozenset(types)
    if types and keeps_within(node_terms, listed, resource_sets(resources, ()), catalog, hosts):
        return types
    return ()


def split_types(value: Any) -> tuple[str, ...]:
    """gpu-class.io/types as a tuple, best first, without blanks or repeats."""
    if not isinstance(value, str):
        return ()
    return tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))


def timestamp_seconds(value: Any) -> float | None:
    """An API timestamp ("2025-01-02T03:04:05Z") as Unix time; None when it is not one."""
    try:
        return datetime.fromisoformat(value).timestamp() if isinstance(value, str) and value.endswith("Z") else None
    except ValueError:
        return None
