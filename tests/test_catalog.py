"""The catalog: product matching (never by substring), the built-in catalog, and errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import TEST_CATALOG_YAML, make_catalog
from webhook.core.catalog.loading import load_catalog_text, load_default_catalog
from webhook.core.catalog.model import CatalogError

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
    pytest.param("NVIDIA-H20", "H20", id="h20-is-not-h200"),
    pytest.param("NVIDIA-B200", "B200", id="b200"),
    pytest.param("NVIDIA-GB200", "GB200", id="gb200-is-not-b200"),
    pytest.param("NVIDIA-B300-SXM6-AC", "B300", id="b300"),
    pytest.param("NVIDIA-GB300", "GB300", id="gb300-is-not-b300"),
    pytest.param("NVIDIA-L20", "L20", id="l20-is-not-l2-or-l40"),
    pytest.param("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "RTX-PRO-6000", id="rtx-pro-6000-blackwell"),
    pytest.param("NVIDIA-RTX-6000-Ada-Generation", "RTX-6000-Ada", id="rtx-6000-ada-is-not-rtx-pro-6000"),
    pytest.param("NVIDIA-B200-MIG-1g.23gb", "B200-1g.23gb-single", id="b200-mig-single"),
    pytest.param("NVIDIA-A10-MIG-1g.6gb", None, id="mig-slice-is-not-the-gpu"),
    pytest.param("nvidia-a10", None, id="case-matters"),
    pytest.param("", None, id="empty"),
])
def test_built_in_catalog_prefix_traps(product: str, type_name: str | None) -> None:
    assert BUILT_IN.type_of_product(product) == type_name


def test_built_in_catalog_covers_the_data_centre_gpus() -> None:
    for name in ("K80", "P100", "V100", "T4", "A10", "A10G", "L4", "L40S", "A30", "A100-40GB", "A100-80GB", "H100", "H200",
                 "H20", "H800", "A800", "L20", "RTX-6000-Ada", "RTX-PRO-6000", "B200", "GB200", "B300", "GB300"):
        gpu_type = BUILT_IN.types[name]
        assert gpu_type.score > 0 and gpu_type.memory_gib
        assert all(p.endswith("-SHARED") or BUILT_IN.type_of_product(p + "-SHARED") == name for p in gpu_type.products)
    high = BUILT_IN.classes["high"].types
    assert high[0] in ("GB300", "GB200", "B300", "B200") and "T4" not in high and "L4" not in high
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


MATCHED = """\
types:
  - name: whole
    score: 300
    products: [GPU-X]
  - name: slice
    score: 40
    memoryGiB: 10
    resource: nvidia.com/mig-3g.20gb
    match:
      nvidia.com/gpu.product: [GPU-X]
  - name: other
    score: 20
    resource: nvidia.com/mig-3g.20gb
    match:
      nvidia.com/gpu.product: [GPU-Y]
      vendor.example/device-id: ["10de"]
classes:
  - name: any
    types: [whole, slice]
"""

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
    pytest.param(BASE.replace("    products: [PROD-A]", "    match: {\"bad key!\": [X]}"), 4,
                 "'bad key!' is not a valid label key", id="match-key-not-a-label-key"),
    pytest.param(BASE.replace("    products: [PROD-A]", "    match: {vendor.example/model: [PROD-A]}\n    products: [Z]"), 2,
                 "needs either 'products' or node label keys in 'match'", id="products-and-match"),
    pytest.param(BASE.replace("    products: [PROD-A]\n", ""), 2, "needs 'products' or 'match'", id="neither"),
    pytest.param(BASE.replace("    score: 10", "    score: 10\n    resource: gpu"), 4, "not an extended resource name",
                 id="resource-without-domain"),
    pytest.param(BASE.replace("[PROD-A]", "[PROD-A-MIG-INVALID]"), 4, "never a type", id="mig-invalid-product"),
    pytest.param(BASE.replace("[PROD-A]", "[\"has space\"]"), 4, "is not a label value", id="value-not-a-label-value"),
    pytest.param(MATCHED.replace("mig-3g.20gb", "gpu", 1), 10,
                 "label nvidia.com/gpu.product=GPU-X is claimed by types whole and slice (both requested as nvidia.com/gpu)",
                 id="same-label-same-resource"),
    pytest.param(MATCHED.replace("[GPU-X]\n  - name: other", "[\"GPU-*\"]\n  - name: other"), 10,
                 "glob 'GPU-*' of type slice also matches 'GPU-Y' of type other", id="glob-catches-same-resource"),
    pytest.param(MATCHED.replace("types: [whole, slice]", "types: [whole, slce]"), 19, "unknown type 'slce'",
                 id="class-names-unknown-match-type"),
])
def test_bad_catalogs_name_the_line(text: str, line: int | None, message: str) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog_text(text, "my-catalog.yaml")
    text_of_error = str(info.value)
    assert message in text_of_error
    if line is not None:
        assert text_of_error.startswith(f"my-catalog.yaml:{line}:"), text_of_error


def test_types_of_different_resources_may_share_labels() -> None:
    """A mixed-MIG node is its whole GPU's product and offers a slice: both types claim the label."""
    catalog = load_catalog_text(MATCHED)
    assert catalog.resources == ("nvidia.com/gpu", "nvidia.com/mig-3g.20gb")
    assert catalog.class_resources("any") == ("nvidia.com/gpu", "nvidia.com/mig-3g.20gb")
    assert catalog.types["whole"].resource == "nvidia.com/gpu" and catalog.types["slice"].mig_profile == "3g.20gb"
    assert catalog.matches_of_labels({"nvidia.com/gpu.product": "GPU-X"}) == [
        ("whole", "nvidia.com/gpu.product", "GPU-X"), ("slice", "nvidia.com/gpu.product", "GPU-X")]
    # a `match` type is named by any of its keys; `products` only by the first productLabels key present
    assert catalog.matches_of_labels({"vendor.example/device-id": "10de", "gpu-type": "GPU-X"}) == [
        ("whole", "gpu-type", "GPU-X"), ("other", "vendor.example/device-id", "10de")]
    assert catalog.matches_of_labels({"nvidia.com/gpu.product": "GPU-X-MIG-INVALID"}) == []


DRA = """\
types:
  - name: whole
    score: 300
    products: [GPU-X]
    match:
      gpu.example.com: {type: [gpu], productName: ["GPU X", "GPU X *"]}
  - name: slice
    score: 40
    resource: vendor.example/slice
    match:
      gpu.example.com: {type: [slice], productName: ["GPU X"], profile: [half]}
  - name: dra-only
    score: 10
    match:
      other.example.com: {model: [Y]}
classes:
  - name: any
    types: [whole, slice, dra-only]
"""


def _device(**attributes: object) -> dict[str, object]:
    return {f"gpu.nvidia.com/{k}": v for k, v in attributes.items()}


@pytest.mark.parametrize("driver, attributes, types, problem", [
    pytest.param("gpu.nvidia.com", _device(type={"string": "gpu"}, productName={"string": "NVIDIA H100 80GB HBM3"}),
                 ("H100",), "", id="nvidia-h100"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "gpu"}, productName={"string": "NVIDIA A100-SXM4-80GB"}),
                 ("A100-80GB",), "", id="nvidia-a100-keeps-its-dashes"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "gpu"}, productName={"string": "NVIDIA A10"}),
                 ("A10",), "", id="a10-is-not-a100"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "mig"}, profile={"string": "3g.40gb"},
                                          productName={"string": "NVIDIA H100 80GB HBM3"}),
                 ("H100-3g.40gb",), "", id="mig-slice-is-its-profile"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "vfio"}, productName={"string": "NVIDIA H100 80GB HBM3"}),
                 (), "no type of the catalog matches type='vfio', productName='NVIDIA H100 80GB HBM3'",
                 id="vfio-passthrough-is-no-type"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "gpu"}, productName={"string": "NVIDIA H20"}),
                 ("H20",), "", id="h20-is-not-h200"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "gpu"}, productName={"string": "NVIDIA H2"}),
                 (), "no type of the catalog matches", id="never-by-prefix"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "gpu"}, productName={"int": 100}),
                 (), "attribute productName is int; the catalog matches text (string)", id="attribute-of-the-wrong-type"),
    pytest.param("gpu.nvidia.com", _device(type={"string": "gpu"}), (),
                 "no type of the catalog matches type='gpu'", id="attribute-missing"),
    pytest.param("gpu.amd.com", {"gpu.amd.com/type": {"string": "amdgpu"},
                                 "gpu.amd.com/productName": {"string": "AMD_Instinct_MI300X_OAM"}},
                 ("MI300X",), "", id="amd-mi300x"),
    pytest.param("gpu.amd.com", {"gpu.amd.com/type": {"string": "amdgpu-partition"},
                                 "gpu.amd.com/productName": {"string": "AMD_Instinct_MI300X_OAM"}},
                 (), "no type of the catalog matches", id="amd-partition-is-no-whole-gpu"),
    pytest.param("tpu.google.com", {}, (), "no type of the catalog names driver tpu.google.com",
                 id="driver-nobody-maps"),
])
def test_built_in_catalog_matches_dra_devices(driver: str, attributes: dict[str, object], types: tuple[str, ...],
                                              problem: str) -> None:
    found = BUILT_IN.types_of_device(driver, attributes)
    assert found.types == types
    assert problem in found.problem and bool(found.problem) == (not types)


def test_built_in_dra_product_names_are_gfd_products_with_their_spaces() -> None:
    """GFD publishes NVML's device name with spaces as dashes; NVIDIA's DRA driver publishes it as it is.
    Every DRA name of a type, spaces to dashes, must be a label value of the same type (for a MIG
    slice: of its GPU), so a node is the same type whichever way its GPUs are published."""
    named = 0
    for t in BUILT_IN.types.values():
        whole = BUILT_IN.types[t.name[:t.name.rindex("-")]] if t.mig_profile else t  # a slice: its GPU's name
        labels = set(whole.products) | {v for _, values in whole.match for v in values}
        for driver, attributes in t.devices:
            for name, values in attributes:
                if name.endswith("/productName"):
                    named += 1
                    separator = "-" if driver == "gpu.nvidia.com" else "_"
                    assert {v.replace(" ", separator) for v in values} <= labels, t.name
    whole_nvidia = [t for t in BUILT_IN.types.values() if t.resource == "nvidia.com/gpu" and "-single" not in t.name]
    assert all(t.devices for t in whole_nvidia) and all(t.devices for t in BUILT_IN.types.values() if t.mig_profile)
    assert not any(t.devices for t in BUILT_IN.types.values() if t.name.endswith("-single"))
    assert named == sum(len(t.devices) for t in BUILT_IN.types.values())


def test_dra_drivers_sit_in_match_beside_products_or_labels() -> None:
    catalog = load_catalog_text(DRA)
    assert catalog.drivers == ("gpu.example.com", "other.example.com")
    assert catalog.types["whole"].products == ("GPU-X",) and catalog.types["whole"].match == ()
    assert catalog.types["dra-only"].devices == (("other.example.com", (("other.example.com/model", ("Y",)),)),)
    device = {"gpu.example.com/type": {"string": "gpu"}, "gpu.example.com/productName": {"string": "GPU X 2"}}
    assert catalog.types_of_device("gpu.example.com", device).types == ("whole",)  # by glob
    sliced = {"gpu.example.com/type": {"string": "slice"}, "gpu.example.com/productName": {"string": "GPU X"},
              "gpu.example.com/profile": {"version": "half"}}
    assert catalog.types_of_device("gpu.example.com", sliced).types == ("slice",)
    assert catalog.matches_of_labels({"nvidia.com/gpu.product": "GPU-X"}) == [("whole", "nvidia.com/gpu.product", "GPU-X")]


@pytest.mark.parametrize("text, line, message", [
    pytest.param(DRA.replace("gpu.example.com: {type: [slice]", "Bad_Driver: {type: [slice]"), 11,
                 "'Bad_Driver' is not a DRA driver name", id="driver-not-a-dns-subdomain"),
    pytest.param(DRA.replace("{model: [Y]}", "{\"model-name\": [Y]}"), 15,
                 "'model-name' is not a DRA attribute name", id="attribute-not-an-identifier"),
    pytest.param(DRA.replace("{model: [Y]}", "{model: [" + "Y" * 65 + "]}"), 15,
                 "longer than a DRA attribute's 64 characters", id="value-too-long"),
    pytest.param(DRA.replace("{model: [Y]}", "{}"), 15, "give its devices' attributes", id="no-attributes"),
    pytest.param(DRA.replace("{model: [Y]}", "{model: Y}"), 15, "must be a non-empty list of strings",
                 id="values-not-a-list"),
    pytest.param(DRA.replace("type: [slice]", "type: [gpu]"), 11,
                 "types whole and slice can both match one device of gpu.example.com (they share values of type, "
                 "productName)", id="two-types-one-device"),
    pytest.param(DRA.replace("{type: [slice], productName: [\"GPU X\"], profile: [half]}", "{model: [Z]}"), 11,
                 "types whole and slice can both match one device of gpu.example.com (they share values of no "
                 "attribute)", id="disjoint-attributes-overlap"),
    pytest.param(DRA.replace("    score: 10\n", "    score: 10\n    scalable: true\n"), 14,
                 "known by its DRA devices only", id="scalable-without-labels"),
    pytest.param(DRA.replace("      gpu.example.com: {type: [gpu]", "      gpu-type: [GPU-X]\n      gpu.example.com: {type: [gpu]"), 2,
                 "needs either 'products' or node label keys in 'match', not both", id="products-and-label-match"),
])
def test_bad_dra_matches_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog_text(text, "my-catalog.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith(f"my-catalog.yaml:{line}:"), str(info.value)


def test_gpu_taint_keys_default_covers_nvidia_and_amd() -> None:
    assert load_catalog_text(BASE).gpu_taint_keys == ("nvidia.com/gpu", "amd.com/gpu")
    assert BUILT_IN.gpu_taint_keys == ("nvidia.com/gpu", "amd.com/gpu")


def test_built_in_catalog_has_mig_profiles_and_instinct() -> None:
    for gpu in ("A100-40GB", "A100-80GB", "H100", "H200", "B200"):
        whole = BUILT_IN.types[gpu]
        slices = [t for t in BUILT_IN.types.values() if t.name.startswith(gpu + "-") and t.name[len(gpu) + 1].isdigit()]
        mixed = [t for t in slices if t.mig_profile is not None]
        single = [t for t in slices if t.name.endswith("-single")]
        assert len(mixed) == len(single) == 5, gpu
        for t in slices:
            assert t.score < whole.score or t.name.split("-")[-1].startswith("7g") or "7g." in t.name
            assert t.memory_gib is not None and whole.memory_gib is not None and t.memory_gib <= whole.memory_gib
        for t in single:
            assert t.resource == BUILT_IN.gpu_resource
            assert all("-MIG-" in p for p in t.products)
    for name in ("MI210", "MI250", "MI300X", "MI325X"):
        t = BUILT_IN.types[name]
        keys = [k for k, _ in t.match]
        assert t.resource == "amd.com/gpu" and keys[:2] == ["amd.com/gpu.product-name", "amd.com/gpu.device-id"]
        assert any(k.startswith("beta.amd.com/") for k in keys)
    assert BUILT_IN.types["MI300X"].score > BUILT_IN.types["H200"].score
    assert set(BUILT_IN.class_resources("small-slices")) > {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb"}
    assert not any(BUILT_IN.types[t].mig_profile or "-single" in t for t in BUILT_IN.classes["high"].types)


def test_test_catalog_is_valid() -> None:
    assert load_catalog_text(TEST_CATALOG_YAML).default_class is None


def test_shipped_configmap_catalog_is_the_built_in_one() -> None:
    from webhook.core.catalog.loading import load_catalog_file

    shipped = load_catalog_file(str(Path(__file__).parent.parent / "deploy" / "base" / "catalog.yaml"))
    assert shipped == BUILT_IN
