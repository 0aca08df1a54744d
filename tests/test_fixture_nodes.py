"""GB200 and GB300 NVL72 trays as published (tests/fixtures/nodes, SOURCES.md) against the built-in catalog.

Each tray must be its type, offer its GPUs, read its memory per GPU as the catalog says, and be in the NVLink
domain its `nvidia.com/gpu.clique` label names. The fixtures mark every label their source does not print with
`# derived`; a test keeps those marks honest, so a derived value is never taken for a published one.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from builders import fixture_labels, make_device_node
from webhook.core.catalog.builtin import default_catalog_text
from webhook.core.catalog.loading import load_catalog_text, load_default_catalog
from webhook.core.view.nodes import GIB_MIB, NodeInfo, node_info_from_object

NODES = Path(__file__).parent / "fixtures" / "nodes"
BUILT_IN = load_default_catalog()
CLIQUE = "nvidia.com/gpu.clique"
GB200_FILE = "nvidia-gb200_oke-bm-gpu-gb200-4_clique_EXCERPT.yaml"
GB300_FILE = "nvidia-gb300_oke-bm-gpu-gb300-4_clique_EXCERPT.yaml"


@dataclass(frozen=True)
class Tray:
    file: str
    type_name: str
    clique: str  # as the source prints it
    derived: frozenset[str]  # the labels the source does not print (SOURCES.md says how GFD makes them)


TRAYS = [
    pytest.param(Tray(GB200_FILE, "GB200", "61248eac-4785-4fbf-9cbd-231635e37e9d.20663",
                      frozenset({"nvidia.com/gpu.product", "nvidia.com/gpu.count"})), id="gb200-oke"),
    pytest.param(Tray(GB300_FILE, "GB300", "a2221497-dbce-4964-8826-684c3694fd45.2478",
                      frozenset({"nvidia.com/gpu.product", "nvidia.com/gpu.count"})), id="gb300-oke"),
]


def tray_info(file: str, name: str = "tray-a", labels: dict[str, str] | None = None) -> NodeInfo:
    """The tray's labels on a Node offering as many GPUs as its gpu.count label says, reduced by the view."""
    labels = fixture_labels(file) if labels is None else labels
    node = make_device_node(name, labels, {"nvidia.com/gpu": labels["nvidia.com/gpu.count"]})
    info = node_info_from_object(node, BUILT_IN)
    assert info is not None, f"{file}: the view keeps no GPU node"
    return info


@pytest.mark.parametrize("tray", TRAYS)
def test_tray_is_its_type_and_offers_its_gpus(tray: Tray) -> None:
    labels = fixture_labels(tray.file)
    info = tray_info(tray.file)
    assert info.type_name == tray.type_name
    assert (info.label_key, info.product) == ("nvidia.com/gpu.product", labels["nvidia.com/gpu.product"])
    offer = info.offer(tray.type_name)
    assert offer is not None and offer.resource == "nvidia.com/gpu"
    assert offer.allocatable == int(labels["nvidia.com/gpu.count"]) == 4


@pytest.mark.parametrize("tray", TRAYS)
def test_tray_clique_is_its_nvlink_domain(tray: Tray) -> None:
    assert BUILT_IN.topology_labels == (CLIQUE,)
    labels = fixture_labels(tray.file)
    assert labels[CLIQUE] == tray.clique
    assert tray_info(tray.file).domain(CLIQUE) == tray.clique
    # GFD's form (k8s-device-plugin internal/lm/imex.go): NVML's cluster UUID, a dot, the clique ID in decimal
    cluster, clique_id = tray.clique.split(".")
    assert str(uuid.UUID(cluster)) == cluster and clique_id.isdigit()


@pytest.mark.parametrize("tray", TRAYS)
def test_tray_memory_per_gpu_is_the_catalogs_when_no_label_says(tray: Tray) -> None:
    # no published label set of these trays has nvidia.com/gpu.memory (SOURCES.md): the catalog's memoryGiB stands
    labels = fixture_labels(tray.file)
    assert "nvidia.com/gpu.memory" not in labels
    memory_gib = BUILT_IN.types[tray.type_name].memory_gib
    assert memory_gib is not None
    offer = tray_info(tray.file).offer(tray.type_name)
    assert offer is not None and offer.memory_mib == memory_gib * GIB_MIB
    # a GFD memory label, where a tray has one, is what the view reads instead
    labelled = {**labels, "nvidia.com/gpu.memory": str(int(memory_gib * GIB_MIB) - 1)}
    relabelled = tray_info(tray.file, labels=labelled).offer(tray.type_name)
    assert relabelled is not None and relabelled.memory_mib == memory_gib * GIB_MIB - 1


def test_trays_of_one_rack_share_a_domain_and_racks_do_not() -> None:
    # the GB200 source lists two trays with one clique; the GB300 trays are another rack
    first, second = tray_info(GB200_FILE, "gb200-tray-a"), tray_info(GB200_FILE, "gb200-tray-b")
    other = tray_info(GB300_FILE, "gb300-tray-a")
    assert first.domain(CLIQUE) == second.domain(CLIQUE) != other.domain(CLIQUE)
    unlabelled = {k: v for k, v in fixture_labels(GB200_FILE).items() if k != CLIQUE}
    assert tray_info(GB200_FILE, "gb200-no-clique", labels=unlabelled).domain(CLIQUE) is None


def test_a_catalogs_own_topology_label_reads_the_oci_block_beside_the_clique() -> None:
    text = default_catalog_text()
    default = "topologyLabels: [nvidia.com/gpu.clique]"
    assert default in text
    catalog = load_catalog_text(
        text.replace(default, "topologyLabels: [nvidia.com/gpu.clique, oci.oraclecloud.com/rdma.local_block_id]"),
        "catalog",
    )
    labels = fixture_labels(GB300_FILE)
    info = node_info_from_object(make_device_node("gb300-tray-a", labels, {"nvidia.com/gpu": "4"}), catalog)
    assert info is not None
    assert info.domain("oci.oraclecloud.com/rdma.local_block_id") == "3bf4jpavrba"
    assert info.domain(CLIQUE) == labels[CLIQUE]


@pytest.mark.parametrize("tray", TRAYS)
def test_derived_labels_are_marked_and_only_those(tray: Tray) -> None:
    text = (NODES / tray.file).read_text()
    marked = set(re.findall(r"^ {4}([\w./-]+):[^#\n]*#\s*derived\b", text, flags=re.MULTILINE))
    assert marked == tray.derived
    assert marked <= set(fixture_labels(tray.file))
