"""The live inventory's DRA side against the fake API server, with the real kubernetes client.

The fake serves resource.k8s.io/v1 only when asked to (`serve_dra`); otherwise those paths are 404,
as on an API server without DRA, and a 403 rule plays a cluster whose RBAC does not grant them.
The real API server's side (the scheduler's allocation, compaction) is tests/e2e/test_dra_e2e.py's.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable, Iterator

import kubernetes
import pytest

from builders import (
    CHANNEL_CLASS, NVIDIA_DRIVER, FlagWait, RecordedFlag, channel_claim_template, compute_domain_device_classes,
    make_bare_node, make_claim, make_claim_template, make_namespace, make_node, make_pod, make_resource_claim,
    make_slice, nvidia_device_classes, nvidia_gpus,
)
from fakeapi import FakeApiServer
from test_watch import eventually
from webhook.cluster import reflector as watch
from webhook.cluster.watch import LiveInventory, NoObserver
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.view.pods import UnboundGpuPod
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.planner import plan

CATALOG = load_default_catalog()
DRA_PATH = "/apis/resource.k8s.io/v1/"


def start(api: FakeApiServer, **kwargs: Any) -> LiveInventory:
    inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(api.api_client()), **kwargs).start()
    eventually(lambda: inv.readiness()[0], what="first sync")
    return inv


def types_for(inv: LiveInventory) -> tuple[str, ...]:
    decision = plan(make_pod({"gpu-class.io/class": "high"}), inv.snapshot(), CATALOG, namespace="ml")
    return decision.placement.types if decision.placement else ()


@pytest.fixture
def dra_api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval_seconds=0.2, serve_dra=True) as server:
        server.create(make_namespace("ml"))
        for obj in nvidia_device_classes():
            server.create(obj)
        yield server


@pytest.fixture
def quick_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "OFF_RECHECK_SECONDS", 0.2)


def test_without_resource_k8s_io_dra_is_off_and_nodes_work_as_before(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_class.watch")
    with FakeApiServer(bookmark_interval_seconds=0.2) as api:
        api.create(make_namespace("ml"))
        api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
        inv = start(api, watch_pods=True)
        try:
            assert types_for(inv) == ("H100",)
            ready, detail = inv.readiness()
            assert ready and detail["watches"]["resourceslices"]["off"].startswith(
                "the API server does not serve resourceslices.resource.k8s.io")
            assert inv.snapshot().dra.off == detail["watches"]["resourceslices"]["off"]
            # one line, naming whichever of the two resources was found off first
            (off_line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("DRA is off")]
            assert re.fullmatch(r"DRA is off: the API server does not serve (resourceslices|deviceclasses)"
                                r"\.resource\.k8s\.io \(resource\.k8s\.io/v1\); GPUs are counted from the device "
                                r"plugins' node allocatable only", off_line), off_line
            # off is asked once, and again only after OFF_RECHECK_SECONDS: no retry storm
            time.sleep(0.5)
            # (one list each: deviceclasses, resourceslices, resourceclaims, resourceclaimtemplates)
            assert len([r for r in api.request_log if r.path.startswith(DRA_PATH)]) == 4
            assert api.server_errors == []
        finally:
            inv.stop()


class Reading(NoObserver):
    """What each list said of each resource: read (True) or off (False), in order (what the gauge shows)."""

    def __init__(self) -> None:
        self.said: dict[str, list[bool]] = {}

    def reading(self, resource: str, read: bool) -> None:
        self.said.setdefault(resource, []).append(read)


def test_without_rbac_for_dra_it_is_off_saying_what_to_grant(caplog: pytest.LogCaptureFixture,
                                                              dra_api: FakeApiServer, quick_recheck: None) -> None:
    caplog.set_level(logging.INFO, logger="gpu_class.watch")
    dra_api.create(make_bare_node("dra-1"))
    dra_api.create(make_slice("dra-1", nvidia_gpus(4)))
    dra_api.fail_next(10**6, status=403, path_prefix=DRA_PATH + "resourceslices")
    reading = Reading()
    inv = start(dra_api, observer=reading)
    try:
        # (asked again every OFF_RECHECK_SECONDS while off)
        assert set(reading.said["resourceslices"]) == {False} and reading.said["nodes"] == [True]
        assert set(reading.said["nodepools"]) == {False}  # no Karpenter on this API server
        off = inv.snapshot().dra.off
        assert off is not None and off.startswith("not allowed to list resourceslices.resource.k8s.io (HTTP 403")
        assert "grant the webhook's ServiceAccount get, list and watch on it (deploy/base/rbac.yaml)" in off
        assert types_for(inv) == ()
        # the grant arrives: it is picked up at the next look, and logged
        dra_api.clear_failures()
        eventually(lambda: types_for(inv) == ("H100",), what="DRA read once allowed")
        assert inv.snapshot().dra.off is None
        # the reflector tells its observer once the list is published: a moment after the snapshot has it
        eventually(lambda: reading.said["resourceslices"][-1] is True, what="the observer told")
        assert reading.said["resourceslices"][0] is False
        messages = [r.getMessage() for r in caplog.records]
        assert sum(m.startswith("DRA is off") for m in messages) == 1
        assert "DRA is on: reading ResourceSlices and DeviceClasses" in messages
    finally:
        inv.stop()


def test_slices_and_claims_reach_the_next_decision(dra_api: FakeApiServer) -> None:
    dra_api.create(make_bare_node("dra-1"))
    inv = start(dra_api, watch_pods=True)
    try:
        assert types_for(inv) == ()
        dra_api.create(make_slice("dra-1", nvidia_gpus(4)))
        eventually(lambda: types_for(inv) == ("H100",), what="a slice published")
        assert inv.snapshot().nodes["dra-1"].offers[0].allocatable == 4

        def free() -> int:
            return sum(g.free_gpus for g in inv.snapshot().groups("H100"))

        dra_api.create(make_claim("c", [(NVIDIA_DRIVER, "dra-1", "gpu-0"), (NVIDIA_DRIVER, "dra-1", "gpu-1")]))
        eventually(lambda: free() == 2, what="a claim allocated")
        dra_api.update(make_slice("dra-1", nvidia_gpus(4, "NVIDIA A100-SXM4-80GB"), generation=2))
        eventually(lambda: types_for(inv) == ("A100-80GB",), what="the driver republishes")
        dra_api.delete("ResourceClaim", "c", "ml")
        eventually(lambda: sum(g.free_gpus for g in inv.snapshot().groups("A100-80GB")) == 4, what="claim deleted")
        dra_api.delete("DeviceClass", "gpu.nvidia.com")
        eventually(lambda: types_for(inv) == (), what="the class mapping nvidia.com/gpu deleted")
        (problem,) = inv.snapshot().dra.problems
        assert problem.reason.startswith("no DeviceClass maps nvidia.com/gpu") and problem.devices == 4
        dra_api.delete("ResourceSlice", "dra-1-gpu.nvidia.com")
        eventually(lambda: inv.snapshot().dra.problems == (), what="slice deleted")
        assert dra_api.server_errors == []
    finally:
        inv.stop()


class Binds(NoObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []  # (Pod, GPUs in use on its node before, of them its own)

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        self.seen.append((pod.name, before.requested.get((node, "nvidia.com/gpu"), 0), counted))


def placed(name: str, node: str | None = None, claim: str | None = None) -> dict[str, Any]:
    """A 1-GPU Pod gpu-class placed; bound to `node` as kube-scheduler leaves it on DRA devices: the
    name of the claim it made for the Pod in the Pod's status."""
    pod = make_pod({"gpu-class.io/class": "high", "gpu-class.io/types": "H100"}, name=name, gpu_limit="1")
    pod["status"] = {"phase": "Pending"}
    if node is not None:
        pod["spec"]["nodeName"] = node
    if claim is not None:
        pod["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": claim, "requestMappings": [
            {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}]}
    return pod


def test_a_bind_says_which_devices_in_use_are_the_pods_own_claim(dra_api: FakeApiServer) -> None:
    """kube-scheduler allocates the claim for a Pod's extended resource before it binds the Pod, and the
    claims' watch can deliver it first: the bind says so, and the judgment gives them back."""
    dra_api.create(make_bare_node("dra-1"))
    dra_api.create(make_slice("dra-1", nvidia_gpus(4)))
    dra_api.create(make_claim("other", [(NVIDIA_DRIVER, "dra-1", "gpu-3")]))
    binds = Binds()
    inv = start(dra_api, watch_pods=True, observer=binds)
    try:
        dra_api.create(placed("first"))
        dra_api.create(placed("second"))
        eventually(lambda: len(inv.snapshot().unbound_pods or {}) == 2, what="the Pods known unbound")
        dra_api.create(make_claim("first-extended-resources-x", [(NVIDIA_DRIVER, "dra-1", "gpu-0")]))
        eventually(lambda: inv.snapshot().requested.get(("dra-1", "nvidia.com/gpu")) == 2, what="its claim seen")
        dra_api.update(placed("first", "dra-1", "first-extended-resources-x"))
        eventually(lambda: len(binds.seen) == 1, what="the first bind")
        # the second's claim is not seen before its bind: nothing of its own to give back
        dra_api.update(placed("second", "dra-1", "second-extended-resources-y"))
        eventually(lambda: len(binds.seen) == 2, what="the second bind")
        assert binds.seen == [("first", 2, 1), ("second", 2, 0)]
    finally:
        inv.stop()


def test_resource_slices_relist_after_410(dra_api: FakeApiServer) -> None:
    dra_api.create(make_bare_node("dra-1"))
    dra_api.create(make_slice("dra-1", nvidia_gpus(4)))
    inv = start(dra_api)
    slices = next(r for r in inv.reflectors if r.name == "resourceslices")
    relists = slices.relists
    try:
        assert types_for(inv) == ("H100",)
        dra_api.set_available(False)
        dra_api.delete("ResourceSlice", "dra-1-gpu.nvidia.com")
        dra_api.compact()
        dra_api.set_available(True)
        eventually(lambda: slices.relists > relists, timeout_seconds=40, what="relist after 410")
        eventually(lambda: types_for(inv) == (), what="the deleted slice gone after the relist")
    finally:
        inv.stop()


def with_claim(claim: dict[str, str]) -> dict[str, Any]:
    pod = make_pod({"gpu-class.io/class": "high"}, extra_spec={"resourceClaims": [claim]})
    return pod


def outcome(inv: LiveInventory, claim: dict[str, str]) -> str:
    return plan(with_claim(claim), inv.snapshot(), CATALOG, namespace="ml").outcome


def test_claims_and_templates_a_pod_names_are_read_from_their_watches(dra_api: FakeApiServer) -> None:
    """What a class Pod's own claim is for follows the cluster: the ComputeDomain controller's template, a claim
    of the Pod's author, a DeviceClass changed to one that may give a GPU, and each deleted again."""
    dra_api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
    for obj in compute_domain_device_classes():
        dra_api.create(obj)
    channel = {"name": "channel", "resourceClaimTemplateName": "nvbandwidth-test-compute-domain-1-channel"}
    gpu = {"name": "gpu", "resourceClaimName": "shared-gpu"}
    inv = start(dra_api, watch_pods=True)
    try:
        assert outcome(inv, channel) == "refused"  # the controller has not made it yet
        dra_api.create(channel_claim_template("ml"))
        eventually(lambda: outcome(inv, channel) == "patched", what="the template seen")
        dra_api.create(make_resource_claim("shared-gpu", "gpu.nvidia.com"))
        eventually(lambda: "ResourceClaim 'ml/shared-gpu' uses DeviceClass gpu.nvidia.com" in plan(
            with_claim(gpu), inv.snapshot(), CATALOG, namespace="ml").message, what="the claim seen")
        # the channel's class rewritten to select by attribute alone: it may give a GPU now
        dra_api.update({**compute_domain_device_classes()[0], "spec": {"selectors": [
            {"cel": {"expression": "device.attributes['compute-domain.nvidia.com'].type == 'channel'"}}]}})
        eventually(lambda: outcome(inv, channel) == "refused", what="the class unpinned")
        dra_api.update(compute_domain_device_classes()[0])
        eventually(lambda: outcome(inv, channel) == "patched", what="the class pinned again")
        dra_api.delete("ResourceClaimTemplate", "nvbandwidth-test-compute-domain-1-channel", "ml")
        eventually(lambda: outcome(inv, channel) == "refused", what="the template deleted")
        assert dra_api.server_errors == []
    finally:
        inv.stop()


def test_templates_not_allowed_refuse_the_pods_that_name_one(caplog: pytest.LogCaptureFixture,
                                                              dra_api: FakeApiServer) -> None:
    caplog.set_level(logging.INFO, logger="gpu_class.watch")
    dra_api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
    dra_api.create(make_claim_template("channel", CHANNEL_CLASS))
    dra_api.fail_next(10**6, status=403, path_prefix=DRA_PATH + "resourceclaimtemplates")
    inv = start(dra_api, watch_pods=True)
    try:
        decision = plan(with_claim({"name": "c", "resourceClaimTemplateName": "channel"}), inv.snapshot(), CATALOG,
                        namespace="ml")
        assert decision.outcome == "refused"
        assert "the webhook does not read ResourceClaimTemplates (not allowed to list resourceclaimtemplates" in \
            decision.message
        assert types_for(inv) == ("H100",)  # a Pod without claims is placed as ever
        assert any(r.getMessage().startswith("ResourceClaimTemplates are off: not allowed to list") for r in caplog.records)
    finally:
        inv.stop()


def test_claims_not_allowed_count_pods_instead(caplog: pytest.LogCaptureFixture, dra_api: FakeApiServer) -> None:
    caplog.set_level(logging.INFO, logger="gpu_class.watch")
    dra_api.create(make_bare_node("dra-1"))
    dra_api.create(make_slice("dra-1", nvidia_gpus(4)))
    dra_api.create({**make_pod(gpu_limit="3", extra_spec={"nodeName": "dra-1"}), "status": {"phase": "Running"}})
    dra_api.fail_next(10**6, status=403, path_prefix=DRA_PATH + "resourceclaims")
    inv = start(dra_api, watch_pods=True)
    try:
        snapshot = inv.snapshot()
        assert snapshot.dra.off is None and not snapshot.dra.claims_read
        assert dict(snapshot.requested) == {("dra-1", "nvidia.com/gpu"): 3}
        assert any(r.getMessage().startswith("ResourceClaims are off: not allowed to list resourceclaims")
                   for r in caplog.records)
    finally:
        inv.stop()


def logged_once(caplog: pytest.LogCaptureFixture, dra_api: FakeApiServer, devices: list[dict[str, Any]],
                marker: str) -> list[str]:
    """The watch's warnings holding `marker` after a node with `devices` is read, and another node is added: a
    change that publishes again, what was logged unchanged."""
    caplog.set_level(logging.WARNING, logger="gpu_class.watch")
    dra_api.create(make_bare_node("dra-1"))
    dra_api.create(make_slice("dra-1", devices))
    inv = start(dra_api)
    try:
        dra_api.create(make_bare_node("dra-2"))
        eventually(lambda: "dra-2" in inv.state.bases, what="second node")
        return [r.getMessage() for r in caplog.records if marker in r.getMessage()]
    finally:
        inv.stop()


def test_problems_are_logged_once_each(caplog: pytest.LogCaptureFixture, dra_api: FakeApiServer) -> None:
    lines = logged_once(caplog, dra_api, nvidia_gpus(2, "NVIDIA T1000"), "does not place on")
    assert lines == ["DRA devices gpu-class does not place on: 2 of driver gpu.nvidia.com (NVIDIA T1000) on 1 "
                     "node(s): no type of the catalog matches type='gpu', productName='NVIDIA T1000'; by its "
                     "attributes: too little information: no architecture, cudaComputeCapability"]


def test_a_product_placed_by_its_labels_is_logged_once(caplog: pytest.LogCaptureFixture,
                                                       dra_api: FakeApiServer) -> None:
    """The operator hears of a product placed by what its devices say, once, and is told to add it."""
    devices = nvidia_gpus(2, "NVIDIA X300", memory="300Gi", architecture="X-Next", compute="11.0.0")
    assert logged_once(caplog, dra_api, devices, "placed by its labels") == [
        "GPU product NVIDIA-X300 is in no type of the catalog: placed by its labels (not in the catalog: the score "
        "of B300, the slowest type of compute capability 10.3); add it to the catalog to rank it by its "
        "specifications"]


def test_read_once_with_and_without_dra(dra_api: FakeApiServer) -> None:
    """`gpuclass inventory` and `explain` read the cluster once, DRA included, and say when it is off."""
    dra_api.create(make_bare_node("dra-1"))
    dra_api.create(make_slice("dra-1", nvidia_gpus(4)))
    core = kubernetes.client.CoreV1Api(dra_api.api_client())
    snapshot = LiveInventory(CATALOG, core, watch_pods=True).read_once()
    assert [o.type_name for o in snapshot.nodes["dra-1"].offers] == ["H100"]
    with FakeApiServer() as old:
        old.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
        snapshot = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(old.api_client()), watch_pods=True).read_once()
        assert snapshot.dra.off is not None and list(snapshot.nodes) == ["h100-a"]


def test_a_passing_403_after_the_first_list_keeps_dra_on(dra_api: FakeApiServer) -> None:
    """An API server that restarts answers 403 until its RBAC cache is warm: that is retried like any
    error, keeping the devices last seen, not taken for RBAC that was never granted."""
    dra_api.create(make_bare_node("dra-1"))
    dra_api.create(make_slice("dra-1", nvidia_gpus(4)))
    inv = start(dra_api)
    try:
        slices = next(r for r in inv.reflectors if r.name == "resourceslices")
        errors = slices.errors
        dra_api.fail_next(3, status=403, path_prefix=DRA_PATH + "resourceslices")
        dra_api.drop_watches()
        eventually(lambda: slices.errors >= errors + 3, timeout_seconds=30, what="the 403s retried")
        assert inv.snapshot().dra.off is None and types_for(inv) == ("H100",)
        dra_api.create(make_bare_node("dra-2"))
        dra_api.create(make_slice("dra-2", nvidia_gpus(2, "NVIDIA A100-SXM4-80GB")))
        eventually(lambda: types_for(inv) == ("H100", "A100-80GB"), timeout_seconds=30, what="watching again")
    finally:
        inv.stop()


# --- DRA served after the start: heard from its APIService ---------------------------------------------

def restart_serving_dra(api: FakeApiServer) -> None:
    """An API server upgraded or reconfigured: down for a few seconds (every watch refused), back serving DRA."""
    api.set_available(False)
    time.sleep(3)
    api.serve_dra = True
    api.set_available(True)


def serve_dra(api: FakeApiServer) -> None:
    api.serve_dra = True


@pytest.mark.parametrize("turn_on", [
    pytest.param(serve_dra, id="served-while-up"),
    pytest.param(restart_serving_dra, id="served-by-the-api-server-restarted"),
])
def test_dra_served_after_the_start_is_read_in_seconds_not_at_the_next_minute(
        caplog: pytest.LogCaptureFixture, turn_on: Callable[[FakeApiServer], None]) -> None:
    caplog.set_level(logging.INFO, logger="gpu_class.watch")
    with FakeApiServer(bookmark_interval_seconds=0.2) as api:
        api.create(make_namespace("ml"))
        for obj in nvidia_device_classes():  # in the store: what an API server serving DRA will answer with
            api.create(obj)
        api.create(make_bare_node("dra-1"))
        api.create(make_slice("dra-1", nvidia_gpus(4)))
        reading = Reading()
        inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(api.api_client()), watch_pods=True, observer=reading)
        (slices,) = [r for r in inv.reflectors if r.name == "resourceslices"]
        slices.recheck = recheck = RecordedFlag()
        inv.start()
        try:
            eventually(lambda: inv.readiness()[0], what="first sync")
            assert inv.snapshot().dra.off is not None and types_for(inv) == ()
            # the API server's own figure: a second or so from serving the API to registering its APIService
            turn_on(api)
            # a deadline under the minute's recheck, generous for a loaded machine
            eventually(lambda: types_for(inv) == ("H100",), timeout_seconds=30,
                       what="the slice read once DRA is served")
            # Why it was read, not how fast: the slices, off since the start, waited once for their minute, and
            # that wait was ended by the herald's flag, not run out; the one list after it read the slice. (That
            # a herald retries within a second while the API server restarts is test_watch's
            # test_a_herald_retries_within_a_second_while_other_watches_back_off.)
            assert [(w.timeout_seconds, w.ended_by_flag) for w in recheck.waits] == [(watch.OFF_RECHECK_SECONDS, True)]
            assert inv.snapshot().dra.off is None
            eventually(lambda: all(reading.said[r][-1] for r in ("deviceclasses", "resourceslices", "resourceclaims",
                                                                  "resourceclaimtemplates")),
                       what="the gauge told")
            messages = [r.getMessage() for r in caplog.records]
            assert ("apiservices v1.resource.k8s.io is Available: resource.k8s.io/v1 is served, reading "
                    "deviceclasses, resourceslices, resourceclaims, resourceclaimtemplates now") in messages
            assert "DRA is on: reading ResourceSlices and DeviceClasses" in messages
        finally:
            inv.stop()


def test_the_apiservice_heard_while_a_list_finds_dra_not_yet_served_lists_again_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """The list answered 404 a moment before the API was served, and the APIService came before the reflector
    had turned the resource off: it lists again at once rather than waiting the minute."""
    with FakeApiServer(bookmark_interval_seconds=0.2) as api:
        api.create(make_namespace("ml"))
        inv = LiveInventory(CATALOG, kubernetes.client.CoreV1Api(api.api_client()))
        (slices,) = [r for r in inv.reflectors if r.name == "resourceslices"]
        slices.recheck = recheck = RecordedFlag()
        real_list, lists = slices.list_call, []

        def served_during_the_first_list(**kwargs: Any) -> Any:
            if kwargs.get("watch"):
                return real_list(**kwargs)
            lists.append(kwargs)
            try:
                return real_list(**kwargs)
            finally:
                if len(lists) == 1:
                    api.serve_dra = True
                    eventually(slices.recheck.is_set, what="the APIService heard, the slices' list not yet done")

        slices.list_call = served_during_the_first_list
        inv.start()
        try:
            eventually(lambda: len(lists) == 2 and inv.readiness()[0], timeout_seconds=30,
                       what="the slices listed again")
            # "At once" without a clock: the flag the herald raised during the first list outlived that list's
            # turning the slices off, so the wait for the minute that followed found it up and did not block
            assert recheck.waits[0] == FlagWait(watch.OFF_RECHECK_SECONDS, already_set=True, ended_by_flag=True)
            eventually(lambda: "off" not in inv.readiness()[1]["watches"]["resourceslices"], what="slices read")
        finally:
            inv.stop()


def test_not_allowed_to_watch_the_apiservice_dra_is_asked_for_every_minute(
        caplog: pytest.LogCaptureFixture, quick_recheck: None) -> None:
    caplog.set_level(logging.INFO, logger="gpu_class.watch")
    with FakeApiServer(bookmark_interval_seconds=0.2) as api:
        api.create(make_namespace("ml"))
        api.fail_next(10**6, status=403, path_prefix="/apis/apiregistration.k8s.io/v1/apiservices")
        reading = Reading()
        inv = start(api, observer=reading)
        try:
            assert inv.readiness()[0]  # off is an answer: ready without it
            api.serve_dra = True
            eventually(lambda: inv.snapshot().dra.off is None, what="DRA read at the (shortened) minute")
            assert set(reading.said["apiservices"]) == {False}
            (line,) = [r.getMessage() for r in caplog.records if "is not watched" in r.getMessage()]
            assert line.startswith("apiservices v1.resource.k8s.io is not watched (not allowed to list "
                                   "apiservices.apiregistration.k8s.io (HTTP 403 Forbidden)"), line
            assert "): resource.k8s.io/v1, while off, is asked for again every " in line, line
        finally:
            inv.stop()
