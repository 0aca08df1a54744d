"""Karpenter's NodePools as inventory (webhook/core/view/pools.py): a type valid at zero nodes while a pool can
create its nodes, with exactly the pool's label values and taints, and never through a pool at its limit."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import jsonpatch
import kubernetes
import pytest

from builders import RecordedFlag, assert_valid_pod, make_catalog, make_namespace, make_node, make_pod, make_review
from fakeapi import FakeApiServer
from test_watch import eventually
from webhook.cluster import watch
from webhook.cluster.watch import LiveInventory
from webhook.core.admission.groups import room
from webhook.core.view.inventory import build_snapshot
from webhook.core.view.nodes import Taint
from webhook.core.view.pools import Pool
from webhook.core.view.snapshot import Snapshot
from webhook.core.view.pools import pools_from_object
from webhook.core.admission.review import parse_review, review_request

CATALOG = make_catalog()
PRODUCT = "nvidia.com/gpu.product"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
POOL_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def node_pool(name: str, product: str | None = None, *, requirement: list[str] | None = None,
              limit: str | None = None, used: str | None = None, taints: list[dict[str, str]] | None = None,
              weight: int | None = None, limits: Mapping[str, str] | None = None,
              requirements: list[dict[str, Any]] | None = None, used_nodes: int | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass",
                                                          "name": "default"},
                                         "taints": [POOL_TAINT] if taints is None else taints,
                                         "requirements": []}}
    if product is not None:
        template["metadata"] = {"labels": {PRODUCT: product}}
    if requirement is not None:
        template["spec"]["requirements"].append({"key": PRODUCT, "operator": "In", "values": requirement})
    template["spec"]["requirements"] += requirements or []
    spec: dict[str, Any] = {"template": template}
    if limit is not None or limits is not None:
        spec["limits"] = dict(limits or {"nvidia.com/gpu": limit})
    if weight is not None:
        spec["weight"] = weight
    obj = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}
    if used is not None:
        obj["status"] = {"resources": {"nvidia.com/gpu": used, "cpu": "64",
                                       **({"nodes": str(used_nodes)} if used_nodes is not None else {})}}
    return obj


TAINT = Taint("nvidia.com/gpu", "true", "NoSchedule")


@pytest.mark.parametrize("obj, pools", [
    pytest.param(node_pool("h100", "NVIDIA-H100-80GB-HBM3"),
                 (Pool("h100", "H100", PRODUCT, ("NVIDIA-H100-80GB-HBM3",), (TAINT,), "nvidia.com/gpu", None),),
                 id="template-label"),
    pytest.param(node_pool("a100", requirement=["A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "Tesla-T4"],
                           limit="16", used="8", weight=10),
                 (Pool("a100", "A100", PRODUCT, ("A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"), (TAINT,),
                       "nvidia.com/gpu", 8, 10),
                  Pool("a100", "T4", PRODUCT, ("Tesla-T4",), (TAINT,), "nvidia.com/gpu", 8, 10)),
                 id="in-requirement-limits-left"),
    pytest.param(node_pool("capped", "NVIDIA-H100-80GB-HBM3", limit="8", used="12", taints=[]),
                 (Pool("capped", "H100", PRODUCT, ("NVIDIA-H100-80GB-HBM3",), (), "nvidia.com/gpu", 0),),
                 id="over-its-limit"),
    pytest.param(node_pool("glob", "NVIDIA-H100-PCIe-SXM"),
                 (Pool("glob", "H100", PRODUCT, ("NVIDIA-H100-PCIe-SXM",), (TAINT,), "nvidia.com/gpu", None),),
                 id="value-named-by-a-glob"),
    pytest.param(node_pool("cpu", limits={"cpu": "1000"}), (), id="no-gpu-label"),
    pytest.param(node_pool("unknown", "NVIDIA-B300"), (), id="product-the-catalog-does-not-know"),
    pytest.param(node_pool("a10-not-a100", "NVIDIA-A10"),
                 (Pool("a10-not-a100", "A10", PRODUCT, ("NVIDIA-A10",), (TAINT,), "nvidia.com/gpu", None),),
                 id="exact-never-substring"),
    pytest.param({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "bare"}, "spec": None},
                 (), id="malformed-spec"),
])
def test_a_node_pool_is_the_types_its_template_fixes(obj: dict[str, Any], pools: tuple[Pool, ...]) -> None:
    assert pools_from_object(obj, CATALOG) == pools


AWS_GPUS = "karpenter.k8s.aws/instance-gpu-count"


def gpu_count(operator: str, *values: int) -> dict[str, Any]:
    return {"key": AWS_GPUS, "operator": operator, "values": [str(v) for v in values]}


def instance_types(*names: str) -> dict[str, Any]:
    return {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(names)}


# Karpenter launches an instance type only if its whole capacity fits what the limits leave
# (filterByRemainingResources): the Pod's size alone does not say whether the pool can grow.
@pytest.mark.parametrize("obj, gpus, holds", [
    pytest.param(node_pool("p", H100_PRODUCT), 8, True, id="no-limit-nodes-unknown"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="12", used="8", requirements=[gpu_count("In", 8)]), 4, False,
                 id="4-left-nodes-of-8"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="16", used="8", requirements=[gpu_count("In", 8)]), 4, True,
                 id="8-left-nodes-of-8"),
    pytest.param(node_pool("p", H100_PRODUCT, requirements=[gpu_count("In", 4)]), 8, False,
                 id="nodes-smaller-than-the-pod"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="6", used="0", requirements=[gpu_count("In", 4, 8)]), 2, True,
                 id="in-4-or-8-the-4-fits"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="6", used="0", requirements=[gpu_count("In", 4, 8)]), 5, False,
                 id="in-4-or-8-none-fits"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="4", used="0", requirements=[gpu_count("Gt", 3)]), 2, True,
                 id="gt-is-strict-4-fits"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="4", used="0", requirements=[gpu_count("Gt", 4)]), 2, False,
                 id="gt-4-needs-5"),
    pytest.param(node_pool("p", H100_PRODUCT, requirements=[gpu_count("Lt", 8)]), 8, False, id="lt-is-strict"),
    pytest.param(node_pool("p", H100_PRODUCT, requirements=[gpu_count("Lte", 8)]), 8, True, id="lte-takes-8"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="4", used="0", requirements=[gpu_count("Gte", 8)]), 1, False,
                 id="gte-8-over-4-left"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="12", used="8", used_nodes=1,
                           requirements=[instance_types("p5.48xlarge")]), 4, False, id="one-instance-type-status-says-8"),
    pytest.param(node_pool("p", H100_PRODUCT, limit="16", used="12", used_nodes=2,
                           requirements=[instance_types("p5.48xlarge", "p5.24xlarge")]), 4, True,
                 id="two-instance-types-size-unknown"),
    pytest.param(node_pool("p", H100_PRODUCT, limits={"nvidia.com/gpu": "64", "nodes": "2"}, used="16", used_nodes=2),
                 1, False, id="nodes-limit-used-up"),
    pytest.param(node_pool("p", H100_PRODUCT, limits={"nvidia.com/gpu": "64", "nodes": "2"}, used="8", used_nodes=1),
                 1, True, id="nodes-limit-one-left"),
])
def test_a_pool_holds_a_pod_only_if_a_node_it_may_create_takes_it_within_its_limits(
        obj: dict[str, Any], gpus: int, holds: bool) -> None:
    (pool,) = pools_from_object(obj, CATALOG)
    assert pool.holds(gpus) is holds


def snapshot_with(nodes: list[dict[str, Any]], pools: list[dict[str, Any]]) -> Snapshot:
    found: dict[str, list[Pool]] = {}
    for obj in pools:
        for p in pools_from_object(obj, CATALOG):
            found.setdefault(p.type_name, []).append(p)
    snapshot = build_snapshot(CATALOG, [*nodes, make_namespace("ml")])
    return dataclasses.replace(snapshot, pools_by_type={t: tuple(p) for t, p in found.items()})


def review(snapshot: Snapshot, pod: dict[str, Any]) -> Any:
    return review_request(parse_review(json.dumps(make_review(pod)).encode()), snapshot, CATALOG)


def required(pod: Mapping[str, Any]) -> dict[str, set[str]]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    out: dict[str, set[str]] = {}
    for t in terms["nodeSelectorTerms"]:
        for e in t["matchExpressions"]:
            out.setdefault(e["key"], set()).update(e["values"])
    return out


@dataclass(frozen=True)
class PoolCase:
    id: str
    nodes: list[dict[str, Any]]
    pools: list[dict[str, Any]]
    count: int
    outcome: str
    types: str = ""
    products: set[str] = field(default_factory=set)
    tolerations: list[dict[str, str]] = field(default_factory=list)
    message: str = ""


H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "A100-SXM4-40GB"
POOLS = [node_pool("h100", H100, limit="16"), node_pool("a100", A100, taints=[
    {"key": "nvidia.com/gpu", "value": "a100", "effect": "NoExecute"}])]
EXISTS_NO_SCHEDULE = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
EXISTS_NO_EXECUTE = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}

POOL_CASES = [
    PoolCase("zero-nodes-both-pools", [], POOLS, 1, "patched", "H100,A100", {H100, A100},
             [EXISTS_NO_SCHEDULE, EXISTS_NO_EXECUTE]),
    PoolCase("best-pool-capped", [], [node_pool("h100", H100, limit="16", used="16"), POOLS[1]], 1, "patched",
             "A100", {A100}, [EXISTS_NO_EXECUTE]),
    PoolCase("best-pool-leaves-too-few", [], [node_pool("h100", H100, limit="16", used="12"), POOLS[1]], 8,
             "patched", "A100", {A100}, [EXISTS_NO_EXECUTE]),
    # the issue's case: an H100 node in use, its pool at its limit: the A100 pool is offered too
    PoolCase("full-node-capped-pool-next-pool", [make_node("h100-0", H100, gpus=8)],
             [node_pool("h100", H100, limit="8", used="8"), POOLS[1]], 8, "patched", "H100,A100", {H100, A100},
             [EXISTS_NO_SCHEDULE, EXISTS_NO_EXECUTE]),
    # its nodes carry 8 (one instance type, one node of 8 made), 4 left: Karpenter creates no node for 4
    PoolCase("best-pool-4-left-nodes-of-8", [], [node_pool("h100", H100, limit="12", used="8", used_nodes=1,
                                                           requirements=[instance_types("p5.48xlarge")]), POOLS[1]],
             4, "patched", "A100", {A100}, [EXISTS_NO_EXECUTE]),
    PoolCase("every-pool-capped", [], [node_pool("h100", H100, limit="8", used="8")], 1, "refused",
             message="no ready, schedulable node offers 1 GPU(s) of class high"),
    PoolCase("no-pools-no-nodes", [], [], 1, "refused", message="Present: no GPU nodes"),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: c.id)
def test_pools_make_types_valid_at_zero_nodes_with_their_own_values_and_taints(case: PoolCase) -> None:
    pod = make_pod({"gpu-class.io/class": "high", "gpu-class.io/count": str(case.count)})
    result = review(snapshot_with(case.nodes, case.pools), pod)
    assert result.decision.outcome == case.outcome, result.decision.message
    assert case.message in result.decision.message
    if case.outcome != "patched":
        return
    placed = jsonpatch.apply_patch(copy.deepcopy(pod), result.patch)
    assert_valid_pod(placed)
    assert placed["metadata"]["annotations"]["gpu-class.io/types"] == case.types
    assert required(placed) == {PRODUCT: case.products}
    assert sorted(placed["spec"]["tolerations"], key=str) == sorted(case.tolerations, key=str)
    # preferences best type first: Karpenter grows the heaviest term's pool first
    preferred = placed["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    order = [t["preference"]["matchExpressions"][0]["values"] for t in sorted(preferred, key=lambda t: -t["weight"])]
    assert [v for values in order for v in values] == [p for t in case.types.split(",")
                                                        for p in sorted(case.products) if
                                                        CATALOG.type_of_product(p) == t]


def test_explain_says_which_pool_can_create_a_node_and_which_is_capped() -> None:
    snapshot = snapshot_with([], [node_pool("h100", H100, limit="8", used="8"), POOLS[1]])
    result = review(snapshot, make_pod({"gpu-class.io/class": "high"}))
    reasons = {v.type_name: v.reason for v in result.decision.verdicts}
    assert reasons["A100"] == "no node can take it now; NodePool a100 can create one"
    assert reasons["H100"] == ("no node can take it now, and its NodePools are at their limits: "
                               "h100 (0 nvidia.com/gpu left)")


def test_explain_says_a_pool_s_nodes_are_bigger_than_its_limits_leave() -> None:
    pool = node_pool("h100", H100, limit="12", used="8", used_nodes=1, requirements=[instance_types("p5.48xlarge")])
    result = review(snapshot_with([], [pool]), make_pod({"gpu-class.io/class": "high", "gpu-class.io/count": "4"}))
    reasons = {v.type_name: v.reason for v in result.decision.verdicts}
    assert reasons["H100"] == ("no node can take it now, and its NodePools are at their limits: "
                               "h100 (4 nvidia.com/gpu left, its nodes carry 8)")


def test_a_group_on_a_pool_that_can_grow_has_no_ceiling() -> None:
    snapshot = snapshot_with([make_node("h100-0", H100, gpus=8)], [node_pool("h100", H100, limit="64", used="8")])
    assert room(snapshot, CATALOG, "H100", PRODUCT, 4, None).most is None
    capped = snapshot_with([make_node("h100-0", H100, gpus=8)], [node_pool("h100", H100, limit="8", used="8")])
    assert room(capped, CATALOG, "H100", PRODUCT, 4, None).most == 2


# --- the watch --------------------------------------------------------------------------------


@pytest.fixture
def karpenter_api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval_seconds=0.2, serve_karpenter=True) as server:
        yield server


def test_the_watch_follows_node_pools_as_they_are_created_capped_and_deleted(karpenter_api: FakeApiServer) -> None:
    karpenter_api.create(make_namespace("ml"))
    karpenter_api.create(node_pool("h100", H100, limit="16", used="0"))
    inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(karpenter_api.api_client())).start()
    try:
        eventually(lambda: inv.readiness()[0], what="first sync")
        assert [p.name for p in inv.snapshot().pools("H100")] == ["h100"]
        karpenter_api.create(node_pool("a100", A100))
        eventually(lambda: inv.snapshot().pools("A100"), what="the new pool")
        capped = node_pool("h100", H100, limit="16", used="16")
        karpenter_api.update(capped)
        eventually(lambda: inv.snapshot().pools("H100")[0].left == 0, what="the pool's use")
        karpenter_api.delete("NodePool", "h100")
        eventually(lambda: not inv.snapshot().pools("H100"), what="the pool gone")
        assert inv.readiness()[1]["watches"]["nodepools"]["synced"] is True
    finally:
        inv.stop()


def test_without_karpenter_pools_are_off_and_said_so() -> None:
    with FakeApiServer(bookmark_interval_seconds=0.2) as api:
        api.create(make_namespace("ml"))
        inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(api.api_client())).start()
        try:
            eventually(lambda: inv.readiness()[0], what="first sync")
            snapshot = inv.snapshot()
            assert snapshot.pools_by_type is None
            assert snapshot.pools_off == "the API server does not serve nodepools.karpenter.sh (karpenter.sh/v1)"
            assert inv.readiness()[1]["watches"]["nodepools"]["off"] == snapshot.pools_off
        finally:
            inv.stop()


NODEPOOL_CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "nodepools.karpenter.sh"},
                "status": {"conditions": [{"type": "Established", "status": "True"}]}}


def test_karpenter_installed_after_the_start_is_read_in_seconds_not_at_the_next_minute() -> None:
    with FakeApiServer(bookmark_interval_seconds=0.2) as api:
        api.create(make_namespace("ml"))
        inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(api.api_client()))
        pools = next(r for r in inv.reflectors if r.name == "nodepools")
        herald = next(r for r in inv.reflectors if r.name == "customresourcedefinitions")
        pools.recheck = recheck = RecordedFlag()
        inv.start()
        try:
            eventually(lambda: inv.readiness()[0], what="first sync")
            assert inv.snapshot().pools_off is not None
            # Karpenter installed: its API served, a pool created, its CRD established last, as the API server does
            api.serve_karpenter = True
            api.create(node_pool("h100", H100))
            api.create({**NODEPOOL_CRD, "status": {"conditions": [{"type": "Established", "status": "False"}]}})
            # the herald has read the CRD, not established yet: nothing to read, no list asked for
            seen = int(api.current_resource_version)
            eventually(lambda: int(herald.resource_version or 0) >= seen, what="the herald read the CRD")
            assert inv.snapshot().pools_off is not None and not recheck.is_set()
            api.update(NODEPOOL_CRD)
            # a deadline under the minute's recheck, generous for a loaded machine
            eventually(lambda: [p.name for p in inv.snapshot().pools("H100")] == ["h100"], timeout_seconds=30,
                       what="the pool read once the CRD is established")
            # why, not how fast: the pools' one wait for their minute was ended by the herald's flag, not run out
            assert [(w.timeout_seconds, w.ended_by_flag) for w in recheck.waits] == [(watch.OFF_RECHECK_SECONDS, True)]
            assert inv.snapshot().pools_off is None
        finally:
            inv.stop()


def test_the_inventory_lists_pools_beside_nodes() -> None:
    from webhook.core.reports.inventory_report import build_report, render_table

    snapshot = snapshot_with([make_node("h100-0", H100, gpus=8)],
                             [node_pool("h100", H100, limit="16", used="8"), POOLS[1]])
    report = build_report(snapshot, CATALOG)
    assert [(p["name"], p["type"], p["values"], p["left"]) for p in report["nodePools"]["pools"]] == [
        ("h100", "H100", [H100], 8), ("a100", "A100", [A100], None)]
    table = render_table(report)
    assert "Node pools that can create GPU nodes (Karpenter NodePools):" in table
    assert "a100       A100   A100-SXM4-40GB          no limit           nvidia.com/gpu=a100:NoExecute" in table
