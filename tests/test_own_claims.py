"""A class Pod's own resource claims: those for devices that are not GPUs (a ComputeDomain's channel, a NIC) pass,
the rest are refused, each told why (webhook/core/admission/claims.py). What a claim is for is read from the
cluster: the ResourceClaim or ResourceClaimTemplate it names and the DeviceClasses those use
(webhook/core/view/claim_sources.py), never from the Pod."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest

from builders import (
    CATALOG_NODES, CHANNEL_CLASS, channel_claim_template, compute_domain_device_classes, make_catalog,
    make_claim_template, make_namespace, make_pod, make_resource_claim, make_review, nvidia_device_classes,
)
from webhook.core.admission.planner import plan
from webhook.core.admission.review import parse_review, review_pod
from webhook.core.view.claim_sources import (
    POD_CLAIM_ANNOTATION, UNREAD_SOURCES, ClaimSources, ClaimSourcesState, claim_classes_from_object,
    claim_spec_classes, template_classes_from_object,
)
from webhook.core.view.dra import DraView, driver_pins
from webhook.core.view.inventory import build_snapshot
from webhook.core.view.snapshot import Snapshot

CATALOG = make_catalog()
C = "gpu-class.io/class"
CHANNEL_TEMPLATE = "nvbandwidth-test-compute-domain-1-channel"  # the fixture's name
NIC_CLASS = "rdma.dra.net"
# a NIC's DeviceClass, pinned to its driver (Google's DraNet names itself dra.net)
NIC = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": NIC_CLASS},
       "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.net" && device.attributes["dra.net"].rdma'}}]}}
# a class that selects by attribute alone: any driver's device may match, a GPU among them
UNPINNED = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "anything.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.attributes['example.com'].fast"}}]}}
# a NIC request with its own selector and allocationMode All: within a class that gives no GPU
ALL_NICS = {"name": "nics", "exactly": {"deviceClassName": NIC_CLASS, "allocationMode": "All",
                                        "selectors": [{"cel": {"expression": "device.attributes['dra.net'].numa == 0"}}]}}

CLUSTER: list[dict[str, Any]] = [
    *CATALOG_NODES, make_namespace("ml"), make_namespace("team", default_class="standard"),
    *nvidia_device_classes(), *compute_domain_device_classes(), NIC, UNPINNED,
    channel_claim_template("ml"),
    make_claim_template("one-gpu", "gpu.nvidia.com"),
    make_claim_template("gpu-or-channel", ("gpu.nvidia.com", CHANNEL_CLASS)),
    make_claim_template("channel-or-nic", (CHANNEL_CLASS, NIC_CLASS)),
    make_claim_template("any", "anything.example.com"),
    make_claim_template("missing-class", "nic.example.org"),
    {**make_claim_template("all-nics"), "spec": {"spec": {"devices": {"requests": [ALL_NICS]}}}},
    make_resource_claim("rdma", NIC_CLASS),
    make_resource_claim("shared-gpu", "gpu.nvidia.com"),
    # made by the resourceclaim controller from a template for one Pod: no other Pod may name it
    {**make_resource_claim("train-0-channel-x7k", CHANNEL_CLASS),
     "metadata": {"name": "train-0-channel-x7k", "namespace": "ml", "annotations": {POD_CLAIM_ANNOTATION: "channel"}}},
    channel_claim_template("other", "elsewhere"),
]
SNAPSHOT = build_snapshot(CATALOG, CLUSTER)


def by_template(name: str, template: str) -> dict[str, str]:
    return {"name": name, "resourceClaimTemplateName": template}


def by_claim(name: str, claim: str) -> dict[str, str]:
    return {"name": name, "resourceClaimName": claim}


def class_pod(*claims: dict[str, Any], annotations: dict[str, str] | None = None,
              gpu_limit: str | None = None) -> dict[str, Any]:
    pod = make_pod({C: "high"} if annotations is None else annotations, gpu_limit=gpu_limit,
                   extra_spec={"resourceClaims": list(claims)})
    pod["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": c["name"]} for c in claims]
    return pod


@dataclass(frozen=True)
class Case:
    id: str
    claims: tuple[dict[str, Any], ...]
    outcome: str
    message: tuple[str, ...] = ()  # parts of the refusal
    not_in_message: tuple[str, ...] = ()
    snapshot: Snapshot = field(default=SNAPSHOT)
    namespace: str = "ml"


def _without_dra_classes(reason: str) -> Snapshot:
    return dataclasses.replace(SNAPSHOT, dra=DraView(off=reason))


GPU_ADVICE = "drop such claims to let gpu-class place it, or drop the gpu-class.io/class annotation"
RETRY = "a controller that creates the Pod retries by itself"

CASES = [
    Case("compute-domain-channel-by-template", (by_template("channel", CHANNEL_TEMPLATE),), "patched"),
    Case("nic-by-claim", (by_claim("nic", "rdma"),), "patched"),
    Case("nic-with-selectors-and-allocation-mode-all", (by_template("nics", "all-nics"),), "patched"),
    Case("channel-and-nic", (by_template("channel", CHANNEL_TEMPLATE), by_claim("nic", "rdma")), "patched"),
    Case("first-available-of-non-gpu-classes", (by_template("net", "channel-or-nic"),), "patched"),
    Case("gpu-by-template", (by_template("gpu", "one-gpu"),), "refused",
         ("claim 'gpu': ResourceClaimTemplate 'ml/one-gpu' uses DeviceClass gpu.nvidia.com of driver gpu.nvidia.com, "
          "whose devices are GPUs", "GPUs twice", GPU_ADVICE), (RETRY,)),
    Case("gpu-by-claim", (by_claim("gpu", "shared-gpu"),), "refused",
         ("claim 'gpu': ResourceClaim 'ml/shared-gpu' uses DeviceClass gpu.nvidia.com", GPU_ADVICE)),
    Case("first-available-with-one-gpu-subrequest", (by_template("either", "gpu-or-channel"),), "refused",
         ("claim 'either': ResourceClaimTemplate 'ml/gpu-or-channel' uses DeviceClass gpu.nvidia.com",),
         (CHANNEL_CLASS,)),
    Case("unknown-template-retry", (by_template("channel", "not-yet"),), "refused",
         ("claim 'channel': no ResourceClaimTemplate 'ml/not-yet' in the webhook's view", RETRY), (GPU_ADVICE,)),
    Case("template-of-another-namespace", (by_template("channel", "elsewhere"),), "refused",
         ("no ResourceClaimTemplate 'ml/elsewhere'",)),
    Case("class-with-no-driver-pin", (by_template("fast", "any"),), "refused",
         ("DeviceClass anything.example.com, which pins no driver", "may select a GPU", GPU_ADVICE)),
    Case("class-the-cluster-lacks", (by_template("nic", "missing-class"),), "refused",
         ("DeviceClass nic.example.org, which the cluster does not have", RETRY), (GPU_ADVICE,)),
    Case("mixed-only-the-gpu-claim-named", (by_template("channel", CHANNEL_TEMPLATE), by_template("gpu", "one-gpu")),
         "refused", ("claim 'gpu':",), ("claim 'channel'",)),
    Case("mixed-gpu-and-unknown-both-told", (by_template("gpu", "one-gpu"), by_template("late", "not-yet")), "refused",
         ("claim 'gpu':", "claim 'late':", GPU_ADVICE, RETRY)),
    Case("a-claim-made-for-another-pod", (by_claim("channel", "train-0-channel-x7k"),), "refused",
         ("no ResourceClaim 'ml/train-0-channel-x7k' in the webhook's view",)),
    Case("names-neither", ({"name": "odd"},), "refused", ("claim 'odd': names neither a resourceClaimName nor",)),
    Case("names-both", ({"name": "odd", "resourceClaimName": "rdma", "resourceClaimTemplateName": "all-nics"},),
         "refused", ("claim 'odd': names both",)),
    Case("device-classes-not-read", (by_template("channel", CHANNEL_TEMPLATE),), "refused",
         ("the webhook does not read DeviceClasses (not allowed)",), snapshot=_without_dra_classes("not allowed")),
    Case("templates-not-read", (by_template("channel", CHANNEL_TEMPLATE),), "refused",
         ("the webhook does not read ResourceClaimTemplates (not watched by this view)",),
         snapshot=dataclasses.replace(SNAPSHOT, claim_sources=UNREAD_SOURCES)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_class_pods_own_claims(case: Case) -> None:
    decision = plan(class_pod(*case.claims), case.snapshot, CATALOG, namespace=case.namespace)
    assert decision.outcome == case.outcome, decision.message
    for part in case.message:
        assert part in decision.message
    for part in case.not_in_message:
        assert part not in decision.message
    if case.outcome == "patched":
        # placed as the same Pod without claims is: its claims change nothing of its GPUs
        alone = plan(class_pod(), case.snapshot, CATALOG, namespace=case.namespace)
        assert decision.placement == alone.placement


def test_the_namespaces_default_class_advice_drops_the_gpu_limit() -> None:
    pod = class_pod(by_template("gpu", "one-gpu"), annotations={}, gpu_limit="1")
    decision = plan(pod, SNAPSHOT, CATALOG, namespace="team")
    assert decision.outcome == "refused"
    assert "no ResourceClaimTemplate 'team/one-gpu'" in decision.message  # the Pod's namespace is where it looks
    decision = plan(pod, build_snapshot(CATALOG, [*CLUSTER, make_claim_template("one-gpu", "gpu.nvidia.com",
                                                                                 namespace="team")]),
                    CATALOG, namespace="team")
    assert "drop its GPU limit (the namespace's default class" in decision.message


def test_out_of_scope_pods_with_claims_are_left_alone() -> None:
    assert plan(class_pod(by_template("gpu", "one-gpu"), annotations={}), SNAPSHOT, CATALOG,
                namespace="ml").outcome == "out-of-scope"


def test_the_patch_keeps_the_claims_and_adds_the_gpus() -> None:
    pod = class_pod(by_template("channel", CHANNEL_TEMPLATE))
    review = review_pod(parse_review(json.dumps(make_review(pod, namespace="ml")).encode()), SNAPSHOT, CATALOG)
    assert review.decision.outcome == "patched"
    patched = jsonpatch.apply_patch(pod, review.patch)
    assert patched["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    container = patched["spec"]["containers"][0]["resources"]
    assert container["claims"] == [{"name": "channel"}]
    assert container["limits"] == {"nvidia.com/gpu": "1"}


# --- what the view keeps of claims and templates ------------------------------------------------

@pytest.mark.parametrize("spec, classes", [
    pytest.param(channel_claim_template()["spec"]["spec"], (CHANNEL_CLASS,), id="the-controllers-template"),
    pytest.param({"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "b"}},
                                           {"name": "c", "firstAvailable": [{"name": "d", "deviceClassName": "e"},
                                                                            {"name": "f", "deviceClassName": "b"}]}]}},
                 ("b", "e"), id="exactly-and-every-subrequest-sorted-once"),
    pytest.param({}, (), id="no-requests"),
    pytest.param({"devices": {"requests": [{"name": "x"}]}}, "request x names no deviceClassName", id="neither"),
    pytest.param({"devices": {"requests": [{"name": "x", "firstAvailable": [{"name": "y"}]}]}},
                 "request x names no deviceClassName", id="subrequest-without-class"),
    pytest.param({"devices": {"requests": "x"}}, "spec.devices.requests is not a list", id="requests-not-a-list"),
])
def test_the_classes_of_a_claim_spec(spec: Any, classes: Any) -> None:
    assert claim_spec_classes(spec) == classes


def test_claims_and_templates_are_keyed_by_namespace_and_name() -> None:
    assert template_classes_from_object(channel_claim_template("ml")) == (f"ml/{CHANNEL_TEMPLATE}", (CHANNEL_CLASS,))
    assert claim_classes_from_object(make_resource_claim("rdma", NIC_CLASS)) == ("ml/rdma", (NIC_CLASS,))
    made = make_resource_claim("p-x", CHANNEL_CLASS)
    made["metadata"]["annotations"] = {POD_CLAIM_ANNOTATION: "channel"}
    assert claim_classes_from_object(made) == ("ml/p-x", None)


def test_the_state_shares_one_tuple_per_set_of_classes_and_publishes_only_on_change() -> None:
    state = ClaimSourcesState(read=True)
    for i in range(3):
        assert state.set("templates", f"ns{i}/channel", (CHANNEL_CLASS,))
    published = state.publish()
    assert isinstance(published, ClaimSources)
    held = [published.classes("templates", f"ns{i}", "channel") for i in range(3)]
    assert held[0] is held[1] is held[2]
    assert not state.set("templates", "ns0/channel", (CHANNEL_CLASS,))  # the same again
    assert state.publish() is published
    assert state.set("templates", "ns0/channel", None) and not state.set("templates", "ns0/channel", None)
    after = state.publish()
    assert after is not published and after.classes("templates", "ns0", "channel") is None
    assert published.classes("templates", "ns0", "channel") == (CHANNEL_CLASS,)  # an old snapshot keeps its view
    state.replace("claims", [("ml/rdma", (NIC_CLASS,)), ("ml/made", None)])
    assert dict(state.publish().claims) == {"ml/rdma": (NIC_CLASS,)}
    state.turn("claims", "not allowed")
    assert state.publish().off("claims") == "not allowed" and not state.publish().claims


# --- which DeviceClasses are pinned to a driver: the one fact a claim passes on -------------------------------

@pytest.mark.parametrize("expression, pins", [
    pytest.param(compute_domain_device_classes()[0]["spec"]["selectors"][0]["cel"]["expression"],
                 {"compute-domain.nvidia.com"}, id="the-chart's-channel-class"),
    pytest.param('"example.com/nic" == device.driver', {"example.com/nic"}, id="either-side"),
    pytest.param("a && (device.driver == 'x' && b)", {"x"}, id="in-parentheses-within-the-conjunction"),
    pytest.param("device.attributes['x'].n == 'a\\' || true || \\'' && device.driver == 'x'", {"x"},
                 id="operators-inside-a-string-are-text"),
    pytest.param("device.driver == 'nic' || true", set(), id="or-anything"),
    pytest.param("true || device.driver == 'nic'", set(), id="or-before"),
    pytest.param("!(device.driver == 'nic')", set(), id="negated"),
    pytest.param("(device.driver == 'nic') == false", set(), id="compared-with-false"),
    pytest.param("(false) == (true && device.driver == 'nic')", set(), id="parentheses-not-around-the-whole"),
    pytest.param("device.driver == 'nic' ? true : true", set(), id="conditional"),
    pytest.param("device.driver != 'nic'", set(), id="not-equal"),
    pytest.param(r"device.driver == 'nic' && r'\' == r'\' || true", set(), id="raw-string-not-followed"),
])
def test_a_driver_pin_is_a_term_the_whole_selector_ands(expression: str, pins: set[str]) -> None:
    assert driver_pins(expression) == pins


def test_a_class_whose_pin_an_or_undoes_may_give_a_gpu() -> None:
    loose = {**NIC, "metadata": {"name": "loose.dra.net"},
             "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.net" || true'}}]}}
    snapshot = build_snapshot(CATALOG, [*CLUSTER, loose, make_claim_template("loose", "loose.dra.net")])
    decision = plan(class_pod(by_template("nic", "loose")), snapshot, CATALOG, namespace="ml")
    assert decision.outcome == "refused" and "DeviceClass loose.dra.net, which pins no driver" in decision.message
