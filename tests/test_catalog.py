"""The catalog: product matching (never by substring), the built-in catalog, and errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import TEST_CATALOG_YAML, make_catalog
from webhook.core.catalog import CatalogError, load_catalog_text, load_default_catalog

FIXTURES = Path(__file__).parent / "fixtures"
BUILT_IN = load_default_catalog()


def real_products() -> list[tuple[str, str | None]]:
    rows = []
    for line in (FIXTURES / "products.txt").read_text().splitlines():
        product, type_name = line.split("\t")
        rows.append((product, None if type_name == "-" else type_name))
    return rows


@pytest.mark.parametrize("product, type_name", real_products(), ids=[p for p, _ in real_products()])
def test_built_in_catalog_maps_real_gfd_products(product: str, type_name: str | None) -> None:
    assert BUILT_IN.type_of_product(product) == type_name


@pytest.mark.parametrize("product, type_name", [
    pytest.param("NVIDIA-A10", "A10", id="a10"),
    pytest.param("NVIDIA-A10G", "A10G", id="a10g-is-not-a10"),
    pytest.param("NVIDIA-A100-SXM4-40GB", "A100-40GB", id="a100-is-not-a10"),
    pytest.param("NVIDIA-L4", "L4", id="l4"),
    pytest.param("NVIDIA-L40S", "L40S", id="l40s-is-not-l4"),
    pytest.param("NVIDIA-L40", "L40", id="l40-is-not-l4-or-l40s"),
    pytest.param("NVIDIA-H200", "H200", id="h200"),
    pytest.param("NVIDIA-H20", None, id="h20-is-not-h200"),
    pytest.param("NVIDIA-A10-MIG-1g.6gb", None, id="mig-slice-is-not-the-gpu"),
    pytest.param("nvidia-a10", None, id="case-matters"),
    pytest.param("", None, id="empty"),
])
def test_built_in_catalog_prefix_traps(product: str, type_name: str | None) -> None:
    assert BUILT_IN.type_of_product(product) == type_name


def test_built_in_catalog_covers_the_data_centre_gpus() -> None:
    for name in ("K80", "P100", "V100", "T4", "A10", "A10G", "L4", "L40S", "A30", "A100-40GB", "A100-80GB", "H100", "H200"):
        gpu_type = BUILT_IN.types[name]
        assert gpu_type.score > 0 and gpu_type.memory_gib
        assert all(p.endswith("-SHARED") or BUILT_IN.type_of_product(p + "-SHARED") == name for p in gpu_type.products)
    high = BUILT_IN.classes["high"].types
    assert high[0] in ("H200", "H100-NVL", "H100") and "T4" not in high
    assert "T4" not in BUILT_IN.classes["large-memory"].types and "A100-80GB" in BUILT_IN.classes["large-memory"].types


def test_globs_match_whole_values() -> None:
    catalog = make_catalog()
    assert catalog.type_of_product("NVIDIA-H100-PCIe") == "H100"
    assert catalog.type_of_product("NVIDIA-H100-PCIe-SHARED") == "H100"  # the glob says so explicitly
    assert catalog.type_of_product("XNVIDIA-H100-PCIe") is None


def test_class_bounds_select_by_score_and_memory() -> None:
    catalog = make_catalog()
    assert catalog.classes["standard"].types == ("L40S", "A100", "H20", "A10", "L4", "V100")
    assert catalog.classes["economy"].types == ("A10", "L4", "V100", "T4")
    assert catalog.classes["big"].types == ("H200", "H100", "L40S", "A100", "H20")
    assert catalog.classes["economy"].strategy == "cost"


BASE = """\
types:
  - name: A
    score: 10
    products: [PROD-A]
  - name: B
    score: 20
    products: [PROD-B, "PROD-B-*"]
classes:
  - name: fast
    types: [B]
"""


@pytest.mark.parametrize("text, line, message", [
    pytest.param(BASE.replace("types: [B]", "types: [B, C]"), 10, "unknown type 'C'", id="unknown-type-in-class"),
    pytest.param(BASE.replace("name: B\n", "name: A\n"), 5, "duplicate type name 'A'", id="duplicate-type"),
    pytest.param(BASE + "  - name: fast\n    types: [A]\n", 11, "duplicate class name 'fast'", id="duplicate-class"),
    pytest.param(BASE.replace("[PROD-B,", "[PROD-A,"), 7, "claimed by types A and B", id="product-claimed-twice"),
    pytest.param(BASE.replace("[PROD-A]", "[PROD-B-X]"), 7, "also matches 'PROD-B-X' of type A", id="glob-catches-other-type"),
    pytest.param(BASE.replace("score: 10", "score: fast"), 3, "non-negative number", id="score-not-a-number"),
    pytest.param(BASE.replace("    types: [B]", "    minScore: 100"), 9, "selects no type", id="class-selects-nothing"),
    pytest.param(BASE.replace("    types: [B]", "    types: [B]\n    strategy: fastest"), 11,
                 "performance, cost, balanced, binpack", id="unknown-strategy"),
    pytest.param(BASE.replace("    score: 10", "    scor: 10"), 3, "unknown key 'scor'", id="typo-in-key"),
    pytest.param("defaultClass: slow\n" + BASE, 1, "'slow' is not a class", id="unknown-default-class"),
    pytest.param("onUnsatisfiable: maybe\n" + BASE, 1, "deny or admit", id="bad-on-unsatisfiable"),
    pytest.param("types: [\n", None, "not valid YAML", id="not-yaml"),
    pytest.param("- a\n", 1, "must be a mapping", id="not-a-mapping"),
    pytest.param("classes: []\n", 1, "types: must be a non-empty list", id="no-types"),
])
def test_bad_catalogs_name_the_line(text: str, line: int | None, message: str) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog_text(text, "my-catalog.yaml")
    text_of_error = str(info.value)
    assert message in text_of_error
    if line is not None:
        assert text_of_error.startswith(f"my-catalog.yaml:{line}:"), text_of_error


def test_test_catalog_is_valid() -> None:
    assert load_catalog_text(TEST_CATALOG_YAML).default_class is None


def test_shipped_configmap_catalog_is_the_built_in_one() -> None:
    from webhook.core.catalog import load_catalog_file

    shipped = load_catalog_file(str(Path(__file__).parent.parent / "deploy" / "base" / "catalog.yaml"))
    assert shipped == BUILT_IN
