"""Reading Kubernetes objects from YAML files (node inventories, Pods for `explain`)."""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

import yaml

from ..core.catalog.model import Catalog
from ..core.view.inventory import Reduced, fixed_snapshot, reduce_objects
from ..core.view.snapshot import Snapshot


# libyaml's loader when PyYAML has it: 5,000 Nodes take seconds instead of a minute
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InputError(ValueError):
    """A file the user named cannot be used; the message says which and why."""


def read_objects(path: str) -> list[dict[str, Any]]:
    """Objects in a file: a List (`kubectl get -o yaml`), several documents, or both."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        # `kubectl get -o json` output parses many times faster as JSON than as YAML
        documents = [json.loads(text)] if text.lstrip().startswith("{") else list(yaml.load_all(text, Loader=SAFE_LOADER))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise InputError(f"{path} is not valid YAML or JSON: {exc}") from None
    objects: list[dict[str, Any]] = []
    for doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(f"{path}: every document must be a Kubernetes object or a List")
        if isinstance(doc.get("items"), list):
            kind = str(doc.get("kind", ""))
            item_kind = kind[: -len("List")] if kind.endswith("List") and kind != "List" else None
            for item in doc["items"]:
                if not isinstance(item, dict):
                    raise InputError(f"{path}: list items must be objects")
                if item_kind and "kind" not in item:
                    item = {"kind": item_kind, **item}  # NodeList items may omit their kind
                objects.append(item)
        else:
            objects.append(doc)
    return objects


def read_inventory(paths: tuple[str, ...], catalog: Catalog) -> Reduced:
    objects = [o for p in paths for o in read_objects(p)]
    if not any(o.get("kind") == "Node" for o in objects):
        raise InputError(f"{', '.join(paths)}: no Node objects; give the output of `kubectl get nodes -o yaml`")
    return reduce_objects(catalog, objects)


def load_snapshot(paths: tuple[str, ...], catalog: Catalog) -> Snapshot:
    """A fixed inventory from Node (and Namespace, ResourceSlice, DeviceClass, ResourceClaim) files."""
    return fixed_snapshot(catalog, read_inventory(paths, catalog))


def load_snapshot_in_child(paths: tuple[str, ...], catalog: Catalog) -> Snapshot:
    """The same, parsed in a forked child that hands back only the reduced objects.

    Parsing 5,000 whole Node objects leaves hundreds of MB of freed but fragmented heap behind;
    in a long-lived server (and in every worker forked from it) that would stay resident.
    """
    with multiprocessing.get_context("fork").Pool(1) as pool:
        reduced = pool.apply(read_inventory, (paths, catalog))
    return fixed_snapshot(catalog, reduced)


def read_pod(path: str) -> dict[str, Any]:
    objects = read_objects(path)
    pods = [o for o in objects if o.get("kind") == "Pod"]
    if len(pods) != 1:
        raise InputError(f"{path} must hold exactly one Pod, found {len(pods)}")
    return pods[0]
