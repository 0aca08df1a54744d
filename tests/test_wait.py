"""gpu-class.io/max-wait: how the webhook reads, keeps or drops a wait; what the pending and waiting gauges count;
what explain says of a Pod's wait. gpu-class-scheduler's side is deploy/scheduler/plugin/nodelabelindex/wait_test.go."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import jsonpatch
import pytest

from builders import make_catalog, make_node, make_pod
from webhook.core.admission.words import quoted
from webhook.core.catalog.model import CatalogError
from webhook.core.catalog.wait import parse_wait
from webhook.core.view.inventory import InventoryState, build_snapshot
from webhook.core.view.nodes import node_info_from_object
from webhook.core.view.pods import UnboundGpuPod
from webhook.core.view.snapshot import Snapshot
from webhook.core.reports.fidelity import pending_by_class, waiting_by_class
from webhook.core.admission.patch import build_patch
from webhook.core.admission.planner import plan
from webhook.core.reports.pod_report import wait_outlook

W = "gpu-class.io/max-wait"
STRICT = "gpu-class-scheduler"


def snapshot_of(nodes: list[dict[str, Any]], catalog: Any) -> Snapshot:
    return build_snapshot(catalog, nodes)


@pytest.mark.parametrize("raw, seconds", [
    pytest.param("90s", 90, id="seconds"), pytest.param("10m", 600, id="minutes"), pytest.param("2h", 7200, id="hours"),
    pytest.param("1h30m", 5400, id="hours-and-minutes"), pytest.param(" 5m ", 300, id="spaces-around"),
    pytest.param("24h", 86400, id="the-longest"), pytest.param("25h", None, id="longer-than-a-day"),
    pytest.param("0s", None, id="zero"), pytest.param("10", None, id="no-unit"), pytest.param("1.5h", None, id="decimal"),
    pytest.param("10m1h", None, id="units-out-of-order"), pytest.param("", None, id="empty"),
    pytest.param(600, None, id="not-a-string"),
])
def test_parse_wait(raw: Any, seconds: int | None) -> None:
    assert parse_wait(raw) == seconds


CATALOG_EXTRA = """  - {name: patient, types: [H100, A100], maxWait: 10m}
"""


ONLY_OURS = "only gpu-class-scheduler keeps it: set schedulerName: gpu-class-scheduler"


@pytest.mark.parametrize("scheduler, class_name, pod_wait, labels, kept, warned", [
    pytest.param(STRICT, "high", "60s", {}, "60s", None, id="strict-keeps-the-pods-wait"),
    pytest.param(STRICT, "patient", None, {}, "10m", None, id="strict-writes-the-class-wait"),
    pytest.param(STRICT, "patient", "30s", {}, "30s", None, id="the-pods-wait-wins-over-the-class"),
    pytest.param(None, "high", "60s", {}, None, ONLY_OURS, id="default-scheduler-drops-it"),
    pytest.param("gpu-class-extender", "high", "60s", {}, None, ONLY_OURS, id="a-scheduler-not-strict-drops-it"),
    pytest.param(None, "patient", None, {}, None, None, id="a-class-wait-where-no-scheduler-keeps-it-says-nothing"),
    pytest.param("gpu-class-stock", "high", "60s", {}, None,
                 "gpu-class-stock runs the stock kube-scheduler here, which cannot keep it",
                 id="the-stock-binary-drops-it"),
    pytest.param(STRICT, "balanced", "60s", {}, None, "class balanced ranks nodes (balanced), not types",
                 id="balanced-drops-it"),
    pytest.param(STRICT, "high", "60s", {"kueue.x-k8s.io/podset": "main"}, None,
                 "Kueue chose its type (its flavor) before the Pod existed", id="kueue-started-drops-it"),
    pytest.param(STRICT, "high", None, {}, None, None, id="no-wait"),
])
def test_the_webhook_keeps_or_drops_a_wait(scheduler: str | None, class_name: str, pod_wait: str | None,
                                           labels: dict[str, str], kept: str | None, warned: str | None) -> None:
    catalog = dataclasses.replace(make_catalog(CATALOG_EXTRA), strict_schedulers=(STRICT, "gpu-class-stock"),
                                  stock_schedulers=("gpu-class-stock",))
    snapshot = snapshot_of([make_node("h100", "NVIDIA-H100-80GB-HBM3"), make_node("a100", "A100-SXM4-40GB")], catalog)
    annotations = {"gpu-class.io/class": class_name, **({W: pod_wait} if pod_wait else {})}
    pod = make_pod(annotations, extra_spec={"schedulerName": scheduler} if scheduler else {},
                   gpu_limit="1" if labels else None)  # Kueue counted the template's limit
    if labels:
        pod["metadata"]["labels"] = labels
    decision = plan(pod, snapshot, catalog)
    assert decision.outcome == "patched" and decision.placement is not None, decision.message
    patched = jsonpatch.apply_patch(pod, build_patch(pod, decision.placement))
    assert patched["metadata"]["annotations"].get(W) == kept
    dropped = [w for w in decision.warnings if W in w]
    assert dropped == ([] if warned is None else [f"gpu-class: {W} dropped: {warned}"])
    assert jsonpatch.apply_patch(patched, build_patch(patched, decision.placement)) == patched, "idempotent"


@pytest.mark.parametrize("pod_wait, types", [
    pytest.param("10m", ("H100", "A100"), id="waits-keeps-h100-that-holds-2-of-3"),
    pytest.param(None, ("A100",), id="no-wait-only-types-that-hold-all-now"),
])
def test_a_group_that_waits_keeps_its_best_type_without_room_for_all_of_it_now(
        pod_wait: str | None, types: tuple[str, ...]) -> None:
    catalog = make_catalog()
    state = InventoryState(catalog=catalog, synced=True, watch_pods=True)
    state.replace_nodes(i for n in [make_node("h100", "NVIDIA-H100-80GB-HBM3"), make_node("a100", "A100-SXM4-40GB")]
                        if (i := node_info_from_object(n, catalog)) is not None)
    state.replace_pods([("ml/on-h100", "h100", {"nvidia.com/gpu": 6})], {})  # H100: room for 2 of the 3 now
    snapshot = state.publish()
    annotations = {"gpu-class.io/class": "high", "gpu-class.io/group": "train", "gpu-class.io/group-size": "3",
                   **({W: pod_wait} if pod_wait else {})}
    decision = plan(make_pod(annotations, extra_spec={"schedulerName": STRICT}), snapshot, catalog, namespace="ml")
    assert decision.placement is not None, decision.message
    assert decision.placement.types == types and decision.placement.max_wait == pod_wait
    assert decision.group is not None and decision.group.outcome == "started"


H100_NODE = make_node("h100", "NVIDIA-H100-80GB-HBM3")
A100_NODE = make_node("a100", "A100-SXM4-40GB")
A100_BY_HAND = make_node("a100-80", "NVIDIA-A100-SXM4-80GB", label_key="gpu-type")  # labelled by hand, not by GFD


@dataclass(frozen=True)
class FallbackCase:
    """A Pod sent to gpu-class-scheduler, and the types (by hand) it may end on once its wait is spent."""

    id: str
    annotations: Mapping[str, str]
    nodes: tuple[dict[str, Any], ...]
    types: tuple[str, ...]
    kept_wait: str | None
    used: Mapping[str, int] = field(default_factory=dict)  # GPUs held on each node by bound Pods


FALLBACK_CASES = [
    FallbackCase("the-pods-own-wait", {"gpu-class.io/class": "high", W: "10m"}, (H100_NODE, A100_NODE),
                 ("H100", "A100"), "10m"),
    FallbackCase("its-class-wait", {"gpu-class.io/class": "patient"}, (H100_NODE, A100_NODE), ("H100", "A100"), "10m"),
    FallbackCase("a-fallback-under-another-label-key", {"gpu-class.io/class": "high", W: "10m"},
                 (H100_NODE, A100_NODE, A100_BY_HAND), ("H100", "A100"), "10m"),
    FallbackCase("a-group-waiting-for-room-for-all-of-it", {
        "gpu-class.io/class": "high", "gpu-class.io/group": "train", "gpu-class.io/group-size": "3", W: "10m"},
        (H100_NODE, A100_NODE), ("H100", "A100"), "10m", used={"h100": 6}),
    FallbackCase("no-wait-the-same-affinity", {"gpu-class.io/class": "high"}, (H100_NODE, A100_NODE),
                 ("H100", "A100"), None),
]


def admits(node_affinity: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether required node affinity lets a node with these labels in: terms ORed, expressions ANDed (In only:
    the webhook writes nothing else, and anything else fails here loudly)."""
    terms = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for term in terms:
        assert all(e["operator"] == "In" for e in term["matchExpressions"]), term
    return any(all(labels.get(e["key"]) in e["values"] for e in term["matchExpressions"]) for term in terms)


@pytest.mark.parametrize("case", FALLBACK_CASES, ids=lambda c: c.id)
def test_a_waiting_pods_required_affinity_keeps_every_type_it_may_fall_back_to(case: FallbackCase) -> None:
    """gpu-class-scheduler keeps the wait (it holds the lesser types back for max-wait); the webhook must not:
    a required affinity narrowed to the best type leaves the Pod Pending for good once its wait is spent,
    while gpu-class.io/types still promises the others."""
    catalog = dataclasses.replace(make_catalog(CATALOG_EXTRA), strict_schedulers=(STRICT,))
    state = InventoryState(catalog=catalog, synced=True, watch_pods=True)
    state.replace_nodes(i for n in case.nodes if (i := node_info_from_object(n, catalog)) is not None)
    state.replace_pods([(f"ml/on-{node}", node, {"nvidia.com/gpu": gpus}) for node, gpus in case.used.items()], {})
    pod = make_pod(dict(case.annotations), extra_spec={"schedulerName": STRICT})
    decision = plan(pod, state.publish(), catalog, namespace="ml")
    assert decision.outcome == "patched" and decision.placement is not None, decision.message
    patched = jsonpatch.apply_patch(pod, build_patch(pod, decision.placement))
    assert patched["metadata"]["annotations"]["gpu-class.io/types"] == ",".join(case.types)
    assert patched["metadata"]["annotations"].get(W) == case.kept_wait
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    node_affinity = patched["spec"]["affinity"]["nodeAffinity"]
    # every node of every type the Pod lists, whatever label key names its product; none of another type
    shut_out = [n["metadata"]["name"] for n in case.nodes if not admits(node_affinity, n["metadata"]["labels"])]
    assert shut_out == [], f"required node affinity shuts out {shut_out} of types {case.types}: {node_affinity}"
    assert not admits(node_affinity, make_node("t4", "Tesla-T4")["metadata"]["labels"])


@pytest.mark.parametrize("written", ["10", "ten minutes", "48h"])
def test_a_wait_that_does_not_read_is_refused_saying_what_to_write(written: str) -> None:
    catalog = make_catalog()
    snapshot = snapshot_of([make_node("h100", "NVIDIA-H100-80GB-HBM3")], catalog)
    decision = plan(make_pod({"gpu-class.io/class": "high", W: written}), snapshot, catalog)
    assert decision.outcome == "refused"
    assert decision.message == (f'gpu-class: {W} must be a duration of 1s to 24h, like "90s", "10m", "2h" or '
                                f'"1h30m", not {quoted(written)}')


def test_a_class_wait_that_does_not_read_fails_at_start() -> None:
    with pytest.raises(CatalogError, match=r"classes\.\d+\.maxWait: must be a duration of 1s to 24h, .* not 'soon'"):
        make_catalog("  - {name: impatient, types: [H100], maxWait: soon}\n")


def unbound(uid: str, created: float, max_wait: int | None) -> UnboundGpuPod:
    return UnboundGpuPod(uid, "ml", uid, "nvidia.com/gpu", 1, "high", ("H100", "A100"), created_seconds=created,
                         max_wait_seconds=max_wait)


NOW = 10_000.0


@pytest.mark.parametrize("pod, waiting, pending", [
    pytest.param(unbound("a", NOW - 30, 600), 1, {"0s": 0, "1m": 0}, id="within-its-wait-is-waiting-not-pending"),
    pytest.param(unbound("b", NOW - 700, 600), 0, {"0s": 1, "1m": 1, "5m": 0},
                 id="past-its-wait-pending-since-the-wait-ended"),
    pytest.param(unbound("c", NOW - 400, None), 0, {"0s": 1, "1m": 1, "5m": 1, "15m": 0},
                 id="no-wait-pending-since-creation"),
])
def test_pending_and_waiting_gauges(pod: UnboundGpuPod, waiting: int, pending: dict[str, int]) -> None:
    catalog = make_catalog()
    snapshot = Snapshot(groups_by_type={}, unbound_pods={pod.uid: pod})
    assert (waiting_by_class(snapshot, catalog, NOW) or {})["high"] == waiting
    counts = (pending_by_class(snapshot, catalog, NOW) or {})["high"]
    assert {k: counts[k] for k in pending} == pending


def stamped(max_wait: str | None, node: str | None = None) -> dict[str, Any]:
    pod = make_pod({"gpu-class.io/types": "H100,A100", **({W: max_wait} if max_wait else {})})
    pod["metadata"]["creationTimestamp"] = "2026-12-05T10:00:00Z"
    if node:
        pod["spec"]["nodeName"] = node
    return pod


CREATED = 1_796_464_800.0  # 2026-12-05T10:00:00Z


@pytest.mark.parametrize("pod, node_type, after, said", [
    pytest.param(stamped("10m"), None, 120, "waiting for H100 (2m of 10m), then A100", id="waiting"),
    pytest.param(stamped("90s"), None, 45, "waiting for H100 (45s of 90s), then A100", id="waiting-seconds"),
    pytest.param(stamped("10m"), None, 700, "waited its max-wait 10m for H100; now placed in its class's order: "
                 "H100, A100", id="spent"),
    pytest.param(stamped("10m", "n1"), "H100", 30, "max-wait 10m: bound on its best type, H100", id="got-it"),
    pytest.param(stamped("10m", "n1"), "A100", 700, "max-wait 10m: bound on A100, not H100", id="fell-back"),
    pytest.param(stamped(None), None, 30, None, id="no-wait"),
])
def test_explain_says_what_became_of_the_wait(pod: dict[str, Any], node_type: str | None, after: float,
                                              said: str | None) -> None:
    assert wait_outlook(pod, ["H100", "A100"], node_type, CREATED + after) == said
