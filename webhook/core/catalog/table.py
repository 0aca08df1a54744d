"""`gpuclass catalog -o table`: the catalog's types with their facts, and its classes, as text. Pure."""

from __future__ import annotations

from .model import PRECISIONS, Catalog, GpuClass, Need, capability_text, fastest_first


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _requires(need: Need) -> str:
    return f"requires {need.describe()}"


def _members(gpu_class: GpuClass) -> str:
    listed = ", ".join(gpu_class.types)
    return listed if gpu_class.requires is None else f"{_requires(gpu_class.requires)}: {listed}"


def render_catalog_table(catalog: Catalog) -> str:
    """Every type fastest first with what it is (facts the catalog does not give are `-`), then each class."""
    header = ("TYPE", "RESOURCE", "SCORE", "MEMORY-GIB", "ARCHITECTURE", "COMPUTE", "PRECISIONS", "BANDWIDTH-GBPS",
              "INTERCONNECT", "SCORE-BASIS")
    rows = [header]
    for name in fastest_first(list(catalog.types.values())):
        t = catalog.types[name]
        f = t.facts
        rows.append((t.name, t.resource, _number(t.score), _number(t.memory_gib),
                     f.architecture if f else "-",
                     capability_text(f.compute_capability) if f and f.compute_capability else "-",
                     ",".join(p for p in PRECISIONS if p in f.precisions) or "-" if f else "-",
                     _number(f.memory_bandwidth_gbps) if f else "-", (f.interconnect or "-") if f else "-",
                     (f.score_basis or "-") if f else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    classes = [("CLASS", "STRATEGY", "TYPES (fastest first)")] + [
        (c.name, c.strategy, _members(c)) for c in catalog.classes.values()]
    class_widths = [max(len(r[i]) for r in classes) for i in range(2)]
    lines += [""] + ["   ".join([r[0].ljust(class_widths[0]), r[1].ljust(class_widths[1]), r[2]]) for r in classes]
    return "\n".join(lines) + "\n"
