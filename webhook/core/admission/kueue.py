"""Beside Kueue: what Kueue's marks on a Pod mean for gpu-class, and the Kueue objects that keep
Kueue's flavor order and a class's order the same. Pure.

Kueue counts a workload's GPUs from its pod template when the workload is created, and merges
the admitted flavor's nodeLabels into the template's nodeSelector when it starts it (Kueue
v0.19.2: pkg/controller/jobs/job PodSets, pkg/podset Merge). So gpu-class decides a queued Job at
the Job (workload.py), and at Pod creation it leaves that decision alone where the Pod's own node
constraints still carry it (provenance.py): a narrower affinity written then could disagree with the
flavor and leave a Pod Pending while its Workload holds quota.

A Pod Kueue started that gpu-class decides in full meets Kueue's rules at two points of the admission:
its count, with the other values it asks (need.py: GPUs gpu-class would add were never counted), and its
flavor, once the fit says which products its class allows now (check_flavor, a step of its own).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..catalog.model import Catalog, GpuClass
from ..view.namespaces import NamespaceInfo
from ..view.nodes import NodeInfo
from ..view.pods import TYPES_ANNOTATION, split_types
from ..view.snapshot import Snapshot, placing_catalog
from .ask import PODSET_LABEL as PODSET_LABEL  # read on the Pod by ask.py; tests and docs find it here
from .ask import PodAsk
from .decision import MALFORMED, Decision
from .fit import Fitted
from .order import Ordered
from .shape import Malformed

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # on a workload (a Job) or a plain Pod Kueue queues


# --- the rule for a Pod Kueue started (its PODSET_LABEL, as ask.py read it) ------------


def check_flavor(ask: PodAsk, gpu_class: GpuClass, fitted: Fitted, ordered: Ordered) -> Decision | None:
    """Kueue's step of an admission: the refusal of a Pod Kueue started whose nodeSelector (Kueue's flavor) is
    not an object, or names a product its class does not allow now; None for any other Pod."""
    if not ask.kueue_started:
        return None
    if isinstance(ask.node_selector, Malformed):
        return Decision("refused", MALFORMED + ask.node_selector.message)
    fit = fitted.fit
    disagreement = flavor_disagreement(ask, fit.required, gpu_class.name)
    if disagreement is None:
        return None
    return Decision("refused", disagreement, class_name=gpu_class.name, warnings=ordered.warnings,
                    verdicts=fit.verdicts, resource=fit.resource, resource_notes=fit.resource_notes)


def flavor_disagreement(ask: PodAsk, required: Sequence[tuple[str, Sequence[str]]], class_name: str) -> str | None:
    """The message refusing a Pod Kueue started whose nodeSelector (Kueue's flavor) names a product its
    class does not allow now, or None. Admitted, such a Pod would wait Pending for good while holding quota.
    A nodeSelector that is not an object is refused as a malformed Pod (check_flavor)."""
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
#
# Quota lives in Cohorts, never in a class's ClusterQueue: a flavor sits in the queue of every class
# that has its type, so quota written per queue would be promised once per class (and per tenant).
# Each queue has nominalQuota 0 and borrows from its cohort; Kueue's flavor assigner, with
# whenCanBorrow TryNextFlavor, takes the flavor whose quota is nearest in the cohort tree and, among
# flavors equally near, the first in the queue's order (Kueue v0.19.2
# pkg/scheduler/flavorassigner/flavorassigner.go isPreferred, shouldTryNextFlavor). So a tenant's
# Jobs take its own quota in the class's order, then what other tenants leave unused.

ROOT_COHORT = "gpu-class"
KUEUE_MAX_FLAVORS = 64  # a resource group's limit (Kueue v0.19.2's CRDs: ClusterQueue and Cohort)
KUEUE_MAX_NAME = 253  # a ResourceFlavor's name is a DNS subdomain
_NOT_IN_NAME = re.compile(r"[^a-z0-9.-]+")
_DIGEST_HEX = 8


@dataclass(frozen=True)
class Flavor:
    """One node label (key, exact value) that names a GPU type: what a ResourceFlavor's nodeLabels hold."""

    key: str
    value: str


@dataclass(frozen=True)
class Tenant:
    """A team whose namespaces share one cohort of quota (`gpuclass kueue --tenant NAME=NS[,NS...]`)."""

    name: str
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class Supply:
    """The flavors of each type, and the devices each (flavor, resource) has in all: what the queues share."""

    flavors: Mapping[str, tuple[Flavor, ...]]  # type name -> its flavors, in the catalog's order
    devices: Mapping[tuple[Flavor, str], int]  # (flavor, resource) -> devices
    notes: tuple[str, ...] = ()  # what has no flavor, and why


def flavor_name(flavor: Flavor, catalog: Catalog) -> str:
    """A ResourceFlavor's name: the value as a DNS name when that is the value itself, under the
    catalog's first product label; else that name and a digest of the exact key and value.

    Products that differ only in case or in `_`/`-` (or one value under two keys) are different
    labels that select different nodes: their flavors must never merge. The name depends only on
    the label, never on what else the catalog holds, so adding a product renames no flavor."""
    labels = [part.strip("-") for part in _NOT_IN_NAME.sub("-", flavor.value.lower()).split(".")]
    readable = ".".join(part for part in labels if part) or "gpu"
    if readable == flavor.value and flavor.key == catalog.product_labels[0] and len(readable) <= KUEUE_MAX_NAME:
        return readable
    digest = hashlib.sha256(f"{flavor.key}={flavor.value}".encode()).hexdigest()[:_DIGEST_HEX]
    return f"{readable[:KUEUE_MAX_NAME - _DIGEST_HEX - 1].rstrip('-.')}-{digest}"


def class_order(gpu_class: GpuClass) -> tuple[str, ...]:
    """The class's types in the order Kueue should try their flavors: fastest first for performance,
    slowest first for cost. balanced and binpack order by free share at admission, which a
    ClusterQueue's fixed order cannot follow: they keep the class's own order."""
    return tuple(reversed(gpu_class.types)) if gpu_class.strategy == "cost" else gpu_class.types


def supply_from_catalog(catalog: Catalog, devices: int, label_key: str | None = None) -> Supply:
    """Without a cluster to read: a flavor per exact product of each type, under `label_key` (the key
    the cluster's nodes carry; default the catalog's first product label), or under the keys of a
    type's own `match` that are `label_key` or no product label, `devices` of each. A glob names no one label value: it gets no flavor, and a note."""
    key = label_key or catalog.product_labels[0]
    flavors: dict[str, tuple[Flavor, ...]] = {}
    notes = []
    for name, gpu_type in catalog.types.items():
        # a `match` may name the product under every product label: the nodes carry only `key`
        values = ((key, gpu_type.exact_products),) if gpu_type.products else tuple(
            (k, vs) for k, vs in gpu_type.exact_values(catalog.product_labels)
            if k == key or k not in catalog.product_labels)
        flavors[name] = tuple(Flavor(k, v) for k, vs in values for v in vs)
        globs = [p for p in gpu_type.products if p not in gpu_type.exact_products]
        if globs:
            notes.append(f"{name}: no flavor for {', '.join(globs)} (a glob); add one per product your nodes carry, "
                         f"or read them from the cluster (--nodes, --kubeconfig)")
    amounts = {(f, catalog.types[t].resource): devices for t, fs in flavors.items() for f in fs}
    return Supply(flavors, amounts, tuple(notes))


def supply_from_snapshot(catalog: Catalog, snapshot: Snapshot) -> Supply:
    """From the cluster: a flavor per (label key, value) by which gpu-class knows a node's type (the
    first product label a node carries, or a type's own `match`; a product no type claims by the type
    its labels make: placing_catalog), with the devices Pods could be given there: quota for what Pods
    can use, so a node cordoned, not ready, or reserved by a taint of its own gives its type a flavor
    but no quota (each said in a note). DRA devices are claimed, not requested as a resource Kueue
    counts: they get no flavor."""
    flavors: dict[str, dict[Flavor, None]] = {name: {} for name in placing_catalog(catalog, snapshot).types}
    amounts: dict[tuple[Flavor, str], int] = {}
    left_out: dict[str, list[str]] = {}  # why -> nodes
    for node in sorted(snapshot.nodes.values(), key=lambda n: n.name):
        why = _not_for_quota(node)
        for offer in node.offers:
            if offer.dra:
                continue
            flavor = Flavor(offer.label_key, offer.value)
            flavors[offer.type_name][flavor] = None
            amounts.setdefault((flavor, offer.resource), 0)
            if why is None:
                amounts[(flavor, offer.resource)] += offer.allocatable
            elif offer.allocatable:
                left_out.setdefault(why, []).append(node.name)
    absent = [name for name, fs in flavors.items() if not fs and name in catalog.types]
    notes = [f"no node in the cluster is {', '.join(absent)}"] if absent else []
    notes += [f"no quota for the GPUs of {len(set(nodes))} node(s) {why}: {_some(sorted(set(nodes)))}"
              for why, nodes in sorted(left_out.items())]
    return Supply({name: tuple(sorted(fs, key=lambda f: (f.key, f.value))) for name, fs in flavors.items()},
                  amounts, tuple(notes))


def _not_for_quota(node: NodeInfo) -> str | None:
    """Why no namespace's Pods could be given this node's GPUs now; None when they could."""
    if not node.ready:
        return "not ready"
    if node.unschedulable:
        return "cordoned"
    if node.reserved:
        return "reserved by a taint of their own (" + ", ".join(sorted({t.key for t in node.reserved})) + ")"
    return None


def _some(names: Sequence[str], most: int = 5) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def queue_name(gpu_class: str, tenant: Tenant | None, root: str = ROOT_COHORT) -> str:
    """A class's ClusterQueue: `<root>-<class>`, or `<root>-<tenant>-<class>` for a tenant's."""
    return f"{root}-{gpu_class}" if tenant is None else f"{root}-{tenant.name}-{gpu_class}"


def share(total: int, parts: int, index: int) -> int:
    """Part `index` of `total` split in `parts` that differ by one at most and add up to `total`."""
    return total // parts + (1 if index < total % parts else 0)


def kueue_objects(catalog: Catalog, supply: Supply, tenants: Sequence[Tenant] = (), root: str = ROOT_COHORT,
                  namespaces: Mapping[str, NamespaceInfo] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """ResourceFlavors of the supply's flavors; the cohorts that hold its devices as quota; per class
    (and tenant) a ClusterQueue listing the class's flavors in the class's order; per tenant and class
    a LocalQueue named after the class in each of the tenant's namespaces that allows the class (its
    gpu-class.io/allowed-classes, where `namespaces` holds it; a class none of them allows gets no queue of
    the tenant's). And notes on what could not be expressed.

    Without tenants, cohort `root` holds all the quota and every namespace may use the class queues.
    With tenants, cohort `<root>-<tenant>` holds the tenant's share of each flavor (the devices split
    evenly, the remainders going round), under cohort `root`: the shares add up to the supply, and
    unused quota is lent within the root. The names start with `root`, so two sets can live side by side.

    Two types of a class can share a label value (MIG slices of one GPU under the mixed strategy):
    one flavor stands for both, in the place of the first. Kueue lets a flavor into one resource
    group of a queue only, so resources that share a flavor share a group; a Pod asks for one
    resource, so the order that matters is the order within its group."""
    notes = list(supply.notes)
    names = {f: flavor_name(f, catalog) for fs in supply.flavors.values() for f in fs}
    flavors, class_groups, resources_of = _class_flavors(catalog, supply, names, notes)
    by_name = {names[f]: f for f in flavors}
    cohort_groups = _resource_groups(resources_of)
    shares = _shares(cohort_groups, {(n, r): supply.devices.get((by_name[n], r), 0) for n in by_name
                                     for r in resources_of[n]}, max(len(tenants), 1))
    objects: list[dict[str, Any]] = [*flavors.values()]
    owners: list[tuple[Tenant | None, str]] = [(None, root)] if not tenants else [
        (t, f"{root}-{t.name}") for t in tenants]
    if tenants:
        objects.append(_cohort(root, None, []))
    for index, (tenant, cohort) in enumerate(owners):
        objects += _cohorts(cohort, root if tenant else None, cohort_groups, shares, index)
        for class_name, groups in class_groups.items():
            allowing = None if tenant is None else _allowing(tenant, class_name, namespaces)
            if tenant is not None and not allowing:
                notes.append(f"tenant {tenant.name}: none of its namespaces allows class {class_name} "
                             "(gpu-class.io/allowed-classes): no queue of it")
                continue
            objects.append(_cluster_queue(queue_name(class_name, tenant, root), cohort, allowing, groups))
    for tenant in tenants:
        objects += [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"name": class_name, "namespace": namespace},
                     "spec": {"clusterQueue": queue_name(class_name, tenant, root)}}
                    for class_name in class_groups for namespace in _allowing(tenant, class_name, namespaces)]
    return objects, notes


def _allowing(tenant: Tenant, class_name: str, namespaces: Mapping[str, NamespaceInfo] | None) -> tuple[str, ...]:
    """The tenant's namespaces whose Pods may be of the class: all of them where the cluster's namespaces
    were not read or a namespace is not found (its policy unknown here; the tenant boundary still holds)."""
    def allows(name: str) -> bool:
        info = None if namespaces is None else namespaces.get(name)
        return info is None or info.allowed_classes is None or class_name in info.allowed_classes
    return tuple(n for n in tenant.namespaces if allows(n))


def _class_flavors(catalog: Catalog, supply: Supply, names: Mapping[Flavor, str], notes: list[str]) -> tuple[
        dict[Flavor, dict[str, Any]], dict[str, list[tuple[list[str], list[str]]]], dict[str, set[str]]]:
    """The ResourceFlavors, each naming the types it stands for; per class, its resource groups of flavor names in
    the class's order; per flavor name, the resources its types are requested as (for the cohorts' groups)."""
    flavors: dict[Flavor, dict[str, Any]] = {}
    class_groups: dict[str, list[tuple[list[str], list[str]]]] = {}
    resources_of: dict[str, set[str]] = {}
    for gpu_class in catalog.classes.values():
        order: dict[str, set[str]] = {}  # flavor name -> the resources its types are requested as
        for type_name in class_order(gpu_class):
            gpu_type = catalog.types[type_name]
            for f in supply.flavors.get(type_name, ()):
                flavor = flavors.setdefault(f, {
                    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                    "metadata": {"name": names[f], "annotations": {TYPES_ANNOTATION: ""}},
                    "spec": {"nodeLabels": {f.key: f.value}},
                })
                annotations = flavor["metadata"]["annotations"]
                named = split_types(annotations[TYPES_ANNOTATION])
                if type_name not in named:
                    annotations[TYPES_ANNOTATION] = ",".join((*named, type_name))
                order.setdefault(names[f], set()).add(gpu_type.resource)
                resources_of.setdefault(names[f], set()).add(gpu_type.resource)
        groups = _capped(_resource_groups(order), f"class {gpu_class.name}", notes)
        if groups:
            class_groups[gpu_class.name] = groups
        else:
            notes.append(f"class {gpu_class.name}: no type has a flavor; no ClusterQueue")
    return flavors, class_groups, resources_of


def _cohorts(cohort: str, parent: str | None, groups: list[tuple[list[str], list[str]]],
             shares: Mapping[tuple[str, str], list[int]], tenant_index: int) -> list[dict[str, Any]]:
    """The cohort that holds an owner's quota. A Cohort takes 64 flavors per resource group: the quota of more
    goes to cohorts under it (`<cohort>.2`, ...), which lend it up to it; its queues borrow it at the same distance."""
    pieces = max(((len(names) + KUEUE_MAX_FLAVORS - 1) // KUEUE_MAX_FLAVORS for _, names in groups), default=1)

    def quota(piece: int) -> list[dict[str, Any]]:
        return [{"coveredResources": resources, "flavors": [
            {"name": n, "resources": [{"name": r, "nominalQuota": shares[(n, r)][tenant_index]} for r in resources]}
            for n in names[piece * KUEUE_MAX_FLAVORS:(piece + 1) * KUEUE_MAX_FLAVORS]]}
            for resources, names in groups if len(names) > piece * KUEUE_MAX_FLAVORS]

    return [_cohort(cohort, parent, quota(0))] + [
        _cohort(f"{cohort}.{piece + 1}", cohort, quota(piece)) for piece in range(1, pieces)]


def _shares(groups: list[tuple[list[str], list[str]]], devices: Mapping[tuple[str, str], int],
            parts: int) -> dict[tuple[str, str], list[int]]:
    """(flavor name, resource) -> each part's devices. The remainders go round the parts, flavor after
    flavor, so that no part gets all of them."""
    shares = {}
    turn: dict[str, int] = {}  # per resource, whose turn it is for the next remainder
    for resources, names in groups:
        for n in names:
            for r in resources:
                total = devices.get((n, r), 0)
                start = turn.get(r, 0)
                shares[(n, r)] = [share(total, parts, (i - start) % parts) for i in range(parts)]
                turn[r] = (start + total % parts) % parts
    return shares


def _cohort(name: str, parent: str | None, groups: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if groups:
        spec["resourceGroups"] = groups
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def _cluster_queue(name: str, cohort: str, namespaces: tuple[str, ...] | None,
                   groups: list[tuple[list[str], list[str]]]) -> dict[str, Any]:
    selector: dict[str, Any] = {} if namespaces is None else {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": selector,
            # a flavor without quota left passes to the next type; quota nearer in the cohort tree first
            "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"},
            "resourceGroups": [{"coveredResources": resources, "flavors": [
                {"name": n, "resources": [{"name": r, "nominalQuota": 0} for r in resources]} for n in names]}
                for resources, names in groups],
        },
    }


def _capped(groups: list[tuple[list[str], list[str]]], owner: str,
            notes: list[str]) -> list[tuple[list[str], list[str]]]:
    """The groups, each cut to the flavors Kueue takes in one resource group, saying what was left out."""
    capped = []
    for resources, names in groups:
        if len(names) > KUEUE_MAX_FLAVORS:
            notes.append(f"{owner}: {len(names)} flavors of {', '.join(resources)}, more than the "
                         f"{KUEUE_MAX_FLAVORS} Kueue takes in one resource group; the last "
                         f"{len(names) - KUEUE_MAX_FLAVORS} are left out")
        capped.append((resources, names[:KUEUE_MAX_FLAVORS]))
    return capped


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
