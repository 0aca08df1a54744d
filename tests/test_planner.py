"""Table-driven tests of the admission decision, each patch applied and checked against the Pod schema."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import pytest

from builders import (
    GPU_TAINT, assert_valid_pod, make_catalog, make_namespace, make_node, make_pod,
)
from webhook.core.catalog.model import Catalog
from webhook.core.catalog.profiles import Strategy
from webhook.core.view.inventory import InventoryState, build_snapshot
from webhook.core.view.nodes import Taint, node_info_from_object
from webhook.core.view.snapshot import Snapshot
from webhook.core.admission.patch import build_patch
from webhook.core.admission.order import rank_gap, weights_for
from webhook.core.admission.planner import Decision, plan
from webhook.core.admission.route import route_scheduler

CATALOG = make_catalog()

CLUSTER = [
    make_node("h200-a", "NVIDIA-H200", gpus=8),
    make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8),
    make_node("a100-40", "A100-SXM4-40GB", gpus=4),
    make_node("a100-80", "NVIDIA-A100-SXM4-80GB", gpus=8, taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute"}]),
    make_node("a10-a", "NVIDIA-A10", gpus=1),
    make_node("l40s-a", "NVIDIA-L40S", gpus=4, ready=False),
    make_node("t4-cordoned", "Tesla-T4", gpus=1, unschedulable=True),
    make_node("t4-shared", "Tesla-T4-SHARED", gpus=4, taints=[]),
    make_node("mig-a", "A100-SXM4-40GB-MIG-1g.5gb", gpus=7),
    make_node("cpu-a"),
    make_node("dedicated", "NVIDIA-H100-80GB-HBM3", gpus=8,
              taints=[GPU_TAINT, {"key": "team", "value": "research", "effect": "NoSchedule"}]),
]
HAND_LABELLED = make_node("a100-hand", "A100-SXM4-40GB", gpus=2, label_key="gpu-type")


def snapshot_of(nodes: list[dict[str, Any]], catalog: Catalog = CATALOG, namespaces: list[dict[str, Any]] | None = None) -> Snapshot:
    return build_snapshot(catalog, nodes + (namespaces or []), watch_namespaces=namespaces is not None)


@dataclass
class Case:
    id: str
    pod: dict[str, Any]
    outcome: str
    types: tuple[str, ...] = ()
    nodes: list[dict[str, Any]] = field(default_factory=lambda: CLUSTER)
    catalog: Catalog = CATALOG
    namespaces: list[dict[str, Any]] | None = None
    message: tuple[str, ...] = ()  # substrings the message must hold
    warning: str | None = None  # substring of a warning
    not_in_message: tuple[str, ...] = ()  # substrings the message must not hold
    warnings: tuple[str, ...] | None = None  # every warning, exactly
    required: dict[str, list[str]] | None = None  # label key -> product values of the restriction


C = "gpu-class.io/class"
CASES = [
    Case("high-fastest-first", make_pod({C: "high"}), "patched", ("H200", "H100", "A100"),
         required={"nvidia.com/gpu.product": ["A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"]}),
    Case("substring-a10-never-a100", make_pod({C: "a10"}), "patched", ("A10",),
         required={"nvidia.com/gpu.product": ["NVIDIA-A10"]}),
    Case("substring-l4-never-l40s", make_pod({C: "l4"}), "refused",
         message=("class l4", "Present:", "H100 (largest allocatable 8)"), not_in_message=("L4 (", "L40S")),
    # the L40S node is not ready: it could not take a Pod of any class now, so the refusal leaves it out ...
    Case("refusal-lists-the-class-types-it-has-even-unusable", make_pod({C: "big", "gpu-class.io/count": "12"}),
         "refused", message=("L40S (largest allocatable 0)", "A100 (largest allocatable 8)")),
    # ... unless it is of the Pod's class: then it says why the class has nothing
    Case("substring-h20-never-h200", make_pod({C: "h20"}), "refused", message=("types H20",)),
    # no warning for catalog types the cluster does not have (H20, L4): the Pod gets the best there is
    Case("cost-slowest-first", make_pod({C: "economy"}), "patched", ("T4", "V100", "A10"), warnings=()),
    # H20 and L4 are absent: no word of them; L40S, the best type the cluster has, is not ready
    Case("absent-types-not-warned-an-unusable-best-one-is", make_pod({C: "standard"}), "patched",
         ("A100", "A10", "V100"),
         warnings=("gpu-class: class standard: not on L40S (all 1 nodes not ready); best allowed: A100",)),
    Case("worse-than-the-best-present-type-warned", make_pod({C: "high", "gpu-class.io/count": "6"},
                                                             ), "patched", ("H100", "A100"),
         nodes=[make_node("h200-small", "NVIDIA-H200", gpus=4), *CLUSTER[1:]],
         warnings=("gpu-class: class high: not on H200 (too few GPUs: largest allocatable 4, Pod needs 6); "
                   "best allowed: H100",)),
    Case("cost-worse-than-the-slowest-present-type-warned", make_pod({C: "economy"}), "patched", ("V100", "A10"),
         nodes=[n for n in CLUSTER if n["metadata"]["name"] != "t4-shared"],
         warnings=("gpu-class: class economy: not on T4 (all 1 nodes cordoned or not ready); best allowed: V100",)),
    Case("excluded-best-type-not-warned", make_pod({C: "high", "gpu-class.io/exclude-types": "H200"}), "patched",
         ("H100", "A100"), warnings=()),
    Case("balanced-not-warned-of-types", make_pod({C: "balanced", "gpu-class.io/count": "6"}), "patched", ("A100",),
         warnings=()),
    Case("unknown-annotation-warned", make_pod({C: "high", "gpu-class.io/min-mem": "40Gi"}), "patched",
         ("H200", "H100", "A100"),
         warnings=("gpu-class: gpu-class.io/min-mem ignored; known: class, count, container, exclude-types, "
                   "min-memory, group, group-size...",)),
    Case("exclusion-outside-the-class-warned", make_pod({C: "high", "gpu-class.io/exclude-types": "T4,H200"}),
         "patched", ("H100", "A100"), warnings=("gpu-class: gpu-class.io/exclude-types: T4 ignored: not in class high",)),
    Case("types-written-by-the-user-warned", make_pod({C: "high", "gpu-class.io/types": "T4"}), "patched",
         ("H200", "H100", "A100"),
         warnings=("gpu-class: gpu-class.io/types is written by gpu-class: the Pod's value was replaced",)),
    Case("memory-class", make_pod({C: "big"}), "patched", ("H200", "H100", "A100")),
    Case("count-beyond-every-node", make_pod({C: "high", "gpu-class.io/count": "16"}), "refused",
         message=("16 GPU(s)", "H100 (largest allocatable 8)", "Ask for fewer GPUs")),
    Case("count-selects-big-nodes", make_pod({C: "high", "gpu-class.io/count": "8"}), "patched", ("H200", "H100", "A100"),
         required={"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"]}),
    Case("cordoned-and-shared", make_pod({C: "scalable"}), "patched", ("V100", "T4"),
         required={"nvidia.com/gpu.product": ["Tesla-T4-SHARED", "Tesla-V100-SXM2-16GB"]}),
    Case("excluded-types", make_pod({C: "high", "gpu-class.io/exclude-types": "H200, H100"}), "patched", ("A100",)),
    Case("exclude-unknown-type", make_pod({C: "high", "gpu-class.io/exclude-types": "K80"}), "refused",
         message=("unknown types K80", "types: H200")),
    Case("exclude-everything", make_pod({C: "a10", "gpu-class.io/exclude-types": "A10"}), "refused",
         message=("excluding A10",)),
    Case("unknown-class", make_pod({C: "fast"}), "refused", message=("unknown class 'fast'", "high, standard, economy")),
    *[
        Case(f"bad-count-{label}", make_pod({C: "high", "gpu-class.io/count": value}), "refused",
             message=("positive whole number",))
        for label, value in [("zero", "0"), ("negative", "-1"), ("fraction", "1.5"), ("word", "two"), ("empty", ""),
                             ("huge", "9" * 5000)]
    ],
    Case("missing-container", make_pod({C: "high", "gpu-class.io/container": "trainer"}), "refused",
         message=("'trainer'", "containers: main")),
    Case("existing-limit-is-count", make_pod({C: "high"}, gpu_limit="8"), "patched", ("H200", "H100", "A100"),
         required={"nvidia.com/gpu.product": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"]}),
    Case("count-conflicts-with-limit", make_pod({C: "high", "gpu-class.io/count": "4"}, gpu_limit="2"), "refused",
         message=("says 4", "already has 2")),
    Case("no-class-no-gpu", make_pod(), "out-of-scope"),
    Case("no-class-gpu-no-default", make_pod(gpu_limit="1"), "out-of-scope"),
    Case("catalog-default-class", make_pod(gpu_limit="1"), "patched", ("T4", "V100", "A10"),
         catalog=make_catalog("defaultClass: economy\n")),
    Case("namespace-default-wins", make_pod(gpu_limit="1"), "patched", ("H200", "H100", "A100"),
         catalog=make_catalog("defaultClass: economy\n"), namespaces=[make_namespace("ml", default_class="high")]),
    Case("namespace-default-unknown", make_pod(gpu_limit="1"), "refused",
         namespaces=[make_namespace("ml", default_class="turbo")], message=("namespace ml", "'turbo'")),
    Case("namespace-not-opted-in", make_pod({C: "high"}), "out-of-scope", namespaces=[make_namespace("ml", inject=False)]),
    Case("namespace-allowed-classes", make_pod({C: "high"}), "refused",
         namespaces=[make_namespace("ml", allowed="economy, standard")], message=("not allowed", "economy, standard")),
    Case("namespace-allowed-class-ok", make_pod({C: "economy"}), "patched", ("T4", "V100", "A10"),
         namespaces=[make_namespace("ml", allowed="economy")]),
    Case("mirror-pod", make_pod({C: "high", "kubernetes.io/config.mirror": "abc"}), "out-of-scope"),
    # what a claim may be for is read from the cluster (tests/test_own_claims.py): one it does not hold is refused
    Case("own-resource-claims-with-a-class",
         make_pod({C: "high"}, extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}),
         "refused", message=("claim 'gpu': no ResourceClaimTemplate 'ml/one-gpu' in the webhook's view",
                             "retries by itself")),
    Case("own-resource-claims-by-default-class",
         make_pod(gpu_limit="1", extra_spec={"resourceClaims": [{"name": "nic", "resourceClaimName": "rdma"}]}),
         "refused", namespaces=[make_namespace("ml", default_class="high")],
         message=("claim 'nic': no ResourceClaim 'ml/rdma'",)),
    Case("own-resource-claims-out-of-scope-without-class-or-gpu",
         make_pod(extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}),
         "out-of-scope", namespaces=[make_namespace("ml", default_class="high")]),
    Case("two-label-keys", make_pod({C: "high", "gpu-class.io/exclude-types": "H200,H100"}), "patched", ("A100",),
         nodes=CLUSTER + [HAND_LABELLED],
         required={"gpu-type": ["A100-SXM4-40GB"], "nvidia.com/gpu.product": ["A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]}),
    Case("admit-when-unsatisfiable", make_pod({C: "l4"}), "admitted-unsatisfiable",
         catalog=dataclasses.replace(CATALOG, on_unsatisfiable="admit"),
         warning="no ready, schedulable node"),
    Case("init-container-needs-more",
         make_pod({C: "high"}, extra_spec={"initContainers": [
             {"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "12"}}}]}),
         "refused", message=("12 GPU(s)",)),
    Case("malformed-containers", {"metadata": {"annotations": {C: "high"}}, "spec": {"containers": "main"}}, "refused",
         message=("malformed Pod", "spec.containers must be a list")),
    Case("malformed-annotation-value", {"metadata": {"annotations": {C: 3}}, "spec": {"containers": []}}, "refused",
         message=("malformed Pod",)),
]


def run(case: Case) -> tuple[Decision, Snapshot]:
    snapshot = snapshot_of(case.nodes, case.catalog, case.namespaces)
    return plan(case.pod, snapshot, case.catalog, namespace="ml"), snapshot


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decision(case: Case) -> None:
    decision, snapshot = run(case)
    assert decision.outcome == case.outcome, decision.message
    for part in case.message:
        assert part in decision.message
    for part in case.not_in_message:
        assert part not in decision.message
    if case.warnings is not None:
        assert decision.warnings == case.warnings
    if case.warning is not None:
        assert any(case.warning in w for w in decision.warnings), decision.warnings
        assert all(len(w) <= 120 for w in decision.warnings)
    if decision.outcome != "patched":
        assert decision.placement is None
        return
    assert decision.placement is not None
    assert decision.placement.types == case.types
    if case.required is not None:
        assert {k: list(v) for k, v in decision.placement.required} == case.required
    check_patch(case.pod, decision, snapshot, case.catalog)


def check_patch(pod: dict[str, Any], decision: Decision, snapshot: Snapshot, catalog: Catalog) -> dict[str, Any]:
    """Apply the patch, validate the Pod, and check it says what the decision says; then idempotence."""
    placement = decision.placement
    assert placement is not None
    original = copy.deepcopy(pod)
    ops = build_patch(pod, placement)
    assert pod == original, "building the patch must not modify the request object"
    patched = jsonpatch.apply_patch(pod, ops)
    assert_valid_pod({"apiVersion": "v1", "kind": "Pod", **patched})

    container = patched["spec"]["containers"][placement.container_index]
    assert container["resources"]["limits"][placement.resource] == str(placement.count)
    assert patched["metadata"]["annotations"]["gpu-class.io/types"] == ",".join(placement.types)
    terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    restrictions = [{"key": k, "operator": "In", "values": list(v)} for k, v in placement.required]
    for term in terms:
        assert sum(r in term["matchExpressions"] for r in restrictions) == 1
    preferred = patched["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    ours = [p for p in preferred if p["preference"]["matchExpressions"][0]["key"] in catalog.product_labels]
    assert [p["weight"] for p in ours] == sorted((p["weight"] for p in ours), reverse=True)
    assert all(1 <= p["weight"] <= 100 for p in preferred)

    again = plan(patched, snapshot, catalog, namespace="ml")
    assert again.placement is not None
    assert build_patch(patched, again.placement) == [], "the webhook must be idempotent"
    return patched


def test_tolerations_cover_only_gpu_taints_of_valid_nodes() -> None:
    decision, snapshot = run(Case("", make_pod({C: "high"}), "patched"))
    assert decision.placement is not None
    tolerated = {(t.key, t.effect) for t in decision.placement.tolerations}
    # NoSchedule from H100/H200 nodes, NoExecute from the A100 80GB node; never the 'team' taint
    assert tolerated == {("nvidia.com/gpu", "NoSchedule"), ("nvidia.com/gpu", "NoExecute")}
    patched = check_patch(make_pod({C: "high"}), decision, snapshot, CATALOG)
    assert sorted(t.get("effect", "") for t in patched["spec"]["tolerations"]) == ["NoExecute", "NoSchedule"]
    assert all(t["operator"] == "Exists" and t["key"] == "nvidia.com/gpu" for t in patched["spec"]["tolerations"])


@pytest.mark.parametrize(
    "existing, added",
    [
        pytest.param([{"key": "nvidia.com/gpu", "operator": "Exists"}], [], id="exists-any-effect"),
        pytest.param([{"operator": "Exists"}], [], id="tolerate-everything"),
        pytest.param([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
                     [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], id="equal-value-one-effect"),
        pytest.param([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "other", "effect": "NoSchedule"}],
                     [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
                      {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], id="equal-wrong-value"),
    ],
)
def test_existing_tolerations_are_respected(existing: list[dict[str, Any]], added: list[dict[str, Any]]) -> None:
    pod = make_pod({C: "high"}, tolerations=copy.deepcopy(existing))
    decision, snapshot = run(Case("", pod, "patched"))
    patched = check_patch(pod, decision, snapshot, CATALOG)
    assert patched["spec"]["tolerations"][: len(existing)] == existing
    new = patched["spec"]["tolerations"][len(existing):]
    assert sorted(new, key=lambda t: t.get("effect", "")) == added


USER_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-a"]}]},
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 7, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}
        ],
    },
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                          "labelSelector": {"matchLabels": {"app": "x"}}}}]},
}


@pytest.mark.parametrize("nodes, keys", [
    pytest.param(CLUSTER, 1, id="one-label-key"),
    pytest.param(CLUSTER + [HAND_LABELLED], 2, id="two-label-keys-repeat-each-term"),
])
def test_user_affinity_keeps_its_meaning(nodes: list[dict[str, Any]], keys: int) -> None:
    pod = make_pod({C: "high"}, affinity=copy.deepcopy(USER_AFFINITY))
    snapshot = snapshot_of(nodes)
    decision = plan(pod, snapshot, CATALOG, namespace="ml")
    patched = check_patch(pod, decision, snapshot, CATALOG)
    na = patched["spec"]["affinity"]["nodeAffinity"]
    terms = na["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    user_terms = USER_AFFINITY["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == len(user_terms) * keys
    for i, user_term in enumerate(user_terms):
        for term in terms[i * keys:(i + 1) * keys]:
            # the user's expressions and fields are all still there: qualifying nodes = user's AND valid ones
            assert user_term.get("matchFields") == term.get("matchFields")
            assert all(e in term.get("matchExpressions", []) for e in user_term.get("matchExpressions", []))
    assert na["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 7
    assert patched["spec"]["affinity"]["podAntiAffinity"] == USER_AFFINITY["podAntiAffinity"]


def test_container_annotation_targets_named_container() -> None:
    containers = [{"name": "sidecar", "image": "x"}, {"name": "trainer", "image": "y"}]
    pod = make_pod({C: "high", "gpu-class.io/container": "trainer", "gpu-class.io/count": "2"}, containers=containers)
    decision, snapshot = run(Case("", pod, "patched"))
    patched = check_patch(pod, decision, snapshot, CATALOG)
    assert "resources" not in patched["spec"]["containers"][0]
    assert patched["spec"]["containers"][1]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}


def test_default_target_is_container_with_gpu_limit() -> None:
    containers = [{"name": "sidecar", "image": "x"},
                  {"name": "trainer", "image": "y", "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}}}]
    pod = make_pod({C: "high"}, containers=containers)
    decision, snapshot = run(Case("", pod, "patched"))
    assert decision.placement is not None and decision.placement.container_name == "trainer"
    assert not decision.placement.set_limit
    patched = check_patch(pod, decision, snapshot, CATALOG)
    assert patched["spec"]["containers"][1]["resources"]["requests"] == {"cpu": "1"}


def test_request_only_becomes_limit() -> None:
    containers = [{"name": "main", "image": "y", "resources": {"requests": {"nvidia.com/gpu": "2", "cpu": "1"}}}]
    pod = make_pod({C: "high"}, containers=containers)
    decision, snapshot = run(Case("", pod, "patched"))
    patched = check_patch(pod, decision, snapshot, CATALOG)
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}


def state_with_pods(pods: dict[str, tuple[str, int]]) -> Snapshot:
    nodes = [
        make_node("a100-1", "A100-SXM4-40GB", gpus=8), make_node("a100-2", "A100-SXM4-40GB", gpus=8),
        make_node("l4-1", "NVIDIA-L4", gpus=4), make_node("t4-1", "Tesla-T4", gpus=2),
    ]
    state = InventoryState(catalog=CATALOG, synced=True)
    state.replace_nodes(n for n in (node_info_from_object(o, CATALOG) for o in nodes) if n is not None)
    state.replace_pods((key, node, {"nvidia.com/gpu": gpus}) for key, (node, gpus) in pods.items())
    return state.publish()


@pytest.mark.parametrize("pods, balanced, packed", [
    pytest.param({}, ("A100", "L4", "T4"), ("A100", "L4", "T4"), id="idle-cluster-keeps-class-order"),
    pytest.param({"ml/a": ("a100-1", 8), "ml/b": ("a100-2", 7)}, ("L4", "T4", "A100"), ("A100", "L4", "T4"),
                 id="a100-nearly-full"),
    pytest.param({"ml/a": ("l4-1", 4), "ml/b": ("t4-1", 1)}, ("A100", "T4", "L4"), ("L4", "T4", "A100"),
                 id="l4-full"),
    # A100 has the most free GPUs (4) but the smallest share free (4 of 16 against T4's 1 of 2)
    pytest.param({"ml/a": ("a100-1", 8), "ml/b": ("a100-2", 4), "ml/c": ("t4-1", 1)}, ("L4", "T4", "A100"),
                 ("A100", "T4", "L4"), id="share-not-count"),
])
def test_balanced_and_binpack_follow_the_share_of_gpus_free(pods: dict[str, tuple[str, int]],
                                                             balanced: tuple[str, ...], packed: tuple[str, ...]) -> None:
    snapshot = state_with_pods(pods)
    assert plan(make_pod({C: "balanced"}), snapshot, CATALOG).placement.types == balanced  # type: ignore[union-attr]
    assert plan(make_pod({C: "packed"}), snapshot, CATALOG).placement.types == packed  # type: ignore[union-attr]


@pytest.mark.parametrize("namespaces, catalog", [
    pytest.param([make_namespace("ml", default_class="economy")], CATALOG, id="namespace-default"),
    pytest.param(None, make_catalog("defaultClass: economy\n"), id="catalog-default"),
])
def test_a_default_class_is_recorded_on_the_pod(namespaces: list[dict[str, Any]] | None, catalog: Catalog) -> None:
    pod = make_pod(gpu_limit="1")
    snapshot = snapshot_of(CLUSTER, catalog, namespaces)
    patched = check_patch(pod, plan(pod, snapshot, catalog, namespace="ml"), snapshot, catalog)
    # the scheduler extender reads the class (and so the strategy) from the Pod
    assert patched["metadata"]["annotations"] == {"gpu-class.io/types": "T4,V100,A10", "gpu-class.io/class": "economy"}


def test_unsynced_inventory_refuses_pods_in_scope_only() -> None:
    unsynced = dataclasses.replace(snapshot_of(CLUSTER), synced=False)
    decision = plan(make_pod({C: "high"}), unsynced, CATALOG)
    assert decision.outcome == "refused" and "retry" in decision.message
    assert plan(make_pod(), unsynced, CATALOG).outcome == "out-of-scope"


def test_scalable_type_at_zero_uses_catalog_products() -> None:
    decision = plan(make_pod({C: "scalable"}), snapshot_of([]), CATALOG)
    assert decision.outcome == "patched"
    assert decision.placement is not None
    assert decision.placement.types == ("V100",)
    assert decision.placement.required == (("nvidia.com/gpu.product", ("Tesla-V100-SXM2-16GB",)),)
    assert [(t.key, t.effect) for t in decision.placement.tolerations] == [("nvidia.com/gpu", "")]


@pytest.mark.parametrize("catalog_text, class_name, pod_scheduler, expected", [
    pytest.param("", "high", "default-scheduler", "default-scheduler", id="no-catalog-scheduler-leaves-it"),
    pytest.param("schedulerName: gpu-class-scheduler\n", "high", "default-scheduler", "gpu-class-scheduler",
                 id="catalog-routes-performance"),
    pytest.param("schedulerName: gpu-class-scheduler\n", "packed", None, "gpu-class-scheduler-binpack",
                 id="catalog-routes-binpack-to-its-profile"),
    pytest.param("", "balanced", "gpu-class-scheduler", "gpu-class-scheduler-balanced",
                 id="user-names-the-strict-scheduler"),
    pytest.param("", "high", "gpu-class-scheduler-balanced", "gpu-class-scheduler",
                 id="wrong-profile-for-the-class-corrected"),
    pytest.param("schedulerName: gpu-class-scheduler\n", "high", "volcano", "volcano", id="own-scheduler-kept"),
    pytest.param("strictSchedulers: [gpu-class-extender]\n", "packed", "gpu-class-extender",
                 "gpu-class-extender-binpack", id="another-strict-scheduler"),
    pytest.param("strictSchedulers: [gpu-class-extender]\n", "packed", "gpu-class-scheduler",
                 "gpu-class-scheduler", id="not-listed-is-an-ordinary-scheduler"),
])
def test_scheduler_routing(catalog_text: str, class_name: str, pod_scheduler: str | None, expected: str) -> None:
    catalog = make_catalog(catalog_text)
    pod = make_pod({C: class_name}, extra_spec={} if pod_scheduler is None else {"schedulerName": pod_scheduler})
    snapshot = snapshot_of(CLUSTER, catalog)
    patched = check_patch(pod, plan(pod, snapshot, catalog), snapshot, catalog)
    assert patched["spec"].get("schedulerName", "default-scheduler") == expected


@pytest.mark.parametrize("pod_scheduler, strategy, resource, expected", [
    pytest.param("gpu-class-scheduler", "performance", "nvidia.com/gpu", "gpu-class-scheduler", id="whole-gpus"),
    pytest.param("gpu-class-scheduler", "cost", "nvidia.com/mig-1g.10gb", "gpu-class-scheduler-slices",
                 id="mig-slices"),
    pytest.param("gpu-class-scheduler", "binpack", "nvidia.com/mig-3g.40gb", "gpu-class-scheduler-binpack-slices",
                 id="binpack-mig-slices"),
    pytest.param("gpu-class-scheduler", "balanced", "amd.com/gpu", "gpu-class-scheduler-balanced", id="amd"),
    pytest.param("gpu-class-scheduler-slices", "performance", "nvidia.com/gpu", "gpu-class-scheduler",
                 id="slices-profile-named-for-whole-gpus-corrected"),
])
def test_route_by_strategy_and_kind_of_resource(pod_scheduler: str, strategy: Strategy, resource: str,
                                                 expected: str) -> None:
    assert route_scheduler(pod_scheduler, make_catalog(""), strategy, resource) == expected


@pytest.mark.parametrize("n, expected", [
    pytest.param(1, (100,), id="one"),
    pytest.param(2, (100, 1), id="two"),
    pytest.param(3, (100, 10, 1), id="three"),
    pytest.param(5, (100, 33, 11, 3, 1), id="five"),
])
def test_weights_descend_within_api_range(n: int, expected: tuple[int, ...]) -> None:
    assert weights_for(n) == expected


@pytest.mark.parametrize("n, smallest_gap", [
    pytest.param(2, 99, id="2"), pytest.param(6, 58, id="6"), pytest.param(20, 16, id="20-a-whole-mig-class"),
    pytest.param(100, 1, id="100-still-distinct"),
])
def test_weights_keep_every_rank_apart(n: int, smallest_gap: int) -> None:
    weights = weights_for(n)
    assert len(weights) == n and all(1 <= w <= 100 for w in weights)
    gaps = [rank_gap(a, b) for a, b in zip(weights, weights[1:])]
    assert min(gaps) == smallest_gap


@pytest.mark.parametrize("n", [3, 4])
def test_no_weights_keep_ranks_further_apart(n: int) -> None:
    """Every descending choice of n weights from 1..100, tried: none has a larger smallest gap."""
    best = min(rank_gap(a, b) for a, b in zip(weights_for(n), weights_for(n)[1:]))
    found = max(min(rank_gap(a, b) for a, b in zip(c, c[1:])) for c in itertools.combinations(range(100, 0, -1), n))
    assert found == best


@pytest.mark.parametrize("toleration, taint, expected", [
    pytest.param({"key": "k", "operator": "Exists"}, Taint("k", "v", "NoSchedule"), True, id="exists-any-effect"),
    pytest.param({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, Taint("k", "v", "NoExecute"), False,
                 id="other-effect"),
    pytest.param({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, Taint("k", "", ""), False,
                 id="one-effect-does-not-cover-any-effect"),
    pytest.param({"key": "k", "value": "v"}, Taint("k", "v", "NoSchedule"), True, id="equal-is-the-default-operator"),
    pytest.param({"key": "k", "operator": "Equal", "value": "w"}, Taint("k", "v", "NoSchedule"), False, id="wrong-value"),
    pytest.param({"operator": "Exists"}, Taint("k", "v", "NoExecute"), True, id="empty-key-exists-tolerates-all"),
    pytest.param({"operator": "Equal"}, Taint("k", "v", "NoExecute"), False, id="empty-key-equal-tolerates-nothing"),
])
def test_tolerates_follows_kubernetes(toleration: dict[str, str], taint: Taint, expected: bool) -> None:
    from webhook.core.admission.patch import tolerates

    assert tolerates(toleration, taint) is expected


def test_scalable_pool_gets_an_any_effect_toleration_despite_a_one_effect_one() -> None:
    pod = make_pod({C: "scalable"}, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    snapshot = snapshot_of([])
    patched = check_patch(pod, plan(pod, snapshot, CATALOG), snapshot, CATALOG)
    assert patched["spec"]["tolerations"][1:] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
