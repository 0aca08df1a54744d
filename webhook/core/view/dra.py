"""GPUs published through Dynamic Resource Allocation: ResourceSlices, DeviceClasses and ResourceClaims
reduced to what the inventory needs, and merged into the nodes they are on. Pure.

gpu-class places a Pod on DRA nodes the way it does on device-plugin nodes: the Pod keeps its
extended resource limit (nvidia.com/gpu) and its node affinity carries the type. A DeviceClass
with `spec.extendedResourceName` (or the implicit `deviceclass.resource.kubernetes.io/<class>`)
lets kube-scheduler serve that limit from a node's DRA devices when the node's status.allocatable
has none of the resource (KEP-5004: dynamicresources' filterExtendedResources, NodeResourcesFit's
shouldDelegateResourceToDRA). So a node offers a type through DRA when

- its ResourceSlices (the newest generation of each pool) publish devices the catalog says are the
  type (catalog.types_of_device),
- some DeviceClass maps the type's resource, and
- its status.allocatable has none of that resource (else the device plugin serves it).

Devices are taken when a ResourceClaim's status.allocation holds them: the claims kube-scheduler
makes for extended resources and the Pods' own alike, as the scheduler counts them. A node whose
devices of one resource are of two types is not offered: the DeviceClass lets the scheduler hand a
Pod any of them, so its affinity could not choose the type (the node labeller leaves a node of mixed
models unlabelled for the same reason). Whatever is not offered is kept as a DeviceProblem with
the reason, for `gpuclass inventory` and the watch's log: nothing is dropped silently.

The objects as the inventory state keeps them, indexed by node, are dra_state.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..catalog.model import Catalog, GpuType, LabelType, parse_compute_capability
from ..catalog.matching import attribute_text, qualified_attribute
from ..catalog.quantity import quantity_mib

DeviceId = tuple[str, str, str]  # (driver, pool, device name), as a claim's allocation names a device
PoolId = tuple[str, str]  # (driver, pool name)
HOSTNAME_LABEL = "kubernetes.io/hostname"
IMPLICIT_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
# Device taints that keep a device from Pods: the scheduler's claim for an extended resource tolerates none.
# NVIDIA's DRA driver taints a device on an Xid error; PreferNoSchedule only weighs against a device.
BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Device:
    """One published device as the catalog sees it."""

    name: str
    type_name: str | None  # None: not one the catalog places on (see problem)
    product: str  # its productName, "" when it has none: what reports show
    memory_mib: float | None  # capacity `memory`; None when absent or 0 (AMD's "unreadable")
    problem: str = ""
    label_type: GpuType | None = None  # a product no type claims, made a type from its attributes
    taint: str = ""  # its NoSchedule/NoExecute taints ("key:effect, ..."): an unhealthy device, offered to no Pod


@dataclass(frozen=True)
class SliceInfo:
    """A ResourceSlice reduced: its pool, the node its devices are on, the devices."""

    name: str
    driver: str
    pool: str
    generation: int
    node: str | None  # None: devices not local to one node (allNodes, nodeSelector, per device)
    devices: tuple[Device, ...]

    @property
    def pool_id(self) -> PoolId:
        return (self.driver, self.pool)


@dataclass(frozen=True)
class DeviceClassInfo:
    name: str
    resources: tuple[str, ...]  # extended resources it serves: its extendedResourceName, and the implicit one
    # the driver a selector pins it to (`device.driver == "..."`); None: it may select any driver's devices
    pinned_driver: str | None = None


@dataclass(frozen=True)
class DeviceProblem:
    """Devices gpu-class does not place on, grouped by driver, product and reason."""

    driver: str
    product: str
    reason: str
    devices: int
    nodes: int


@dataclass(frozen=True)
class DraView:
    """What the published snapshot says about DRA."""

    off: str | None = None  # why DRA devices are not read (API not served, no RBAC); None: they are
    devices: int = 0  # devices on nodes, in the newest generation of their pools
    problems: tuple[DeviceProblem, ...] = ()
    claims_read: bool = True  # False: devices taken by claims are not known (counted from Pods instead)
    # DeviceClasses whose selectors pin them to a driver no GPU type names (a NIC's, a ComputeDomain
    # channel's): the only ones a tenant bounded to classes may claim devices of (core/published/boundary.py)
    other_device_classes: tuple[str, ...] = ()
    # every DeviceClass with the driver its selectors pin it to (None: none): why one is not among the others
    class_drivers: tuple[tuple[str, str | None], ...] = ()


class DraOffer(NamedTuple):
    """One type a node's DRA devices offer: its healthy devices, those of them claims hold, their memory,
    and its tainted devices (offered to no Pod)."""

    type_name: str
    resource: str
    devices: int
    taken: int
    memory_mib: float | None
    unhealthy: int = 0


@dataclass(frozen=True)
class NodeDevices:
    """What a node's DRA devices add to it: offers by type, devices taken per resource, and problems."""

    offers: tuple[DraOffer, ...] = ()
    problems: tuple[tuple[str, str, str], ...] = ()  # (driver, product, reason) per device


# --- reducing objects -------------------------------------------------------------------------


def _map(value: Any) -> Mapping[str, Any]:
    """A field the API makes an object; anything else (a hand-written file) reads as empty."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _device(raw: Any, driver: str, catalog: Catalog) -> Device | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        return None
    attributes = {qualified_attribute(driver, str(k)): v for k, v in _map(raw.get("attributes")).items()}
    product = attribute_text(attributes.get(qualified_attribute(driver, "productName"))) or ""
    memory = quantity_mib(_map(_map(raw.get("capacity")).get("memory")).get("value"))
    taint = device_taint(raw.get("taints"))
    found = catalog.types_of_device(driver, attributes)
    by_attributes = None if found.types else attribute_type(driver, attributes, memory, catalog)
    if by_attributes is not None and by_attributes.gpu_type is not None:
        return Device(raw["name"], by_attributes.gpu_type.name, product, memory, label_type=by_attributes.gpu_type,
                      taint=taint)
    problem = found.problem if by_attributes is None else f"{found.problem}; by its attributes: {by_attributes.problem}"
    return Device(raw["name"], found.types[0] if found.types else None, product, memory, problem, taint=taint)


def device_taint(raw: Any) -> str:
    """A device's `taints` (resource.k8s.io/v1 DeviceTaint: key, value, effect) that keep it from Pods, as
    `key:effect, ...`; "" for none. gpu-class gives Pods no toleration of them, so such a device is unhealthy."""
    blocking = [t for t in _list(raw) if isinstance(t, Mapping) and t.get("effect") in BLOCKING_TAINT_EFFECTS]
    return ", ".join(f"{t.get('key')}:{t.get('effect')}" for t in blocking)


NVIDIA_DRIVER = "gpu.nvidia.com"


def gpu_drivers(catalog: Catalog) -> tuple[str, ...]:
    """The DRA drivers whose devices may be GPUs of a type: those the catalog's types name, and NVIDIA's, whose
    whole GPUs of a product no type claims are made types by their attributes (attribute_type)."""
    return tuple(dict.fromkeys((*catalog.drivers, NVIDIA_DRIVER)))


def attribute_type(driver: str, attributes: Mapping[str, Any], memory_mib: float | None,
                   catalog: Catalog) -> LabelType | None:
    """A whole GPU of NVIDIA's DRA driver that no type claims, as its attributes make it (architecture,
    cudaComputeCapability, capacity memory: cmd/gpu-kubelet-plugin/deviceinfo.go), named as GPU Feature
    Discovery names its product (productName, spaces as dashes), so a node seen both ways is one type.
    None for other drivers and devices (a MIG device is a slice of a GPU the catalog must describe)."""
    def text(name: str) -> str:
        return attribute_text(attributes.get(qualified_attribute(driver, name))) or ""

    if driver != NVIDIA_DRIVER or text("type") != "gpu" or not text("productName"):
        return None
    capability = parse_compute_capability(text("cudaComputeCapability"))
    missing = [name for name, known in (("architecture", text("architecture")), ("cudaComputeCapability", capability),
                                        ("capacity memory", memory_mib)) if not known]
    if missing:
        return LabelType(None, f"too little information: no {', '.join(missing)}")
    return catalog.type_from_facts(text("productName").replace(" ", "-"), text("architecture"), capability, memory_mib)


def slice_from_object(obj: Mapping[str, Any], catalog: Catalog) -> SliceInfo | None:
    """Reduce a ResourceSlice; None for an object without a name or driver."""
    name = _map(obj.get("metadata")).get("name")
    spec = _map(obj.get("spec"))
    driver = spec.get("driver")
    if not isinstance(name, str) or not isinstance(driver, str):
        return None
    pool = _map(spec.get("pool"))
    try:
        generation = int(pool.get("generation") or 0)
    except (TypeError, ValueError):
        generation = 0
    node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) and spec.get("nodeName") else None
    devices = tuple(d for d in (_device(raw, driver, catalog) for raw in _list(spec.get("devices"))) if d is not None)
    if node is None:
        where = ("devices on several nodes (allNodes)" if spec.get("allNodes") else
                 "devices of nodes picked by a nodeSelector" if spec.get("nodeSelector") else
                 "a node per device (perDeviceNodeSelection)")
        devices = tuple(Device(d.name, None, d.product, d.memory_mib, f"not local to one node: {where}") for d in devices)
    return SliceInfo(name, driver, str(pool.get("name") or ""), generation, node, devices)


def claim_from_object(obj: Mapping[str, Any]) -> tuple[str, frozenset[DeviceId]]:
    """(namespace/name, the devices its allocation holds); none while it is not allocated."""
    metadata = _map(obj.get("metadata"))
    key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    results = _list(_map(_map(_map(obj.get("status")).get("allocation")).get("devices")).get("results"))
    return key, frozenset(
        (str(r["driver"]), str(r["pool"]), str(r["device"])) for r in results
        if isinstance(r, Mapping) and all(isinstance(r.get(k), str) for k in ("driver", "pool", "device")))


def extended_resource_claim(pod: Mapping[str, Any]) -> str | None:
    """namespace/name of the claim kube-scheduler made for the Pod's extended resources on DRA devices
    (status.extendedResourceClaimStatus, written before it binds the Pod); None when it has none."""
    name = _map(_map(pod.get("status")).get("extendedResourceClaimStatus")).get("resourceClaimName")
    namespace = _map(pod.get("metadata")).get("namespace")
    return f"{namespace}/{name}" if isinstance(name, str) and name and isinstance(namespace, str) else None


def device_class_from_object(obj: Mapping[str, Any]) -> DeviceClassInfo | None:
    name = _map(obj.get("metadata")).get("name")
    if not isinstance(name, str):
        return None
    explicit = _map(obj.get("spec")).get("extendedResourceName")
    resources = ((explicit,) if isinstance(explicit, str) and explicit else ()) + (IMPLICIT_RESOURCE_PREFIX + name,)
    expressions = [_map(_map(s).get("cel")).get("expression") for s in _list(_map(obj.get("spec")).get("selectors"))]
    pins = {pin for e in expressions if isinstance(e, str) for pin in driver_pins(e)}
    # selectors are ANDed: one pin is enough; two different ones select nothing, which is no GPU either
    return DeviceClassInfo(name, resources, pinned_driver=min(pins) if pins else None)


# `device.driver == "x"` (either quote, either side): the one selector form that rules a driver's devices out
DRIVER_PIN = re.compile(r"""device\.driver\s*==\s*(["'])([^"']+)\1|(["'])([^"']+)\3\s*==\s*device\.driver""")


RAW_OR_TRIPLE = re.compile(r"""(?<![\w.])[rR]["']|'''|\"\"\"""")  # a raw string's opening quote, or a triple quote


def driver_pins(expression: str) -> set[str]:
    """The drivers a CEL selector pins devices to: a DRIVER_PIN that is one of the terms the whole expression ANDs.

    CEL binds `&&` tighter than `||` and `?:`, so an expression with neither outside brackets and strings is the
    conjunction of its top-level `&&` terms, and a term that is the pin alone (or, in parentheses, such an
    expression again) holds for every device it selects. A pin anywhere else (`device.driver == 'nic' || true`,
    under a `!`, compared with `false`) rules nothing out, and is none; so is one beside an optional `.?`, a raw or
    a triple-quoted string (whose ends this reading does not follow)."""
    if RAW_OR_TRIPLE.search(expression):
        return set()
    terms, start = [], 0
    for i, depth in _outside_strings(expression):
        if depth:
            continue
        if expression.startswith("||", i) or expression[i] == "?":
            return set()
        if expression.startswith("&&", i) and i >= start:
            terms.append(expression[start:i])
            start = i + 2
    terms.append(expression[start:])
    found: set[str] = set()
    for term in (t.strip() for t in terms):
        if term.startswith("(") and term.endswith(")") and all(d for i, d in _outside_strings(term) if i):
            found |= driver_pins(term[1:-1])  # wrapped whole in one pair of parentheses
        elif (m := DRIVER_PIN.fullmatch(term)) is not None:
            found.add(m.group(2) or m.group(4))
    return found


def _outside_strings(expression: str) -> Iterator[tuple[int, int]]:
    """(index, bracket depth before it) of each character of a CEL expression that is not inside a string."""
    depth, quote, i = 0, "", 0
    while i < len(expression):
        c = expression[i]
        if quote:
            i += 2 if c == "\\" else 1
            quote = "" if c == quote else quote
            continue
        quote = c if c in "\"'" else ""
        yield i, depth
        depth += (c in "([{") - (c in ")]}")
        i += 1


# --- a node's devices -------------------------------------------------------------------------


def node_devices(devices: Iterable[tuple[DeviceId, Device]], is_taken: Callable[[DeviceId], bool],
                 mapped: frozenset[str], device_plugin: Mapping[str, int], catalog: Catalog) -> NodeDevices:
    """What one node's current devices offer, given the resources DeviceClasses map and those its
    device plugin already offers (status.allocatable), and which devices claims hold."""
    problems: list[tuple[str, str, str]] = []
    by_resource: dict[str, dict[str, list[tuple[DeviceId, Device]]]] = {}
    for device_id, device in devices:
        if device.type_name is None:
            problems.append((device_id[0], device.product, device.problem))
            continue
        resource = (device.label_type or catalog.types[device.type_name]).resource
        by_resource.setdefault(resource, {}).setdefault(device.type_name, []).append((device_id, device))
    offers = []
    for resource, by_type in by_resource.items():
        members = [(i, d) for found in by_type.values() for i, d in found]
        reason = ""
        if resource not in mapped:
            reason = (f"no DeviceClass maps {resource} (the resource of {', '.join(by_type)}): give the DeviceClass "
                      f"that selects these devices extendedResourceName: {resource}")
        elif device_plugin.get(resource, 0) > 0:
            reason = f"the node's device plugin offers {resource}: the scheduler serves it from there, not from DRA"
        elif len(by_type) > 1:
            reason = (f"the node has devices of types {', '.join(sorted(by_type))}, all served as {resource}: the "
                      "scheduler may give a Pod any of them, so no type can be promised there")
        if reason:
            problems.extend((i[0], d.product, reason) for i, d in members)
            continue
        (type_name, found), = by_type.items()
        known = [d.memory_mib for _, d in found if d.memory_mib is not None]
        # the smallest: a Pod may be given any device of the node
        memory = min(known) if len(known) == len(found) else None
        healthy = [i for i, d in found if not d.taint]
        offers.append(DraOffer(type_name, resource, len(healthy), sum(1 for i in healthy if is_taken(i)), memory,
                               len(found) - len(healthy)))
    return NodeDevices(tuple(offers), tuple(problems))


def group_problems(problems: Iterable[tuple[str, tuple[str, str, str]]]) -> tuple[DeviceProblem, ...]:
    """(node, (driver, product, reason)) per device, counted by driver, product and reason."""
    devices: dict[tuple[str, str, str], int] = {}
    nodes: dict[tuple[str, str, str], set[str]] = {}
    for node, key in problems:
        devices[key] = devices.get(key, 0) + 1
        nodes.setdefault(key, set()).add(node)
    return tuple(DeviceProblem(*key, devices=devices[key], nodes=len(nodes[key] - {""}))
                 for key in sorted(devices))
