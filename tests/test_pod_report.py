"""`gpuclass explain pod/NAME`: what gpu-class decided for an existing Pod, where it ran, and where it could run now."""

from __future__ import annotations

from typing import Any

import pytest

from builders import make_node, make_pod, placed_affinity
from test_inventory_report import A100, CATALOG, H100, snapshot_of
from webhook.core.reports.pod_report import build_pod_report, can_run_now, render_pod_text

NODES = [make_node("h100-a", H100, gpus=8), make_node("a100-a", A100, gpus=4),
         make_node("a100-b", A100, gpus=4, unschedulable=True), make_node("cpu-a"),
         make_node("rtx", "NVIDIA-GeForce-RTX-5090", gpus=1)]


def existing_pod(types: str | None = "H100,A100", *, node: str | None = None, phase: str = "Pending",
                 gpus: str = "2") -> dict[str, Any]:
    annotations = {"gpu-class.io/class": "high", **({"gpu-class.io/types": types} if types is not None else {})}
    # with the affinity the webhook writes beside its types, which the upgrader believes them by
    pod = make_pod(annotations, gpu_limit=gpus, affinity=placed_affinity(types.split(",")) if types else None)
    if node is not None:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase}
    return pod


@pytest.mark.parametrize("pod, node_type, preferred, says", [
    pytest.param(existing_pod(node="h100-a", phase="Running"), "H100", True, "H100 is its preferred type",
                 id="on-preferred"),
    pytest.param(existing_pod(node="a100-a", phase="Running"), "A100", False, "A100 is its 2nd choice; it preferred H100",
                 id="on-second-choice"),
    pytest.param(existing_pod("A100", node="h100-a", phase="Running"), "H100", False,
                 "that is none of its types; it preferred A100", id="on-a-type-it-was-not-given"),
    pytest.param(existing_pod(node="cpu-a", phase="Succeeded"), None, False,
                 "scheduled and finished on cpu-a, a node with no GPU product label", id="finished-on-a-cpu-node"),
    pytest.param(existing_pod(node="rtx", phase="Running"), None, False, "scheduled on rtx, a node of no catalog type",
                 id="unknown-product-node"),
    pytest.param(existing_pod(None, node="h100-a", phase="Running"), "H100", None,
                 "gpu-class did not place this Pod", id="not-placed-by-gpu-class"),
])
def test_a_bound_pod(pod: dict[str, Any], node_type: str | None, preferred: bool | None, says: str) -> None:
    report = build_pod_report(pod, snapshot_of(NODES), CATALOG)
    assert report["node"] == pod["spec"]["nodeName"]
    assert report["nodeType"] == node_type
    assert report["onPreferredType"] is preferred
    assert report["room"] is None and can_run_now(report)
    assert says in render_pod_text(report)


@pytest.mark.parametrize("gpus, used, room, runnable", [
    pytest.param("2", {}, {"H100": (1, 8), "A100": (1, 4)}, True, id="room-on-both"),
    pytest.param("6", {}, {"H100": (1, 8), "A100": (0, 0)}, True, id="too-big-for-a100"),
    pytest.param("6", {"h100-a": 4}, {"H100": (0, 0), "A100": (0, 0)}, False, id="no-room-anywhere"),
])
def test_a_pending_pod_sees_which_types_have_room(gpus: str, used: dict[str, int], room: dict[str, tuple[int, int]],
                                                   runnable: bool) -> None:
    report = build_pod_report(existing_pod(gpus=gpus), snapshot_of(NODES, used), CATALOG)
    assert report["types"] == ["H100", "A100"] and report["gpus"] == int(gpus)
    assert {r["type"]: (r["nodesWithRoom"], r["maxFreeGpus"]) for r in report["room"] or []} == room
    assert can_run_now(report) is runnable
    a100 = next(r for r in report["room"] or [] if r["type"] == "A100")
    assert a100["elsewhere"].get("node cordoned") == 1


def test_a_pending_pod_with_a_type_that_has_no_nodes() -> None:
    report = build_pod_report(existing_pod("H200,H100"), snapshot_of(NODES), CATALOG)
    assert [(r["type"], r["nodesWithRoom"], r["elsewhere"]) for r in report["room"] or []] == [
        ("H200", 0, {}), ("H100", 1, {})]
    assert "no nodes of this type" in render_pod_text(report)


def test_a_pod_whose_annotations_cannot_be_read_is_reported_not_raised() -> None:
    pod = existing_pod()
    pod["spec"]["containers"][0]["resources"] = "lots"
    report = build_pod_report(pod, snapshot_of(NODES), CATALOG)
    assert report["problem"] and "resources must be an object" in report["problem"]


@pytest.mark.parametrize("scheduler, order", [
    pytest.param(None, "preferred", id="default-scheduler"),
    pytest.param("gpu-class-scheduler-binpack", "strict", id="a-strict-profile"),
    pytest.param("volcano", "preferred", id="another-scheduler"),
])
def test_the_report_says_which_guarantee_the_order_had(scheduler: str | None, order: str) -> None:
    pod = existing_pod(node="a100-a", phase="Running")
    if scheduler is not None:
        pod["spec"]["schedulerName"] = scheduler
    report = build_pod_report(pod, snapshot_of(NODES), CATALOG)
    assert (report["scheduler"], report["order"]) == (scheduler or "default-scheduler", order)
    assert f"order: {order} (scheduler {scheduler or 'default-scheduler'})" in render_pod_text(report)
    assert build_pod_report(existing_pod(None, node="h100-a"), snapshot_of(NODES), CATALOG)["order"] is None


def test_a_pod_on_dra_devices_names_the_claim_the_scheduler_made() -> None:
    from builders import make_bare_node, make_slice, nvidia_device_classes, nvidia_gpus
    from webhook.core.catalog.loading import load_default_catalog
    from webhook.core.view.inventory import build_snapshot

    catalog = load_default_catalog()
    snapshot = build_snapshot(catalog, [make_bare_node("dra-1"), make_slice("dra-1", nvidia_gpus(4)),
                                        make_node("dp-1", H100, gpus=8), *nvidia_device_classes()])
    pod = existing_pod("H100", node="dra-1", phase="Running")
    pod["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "train-extended-resources-x7k2p",
                                                    "requestMappings": []}
    report = build_pod_report(pod, snapshot, catalog)
    assert (report["nodeType"], report["nodeDevices"], report["onPreferredType"]) == ("H100", "dra", True)
    assert "scheduled on dra-1: H100 (DRA devices, claim train-extended-resources-x7k2p)" in render_pod_text(report)
    on_plugin = build_pod_report(existing_pod("H100", node="dp-1", phase="Running"), snapshot, catalog)
    assert (on_plugin["nodeDevices"], on_plugin["claim"]) == ("device-plugin", None)


RS_OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "infer-1", "uid": "u", "controller": True}]


@pytest.mark.parametrize("annotations, owners, used, says", [
    pytest.param({}, RS_OWNER, {}, "upgrade: not opted in", id="not-opted-in"),
    pytest.param({"gpu-class.io/upgrade": "true"}, [], {}, "never moved: no controller that recreates it",
                 id="bare-pod"),
    pytest.param({"gpu-class.io/upgrade": "true"}, RS_OWNER, {}, "H100 has room for it now", id="h100-has-room"),
    pytest.param({"gpu-class.io/upgrade": "true"}, RS_OWNER, {"h100-a": 7}, "no type better than A100 has room",
                 id="h100-full"),
])
def test_explain_says_whether_the_upgrader_would_move_it(annotations: dict[str, str], owners: list[dict[str, Any]],
                                                        used: dict[str, int], says: str) -> None:
    pod = existing_pod(node="a100-a", phase="Running")
    pod["metadata"]["annotations"].update(annotations)
    pod["metadata"]["uid"] = "pod-uid"
    pod["metadata"]["ownerReferences"] = owners
    report = build_pod_report(pod, snapshot_of(NODES, {"a100-a": 2, **used}), CATALOG)
    assert report["upgrade"] is not None and says in report["upgrade"]
    assert says in render_pod_text(report)


def scheduler_refused(pod: dict[str, Any], message: str) -> dict[str, Any]:
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": message}]
    return pod


@pytest.mark.parametrize("pod, nodes, says, absent", [
    pytest.param(existing_pod(node="h100-a", phase="Running"), [], [
        "your rights do not list the cluster's nodes and Pods",
        "scheduled on h100-a (its GPU type is not shown: your rights do not get nodes)"],
        ["preferred type", "choice", "none of its types"], id="bound-node-not-readable"),
    pytest.param(existing_pod(node="h100-a", phase="Running"), [NODES[0]], [
        "scheduled on h100-a: H100 (", "H100 is its preferred type"], ["not shown"], id="bound-node-readable"),
    pytest.param(existing_pod(node="a100-a", phase="Running"), [NODES[1]], [
        "A100 is its 2nd choice; it preferred H100"], ["not shown"], id="second-choice-node-readable"),
    pytest.param(scheduler_refused(existing_pod(), "0/5000 nodes are available: 3 Insufficient nvidia.com/gpu."), [], [
        "default-scheduler says: 0/5000 nodes are available: 3 Insufficient nvidia.com/gpu."],
        ["NODES-WITH-ROOM", "no node of its types has room"], id="pending-with-the-scheduler-s-word"),
])
def test_a_tenant_s_view_holds_what_the_pod_and_its_node_say(pod: dict[str, Any], nodes: list[dict[str, Any]],
                                                              says: list[str], absent: list[str]) -> None:
    report = build_pod_report(pod, snapshot_of(nodes), CATALOG, view="namespace")
    text = render_pod_text(report)
    assert report["view"] == "namespace" and report["room"] is None and report["upgrade"] is None
    assert can_run_now(report)  # nothing says it cannot: its rights do not show the room
    assert [s for s in says if s not in text] == [] and [a for a in absent if a in text] == []


def test_the_scheduler_s_word_is_kept_for_a_pending_pod_only() -> None:
    bound = scheduler_refused(existing_pod(node="h100-a", phase="Running"), "an old word")
    assert build_pod_report(bound, snapshot_of(NODES), CATALOG)["schedulerSays"] is None
    pending = scheduler_refused(existing_pod(), "0/5 nodes are available")
    assert build_pod_report(pending, snapshot_of(NODES), CATALOG)["schedulerSays"] == "0/5 nodes are available"
