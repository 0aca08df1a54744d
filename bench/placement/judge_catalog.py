"""The placement judge's own reading of a catalog: which GPU type a node's labels name, and each class's types in
the order its strategy promises them. Pure: no I/O.

Read from the catalog's YAML directly, with none of webhook.core: the judge checks what the webhook and the
schedulers did, so a mistake in their label matching (catalog.matches_of_labels) or their order
(extender.type_order) must not be the judge's too. What it implements is what docs/users/classes.md states:

- `products` are read from the first `productLabels` key present on the node; `match` maps label keys to values
  and a node is the type when any of its keys matches (a `match` value that is a mapping names a DRA driver: no
  node label);
- a value matches exactly or as a shell-style glob of the whole value (case-sensitive), never as a substring;
- a value ending in `-MIG-INVALID` is never a type;
- a class's types are ordered by score, fastest first (between equal scores, more memory first, then by name),
  whatever order the class lists them in; `performance` promises them fastest first, `cost` slowest first
  (`balanced` and `binpack` rank nodes, not types: for them the order says nothing).

Only classes that list their types are read: the benchmark's classes do, and bounds or requirements would make
the judge resolve them as the webhook does.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Mapping

import yaml

MIG_INVALID_SUFFIX = "-MIG-INVALID"
DEFAULT_PRODUCT_LABELS = ("nvidia.com/gpu.product", "gpu-type")
DEFAULT_UNHEALTHY = (("AcceleratedHardwareReady", "False"),)


@dataclass(frozen=True)
class NodeNames:
    """How nodes name one type: its products (under the product label) and its `match` label keys."""

    type_name: str
    resource: str
    score: float
    memory_gib: float
    products: tuple[str, ...]
    labels: tuple[tuple[str, tuple[str, ...]], ...]  # (label key, values)


@dataclass(frozen=True)
class JudgeClass:
    types: tuple[str, ...]  # fastest first
    strategy: str


@dataclass(frozen=True)
class JudgeCatalog:
    gpu_resource: str
    product_labels: tuple[str, ...]
    names: tuple[NodeNames, ...]  # in the catalog's order
    classes: Mapping[str, JudgeClass]
    unhealthy_conditions: tuple[tuple[str, str], ...]

    @classmethod
    def from_yaml(cls, text: str) -> JudgeCatalog:
        data = yaml.safe_load(text)
        if not isinstance(data, dict) or not isinstance(data.get("types"), list):
            raise ValueError("the judge's catalog: not a catalog (a mapping with a list of types)")
        gpu_resource = str(data.get("gpuResource", "nvidia.com/gpu"))
        names = tuple(_names(entry, gpu_resource) for entry in data["types"])
        speed = {n.type_name: (-n.score, -n.memory_gib, n.type_name) for n in names}
        classes = {str(c["name"]): JudgeClass(tuple(sorted({str(t) for t in c["types"]}, key=speed.__getitem__)),
                                              str(c.get("strategy", "performance")))
                   for c in data.get("classes") or [] if isinstance(c.get("types"), list)}
        unhealthy = data.get("unhealthyConditions")
        return cls(gpu_resource, tuple(data.get("productLabels") or DEFAULT_PRODUCT_LABELS), names, classes,
                   DEFAULT_UNHEALTHY if unhealthy is None else tuple((str(c["type"]), str(c["status"]))
                                                                   for c in unhealthy))

    def types_of_labels(self, labels: Mapping[str, Any]) -> tuple[str, ...]:
        """Every type the node's labels name, in the catalog's order."""
        product = next((v for k in self.product_labels if isinstance(v := labels.get(k), str) and v), None)
        found = []
        for n in self.names:
            if (product is not None and _named(product, n.products)) or any(
                    isinstance(v := labels.get(key), str) and _named(v, values) for key, values in n.labels):
                found.append(n.type_name)
        return tuple(found)

    def gpu_type_of_labels(self, labels: Mapping[str, Any], resource: str) -> str | None:
        """The type, requested as `resource`, that the node's labels name; None when none does."""
        by_name = {n.type_name: n for n in self.names}
        return next((t for t in self.types_of_labels(labels) if by_name[t].resource == resource), None)

    def judged_class(self, class_name: str) -> JudgeClass:
        found = self.classes.get(class_name)
        if found is None:
            raise ValueError(f"the judge's catalog: no class {class_name!r} that lists its types; the judge reads "
                             f"only classes with `types: [...]`: {', '.join(self.classes)}")
        return found

    def strategy(self, class_name: str) -> str:
        return self.judged_class(class_name).strategy

    def promised_order(self, class_name: str) -> tuple[str, ...]:
        """The class's types, best first for its strategy: slowest first for `cost`, else as listed."""
        c = self.judged_class(class_name)
        return tuple(reversed(c.types)) if c.strategy == "cost" else c.types


def _named(value: str, patterns: tuple[str, ...]) -> bool:
    return bool(value) and not value.endswith(MIG_INVALID_SUFFIX) and any(
        fnmatch.fnmatchcase(value, p) for p in patterns)


def _names(entry: Mapping[str, Any], gpu_resource: str) -> NodeNames:
    match = entry.get("match") or {}
    labels = tuple((str(k), _values(entry, k, values)) for k, values in match.items()
                   if not isinstance(values, Mapping))  # a mapping: a DRA driver's attributes
    return NodeNames(str(entry["name"]), str(entry.get("resource", gpu_resource)), float(entry["score"]),
                     float(entry.get("memoryGiB") or 0), _values(entry, "products", entry.get("products") or []),
                     labels)


def _values(entry: Mapping[str, Any], key: str, values: Any) -> tuple[str, ...]:
    if not isinstance(values, list):
        raise ValueError(f"the judge's catalog: type {entry.get('name')!r}: {key} must be a list of values")
    return tuple(str(v) for v in values)
