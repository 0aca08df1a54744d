"""`gpuclass inventory`: what GPU types the cluster has, how many GPUs are free, what each class can place now. Pure.

build_report() reads a Snapshot (file or one list of the cluster) and the Catalog; render_table()
and render_json() turn the report into text. The decisions are the webhook's and the extender's own:
a class's types are the planner's valid types for a one-GPU Pod (fit.class_fit, in its order),
kept where the extender's node check (extender.judge_node) finds a node with a free GPU now; its
Pending Pods are those the pending gauge counts (fidelity.placed_pending).

The JSON is a stable interface (docs/users/explain.md, "Ask the cluster"): keys are only ever added.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, TypedDict

from ..catalog.model import Catalog
from ..scheduling.extender import PodNeeds, judge_node
from .fidelity import placed_pending
from ..view.nodes import NodeInfo
from ..view.snapshot import Snapshot, placing_catalog
from ..admission.fit import class_fit

Output = Literal["table", "wide", "json"]
OUTPUTS: tuple[Output, ...] = ("table", "wide", "json")


class NodeCounts(TypedDict):
    total: int
    ready: int  # Ready condition True
    notReady: int
    cordoned: int  # spec.unschedulable, ready or not


class GpuCounts(TypedDict):
    """Over usable nodes only (ready, not cordoned, healthy for the type): `used` is what bound, unfinished Pods
    request there."""

    allocatable: int
    used: int
    free: int  # per node allocatable minus used, never below 0, added up


class ProductReport(TypedDict):
    labelKey: str
    product: str
    nodes: NodeCounts
    gpus: GpuCounts


class UnhealthyNode(TypedDict):
    name: str
    gpus: int  # devices of the type held out there
    reasons: list[str]  # why the node is unhealthy for the type; none: only some DRA devices are tainted


class UnhealthyReport(TypedDict):
    """Devices of the type held out of placement for their health (docs/operators/live-inventory.md, "Health")."""

    gpus: int
    nodes: list[UnhealthyNode]


class TypeReport(TypedDict):
    name: str
    resource: str
    nodes: NodeCounts
    gpus: GpuCounts
    products: list[ProductReport]
    # a product no type claims, made a type from its nodes' labels: scoreBasis says how it ranks
    placedByLabels: bool
    scoreBasis: str
    unhealthy: UnhealthyReport


class UnknownProduct(TypedDict):
    labelKey: str
    product: str
    nodes: int
    reason: str  # why its labels do not place it


class ClassReport(TypedDict):
    name: str
    strategy: str
    types: list[str]  # types a one-GPU Pod of the class can be placed on now, best first by its strategy
    maxGpusPerPod: int  # free GPUs of the best node of those types
    pending: int | None  # Pods gpu-class placed in the class that no node holds yet; None: Pods not read (a file)


class DraProblem(TypedDict):
    driver: str
    product: str  # the devices' productName ("" when they have none)
    devices: int
    nodes: int
    reason: str


class DraReport(TypedDict):
    off: str | None  # why DRA devices are not read; null when they are
    devices: int  # DRA devices on nodes (the newest generation of each pool)
    notPlaced: list[DraProblem]  # devices gpu-class does not place on, and why


class PoolReport(TypedDict):
    name: str  # the NodePool's
    type: str
    labelKey: str
    values: list[str]  # what its nodes will carry under labelKey
    taints: list[str]  # key=value:effect
    resource: str
    left: int | None  # devices of resource its limits leave; null: no limit


class PoolsReport(TypedDict):
    off: str | None  # why NodePools are not read (no Karpenter: not served); null when they are
    pools: list[PoolReport]


class InventoryReport(TypedDict):
    types: list[TypeReport]
    unknownProducts: list[UnknownProduct]
    classes: list[ClassReport]
    dra: DraReport
    nodePools: PoolsReport


UNKNOWN_PRODUCT_HINT = "no type claims them; add a whole-GPU product to a type's `products` (--config; see `gpuclass catalog`)"
LABEL_PLACED_HINT = ("no type claims them, their GPU Feature Discovery labels do (classes defined by `requires` take "
                     "them); add them to the catalog to rank them by their specifications")


def _resource(catalog: Catalog, type_name: str) -> str:
    """The extended resource a type's devices are requested as."""
    return catalog.types[type_name].resource


def _counts(nodes: Iterable[NodeInfo], type_name: str, snapshot: Snapshot, free: int) -> tuple[NodeCounts, GpuCounts]:
    members = list(nodes)
    usable = [(n, o) for n in members
              if n.schedulable and (o := n.offer(type_name)) is not None and not n.health_problems(type_name)]
    ready = sum(1 for n in members if n.ready)
    return (
        {"total": len(members), "ready": ready, "notReady": len(members) - ready,
         "cordoned": sum(1 for n in members if n.unschedulable)},
        {"allocatable": sum(o.allocatable for _, o in usable),
         "used": sum(snapshot.requested.get((n.name, o.resource), 0) for n, o in usable), "free": free},
    )


def _type_report(type_name: str, nodes: list[NodeInfo], snapshot: Snapshot, catalog: Catalog) -> TypeReport:
    # free GPUs as the snapshot summarised them per product group (what admissions and metrics read)
    free_of: dict[tuple[str, str], int] = {}  # nodes reserved by other taints are groups of their own
    for g in snapshot.groups(type_name):
        free_of[(g.label_key, g.product)] = free_of.get((g.label_key, g.product), 0) + g.free_gpus
    by_product: dict[tuple[str, str], list[NodeInfo]] = {}
    for n in nodes:
        offer = n.offer(type_name)
        assert offer is not None  # nodes are listed under the types they offer
        by_product.setdefault((offer.label_key, offer.value), []).append(n)
    products: list[ProductReport] = []
    for key, members in sorted(by_product.items()):
        free = free_of.get(key, 0)
        node_counts, gpu_counts = _counts(members, type_name, snapshot, free)
        products.append({"labelKey": key[0], "product": key[1], "nodes": node_counts, "gpus": gpu_counts})
    node_counts, gpu_counts = _counts(nodes, type_name, snapshot, sum(free_of.values()))
    facts = catalog.types[type_name].facts
    by_labels = facts is not None and facts.from_labels
    return {"name": type_name, "resource": _resource(catalog, type_name), "nodes": node_counts, "gpus": gpu_counts,
            "products": products, "placedByLabels": by_labels, "scoreBasis": facts.score_basis if facts else "",
            "unhealthy": unhealthy_report(type_name, nodes)}


def unhealthy_report(type_name: str, nodes: Iterable[NodeInfo]) -> UnhealthyReport:
    """The nodes of the type with devices held out for health, by name, with why."""
    found = [UnhealthyNode(name=n.name, gpus=n.unhealthy_gpus(type_name), reasons=list(n.health_problems(type_name)))
             for n in sorted(nodes, key=lambda n: n.name) if n.unhealthy_gpus(type_name) or n.health_problems(type_name)]
    return {"gpus": sum(u["gpus"] for u in found), "nodes": found}


def _class_report(class_name: str, snapshot: Snapshot, catalog: Catalog, by_type: Mapping[str, list[NodeInfo]],
                  pending: Mapping[str, int] | None) -> ClassReport:
    gpu_class = catalog.classes[class_name]
    valid = class_fit(gpu_class, 1, frozenset(), snapshot, catalog).types
    free_by_type: dict[str, int] = {}
    for type_name in valid:
        needs = PodNeeds(types=(type_name,), gpus=1, class_name=class_name, resource=_resource(catalog, type_name))
        verdicts = [judge_node(n.name, n, needs, snapshot, from_cache=True) for n in by_type.get(type_name, ())]
        fitting = [v.free_gpus for v in verdicts if v.passed]
        if fitting:
            free_by_type[type_name] = max(fitting)
    return {
        "name": class_name,
        "strategy": gpu_class.strategy,
        "types": [t for t in valid if t in free_by_type],
        "maxGpusPerPod": max(free_by_type.values(), default=0),
        "pending": None if pending is None else pending[class_name],
    }


def build_report(snapshot: Snapshot, catalog: Catalog) -> InventoryReport:
    """Types with at least one node (fastest first), products no type claims, node pools, and each class's
    reach now."""
    catalog = placing_catalog(catalog, snapshot)
    by_type: dict[str, list[NodeInfo]] = {}
    for info in snapshot.nodes.values():
        for offer in info.offers:  # a mixed-MIG node is listed under each profile it offers
            by_type.setdefault(offer.type_name, []).append(info)
    order = sorted(catalog.types.values(), key=lambda t: (-t.score, -(t.memory_gib or 0), t.name))
    pending = placed_pending(snapshot, catalog)
    pending_now = None if pending is None else Counter(p.class_name or "" for p in pending)
    return {
        "types": [_type_report(t.name, by_type[t.name], snapshot, catalog) for t in order if t.name in by_type],
        "unknownProducts": [{"labelKey": g.label_key, "product": g.product, "nodes": g.nodes,
                             "reason": _unplaced_reason(snapshot, g.label_key, g.product)}
                            for g in snapshot.unknown_groups],
        "classes": [_class_report(name, snapshot, catalog, by_type, pending_now) for name in catalog.classes],
        "dra": {"off": snapshot.dra.off, "devices": snapshot.dra.devices,
                "notPlaced": [{"driver": p.driver, "product": p.product, "devices": p.devices, "nodes": p.nodes,
                               "reason": p.reason} for p in snapshot.dra.problems]},
        "nodePools": {"off": snapshot.pools_off, "pools": [
            {"name": p.name, "type": p.type_name, "labelKey": p.label_key, "values": list(p.values),
             "taints": [f"{t.key}={t.value}:{t.effect}" for t in p.taints], "resource": p.resource, "left": p.left}
            for t in order for p in snapshot.pools(t.name)]},
    }


def _unplaced_reason(snapshot: Snapshot, label_key: str, product: str) -> str:
    """Why the labels of a product's nodes do not place it (the first node's: GFD labels its nodes alike)."""
    for info in snapshot.nodes.values():
        if (info.label_key, info.product) == (label_key, product) and info.label_type is not None:
            return info.label_type.problem
    return ""


# --- rendering ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    header: tuple[str, ...]
    rows: list[tuple[str, ...]]

    def lines(self) -> list[str]:
        widths = [max(len(r[i]) for r in [self.header, *self.rows]) for i in range(len(self.header))]
        return ["   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [self.header, *self.rows]]


def _figures(nodes: NodeCounts, gpus: GpuCounts) -> tuple[str, ...]:
    return tuple(str(v) for v in (nodes["total"], nodes["ready"], nodes["notReady"], nodes["cordoned"],
                                  gpus["allocatable"], gpus["used"], gpus["free"]))


FIGURES = ("NODES", "READY", "NOT-READY", "CORDONED", "ALLOCATABLE", "USED", "FREE")


def render_table(report: InventoryReport, *, wide: bool = False) -> str:
    if wide:
        types = _Table(("TYPE", "RESOURCE", "LABEL-KEY", "PRODUCT", *FIGURES), [])
        for t in report["types"]:
            for p in t["products"]:
                types.rows.append((t["name"], t["resource"], p["labelKey"], p["product"], *_figures(p["nodes"], p["gpus"])))
    else:
        types = _Table(("TYPE", "RESOURCE", *FIGURES),
                       [(t["name"] + ("*" if t["placedByLabels"] else ""), t["resource"],
                         *_figures(t["nodes"], t["gpus"])) for t in report["types"]])
    lines = types.lines() if report["types"] else ["No GPU nodes of any catalog type."]
    by_labels = [t for t in report["types"] if t["placedByLabels"]]
    if by_labels:
        lines += ["", f"* placed by its labels: {LABEL_PLACED_HINT}."]
        lines += [f"  {t['name']}: {t['scoreBasis']}" for t in by_labels]
    if report["unknownProducts"]:
        lines += ["", f"Unknown products: {UNKNOWN_PRODUCT_HINT}."]
        unknown = _Table(("LABEL-KEY", "PRODUCT", "NODES", "WHY NOT PLACED BY ITS LABELS"),
                         [(u["labelKey"], u["product"], str(u["nodes"]), u["reason"] or "-")
                          for u in report["unknownProducts"]])
        lines += unknown.lines()
    lines += _unhealthy_lines(report["types"])
    dra = report["dra"]
    if dra["off"]:
        lines += ["", f"DRA: off ({dra['off']})."]
    if dra["notPlaced"]:
        lines += ["", f"DRA devices gpu-class does not place on ({sum(p['devices'] for p in dra['notPlaced'])} of "
                      f"{dra['devices']}):"]
        lines += _Table(("DRIVER", "PRODUCT", "DEVICES", "NODES", "WHY"),
                        [(p["driver"], p["product"] or "-", str(p["devices"]), str(p["nodes"]), p["reason"])
                         for p in dra["notPlaced"]]).lines()
    pools = report["nodePools"]["pools"]
    if pools:
        lines += ["", "Node pools that can create GPU nodes (Karpenter NodePools):"]
        lines += _Table(("NODEPOOL", "TYPE", "VALUES", "GPUS-LEFT", "TAINTS"),
                        [(p["name"], p["type"], ", ".join(p["values"]), "no limit" if p["left"] is None else
                          f"{p['left']} {p['resource']}", ", ".join(p["taints"]) or "-") for p in pools]).lines()
    classes = _Table(("CLASS", "STRATEGY", "MAX-GPUS-PER-POD", "PENDING", "TYPES (placeable now, best first)"),
                     [(c["name"], c["strategy"], str(c["maxGpusPerPod"]), "-" if c["pending"] is None else str(c["pending"]),
                       ", ".join(c["types"]) or "(none)") for c in report["classes"]])
    return "\n".join([*lines, "", *classes.lines()])


def _unhealthy_lines(types: Iterable[TypeReport]) -> list[str]:
    rows: list[tuple[str, ...]] = [
        (t["name"], u["name"], str(u["gpus"]), "; ".join(u["reasons"]) or "tainted DRA devices")
        for t in types for u in t["unhealthy"]["nodes"]]
    if not rows:
        return []
    total = sum(t["unhealthy"]["gpus"] for t in types)
    return ["", f"Unhealthy GPUs ({total}), counted as no room; class Pods are kept off the nodes with a reason:",
            *_Table(("TYPE", "NODE", "GPUS", "WHY"), rows).lines()]


def render_json(report: InventoryReport) -> str:
    return json.dumps(report, indent=2)


def render(report: InventoryReport, output: Output) -> str:
    return render_json(report) if output == "json" else render_table(report, wide=output == "wide")
