"""The GPU catalog as data: GPU types by their facts, classes of types, what a job needs of a type, and
the answers the decision asks of them (which types a node or a DRA device is, which resources a class
is requested as, a type for a GPU no type claims). Pure.

A type is requested as one extended resource (`resource`, default the catalog's gpuResource) and
is recognised on a node by its labels: `products` (values of the first productLabels key present)
or `match` (label key -> values); among the devices a Dynamic Resource Allocation (DRA) driver
publishes in ResourceSlices, by `match` entries that name the driver (driver -> attribute ->
values). How labels and attributes match is matching.py's; reading and validating the catalog YAML
into a Catalog is loading.py's.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from .matching import MIG_INVALID_SUFFIX, DeviceTypes, Recognition, is_glob
from .profiles import MIG_RESOURCE_PREFIX, PROFILE_SUFFIXES, STRICT_SCHEDULER, Strategy

OnUnsatisfiable = Literal["deny", "admit"]


class CatalogError(ValueError):
    """The catalog cannot be used; the message says where and what to fix."""


Match = tuple[tuple[str, tuple[str, ...]], ...]  # (label key, values) in the catalog's order
# (driver, ((qualified attribute, values), ...)): a device of the driver whose attributes all match
DeviceMatch = tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...]


# Tensor-core (matrix-core) precisions a type's facts may list, and a Pod's gpu-class.io/requires may ask for
PRECISIONS: tuple[str, ...] = ("fp4", "fp8", "fp16", "bf16", "tf32", "fp64")
ComputeCapability = tuple[int, int]
_COMPUTE_CAPABILITY_RE = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})(\.[0-9]{1,3})?")


def parse_compute_capability(text: Any) -> ComputeCapability | None:
    """`9.0` (GFD's major.minor, the catalog's) or `9.0.0` (the DRA driver's version) as (9, 0); None if neither."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    found = _COMPUTE_CAPABILITY_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def capability_text(capability: ComputeCapability) -> str:
    return f"{capability[0]}.{capability[1]}"


@dataclass(frozen=True)
class Facts:
    """What a type is, beyond its score: what requirements are checked against and `gpuclass catalog` shows."""

    architecture: str
    compute_capability: ComputeCapability | None = None  # CUDA's; None for other vendors
    precisions: frozenset[str] = frozenset()  # tensor-core precisions, of PRECISIONS
    memory_bandwidth_gbps: float | None = None
    interconnect: str = ""
    score_basis: str = ""
    from_labels: bool = False  # derived from a node's labels, not written in the catalog


@dataclass(frozen=True)
class GpuType:
    name: str
    score: float
    memory_gib: float | None
    products: tuple[str, ...]  # empty when the type gives `match`
    scalable: bool = False
    resource: str = "nvidia.com/gpu"
    match: Match = ()
    devices: DeviceMatch = ()  # DRA devices that are this type (from `match` entries naming a driver)
    facts: Facts | None = None  # None: the catalog says nothing of it, so it meets no requirement

    @property
    def exact_products(self) -> tuple[str, ...]:
        return tuple(p for p in self.products if not is_glob(p))

    @property
    def mig_profile(self) -> str | None:
        """The MIG profile of a mixed-strategy type (`3g.20gb` for nvidia.com/mig-3g.20gb), else None."""
        return self.resource[len(MIG_RESOURCE_PREFIX):] if self.resource.startswith(MIG_RESOURCE_PREFIX) else None

    def exact_values(self, product_labels: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(key, exact values): what the affinity names for a scalable pool with no live node."""
        if self.products:
            return ((product_labels[0], self.exact_products),)
        return tuple((k, tuple(v for v in vs if not is_glob(v))) for k, vs in self.match)


# GPU Feature Discovery's labels that say what an NVIDIA GPU is, whatever its product
FAMILY_LABEL = "nvidia.com/gpu.family"
COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR_LABEL = "nvidia.com/gpu.compute.minor"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB
# The compute capability that brought each tensor-core precision (CUDA C++ Programming Guide, "Warp
# matrix functions" and the architecture tuning guides): Volta FP16, Ampere BF16 and TF32, Ada and
# Hopper FP8, Blackwell FP4. FP64 tensor cores are on some x.0 data-centre parts only: never assumed.
PRECISIONS_SINCE: tuple[tuple[ComputeCapability, str], ...] = (
    ((7, 0), "fp16"), ((8, 0), "bf16"), ((8, 0), "tf32"), ((8, 9), "fp8"), ((10, 0), "fp4"))


@dataclass(frozen=True)
class LabelType:
    """What the catalog makes of a GPU node whose product no type claims: a type derived from its
    labels, or why it cannot be placed."""

    gpu_type: GpuType | None
    problem: str = ""


@dataclass(frozen=True)
class Need:
    """What a job needs of a GPU, whatever its name: a class's `requires`, or a Pod's narrowing of its class."""

    min_compute_capability: ComputeCapability | None = None
    precisions: frozenset[str] = frozenset()
    min_memory_gib: float | None = None
    architectures: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.min_compute_capability or self.precisions or self.min_memory_gib or self.architectures)

    def unmet(self, gpu_type: GpuType) -> str | None:
        """Why `gpu_type` does not meet the need, or None when it does. A type without facts meets none."""
        facts = gpu_type.facts
        if facts is None:
            return "the catalog gives no facts for it (architecture, compute capability, precisions)"
        if self.architectures and facts.architecture not in self.architectures:
            return f"architecture {facts.architecture}, not {' or '.join(sorted(self.architectures))}"
        wanted = self.min_compute_capability
        if wanted is not None:
            have = facts.compute_capability
            if have is None:
                return f"no CUDA compute capability ({facts.architecture}); needs {capability_text(wanted)}"
            if have < wanted:
                return f"compute capability {capability_text(have)}, needs {capability_text(wanted)} or above"
        missing = [p for p in PRECISIONS if p in self.precisions and p not in facts.precisions]
        if missing:
            return f"no {', '.join(missing)} tensor cores"
        if self.min_memory_gib is not None and (gpu_type.memory_gib or 0) < self.min_memory_gib:
            return f"{gpu_type.memory_gib or 'unknown'} GiB, needs {self.min_memory_gib:g} GiB"
        return None

    def describe(self) -> str:
        parts = []
        if self.architectures:
            parts.append(" or ".join(sorted(self.architectures)))
        if self.min_compute_capability is not None:
            parts.append(f"compute capability {capability_text(self.min_compute_capability)} or above")
        parts.extend(p for p in PRECISIONS if p in self.precisions)
        if self.min_memory_gib is not None:
            parts.append(f"at least {self.min_memory_gib:g} GiB")
        return ", ".join(parts)

    def narrowed(self, other: Need) -> Need:
        """Both needs at once: a Pod narrows its class's."""
        capabilities = [c for c in (self.min_compute_capability, other.min_compute_capability) if c is not None]
        memories = [m for m in (self.min_memory_gib, other.min_memory_gib) if m is not None]
        return Need(max(capabilities) if capabilities else None, self.precisions | other.precisions,
                    max(memories) if memories else None,
                    self.architectures & other.architectures if self.architectures and other.architectures
                    else self.architectures or other.architectures)


@dataclass(frozen=True)
class GpuClass:
    name: str
    types: tuple[str, ...]  # resolved type names, fastest first
    strategy: Strategy
    # a class defined by what its types can do: a node of a product no type claims joins it when
    # its labels show it meets the need (view/nodes.py); a class of names never takes one
    requires: Need | None = None
    upgrade: bool = False  # its Pods move up to a better type when one frees (upgrade.py); a Pod's annotation overrides
    max_wait: str | None = None  # how long its Pods wait for their best type (gpu-class.io/max-wait); None: not at all
    # groupTopology: the domain its groups are kept within unless a Pod says otherwise; None: none
    group_topology: GroupTopology | None = None


@dataclass(frozen=True)
class GroupTopology:
    """The domain a group is kept within: a node label key of the catalog's topologyLabels, and whether one value
    of it must hold the whole group (required) or the group is kept in as few as it can (preferred)."""

    key: str
    required: bool


@dataclass(frozen=True)
class Catalog:
    """A loaded catalog (loading.py makes one) and the answers the decision asks of it."""

    types: Mapping[str, GpuType]
    classes: Mapping[str, GpuClass]
    gpu_resource: str = "nvidia.com/gpu"
    product_labels: tuple[str, ...] = ("nvidia.com/gpu.product", "gpu-type")
    # node label keys whose values are domains a group may ask to be kept within (topologyLabels)
    topology_labels: tuple[str, ...] = ("nvidia.com/gpu.clique",)
    gpu_taint_keys: tuple[str, ...] = ("nvidia.com/gpu",)
    # (condition type, status) a node's health agent sets when its accelerators are unhealthy
    # (unhealthyConditions; view/health.py)
    unhealthy_conditions: tuple[tuple[str, str], ...] = (("AcceleratedHardwareReady", "False"),)
    on_unsatisfiable: OnUnsatisfiable = "deny"
    default_class: str | None = None
    scheduler_name: str | None = None
    strict_schedulers: tuple[str, ...] = (STRICT_SCHEDULER,)
    # of them, those that run the stock kube-scheduler binary (the install's choice, `serve --stock-scheduler`):
    # they keep the type order, not a Pod's wait (no NodeLabelIndex)
    stock_schedulers: tuple[str, ...] = ()
    # how nodes and DRA devices name the catalog's own types, indexed once at loading (loading.py);
    # with_label_types does not add the types it derives to it
    _recognition: Recognition = field(default_factory=Recognition, repr=False, compare=False)
    _label_types: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict, init=False, repr=False,
                                                                 compare=False)

    # Derived once: the planner asks on every admission. (cached_property writes the instance's
    # __dict__ directly, so it works on a frozen dataclass.)
    @functools.cached_property
    def resources(self) -> tuple[str, ...]:
        """Every resource a type is requested as, in the catalog's order."""
        return tuple(dict.fromkeys(t.resource for t in self.types.values()))

    @functools.cached_property
    def _class_resources(self) -> Mapping[str, tuple[str, ...]]:
        return {name: tuple(dict.fromkeys(self.types[t].resource for t in c.types)) for name, c in self.classes.items()}

    def class_resources(self, class_name: str) -> tuple[str, ...]:
        return self._class_resources[class_name]

    def strict_scheduler_of(self, scheduler_name: str) -> str | None:
        """The strict scheduler `scheduler_name` is one of the profiles of, or None."""
        for base in self.strict_schedulers:
            if scheduler_name in (base + suffix for suffix in PROFILE_SUFFIXES):
                return base
        return None

    def product_label(self, labels: Mapping[str, Any]) -> tuple[str, str] | None:
        """(key, value) of the first productLabels key present on a node."""
        for key in self.product_labels:
            value = labels.get(key)
            if isinstance(value, str) and value:
                return key, value
        return None

    def matches_of_labels(self, labels: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        """(type, label key, value) for every type a node's labels name, in the catalog's order (Recognition's)."""
        return self._recognition.matches_of_labels(labels, self.product_label(labels))

    def types_of_label(self, key: str, value: str) -> frozenset[str]:
        """The types a node labelled `key: value` is, by that label alone (memoised: a few values recur)."""
        found = self._label_types.get((key, value))
        if found is None:
            found = frozenset(t for t, _, _ in self.matches_of_labels({key: value}))
            if len(self._label_types) < 4096:  # values come from Pods: the memo must not grow without bound
                self._label_types[(key, value)] = found
        return found

    @property
    def drivers(self) -> tuple[str, ...]:
        """The DRA drivers some type names, in the catalog's order."""
        return tuple(self._recognition.device_matchers)

    def types_of_device(self, driver: str, attributes: Mapping[str, Any]) -> DeviceTypes:
        """The types a DRA device is, from its driver and attributes (keyed by qualified name), or why none."""
        return self._recognition.types_of_device(driver, attributes)

    def type_from_facts(self, product: str, family: str, capability: ComputeCapability | None,
                        memory_mib: float | None) -> LabelType:
        """A type for a GPU product no type claims, from what its node (or DRA device) says it is.

        Its score is the lowest of the catalog's types of the newest compute capability not above
        its own: never ahead of a GPU the catalog knows of its generation, and a newer generation
        than the catalog knows starts at the newest one's slowest. Its precisions are those its
        compute capability brought (PRECISIONS_SINCE). Too little to go on is the reason it stays out.
        """
        missing = [what for what, value in (("family", family), ("compute capability", capability),
                                            ("memory", memory_mib)) if not value]
        if missing:
            return LabelType(None, f"too little information: no {', '.join(missing)}")
        assert capability is not None and memory_mib is not None
        if "-MIG-" in product or product.endswith(MIG_INVALID_SUFFIX):
            return LabelType(None, "a MIG slice of a GPU no type claims; add the GPU and its profiles to the catalog")
        named = self.types.get(product)
        if named is not None and (named.facts is None or not named.facts.from_labels):
            return LabelType(None, f"its product is the name of type {product}, which does not claim it")
        known = [t for t in self.types.values() if t.resource == self.gpu_resource and t.facts is not None
                 and t.facts.compute_capability is not None and not t.facts.from_labels
                 and t.facts.compute_capability <= capability]
        if not known:
            return LabelType(None, f"no type of the catalog has compute capability {capability_text(capability)} "
                                   "or below to score it by")
        newest = max(t.facts.compute_capability for t in known if t.facts and t.facts.compute_capability)
        peers = [t for t in known if t.facts is not None and t.facts.compute_capability == newest]
        basis = min(peers, key=lambda t: (t.score, t.name))
        facts = Facts(
            architecture=family.replace("-", " ").title(),
            compute_capability=capability,
            precisions=frozenset(p for since, p in PRECISIONS_SINCE if capability >= since),
            score_basis=f"not in the catalog: the score of {basis.name}, the slowest type of compute capability "
                        f"{capability_text(newest)}",
            from_labels=True,
        )
        return LabelType(GpuType(product, basis.score, round(memory_mib / 1024, 1), (product,),
                                 resource=self.gpu_resource, facts=facts))

    def type_from_labels(self, labels: Mapping[str, Any]) -> LabelType:
        """type_from_facts for a node of GPU Feature Discovery's labels (no product label: no GPU node)."""
        product = self.product_label(labels)
        if product is None:
            return LabelType(None, "no product label")
        major, minor = labels.get(COMPUTE_MAJOR_LABEL), labels.get(COMPUTE_MINOR_LABEL)
        capability = parse_compute_capability(f"{major}.{minor}") if major is not None and minor is not None else None
        try:
            memory = float(str(labels.get(GPU_MEMORY_LABEL)))
        except ValueError:
            memory = 0.0
        family = labels.get(FAMILY_LABEL)
        found = self.type_from_facts(product[1], family if isinstance(family, str) else "", capability,
                                     memory if memory > 0 else None)
        if found.problem.startswith("too little information"):
            wanted = (FAMILY_LABEL, COMPUTE_MAJOR_LABEL, COMPUTE_MINOR_LABEL, GPU_MEMORY_LABEL)
            return LabelType(None, f"too little information: its labels lack "
                                   f"{', '.join(k for k in wanted if not labels.get(k))} or have them unreadable")
        return found

    def with_label_types(self, found: Sequence[GpuType]) -> Catalog:
        """The catalog with types derived from labels, each in the classes defined by requirements it meets
        (never a class of names: its administrator chose those types one by one)."""
        added = {t.name: t for t in found if t.name not in self.types}
        if not added:
            return self
        types = {**self.types, **added}
        classes = {name: c if c.requires is None else dataclasses.replace(c, types=fastest_first(
            [types[t] for t in c.types] + [t for t in added.values() if meets(t, c.requires, self.gpu_resource)]))
            for name, c in self.classes.items()}
        return dataclasses.replace(self, types=types, classes=classes)

    def type_of_product(self, product: str) -> str | None:
        """The type a product label value names, exactly or by glob, never by substring."""
        return self._recognition.type_of_product(product)


def meets(gpu_type: GpuType, need: Need, resource: str) -> bool:
    """Whether a type joins a class that requires `need`: it is requested as the catalog's resource (a
    CUDA Pod cannot use a MIG slice's or another vendor's) and meets the need."""
    return gpu_type.resource == resource and need.unmet(gpu_type) is None


def fastest_first(types: Sequence[GpuType]) -> tuple[str, ...]:
    """A class's order: fastest first; between equals, the catalog's own types before those made from
    labels (whose score is borrowed from one of them), then more memory first."""
    return tuple(t.name for t in sorted(types, key=lambda t: (
        -t.score, t.facts is not None and t.facts.from_labels, -(t.memory_gib or 0), t.name)))

