"""A group kept within one topology domain (gpu-class.io/group-required-topology, group-preferred-topology): what
a Pod asks, which domains hold the whole group, and the patch that keeps it there."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from builders import make_node, make_pod
from test_groups import CATALOG, review, snapshot_with
from test_planner import check_patch
from webhook.core.admission.annotations import GroupAsk, Topology, read_group
from webhook.core.catalog.builtin import default_catalog_text
from webhook.core.catalog.loading import load_catalog_text
from webhook.core.catalog.model import Catalog, CatalogError
from webhook.core.admission.planner import plan
from webhook.core.reports.explain import explain_text
from webhook.core.reports.pod_report import build_pod_report, render_pod_text

C, G, SIZE, COUNT = "gpu-class.io/class", "gpu-class.io/group", "gpu-class.io/group-size", "gpu-class.io/count"
REQUIRED, PREFERRED = "gpu-class.io/group-required-topology", "gpu-class.io/group-preferred-topology"
CLIQUE, GFD = "nvidia.com/gpu.clique", "nvidia.com/gpu.product"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"
KEYS = ("nvidia.com/gpu.clique", "topology.example.com/rack")


@pytest.mark.parametrize("annotations, expected", [
    pytest.param({G: "t", REQUIRED: CLIQUE}, GroupAsk("t", topology=Topology(CLIQUE, True)), id="required"),
    pytest.param({G: "t", PREFERRED: " topology.example.com/rack "},
                 GroupAsk("t", topology=Topology("topology.example.com/rack", False)), id="preferred-trimmed"),
    pytest.param({G: "t", SIZE: "4", REQUIRED: CLIQUE},
                 GroupAsk("t", 4, SIZE, topology=Topology(CLIQUE, True)), id="with-size"),
    pytest.param({G: "t", REQUIRED: CLIQUE, "kueue.x-k8s.io/podset-required-topology": "cloud.com/block"},
                 GroupAsk("t", kueue_topology=True, topology_left_to_kueue=REQUIRED), id="kueue-tas-decides"),
    pytest.param({G: "t", "kueue.x-k8s.io/podset-preferred-topology": "cloud.com/rack"},
                 GroupAsk("t", kueue_topology=True), id="kueue-tas-alone"),
    pytest.param({G: "t", REQUIRED: CLIQUE, PREFERRED: CLIQUE}, "are both set", id="both"),
    pytest.param({G: "t", REQUIRED: "kubernetes.io/hostname"}, "must be a node label key of the catalog's "
                 "topologyLabels (nvidia.com/gpu.clique, topology.example.com/rack)", id="key-not-in-catalog"),
    pytest.param({REQUIRED: CLIQUE}, f"{REQUIRED} needs {G}", id="without-a-group"),
    pytest.param({PREFERRED: "x"}, "must be a node label key", id="without-a-group-and-wrong"),
])
def test_what_a_pod_asks(annotations: dict[str, str], expected: GroupAsk | str) -> None:
    got = read_group(annotations, KEYS)
    if isinstance(expected, str):
        assert isinstance(got, str) and expected in got, got
    else:
        assert got == expected


def test_a_catalog_without_topology_labels_refuses_any_topology() -> None:
    got = read_group({G: "t", REQUIRED: CLIQUE}, ())
    assert isinstance(got, str) and "topologyLabels is empty" in got


def rack(name: str, clique: str, product: str = H100) -> dict[str, Any]:
    return make_node(name, product, gpus=8, labels={CLIQUE: clique})


# two racks of H100, 4 nodes of 8 GPUs each; rack a has 3 nodes full (room for 4 Pods of 2 GPUs), rack b is
# free (16 such Pods); two A100 nodes without a clique
RACKS = [rack(f"a-{i}", "clique-a") for i in range(4)] + [rack(f"b-{i}", "clique-b") for i in range(4)] + [
    make_node("a100-1", A100, gpus=8), make_node("a100-2", A100, gpus=8)]
RACK_A_FULL = {"a-0": 8, "a-1": 8, "a-2": 8}


def group_pod(size: int | None, *, mode: str = REQUIRED, count: int = 2) -> dict[str, Any]:
    return make_pod({C: "high", COUNT: str(count), G: "train", mode: CLIQUE,
                     **({SIZE: str(size)} if size is not None else {})})


@dataclass(frozen=True)
class Case:
    id: str
    pod: dict[str, Any]
    outcome: str
    types: tuple[str, ...] = ()
    domains: tuple[str, ...] | None = None
    group_outcome: str | None = None
    used: dict[str, int] = field(default_factory=lambda: dict(RACK_A_FULL))
    members: dict[str, tuple[str, int, tuple[str, str]]] = field(default_factory=dict)
    says: str = ""


CASES = [
    Case("only-the-rack-with-room-for-all-of-it", group_pod(10), "patched", ("H100",), ("clique-b",), "started"),
    Case("both-racks-hold-it-tightest-first", group_pod(4), "patched", ("H100",), ("clique-a", "clique-b"),
         "started"),
    Case("no-rack-has-room-now-waits-in-those-that-can-hold-it", group_pod(12), "patched", ("H100",),
         ("clique-a", "clique-b"), "no-room", used={**RACK_A_FULL, "b-0": 8, "b-1": 8},
         says="no nvidia.com/gpu.clique domain has room for its 12 Pods now"),
    # as Kueue's TAS leaves such a workload pending: a domain may yet hold it (a rack's nodes back from repair)
    Case("larger-than-any-rack-waits", group_pod(17), "patched", ("H100",), None, "no-room",
         says="no nvidia.com/gpu.clique domain can hold its 17 Pods (at most 16); they wait"),
    Case("no-node-in-a-domain-is-refused", make_pod({C: "high", COUNT: "2", G: "train", SIZE: "2", REQUIRED: CLIQUE,
                                                     "gpu-class.io/exclude-types": "H100"}),
         "refused", group_outcome="refused", says="no node of class high that can take its Pods has that label"),
    # A100 has room for 8 such Pods, but in no domain: the group waits for H100 rather than spill there
    Case("nodes-without-the-label-are-no-domain", group_pod(6), "patched", ("H100",), ("clique-a", "clique-b"),
         "no-room", used={**RACK_A_FULL, "b-0": 8, "b-1": 8, "b-2": 8}, says="A100: holds at most 0 of the group's 6"),
    Case("unsized-any-value-of-the-key", group_pod(None), "patched", ("H100",), None, "started"),
    Case("running-group-kept-in-its-rack", group_pod(10), "patched", ("H100",), ("clique-a",), "followed",
         members={"ml/train-0": ("a-3", 2, ("ml", "train"))}),
]


def explain(pod: dict[str, Any], snapshot: Any) -> str:
    return explain_text(review(pod, snapshot), "ml", pod, CATALOG)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_required_topology(case: Case) -> None:
    snapshot = snapshot_with(RACKS, case.used, case.members)
    decision = plan(case.pod, snapshot, CATALOG, namespace="ml")
    assert decision.outcome == case.outcome, decision.message
    assert decision.group is not None and decision.group.outcome == (case.group_outcome or decision.group.outcome)
    if case.says:
        said = (decision.message, *decision.warnings, *(f"{v.type_name}: {v.reason}" for v in decision.verdicts))
        assert any(case.says in s for s in said), said
    if decision.placement is None:
        return
    assert decision.placement.types == case.types
    assert decision.group.domains == case.domains
    patched = check_patch(case.pod, decision, snapshot, CATALOG)
    affinity = patched["spec"]["affinity"]
    domain = ({"key": CLIQUE, "operator": "Exists"} if case.domains is None else
              {"key": CLIQUE, "operator": "In", "values": list(case.domains)})
    for term in affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
        assert domain in term["matchExpressions"]
    selector = {"matchLabels": {"gpu-class.io/group": "train"}}
    # the domain's term first: gpu-class-scheduler holds a waiting group on its first group term's key
    assert affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": selector, "topologyKey": CLIQUE}, {"labelSelector": selector, "topologyKey": GFD}]
    assert "nvidia.com/gpu.clique domain" in explain(case.pod, snapshot)  # check_patch: decided again, unchanged


def test_preferred_topology_weighs_one_domain_and_restricts_no_node() -> None:
    pod = group_pod(10, mode=PREFERRED)
    snapshot = snapshot_with(RACKS, RACK_A_FULL)
    decision = plan(pod, snapshot, CATALOG, namespace="ml")
    assert decision.placement is not None and decision.group is not None and decision.group.domains is None
    affinity = check_patch(pod, decision, snapshot, CATALOG)["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(e["key"] != CLIQUE for t in terms for e in t["matchExpressions"])
    selector = {"matchLabels": {"gpu-class.io/group": "train"}}
    assert affinity["podAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": selector, "topologyKey": GFD}],
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": selector, "topologyKey": CLIQUE}}]}
    assert "kept in as few nvidia.com/gpu.clique domains" in explain(pod, snapshot)


def test_kueue_topology_wins_and_the_pod_is_told() -> None:
    pod = make_pod({C: "high", COUNT: "2", G: "train", REQUIRED: CLIQUE,
                    "kueue.x-k8s.io/podset-required-topology": "cloud.com/block"})
    snapshot = snapshot_with(RACKS, RACK_A_FULL)
    decision = plan(pod, snapshot, CATALOG, namespace="ml")
    assert decision.placement is not None and decision.group is not None and decision.group.topology is None
    assert any(f"{REQUIRED} ignored" in w and "Topology Aware Scheduling" in w for w in decision.warnings)
    affinity = check_patch(pod, decision, snapshot, CATALOG)["spec"]["affinity"]
    assert [t["topologyKey"] for t in affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]] \
        == [GFD]


@pytest.mark.parametrize("mode, says", [
    pytest.param(REQUIRED, "group train: kept within one nvidia.com/gpu.clique domain (required); runs in 1: "
                           "clique-b x 2", id="required"),
    pytest.param(PREFERRED, "group train: kept in as few nvidia.com/gpu.clique domains as the scheduler can "
                            "(preferred); runs in 2: clique-a x 1, clique-b x 2", id="preferred"),
])
def test_the_pod_report_says_how_the_group_spreads_over_domains(mode: str, says: str) -> None:
    members = {"ml/train-0": ("b-0", 2, ("ml", "train")), "ml/train-1": ("b-1", 2, ("ml", "train"))}
    if mode == PREFERRED:
        members["ml/train-2"] = ("a-3", 2, ("ml", "train"))
    pod = group_pod(4, mode=mode)
    decided = plan(pod, snapshot_with(RACKS, RACK_A_FULL), CATALOG, namespace="ml")
    patched = check_patch(pod, decided, snapshot_with(RACKS, RACK_A_FULL), CATALOG)
    patched["metadata"]["namespace"] = "ml"
    report = build_pod_report(patched, snapshot_with(RACKS, RACK_A_FULL, members), CATALOG)
    assert says in render_pod_text(report)


def test_a_pod_without_a_topology_reports_no_domains() -> None:
    pod = make_pod({C: "high", COUNT: "2", G: "train"})
    patched = check_patch(pod, plan(pod, snapshot_with(RACKS), CATALOG, namespace="ml"), snapshot_with(RACKS), CATALOG)
    patched["metadata"]["namespace"] = "ml"
    report = build_pod_report(patched, snapshot_with(RACKS), CATALOG)
    assert report["group"] is not None and report["group"]["domains"] is None


def with_class_topology(topology: Any) -> Catalog:
    """The test catalog with class high keeping its groups within one clique, as the catalog would say."""
    high = dataclasses.replace(CATALOG.classes["high"], group_topology=topology)
    return dataclasses.replace(CATALOG, classes={**CATALOG.classes, "high": high})


@pytest.mark.parametrize("annotations, topology", [
    pytest.param({}, Topology(CLIQUE, True), id="the-class-s"),
    pytest.param({PREFERRED: CLIQUE}, Topology(CLIQUE, False), id="the-pod-s-own-wins"),
    pytest.param({"kueue.x-k8s.io/podset-required-topology": "cloud.com/block"}, None, id="kueue-s-wins"),
])
def test_a_class_keeps_its_groups_within_a_domain(annotations: dict[str, str], topology: Topology | None) -> None:
    catalog = with_class_topology(Topology(CLIQUE, True))
    pod = make_pod({C: "high", COUNT: "2", G: "train", SIZE: "10", **annotations})
    decision = plan(pod, snapshot_with(RACKS, RACK_A_FULL, catalog=catalog), catalog, namespace="ml")
    assert decision.group is not None and decision.group.topology == topology
    assert decision.group.domains == (("clique-b",) if topology == Topology(CLIQUE, True) else None)


@pytest.mark.parametrize("group_topology, error", [
    pytest.param({"required": CLIQUE}, None, id="required"),
    pytest.param({"preferred": CLIQUE}, None, id="preferred"),
    pytest.param({"required": "rack"}, "must be one of topologyLabels (nvidia.com/gpu.clique), not 'rack'",
                 id="not-a-topology-label"),
    pytest.param({"required": CLIQUE, "preferred": CLIQUE}, "must be {required: KEY} or {preferred: KEY}", id="both"),
    pytest.param(CLIQUE, "must be {required: KEY} or {preferred: KEY}", id="a-bare-key"),
])
def test_a_class_s_group_topology_is_checked_at_load(group_topology: Any, error: str | None) -> None:
    data = yaml.safe_load(default_catalog_text())
    high = next(c for c in data["classes"] if c["name"] == "high")
    high["groupTopology"] = group_topology
    if error is None:
        loaded = load_catalog_text(yaml.safe_dump(data))
        assert loaded.classes["high"].group_topology == Topology(CLIQUE, "required" in group_topology)
        return
    with pytest.raises(CatalogError) as refused:
        load_catalog_text(yaml.safe_dump(data))
    assert error in str(refused.value) and "groupTopology" in str(refused.value)
