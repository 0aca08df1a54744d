"""The GPU catalog: GPU types, classes of types, and how node product labels map to types.

Pure: parsing and validation of the catalog YAML, no I/O beyond reading the text handed in.
A bad catalog raises CatalogError naming the file and line, so a misconfiguration fails at start.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, Mapping, Sequence, cast, get_args

import yaml

Strategy = Literal["performance", "cost", "balanced", "binpack"]
OnUnsatisfiable = Literal["deny", "admit"]

STRATEGIES: tuple[str, ...] = get_args(Strategy)
GLOB_CHARS = frozenset("*?[")


class CatalogError(ValueError):
    """The catalog cannot be used; the message says where and what to fix."""


@dataclass(frozen=True)
class GpuType:
    name: str
    score: float
    memory_gib: float | None
    products: tuple[str, ...]
    scalable: bool = False

    @property
    def exact_products(self) -> tuple[str, ...]:
        return tuple(p for p in self.products if not is_glob(p))


@dataclass(frozen=True)
class GpuClass:
    name: str
    types: tuple[str, ...]  # resolved type names, fastest first
    strategy: Strategy


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
    _exact: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    _globs: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

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


def is_glob(product: str) -> bool:
    return not GLOB_CHARS.isdisjoint(product)


TOP_KEYS = frozenset(
    {"gpuResource", "productLabels", "gpuTaintKeys", "onUnsatisfiable", "defaultClass", "schedulerName", "types", "classes"}
)
TYPE_KEYS = frozenset({"name", "score", "memoryGiB", "products", "scalable"})
CLASS_KEYS = frozenset({"name", "types", "minScore", "maxScore", "minMemoryGiB", "strategy"})

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
    return resources.files(__package__ or "webhook.core").joinpath("catalog.yaml").read_text(encoding="utf-8")


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
    types = _build_types(data.get("types"), loc)
    exact, globs = _product_index(types, loc)
    classes = _build_classes(data.get("classes"), types, loc)

    default_class = data.get("defaultClass")
    if default_class is not None and default_class not in classes:
        raise loc.error(("defaultClass",), f"{default_class!r} is not a class; classes: {', '.join(classes)}")
    on_unsat = data.get("onUnsatisfiable", "deny")
    if on_unsat not in get_args(OnUnsatisfiable):
        raise loc.error(("onUnsatisfiable",), f"must be deny or admit, not {on_unsat!r}")
    scheduler_name = data.get("schedulerName")
    return Catalog(
        types=types,
        classes=classes,
        gpu_resource=_str(loc, ("gpuResource",), data.get("gpuResource", "nvidia.com/gpu")),
        product_labels=_str_list(loc, ("productLabels",), data.get("productLabels", ["nvidia.com/gpu.product", "gpu-type"])),
        gpu_taint_keys=tuple(_str(loc, ("gpuTaintKeys", i), k) for i, k in enumerate(data.get("gpuTaintKeys") or [])),
        on_unsatisfiable=cast(OnUnsatisfiable, on_unsat),
        default_class=default_class,
        scheduler_name=None if scheduler_name is None else _str(loc, ("schedulerName",), scheduler_name),
        _exact=exact,
        _globs=globs,
    )


def _build_types(raw: Any, loc: _Located) -> dict[str, GpuType]:
    if not isinstance(raw, list) or not raw:
        raise loc.error(("types",), "must be a non-empty list of GPU types")
    types: dict[str, GpuType] = {}
    for i, entry in enumerate(raw):
        path: Path = ("types", i)
        if not isinstance(entry, dict):
            raise loc.error(path, "each type must be a mapping with name, score and products")
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
        types[name] = GpuType(
            name=name,
            score=_number(loc, path + ("score",), entry.get("score")),
            memory_gib=None if memory is None else _number(loc, path + ("memoryGiB",), memory),
            products=_str_list(loc, path + ("products",), entry.get("products")),
            scalable=scalable,
        )
    return types


def _product_index(types: Mapping[str, GpuType], loc: _Located) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """Exact products map to one type; a product claimed twice, or caught by another type's glob, is an error."""
    exact: dict[str, str] = {}
    globs: list[tuple[str, str]] = []
    for t_index, gpu_type in enumerate(types.values()):
        for p_index, product in enumerate(gpu_type.products):
            path: Path = ("types", t_index, "products", p_index)
            if is_glob(product):
                if any(p == product for p, _ in globs):
                    raise loc.error(path, f"glob {product!r} is claimed by two types")
                globs.append((product, gpu_type.name))
            elif product in exact:
                raise loc.error(path, f"product {product!r} is claimed by types {exact[product]} and {gpu_type.name}")
            else:
                exact[product] = gpu_type.name
    for pattern, owner in globs:
        for product, other in exact.items():
            if other != owner and fnmatch.fnmatchcase(product, pattern):
                t_index = list(types).index(owner)
                p_index = types[owner].products.index(pattern)
                raise loc.error(
                    ("types", t_index, "products", p_index),
                    f"glob {pattern!r} of type {owner} also matches {product!r} of type {other}",
                )
    return exact, tuple(globs)


def _build_classes(raw: Any, types: Mapping[str, GpuType], loc: _Located) -> dict[str, GpuClass]:
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
        members = _class_members(entry, types, loc, path)
        if not members:
            raise loc.error(path, f"class {name!r} selects no type")
        # fastest first; between equals, more memory first
        ordered = tuple(sorted(members, key=lambda t: (-types[t].score, -(types[t].memory_gib or 0), t)))
        classes[name] = GpuClass(name=name, types=ordered, strategy=cast(Strategy, strategy))
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
    if not bounds:
        raise loc.error(path, "a class needs 'types' or at least one of minScore, maxScore, minMemoryGiB")
    lo = _number(loc, path + ("minScore",), bounds.get("minScore", 0))
    hi = _number(loc, path + ("maxScore",), bounds.get("maxScore", float("inf")))
    mem = _number(loc, path + ("minMemoryGiB",), bounds.get("minMemoryGiB", 0))
    return [
        t.name
        for t in types.values()
        if lo <= t.score <= hi and (mem == 0 or (t.memory_gib is not None and t.memory_gib >= mem))
    ]
