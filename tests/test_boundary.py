"""The tenant boundary's table (webhook/core/published/boundary.py): what the policy may look up, and nothing more.

The policy itself (deploy/components/backstop/boundary.yaml) is judged by the real API server's CEL in
tests/e2e/test_boundary_e2e.py; here, the table it reads: which (label key, value, resource) each class
may use, built from the catalog and the live view, and the DeviceClasses a bounded namespace may claim.
"""

from __future__ import annotations

import itertools
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import test_deploy as deploy

from builders import (
    make_bare_node, make_node, make_slice, nvidia_device_classes, nvidia_gpus,
)
from webhook.cluster.publish import keep_boundary, write_boundary_table
from webhook.core.published.boundary import (
    BOUNDARY_CONFIGMAP, CLASSES_KEY, OTHER_DEVICE_CLASSES_KEY, RESOURCES_KEY, BoundaryError, BoundaryTable, Entry,
    boundary_data, build_data, class_key, entry_text, glob_regex, globs_key,
)
from webhook.core.catalog.loading import load_catalog_text, load_default_catalog
from webhook.core.published.writers import WRITER_TTL_SECONDS, digest, read_writers
from webhook.core.view.dra import device_class_from_object
from webhook.core.view.inventory import InventoryState, build_snapshot

CATALOG = load_default_catalog()
NOW = 1_000_000  # seconds since the epoch, for the writers' marks
PRODUCT = "nvidia.com/gpu.product"
KEY_CHARACTERS = re.compile(r"[-._a-zA-Z0-9]+")


def classes_of(data: dict[str, str], key: str, value: str, resource: str) -> set[str] | None:
    """What the policy finds for a Pod's (key, value, resource): the classes whose entries hold it, or None."""
    wanted = entry_text(Entry(key, value, resource))
    found = {k.removeprefix("class.") for k, v in data.items() if k.startswith("class.") and wanted in v}
    return found or None


@pytest.mark.parametrize("key, value, resource, classes", [
    pytest.param(PRODUCT, "Tesla-T4", "nvidia.com/gpu", {"economy", "inference"}, id="t4-whole-gpu"),
    pytest.param("gpu-type", "Tesla-T4", "nvidia.com/gpu", {"economy", "inference"}, id="hand-labelled-t4"),
    pytest.param(PRODUCT, "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", {"high", "large-memory", "fp8"}, id="h100"),
    # Under the mixed MIG strategy the whole GPU's product also names its slices: only the resource tells
    pytest.param(PRODUCT, "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-1g.10gb", {"small-slices", "mig"},
                 id="h100-slice-by-resource"),
    pytest.param(PRODUCT, "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-3g.40gb", {"mig"}, id="bigger-slice-not-small"),
    pytest.param(PRODUCT, "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu", {"small-slices", "mig"},
                 id="single-strategy-slice"),
    pytest.param(PRODUCT, "Tesla-T4", "nvidia.com/mig-1g.10gb", None, id="t4-has-no-slices"),
    pytest.param(PRODUCT, "NVIDIA-A10", "nvidia.com/gpu", {"standard", "economy", "inference"}, id="a10"),
    pytest.param(PRODUCT, "NVIDIA-A100", "nvidia.com/gpu", None, id="no-substring-match"),
    pytest.param("kubernetes.io/hostname", "gpu-node-1", "nvidia.com/gpu", None, id="a-hostname-the-catalog-lacks"),
    pytest.param(PRODUCT, "K80", "nvidia.com/gpu", None, id="not-a-product-value"),
    pytest.param(PRODUCT, "Tesla-K80", "nvidia.com/gpu", None, id="type-of-no-class"),
])
def test_the_catalogs_table_names_each_value_with_its_resource_for_its_classes(
        key: str, value: str, resource: str, classes: set[str] | None) -> None:
    assert classes_of(boundary_data(CATALOG), key, value, resource) == classes


def test_every_key_is_a_configmap_key_and_the_lists_are_complete() -> None:
    data = boundary_data(CATALOG)
    assert all(KEY_CHARACTERS.fullmatch(k) and len(k) <= 253 for k in data)
    # few keys: the API server makes CEL values of the whole ConfigMap for each Pod it judges
    per_class = {f"{kind}.{c}" for c in CATALOG.classes for kind in ("class", "globs")}
    assert {RESOURCES_KEY, CLASSES_KEY, OTHER_DEVICE_CLASSES_KEY} < set(data) <= {
        RESOURCES_KEY, CLASSES_KEY, OTHER_DEVICE_CLASSES_KEY, *per_class}
    assert set(data[RESOURCES_KEY].strip(",").split(",")) == set(CATALOG.resources)
    assert data[CLASSES_KEY].strip(",").split(",") == list(CATALOG.classes)
    assert data[OTHER_DEVICE_CLASSES_KEY] == ","


@pytest.mark.parametrize("key, value, resource", [
    pytest.param(PRODUCT, "NVIDIA-A10", "nvidia.com/gpu", id="a-prefix-of-a-value"),
    pytest.param(PRODUCT, "80GB-HBM3", "nvidia.com/gpu", id="a-suffix-of-a-value"),
    pytest.param(PRODUCT, "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-1g", id="a-prefix-of-a-resource"),
    pytest.param("gpu.product", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", id="a-suffix-of-a-key"),
])
def test_only_whole_entries_are_found(key: str, value: str, resource: str) -> None:
    """`|` closes each entry and a space each field: a part of one is never found as a whole."""
    catalog = load_catalog_text("""
gpuResource: nvidia.com/gpu
productLabels: [nvidia.com/gpu.product]
types:
  - {name: A100, score: 300, memoryGiB: 40, products: [NVIDIA-A100]}
  - {name: H100, score: 900, memoryGiB: 80, products: [NVIDIA-H100-80GB-HBM3]}
  - {name: H100-slice, score: 100, memoryGiB: 10, resource: nvidia.com/mig-1g.10gb,
     match: {nvidia.com/gpu.product: [NVIDIA-H100-80GB-HBM3]}}
classes:
  - {name: all, types: [H100, A100, H100-slice]}
""", "whole.yaml")
    assert classes_of(boundary_data(catalog), key, value, resource) is None
    assert classes_of(boundary_data(catalog), PRODUCT, "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-1g.10gb") == {"all"}


@pytest.mark.parametrize("pattern, matching, not_matching", [
    pytest.param("NVIDIA-H100*", ["NVIDIA-H100", "NVIDIA-H100-80GB-HBM3"], ["NVIDIA-H10X", "H100"],
                 id="star"),
    pytest.param("A10?", ["A100", "A10G"], ["A10", "A1000"], id="question-mark"),
    pytest.param("L4[0S]", ["L40", "L4S"], ["L4", "L41"], id="set"),
    pytest.param("L4[!0]", ["L4S"], ["L40", "L4"], id="negated-set"),
    pytest.param("a.b+c", ["a.b+c"], ["aXb+c", "a.bbc"], id="regex-characters-are-literal"),
])
def test_globs_become_anchored_patterns(pattern: str, matching: list[str], not_matching: list[str]) -> None:
    regex = re.compile(glob_regex(pattern))
    assert all(regex.fullmatch(v) for v in matching)
    assert not any(regex.fullmatch(v) for v in not_matching)


def test_a_glob_of_the_catalog_is_kept_as_a_pattern_per_label_key_and_resource() -> None:
    catalog = load_catalog_text(_with_glob_type(), "glob.yaml")
    data = boundary_data(catalog)
    assert data["globs.budget"].split("\n") == [f"{PRODUCT} nvidia.com/gpu {glob_regex('Budget-GPU-*')}"]
    assert "globs.exact" not in data
    assert classes_of(data, PRODUCT, "Budget-GPU-1", "nvidia.com/gpu") is None  # found by the pattern, not a key


def _with_glob_type() -> str:
    return """
gpuResource: nvidia.com/gpu
productLabels: [nvidia.com/gpu.product]
types:
  - {name: Budget, score: 10, memoryGiB: 16, products: ["Budget-GPU-*"]}
  - {name: Exact, score: 20, memoryGiB: 16, products: ["Exact-GPU"]}
classes:
  - {name: budget, types: [Budget]}
  - {name: exact, types: [Exact]}
"""


@pytest.mark.parametrize("entry, message", [
    pytest.param(Entry(PRODUCT, "Tesla T4", "nvidia.com/gpu"), "no spaces", id="a-space-in-a-value"),
    pytest.param(Entry(PRODUCT, "T4|H100", "nvidia.com/gpu"), "no spaces", id="a-separator-in-a-value"),
])
def test_a_value_the_policy_could_not_find_whole_is_a_misconfiguration(entry: Entry, message: str) -> None:
    with pytest.raises(BoundaryError, match=message):
        build_data(CATALOG, {entry: "T4"}, ())


def test_a_class_name_that_cannot_be_a_key_is_a_misconfiguration() -> None:
    catalog = load_catalog_text(_with_glob_type().replace("name: exact,", "name: 'exact class',"), "bad.yaml")
    with pytest.raises(BoundaryError, match="'exact class'"):
        boundary_data(catalog)


# --- the live view ---------------------------------------------------------------------------


def test_the_live_table_adds_dra_nodes_by_hostname_and_products_their_labels_make_types() -> None:
    gh200 = {"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9",
             "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "97871"}
    objects = [*nvidia_device_classes(), make_bare_node("dra-node"), make_slice("dra-node", nvidia_gpus(4)),
               make_node("gh200-node", "NVIDIA-GH200-480GB", labels=gh200), make_node("t4-node", "Tesla-T4")]
    data = boundary_data(CATALOG, build_snapshot(CATALOG, objects))
    assert classes_of(data, "kubernetes.io/hostname", "dra-node", "nvidia.com/gpu") == {"high", "large-memory", "fp8"}
    # a product no type claims joins only the classes defined by what a GPU can do
    assert classes_of(data, PRODUCT, "NVIDIA-GH200-480GB", "nvidia.com/gpu") == {"fp8"}
    assert classes_of(data, PRODUCT, "Tesla-T4", "nvidia.com/gpu") == {"economy", "inference"}
    assert classes_of(data, "kubernetes.io/hostname", "t4-node", "nvidia.com/gpu") is None  # its label names it


COMPUTE_DOMAIN_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "compute-domain-default-channel.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'compute-domain.nvidia.com' && "
                                                  "device.attributes['compute-domain.nvidia.com'].type == 'channel'"}}]}}


def _device_class(name: str, *expressions: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]}}


@pytest.mark.parametrize("device_class, other", [
    pytest.param(COMPUTE_DOMAIN_CLASS, True, id="compute-domain-channel"),
    pytest.param(_device_class("nic", '"example.com/nic" == device.driver'), True, id="pinned-either-side"),
    pytest.param(_device_class("gpu", "device.driver == 'gpu.nvidia.com'"), False, id="nvidia-gpus"),
    pytest.param(_device_class("amd", "device.driver == 'gpu.amd.com'"), False, id="amd-gpus"),
    pytest.param(_device_class("anything"), False, id="no-selector-selects-every-device"),
    pytest.param(_device_class("by-attribute", "device.attributes['gpu.nvidia.com'].type == 'gpu'"), False,
                 id="no-driver-pin"),
    pytest.param(_device_class("not-equal", "device.driver != 'gpu.nvidia.com'"), False, id="a-negation-is-no-pin"),
])
def test_only_device_classes_pinned_to_a_driver_no_type_names_may_be_claimed_in_a_bounded_namespace(
        device_class: dict[str, Any], other: bool) -> None:
    snapshot = build_snapshot(CATALOG, [device_class])
    data = boundary_data(CATALOG, snapshot)
    listed = data[OTHER_DEVICE_CLASSES_KEY].strip(",").split(",")
    assert (device_class["metadata"]["name"] in listed) == other


def test_device_class_from_object_reads_the_pin() -> None:
    info = device_class_from_object(COMPUTE_DOMAIN_CLASS)
    assert info is not None and info.pinned_driver == "compute-domain.nvidia.com"


def test_the_table_is_worked_out_again_only_when_what_it_reads_changed() -> None:
    objects = [make_node("t4-node", "Tesla-T4")]
    snapshot = build_snapshot(CATALOG, objects)
    table = BoundaryTable(CATALOG)
    first = table.data(snapshot)
    assert table.data(snapshot) is first
    grown = build_snapshot(CATALOG, [*objects, make_bare_node("dra"), *nvidia_device_classes(),
                                     make_slice("dra", nvidia_gpus(2))])
    assert table.data(grown) is not first
    assert classes_of(table.data(grown), "kubernetes.io/hostname", "dra", "nvidia.com/gpu") is not None


# --- keeping it written ------------------------------------------------------------------------


class Writes:
    """A stand-in for write_published: records each write, answers whether the stored data changed."""

    def __init__(self, fail_first: int = 0) -> None:
        self.stored: dict[str, str] | None = None
        self.calls: list[dict[str, str]] = []
        self.fail_first = fail_first

    def __call__(self, _api: Any, _namespace: str, data: dict[str, str], name: str) -> bool:
        assert name == "gpu-class-boundary"
        self.calls.append(dict(data))
        if len(self.calls) <= self.fail_first:
            raise OSError("connection refused")
        changed = self.stored != data
        self.stored = dict(data)
        return changed


def _run_keeper(tables: list[dict[str, str]], writes: Writes, rounds: int, reread_seconds: float = 3600,
                delete_at: int | None = None) -> None:
    """keep_boundary for `rounds` rounds, the table of each round from `tables` (the last one repeated);
    at round `delete_at` the stored ConfigMap is deleted behind the keeper's back."""
    stop = threading.Event()
    asked = itertools.count()

    def data_of() -> dict[str, str]:
        i = next(asked)
        if i == delete_at:
            writes.stored = None
        if i == rounds - 1:
            stop.set()
        return tables[min(i, len(tables) - 1)]

    keep_boundary(None, "gpu-class-system", data_of, stop, check_seconds=0, reread_seconds=reread_seconds,
                  write=writes)  # type: ignore[arg-type]


@pytest.mark.parametrize("tables, fail_first, rounds, calls", [
    pytest.param([{"a": "1"}], 0, 5, 1, id="written-once-while-unchanged"),
    pytest.param([{"a": "1"}, {"a": "1"}, {"a": "2"}], 0, 5, 2, id="written-again-when-it-changes"),
    pytest.param([{"a": "1"}], 2, 5, 3, id="retried-until-written"),
])
def test_the_keeper_writes_the_table_when_it_changes_and_until_it_is_written(
        tables: list[dict[str, str]], fail_first: int, rounds: int, calls: int) -> None:
    writes = Writes(fail_first)
    _run_keeper(tables, writes, rounds)
    assert len(writes.calls) == calls
    assert writes.stored == tables[-1]


@pytest.mark.parametrize("reread_seconds, repaired", [
    pytest.param(0, True, id="read-again-each-round"),
    pytest.param(3600, False, id="not-read-again-yet"),
])
def test_the_keeper_reads_the_configmap_again_to_repair_one_deleted(reread_seconds: float, repaired: bool) -> None:
    writes = Writes()
    _run_keeper([{"a": "1"}], writes, 4, reread_seconds=reread_seconds, delete_at=2)
    assert (writes.stored == {"a": "1"}) == repaired


def test_a_device_class_reaches_the_snapshot_with_no_dra_node_to_change() -> None:
    """The watch publishes on a change the state reports: a class pinned to a NIC driver changes no node."""
    state = InventoryState(catalog=CATALOG, synced=True)
    info = device_class_from_object(COMPUTE_DOMAIN_CLASS)
    assert info is not None
    assert state.upsert_device_class(info)
    assert state.publish().dra.other_device_classes == ("compute-domain-default-channel.nvidia.com",)
    assert not state.upsert_device_class(info)  # the same again: nothing to publish
    assert state.remove_device_class(info.name)
    assert state.publish().dra.other_device_classes == ()


# --- the policies as shipped ------------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
COMPONENT = DEPLOY / "components" / "backstop"


def _objects(path: Path) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(path.read_text()) if o]


@pytest.mark.parametrize("name", ["boundary.yaml", "boundary-table.yaml"])
def test_the_charts_copy_is_the_components(name: str) -> None:
    assert (DEPLOY / "chart" / "gpu-class" / "files" / name).read_bytes() == (COMPONENT / name).read_bytes()


def test_the_policies_read_their_table_from_the_custom_resource_the_install_ships() -> None:
    """kube-apiserver reads the parameters of a built-in paramKind (a ConfigMap) through an informer it stops for good
    once no binding names that kind (kubernetes/kubernetes#130887): after the bindings were deleted and made again, it
    went on judging with the table it held then, refusing Pods the webhook placed by the new one and admitting types
    taken out of a class. A custom resource's informer is made for each policy, and follows every write."""
    crd = next(o for o in _objects(COMPONENT / "boundary-table.yaml") if o["kind"] == "CustomResourceDefinition")
    served = {f"{crd['spec']['group']}/{v['name']}" for v in crd["spec"]["versions"] if v["served"]}
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["data"]["additionalProperties"] == \
        {"type": "string"}, "the policies read params.data[key] as strings"
    objects = _objects(COMPONENT / "boundary.yaml")
    with_params = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and "paramKind" in o["spec"]]
    assert {o["metadata"]["name"] for o in with_params} == {"gpu-class.io-boundary", "gpu-class.io-boundary-claims"}
    for policy in with_params:
        kind = policy["spec"]["paramKind"]
        assert "." in kind["apiVersion"].partition("/")[0], f"{policy['metadata']['name']}: a built-in paramKind {kind}"
        assert kind["apiVersion"] in served and kind["kind"] == crd["spec"]["names"]["kind"]
    refs = [o["spec"]["paramRef"] for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
            and "paramRef" in o["spec"]]
    assert refs and all(r["name"] == BOUNDARY_CONFIGMAP and r["parameterNotFoundAction"] == "Deny" for r in refs)
    assert "- boundary-table.yaml" in (COMPONENT / "kustomization.yaml").read_text()


class FakeTables:
    """A stand-in for CustomObjectsApi holding one namespace's BoundaryTables."""

    def __init__(self, stored: dict[str, Any] | None) -> None:
        self.stored = stored
        self.writes: list[str] = []

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **_: Any) -> dict[str, Any]:
        assert (group, version, plural) == ("gpu-class.io", "v1alpha1", "boundarytables")
        if self.stored is None:
            raise ApiException(status=404)
        return self.stored

    def create_namespaced_custom_object(self, *args: Any, **_: Any) -> None:
        body: dict[str, Any] = args[-1]
        self.writes.append("create")
        self.stored = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}

    def replace_namespaced_custom_object(self, *args: Any, **_: Any) -> None:
        body: dict[str, Any] = args[-1]
        assert body["metadata"]["resourceVersion"] == (self.stored or {})["metadata"]["resourceVersion"]
        self.writes.append("replace")
        self.stored = body


def _ours(data: dict[str, str], expires: int) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": "7"}, "data": data,
            "writers": {digest(data): {"expires": expires, "data": data}}}


@pytest.mark.parametrize("stored, writes, data", [
    pytest.param(None, ["create"], {"a": "1"}, id="created-when-missing"),
    pytest.param(_ours({"a": "1"}, NOW + WRITER_TTL_SECONDS), [], {"a": "1"}, id="left-while-it-holds-ours"),
    pytest.param(_ours({"a": "0"}, NOW), ["replace"], {"a": "1"}, id="replaced-when-the-other-expired"),
    pytest.param(_ours({"a": "0"}, NOW + 5), ["replace"], {"a": "1"}, id="joined-while-the-other-writes"),
    pytest.param({"metadata": {"resourceVersion": "7"}, "data": {"class.x": "|k v r|"}}, ["replace"],
                 {"a": "1", "class.x": "|k v r|"}, id="a-table-without-marks-taken-in"),
])
def test_the_table_is_written_as_the_boundary_table_the_policies_read(
        stored: dict[str, Any] | None, writes: list[str], data: dict[str, str]) -> None:
    api = FakeTables(stored)
    wrote = write_boundary_table(api, "gpu-class-system", {"a": "1"}, now=lambda: NOW)  # type: ignore[arg-type]
    assert wrote == bool(writes)
    assert api.writes == writes
    assert api.stored is not None and api.stored.get("kind", "BoundaryTable") == "BoundaryTable"
    if writes:
        assert api.stored["data"] == data
        assert read_writers(api.stored["writers"])[digest({"a": "1"})].expires == NOW + WRITER_TTL_SECONDS


def test_a_write_that_met_another_workers_reads_it_and_joins_it() -> None:
    """409: another worker wrote between the read and the replace; its table is read again and kept."""
    api = FakeTables(_ours({"a": "0"}, NOW + WRITER_TTL_SECONDS))
    other = _ours({"b": "2"}, NOW + WRITER_TTL_SECONDS)
    replace = api.replace_namespaced_custom_object

    def conflict_once(*args: Any, **kwargs: Any) -> None:
        api.replace_namespaced_custom_object = replace  # type: ignore[method-assign]
        api.stored = {**other, "metadata": {"resourceVersion": "8"}}
        raise ApiException(status=409)

    api.replace_namespaced_custom_object = conflict_once  # type: ignore[method-assign]
    assert write_boundary_table(api, "gpu-class-system", {"a": "1"}, now=lambda: NOW)  # type: ignore[arg-type]
    assert api.stored is not None and api.stored["data"] == {"a": "1", "b": "2"}, "the other worker's table kept"


def test_the_policies_read_the_table_the_webhook_writes() -> None:
    objects = _objects(COMPONENT / "boundary.yaml")
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert {b["spec"]["policyName"] for b in bindings} == {
        o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    for b in bindings:
        if b["metadata"]["name"] == "gpu-class.io-queued-gpus":
            assert "paramRef" not in b["spec"]  # it compares the object with itself as it was
            continue
        assert b["spec"]["paramRef"] == {"name": BOUNDARY_CONFIGMAP, "namespace": "gpu-class-system",
                                         "parameterNotFoundAction": "Deny"}
        assert b["spec"]["validationActions"] == ["Deny"]
    text = (COMPONENT / "boundary.yaml").read_text()
    # the keys the expressions build are the ones boundary.py writes
    for key in (RESOURCES_KEY, OTHER_DEVICE_CLASSES_KEY):
        assert f"params.data['{key}']" in text
    assert "params.data[?('class.' + a)]" in text and "params.data[?('globs.' + a)]" in text
    assert class_key("x") == "class.x" and globs_key("x") == "globs.x"


GUARD = COMPONENT / "static" / "boundary-guard.yaml"


def test_the_static_guard_can_be_loaded_at_start_and_guards_what_ships() -> None:
    objects = _objects(GUARD)
    assert all(o["metadata"]["name"].endswith(".static.k8s.io") for o in objects)  # the API server refuses others
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    assert "paramKind" not in policy["spec"]
    assert all("paramRef" not in o["spec"] for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    guarded = {n for rule in policy["spec"]["matchConstraints"]["resourceRules"] for n in rule["resourceNames"]}
    shipped = {o["metadata"]["name"] for o in _objects(COMPONENT / "boundary.yaml")}
    assert guarded == shipped | {BOUNDARY_CONFIGMAP}
    config = yaml.safe_load((COMPONENT / "static" / "admission-configuration.yaml").read_text())
    assert config["plugins"][0]["configuration"]["staticManifestsDir"].startswith("/")


WEBHOOK_SA = "system:serviceaccount:gpu-class-system:gpu-class"


@pytest.mark.parametrize("resource, namespace, operation, user, groups, outcome", [
    pytest.param("validatingadmissionpolicies", "", "DELETE", "ops@example.com", ["gpu-class:admins"], "admitted",
                 id="admins-may-delete-the-policy"),
    pytest.param("validatingadmissionpolicies", "", "DELETE", "root", ["system:masters"], "refused",
                 id="cluster-admin-may-not"),
    pytest.param("validatingadmissionpolicybindings", "", "UPDATE", "tenant", [], "refused", id="binding-changed"),
    pytest.param("boundarytables", "gpu-class-system", "UPDATE", WEBHOOK_SA, [], "admitted", id="webhook-writes-table"),
    pytest.param("boundarytables", "gpu-class-system", "DELETE", WEBHOOK_SA, [], "refused", id="webhook-may-not-delete"),
    pytest.param("boundarytables", "gpu-class-system", "UPDATE", "tenant", [], "refused", id="table-overwritten"),
    pytest.param("boundarytables", "team-a", "UPDATE", "tenant", [], "not-matched", id="a-namesake-elsewhere"),
])
def test_the_static_guard_refuses_every_change_but_the_admins_and_the_webhooks(
        resource: str, namespace: str, operation: str, user: str, groups: list[str], outcome: str) -> None:
    objects = _objects(GUARD)
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    group = "gpu-class.io" if resource == "boundarytables" else "admissionregistration.k8s.io"
    request = {"resource": {"group": group, "version": "v1", "resource": resource}, "namespace": namespace,
               "name": "gpu-class-boundary", "operation": operation, "userInfo": {"username": user, "groups": groups}}
    assert deploy.policy_outcome(policy, binding, {"request": request}) == outcome
