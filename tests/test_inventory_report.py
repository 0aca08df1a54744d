"""`gpuclass inventory`'s report: node and GPU counts per type, unknown products, what each class can place now."""

from __future__ import annotations

import json
from typing import Any, Sequence

import pytest

from builders import make_catalog, make_node, make_unbound_pod
from webhook.core.catalog.model import Catalog
from webhook.core.view.inventory import InventoryState
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.snapshot import Snapshot
from webhook.core.reports.inventory_report import build_report, render, render_table

CATALOG = make_catalog()
H100, A100, T4, L4 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB", "Tesla-T4", "NVIDIA-L4"


def snapshot_of(nodes: Sequence[dict[str, Any]], used: dict[str, int] | None = None,
                catalog: Catalog = CATALOG) -> Snapshot:
    """The snapshot the watch would publish for these nodes and GPUs held by bound Pods (node -> GPUs)."""
    state = InventoryState(catalog=catalog, synced=True)
    state.replace_nodes(i for i in (node_info_from_object(n, catalog) for n in nodes) if i is not None)
    state.replace_pods((f"ns/p-{node}", node, {catalog.gpu_resource: gpus}) for node, gpus in (used or {}).items())
    return state.publish()


def type_row(report: Any, name: str) -> dict[str, Any]:
    return next(t for t in report["types"] if t["name"] == name)


def class_row(report: Any, name: str) -> dict[str, Any]:
    return next(c for c in report["classes"] if c["name"] == name)


@pytest.mark.parametrize("nodes, used, expected_nodes, expected_gpus", [
    pytest.param([make_node("a", H100, gpus=8)], {}, (1, 1, 0, 0), (8, 0, 8), id="one-idle-node"),
    pytest.param([make_node("a", H100, gpus=8), make_node("b", H100, gpus=8)], {"a": 3, "b": 8},
                 (2, 2, 0, 0), (16, 11, 5), id="used-by-bound-pods"),
    pytest.param([make_node("a", H100, gpus=8), make_node("b", H100, gpus=4, unschedulable=True)], {"b": 2},
                 (2, 2, 0, 1), (8, 0, 8), id="cordoned-node-counts-no-gpus"),
    pytest.param([make_node("a", H100, gpus=8), make_node("b", H100, gpus=4, ready=False)], {},
                 (2, 1, 1, 0), (8, 0, 8), id="not-ready-node-counts-no-gpus"),
    pytest.param([make_node("a", H100, gpus=8, ready=False, unschedulable=True)], {},
                 (1, 0, 1, 1), (0, 0, 0), id="cordoned-counts-not-ready-nodes-too"),
    pytest.param([make_node("a", H100, gpus=2)], {"a": 5}, (1, 1, 0, 0), (2, 5, 0), id="overcommitted-free-not-negative"),
    pytest.param([make_node("a", H100, gpus=8), make_node("b", "NVIDIA-H100-PCIe-80GB", gpus=2, label_key="gpu-type")],
                 {}, (2, 2, 0, 0), (10, 0, 10), id="products-and-label-keys-add-up"),
])
def test_type_counts(nodes: list[dict[str, Any]], used: dict[str, int], expected_nodes: tuple[int, ...],
                     expected_gpus: tuple[int, ...]) -> None:
    row = type_row(build_report(snapshot_of(nodes, used), CATALOG), "H100")
    assert tuple(row["nodes"].values()) == expected_nodes and list(row["nodes"]) == ["total", "ready", "notReady", "cordoned"]
    assert tuple(row["gpus"].values()) == expected_gpus and list(row["gpus"]) == ["allocatable", "used", "free"]
    assert row["resource"] == "nvidia.com/gpu"
    assert sum(p["nodes"]["total"] for p in row["products"]) == expected_nodes[0]
    assert sum(p["gpus"]["free"] for p in row["products"]) == expected_gpus[2]


def test_only_types_with_nodes_fastest_first_and_unknown_products_with_their_key() -> None:
    nodes = [make_node("t4", T4, gpus=1), make_node("a100", A100, gpus=4), make_node("h100", H100),
             make_node("rtx", "NVIDIA-GeForce-RTX-5090", gpus=1), make_node("rtx2", "NVIDIA-GeForce-RTX-5090", gpus=1),
             make_node("mig", "A100-SXM4-40GB-MIG-1g.5gb", label_key="gpu-type"), make_node("cpu")]
    report = build_report(snapshot_of(nodes), CATALOG)
    assert [t["name"] for t in report["types"]] == ["H100", "A100", "T4"]
    assert report["unknownProducts"] == [
        {"labelKey": "gpu-type", "product": "A100-SXM4-40GB-MIG-1g.5gb", "nodes": 1,
         "reason": "too little information: its labels lack nvidia.com/gpu.family, nvidia.com/gpu.compute.major, "
                   "nvidia.com/gpu.compute.minor, nvidia.com/gpu.memory or have them unreadable"},
        {"labelKey": "nvidia.com/gpu.product", "product": "NVIDIA-GeForce-RTX-5090", "nodes": 2,
         "reason": "too little information: its labels lack nvidia.com/gpu.family, nvidia.com/gpu.compute.major, "
                   "nvidia.com/gpu.compute.minor, nvidia.com/gpu.memory or have them unreadable"},
    ]
    assert "Unknown products: no type claims them; add a whole-GPU product to a type's `products`" in render_table(report)


@pytest.mark.parametrize("class_name, nodes, used, types, max_gpus", [
    pytest.param("high", [make_node("h", H100, gpus=8), make_node("a", A100, gpus=4)], {"h": 2},
                 ["H100", "A100"], 6, id="performance-fastest-first-max-is-best-node-free"),
    pytest.param("high", [make_node("h", H100, gpus=8), make_node("a", A100, gpus=4)], {"h": 8},
                 ["A100"], 4, id="full-type-not-placeable-now"),
    pytest.param("high", [make_node("h", H100, gpus=8, unschedulable=True)], {}, [], 0, id="cordoned-only"),
    pytest.param("high", [make_node("h1", H100, gpus=8), make_node("h2", H100, gpus=8)], {"h1": 1, "h2": 6},
                 ["H100"], 7, id="max-is-one-node-not-the-sum"),
    pytest.param("economy", [make_node("t", T4, gpus=1), make_node("l", L4, gpus=4)], {},
                 ["T4", "L4"], 4, id="cost-slowest-first"),
    pytest.param("balanced", [make_node("a", A100, gpus=4), make_node("l", L4, gpus=8), make_node("t", T4, gpus=2)],
                 {"l": 6}, ["A100", "T4", "L4"], 4, id="balanced-largest-share-free-first"),
    pytest.param("packed", [make_node("a", A100, gpus=4), make_node("l", L4, gpus=8), make_node("t", T4, gpus=2)],
                 {"l": 6}, ["L4", "A100", "T4"], 4, id="binpack-smallest-share-free-first"),
    pytest.param("scalable", [make_node("t", T4, gpus=1)], {}, ["T4"], 1, id="scalable-pool-at-zero-has-no-node-now"),
])
def test_class_reach(class_name: str, nodes: list[dict[str, Any]], used: dict[str, int], types: list[str],
                     max_gpus: int) -> None:
    row = class_row(build_report(snapshot_of(nodes, used), CATALOG), class_name)
    assert row["types"] == types
    assert row["maxGpusPerPod"] == max_gpus


def test_every_class_is_listed_in_catalog_order() -> None:
    report = build_report(snapshot_of([make_node("h", H100)]), CATALOG)
    assert [c["name"] for c in report["classes"]] == list(CATALOG.classes)


def test_json_is_the_report_and_the_tables_show_its_figures() -> None:
    nodes = [make_node("h", H100, gpus=8), make_node("h2", "NVIDIA-H100-PCIe", gpus=2, label_key="gpu-type")]
    report = build_report(snapshot_of(nodes, {"h": 3}), CATALOG)
    assert json.loads(render(report, "json")) == report
    table = render(report, "table").splitlines()
    assert table[0].split() == ["TYPE", "RESOURCE", "NODES", "READY", "NOT-READY", "CORDONED", "ALLOCATABLE", "USED", "FREE"]
    assert table[1].split() == ["H100", "nvidia.com/gpu", "2", "2", "0", "0", "10", "3", "7"]
    wide = render(report, "wide").splitlines()
    assert wide[1].split() == ["H100", "nvidia.com/gpu", "gpu-type", "NVIDIA-H100-PCIe", "1", "1", "0", "0", "2", "0", "2"]
    assert wide[2].split() == ["H100", "nvidia.com/gpu", "nvidia.com/gpu.product", H100, "1", "1", "0", "0", "8", "3", "5"]
    high = next(line for line in table if line.startswith("high "))
    assert high.split() == ["high", "performance", "5", "-", "H100"]  # no Pods read: Pending unknown


def test_pending_is_the_placed_pods_no_node_holds_per_class() -> None:
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=True)
    state.replace_nodes([i for i in [node_info_from_object(make_node("h", H100, gpus=8), CATALOG)] if i is not None])
    state.replace_unbound_pods([
        make_unbound_pod("a", "high"), make_unbound_pod("b", "high", ("H100", "A100")), make_unbound_pod("c", "economy", ("T4",)),
        make_unbound_pod("not-placed", "high", ()),  # no gpu-class.io/types: gpu-class did not place it
        make_unbound_pod("gated", "high", gated=True),  # held by a queue, not waiting for a node
        make_unbound_pod("unknown-class", "turbo"),
    ])
    report = build_report(state.publish(), CATALOG)
    assert {c["name"]: c["pending"] for c in report["classes"]} == {name: {"high": 2, "economy": 1}.get(name, 0)
                                                                    for name in CATALOG.classes}
    header, *rows = render_table(report).split("\n\n")[-1].splitlines()
    assert header.split()[:4] == ["CLASS", "STRATEGY", "MAX-GPUS-PER-POD", "PENDING"]
    assert next(r for r in rows if r.startswith("high ")).split()[:4] == ["high", "performance", "8", "2"]


def test_the_cli_offers_the_report_outputs() -> None:
    from webhook.cli import inventory as cli
    from webhook.core.reports.inventory_report import OUTPUTS

    assert cli.OUTPUTS == OUTPUTS


def test_dra_devices_count_like_device_plugin_gpus_and_the_rest_is_listed_with_why() -> None:
    """A mixed cluster: one H100 node by its device plugin, one by NVIDIA's DRA driver (no GFD labels),
    and devices gpu-class does not place on. Claims hold DRA devices as bound Pods hold the plugin's."""
    from builders import (NVIDIA_DRIVER, amd_device_class, amd_gpus, make_bare_node, make_claim, make_slice,
                          nvidia_device_classes, nvidia_gpus)
    from webhook.core.catalog.loading import load_default_catalog
    from webhook.core.view.inventory import build_snapshot

    catalog = load_default_catalog()
    objects = [make_node("dp", H100, gpus=8), make_bare_node("dra"), make_bare_node("amd"),
               make_slice("dra", nvidia_gpus(4)), make_slice("amd", amd_gpus(8), driver="gpu.amd.com"),
               make_slice("dra", nvidia_gpus(1, "NVIDIA GeForce RTX 5090", start=4), driver=NVIDIA_DRIVER,
                          name="dra-2", pool="dra-other"),
               *nvidia_device_classes(), amd_device_class(),
               make_claim("c", [(NVIDIA_DRIVER, "dra", "gpu-0")])]
    report = build_report(build_snapshot(catalog, objects), catalog)
    row = type_row(report, "H100")
    assert row["gpus"] == {"allocatable": 12, "used": 1, "free": 11} and row["nodes"]["total"] == 2
    assert [(p["labelKey"], p["product"], p["gpus"]["allocatable"]) for p in row["products"]] == [
        ("kubernetes.io/hostname", "dra", 4), ("nvidia.com/gpu.product", H100, 8)]
    assert report["dra"]["off"] is None and report["dra"]["devices"] == 13
    assert [(p["driver"], p["product"], p["devices"], p["nodes"]) for p in report["dra"]["notPlaced"]] == [
        ("gpu.amd.com", "AMD_Instinct_MI300X_OAM", 8, 1), (NVIDIA_DRIVER, "NVIDIA GeForce RTX 5090", 1, 1)]
    table = render_table(report)
    assert "DRA devices gpu-class does not place on (9 of 13):" in table
    assert any(line.split()[:3] == ["gpu.amd.com", "AMD_Instinct_MI300X_OAM", "8"] and
               "no DeviceClass maps amd.com/gpu" in line for line in table.splitlines())


def test_dra_off_is_said() -> None:
    import dataclasses

    from webhook.core.view.dra import DraView

    snapshot = dataclasses.replace(snapshot_of([make_node("h", H100)]), dra=DraView(off="not served"))
    assert "DRA: off (not served)." in render_table(build_report(snapshot, CATALOG))
