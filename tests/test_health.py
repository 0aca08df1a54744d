"""GPU health in the inventory: how a node or a DRA device is read as unhealthy, what that does to room and to the
placement, and how the metrics and `gpuclass inventory` show it."""

from __future__ import annotations

import copy
from typing import Any, Mapping

import jsonpatch
import pytest
from prometheus_client import REGISTRY

from builders import (
    assert_valid_pod, make_bare_node, make_catalog, make_node, make_pod, make_slice, nvidia_device_classes,
    nvidia_gpus,
)
from webhook.core.admission.patch import build_patch
from webhook.core.admission.planner import plan
from webhook.core.catalog.loading import load_catalog_text, load_default_catalog
from webhook.core.catalog.model import Catalog, CatalogError
from webhook.core.reports.inventory_report import build_report, render
from webhook.core.scheduling.extender import PodNeeds, judge_node
from webhook.core.view.inventory import InventoryState, build_snapshot
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.product_groups import summarize_group
from webhook.core.view.snapshot import Snapshot
from webhook.serving.metrics import observe_inventory

CATALOG = make_catalog()
H100, A100 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"
ANNOTATION = {"gpu-class.io/class": "high"}


def sick_node(name: str, product: str = H100, *, gpus: int = 8, capacity: int | None = None,
              conditions: Mapping[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """make_node with status.capacity of the GPU resource (`gpus` when not given) and extra conditions."""
    node = make_node(name, product, gpus=gpus, **kwargs)
    node["status"]["capacity"] = {"cpu": "32", "nvidia.com/gpu": str(gpus if capacity is None else capacity)}
    node["status"]["conditions"] += [{"type": t, "status": s} for t, s in (conditions or {}).items()]
    return node


def with_conditions(*pairs: tuple[str, str]) -> Catalog:
    listed = "".join(f"\n  - {{type: {t}, status: '{s}'}}" for t, s in pairs)
    return make_catalog(f"unhealthyConditions:{listed}\n" if pairs else "unhealthyConditions: []\n")


# --- reading health ------------------------------------------------------------------------


@pytest.mark.parametrize("node, catalog, problems, unhealthy_gpus", [
    pytest.param(sick_node("n"), CATALOG, (), 0, id="allocatable-equals-capacity"),
    pytest.param(make_node("n", H100), CATALOG, (), 0, id="no-capacity-reported"),
    pytest.param(sick_node("n", gpus=7, capacity=8), CATALOG,
                 ("nvidia.com/gpu: allocatable 7 below capacity 8",), 8, id="allocatable-below-capacity"),
    pytest.param(sick_node("n", gpus=0, capacity=8), CATALOG,
                 ("nvidia.com/gpu: allocatable 0 below capacity 8",), 8, id="every-gpu-failed"),
    pytest.param(sick_node("n", gpus=8, capacity=4), CATALOG, (), 0, id="allocatable-above-capacity-is-no-failure"),
    pytest.param(sick_node("n", conditions={"AcceleratedHardwareReady": "False"}), CATALOG,
                 ("condition AcceleratedHardwareReady=False",), 8, id="default-condition-false"),
    pytest.param(sick_node("n", conditions={"AcceleratedHardwareReady": "True"}), CATALOG, (), 0,
                 id="default-condition-true"),
    pytest.param(sick_node("n", conditions={"AcceleratedHardwareReady": "Unknown"}), CATALOG, (), 0,
                 id="default-condition-unknown-is-not-listed"),
    pytest.param(sick_node("n", conditions={"GpuHealthy": "False"}), with_conditions(("GpuHealthy", "False")),
                 ("condition GpuHealthy=False",), 8, id="configured-condition"),
    pytest.param(sick_node("n", conditions={"GpuHealthy": "False"}), CATALOG, (), 0, id="unconfigured-condition"),
    pytest.param(sick_node("n", conditions={"GpuProblem": "True"}), with_conditions(("GpuProblem", "True")),
                 ("condition GpuProblem=True",), 8, id="configured-condition-true-means-sick"),
    pytest.param(sick_node("n", conditions={"AcceleratedHardwareReady": "False"}), with_conditions(), (), 0,
                 id="conditions-turned-off"),
    pytest.param(sick_node("n", gpus=6, capacity=8, conditions={"AcceleratedHardwareReady": "False"}), CATALOG,
                 ("condition AcceleratedHardwareReady=False", "nvidia.com/gpu: allocatable 6 below capacity 8"), 8,
                 id="both"),
])
def test_a_nodes_health_is_read_from_its_capacity_and_conditions(node: dict[str, Any], catalog: Catalog,
                                                                   problems: tuple[str, ...], unhealthy_gpus: int) -> None:
    info = node_info_from_object(node, catalog)
    assert info is not None
    assert info.health_problems("H100") == problems
    assert info.unhealthy_gpus("H100") == unhealthy_gpus


DRA_CATALOG = load_default_catalog()


def tainted(effect: str | None) -> list[dict[str, Any]]:
    """Two H100 DRA devices, the first with a taint of `effect` (None: no taint)."""
    devices = nvidia_gpus(2)
    if effect is not None:
        devices[0]["taints"] = [{"key": "nvidia.com/gpu-xid", "value": "79", "effect": effect}]
    return devices


@pytest.mark.parametrize("effect, offered, unhealthy", [
    pytest.param(None, 2, 0, id="no-taint"),
    pytest.param("NoSchedule", 1, 1, id="no-schedule"),
    pytest.param("NoExecute", 1, 1, id="no-execute"),
    pytest.param("PreferNoSchedule", 2, 0, id="prefer-no-schedule-ignored"),
])
def test_a_tainted_dra_device_is_unhealthy_and_offered_to_no_pod(effect: str | None, offered: int,
                                                                 unhealthy: int) -> None:
    snapshot = build_snapshot(DRA_CATALOG, [make_bare_node("n1"), make_slice("n1", tainted(effect)),
                                            *nvidia_device_classes()])
    offer = snapshot.nodes["n1"].offer("H100")
    assert offer is not None and (offer.allocatable, offer.unhealthy) == (offered, unhealthy)
    (group,) = snapshot.groups("H100")
    assert (group.free_gpus, group.unhealthy_gpus, group.gpus) == (offered, unhealthy, 2)
    # one bad device leaves the node's others to the scheduler, which skips the tainted one itself
    assert group.unhealthy_hosts == ()
    assert snapshot.dra.problems == ()


def test_a_node_whose_every_dra_device_is_tainted_offers_no_room() -> None:
    devices = nvidia_gpus(2)
    for d in devices:
        d["taints"] = [{"key": "nvidia.com/gpu-xid", "effect": "NoExecute"}]
    snapshot = build_snapshot(DRA_CATALOG, [make_bare_node("n1"), make_slice("n1", devices), *nvidia_device_classes()])
    (group,) = snapshot.groups("H100")
    assert (group.free_gpus, group.unhealthy_gpus, group.usable) == (0, 2, ())


@pytest.mark.parametrize("text, message", [
    pytest.param("unhealthyConditions: {type: X}\n", "must be a list", id="not-a-list"),
    pytest.param("unhealthyConditions: [{type: X, status: False}]\n", "must be one of True, False, Unknown",
                 id="unquoted-status"),
    pytest.param("unhealthyConditions: [{type: X, status: 'Broken'}]\n", "not 'Broken'", id="unknown-status"),
    pytest.param("unhealthyConditions: [{status: 'False'}]\n", "type: must be a non-empty string", id="no-type"),
    pytest.param("unhealthyConditions: [{type: X, status: 'False', reason: Y}]\n", "unknown key 'reason'",
                 id="unknown-key"),
    pytest.param("unhealthyConditions: [{type: X, status: 'False'}, {type: X, status: 'True'}]\n", "listed twice",
                 id="twice"),
    pytest.param("unhealthyConditions: [X]\n", "must be a mapping", id="not-a-mapping"),
])
def test_a_bad_unhealthy_conditions_value_is_refused_with_what_to_fix(text: str, message: str) -> None:
    from builders import TEST_CATALOG_YAML
    with pytest.raises(CatalogError, match="unhealthyConditions") as caught:
        load_catalog_text(TEST_CATALOG_YAML + text, "catalog.yaml")
    assert message in str(caught.value)


def test_the_built_in_catalog_reads_acceleratedhardwareready() -> None:
    assert DRA_CATALOG.unhealthy_conditions == (("AcceleratedHardwareReady", "False"),)
    assert with_conditions(("A", "False"), ("B", "Unknown")).unhealthy_conditions == (("A", "False"), ("B", "Unknown"))


# --- room, ordering and the placement -----------------------------------------------------------


def snapshot_of(nodes: list[dict[str, Any]], catalog: Catalog = CATALOG) -> Snapshot:
    return build_snapshot(catalog, nodes)


def placed(pod: dict[str, Any], snapshot: Snapshot) -> tuple[Any, dict[str, Any]]:
    """The decision and the Pod patched by it, checked valid; placing it again changes nothing."""
    decision = plan(pod, snapshot, CATALOG, namespace="ml")
    assert decision.placement is not None, decision.message
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), build_patch(pod, decision.placement))
    assert_valid_pod(patched)
    again = plan(patched, snapshot, CATALOG, namespace="ml")
    assert again.placement is not None and build_patch(patched, again.placement) == []
    return decision, patched


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms: list[dict[str, Any]] = required["nodeSelectorTerms"]
    return terms


def test_sick_nodes_are_no_room_and_the_patch_keeps_the_pod_off_them() -> None:
    snapshot = snapshot_of([sick_node("h-ok", gpus=8), sick_node("h-xid", gpus=7, capacity=8),
                            sick_node("h-cond", conditions={"AcceleratedHardwareReady": "False"}),
                            sick_node("a-sick", A100, gpus=3, capacity=4), sick_node("a-ok", A100, gpus=4)])
    (h100,) = snapshot.groups("H100")
    assert (h100.free_gpus, h100.unhealthy_gpus, h100.unhealthy_hosts) == (8, 16, ("h-cond", "h-xid"))
    decision, patched = placed(make_pod(ANNOTATION, gpu_limit="1"), snapshot)
    assert decision.placement.types == ("H100", "A100")
    terms = required_terms(patched)
    assert terms and all({"key": "kubernetes.io/hostname", "operator": "NotIn",
                          "values": ["a-sick", "h-cond", "h-xid"]} in t["matchExpressions"] for t in terms)


def test_only_the_sick_nodes_of_the_offered_types_are_listed() -> None:
    # the A100 node is sick but the Pod excludes A100: nothing of it is written
    snapshot = snapshot_of([sick_node("h-ok"), sick_node("a-sick", A100, gpus=3, capacity=4), sick_node("a-ok", A100)])
    pod = make_pod({**ANNOTATION, "gpu-class.io/exclude-types": "A100"}, gpu_limit="1")
    decision, patched = placed(pod, snapshot)
    assert decision.placement.types == ("H100",)
    assert not any(e["operator"] == "NotIn" for t in required_terms(patched) for e in t["matchExpressions"])


def test_a_type_whose_nodes_are_all_sick_is_not_offered() -> None:
    snapshot = snapshot_of([sick_node("h1", gpus=7, capacity=8), sick_node("h2", conditions={
        "AcceleratedHardwareReady": "False"}), sick_node("a-ok", A100)])
    decision, _ = placed(make_pod(ANNOTATION, gpu_limit="1"), snapshot)
    assert decision.placement.types == ("A100",)
    verdict = next(v for v in decision.verdicts if v.type_name == "H100")
    assert (verdict.valid, verdict.reason) == (False, "all 2 nodes unhealthy")


def test_a_class_whose_only_type_is_sick_is_unplaced() -> None:
    snapshot = snapshot_of([sick_node("h1", gpus=7, capacity=8)])
    decision = plan(make_pod(ANNOTATION, gpu_limit="1"), snapshot, CATALOG, namespace="ml")
    assert decision.placement is None
    assert "Present: H100 (largest allocatable 0, 1 of 1 nodes unhealthy)" in decision.message


def test_a_sick_node_counts_with_the_unhealthy_when_it_is_also_cordoned() -> None:
    snapshot = snapshot_of([sick_node("h1", gpus=7, capacity=8), sick_node("h2", unschedulable=True)])
    decision = plan(make_pod(ANNOTATION, gpu_limit="1"), snapshot, CATALOG, namespace="ml")
    verdict = next(v for v in decision.verdicts if v.type_name == "H100")
    assert verdict.reason == "all 2 nodes unhealthy, cordoned or not ready"


def test_a_node_that_falls_sick_and_recovers_moves_the_groups_as_a_full_list_would() -> None:
    """The tally kept node by node (GroupTally) against the group summed from its nodes (summarize_group)."""
    state = InventoryState(catalog=CATALOG, synced=True)
    nodes = [sick_node("h1"), sick_node("h2"), sick_node("h3", gpus=4, capacity=8)]
    state.replace_nodes(i for i in (node_info_from_object(n, CATALOG) for n in nodes) if i is not None)
    state.replace_pods([("ml/p", "h1", {"nvidia.com/gpu": 3})])
    for step in [sick_node("h1", gpus=7, capacity=8), sick_node("h2", conditions={"AcceleratedHardwareReady": "False"}),
                 sick_node("h1"), sick_node("h3")]:
        info = node_info_from_object(step, CATALOG)
        assert info is not None
        state.upsert_node(info)
        snapshot = state.publish()
        for key, group in state.summaries.items():
            assert group == summarize_group(key, [n for n in state.nodes.values() if n.offer("H100")], state.requested)
    (group,) = snapshot.groups("H100")
    assert (group.free_gpus, group.unhealthy_hosts, group.unhealthy_gpus) == (5 + 8, ("h2",), 8)


def test_the_extender_filters_sick_nodes_with_why() -> None:
    snapshot = snapshot_of([sick_node("h-xid", gpus=7, capacity=8), sick_node("h-ok")])
    needs = PodNeeds(types=("H100",), gpus=1, class_name="high", resource="nvidia.com/gpu")
    sick = judge_node("h-xid", snapshot.nodes["h-xid"], needs, snapshot, from_cache=True)
    assert (sick.passed, sick.reason) == (False, "gpu-class: node unhealthy for H100 (nvidia.com/gpu: allocatable 7 "
                                                 "below capacity 8)")
    assert judge_node("h-ok", snapshot.nodes["h-ok"], needs, snapshot, from_cache=True).passed


# --- metrics and the report ------------------------------------------------------------------


def gpus_gauge(type_name: str, health: str) -> float | None:
    return REGISTRY.get_sample_value("gpu_class_inventory_gpus",
                                     {"type": type_name, "resource": "nvidia.com/gpu", "health": health})


@pytest.mark.parametrize("nodes, healthy, unhealthy", [
    pytest.param([sick_node("h1"), sick_node("h2")], 16, 0, id="all-healthy"),
    pytest.param([sick_node("h1"), sick_node("h2", gpus=7, capacity=8)], 8, 8, id="one-below-capacity"),
    pytest.param([sick_node("h1", conditions={"AcceleratedHardwareReady": "False"})], 0, 8, id="condition"),
    pytest.param([sick_node("h1", ready=False)], 8, 0, id="not-ready-is-no-health-matter"),
    pytest.param([], 0, 0, id="no-nodes"),
])
def test_the_gpus_gauge_counts_healthy_and_unhealthy_per_type(nodes: list[dict[str, Any]], healthy: int,
                                                               unhealthy: int) -> None:
    observe_inventory(snapshot_of(nodes), CATALOG)
    assert (gpus_gauge("H100", "healthy"), gpus_gauge("H100", "unhealthy")) == (healthy, unhealthy)


def test_the_report_lists_unhealthy_gpus_with_their_nodes_and_why() -> None:
    snapshot = snapshot_of([sick_node("h-ok"), sick_node("h-xid", gpus=7, capacity=8),
                            sick_node("h-cond", conditions={"AcceleratedHardwareReady": "False"})])
    report = build_report(snapshot, CATALOG)
    h100 = next(t for t in report["types"] if t["name"] == "H100")
    assert h100["unhealthy"] == {"gpus": 16, "nodes": [
        {"name": "h-cond", "gpus": 8, "reasons": ["condition AcceleratedHardwareReady=False"]},
        {"name": "h-xid", "gpus": 8, "reasons": ["nvidia.com/gpu: allocatable 7 below capacity 8"]}]}
    # usable means healthy too: the allocatable shown is the room's, and adds up with used and free
    assert h100["gpus"] == {"allocatable": 8, "used": 0, "free": 8}
    table = render(report, "table").splitlines()
    at = table.index("Unhealthy GPUs (16), counted as no room; class Pods are kept off the nodes with a reason:")
    assert [line.split(None, 3) for line in table[at + 1:at + 4]] == [
        ["TYPE", "NODE", "GPUS", "WHY"], ["H100", "h-cond", "8", "condition AcceleratedHardwareReady=False"],
        ["H100", "h-xid", "8", "nvidia.com/gpu: allocatable 7 below capacity 8"]]


def test_a_healthy_cluster_reports_no_unhealthy_section() -> None:
    report = build_report(snapshot_of([sick_node("h-ok")]), CATALOG)
    assert report["types"][0]["unhealthy"] == {"gpus": 0, "nodes": []}
    assert "Unhealthy GPUs" not in render(report, "table")


def test_tainted_dra_devices_are_reported_without_a_node_reason() -> None:
    snapshot = build_snapshot(DRA_CATALOG, [make_bare_node("n1"), make_slice("n1", tainted("NoExecute")),
                                            *nvidia_device_classes()])
    h100 = next(t for t in build_report(snapshot, DRA_CATALOG)["types"] if t["name"] == "H100")
    assert h100["unhealthy"] == {"gpus": 1, "nodes": [{"name": "n1", "gpus": 1, "reasons": []}]}
    assert "H100   n1     1      tainted DRA devices" in render(build_report(snapshot, DRA_CATALOG), "table")
