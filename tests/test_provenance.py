"""A tenant cannot write its way out: marks a Pod's author can forge get it nothing, reserved nodes and pools
are offered only to the Pods that tolerate them, and a namespace's policy always applies (provenance.py,
planner.py). Every patched Pod is judged by which nodes it can land on, by an evaluator of node affinity
written here, not by the code under test."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import jsonpatch
import pytest

from builders import (
    GPU_TAINT, TEST_CATALOG_YAML, assert_valid_pod, make_catalog, make_device_node, make_namespace, make_node, make_pod,
    make_review,
)
from webhook.core.catalog.builtin import default_catalog_text
from webhook.core.catalog.loading import load_catalog_text
from webhook.core.view.inventory import build_snapshot
from webhook.core.view.namespaces import NamespaceInfo
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.planner import UnreadNamespace, plan
from webhook.core.view.pools import pools_from_object
from webhook.core.admission.review import parse_review, review_request

CATALOG = make_catalog()
PRODUCT = "nvidia.com/gpu.product"
H100 = "NVIDIA-H100-80GB-HBM3"
H200 = "NVIDIA-H200"
DEDICATED = {"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}
NODES = [
    make_node("h100-a", H100, gpus=8),
    make_node("a100-a", "A100-SXM4-40GB", gpus=8),
    make_node("t4-a", "Tesla-T4", gpus=8),
    make_node("l4-a", "NVIDIA-L4", gpus=8),
    make_node("a10-hand", "NVIDIA-A10", gpus=8, label_key="gpu-type"),
]
NODE_LABELS = {n["metadata"]["name"]: n["metadata"]["labels"] for n in NODES}
TYPE_OF_NODE = {"h100-a": "H100", "a100-a": "A100", "t4-a": "T4", "l4-a": "L4", "a10-hand": "A10"}
ECONOMY = set(CATALOG.classes["economy"].types)
SNAPSHOT = build_snapshot(CATALOG, [*NODES, make_namespace("tenant", default_class="economy", allowed="economy")],
                          watch_namespaces=True)


def matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes' node selector requirement, for the operators a Pod may write."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not modelled")


def lands_on(pod: Mapping[str, Any]) -> set[str]:
    """The nodes of NODES whose labels the Pod's nodeSelector and required node affinity admit."""
    spec = pod["spec"]
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    found = set()
    for name, labels in NODE_LABELS.items():
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            continue
        if terms is None or any(all(matches(e, labels) for e in t.get("matchExpressions") or []) for t in terms):
            found.add(name)
    return found


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


def within(values: list[str], key: str = PRODUCT) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": values}


PODSET = {"kueue.x-k8s.io/podset": "main"}
ECONOMY_AFFINITY = affinity([within(["Tesla-T4", "NVIDIA-L4"])])


@dataclass(frozen=True)
class Forgery:
    id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    outcome: str = "patched"
    message: str = ""  # what a refusal says


ON_H100 = {"nodeSelector": {PRODUCT: H100}}
NOT_ALLOWED = "class 'high' is not allowed in namespace tenant"
FORGERIES = [
    Forgery("nothing-forged", spec=ON_H100),
    Forgery("kueue-podset-and-gpu-class-types", PODSET, {"gpu-class.io/types": "H100"}, ON_H100, outcome="refused",
            message="asks for nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3, which class economy cannot place on"),
    Forgery("gpu-class-types-alone", annotations={"gpu-class.io/types": "H100"}, spec=ON_H100),
    Forgery("kueue-podset-with-an-h100-affinity", PODSET, {"gpu-class.io/types": "H100"},
            {"affinity": affinity([within([H100])])}),
    Forgery("kueue-podset-with-one-term-outside", PODSET, spec={"affinity": affinity(
        [within(["Tesla-T4"])], [within([H100])])}),
    Forgery("kueue-podset-with-a-value-outside", PODSET, spec={"affinity": affinity([within(["Tesla-T4", H100])])}),
    Forgery("kueue-podset-with-notin-only", PODSET, spec={"affinity": affinity(
        [{"key": PRODUCT, "operator": "NotIn", "values": ["Tesla-T4"]}])}),
    Forgery("kueue-podset-with-an-unknown-key", PODSET, spec={"affinity": affinity(
        [within(["t4"], key="team.example/gpu")])}),
    Forgery("kueue-queue-name-and-workload-marks", {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/managed": "true"},
            {"kueue.x-k8s.io/workload": "job-train-1", "gpu-class.io/types": "H100"}, ON_H100),
    Forgery("owner-reference-to-a-job", spec=ON_H100, metadata={"ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "4d1c1b0e-0000-4000-8000-000000000001",
        "controller": True}]}),
    Forgery("group-label-and-annotation", {"gpu-class.io/group": "g"}, {"gpu-class.io/group": "g"}, ON_H100),
    Forgery("scheduling-gates", spec={**ON_H100, "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}),
    Forgery("strict-scheduler-profile-named", spec={**ON_H100, "schedulerName": "gpu-class-scheduler-performance"}),
    Forgery("own-scheduler-named", spec={**ON_H100, "schedulerName": "my-scheduler"}),
    Forgery("class-high-named", annotations={"gpu-class.io/class": "high"}, spec=ON_H100, outcome="refused",
            message=NOT_ALLOWED),
    Forgery("class-high-with-podset-and-high-affinity", PODSET, {"gpu-class.io/class": "high"},
            {"affinity": affinity([within([H100])])}, outcome="refused", message=NOT_ALLOWED),
    # the one Pod left as it came: what it carries already keeps it to economy's types
    Forgery("kueue-podset-with-affinity-within-economy", PODSET, spec={"affinity": ECONOMY_AFFINITY},
            outcome="out-of-scope"),
]


def forged_pod(f: Forgery) -> dict[str, Any]:
    pod = make_pod(dict(f.annotations) or None, gpu_limit="4")
    pod["metadata"]["namespace"] = "tenant"
    pod["metadata"].update(copy.deepcopy(dict(f.metadata)))
    if f.labels:
        pod["metadata"]["labels"] = dict(f.labels)
    pod["spec"].update(copy.deepcopy(dict(f.spec)))
    return pod


@pytest.mark.parametrize("forgery", FORGERIES, ids=lambda f: f.id)
def test_a_forged_mark_gets_a_pod_nothing_beyond_its_namespaces_classes(forgery: Forgery) -> None:
    pod = forged_pod(forgery)
    review = review_request(parse_review(json.dumps(make_review(pod, namespace="tenant")).encode()), SNAPSHOT, CATALOG)
    assert review.decision.outcome == forgery.outcome, review.decision.message
    if forgery.outcome == "refused":
        assert forgery.message in review.decision.message and review.patch == []
        return
    admitted = jsonpatch.apply_patch(copy.deepcopy(pod), list(review.patch))
    assert_valid_pod(admitted)
    landing = {TYPE_OF_NODE[n] for n in lands_on(admitted)}
    assert landing <= ECONOMY, f"could land on {landing - ECONOMY}"
    if forgery.outcome == "out-of-scope":
        assert review.patch == [] and landing == {"T4", "L4"}
    else:
        # decided in full: the class's own restriction is in every term, whatever the Pod wrote
        assert review.decision.placement is not None and review.decision.placement.class_name == "economy"


# --- a namespace's policy, from the view or the API, or a refusal --------------------------------


TEAM = NamespaceInfo("team", True, "economy", ("economy",))


@pytest.mark.parametrize("annotations, policy, outcome, message", [
    pytest.param({"gpu-class.io/class": "high"}, TEAM, "refused", "not allowed in namespace team", id="read-policy-holds"),
    pytest.param(None, TEAM, "patched", "", id="read-default-class-applies"),
    pytest.param({"gpu-class.io/class": "high"}, UnreadNamespace("team", "reading it from the API failed (HTTP 500)"),
                 "refused", "cannot read the policy of namespace team", id="unread-class-pod-refused"),
    pytest.param(None, UnreadNamespace("team", "timed out"), "refused", "cannot read the policy", id="unread-gpu-pod-refused"),
    pytest.param({"gpu-class.io/class": "high"}, None, "patched", "", id="not-watched-no-policy"),
])
def test_a_namespace_outside_the_view_is_decided_with_its_policy_or_not_at_all(
        annotations: dict[str, str] | None, policy: NamespaceInfo | UnreadNamespace | None, outcome: str,
        message: str) -> None:
    unwatched = build_snapshot(CATALOG, NODES)  # the view holds no namespace
    decision = plan(make_pod(annotations, gpu_limit="1"), unwatched, CATALOG, namespace="team", policy=policy)
    assert decision.outcome == outcome and message in decision.message
    if annotations is None and outcome == "patched":
        assert decision.class_name == "economy"


def test_a_pod_without_gpus_is_left_alone_even_when_its_namespace_cannot_be_read() -> None:
    decision = plan(make_pod(), build_snapshot(CATALOG, NODES), CATALOG, namespace="team",
                    policy=UnreadNamespace("team", "timed out"))
    assert decision.outcome == "out-of-scope"


# --- tolerations for GPU taints only; reserved nodes and pools for the Pods that tolerate them ---------


TOLERATES_TEAM = [{"key": "dedicated", "operator": "Exists"}]


def node_pool(name: str, product: str, taints: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": {PRODUCT: product}}, "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "taints": taints, "requirements": []}}}}


def with_pools(snapshot: Snapshot, *pools: dict[str, Any]) -> Snapshot:
    found: dict[str, tuple[Any, ...]] = {}
    for obj in pools:
        for p in pools_from_object(obj, CATALOG):
            found[p.type_name] = (*found.get(p.type_name, ()), p)
    return dataclasses.replace(snapshot, pools_by_type=found)


RESERVED_NODE = build_snapshot(CATALOG, [make_node("h200-team", H200, gpus=8, taints=[GPU_TAINT, DEDICATED]),
                                         make_node("h100-a", H100, gpus=8)])
RESERVED_POOL = with_pools(build_snapshot(CATALOG, [make_node("h100-a", H100, gpus=8)]),
                           node_pool("h200-team", H200, [GPU_TAINT, DEDICATED]))


@pytest.mark.parametrize("snapshot", [pytest.param(RESERVED_NODE, id="node"), pytest.param(RESERVED_POOL, id="pool")])
@pytest.mark.parametrize("tolerations, types", [
    pytest.param(None, ("H100",), id="not-tolerated-not-offered"),
    pytest.param(TOLERATES_TEAM, ("H200", "H100"), id="tolerated-offered-first"),
])
def test_a_team_taint_is_never_tolerated_for_a_pod_and_keeps_its_nodes_for_those_that_tolerate_it(
        snapshot: Snapshot, tolerations: list[dict[str, str]] | None, types: tuple[str, ...]) -> None:
    pod = make_pod({"gpu-class.io/class": "high"}, tolerations=copy.deepcopy(tolerations))
    decision = plan(pod, snapshot, CATALOG, namespace="ml")
    assert decision.placement is not None and decision.placement.types == types
    assert (H200 in dict(decision.placement.required)[PRODUCT]) == (tolerations is not None)
    added = [t for t in decision.placement.tolerations if t.key != "nvidia.com/gpu"]
    assert added == []  # only the catalog's GPU taint is ever tolerated by gpu-class
    if tolerations is None:
        h200 = next(v for v in decision.verdicts if v.type_name == "H200")
        assert not h200.valid and h200.reason == "its nodes are kept for Pods that tolerate dedicated=team-a:NoSchedule"


@pytest.mark.parametrize("taint, offered", [
    pytest.param(DEDICATED, False, id="a-teams-taint-reserves"),
    pytest.param({"key": "dedicated", "value": "team-a", "effect": "PreferNoSchedule"}, True, id="a-preference-does-not"),
    # Kubernetes' own condition taints mirror the Node's state, which the inventory reads from the Node itself
    pytest.param({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}, True, id="kubernetes-condition-taint"),
])
def test_which_taints_keep_a_node_for_those_that_tolerate_them(taint: dict[str, str], offered: bool) -> None:
    snapshot = build_snapshot(CATALOG, [make_node("h200-a", H200, gpus=8, taints=[GPU_TAINT, taint]),
                                        make_node("h100-a", H100, gpus=8)])
    decision = plan(make_pod({"gpu-class.io/class": "high"}), snapshot, CATALOG, namespace="ml")
    assert decision.placement is not None and ("H200" in decision.placement.types) == offered


# --- a namespace with allowed-classes: every GPU Pod in scope -----------------------------------------------


@dataclass(frozen=True)
class Classless:
    id: str
    allowed: str | None  # the namespace's allowed-classes annotation; None: none
    outcome: str
    class_name: str | None = None  # the class the Pod is placed in
    message: str = ""
    default_label: str | None = None
    catalog_default: str | None = None
    gpus: bool = True  # the Pod asks for nvidia.com/gpu: 8


CLASSLESS = [
    # the audit's Pod: 8 GPUs and its own H100 nodeSelector, no class, no default; economy the only class allowed
    Classless("one-class-allowed-is-the-class", "economy", "patched", "economy"),
    Classless("several-allowed-no-default-refused", "economy,standard", "refused",
              message="namespace tenant allows only some classes and sets no default class: write "
                      "gpu-class.io/class: <one of standard, economy>"),
    Classless("several-allowed-the-namespaces-default", "economy,standard", "patched", "economy",
              default_label="economy"),
    Classless("several-allowed-the-catalogs-default-when-allowed", "economy,standard", "patched", "standard",
              catalog_default="standard"),
    Classless("the-catalogs-default-not-allowed-refused", "economy,standard", "refused", catalog_default="high",
              message="write gpu-class.io/class: <one of standard, economy>"),
    Classless("the-only-allowed-class-wins-over-a-catalog-default-not-allowed", "economy", "patched", "economy",
              catalog_default="high"),
    Classless("no-class-allowed-refused", "", "refused", message="namespace tenant allows no class of the catalog"),
    Classless("the-only-allowed-class-does-not-exist", "turbo", "refused",
              message="the gpu-class.io/allowed-classes annotation of namespace tenant names class 'turbo', which "
                      "does not exist"),
    Classless("without-allowed-classes-left-alone-as-before", None, "out-of-scope",
              message="no class annotation and no default class"),
    Classless("a-pod-without-gpus-is-left-alone", "economy,standard", "out-of-scope", gpus=False,
              message="no class annotation and no GPU request"),
]


@pytest.mark.parametrize("case", CLASSLESS, ids=lambda c: c.id)
def test_a_gpu_pod_without_a_class_in_a_namespace_with_allowed_classes_is_placed_by_them_or_refused(
        case: Classless) -> None:
    catalog = make_catalog(f"defaultClass: {case.catalog_default}\n" if case.catalog_default else "")
    namespace = make_namespace("tenant", default_class=case.default_label, allowed=case.allowed)
    snapshot = build_snapshot(catalog, [*NODES, namespace], watch_namespaces=True)
    pod = make_pod(gpu_limit="8" if case.gpus else None, extra_spec={"nodeSelector": {PRODUCT: H100}})
    pod["metadata"]["namespace"] = "tenant"
    review = review_request(parse_review(json.dumps(make_review(pod, namespace="tenant")).encode()), snapshot, catalog)
    decision = review.decision
    assert decision.outcome == case.outcome, decision.message
    assert case.message in decision.message
    if case.outcome != "patched":
        assert review.patch == [] and decision.placement is None
        return
    assert decision.class_name == case.class_name
    admitted = jsonpatch.apply_patch(copy.deepcopy(pod), list(review.patch))
    # the class is written, as for a namespace's default class, so the extender and the backstop see it
    assert admitted["metadata"]["annotations"]["gpu-class.io/class"] == case.class_name
    landing = {TYPE_OF_NODE[n] for n in lands_on(admitted)}
    assert landing <= set(catalog.classes[case.class_name].types)  # never the H100 its nodeSelector names


# --- the resource is part of the type: a slice class is not a whole GPU of the same product --------------------


BUILT_IN = load_catalog_text(default_catalog_text(), "catalog")
MIG = "nvidia.com/mig-1g.10gb"
MIXED_NODES = [  # mixed strategy: the product is the whole GPU's, the node offers slices
    make_device_node("h100-mixed", {PRODUCT: H100}, {MIG: "7", "nvidia.com/gpu": "0"}),
    make_device_node("h100-whole", {PRODUCT: H100}, {"nvidia.com/gpu": "8"}),
    make_device_node("h200-whole", {PRODUCT: H200}, {"nvidia.com/gpu": "8"}),
]
SLICES_ONLY = build_snapshot(BUILT_IN, [*MIXED_NODES, make_namespace("tenant", allowed="small-slices")],
                             watch_namespaces=True)
# decided in full: nvidia.com/gpu is small-slices' only as its single-strategy slices, which no node here has
WHOLE_GPUS_DECIDED = "no ready, schedulable node offers 8 GPU(s) as nvidia.com/gpu of class small-slices"


def sliced_pod(limits: dict[str, str], *, labels: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None, requests: dict[str, str] | None = None,
               init: dict[str, str] | None = None, products: tuple[str, ...] = (H100, H200)) -> dict[str, Any]:
    resources = {**({"limits": limits} if limits else {}), **({"requests": requests} if requests else {})}
    pod = make_pod({"gpu-class.io/class": "small-slices", **(annotations or {})},
                   containers=[{"name": "main", "image": "x", "resources": resources}],
                   affinity=affinity([within(list(products))]),
                   extra_spec={"initContainers": [{"name": "warm", "image": "x", "resources": {"limits": init}}]}
                   if init else None)
    pod["metadata"]["namespace"] = "tenant"
    if labels:
        pod["metadata"]["labels"] = labels
    return pod


@pytest.mark.parametrize("pod, outcome, message", [
    # the audit's Pods: an affinity to the H100 and H200 product values, whose slice types small-slices has,
    # and eight whole GPUs
    pytest.param(sliced_pod({"nvidia.com/gpu": "8"}, labels=PODSET), "refused",
                 WHOLE_GPUS_DECIDED, id="podset-whole-gpus"),
    pytest.param(sliced_pod({"nvidia.com/gpu": "8"}, annotations={"kueue.x-k8s.io/pod-suspending-parent": "sts"}),
                 "refused", WHOLE_GPUS_DECIDED, id="suspending-parent-whole-gpus"),
    pytest.param(sliced_pod({}, labels=PODSET, requests={"nvidia.com/gpu": "8"}), "refused",
                 "GPUs the quota never counted", id="podset-whole-gpus-requested-only"),
    pytest.param(sliced_pod({MIG: "1"}, labels=PODSET, init={"nvidia.com/gpu": "8"}), "refused",
                 "a Pod can be placed on one GPU resource only", id="podset-whole-gpus-in-an-init-container"),
    # H200's slice of the class is 1g.18gb: its product value gives a 1g.10gb slice as no type of the class
    pytest.param(sliced_pod({MIG: "1"}, labels=PODSET), "patched", "", id="podset-a-slice-one-value-lacks-decided"),
    # what Kueue starts from a template gpu-class decided: a slice, on the products that have it
    pytest.param(sliced_pod({MIG: "1"}, labels=PODSET, products=(H100,)), "out-of-scope", "decided with its workload",
                 id="podset-a-slice-of-the-class-left-as-it-came"),
])
def test_a_pod_left_as_it_came_must_ask_for_a_resource_of_the_types_its_affinity_keeps_it_to(
        pod: dict[str, Any], outcome: str, message: str) -> None:
    decision = plan(pod, SLICES_ONLY, BUILT_IN, namespace="tenant")
    assert decision.outcome == outcome and message in decision.message, decision.message


def queued_job(limits: dict[str, str], products: tuple[str, ...]) -> dict[str, Any]:
    template = sliced_pod(limits, annotations={"gpu-class.io/types": "H100-1g.10gb"}, products=products)
    template["metadata"].pop("namespace")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "train", "namespace": "tenant", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"template": template}}


@pytest.mark.parametrize("limits, products, outcome, message", [
    pytest.param({"nvidia.com/gpu": "8"}, (H100, H200), "refused", WHOLE_GPUS_DECIDED,
                 id="whole-gpus-decided-again-and-refused"),
    pytest.param({MIG: "1"}, (H100,), "out-of-scope", "decided at an earlier call", id="a-slice-left-as-decided"),
])
def test_a_queued_template_left_as_decided_must_ask_for_a_resource_of_its_types(
        limits: dict[str, str], products: tuple[str, ...], outcome: str, message: str) -> None:
    body = make_review(queued_job(limits, products), kind="Job", namespace="tenant")
    body["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    review = review_request(parse_review(json.dumps(body).encode()), SLICES_ONLY, BUILT_IN)
    assert review.decision.outcome == outcome and message in review.decision.message, review.decision.message


# --- onUnsatisfiable: admit never lets a Pod's own constraints step over its class ------------------------------


ADMIT_CATALOG = load_catalog_text(TEST_CATALOG_YAML.replace("onUnsatisfiable: deny", "onUnsatisfiable: admit"),
                                  "admit.yaml")
ADMIT_SNAPSHOT = build_snapshot(ADMIT_CATALOG, [*NODES, make_namespace("tenant", allowed="economy")],
                                watch_namespaces=True)
ALL_ECONOMY = ",".join(ADMIT_CATALOG.classes["economy"].types)
PREFERS_H100 = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 100, "preference": {"matchExpressions": [within([H100])]}}]}}


@pytest.mark.parametrize("annotations, spec, outcome, message", [
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, ON_H100, "refused",
                 "its own nodeSelector names nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3, which is H100, not a type "
                 "of class economy", id="min-memory-and-an-h100-node-selector"),
    pytest.param({"gpu-class.io/min-compute-capability": "9.0"}, ON_H100, "refused", "which is H100",
                 id="compute-capability-and-an-h100-node-selector"),
    pytest.param({"gpu-class.io/exclude-types": ALL_ECONOMY}, ON_H100, "refused", "which is H100",
                 id="every-type-excluded-and-an-h100-node-selector"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"affinity": affinity([within(["Tesla-T4", H100])])},
                 "refused", "its own required node affinity names nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
                 id="a-required-affinity-with-a-value-outside"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"affinity": PREFERS_H100}, "refused",
                 "its own preferred node affinity names", id="a-preference-outside"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"nodeName": "h100-a"}, "refused",
                 "its own spec.nodeName names kubernetes.io/hostname=h100-a, which is H100", id="bound-to-an-h100-node"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"nodeSelector": {"kubernetes.io/hostname": "h100-a"}},
                 "refused", "which is H100", id="an-h100-node-by-hostname"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"nodeSelector": {PRODUCT: "NVIDIA-B300"}}, "refused",
                 "which is no type gpu-class knows", id="a-product-no-type-claims"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {}, "admitted-unsatisfiable", "", id="no-constraint-admitted"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"nodeSelector": {PRODUCT: "Tesla-T4"}},
                 "admitted-unsatisfiable", "", id="a-constraint-within-the-class-admitted"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"nodeSelector": {"topology.kubernetes.io/zone": "a"}},
                 "admitted-unsatisfiable", "", id="a-constraint-on-no-gpu-label-admitted"),
    pytest.param({"gpu-class.io/min-memory": "80Gi"}, {"nodeSelector": {"kubernetes.io/hostname": "t4-a"}},
                 "admitted-unsatisfiable", "", id="an-economy-node-by-hostname-admitted"),
])
def test_admit_when_unsatisfiable_never_admits_a_pod_whose_own_constraints_reach_outside_its_class(
        annotations: dict[str, str], spec: dict[str, Any], outcome: str, message: str) -> None:
    pod = make_pod({"gpu-class.io/class": "economy", **annotations}, gpu_limit="8")
    pod["metadata"]["namespace"] = "tenant"
    pod["spec"].update(copy.deepcopy(spec))
    review = review_request(parse_review(json.dumps(make_review(pod, namespace="tenant")).encode()),
                            ADMIT_SNAPSHOT, ADMIT_CATALOG)
    assert review.decision.outcome == outcome, review.decision.message
    assert message in review.decision.message
    if outcome == "refused":
        assert "Drop that constraint" in review.decision.message and review.patch == []
        return
    admitted = jsonpatch.apply_patch(copy.deepcopy(pod), list(review.patch))
    assert admitted["metadata"]["annotations"]["gpu-class.io/types"] == ""  # admitted unplaced, as before
    if spec:  # a constraint of its own keeps it within economy; none at all is the catalog's choice to admit
        assert {TYPE_OF_NODE[n] for n in lands_on(admitted)} <= ECONOMY
