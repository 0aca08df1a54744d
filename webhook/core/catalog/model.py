"""The GPU catalog: GPU types, classes of types, and how node labels map to types.

A type is requested as one extended resource (`resource`, default the catalog's gpuResource) and
is recognised on a node by its labels: `products` (values of the first productLabels key present)
or `match` (label key -> values); among the devices a Dynamic Resource Allocation (DRA) driver
publishes in ResourceSlices, by `match` entries that name the driver (driver -> attribute ->
values). Pure: parsing and validation of the catalog YAML, no I/O beyond reading the text handed
in. A bad catalog raises CatalogError naming the file and line, so a misconfiguration fails at start.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, Mapping, Sequence, cast, get_args

import yaml

Strategy = Literal["performance", "cost", "balanced", "binpack"]
OnUnsatisfiable = Literal["deny", "admit"]

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
GLOB_CHARS = frozenset("*?[")
# the device plugin's mark for a GPU whose MIG layout it cannot use: never a type, whatever matches it
MIG_INVALID_SUFFIX = "-MIG-INVALID"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def profile_suffix(strategy: Strategy, resource: str) -> str:
    """The suffix of the strict profile that scores a Pod of `strategy` requesting `resource`."""
    return PROFILE_SUFFIX[strategy] + (SLICES_SUFFIX if resource.startswith(MIG_RESOURCE_PREFIX) else "")


# Every strict profile's suffix: a strict scheduler runs a profile of each (computed once: the
# admission path asks on every Pod)
PROFILE_SUFFIXES: tuple[str, ...] = tuple(
    s + r for s in dict.fromkeys(PROFILE_SUFFIX.values()) for r in ("", SLICES_SUFFIX))


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_KEY_RE = re.compile(rf"(({_DNS_LABEL})(\.{_DNS_LABEL})*/)?{_NAME}")
RESOURCE_RE = re.compile(rf"({_DNS_LABEL})(\.{_DNS_LABEL})*/{_NAME}")
LABEL_VALUE_RE = re.compile(_NAME)


class CatalogError(ValueError):
    """The catalog cannot be used; the message says where and what to fix."""


Match = tuple[tuple[str, tuple[str, ...]], ...]  # (label key, values) in the catalog's order
# (driver, ((qualified attribute, values), ...)): a device of the driver whose attributes all match
DeviceMatch = tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...]

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DRA_ATTRIBUTE_VALUE_MAX_CHARS = 64  # resource.k8s.io/v1: a string attribute's longest value


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


@dataclass(frozen=True)
class _Matcher:
    """One key's values of a type, ready for a node: exact values in a set, globs as one regex."""

    key: str | None  # None: the first productLabels key present on the node
    exact: frozenset[str]
    globs: re.Pattern[str] | None

    def matches(self, value: str) -> bool:
        return value in self.exact or (self.globs is not None and self.globs.fullmatch(value) is not None)


@dataclass(frozen=True)
class _DeviceMatcher:
    """One type's attributes of one driver: a device of the driver is the type when every one matches."""

    type_name: str
    attributes: tuple[tuple[str, _Matcher], ...]  # (qualified attribute name, its values)


@dataclass(frozen=True)
class DeviceTypes:
    """What the catalog makes of a DRA device: the types it is (one, when all is well), or why none."""

    types: tuple[str, ...]
    problem: str = ""  # set when types is empty


def attribute_text(value: Any) -> str | None:
    """A DRA attribute's text: its `string` (or `version`) value; None for ints, bools and lists."""
    if isinstance(value, Mapping):
        for kind in ("string", "version"):
            text = value.get(kind)
            if isinstance(text, str):
                return text
    return None


def attribute_kind(value: Any) -> str:
    """The kind of a DRA attribute as the API writes it (`int`, `bool`, `strings`, ...), for messages."""
    if isinstance(value, Mapping) and len(value) == 1:
        return str(next(iter(value)))
    return "malformed"


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


def qualified_attribute(driver: str, name: str) -> str:
    """resource.k8s.io: an attribute name without a domain belongs to the driver's own domain."""
    return name if "/" in name else f"{driver}/{name}"


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
    # its labels show it meets the need (inventory.py); a class of names never takes one
    requires: Need | None = None
    upgrade: bool = False  # its Pods move up to a better type when one frees (upgrade.py); a Pod's annotation overrides
    max_wait: str | None = None  # how long its Pods wait for their best type (gpu-class.io/max-wait); None: not at all


@dataclass(frozen=True)
class Catalog:
    types: Mapping[str, GpuType]
    classes: Mapping[str, GpuClass]
    gpu_resource: str = "nvidia.com/gpu"
    product_labels: tuple[str, ...] = ("nvidia.com/gpu.product", "gpu-type")
    gpu_taint_keys: tuple[str, ...] = ("nvidia.com/gpu",)
    on_unsatisfiable: OnUnsatisfiable = "deny"
    default_class: str | None = None
    scheduler_name: str | None = None
    strict_schedulers: tuple[str, ...] = (STRICT_SCHEDULER,)
    # of them, those that run the stock kube-scheduler binary (the install's choice, `serve --stock-scheduler`):
    # they keep the type order, not a Pod's wait (no NodeLabelIndex)
    stock_schedulers: tuple[str, ...] = ()
    _exact: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    _globs: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    _matchers: Mapping[str, tuple[_Matcher, ...]] = field(default_factory=dict, repr=False, compare=False)
    _device_matchers: Mapping[str, tuple[_DeviceMatcher, ...]] = field(default_factory=dict, repr=False,
                                                                        compare=False)  # by driver
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
        """(type, label key, value) for every type a node's labels name, in the catalog's order.

        A type given by `products` reads only the first productLabels key present, as it always
        has; a type given by `match` is named when any of its keys matches. Values ending in
        -MIG-INVALID name no type.
        """
        product = self.product_label(labels)
        found: list[tuple[str, str, str]] = []
        for type_name, matchers in self._matchers.items():
            for m in matchers:
                if m.key is None:
                    if product is None:
                        continue
                    key, value = product
                else:
                    key, raw = m.key, labels.get(m.key)
                    if not isinstance(raw, str) or not raw:
                        continue
                    value = raw
                if not value.endswith(MIG_INVALID_SUFFIX) and m.matches(value):
                    found.append((type_name, key, value))
                    break
        return found

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
        return tuple(self._device_matchers)

    def types_of_device(self, driver: str, attributes: Mapping[str, Any]) -> DeviceTypes:
        """The types a DRA device is, from its driver and attributes (keyed by qualified name).

        Attributes are compared as text (`string` and `version` values), exactly or by glob, never
        by substring. No type, or more than one, comes with the reason, for the inventory to report.
        """
        matchers = self._device_matchers.get(driver)
        if matchers is None:
            return DeviceTypes((), f"no type of the catalog names driver {driver}")
        found = tuple(m.type_name for m in matchers
                      if all((text := attribute_text(attributes.get(name))) is not None and v.matches(text)
                             for name, v in m.attributes))
        if len(found) == 1:
            return DeviceTypes(found)
        if found:
            return DeviceTypes((), f"matches types {', '.join(found)}: the catalog cannot tell them apart")
        read = dict.fromkeys(name for m in matchers for name, _ in m.attributes)
        wrong = [f"{_short_attribute(driver, n)} is {attribute_kind(attributes[n])}" for n in read
                 if n in attributes and attribute_text(attributes[n]) is None]
        if wrong:
            return DeviceTypes((), f"attribute {', '.join(wrong)}; the catalog matches text (string)")
        shown = [f"{_short_attribute(driver, n)}={attribute_text(attributes[n])!r}" for n in read if n in attributes]
        return DeviceTypes((), f"no type of the catalog matches {', '.join(shown) or 'a device without its attributes'}")

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
        """The type a product label value names: exact match first, then the catalog's globs in order.

        Never a substring match: `NVIDIA-A10` is not `NVIDIA-A100`.
        """
        found = self._exact.get(product)
        if found is not None:
            return found
        for pattern, type_name in self._globs:
            if fnmatch.fnmatchcase(product, pattern):
                return type_name
        return None


def _short_attribute(driver: str, qualified: str) -> str:
    return qualified.removeprefix(driver + "/")


def is_glob(product: str) -> bool:
    return not GLOB_CHARS.isdisjoint(product)


TOP_KEYS = frozenset(
    {"gpuResource", "productLabels", "gpuTaintKeys", "onUnsatisfiable", "defaultClass", "schedulerName",
     "strictSchedulers", "types", "classes"}
)
FACT_KEYS = frozenset({"architecture", "computeCapability", "precisions", "memoryBandwidthGBps", "interconnect",
                       "scoreBasis"})
TYPE_KEYS = frozenset({"name", "score", "memoryGiB", "products", "match", "resource", "scalable"}) | FACT_KEYS
CLASS_KEYS = frozenset({"name", "types", "minScore", "maxScore", "minMemoryGiB", "strategy", "requires", "upgrade",
                        "maxWait"})
MAX_WAIT_SECONDS = 24 * 3600  # the longest wait: a scheduler keeps a timer per waiting Pod until its end
# digits bounded: int() of a few thousand digits raises, and 24h is 86400s
_WAIT = re.compile(r"(?=\d)(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?")


def parse_wait(raw: Any) -> int | None:
    """Seconds of a wait written as users write durations (90s, 10m, 2h, 1h30m), 1 s to 24 h; None otherwise.
    Every such form reads the same in Go's time.ParseDuration, which gpu-class-scheduler uses."""
    found = _WAIT.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if found is None:
        return None
    hours, minutes, seconds = (int(g or 0) for g in found.groups())
    total = hours * 3600 + minutes * 60 + seconds
    return total if 0 < total <= MAX_WAIT_SECONDS else None


WAIT_FORMS = "a duration of 1s to 24h, like \"90s\", \"10m\", \"2h\" or \"1h30m\""
REQUIRES_KEYS = frozenset({"minComputeCapability", "precisions", "minMemoryGiB", "architectures"})

Path = tuple[str | int, ...]


class _Located:
    """Finds the line of a path in the YAML text so errors can point at it."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        try:
            self.root: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:
            self.root = None

    def line_of(self, path: Path) -> int | None:
        node = self.root
        line = None if node is None else node.start_mark.line + 1
        for step in path:
            if isinstance(node, yaml.MappingNode):
                matched = [v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == step]
                node = matched[0] if matched else None
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                node = node.value[step]
            else:
                node = None
            if node is None:
                break
            line = node.start_mark.line + 1
        return line

    def error(self, path: Path, message: str) -> CatalogError:
        line = self.line_of(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        dotted = ".".join(str(p) for p in path)
        return CatalogError(f"{where}: {dotted + ': ' if dotted else ''}{message}")


def load_catalog_text(text: str, source: str = "catalog") -> Catalog:
    """Parse and validate a catalog YAML document."""
    loc = _Located(text, source)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise loc.error((), "the catalog must be a mapping with 'types' and 'classes'")
    return _build(data, loc)


def load_catalog_file(path: str) -> Catalog:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise CatalogError(f"cannot read catalog {path}: {exc.strerror}") from None
    return load_catalog_text(text, path)


def default_catalog_text() -> str:
    return resources.files(__package__ or "webhook.core.catalog").joinpath("catalog.yaml").read_text(encoding="utf-8")


def load_default_catalog() -> Catalog:
    return load_catalog_text(default_catalog_text(), "built-in catalog")


def _check_keys(loc: _Located, path: Path, obj: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for key in obj:
        if key not in allowed:
            raise loc.error(path + (str(key),), f"unknown key {key!r}; known keys: {', '.join(sorted(allowed))}")


def _str(loc: _Located, path: Path, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise loc.error(path, f"must be a non-empty string, not {value!r}")
    return value


def _str_list(loc: _Located, path: Path, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise loc.error(path, "must be a non-empty list of strings")
    return tuple(_str(loc, path + (i,), v) for i, v in enumerate(value))


def _number(loc: _Located, path: Path, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise loc.error(path, f"must be a non-negative number, not {value!r}")
    return float(value)


def _build(data: Mapping[str, Any], loc: _Located) -> Catalog:
    _check_keys(loc, (), data, TOP_KEYS)
    gpu_resource = _resource(loc, ("gpuResource",), data.get("gpuResource", "nvidia.com/gpu"))
    product_labels = _str_list(loc, ("productLabels",), data.get("productLabels", ["nvidia.com/gpu.product", "gpu-type"]))
    for i, key in enumerate(product_labels):
        _label_key(loc, ("productLabels", i), key)
    types = _build_types(data.get("types"), gpu_resource, loc)
    exact, globs = _product_index(types)
    _check_claims(types, product_labels, loc)
    _check_device_claims(types, loc)
    classes = _build_classes(data.get("classes"), types, gpu_resource, loc)

    default_class = data.get("defaultClass")
    if default_class is not None and default_class not in classes:
        raise loc.error(("defaultClass",), f"{default_class!r} is not a class; classes: {', '.join(classes)}")
    on_unsat = data.get("onUnsatisfiable", "deny")
    if on_unsat not in get_args(OnUnsatisfiable):
        raise loc.error(("onUnsatisfiable",), f"must be deny or admit, not {on_unsat!r}")
    scheduler_name = data.get("schedulerName")
    strict = _str_list(loc, ("strictSchedulers",), data.get("strictSchedulers", [STRICT_SCHEDULER]))
    taint_keys = data.get("gpuTaintKeys", ["nvidia.com/gpu", "amd.com/gpu"])
    return Catalog(
        types=types,
        classes=classes,
        gpu_resource=gpu_resource,
        product_labels=product_labels,
        gpu_taint_keys=tuple(_str(loc, ("gpuTaintKeys", i), k) for i, k in enumerate(taint_keys or [])),
        on_unsatisfiable=cast(OnUnsatisfiable, on_unsat),
        default_class=default_class,
        scheduler_name=None if scheduler_name is None else _str(loc, ("schedulerName",), scheduler_name),
        strict_schedulers=strict,
        _exact=exact,
        _globs=globs,
        _matchers={t.name: _matchers(t) for t in types.values() if t.products or t.match},
        _device_matchers=_device_matchers(types),
    )


def _resource(loc: _Located, path: Path, value: Any) -> str:
    text = _str(loc, path, value)
    if not RESOURCE_RE.fullmatch(text) or len(text) > 253:
        raise loc.error(path, f"{text!r} is not an extended resource name (like nvidia.com/gpu or amd.com/gpu)")
    return text


def _label_key(loc: _Located, path: Path, key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if not LABEL_KEY_RE.fullmatch(key) or len(name) > 63 or len(prefix) > 253:
        raise loc.error(path, f"{key!r} is not a valid label key (like nvidia.com/gpu.product)")
    return key


def _values(loc: _Located, path: Path, raw: Any) -> tuple[str, ...]:
    """Label values, exact or glob; an exact one must be a value a label can have."""
    values = _str_list(loc, path, raw)
    for i, value in enumerate(values):
        if value.endswith(MIG_INVALID_SUFFIX):
            raise loc.error(path + (i,), f"{value!r}: a -MIG-INVALID GPU offers no usable device and is never a type")
        if not is_glob(value) and (len(value) > 63 or not LABEL_VALUE_RE.fullmatch(value)):
            raise loc.error(path + (i,), f"{value!r} is not a label value (63 characters at most: letters, digits, '-', '_', '.')")
    return values


def _match(loc: _Located, path: Path, raw: Any) -> tuple[Match, DeviceMatch]:
    """`match`: a node label key takes a list of values; a DRA driver takes attribute -> values."""
    if not isinstance(raw, dict) or not raw:
        raise loc.error(path, "must be a mapping of node label keys to lists of values (or of DRA drivers to "
                              "attributes and their values)")
    labels: list[tuple[str, tuple[str, ...]]] = []
    devices: list[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]] = []
    for key, values in raw.items():
        where = path + (str(key),)
        if isinstance(values, dict):
            devices.append((_driver(loc, where, str(key)), _attributes(loc, where, str(key), values)))
        else:
            labels.append((_label_key(loc, where, str(key)), _values(loc, where, values)))
    return tuple(labels), tuple(devices)


def _driver(loc: _Located, path: Path, name: str) -> str:
    """A DRA driver name: a DNS subdomain of at most 63 characters (resource.k8s.io/v1)."""
    if len(name) > 63 or not re.fullmatch(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*", name):
        raise loc.error(path, f"{name!r} is not a DRA driver name (a DNS subdomain like gpu.nvidia.com)")
    return name


def _attributes(loc: _Located, path: Path, driver: str, raw: Mapping[Any, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not raw:
        raise loc.error(path, f"DRA driver {driver}: give its devices' attributes and their values, "
                              "like productName: [\"NVIDIA H100 80GB HBM3\"]")
    found = []
    for name, values in raw.items():
        where = path + (str(name),)
        domain, _, identifier = str(name).rpartition("/")
        if len(identifier) > 32 or not _C_IDENTIFIER.fullmatch(identifier) or (
                domain and not re.fullmatch(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*", domain)):
            raise loc.error(where, f"{name!r} is not a DRA attribute name (like productName, or "
                                   "resource.kubernetes.io/pciBusID)")
        texts = _str_list(loc, where, values)
        for i, text in enumerate(texts):
            if len(text) > DRA_ATTRIBUTE_VALUE_MAX_CHARS:
                raise loc.error(where + (i,), f"{text!r} is longer than a DRA attribute's "
                                              f"{DRA_ATTRIBUTE_VALUE_MAX_CHARS} characters")
        found.append((qualified_attribute(driver, str(name)), texts))
    return tuple(found)


def _build_types(raw: Any, gpu_resource: str, loc: _Located) -> dict[str, GpuType]:
    if not isinstance(raw, list) or not raw:
        raise loc.error(("types",), "must be a non-empty list of GPU types")
    types: dict[str, GpuType] = {}
    for i, entry in enumerate(raw):
        path: Path = ("types", i)
        if not isinstance(entry, dict):
            raise loc.error(path, "each type must be a mapping with name, score and products or match")
        _check_keys(loc, path, entry, TYPE_KEYS)
        name = _str(loc, path + ("name",), entry.get("name"))
        if name in types:
            raise loc.error(path + ("name",), f"duplicate type name {name!r}")
        if "," in name:
            raise loc.error(path + ("name",), "type names cannot contain ',' (annotations list them comma-separated)")
        memory = entry.get("memoryGiB")
        scalable = entry.get("scalable", False)
        if not isinstance(scalable, bool):
            raise loc.error(path + ("scalable",), "must be true or false")
        labels, devices = _match(loc, path + ("match",), entry["match"]) if "match" in entry else ((), ())
        if "products" in entry and labels:
            raise loc.error(path, f"type {name!r} needs either 'products' or node label keys in 'match', not both "
                                  "(DRA drivers in 'match' go with either)")
        if "products" not in entry and not labels and not devices:
            raise loc.error(path, f"type {name!r} needs 'products' or 'match'")
        if scalable and "products" not in entry and not labels:
            raise loc.error(path + ("scalable",), f"type {name!r} is known by its DRA devices only: a pool at zero "
                                                  "nodes has no node a Pod's affinity could name; give it "
                                                  "'products' or node label keys in 'match' to be scalable")
        types[name] = GpuType(
            name=name,
            score=_number(loc, path + ("score",), entry.get("score")),
            memory_gib=None if memory is None else _number(loc, path + ("memoryGiB",), memory),
            products=_values(loc, path + ("products",), entry["products"]) if "products" in entry else (),
            scalable=scalable,
            resource=_resource(loc, path + ("resource",), entry["resource"]) if "resource" in entry else gpu_resource,
            match=labels,
            devices=devices,
            facts=_facts(loc, path, entry),
        )
    return types


def _facts(loc: _Located, path: Path, entry: Mapping[str, Any]) -> Facts | None:
    given = FACT_KEYS & entry.keys()
    if not given:
        return None
    if "architecture" not in entry:
        raise loc.error(path, f"{', '.join(sorted(given))}: facts of a type need its 'architecture' too")
    capability = None
    if "computeCapability" in entry:
        capability = _capability(loc, path + ("computeCapability",), entry["computeCapability"])
    bandwidth = entry.get("memoryBandwidthGBps")
    return Facts(
        architecture=_str(loc, path + ("architecture",), entry["architecture"]),
        compute_capability=capability,
        precisions=_precisions(loc, path + ("precisions",), entry.get("precisions", []), allow_empty=True),
        memory_bandwidth_gbps=None if bandwidth is None else _number(loc, path + ("memoryBandwidthGBps",), bandwidth),
        interconnect=_str(loc, path + ("interconnect",), entry["interconnect"]) if "interconnect" in entry else "",
        score_basis=_str(loc, path + ("scoreBasis",), entry["scoreBasis"]) if "scoreBasis" in entry else "",
    )


def _capability(loc: _Located, path: Path, raw: Any) -> ComputeCapability:
    found = parse_compute_capability(raw)
    if found is None:
        raise loc.error(path, f"must be a CUDA compute capability major.minor, like \"9.0\", not {raw!r}")
    return found


def _precisions(loc: _Located, path: Path, raw: Any, *, allow_empty: bool = False) -> frozenset[str]:
    if allow_empty and raw == []:
        return frozenset()
    names = _str_list(loc, path, raw)
    for i, name in enumerate(names):
        if name not in PRECISIONS:
            raise loc.error(path + (i,), f"{name!r} is not a precision; precisions: {', '.join(PRECISIONS)}")
    return frozenset(names)


def _requires(loc: _Located, path: Path, raw: Any) -> Need:
    if not isinstance(raw, dict) or not raw:
        raise loc.error(path, f"must be a mapping of one or more of {', '.join(sorted(REQUIRES_KEYS))}")
    _check_keys(loc, path, raw, REQUIRES_KEYS)
    capability = raw.get("minComputeCapability")
    memory = raw.get("minMemoryGiB")
    return Need(
        min_compute_capability=None if capability is None else _capability(loc, path + ("minComputeCapability",),
                                                                            capability),
        precisions=_precisions(loc, path + ("precisions",), raw["precisions"]) if "precisions" in raw else frozenset(),
        min_memory_gib=None if memory is None else _number(loc, path + ("minMemoryGiB",), memory),
        architectures=frozenset(_str_list(loc, path + ("architectures",), raw["architectures"]))
        if "architectures" in raw else frozenset(),
    )


def meets(gpu_type: GpuType, need: Need, resource: str) -> bool:
    """Whether a type joins a class that requires `need`: it is requested as the catalog's resource (a
    CUDA Pod cannot use a MIG slice's or another vendor's) and meets the need."""
    return gpu_type.resource == resource and need.unmet(gpu_type) is None


def fastest_first(types: Sequence[GpuType]) -> tuple[str, ...]:
    """A class's order: fastest first; between equals, the catalog's own types before those made from
    labels (whose score is borrowed from one of them), then more memory first."""
    return tuple(t.name for t in sorted(types, key=lambda t: (
        -t.score, t.facts is not None and t.facts.from_labels, -(t.memory_gib or 0), t.name)))


def _glob_regex(patterns: Sequence[str]) -> re.Pattern[str] | None:
    globs = [fnmatch.translate(p) for p in patterns if is_glob(p)]
    return re.compile("|".join(f"(?:{g})" for g in globs)) if globs else None


def _matchers(gpu_type: GpuType) -> tuple[_Matcher, ...]:
    pairs: Sequence[tuple[str | None, tuple[str, ...]]] = (
        [(None, gpu_type.products)] if gpu_type.products else list(gpu_type.match)
    )
    return tuple(
        _Matcher(key, frozenset(v for v in values if not is_glob(v)), _glob_regex(values)) for key, values in pairs
    )


def _device_matchers(types: Mapping[str, GpuType]) -> dict[str, tuple[_DeviceMatcher, ...]]:
    by_driver: dict[str, list[_DeviceMatcher]] = {}
    for t in types.values():
        for driver, attributes in t.devices:
            by_driver.setdefault(driver, []).append(_DeviceMatcher(t.name, tuple(
                (name, _Matcher(name, frozenset(v for v in values if not is_glob(v)), _glob_regex(values)))
                for name, values in attributes)))
    return {d: tuple(ms) for d, ms in by_driver.items()}


def _product_index(types: Mapping[str, GpuType]) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """`type_of_product`'s index over the `products` types (checked by _check_claims)."""
    exact: dict[str, str] = {}
    globs: list[tuple[str, str]] = []
    for gpu_type in types.values():
        for product in gpu_type.products:
            if is_glob(product):
                globs.append((product, gpu_type.name))
            else:
                exact.setdefault(product, gpu_type.name)
    return exact, tuple(globs)


@dataclass(frozen=True)
class _Claim:
    key: str
    value: str
    resource: str
    type_name: str
    path: Path


def _claims(types: Mapping[str, GpuType], product_labels: Sequence[str]) -> list[_Claim]:
    claims = []
    for t_index, t in enumerate(types.values()):
        if t.products:
            for p_index, product in enumerate(t.products):
                for key in product_labels:
                    claims.append(_Claim(key, product, t.resource, t.name, ("types", t_index, "products", p_index)))
        for key, values in t.match:
            for v_index, value in enumerate(values):
                claims.append(_Claim(key, value, t.resource, t.name, ("types", t_index, "match", key, v_index)))
    return claims


def _check_claims(types: Mapping[str, GpuType], product_labels: Sequence[str], loc: _Located) -> None:
    """Types requested as one resource must be told apart by their labels: a node that two of them
    named would count its devices twice, and their affinities could not separate their nodes.
    Types of different resources may share labels: a mixed-MIG node offers one type per profile."""
    exact: dict[tuple[str, str, str], _Claim] = {}
    globs: dict[tuple[str, str, str], _Claim] = {}
    for c in _claims(types, product_labels):
        owners = globs if is_glob(c.value) else exact
        other = owners.get((c.key, c.value, c.resource))
        if other is not None and other.type_name != c.type_name:
            what = "glob" if is_glob(c.value) else "product" if c.path[2] == "products" else f"label {c.key}="
            shown = f"{what} {c.value!r}" if what != f"label {c.key}=" else f"{what}{c.value}"
            raise loc.error(c.path, f"{shown} is claimed by types {other.type_name} and {c.type_name} "
                                    f"(both requested as {c.resource})")
        owners.setdefault((c.key, c.value, c.resource), c)
    for (key, pattern, resource), g in globs.items():
        for (e_key, value, e_resource), e in exact.items():
            if (e_key, e_resource) == (key, resource) and e.type_name != g.type_name and fnmatch.fnmatchcase(value, pattern):
                raise loc.error(g.path, f"glob {pattern!r} of type {g.type_name} also matches {value!r} of type "
                                        f"{e.type_name} (both requested as {resource})")


def _may_both_match(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether one attribute value could match both lists: a shared exact value, or a glob of one
    matching an exact value of the other (two globs are taken to be written apart on purpose)."""
    exact_a, exact_b = {v for v in a if not is_glob(v)}, {v for v in b if not is_glob(v)}
    return bool(exact_a & exact_b) or any(fnmatch.fnmatchcase(v, g) for g in a if is_glob(g) for v in exact_b) or any(
        fnmatch.fnmatchcase(v, g) for g in b if is_glob(g) for v in exact_a)


def _check_device_claims(types: Mapping[str, GpuType], loc: _Located) -> None:
    """One DRA device must be one type: a device two types matched would be counted twice (and of two
    resources, it is still one device). Types of one driver must differ in a shared attribute."""
    seen: list[tuple[int, str, str, Mapping[str, tuple[str, ...]]]] = []
    for t_index, t in enumerate(types.values()):
        for driver, attributes in t.devices:
            mine = dict(attributes)
            for _, other_name, other_driver, theirs in seen:
                if other_driver != driver or other_name == t.name:
                    continue
                shared = [n for n in mine if n in theirs]
                if all(_may_both_match(mine[n], theirs[n]) for n in shared):
                    told = ", ".join(_short_attribute(driver, n) for n in shared) or "no attribute"
                    raise loc.error(("types", t_index, "match", driver),
                                    f"types {other_name} and {t.name} can both match one device of {driver} "
                                    f"(they share values of {told}); give each attributes the other does not match")
            seen.append((t_index, t.name, driver, mine))


def _build_classes(raw: Any, types: Mapping[str, GpuType], gpu_resource: str, loc: _Located) -> dict[str, GpuClass]:
    if not isinstance(raw, list) or not raw:
        raise loc.error(("classes",), "must be a non-empty list of classes")
    classes: dict[str, GpuClass] = {}
    for i, entry in enumerate(raw):
        path: Path = ("classes", i)
        if not isinstance(entry, dict):
            raise loc.error(path, "each class must be a mapping with a name and types or score/memory bounds")
        _check_keys(loc, path, entry, CLASS_KEYS)
        name = _str(loc, path + ("name",), entry.get("name"))
        if name in classes:
            raise loc.error(path + ("name",), f"duplicate class name {name!r}")
        strategy = entry.get("strategy", "performance")
        if strategy not in STRATEGIES:
            raise loc.error(path + ("strategy",), f"must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        requires = _requires(loc, path + ("requires",), entry["requires"]) if "requires" in entry else None
        upgrade = entry.get("upgrade", False)
        if not isinstance(upgrade, bool):
            raise loc.error(path + ("upgrade",), f"must be true or false, not {upgrade!r}")
        max_wait = entry.get("maxWait")
        if max_wait is not None and parse_wait(max_wait) is None:
            raise loc.error(path + ("maxWait",), f"must be {WAIT_FORMS}, not {max_wait!r}")
        if requires is not None and (CLASS_KEYS - {"name", "strategy", "requires", "upgrade", "maxWait"}) & entry.keys():
            raise loc.error(path, "give 'requires' alone (minMemoryGiB goes inside it): a class of names takes no "
                                  "other type, and a node placed by its labels joins a class by its requirements")
        members = [t for t in _class_members(entry, types, loc, path)
                   if requires is None or meets(types[t], requires, gpu_resource)]
        if not members:
            raise loc.error(path, f"class {name!r} selects no type")
        classes[name] = GpuClass(name=name, types=fastest_first([types[t] for t in members]),
                                 strategy=cast(Strategy, strategy), requires=requires, upgrade=upgrade,
                                 max_wait=None if max_wait is None else str(max_wait).strip())
    return classes


def _class_members(entry: Mapping[str, Any], types: Mapping[str, GpuType], loc: _Located, path: Path) -> Sequence[str]:
    bounds = {k: entry[k] for k in ("minScore", "maxScore", "minMemoryGiB") if k in entry}
    if "types" in entry:
        if bounds:
            raise loc.error(path, "give either 'types' or score/memory bounds, not both")
        listed = _str_list(loc, path + ("types",), entry["types"])
        for j, type_name in enumerate(listed):
            if type_name not in types:
                raise loc.error(path + ("types", j), f"unknown type {type_name!r}; types: {', '.join(types)}")
        return list(dict.fromkeys(listed))
    if not bounds and "requires" not in entry:
        raise loc.error(path, "a class needs 'types', 'requires' or at least one of minScore, maxScore, minMemoryGiB")
    lo = _number(loc, path + ("minScore",), bounds.get("minScore", 0))
    hi = _number(loc, path + ("maxScore",), bounds.get("maxScore", float("inf")))
    mem = _number(loc, path + ("minMemoryGiB",), bounds.get("minMemoryGiB", 0))
    return [
        t.name
        for t in types.values()
        if lo <= t.score <= hi and (mem == 0 or (t.memory_gib is not None and t.memory_gib >= mem))
    ]
