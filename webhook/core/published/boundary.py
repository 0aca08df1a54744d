"""The tenant boundary's parameters: which node label values, with which GPU resource, each class may use. Pure.

The webhook fails open, so a namespace's `gpu-class.io/allowed-classes` cannot rest on it. The
boundary is a ValidatingAdmissionPolicy (deploy/components/backstop/boundary.yaml) that runs inside
the API server and fails closed: it admits a GPU Pod of such a namespace only when its own
nodeSelector and required node affinity keep it, in every term, to label values of types of the
allowed classes, for each GPU resource it asks for. It reads no mark a tenant could write; what it
trusts is this table, written by the webhook into a BoundaryTable (a custom resource) of its own namespace, and the node
labels (which the label guard keeps from tenants).

CEL cannot parse JSON, and the API server turns the whole parameter object into CEL values for each
Pod it judges, so the table has few keys: per class, `class.<name>` holds every (label key, value,
resource) a node of one of its types carries, as `|key value resource|key value resource|`, and the
policy looks for `|key value resource|` built from what the Pod says. Label keys, values and resource
names hold no space and no `|`, so the search finds whole entries only. Globs of the catalog, which no
search can match, are kept per class in `globs.<name>`, one `key resource pattern` (RE2) a line.

The table follows what the webhook decides with: the catalog's products and `match` values, and,
from the live view, the values it writes for nodes no product names (a product its labels make a
type of, a DRA node by its hostname) and for node pools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..catalog.matching import is_glob
from ..catalog.model import Catalog
from ..view.snapshot import Snapshot, placing_catalog

BOUNDARY_CONFIGMAP = "gpu-class-boundary"  # the name of the BoundaryTable (a custom resource) holding the table
RESOURCES_KEY = "resources"  # `,nvidia.com/gpu,amd.com/gpu,...,`: what counts as asking for a GPU
CLASSES_KEY = "classes"  # `,high,standard,...,`: every class
# `,compute-domain-default-channel.nvidia.com,...,`: the DeviceClasses pinned to a driver no type names, the only
# ones a bounded namespace may claim devices of (a class that may select a GPU is not among them)
OTHER_DEVICE_CLASSES_KEY = "otherDeviceClasses"
KEY_RE = re.compile(r"[-._a-zA-Z0-9]{1,253}")  # a ConfigMap's keys


class BoundaryError(ValueError):
    """The catalog holds a value the policy cannot be given: the install cannot enforce the boundary."""


@dataclass(frozen=True, order=True)
class Entry:
    """A node label value of a type, with the resource that type's GPUs are asked for as."""

    label_key: str
    value: str
    resource: str


def class_key(class_name: str) -> str:
    return "class." + class_name


def globs_key(class_name: str) -> str:
    return "globs." + class_name


def entry_text(entry: Entry) -> str:
    """How the policy writes what a Pod asks for, and finds it in a class's entries."""
    return f"|{entry.label_key} {entry.value} {entry.resource}|"


def glob_regex(pattern: str) -> str:
    """A catalog glob (fnmatch's `*`, `?`, `[...]`) as an RE2 pattern for CEL's matches(), anchored."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[" and (end := pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "]") else i + 1)) > 0:
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "^" + "".join(out) + "$"


def catalog_entries(catalog: Catalog) -> dict[Entry, str]:
    """Each (label key, value or glob, resource) of the catalog's types, with the type it names."""
    found: dict[Entry, str] = {}
    for t in catalog.types.values():
        for key in catalog.product_labels if t.products else ():
            for product in t.products:
                found.setdefault(Entry(key, product, t.resource), t.name)
        for key, values in t.match:
            for value in values:
                found.setdefault(Entry(key, value, t.resource), t.name)
    return found


def live_entries(snapshot: Snapshot, catalog: Catalog) -> dict[Entry, str]:
    """What the webhook may write for the nodes and pools it sees, by the type each names."""
    found: dict[Entry, str] = {}
    for type_name, groups in snapshot.groups_by_type.items():
        resource = _resource_of(catalog, type_name)
        for g in groups:
            found.setdefault(Entry(g.label_key, g.product, g.resource or resource), type_name)
    for type_name, pools in (snapshot.pools_by_type or {}).items():
        for pool in pools:
            for value in pool.values:
                found.setdefault(Entry(pool.label_key, value, pool.resource), type_name)
    return found


def _resource_of(catalog: Catalog, type_name: str) -> str:
    t = catalog.types.get(type_name)
    return t.resource if t is not None else catalog.gpu_resource


def classes_of_types(catalog: Catalog) -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for c in catalog.classes.values():
        for t in c.types:
            found.setdefault(t, []).append(c.name)
    return {t: tuple(names) for t, names in found.items()}


def boundary_data(catalog: Catalog, snapshot: Snapshot | None = None) -> dict[str, str]:
    """The ConfigMap's data: the catalog's entries and, with a snapshot, the live ones."""
    if snapshot is None:
        return build_data(catalog, catalog_entries(catalog), ())
    placing = placing_catalog(catalog, snapshot)
    entries = catalog_entries(placing)
    for entry, type_name in live_entries(snapshot, placing).items():
        entries.setdefault(entry, type_name)
    return build_data(placing, entries, snapshot.dra.other_device_classes)


class BoundaryTable:
    """boundary_data for one catalog, worked out again only when what it reads of the snapshot changed.

    The keeper asks every few seconds; a snapshot reuses its groups, pools and label types while only
    Pods change, so most asks cost a few identity checks."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._inputs: tuple[object, ...] = ()
        self._other: tuple[str, ...] | None = None
        self._data: dict[str, str] = {}

    def data(self, snapshot: Snapshot) -> dict[str, str]:
        inputs = (snapshot.groups_by_type, snapshot.pools_by_type, snapshot.label_types)
        other = snapshot.dra.other_device_classes  # a few names, made anew with each snapshot
        if (len(inputs) != len(self._inputs) or any(a is not b for a, b in zip(inputs, self._inputs))
                or other != self._other):
            self._data, self._inputs, self._other = boundary_data(self.catalog, snapshot), inputs, other
        return self._data


def build_data(catalog: Catalog, entries: Mapping[Entry, str], other_device_classes: Iterable[str]) -> dict[str, str]:
    classes = classes_of_types(catalog)
    exact: dict[str, list[str]] = {name: [] for name in catalog.classes}
    globs: dict[str, list[str]] = {name: [] for name in catalog.classes}
    for entry in sorted(entries):
        _check_entry(entry)
        for name in classes.get(entries[entry], ()):  # a type of no class: no namespace may use it by a class
            if is_glob(entry.value):
                globs[name].append(f"{entry.label_key} {entry.resource} {glob_regex(entry.value)}")
            else:
                exact[name].append(f"{entry.label_key} {entry.value} {entry.resource}")
    data = {RESOURCES_KEY: _listed(catalog.resources), CLASSES_KEY: _listed(catalog.classes),
            OTHER_DEVICE_CLASSES_KEY: _listed(other_device_classes)}
    for name in catalog.classes:
        if not KEY_RE.fullmatch(class_key(name)):
            raise BoundaryError(f"class {name!r}: the boundary's table keys it as {class_key(name)!r}, and a "
                                "ConfigMap key holds only letters, digits, '-', '_' and '.'")
        data[class_key(name)] = "|" + "".join(f"{e}|" for e in exact[name])
        if globs[name]:
            data[globs_key(name)] = "\n".join(globs[name])
    return data


def _check_entry(entry: Entry) -> None:
    """The policy finds whole entries only if no field holds the separators (a catalog value may not)."""
    for part in (entry.label_key, entry.value, entry.resource):
        if not part or " " in part or "|" in part or "\n" in part:
            raise BoundaryError(f"{part!r} (label {entry.label_key}={entry.value}, resource {entry.resource}) "
                                "cannot be an entry of the boundary's table: no spaces, '|' or line breaks")


def _listed(names: Iterable[str]) -> str:
    """`,a,b,`: the policy looks for `,a,`, so no name is found inside another."""
    return "," + "".join(f"{n}," for n in names)
