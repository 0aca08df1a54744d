"""The scheduler extender (/filter, /prioritize); tests/test_scheduler.py checks the scheduler that calls it.

Requests are built as kube-scheduler sends them: Go's encoding/json of extenderv1.ExtenderArgs, whose
fields carry no json tags (`Pod`, `Nodes`, `NodeNames`), with the Pod and Nodes as the scheduler's
informers hold them (no apiVersion/kind, defaulted fields, status). They go through the Flask app the
server builds, so the wire format is what is tested. The inventory holds GPUs requested by bound Pods.
"""

from __future__ import annotations

import copy
import json
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import jsonpatch
import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import given
from hypothesis import strategies as st
from immutables import Map

from builders import make_catalog, make_node, make_pod, make_review
from servers import Server, serving_test_inventory, write_certs, write_objects
from webhook.cluster.source import StaticInventory
from webhook.serving.app import create_app
from webhook.serving.certs import CLIENT_COMMON_NAME
from webhook.core.catalog.model import Catalog
from webhook.core.scheduling.extender import (ASSUME_SECONDS, MAX_EXTENDER_PRIORITY, Assumed, NodeVerdict, PodNeeds,
                                   filter_assuming, filter_nodes, parse_extender_args, score_nodes, share_score,
                                   with_assumed)
from webhook.serving.extender_routes import UNKNOWN_POD_WAIT_SECONDS, register_extender_routes
from webhook.cluster.loading import read_inventory
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.view.inventory import InventoryState, build_snapshot
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.pods import unbound_gpu_pod
from webhook.core.view.snapshot import Snapshot

CATALOG = make_catalog()
TYPES = "gpu-class.io/types"
CLASS = "gpu-class.io/class"

CLUSTER = [
    make_node("h100-busy", "NVIDIA-H100-80GB-HBM3", gpus=8),
    make_node("h100-idle", "NVIDIA-H100-80GB-HBM3", gpus=8),
    make_node("a100-part", "A100-SXM4-40GB", gpus=4),
    make_node("a100-idle", "NVIDIA-A100-SXM4-80GB", gpus=4),
    make_node("a100-small", "A100-SXM4-40GB", gpus=2),
    make_node("a10-a", "NVIDIA-A10", gpus=4),  # A10 is not A100
    make_node("l4-hand", "NVIDIA-L4", gpus=2, label_key="gpu-type"),
    make_node("t4-a", "Tesla-T4", gpus=1),
    make_node("h100-down", "NVIDIA-H100-80GB-HBM3", ready=False),
    make_node("h100-cordoned", "NVIDIA-H100-80GB-HBM3", unschedulable=True),
    make_node("mig-a", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", gpus=7),
    make_node("cpu-a"),
]
BY_NAME = {n["metadata"]["name"]: n for n in CLUSTER}
# GPUs held by Pods bound to the nodes, as the watch accounts them
BOUND_PODS = [("ml/train-0", "h100-busy", 4), ("ml/train-1", "h100-busy", 2), ("ml/eval-0", "a100-part", 1)]


def snapshot_of(
    nodes: Sequence[Mapping[str, Any]] = CLUSTER,
    pods: Sequence[tuple[str, str, int]] = BOUND_PODS,
    *,
    catalog: Catalog = CATALOG,
    synced: bool = True,
) -> Snapshot:
    state = InventoryState(catalog=catalog)
    state.replace_nodes(i for i in (node_info_from_object(n, catalog) for n in nodes) if i is not None)
    state.replace_pods((key, node, {"nvidia.com/gpu": gpus}) for key, node, gpus in pods)
    state.synced = synced
    return state.publish()


def the_test_scheduler(_environ: Mapping[str, Any]) -> str:
    """The Flask test client speaks no TLS, so it has no certificate to show: these tests are about the
    verbs, and the real server's client authentication is tested below ("who may call")."""
    return "test-scheduler"


def make_app(snapshot: Snapshot | None = None, catalog: Catalog = CATALOG) -> Flask:
    inventory = StaticInventory(snapshot if snapshot is not None else snapshot_of())
    return create_app(catalog, inventory, extender_caller_of=the_test_scheduler)


@pytest.fixture(scope="module")
def client() -> FlaskClient:
    return make_app().test_client()


# --- requests as kube-scheduler sends them -------------------------------------------------


def as_scheduled(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as a typed informer holds it and Go marshals it: TypeMeta empty, so no apiVersion/kind."""
    out = copy.deepcopy(dict(obj))
    out.pop("apiVersion", None)
    out.pop("kind", None)
    return out


def scheduler_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod as it reaches the scheduler: stored (uid, defaults), requests defaulted from limits, Pending."""
    out = as_scheduled(pod)
    meta = out["metadata"]
    meta.update(uid="6f1c3c4e-2b1f-4c51-9d0e-3c8f1f3a2b10", resourceVersion="48213", creationTimestamp="2025-01-01T00:00:00Z")
    spec = out["spec"]
    for container in [*spec["containers"], *spec.get("initContainers", [])]:
        resources = container.setdefault("resources", {})
        if "limits" in resources:
            resources["requests"] = {**resources["limits"], **resources.get("requests", {})}
        container.update(terminationMessagePath="/dev/termination-log", terminationMessagePolicy="File",
                         imagePullPolicy="IfNotPresent")
    spec.update(
        restartPolicy="Always", terminationGracePeriodSeconds=30, dnsPolicy="ClusterFirst",
        serviceAccountName="default", securityContext={}, schedulerName="gpu-class-scheduler",
        enableServiceLinks=True, preemptionPolicy="PreemptLowerPriority", priority=0,
        tolerations=[
            *spec.get("tolerations", []),
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    )
    out["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return out


def placed_pod(types: str, *, gpus: int = 1, class_name: str | None = None,
               containers: list[dict[str, Any]] | None = None, init_gpus: int | None = None) -> dict[str, Any]:
    """A Pod the webhook placed: its GPU limit and the gpu-class.io/types annotation."""
    annotations = {TYPES: types, **({CLASS: class_name} if class_name else {})}
    pod = make_pod(annotations, containers=containers, gpu_limit=None if containers else str(gpus))
    if init_gpus is not None:
        pod["spec"]["initContainers"] = [
            {"name": "warmup", "image": "registry.example/warmup:1", "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}
        ]
    return scheduler_pod(pod)


def gpu_container(name: str, gpus: int) -> dict[str, Any]:
    return {"name": name, "image": "registry.example/train:1.0", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}


def args_by_names(pod: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """nodeCacheCapable: true."""
    return {"Pod": pod, "Nodes": None, "NodeNames": list(names)}


def args_by_objects(pod: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """nodeCacheCapable: false. Go marshals the scheduler's &v1.NodeList{Items: ...} with an empty ListMeta."""
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": [as_scheduled(BY_NAME[n]) for n in names]}, "NodeNames": None}


MODES = {"names": args_by_names, "objects": args_by_objects}


def post(client: FlaskClient, verb: str, body: bytes | Mapping[str, Any]) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post(f"/{verb}", data=data, content_type="application/json")
    return response.status_code, response.get_json()


def passed_names(result: Mapping[str, Any], mode: str) -> list[str]:
    if mode == "names":
        assert result["Nodes"] is None
        names: list[str] = result["NodeNames"]
        return names
    assert result["NodeNames"] is None
    return [o["metadata"]["name"] for o in result["Nodes"]["items"]]


# --- filter ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterCase:
    pod: dict[str, Any]
    nodes: tuple[str, ...]
    passed: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)  # preemption may help
    unresolvable: Mapping[str, str] = field(default_factory=dict)


FILTER_CASES = [
    pytest.param(
        FilterCase(placed_pod("H100,A100", class_name="high"), ("h100-idle", "a100-part", "t4-a"), ("h100-idle",),
                   unresolvable={"t4-a": "gpu-class: type T4 not in H100,A100",
                                 "a100-part": "gpu-class: performance: a node of the preferred type H100 can take it"}),
        id="type-not-in-annotation-unresolvable-and-best-type-kept",
    ),
    pytest.param(
        FilterCase(placed_pod("H100,A100", class_name="high", gpus=4), ("h100-busy", "a100-part", "a100-idle"),
                   ("a100-idle",),
                   failed={"h100-busy": "gpu-class: 2 GPUs free, Pod needs 4",
                           "a100-part": "gpu-class: 3 GPUs free, Pod needs 4"}),
        id="performance-falls-back-when-the-best-type-is-full",
    ),
    pytest.param(
        FilterCase(placed_pod("T4,L4", class_name="economy"), ("l4-hand", "t4-a"), ("t4-a",),
                   unresolvable={"l4-hand": "gpu-class: cost: a node of the preferred type T4 can take it"}),
        id="cost-keeps-the-cheapest-type",
    ),
    pytest.param(
        # free GPUs by type over usable nodes: A100 3+4+2, L4 2, T4 1
        FilterCase(placed_pod("A100,L4,T4", class_name="balanced"), ("t4-a", "l4-hand", "a100-idle"), ("a100-idle",),
                   unresolvable={
                       "t4-a": "gpu-class: balanced: a node with 75% of its GPUs free once the Pod is placed can take it",
                       "l4-hand": "gpu-class: balanced: a node with 75% of its GPUs free once the Pod is placed can take it"}),
        id="balanced-keeps-the-emptiest-node-by-share",
    ),
    pytest.param(
        FilterCase(placed_pod("A100,L4,T4", class_name="packed"), ("a100-idle", "a100-small", "t4-a"), ("t4-a",),
                   unresolvable={
                       "a100-idle": "gpu-class: binpack: a node with 100% of its GPUs in use once the Pod is placed can take it",
                       "a100-small": "gpu-class: binpack: a node with 100% of its GPUs in use once the Pod is placed can take it"}),
        id="binpack-keeps-the-fullest-node-by-share",
    ),
    pytest.param(
        FilterCase(placed_pod("A100"), ("a10-a", "a100-idle"), ("a100-idle",),
                   unresolvable={"a10-a": "gpu-class: type A10 not in A100"}),
        id="a10-is-not-a100",
    ),
    pytest.param(
        FilterCase(placed_pod("H100", gpus=4), ("h100-busy", "h100-idle"), ("h100-idle",),
                   failed={"h100-busy": "gpu-class: 2 GPUs free, Pod needs 4"}),
        id="too-few-free-gpus-preemption-may-help",
    ),
    pytest.param(
        FilterCase(placed_pod("A100", gpus=4), ("a100-small", "a100-part", "a100-idle"), ("a100-idle",),
                   failed={"a100-part": "gpu-class: 3 GPUs free, Pod needs 4"},
                   unresolvable={"a100-small": "gpu-class: 2 GPUs allocatable, Pod needs 4"}),
        id="too-few-allocatable-unresolvable",
    ),
    pytest.param(
        FilterCase(placed_pod("T4", gpus=2), ("t4-a",), (),
                   unresolvable={"t4-a": "gpu-class: 1 GPU allocatable, Pod needs 2"}),
        id="nothing-fits-singular-gpu",
    ),
    pytest.param(
        FilterCase(placed_pod("H100"), ("h100-down", "h100-cordoned", "h100-idle"), ("h100-idle",),
                   unresolvable={"h100-down": "gpu-class: node not ready", "h100-cordoned": "gpu-class: node cordoned"}),
        id="not-ready-and-cordoned",
    ),
    pytest.param(
        FilterCase(placed_pod("A100"), ("mig-a",), (),
                   unresolvable={"mig-a": "gpu-class: product NVIDIA-A100-SXM4-40GB-MIG-1g.5gb is no GPU type of the catalog"}),
        id="product-of-no-type",
    ),
    pytest.param(
        FilterCase(placed_pod("L4", gpus=2), ("l4-hand",), ("l4-hand",)),
        id="hand-labelled-node",
    ),
    pytest.param(
        FilterCase(placed_pod("H100", init_gpus=4), ("h100-busy", "h100-idle"), ("h100-idle",),
                   failed={"h100-busy": "gpu-class: 2 GPUs free, Pod needs 4"}),
        id="init-container-needs-its-own",
    ),
    pytest.param(
        FilterCase(placed_pod("H100", containers=[gpu_container("main", 1), gpu_container("helper", 2)]),
                   ("h100-busy", "h100-idle"), ("h100-idle",),
                   failed={"h100-busy": "gpu-class: 2 GPUs free, Pod needs 3"}),
        id="app-containers-add-up",
    ),
    pytest.param(
        FilterCase(placed_pod(""), ("h100-idle", "t4-a"), (),
                   unresolvable={"h100-idle": "gpu-class: type H100 not in (none)", "t4-a": "gpu-class: type T4 not in (none)"}),
        id="empty-types-annotation",
    ),
    pytest.param(FilterCase(placed_pod("H100"), (), ()), id="no-candidates"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", FILTER_CASES)
def test_filter(client: FlaskClient, case: FilterCase, mode: str) -> None:
    status, result = post(client, "filter", MODES[mode](case.pod, case.nodes))
    assert status == 200
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["Error"] == ""
    assert passed_names(result, mode) == list(case.passed)
    assert result["FailedNodes"] == dict(case.failed)
    assert result["FailedAndUnresolvableNodes"] == dict(case.unresolvable)


@pytest.mark.parametrize("mode, node, reason", [
    pytest.param("objects", "cpu-a", "gpu-class: not a GPU node", id="objects-cpu-node"),
    pytest.param("names", "cpu-a", "gpu-class: unknown node (gpu-class has seen no GPU product label or DRA GPU on it)",
                 id="names-cpu-node"),
])
def test_filter_non_gpu_node(client: FlaskClient, mode: str, node: str, reason: str) -> None:
    status, result = post(client, "filter", MODES[mode](placed_pod("H100"), ["h100-idle", node]))
    assert status == 200
    assert passed_names(result, mode) == ["h100-idle"]
    assert result["FailedAndUnresolvableNodes"] == {node: reason}


def test_filter_unknown_node_names(client: FlaskClient) -> None:
    status, result = post(client, "filter", args_by_names(placed_pod("H100"), ["node-that-joined-a-second-ago", "h100-idle"]))
    assert status == 200
    assert result["NodeNames"] == ["h100-idle"]
    assert result["FailedAndUnresolvableNodes"] == {
        "node-that-joined-a-second-ago": "gpu-class: unknown node (gpu-class has seen no GPU product label or DRA GPU on it)"
    }


def test_filter_answers_the_node_objects_it_was_sent(client: FlaskClient) -> None:
    """Without a node cache the scheduler continues with the Node objects in the answer: they must be the ones sent."""
    sent = args_by_objects(placed_pod("A100"), ["t4-a", "a100-idle", "a100-part"])
    _, result = post(client, "filter", sent)
    assert result["Nodes"] == {"metadata": {}, "items": [sent["Nodes"]["items"][1], sent["Nodes"]["items"][2]]}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pod", [
    pytest.param(scheduler_pod(make_pod(gpu_limit="1")), id="gpu-pod-without-annotations"),
    pytest.param(scheduler_pod(make_pod({CLASS: "high"}, gpu_limit="1")), id="class-but-not-placed"),
])
def test_filter_passes_pods_the_webhook_did_not_place(client: FlaskClient, pod: dict[str, Any], mode: str) -> None:
    nodes = ["cpu-a", "t4-a", "h100-down", "mig-a"]
    sent = MODES[mode](pod, nodes)
    _, result = post(client, "filter", sent)
    assert passed_names(result, mode) == nodes
    if mode == "objects":
        assert result["Nodes"] == sent["Nodes"]
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {} and result["Error"] == ""


def test_filter_reads_go_field_names_in_any_case(client: FlaskClient) -> None:
    """Go's decoder matches keys case-insensitively; extenders written against other tags send `pod`, `nodenames`."""
    _, result = post(client, "filter", {"pod": placed_pod("H100"), "nodenames": ["h100-idle", "t4-a"]})
    assert result["NodeNames"] == ["h100-idle"]


def test_filter_go_node_list_without_items(client: FlaskClient) -> None:
    _, result = post(client, "filter", {"Pod": placed_pod("H100"), "Nodes": {"metadata": {}, "items": None}, "NodeNames": None})
    assert result["Nodes"] == {"metadata": {}, "items": []} and result["Error"] == ""


def test_inventory_not_yet_read() -> None:
    client = make_app(snapshot_of(synced=False)).test_client()
    status, result = post(client, "filter", args_by_names(placed_pod("H100"), ["h100-idle"]))
    assert status == 200
    assert result["Error"].startswith("gpu-class: gpu-class has not yet read the cluster's nodes")
    status, priorities = post(client, "prioritize", args_by_names(placed_pod("H100"), ["h100-idle"]))
    assert (status, priorities) == (200, [{"Host": "h100-idle", "Score": 0}])
    # Pods that are not the extender's business are not held up
    _, result = post(client, "filter", args_by_names(scheduler_pod(make_pod(gpu_limit="1")), ["h100-idle"]))
    assert result["NodeNames"] == ["h100-idle"] and result["Error"] == ""


# --- prioritize ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreCase:
    pod: dict[str, Any]
    scores: Mapping[str, int]  # every node sent, in this order


SCORE_CASES = [
    pytest.param(
        ScoreCase(placed_pod("H100,A100", class_name="high"),
                  {"h100-busy": 10, "h100-idle": 10, "a100-part": 0, "t4-a": 0}),
        id="performance-two-types",
    ),
    pytest.param(
        ScoreCase(placed_pod("A100,A10,L4", class_name="standard"), {"l4-hand": 0, "a10-a": 1, "a100-idle": 10}),
        id="performance-three-types-weights-like-the-webhook",
    ),
    pytest.param(
        ScoreCase(placed_pod("T4,L4,A10", class_name="economy"), {"a10-a": 0, "l4-hand": 1, "t4-a": 10}),
        id="cost-slowest-first",
    ),
    pytest.param(
        ScoreCase(placed_pod("A10,L4,T4", class_name="economy"), {"a10-a": 0, "l4-hand": 1, "t4-a": 10}),
        id="cost-hand-written-annotation-in-speed-order",
    ),
    pytest.param(
        ScoreCase(placed_pod("A100,H100"), {"h100-idle": 0, "a100-part": 10}),
        id="no-class-follows-annotation",
    ),
    pytest.param(
        ScoreCase(placed_pod("A100,H100", class_name="retired"), {"h100-idle": 0, "a100-part": 10}),
        id="unknown-class-follows-annotation",
    ),
    pytest.param(
        ScoreCase(placed_pod("A100,L4,T4", class_name="balanced"),
                  {"a100-idle": 8, "a100-part": 5, "l4-hand": 5, "t4-a": 0}),
        id="balanced-share-free-once-placed",
    ),
    pytest.param(
        ScoreCase(placed_pod("A100,L4,T4", class_name="packed"),
                  {"a100-idle": 3, "a100-part": 5, "l4-hand": 5, "t4-a": 10}),
        id="binpack-share-in-use-once-placed",
    ),
    pytest.param(
        ScoreCase(placed_pod("A100,L4,T4", gpus=2, class_name="packed"),
                  {"a100-idle": 5, "a100-part": 8, "l4-hand": 10, "t4-a": 0}),
        id="binpack-node-must-fit",
    ),
    pytest.param(
        ScoreCase(placed_pod("A100,L4", gpus=2, class_name="packed"), {"a100-small": 10, "l4-hand": 10}),
        id="binpack-exact-fits-tie",
    ),
    pytest.param(
        ScoreCase(placed_pod("H100", class_name="high"), {"h100-down": 0, "h100-cordoned": 0, "cpu-a": 0, "h100-idle": 10}),
        id="failing-nodes-score-zero",
    ),
    pytest.param(
        ScoreCase(scheduler_pod(make_pod(gpu_limit="1")), {"h100-idle": 0, "t4-a": 0}),
        id="pod-not-placed-no-opinion",
    ),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", SCORE_CASES)
def test_prioritize(client: FlaskClient, case: ScoreCase, mode: str) -> None:
    status, priorities = post(client, "prioritize", MODES[mode](case.pod, list(case.scores)))
    assert status == 200
    assert priorities == [{"Host": n, "Score": s} for n, s in case.scores.items()]


def verdicts_from(free: Sequence[int], needs: int, allocatable: int = 16) -> list[NodeVerdict]:
    return [NodeVerdict(f"n{i}", f >= needs, free_gpus=f, type_name="A100", allocatable=allocatable)
            for i, f in enumerate(free)]


@given(
    free=st.lists(st.integers(min_value=0, max_value=16), min_size=1, max_size=12),
    needs=st.integers(min_value=0, max_value=8),
    strategy=st.sampled_from(["balanced", "packed"]),
)
def test_load_scores_stay_in_range_and_order(free: list[int], needs: int, strategy: str) -> None:
    verdicts = verdicts_from(free, needs)
    scores = score_nodes(verdicts, PodNeeds(types=("A100",), gpus=needs, class_name=strategy), CATALOG)
    fitting = [v for v in verdicts if v.passed]
    assert all(0 <= s <= MAX_EXTENDER_PRIORITY for s in scores.values())
    assert all(scores[v.name] == 0 for v in verdicts if not v.passed)
    # balanced: more free never scores lower; binpack: more free never scores higher
    for a in fitting:
        for b in fitting:
            if a.free_gpus > b.free_gpus:
                assert (scores[a.name] >= scores[b.name]) if strategy == "balanced" else (scores[a.name] <= scores[b.name])


@pytest.mark.parametrize("allocatable, free, gpus, in_use, expected", [
    pytest.param(8, 8, 1, True, 12, id="one-of-eight-in-use-floors"),
    pytest.param(8, 8, 1, False, 87, id="seven-of-eight-free-floors"),
    pytest.param(7, 1, 1, True, 100, id="last-slice"),
    pytest.param(4, 3, 2, False, 25, id="bound-pods-count"),
    pytest.param(0, 0, 1, True, 0, id="no-devices"),
])
def test_share_score_is_node_resources_fit_arithmetic(allocatable: int, free: int, gpus: int, in_use: bool,
                                                     expected: int) -> None:
    """kube-scheduler's mostRequestedScore / leastRequestedScore: requested * 100 / capacity, integer division."""
    verdict = NodeVerdict("n", True, free_gpus=free, allocatable=allocatable)
    assert share_score(verdict, gpus, in_use=in_use) == expected


# --- bad requests and bad Pods ---------------------------------------------------------------

GOOD_POD = placed_pod("H100")


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("body, message", [
    pytest.param(b"", "not JSON", id="empty"),
    pytest.param(b"{not json", "not JSON", id="not-json"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "not JSON", id="nested-too-deep"),
    pytest.param(b"[]", "not a JSON object", id="array"),
    pytest.param(b"null", "not a JSON object", id="null"),
    pytest.param({"Pod": None, "NodeNames": ["a"]}, "Pod must be", id="pod-null"),
    pytest.param({"Pod": "train", "NodeNames": ["a"]}, "Pod must be", id="pod-string"),
    pytest.param({"Pod": GOOD_POD}, "needs Nodes", id="no-nodes"),
    pytest.param({"Pod": GOOD_POD, "Nodes": None, "NodeNames": None}, "needs Nodes", id="both-null"),
    pytest.param({"Pod": GOOD_POD, "Nodes": ["a"]}, "Nodes must be", id="nodes-list"),
    pytest.param({"Pod": GOOD_POD, "Nodes": {"items": {}}}, "Nodes.items", id="items-object"),
    pytest.param({"Pod": GOOD_POD, "Nodes": {"items": [{"metadata": {}}]}}, "Nodes.items[0]", id="node-without-name"),
    pytest.param({"Pod": GOOD_POD, "NodeNames": "h100-idle"}, "NodeNames must be", id="names-string"),
    pytest.param({"Pod": GOOD_POD, "NodeNames": ["h100-idle", 7]}, "NodeNames must be", id="names-not-strings"),
])
def test_bad_requests_get_a_json_400(client: FlaskClient, verb: str, body: bytes | dict[str, Any], message: str) -> None:
    status, error = post(client, verb, body)
    assert status == 400
    assert error["error"] == "Bad Request" and message in error["message"]


def with_pod(change: Any) -> dict[str, Any]:
    pod = copy.deepcopy(GOOD_POD)
    change(pod)
    return pod


@pytest.mark.parametrize("pod, problem", [
    pytest.param(with_pod(lambda p: p["metadata"]["annotations"].update(team=7)),
                 "Pod ml/train: metadata.annotations['team'] must be a string", id="annotation-not-string"),
    pytest.param(with_pod(lambda p: p.update(metadata=["train"])), "Pod ?: metadata must be an object", id="metadata-list"),
    pytest.param(with_pod(lambda p: p["spec"].update(containers={"name": "main"})),
                 "Pod ml/train: spec.containers must be a list", id="containers-object"),
    pytest.param(with_pod(lambda p: p["spec"]["containers"][0].update(resources=[])),
                 "Pod ml/train: spec.containers[0].resources must be an object", id="resources-list"),
    pytest.param(with_pod(lambda p: p["spec"]["containers"][0]["resources"].update(limits="4")),
                 "Pod ml/train: spec.containers[0].resources.limits must be an object", id="limits-string"),
])
def test_pod_problems(client: FlaskClient, pod: dict[str, Any], problem: str) -> None:
    """The scheduler reads a Pod-level failure from `Error` of a 200 (any other status is an extender failure)."""
    status, result = post(client, "filter", args_by_names(pod, ["h100-idle"]))
    assert status == 200
    assert result["Error"] == f"gpu-class: cannot read {problem}"
    assert result["NodeNames"] is None and result["Nodes"] is None
    # prioritize has no error field; its errors are ignored anyway: no opinion
    status, priorities = post(client, "prioritize", args_by_names(pod, ["h100-idle"]))
    assert (status, priorities) == (200, [{"Host": "h100-idle", "Score": 0}])


def test_a_bug_is_a_200_never_a_5xx(monkeypatch: pytest.MonkeyPatch) -> None:
    import webhook.serving.extender_routes as routes

    def broken(*_: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr(routes, "filter_assuming", broken)
    monkeypatch.setattr(routes, "prioritize_nodes", broken)
    app = Flask("bare")
    register_extender_routes(app, CATALOG, StaticInventory(snapshot_of()), the_test_scheduler)
    client = app.test_client()
    status, result = post(client, "filter", args_by_names(GOOD_POD, ["h100-idle"]))
    assert status == 200 and result["Error"].startswith("gpu-class: internal error filtering nodes for Pod ml/train")
    status, priorities = post(client, "prioritize", args_by_names(GOOD_POD, ["h100-idle"]))
    assert (status, priorities) == (200, [{"Host": "h100-idle", "Score": 0}])


# --- admission and scheduling agree --------------------------------------------------------


def test_the_pod_admission_placed_is_scheduled_where_admission_allowed() -> None:
    catalog = make_catalog("schedulerName: gpu-class-scheduler\n")
    client = make_app(snapshot_of(catalog=catalog), catalog).test_client()
    pod = make_pod({CLASS: "high", "gpu-class.io/count": "4"})
    status, review = post(client, "mutate", make_review(pod))
    assert status == 200 and review["response"]["allowed"] is True
    import base64

    placed = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(review["response"]["patch"])))
    assert placed["spec"]["schedulerName"] == "gpu-class-scheduler"  # high: performance
    assert placed["metadata"]["annotations"][TYPES] == "H100,A100"

    names = [n["metadata"]["name"] for n in CLUSTER]
    _, result = post(client, "filter", args_by_names(scheduler_pod(placed), names))
    # performance: of the nodes that can hold it, only those of the fastest type stay
    assert result["NodeNames"] == ["h100-idle"]
    assert result["FailedNodes"] == {"h100-busy": "gpu-class: 2 GPUs free, Pod needs 4",
                                     "a100-part": "gpu-class: 3 GPUs free, Pod needs 4"}
    assert result["FailedAndUnresolvableNodes"]["a100-idle"] == (
        "gpu-class: performance: a node of the preferred type H100 can take it")
    # every node the extender keeps is one the admission's required node affinity admits
    (term,) = placed["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for name in result["NodeNames"]:
        labels = BY_NAME[name]["metadata"]["labels"]
        assert all(labels.get(e["key"]) in e["values"] for e in term["matchExpressions"]), name

    _, priorities = post(client, "prioritize", args_by_names(scheduler_pod(placed), ["h100-idle", "a100-idle"]))
    assert priorities == [{"Host": "h100-idle", "Score": 10}, {"Host": "a100-idle", "Score": 0}]


# --- the real server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving_test_inventory(tmp_path_factory.mktemp("extender-server"), extender=True) as srv:
        yield srv


def test_real_server_serves_the_extender(server: Server) -> None:
    """`gpuclass serve` over TLS, called as kube-scheduler calls it: on the extender's listener, with its
    client certificate."""
    pod = placed_pod("H100,A100", gpus=2, class_name="high")
    conn = server.scheduler_connection()
    try:
        status, result = server.post("/filter", args_by_names(pod, ["h100-a", "a100-a", "t4-a", "cpu-a"]), conn=conn)
        assert status == 200, result
        assert result["NodeNames"] == ["h100-a"]
        assert result["FailedAndUnresolvableNodes"] == {
            "a100-a": "gpu-class: performance: a node of the preferred type H100 can take it",
            "t4-a": "gpu-class: type T4 not in H100,A100",
            "cpu-a": "gpu-class: unknown node (gpu-class has seen no GPU product label or DRA GPU on it)",
        }
        status, priorities = server.post("/prioritize", args_by_names(pod, ["h100-a", "a100-a"]), conn=conn)
        assert (status, priorities) == (200, [{"Host": "h100-a", "Score": 10}, {"Host": "a100-a", "Score": 0}])
        status, error = server.post("/filter", b"{", conn=conn)
        assert status == 400 and error["message"].startswith("body is not JSON")
    finally:
        conn.close()
    calls = [r for r in log_records(server) if r["msg"] == "extender"]
    # the pod is made up (no watch on a file inventory): answered, and not remembered
    assert {(r["verb"], r["caller"], r.get("pod_known")) for r in calls} >= {
        ("filter", CLIENT_COMMON_NAME, False), ("prioritize", CLIENT_COMMON_NAME, None)}


# --- who may call the extender -------------------------------------------------------------


def log_records(server: Server) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


def refusals(server: Server) -> list[tuple[str, int | str]]:
    return [(r["msg"], r["status"]) for r in log_records(server) if r["msg"].startswith("extender c")]


def other_ca_client(tmp: Path) -> tuple[Path, Path]:
    """A client certificate of a CA the server does not trust, made as `gpuclass certs` makes its own."""
    other = write_certs(tmp / "other-ca")
    return other / "client.crt", other / "client.key"


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Server]:
    """A server of its own, whose log holds only what the test did."""
    with serving_test_inventory(tmp_path, extender=True) as srv:
        yield srv


FILTER_ARGS = args_by_names(placed_pod("H100", class_name="high"), ["h100-a"])


@pytest.mark.parametrize("where, status", [
    pytest.param("extender-listener-without-a-certificate", 401, id="no-certificate"),
    pytest.param("admission-listener-with-the-certificate", 403, id="admission-listener"),
    pytest.param("admission-listener-without-a-certificate", 403, id="admission-listener-anonymous"),
])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_callers_without_the_schedulers_certificate_are_refused_and_logged(fresh_server: Server, where: str,
                                                                           status: int, verb: str) -> None:
    server = fresh_server
    certificate = server.ca_file.parent / "client.crt", server.ca_file.parent / "client.key"
    port = server.extender_port if where.startswith("extender") else server.port
    conn = server.connection(port=port, client=certificate if where.endswith("with-the-certificate") else None)
    try:
        got, error = server.post(f"/{verb}", FILTER_ARGS, conn=conn)
        assert (got, error["error"]) == (status, "Unauthorized" if status == 401 else "Forbidden")
        assert "certificate" in error["message"]
        # the connection stays usable: the scheduler's own is refused nothing else
        assert server.post("/healthz", b"", conn=conn)[0] == 405
    finally:
        conn.close()
    assert refusals(server) == [("extender call refused", status)]
    assert [r for r in log_records(server) if r["msg"] == "extender"] == [], "refused before reading the body"


def test_a_certificate_the_client_ca_did_not_sign_fails_the_handshake(fresh_server: Server, tmp_path: Path) -> None:
    server = fresh_server
    assert server.extender_port is not None
    conn = server.connection(port=server.extender_port, client=other_ca_client(tmp_path))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        server.post("/filter", FILTER_ARGS, conn=conn)
    conn.close()
    # the server writes its line after the client has seen the handshake fail
    assert server.post("/filter", FILTER_ARGS, conn=server.scheduler_connection())[0] == 200, "and serves on"
    assert refusals(server) == [("extender connection refused", "tls-handshake-failed")]


def test_the_serving_certificate_is_no_client_certificate(fresh_server: Server) -> None:
    """Signed by the same CA, but for server authentication only: it cannot call the extender."""
    server = fresh_server
    serving = server.ca_file.parent / "tls.crt", server.ca_file.parent / "tls.key"
    conn = server.connection(port=server.extender_port, client=serving)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        server.post("/filter", FILTER_ARGS, conn=conn)
    conn.close()


def test_admission_is_served_whatever_certificate_the_api_server_presents(fresh_server: Server,
                                                                          tmp_path: Path) -> None:
    """The admission listener asks for no client certificate: an API server configured to present one
    of another CA (for other webhooks) is served as before."""
    server = fresh_server
    for client in (None, other_ca_client(tmp_path)):
        conn = server.connection(client=client)
        try:
            status, body = server.post("/mutate", make_review(make_pod({CLASS: "high"}), uid="api-server"), conn=conn)
            assert status == 200 and body["response"]["allowed"] is True
        finally:
            conn.close()


def test_a_rotated_client_ca_is_trusted_without_a_restart(fresh_server: Server, tmp_path: Path) -> None:
    """The install rotates the client CA with the serving certificate (one CA): the new file is read for
    new connections, and a bundle of the new and the old CA trusts both."""
    server = fresh_server
    old_ca = server.ca_file.read_bytes()
    new = write_certs(tmp_path / "rotated")
    server.ca_file.write_bytes((new / "ca.crt").read_bytes() + old_ca)

    def status_with(client: tuple[Path, Path]) -> int:
        assert server.extender_port is not None
        conn = server.connection(port=server.extender_port, client=client)
        try:
            return server.post("/filter", FILTER_ARGS, conn=conn)[0]
        except (ssl.SSLError, ConnectionError):
            return 0
        finally:
            conn.close()

    rotated = (new / "client.crt", new / "client.key")
    deadline = time.monotonic() + 10
    while status_with(rotated) != 200 and time.monotonic() < deadline:
        time.sleep(0.2)  # the server looks at the files at most once a second
    assert status_with(rotated) == 200
    assert server.post("/filter", FILTER_ARGS, conn=server.scheduler_connection())[0] == 200, "the old CA too"


@pytest.mark.parametrize("args, message", [
    pytest.param(["--extender-bind", "127.0.0.1:0"], "--extender-bind and --client-ca-file go together",
                 id="listener-without-ca"),
    pytest.param(["--client-ca-file", "ca.crt"], "--extender-bind and --client-ca-file go together",
                 id="ca-without-listener"),
    pytest.param(["--extender-bind", "127.0.0.1:8443", "--client-ca-file", "ca.crt"], "needs a port of its own",
                 id="same-port"),
    pytest.param(["--extender-bind", "8444", "--client-ca-file", "ca.crt"], "give HOST:PORT", id="no-host"),
    pytest.param(["--extender-bind", "127.0.0.1:8444", "--client-ca-file", "tls.key"], "cannot use --client-ca-file",
                 id="ca-not-a-certificate"),
    pytest.param(["--extender-bind", "127.0.0.1:8444", "--client-ca-file", "missing.crt"],
                 "cannot use --client-ca-file", id="ca-missing"),
])
def test_extender_listener_misconfiguration_fails_at_start(tmp_path: Path, args: list[str], message: str) -> None:
    certificates = write_certs(tmp_path / "certs")
    nodes = write_objects(tmp_path / "nodes.yaml", [make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8)])
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--nodes", str(nodes), "--bind", "127.0.0.1:8443",
         "--cert-file", str(certificates / "tls.crt"), "--key-file", str(certificates / "tls.key"),
         *(str(certificates / a) if a.endswith((".crt", ".key")) else a for a in args)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


# --- assumed binds -------------------------------------------------------------------------


def _replica(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    """Another Pod of the same template, as a ReplicaSet makes it: a name and uid of its own."""
    out = copy.deepcopy(pod)
    out["metadata"].update(uid=uid, name=f"train-{uid}")
    return out


def knowing(snapshot: Snapshot, *pods: Mapping[str, Any], catalog: Catalog = CATALOG) -> Snapshot:
    """`snapshot` with `pods` seen by the watch, unbound (reduced as the watch reduces them)."""
    state = InventoryState(catalog=catalog, synced=snapshot.synced, watch_pods=True)
    state.replace_nodes(snapshot.nodes.values())
    state.requested = Map(snapshot.requested)
    state.replace_unbound_pods(p for p in (unbound_gpu_pod(pod, catalog.resources) for pod in pods) if p is not None)
    return state.publish()


def test_a_burst_of_pods_counts_the_ones_just_sent() -> None:
    """The scheduler binds the next replica before the watch shows the last one bound."""
    pod = placed_pod("A100,T4", class_name="packed")  # free: T4 1 of 1 (t4-a), A100 4 of 4 (a100-idle)
    replicas = [_replica(pod, f"uid-replica-{i}") for i in range(3)]
    client = make_app(knowing(snapshot_of(), *replicas)).test_client()
    kept = []
    for replica in replicas[:2]:
        _, result = post(client, "filter", args_by_names(replica, ["t4-a", "a100-idle"]))
        kept.append(result["NodeNames"])
    # the first fills T4's only GPU; with it counted, the second cannot go there
    assert kept == [["t4-a"], ["a100-idle"]]
    # the first asking again (its bind failed) is not counted against itself: T4's GPU is free for it
    _, again = post(client, "filter", args_by_names(replicas[0], ["t4-a", "a100-idle"]))
    assert again["NodeNames"] == ["t4-a"]
    _, third = post(client, "filter", args_by_names(replicas[2], ["t4-a", "a100-idle"]))
    assert third["FailedNodes"] == {"t4-a": "gpu-class: 0 GPUs free, Pod needs 1"}


@pytest.mark.parametrize("known_then, known_now, age_seconds, counted", [
    pytest.param(True, True, 0.0, True, id="not-yet-bound-counted"),
    pytest.param(True, False, 0.0, False, id="watch-saw-the-bind-or-deletion"),
    pytest.param(True, True, ASSUME_SECONDS + 1, False, id="expired"),
])
def test_assumptions_end_when_the_bind_is_seen_or_late(known_then: bool, known_now: bool, age_seconds: float,
                                                       counted: bool) -> None:
    pod = _replica(placed_pod("A100", gpus=2), "uid-1")
    before = snapshot_of(pods=[("ml/other", "a100-idle", 1)])
    now = knowing(before, *([pod] if known_now else []))
    assumed = {"uid-1": Assumed("a100-idle", "nvidia.com/gpu", 2, at_seconds=100.0)}
    adjusted, live = with_assumed(now, assumed, 100.0 + age_seconds)
    assert adjusted.requested[("a100-idle", "nvidia.com/gpu")] == (3 if counted else 1)
    assert ("uid-1" in live) is counted


# --- no state from strangers ---------------------------------------------------------------

DEMO = Path(__file__).resolve().parent.parent / "deploy" / "demo"


def test_forged_filter_calls_change_no_genuine_answer() -> None:
    """The attack of a forged `filter` for made-up Pods, on the demo inventory: without the inventory's
    knowledge of the Pod, each forged call counted its GPU on the node it kept for 10 s, and twelve of
    them left the genuine Pod no node ("0 GPUs free" on both T4 nodes)."""
    catalog = load_default_catalog()
    nodes = read_inventory((str(DEMO / "nodes.yaml"),), catalog).nodes
    genuine = _replica(placed_pod("L4,A10,T4", class_name="inference"), "3b0d6c1e-genuine")
    state = InventoryState(catalog=catalog, synced=True, watch_pods=True)
    state.replace_nodes(nodes)
    state.replace_unbound_pods([p for p in [unbound_gpu_pod(genuine, catalog.resources)] if p is not None])
    client = make_app(state.publish(), catalog).test_client()
    t4_nodes = ["gpu-t4-0", "gpu-t4-shared-0"]

    _, first = post(client, "filter", args_by_names(genuine, t4_nodes))
    assert first["NodeNames"] == ["gpu-t4-0"]
    forged = [_replica(genuine, f"forged-{i}") for i in range(12)]
    # and one that copies the genuine Pod's uid but asks for another request
    greedy = copy.deepcopy(genuine)
    _request(greedy, "nvidia.com/gpu", 4)
    for pod in [*forged, greedy]:
        status, _ = post(client, "filter", args_by_names(pod, t4_nodes))
        assert status == 200
    _, again = post(client, "filter", args_by_names(genuine, t4_nodes))
    assert again == first


def _request(pod: dict[str, Any], resource: str, devices: int) -> None:
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: str(devices)}, "requests": {resource: str(devices)}}


@pytest.mark.parametrize("change, known", [
    pytest.param(lambda p: p, True, id="as-seen"),
    pytest.param(lambda p: p["metadata"].update(uid="made-up"), False, id="another-uid"),
    pytest.param(lambda p: p["metadata"].update(name="other"), False, id="another-name"),
    pytest.param(lambda p: p["metadata"].update(namespace="other"), False, id="another-namespace"),
    pytest.param(lambda p: _request(p, "nvidia.com/gpu", 3), False, id="another-count"),
    pytest.param(lambda p: _request(p, "nvidia.com/mig-1g.5gb", 1), False, id="another-resource"),
])
def test_only_a_pod_the_inventory_knows_leaves_an_assumption(change: Any, known: bool) -> None:
    seen = _replica(placed_pod("A100", gpus=1), "uid-seen")
    sent = copy.deepcopy(seen)
    change(sent)
    snapshot = knowing(snapshot_of(), seen)
    outcome = filter_assuming(parse_extender_args(args_by_names(sent, ["a100-idle"])), snapshot, CATALOG, {}, 0.0)
    assert outcome.result["NodeNames"] == ["a100-idle"]  # answered alike
    assert outcome.pod_known is known
    assert (outcome.assumed is not None) is known
    assert set(outcome.assumptions) == ({"uid-seen"} if known else set())


class LateWatch:
    """An inventory whose watch brings the Pods after the scheduler asked: `later` is published on the
    first wait for a newer snapshot (or nothing new, when `later` is None)."""

    def __init__(self, now: Snapshot, later: Snapshot | None) -> None:
        self.current, self.later, self.waits = now, later, 0

    def snapshot(self) -> Snapshot:
        return self.current

    def wait_newer(self, than: Snapshot, timeout_seconds: float) -> Snapshot:
        assert 0 < timeout_seconds <= UNKNOWN_POD_WAIT_SECONDS
        self.waits += 1
        if self.later is not None:
            self.current, self.later = self.later, None
        return self.current

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        return True, {}

    def namespace_policy(self, snapshot: Snapshot, name: str) -> None:
        return None


def test_filter_waits_for_the_watch_to_bring_a_pod_the_scheduler_asked_about_first() -> None:
    """The scheduler can ask about a Pod before the webhook's watch has brought its creation (one Pod in
    four on the local control plane): filter waits for the watch, then counts the Pod as it should."""
    pod = placed_pod("A100,T4", class_name="packed")  # free: T4 1 of 1 (t4-a), A100 4 of 4 (a100-idle)
    replicas = [_replica(pod, f"uid-replica-{i}") for i in range(2)]
    inventory = LateWatch(knowing(snapshot_of()), knowing(snapshot_of(), *replicas))
    client = create_app(CATALOG, inventory, extender_caller_of=the_test_scheduler).test_client()
    kept = [post(client, "filter", args_by_names(r, ["t4-a", "a100-idle"]))[1]["NodeNames"] for r in replicas]
    assert kept == [["t4-a"], ["a100-idle"]], "the first replica counted on T4, as in the burst above"
    assert inventory.waits == 1, "the second replica was known at once"


@pytest.mark.parametrize("watched, waits", [
    pytest.param(True, 1, id="pods-watched-waits-once-for-nothing"),
    pytest.param(False, 0, id="pods-not-watched-no-wait"),
])
def test_a_made_up_pod_is_answered_after_the_wait_and_leaves_nothing(watched: bool, waits: int) -> None:
    state = InventoryState(catalog=CATALOG, synced=True, watch_pods=watched)
    state.replace_nodes(snapshot_of().nodes.values())
    inventory = LateWatch(state.publish(), None)
    client = create_app(CATALOG, inventory, extender_caller_of=the_test_scheduler).test_client()
    made_up = _replica(placed_pod("T4", class_name="packed"), "uid-made-up")
    for _ in range(2):
        _, result = post(client, "filter", args_by_names(made_up, ["t4-a"]))
        assert result["NodeNames"] == ["t4-a"], "its own earlier call counted nothing"
    assert inventory.waits == 2 * waits


@pytest.mark.parametrize("mode", MODES)
def test_filter_counts_dra_devices_and_their_claims(mode: str) -> None:
    """A node whose GPUs are DRA devices passes or fails on them, whether the scheduler sends names or
    Node objects (which carry no devices): free devices are those no ResourceClaim holds."""
    from builders import NVIDIA_DRIVER, make_bare_node, make_claim, make_slice, nvidia_device_classes, nvidia_gpus
    from webhook.core.catalog.loading import load_default_catalog

    catalog = load_default_catalog()
    nodes = [make_bare_node("dra-free"), make_bare_node("dra-full")]
    objects = [*nodes, make_slice("dra-free", nvidia_gpus(4)), make_slice("dra-full", nvidia_gpus(2)),
               *nvidia_device_classes(),
               make_claim("c", [(NVIDIA_DRIVER, "dra-full", "gpu-0"), (NVIDIA_DRIVER, "dra-full", "gpu-1")])]
    snapshot = build_snapshot(catalog, objects)
    pod = placed_pod("H100", gpus=2)
    body = ({"Pod": pod, "Nodes": None, "NodeNames": ["dra-free", "dra-full"]} if mode == "names" else
            {"Pod": pod, "Nodes": {"metadata": {}, "items": [as_scheduled(n) for n in nodes]}, "NodeNames": None})
    result = filter_nodes(parse_extender_args(body), snapshot, catalog)
    assert passed_names(result, mode) == ["dra-free"]
    assert result["FailedNodes"] == {"dra-full": "gpu-class: 0 GPUs free, Pod needs 2"}
