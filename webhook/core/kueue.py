"""Beside Kueue: what Kueue's marks on a Pod mean for gpu-class, and the Kueue objects that keep
Kueue's flavor order and a class's order the same. Pure.

Kueue counts a workload's GPUs from its pod template when the workload is created, and merges
the admitted flavor's nodeLabels into the template's nodeSelector when it starts it (Kueue
v0.19.2: pkg/controller/jobs/job PodSets, pkg/podset Merge). So gpu-class decides a queued Job at
the Job (workload.py), and at Pod creation it leaves that decision alone where the Pod's own node
constraints still carry it (provenance.py): a narrower affinity written then could disagree with the
flavor and leave a Pod Pending while its Workload holds quota.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from .ask import PODSET_LABEL as PODSET_LABEL  # read on the Pod by ask.py; tests and docs find it here
from .ask import Gpus, Malformed, PodAsk
from .catalog import Catalog, GpuClass
from .inventory import TYPES_ANNOTATION, split_types

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # on a workload (a Job) or a plain Pod Kueue queues


# --- the rules for a Pod Kueue started (its PODSET_LABEL, as ask.py read it) ------------


def uncounted_gpus(ask: PodAsk, resource: str, gpus: Gpus) -> str | None:
    """The message refusing a Pod Kueue started, or one whose parent's templates Kueue counted (a
    StatefulSet's or LeaderWorkerSet's, gated until Kueue admits them), when only gpu-class would give it
    its GPUs, or None."""
    if not ((ask.kueue_started or ask.counted_at_parent) and gpus.set_limit):
        return None
    return (
        f"gpu-class: Kueue started this Pod's workload and counted its quota from the pod template, which asks for "
        f"no {resource}; gpu-class would add {gpus.count} here, GPUs the quota never counted. Queue it as a kind "
        f"gpu-class decides at the workload, where Kueue counts it (docs/users/kueue.md), or write the limit ({resource}: "
        f"{gpus.count}) in the workload's pod template"
    )


def flavor_disagreement(ask: PodAsk, required: Sequence[tuple[str, Sequence[str]]], class_name: str) -> str | None:
    """The message refusing a Pod Kueue started whose nodeSelector (Kueue's flavor) names a product its
    class does not allow now, or None. Admitted, such a Pod would wait Pending for good while holding quota.
    A nodeSelector that is not an object is the planner's to refuse, as a malformed Pod."""
    if not ask.kueue_started or isinstance(ask.node_selector, Malformed):
        return None
    for key, products in required:
        value = ask.node_selector.get(key)
        if isinstance(value, str) and value not in products:
            return (f"gpu-class: the Pod's nodeSelector (its Kueue flavor's nodeLabels) asks for {key}={value}, which "
                    f"class {class_name} cannot place on now (it allows {', '.join(products)}); give the workload a "
                    f"ClusterQueue whose flavors are its class's (gpuclass kueue prints them)")
    return None


# --- the objects `gpuclass kueue` prints --------------------------------------------------

_NOT_IN_NAME = re.compile(r"[^a-z0-9.-]+")


def flavor_name(product: str) -> str:
    """A ResourceFlavor's name for a product label value: the value, lower case, as a DNS name."""
    return _NOT_IN_NAME.sub("-", product.lower()).strip("-.")


def class_order(gpu_class: GpuClass) -> tuple[str, ...]:
    """The class's types in the order Kueue should try their flavors: fastest first for performance,
    slowest first for cost. balanced and binpack order by free share at admission, which a
    ClusterQueue's fixed order cannot follow: they keep the class's own order."""
    return tuple(reversed(gpu_class.types)) if gpu_class.strategy == "cost" else gpu_class.types


def flavors_of_type(catalog: Catalog, type_name: str) -> tuple[tuple[str, str], ...]:
    """(label key, exact value) of each flavor a type has. A glob names no one node label value,
    so it has no flavor (the caller says so)."""
    return tuple((key, value) for key, values in catalog.types[type_name].exact_values(catalog.product_labels)
                 for value in values)


KUEUE_MAX_FLAVORS = 64  # a ClusterQueue resource group's limit (Kueue v0.19.2's CRD)


def kueue_objects(catalog: Catalog, quota: int) -> tuple[list[dict[str, Any]], list[str]]:
    """One ResourceFlavor per exact product of a type some class uses, and per class a ClusterQueue
    `gpu-class-<class>` whose resource groups list those flavors in the class's order, `quota` of
    each GPU resource; and notes on what could not be expressed.

    Two types of a class can share a product value (MIG slices of one GPU under the mixed
    strategy): one flavor stands for both, in the place of the first. Kueue lets a flavor into one
    resource group of a queue only, so resources that share a flavor share a group; a Pod asks for
    one resource, so the order that matters is the order within its group.
    """
    notes: list[str] = []
    flavors: dict[str, dict[str, Any]] = {}
    queues: list[dict[str, Any]] = []
    for gpu_class in catalog.classes.values():
        order: dict[str, set[str]] = {}  # flavor name -> the resources its types are requested as
        for type_name in class_order(gpu_class):
            gpu_type = catalog.types[type_name]
            globs = [p for p in gpu_type.products if p not in gpu_type.exact_products]
            note = f"{type_name}: no flavor for {', '.join(globs)} (a glob); add one per product your nodes carry"
            if globs and note not in notes:
                notes.append(note)
            for key, value in flavors_of_type(catalog, type_name):
                name = flavor_name(value)
                flavor = flavors.setdefault(name, {
                    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                    "metadata": {"name": name, "annotations": {TYPES_ANNOTATION: ""}},
                    "spec": {"nodeLabels": {key: value}},
                })
                annotations = flavor["metadata"]["annotations"]
                named = split_types(annotations[TYPES_ANNOTATION])
                if type_name not in named:
                    annotations[TYPES_ANNOTATION] = ",".join((*named, type_name))
                order.setdefault(name, set()).add(gpu_type.resource)
        groups = []
        for resources, names in _resource_groups(order):
            if len(names) > KUEUE_MAX_FLAVORS:
                notes.append(f"class {gpu_class.name}: {len(names)} flavors of {', '.join(resources)}, more than the "
                             f"{KUEUE_MAX_FLAVORS} Kueue takes in one resource group; the last "
                             f"{len(names) - KUEUE_MAX_FLAVORS} are left out")
                names = names[:KUEUE_MAX_FLAVORS]
            groups.append({
                "coveredResources": resources,
                "flavors": [{"name": n, "resources": [{"name": r, "nominalQuota": quota} for r in resources]}
                            for n in names],
            })
        if not groups:
            notes.append(f"class {gpu_class.name}: no type has an exact product value; no ClusterQueue")
            continue
        queues.append({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": f"gpu-class-{gpu_class.name}"},
            "spec": {
                "namespaceSelector": {},
                # a flavor without quota left, or one that would need borrowing, passes to the next type
                "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"},
                "resourceGroups": groups,
            },
        })
    return [*flavors.values(), *queues], notes


def _resource_groups(order: Mapping[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """(resources, flavor names in order) per group: resources joined by any flavor they share."""
    groups: list[tuple[set[str], list[str]]] = []
    for name, resources in order.items():
        joined = [g for g in groups if g[0] & resources]
        merged: tuple[set[str], list[str]] = (set(resources), [])
        for g in joined:
            groups.remove(g)
            merged[0].update(g[0])
            merged[1].extend(g[1])
        merged[1].append(name)
        groups.append(merged)
    position = {name: i for i, name in enumerate(order)}
    return sorted(((sorted(r), sorted(names, key=position.__getitem__)) for r, names in groups),
                  key=lambda g: position[g[1][0]])
