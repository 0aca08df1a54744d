"""Loading the catalog: its YAML parsed and validated into a Catalog, from a file, a text or the built-in
catalog.yaml. Pure but for reading the file named. A bad catalog raises CatalogError naming the file
and line, so a misconfiguration fails at start.

fields.py reads and checks each value; claims.py refuses types that one node or device could be at once.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, cast, get_args

import yaml

from .builtin import BUILTIN_SOURCE, default_catalog_text
from .claims import check_device_claims, check_label_claims
from .fields import (FieldPath, Located, check_keys, read_label_key, read_label_values, read_match, read_number,
                     read_resource, read_str, read_str_list)
from .matching import DeviceMatcher, Recognition, ValueMatcher, is_glob
from .model import (PRECISIONS, Catalog, CatalogError, ComputeCapability, Facts, GpuClass, GpuType, GroupTopology,
                    Need, OnUnsatisfiable, fastest_first, meets, parse_compute_capability)
from .profiles import STRATEGIES, STRICT_SCHEDULER, Strategy
from .wait import WAIT_FORMS, parse_wait

TOP_KEYS = frozenset(
    {"gpuResource", "productLabels", "gpuTaintKeys", "topologyLabels", "unhealthyConditions", "onUnsatisfiable", "defaultClass", "schedulerName",
     "strictSchedulers", "types", "classes"}
)
FACT_KEYS = frozenset({"architecture", "computeCapability", "precisions", "memoryBandwidthGBps", "interconnect",
                       "scoreBasis"})
TYPE_KEYS = frozenset({"name", "score", "memoryGiB", "products", "match", "resource", "scalable"}) | FACT_KEYS
CLASS_KEYS = frozenset({"name", "types", "minScore", "maxScore", "minMemoryGiB", "strategy", "requires", "upgrade",
                        "maxWait", "groupTopology"})
REQUIRES_KEYS = frozenset({"minComputeCapability", "precisions", "minMemoryGiB", "architectures"})


def load_catalog_text(text: str, source: str = "catalog") -> Catalog:
    """Parse and validate a catalog YAML document."""
    loc = Located(text, source)
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


def load_default_catalog() -> Catalog:
    return load_catalog_text(default_catalog_text(), BUILTIN_SOURCE)


def _build(data: Mapping[str, Any], loc: Located) -> Catalog:
    check_keys(loc, (), data, TOP_KEYS)
    gpu_resource = read_resource(loc, ("gpuResource",), data.get("gpuResource", "nvidia.com/gpu"))
    product_labels = read_str_list(loc, ("productLabels",), data.get("productLabels", ["nvidia.com/gpu.product", "gpu-type"]))
    for i, key in enumerate(product_labels):
        read_label_key(loc, ("productLabels", i), key)
    types = _build_types(data.get("types"), gpu_resource, loc)
    check_label_claims(types, product_labels, loc)
    check_device_claims(types, loc)
    topology_labels = _topology_labels(loc, data.get("topologyLabels", ["nvidia.com/gpu.clique"]))
    classes = _build_classes(data.get("classes"), types, gpu_resource, loc, topology_labels)

    default_class = data.get("defaultClass")
    if default_class is not None and default_class not in classes:
        raise loc.error(("defaultClass",), f"{default_class!r} is not a class; classes: {', '.join(classes)}")
    on_unsat = data.get("onUnsatisfiable", "deny")
    if on_unsat not in get_args(OnUnsatisfiable):
        raise loc.error(("onUnsatisfiable",), f"must be deny or admit, not {on_unsat!r}")
    scheduler_name = data.get("schedulerName")
    strict = read_str_list(loc, ("strictSchedulers",), data.get("strictSchedulers", [STRICT_SCHEDULER]))
    taint_keys = data.get("gpuTaintKeys", ["nvidia.com/gpu", "amd.com/gpu"])
    return Catalog(
        types=types,
        classes=classes,
        gpu_resource=gpu_resource,
        product_labels=product_labels,
        topology_labels=topology_labels,
        gpu_taint_keys=tuple(read_str(loc, ("gpuTaintKeys", i), k) for i, k in enumerate(taint_keys or [])),
        unhealthy_conditions=_unhealthy_conditions(loc, data.get("unhealthyConditions", DEFAULT_UNHEALTHY_CONDITIONS)),
        on_unsatisfiable=cast(OnUnsatisfiable, on_unsat),
        default_class=default_class,
        scheduler_name=None if scheduler_name is None else read_str(loc, ("schedulerName",), scheduler_name),
        strict_schedulers=strict,
        _recognition=_recognition(types),
    )


DEFAULT_UNHEALTHY_CONDITIONS = [{"type": "AcceleratedHardwareReady", "status": "False"}]
CONDITION_STATUSES = ("True", "False", "Unknown")


def _unhealthy_conditions(loc: Located, value: Any) -> tuple[tuple[str, str], ...]:
    """unhealthyConditions: [{type, status}]: a node with a condition of `type` at `status` has unhealthy
    GPUs. An empty list reads no condition."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list):
        raise loc.error(("unhealthyConditions",), "must be a list of {type, status}")
    found: list[tuple[str, str]] = []
    for i, item in enumerate(value):
        path = ("unhealthyConditions", i)
        if not isinstance(item, dict):
            raise loc.error(path, "must be a mapping {type: <condition type>, status: True|False|Unknown}")
        check_keys(loc, path, item, frozenset({"type", "status"}))
        kind = read_str(loc, path + ("type",), item.get("type"))
        status = item.get("status")
        if status not in CONDITION_STATUSES:
            raise loc.error(path + ("status",), f"must be one of {', '.join(CONDITION_STATUSES)} (quoted in YAML: "
                                                f"'False'), not {status!r}")
        if any(kind == k for k, _ in found):
            raise loc.error(path + ("type",), f"condition {kind} is listed twice")
        found.append((kind, str(status)))
    return tuple(found)


def _topology_labels(loc: Located, value: Any) -> tuple[str, ...]:
    """topologyLabels: node label keys, each once."""
    if value is None or value == []:
        return ()
    keys = read_str_list(loc, ("topologyLabels",), value)
    for i, key in enumerate(keys):
        read_label_key(loc, ("topologyLabels", i), key)
        if key in keys[:i]:
            raise loc.error(("topologyLabels", i), f"{key} is listed twice")
    return tuple(keys)


def _recognition(types: Mapping[str, GpuType]) -> Recognition:
    """How nodes and DRA devices name the types, indexed once (check_label_claims and check_device_claims
    have refused two types of one resource claiming one value)."""
    exact: dict[str, str] = {}
    globs: list[tuple[str, str]] = []
    for gpu_type in types.values():
        for product in gpu_type.products:
            if is_glob(product):
                globs.append((product, gpu_type.name))
            else:
                exact.setdefault(product, gpu_type.name)
    return Recognition(
        exact_products=exact,
        product_globs=tuple(globs),
        label_matchers={t.name: _label_matchers(t) for t in types.values() if t.products or t.match},
        device_matchers=_device_matchers(types),
    )


def _label_matchers(gpu_type: GpuType) -> tuple[ValueMatcher, ...]:
    pairs: Sequence[tuple[str | None, tuple[str, ...]]] = (
        [(None, gpu_type.products)] if gpu_type.products else list(gpu_type.match)
    )
    return tuple(ValueMatcher.of(key, values) for key, values in pairs)


def _device_matchers(types: Mapping[str, GpuType]) -> dict[str, tuple[DeviceMatcher, ...]]:
    by_driver: dict[str, list[DeviceMatcher]] = {}
    for t in types.values():
        for driver, attributes in t.devices:
            by_driver.setdefault(driver, []).append(DeviceMatcher(t.name, tuple(
                (name, ValueMatcher.of(name, values)) for name, values in attributes)))
    return {d: tuple(ms) for d, ms in by_driver.items()}


def _build_types(raw: Any, gpu_resource: str, loc: Located) -> dict[str, GpuType]:
    if not isinstance(raw, list) or not raw:
        raise loc.error(("types",), "must be a non-empty list of GPU types")
    types: dict[str, GpuType] = {}
    for i, entry in enumerate(raw):
        path: FieldPath = ("types", i)
        if not isinstance(entry, dict):
            raise loc.error(path, "each type must be a mapping with name, score and products or match")
        check_keys(loc, path, entry, TYPE_KEYS)
        name = read_str(loc, path + ("name",), entry.get("name"))
        if name in types:
            raise loc.error(path + ("name",), f"duplicate type name {name!r}")
        if "," in name:
            raise loc.error(path + ("name",), "type names cannot contain ',' (annotations list them comma-separated)")
        memory = entry.get("memoryGiB")
        scalable = entry.get("scalable", False)
        if not isinstance(scalable, bool):
            raise loc.error(path + ("scalable",), "must be true or false")
        labels, devices = read_match(loc, path + ("match",), entry["match"]) if "match" in entry else ((), ())
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
            score=read_number(loc, path + ("score",), entry.get("score")),
            memory_gib=None if memory is None else read_number(loc, path + ("memoryGiB",), memory),
            products=read_label_values(loc, path + ("products",), entry["products"]) if "products" in entry else (),
            scalable=scalable,
            resource=read_resource(loc, path + ("resource",), entry["resource"]) if "resource" in entry else gpu_resource,
            match=labels,
            devices=devices,
            facts=_facts(loc, path, entry),
        )
    return types


def _facts(loc: Located, path: FieldPath, entry: Mapping[str, Any]) -> Facts | None:
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
        architecture=read_str(loc, path + ("architecture",), entry["architecture"]),
        compute_capability=capability,
        precisions=_precisions(loc, path + ("precisions",), entry.get("precisions", []), allow_empty=True),
        memory_bandwidth_gbps=None if bandwidth is None else read_number(loc, path + ("memoryBandwidthGBps",), bandwidth),
        interconnect=read_str(loc, path + ("interconnect",), entry["interconnect"]) if "interconnect" in entry else "",
        score_basis=read_str(loc, path + ("scoreBasis",), entry["scoreBasis"]) if "scoreBasis" in entry else "",
    )


def _capability(loc: Located, path: FieldPath, raw: Any) -> ComputeCapability:
    found = parse_compute_capability(raw)
    if found is None:
        raise loc.error(path, f"must be a CUDA compute capability major.minor, like \"9.0\", not {raw!r}")
    return found


def _precisions(loc: Located, path: FieldPath, raw: Any, *, allow_empty: bool = False) -> frozenset[str]:
    if allow_empty and raw == []:
        return frozenset()
    names = read_str_list(loc, path, raw)
    for i, name in enumerate(names):
        if name not in PRECISIONS:
            raise loc.error(path + (i,), f"{name!r} is not a precision; precisions: {', '.join(PRECISIONS)}")
    return frozenset(names)


def _requires(loc: Located, path: FieldPath, raw: Any) -> Need:
    if not isinstance(raw, dict) or not raw:
        raise loc.error(path, f"must be a mapping of one or more of {', '.join(sorted(REQUIRES_KEYS))}")
    check_keys(loc, path, raw, REQUIRES_KEYS)
    capability = raw.get("minComputeCapability")
    memory = raw.get("minMemoryGiB")
    return Need(
        min_compute_capability=None if capability is None else _capability(loc, path + ("minComputeCapability",),
                                                                            capability),
        precisions=_precisions(loc, path + ("precisions",), raw["precisions"]) if "precisions" in raw else frozenset(),
        min_memory_gib=None if memory is None else read_number(loc, path + ("minMemoryGiB",), memory),
        architectures=frozenset(read_str_list(loc, path + ("architectures",), raw["architectures"]))
        if "architectures" in raw else frozenset(),
    )


def _build_classes(raw: Any, types: Mapping[str, GpuType], gpu_resource: str, loc: Located,
                   topology_labels: Sequence[str] = ()) -> dict[str, GpuClass]:
    if not isinstance(raw, list) or not raw:
        raise loc.error(("classes",), "must be a non-empty list of classes")
    classes: dict[str, GpuClass] = {}
    for i, entry in enumerate(raw):
        path: FieldPath = ("classes", i)
        if not isinstance(entry, dict):
            raise loc.error(path, "each class must be a mapping with a name and types or score/memory bounds")
        check_keys(loc, path, entry, CLASS_KEYS)
        name = read_str(loc, path + ("name",), entry.get("name"))
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
        if requires is not None and (CLASS_KEYS - {"name", "strategy", "requires", "upgrade", "maxWait",
                                                   "groupTopology"}) & entry.keys():
            raise loc.error(path, "give 'requires' alone (minMemoryGiB goes inside it): a class of names takes no "
                                  "other type, and a node placed by its labels joins a class by its requirements")
        members = [t for t in _class_members(entry, types, loc, path)
                   if requires is None or meets(types[t], requires, gpu_resource)]
        if not members:
            raise loc.error(path, f"class {name!r} selects no type")
        classes[name] = GpuClass(name=name, types=fastest_first([types[t] for t in members]),
                                 strategy=cast(Strategy, strategy), requires=requires, upgrade=upgrade,
                                 max_wait=None if max_wait is None else str(max_wait).strip(),
                                 group_topology=_group_topology(loc, path + ("groupTopology",),
                                                                entry.get("groupTopology"), topology_labels))
    return classes


def _group_topology(loc: Located, path: FieldPath, value: Any, keys: Sequence[str]) -> GroupTopology | None:
    """A class's groupTopology: {required: KEY} or {preferred: KEY}, KEY one of the catalog's topologyLabels."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("required", "preferred"):
        raise loc.error(path, f"must be {{required: KEY}} or {{preferred: KEY}}, not {value!r}")
    (mode, key), = value.items()
    if key not in keys:
        raise loc.error(path + (mode,), f"must be one of topologyLabels ({', '.join(keys) or 'none'}), not {key!r}")
    return GroupTopology(str(key), mode == "required")


def _class_members(entry: Mapping[str, Any], types: Mapping[str, GpuType], loc: Located, path: FieldPath) -> Sequence[str]:
    bounds = {k: entry[k] for k in ("minScore", "maxScore", "minMemoryGiB") if k in entry}
    if "types" in entry:
        if bounds:
            raise loc.error(path, "give either 'types' or score/memory bounds, not both")
        listed = read_str_list(loc, path + ("types",), entry["types"])
        for j, type_name in enumerate(listed):
            if type_name not in types:
                raise loc.error(path + ("types", j), f"unknown type {type_name!r}; types: {', '.join(types)}")
        return list(dict.fromkeys(listed))
    if not bounds and "requires" not in entry:
        raise loc.error(path, "a class needs 'types', 'requires' or at least one of minScore, maxScore, minMemoryGiB")
    lo = read_number(loc, path + ("minScore",), bounds.get("minScore", 0))
    hi = read_number(loc, path + ("maxScore",), bounds.get("maxScore", float("inf")))
    mem = read_number(loc, path + ("minMemoryGiB",), bounds.get("minMemoryGiB", 0))
    return [
        t.name
        for t in types.values()
        if lo <= t.score <= hi and (mem == 0 or (t.memory_gib is not None and t.memory_gib >= mem))
    ]
