"""Karpenter's NodePools as inventory: GPU nodes that can appear. Pure.

A NodePool (karpenter.sh/v1) whose template fixes a catalog type's node label, by
`spec.template.metadata.labels` or an `In` requirement of `spec.template.spec.requirements`, is a
pool of that type: Karpenter creates its nodes for Pods the scheduler marked Unschedulable. So the
type stays valid at zero nodes, the affinity names exactly the values the pool's nodes will carry,
and the tolerations are the pool's GPU taints; a pool with other taints (kept for a team) is offered
only to Pods that tolerate those themselves. A pool whose `spec.limits` leave fewer devices
of the type's resource than a node of it carries, or than a Pod needs (`status.resources` counts what
its nodes already hold), or whose `nodes` limit is used up, is not offered: Karpenter would not grow
it, and the next type's pool must. What one node carries is read, where the pool says it, from a
requirement on the provider's GPU-count label, else from `status.resources` of a pool of one instance
type (its nodes are alike); a pool that says neither is taken to make nodes just big enough.

Karpenter makes the heaviest preferred node-affinity term a requirement and relaxes one term at a
time when it cannot (karpenter pkg/controllers/provisioning/scheduling/preferences.go), so the
class's preference weights are also the order in which pools grow.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from ..catalog.model import Catalog
from .nodes import Taint, parse_gpu_count, split_taints

NODEPOOL_API = "karpenter.sh/v1"
# The providers' well-known labels for an instance's GPU count (AWS, Azure): a pool's requirement
# on one is the devices its nodes can carry, as Karpenter matches instance types against it.
GPU_COUNT_LABELS = ("karpenter.k8s.aws/instance-gpu-count", "karpenter.azure.com/sku-gpu-count")
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NODES = "nodes"  # Karpenter's limit on how many nodes a pool has (karpenter pkg/utils/resources.Node)


@dataclass(frozen=True)
class NodeDevices:
    """The devices of a pool's resource one node it creates can carry, as far as the pool says
    (_node_devices): at least `least`, at most `most`, and one of `only` when the pool lists them."""

    least: int = 0
    most: int | None = None  # None: no bound known
    only: frozenset[int] | None = None


@dataclass(frozen=True)
class Pool:
    """One type an autoscaler's node pool can create nodes of (pools_from_object reads Karpenter's NodePools)."""

    name: str  # the NodePool's
    type_name: str
    label_key: str
    values: tuple[str, ...]  # what the pool's nodes carry under label_key, all naming type_name
    taints: tuple[Taint, ...]  # the catalog's GPU taints its nodes carry: what gpu-class tolerates
    resource: str  # the type's
    left: int | None  # devices of `resource` its limits leave; None: no limit on it
    weight: int = 0
    node_devices: NodeDevices = NodeDevices()  # unknown: any size
    nodes_left: int | None = None  # nodes its limits leave; None: no limit on nodes
    reserved: tuple[Taint, ...] = ()  # its other taints: offered only to Pods that tolerate them

    def holds(self, gpus: int) -> bool:
        """Whether the pool can create a node that takes `gpus` devices within its limits.

        Karpenter launches only instance types whose whole capacity fits what the pool's limits
        leave, and none once its `nodes` limit is used up (karpenter pkg/controllers/provisioning/
        scheduling/scheduler.go, filterByRemainingResources): a pool with 4 GPUs left whose nodes
        carry 8 creates no node, even for a Pod of 4. Where the pool does not say what its nodes
        carry, the smallest node that takes the Pod is assumed."""
        if self.nodes_left is not None and self.nodes_left <= 0:
            return False
        low = max(gpus, self.node_devices.least)
        bounds = [b for b in (self.left, self.node_devices.most) if b is not None]
        high = min(bounds) if bounds else None
        if self.node_devices.only is not None:
            return any(low <= n and (high is None or n <= high) for n in self.node_devices.only)
        return high is None or low <= high

    def limited(self) -> str:
        """What the pool's limits leave, and what its nodes carry where known: why it may not grow."""
        if self.nodes_left is not None and self.nodes_left <= 0:
            return "its nodes limit used up"
        left = "no limit" if self.left is None else f"{self.left} {self.resource} left"
        d = self.node_devices
        if d.only is not None:
            return f"{left}, its nodes carry {' or '.join(map(str, sorted(d.only))) or 'none'}"
        if d.least == d.most:
            return f"{left}, its nodes carry {d.least}"
        if d.least or d.most is not None:
            return f"{left}, its nodes carry {d.least} to {'any' if d.most is None else d.most}"
        return left


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _labels_named(template: Mapping[str, Any], label_keys: tuple[str, ...]) -> list[tuple[str, str]]:
    """(key, value) of each label of `label_keys` the pool's nodes are sure to carry: the template's
    labels, else the values of an `In` requirement on the key (Karpenter picks one of them)."""
    labels = _object(_object(template.get("metadata")).get("labels"))
    fixed = [(k, v) for k, v in labels.items() if k in label_keys and isinstance(v, str)]
    requirements = _object(template.get("spec")).get("requirements")
    for r in requirements if isinstance(requirements, list) else []:
        if (isinstance(r, dict) and r.get("operator") == "In" and r.get("key") in label_keys
                and r["key"] not in labels):
            fixed += [(r["key"], v) for v in r.get("values") or [] if isinstance(v, str)]
    return fixed


def _requirements(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    requirements = _object(template.get("spec")).get("requirements")
    return [r for r in requirements if isinstance(r, dict)] if isinstance(requirements, list) else []


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values if isinstance(v, str) and v.strip().isdigit()] if isinstance(values, list) else []


def _node_devices(template: Mapping[str, Any], used: Mapping[str, Any], resource: str) -> NodeDevices:
    """What one node of the pool carries of `resource`: from a GPU-count requirement (Gt and Lt are
    strict, Gte and Lte not, as Karpenter reads them: pkg/scheduling/requirement.go), else from the
    pool's status when one instance type makes all its nodes, else unknown."""
    least, most, only = 0, None, None
    counted = False
    for r in _requirements(template):
        if r.get("key") not in GPU_COUNT_LABELS:
            continue
        counted, values, operator = True, _ints(r.get("values")), r.get("operator")
        if operator == "In":
            only = set(values) if only is None else only & set(values)
        elif values and operator in ("Gt", "Gte"):
            least = max(least, values[0] + (operator == "Gt"))
        elif values and operator in ("Lt", "Lte"):
            bound = values[0] - (operator == "Lt")
            most = bound if most is None else min(most, bound)
    if counted:
        return NodeDevices(least, most, None if only is None else frozenset(only))
    instance_types = {v for r in _requirements(template) if r.get("key") == INSTANCE_TYPE_LABEL
                      and r.get("operator") == "In" for v in r.get("values") or []}
    nodes = parse_gpu_count(used.get(NODES, "0"))
    if len(instance_types) == 1 and nodes:
        each = parse_gpu_count(used.get(resource, "0")) // nodes
        return NodeDevices(each, each)
    return NodeDevices()


def pools_from_object(obj: Mapping[str, Any], catalog: Catalog) -> tuple[Pool, ...]:
    """The types a NodePool can create nodes of; () when it names none of the catalog's."""
    spec = _object(obj.get("spec"))
    template = _object(spec.get("template"))
    label_keys = tuple(dict.fromkeys((*catalog.product_labels,
                                      *(k for t in catalog.types.values() for k, _ in t.match))))
    limits = _object(spec.get("limits"))
    used = _object(_object(obj.get("status")).get("resources"))
    taints, reserved = split_taints(_object(template.get("spec")).get("taints"), catalog.gpu_taint_keys)
    limited_gpus = [r for r in catalog.resources if r in limits]
    values: dict[tuple[str, str], list[str]] = {}
    for key, value in _labels_named(template, label_keys):
        for type_name, match_key, _ in catalog.matches_of_labels({key: value}):
            gpu_type = catalog.types[type_name]
            # a pool's nodes offer the resource its limits name; without one, whole GPUs (a MIG
            # profile's resource exists only on nodes partitioned for it)
            if gpu_type.resource in limited_gpus or (not limited_gpus and gpu_type.mig_profile is None):
                values.setdefault((type_name, match_key), []).append(value)
    weight = spec.get("weight")
    name = str(_object(obj.get("metadata")).get("name") or "")
    nodes_left = None
    if NODES in limits:
        nodes_left = parse_gpu_count(limits[NODES]) - parse_gpu_count(used.get(NODES, "0"))
    pools = []
    for (type_name, key), named in values.items():
        resource = catalog.types[type_name].resource
        left = None
        if resource in limits:
            left = max(parse_gpu_count(limits[resource]) - parse_gpu_count(used.get(resource, "0")), 0)
        pools.append(Pool(name, type_name, key, tuple(dict.fromkeys(named)), taints, resource, left,
                          weight if isinstance(weight, int) else 0, _node_devices(template, used, resource),
                          nodes_left, reserved))
    return tuple(pools)


def pools_by_type(node_pools: Mapping[str, tuple[Pool, ...]]) -> Mapping[str, tuple[Pool, ...]]:
    """Each type's pools, the heaviest NodePool first (Karpenter's own choice among pools), then by name."""
    by_type: dict[str, list[Pool]] = {}
    for found in node_pools.values():
        for pool in found:
            by_type.setdefault(pool.type_name, []).append(pool)
    return MappingProxyType({t: tuple(sorted(p, key=lambda p: (-p.weight, p.name))) for t, p in by_type.items()})
