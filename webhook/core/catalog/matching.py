"""How the catalog's types are recognised: a node by its labels (a product, or `match` keys), a DRA
device by its driver and attributes. Values match exactly or by glob, never by substring. Pure.

Recognition is the index of one catalog, built once at loading (loading.py): the admission path and
the inventory ask it on every Pod and every node.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

GLOB_CHARS = frozenset("*?[")
# the device plugin's mark for a GPU whose MIG layout it cannot use: never a type, whatever matches it
MIG_INVALID_SUFFIX = "-MIG-INVALID"


def is_glob(product: str) -> bool:
    return not GLOB_CHARS.isdisjoint(product)


def glob_regex(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """The globs among `patterns` as one regex; None when all are exact."""
    globs = [fnmatch.translate(p) for p in patterns if is_glob(p)]
    return re.compile("|".join(f"(?:{g})" for g in globs)) if globs else None


@dataclass(frozen=True)
class ValueMatcher:
    """One key's values of a type, ready for a node: exact values in a set, globs as one regex."""

    key: str | None  # None: the first productLabels key present on the node
    exact: frozenset[str]
    globs: re.Pattern[str] | None

    @classmethod
    def of(cls, key: str | None, values: Sequence[str]) -> ValueMatcher:
        return cls(key, frozenset(v for v in values if not is_glob(v)), glob_regex(values))

    def matches(self, value: str) -> bool:
        return value in self.exact or (self.globs is not None and self.globs.fullmatch(value) is not None)


@dataclass(frozen=True)
class DeviceMatcher:
    """One type's attributes of one driver: a device of the driver is the type when every one matches."""

    type_name: str
    attributes: tuple[tuple[str, ValueMatcher], ...]  # (qualified attribute name, its values)


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


def qualified_attribute(driver: str, name: str) -> str:
    """resource.k8s.io: an attribute name without a domain belongs to the driver's own domain."""
    return name if "/" in name else f"{driver}/{name}"


def short_attribute(driver: str, qualified: str) -> str:
    """An attribute's name as its driver's users write it: without the driver's own domain."""
    return qualified.removeprefix(driver + "/")


@dataclass(frozen=True)
class Recognition:
    """The types of one catalog as nodes' labels and DRA devices name them."""

    # `type_of_product`'s index over the `products` types: exact values, then (glob, type) in the catalog's order
    exact_products: Mapping[str, str] = field(default_factory=dict)
    product_globs: tuple[tuple[str, str], ...] = ()
    label_matchers: Mapping[str, tuple[ValueMatcher, ...]] = field(default_factory=dict)  # by type
    device_matchers: Mapping[str, tuple[DeviceMatcher, ...]] = field(default_factory=dict)  # by driver

    def matches_of_labels(self, labels: Mapping[str, Any], product: tuple[str, str] | None
                          ) -> list[tuple[str, str, str]]:
        """(type, label key, value) for every type a node's labels name, in the catalog's order.

        A type given by `products` reads only `product`, the first productLabels key present, as it
        always has; a type given by `match` is named when any of its keys matches. Values ending in
        -MIG-INVALID name no type.
        """
        found: list[tuple[str, str, str]] = []
        for type_name, matchers in self.label_matchers.items():
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

    def types_of_device(self, driver: str, attributes: Mapping[str, Any]) -> DeviceTypes:
        """The types a DRA device is, from its driver and attributes (keyed by qualified name).

        Attributes are compared as text (`string` and `version` values), exactly or by glob, never
        by substring. No type, or more than one, comes with the reason, for the inventory to report.
        """
        matchers = self.device_matchers.get(driver)
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
        wrong = [f"{short_attribute(driver, n)} is {attribute_kind(attributes[n])}" for n in read
                 if n in attributes and attribute_text(attributes[n]) is None]
        if wrong:
            return DeviceTypes((), f"attribute {', '.join(wrong)}; the catalog matches text (string)")
        shown = [f"{short_attribute(driver, n)}={attribute_text(attributes[n])!r}" for n in read if n in attributes]
        return DeviceTypes((), f"no type of the catalog matches {', '.join(shown) or 'a device without its attributes'}")

    def type_of_product(self, product: str) -> str | None:
        """The type a product label value names: exact match first, then the catalog's globs in order.

        Never a substring match: `NVIDIA-A10` is not `NVIDIA-A100`.
        """
        found = self.exact_products.get(product)
        if found is not None:
            return found
        for pattern, type_name in self.product_globs:
            if fnmatch.fnmatchcase(product, pattern):
                return type_name
        return None
