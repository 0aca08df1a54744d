"""Reading the catalog YAML one field at a time: each reader checks one value and returns it, or raises a
CatalogError that names the file, the line and the field (so a misconfiguration fails at start). Pure.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import yaml

from .matching import MIG_INVALID_SUFFIX, is_glob, qualified_attribute
from .model import CatalogError, DeviceMatch, Match

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_KEY_RE = re.compile(rf"(({_DNS_LABEL})(\.{_DNS_LABEL})*/)?{_NAME}")
RESOURCE_RE = re.compile(rf"({_DNS_LABEL})(\.{_DNS_LABEL})*/{_NAME}")
LABEL_VALUE_RE = re.compile(_NAME)
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DRA_ATTRIBUTE_VALUE_MAX_CHARS = 64  # resource.k8s.io/v1: a string attribute's longest value

FieldPath = tuple[str | int, ...]  # keys and list indexes from the document's root


class Located:
    """Finds the line of a path in the YAML text so errors can point at it."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        try:
            self.root: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:
            self.root = None

    def line_of(self, path: FieldPath) -> int | None:
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

    def error(self, path: FieldPath, message: str) -> CatalogError:
        line = self.line_of(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        dotted = ".".join(str(p) for p in path)
        return CatalogError(f"{where}: {dotted + ': ' if dotted else ''}{message}")


def check_keys(loc: Located, path: FieldPath, obj: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for key in obj:
        if key not in allowed:
            raise loc.error(path + (str(key),), f"unknown key {key!r}; known keys: {', '.join(sorted(allowed))}")


def read_str(loc: Located, path: FieldPath, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise loc.error(path, f"must be a non-empty string, not {value!r}")
    return value


def read_str_list(loc: Located, path: FieldPath, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise loc.error(path, "must be a non-empty list of strings")
    return tuple(read_str(loc, path + (i,), v) for i, v in enumerate(value))


def read_number(loc: Located, path: FieldPath, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise loc.error(path, f"must be a non-negative number, not {value!r}")
    return float(value)


def read_resource(loc: Located, path: FieldPath, value: Any) -> str:
    text = read_str(loc, path, value)
    if not RESOURCE_RE.fullmatch(text) or len(text) > 253:
        raise loc.error(path, f"{text!r} is not an extended resource name (like nvidia.com/gpu or amd.com/gpu)")
    return text


def read_label_key(loc: Located, path: FieldPath, key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if not LABEL_KEY_RE.fullmatch(key) or len(name) > 63 or len(prefix) > 253:
        raise loc.error(path, f"{key!r} is not a valid label key (like nvidia.com/gpu.product)")
    return key


def read_label_values(loc: Located, path: FieldPath, raw: Any) -> tuple[str, ...]:
    """Label values, exact or glob; an exact one must be a value a label can have."""
    values = read_str_list(loc, path, raw)
    for i, value in enumerate(values):
        if value.endswith(MIG_INVALID_SUFFIX):
            raise loc.error(path + (i,), f"{value!r}: a -MIG-INVALID GPU offers no usable device and is never a type")
        if not is_glob(value) and (len(value) > 63 or not LABEL_VALUE_RE.fullmatch(value)):
            raise loc.error(path + (i,), f"{value!r} is not a label value (63 characters at most: letters, digits, '-', '_', '.')")
    return values


def read_match(loc: Located, path: FieldPath, raw: Any) -> tuple[Match, DeviceMatch]:
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
            labels.append((read_label_key(loc, where, str(key)), read_label_values(loc, where, values)))
    return tuple(labels), tuple(devices)


def _driver(loc: Located, path: FieldPath, name: str) -> str:
    """A DRA driver name: a DNS subdomain of at most 63 characters (resource.k8s.io/v1)."""
    if len(name) > 63 or not re.fullmatch(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*", name):
        raise loc.error(path, f"{name!r} is not a DRA driver name (a DNS subdomain like gpu.nvidia.com)")
    return name


def _attributes(loc: Located, path: FieldPath, driver: str, raw: Mapping[Any, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
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
        texts = read_str_list(loc, where, values)
        for i, text in enumerate(texts):
            if len(text) > DRA_ATTRIBUTE_VALUE_MAX_CHARS:
                raise loc.error(where + (i,), f"{text!r} is longer than a DRA attribute's "
                                              f"{DRA_ATTRIBUTE_VALUE_MAX_CHARS} characters")
        found.append((qualified_attribute(driver, str(name)), texts))
    return tuple(found)
