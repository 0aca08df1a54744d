"""What a Pod asks, read once (webhook/core/admission/ask.py): the values read, the messages refusing what the Pod
wrote, and the parts kept as Malformed until the decision reaches them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import builders
from builders import make_namespace, make_node, make_pod
from webhook.core.admission.annotations import GroupAsk
from webhook.core.admission.ask import Gpus, PodAsk, read_pod
from webhook.core.admission.shape import Malformed, MalformedPod, PodClaim
from webhook.core.catalog.loading import load_catalog_text
from webhook.core.view.inventory import build_snapshot
from webhook.core.admission.planner import plan
from webhook.core.catalog.quantity import quantity_mib

AMD = "  - {name: MI300X, score: 1300, memoryGiB: 192, products: [AMD_Instinct_MI300X_OAM], resource: amd.com/gpu}\n"
# the test catalog, with a second GPU resource: its resources are nvidia.com/gpu, amd.com/gpu in that order
CATALOG = load_catalog_text(builders.TEST_CATALOG_YAML.replace("  - {name: T4,", AMD + "  - {name: T4,"), "ask.yaml")
GPU, AMD_GPU = "nvidia.com/gpu", "amd.com/gpu"


def container(name: str, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources = {**({"limits": limits} if limits is not None else {}),
                 **({"requests": requests} if requests is not None else {})}
    return {"name": name, **({"resources": resources} if resources else {})}


def read(pod: dict[str, Any]) -> PodAsk:
    ask = read_pod(pod, CATALOG)
    assert ask is not None
    return ask


@pytest.mark.parametrize("pod, message", [
    pytest.param([], "the object is not a JSON object", id="not-an-object"),
    pytest.param({"metadata": [], "spec": {}}, "metadata must be an object", id="metadata-a-list"),
    pytest.param(make_pod({"gpu-class.io/count": 2}), "metadata.annotations['gpu-class.io/count'] must be a string",  # type: ignore[dict-item]
                 id="annotation-not-a-string"),
    pytest.param(make_pod(containers=[]), "spec.containers is empty", id="no-containers"),
    pytest.param(make_pod(containers=[{"image": "x"}]), "spec.containers[0] must be an object with a name",
                 id="container-without-a-name"),
    pytest.param(make_pod(tolerations=["x"]), "spec.tolerations[0] must be an object", id="toleration-a-string"),
    pytest.param({**make_pod(), "metadata": {"labels": {"team": 7}}}, "metadata.labels['team'] must be a string",
                 id="label-not-a-string"),
    pytest.param(make_pod(extra_spec={"schedulerName": 3}), "spec.schedulerName must be a string",
                 id="scheduler-name-a-number"),
])
def test_a_pod_that_cannot_be_read_or_patched_is_malformed(pod: Any, message: str) -> None:
    with pytest.raises(MalformedPod) as raised:
        read_pod(pod, CATALOG)
    assert str(raised.value) == message


def test_a_mirror_pod_is_not_read_further() -> None:
    # the kubelet's copy of a static Pod: nothing to place, whatever its spec holds
    assert read_pod(make_pod({"kubernetes.io/config.mirror": "x"}, containers=[]), CATALOG) is None


@dataclass(frozen=True)
class Part:
    """One field of the ask, as read from a Pod."""

    pod: dict[str, Any]
    field: str
    expected: Any


@pytest.mark.parametrize("case", [
    pytest.param(Part(make_pod(), "class_name", None), id="no-class"),
    pytest.param(Part(make_pod({"gpu-class.io/class": "high"}), "class_name", "high"), id="class"),
    pytest.param(Part(make_pod(containers=[container("a", {AMD_GPU: "1", "cpu": "2"}), container("b", None, {GPU: 2})]),
                      "requested", (GPU, AMD_GPU)), id="requested-in-catalog-order-not-cpu"),
    pytest.param(Part(make_pod(containers=[container("a", {GPU: None})]), "requested", ()),
                 id="a-null-limit-requests-nothing"),
    pytest.param(Part(make_pod(containers=[container("a")], extra_spec={"initContainers": [container("i", {GPU: "1"})]}),
                      "requested", (GPU,)), id="init-containers-request-too"),
    pytest.param(Part(make_pod(extra_spec={"initContainers": "x"}), "requested",
                      Malformed("spec.initContainers must be a list")), id="init-containers-not-a-list"),
    pytest.param(Part(make_pod(containers=[{"name": "a", "resources": {"limits": []}}]), "requested",
                      Malformed("spec.containers[0].resources.limits must be an object")), id="limits-a-list"),
    pytest.param(Part(make_pod({"gpu-class.io/count": "4"}), "unlimited", Gpus(4, True)), id="count-annotation"),
    pytest.param(Part(make_pod(), "unlimited", Gpus(1, True)), id="one-gpu-by-default"),
    pytest.param(Part(make_pod({"gpu-class.io/count": "0"}), "unlimited",
                      "gpu-class: gpu-class.io/count must be a positive whole number of GPUs, at most 1024 (like \"1\" "
                      "or \"4\"), not '0'"), id="count-zero-refused"),
    pytest.param(Part(make_pod({"gpu-class.io/container": "b"}, containers=[container("a"), container("b")]),
                      "container", 1), id="named-container"),
    pytest.param(Part(make_pod({"gpu-class.io/container": "c"}, containers=[container("a"), container("b")]),
                      "container", "gpu-class: gpu-class.io/container names container 'c', which this Pod does not "
                                   "have; containers: a, b"), id="named-container-missing"),
    pytest.param(Part(make_pod({"gpu-class.io/exclude-types": " H100, ,A100"}), "excluded", frozenset({"H100", "A100"})),
                 id="excluded-types"),
    pytest.param(Part(make_pod({"gpu-class.io/exclude-types": "H100,B200"}), "excluded",
                      "gpu-class: gpu-class.io/exclude-types names unknown types B200; types: H200, H100, A100, A10, "
                      "L40S, L4, H20, MI300X, T4, V100"), id="excluded-unknown-type"),
    pytest.param(Part(make_pod({"gpu-class.io/min-memory": "40Gi"}), "min_memory_mib", 40960.0), id="min-memory"),
    pytest.param(Part(make_pod({"gpu-class.io/group": "train", "gpu-class.io/group-size": "4"}), "group",
                      GroupAsk("train", 4, "gpu-class.io/group-size")), id="group"),
    pytest.param(Part(make_pod({"gpu-class.io/group": "-x-"}), "group_name", "-x-"), id="refused-group-keeps-its-name"),
    pytest.param(Part(make_pod(extra_spec={"schedulerName": "gpu-class-scheduler"}), "scheduler_name",
                      "gpu-class-scheduler"), id="scheduler-name"),
    pytest.param(Part({**make_pod(), "metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}}}, "kueue_started", True),
                 id="kueue-podset-label"),
    pytest.param(Part(make_pod(), "kueue_started", False), id="no-podset-label"),
    pytest.param(Part(make_pod(extra_spec={"resourceClaims": [{"name": "gpu"}, {}]}), "claims",
                      (PodClaim("gpu", None, None), PodClaim("?", None, None))), id="own-claims"),
    pytest.param(Part(make_pod(extra_spec={"resourceClaims": [
        {"name": "channel", "resourceClaimTemplateName": "cd-channel"}, {"name": "nic", "resourceClaimName": "rdma"}]}),
        "claims", (PodClaim("channel", None, "cd-channel"), PodClaim("nic", "rdma", None))), id="own-claims-named"),
    pytest.param(Part(make_pod(extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": 3}]}), "claims",
                      Malformed("spec.resourceClaims[0].resourceClaimName must be a string")), id="claim-name-a-number"),
    pytest.param(Part(make_pod(extra_spec={"resourceClaims": ["gpu"]}), "claims",
                      Malformed("spec.resourceClaims[0] must be an object")), id="claim-a-string"),
    pytest.param(Part(make_pod(extra_spec={"nodeSelector": "gpu"}), "node_selector",
                      Malformed("spec.nodeSelector must be an object")), id="node-selector-a-string"),
    pytest.param(Part(make_pod({"gpu-class.io/min-mem": "1", "gpu-class.io/class": "high", "gpu-class.io/Count": "1"}),
                      "unknown_annotations", ("gpu-class.io/Count", "gpu-class.io/min-mem")), id="unknown-annotations"),
    pytest.param(Part(make_pod({"gpu-class.io/upgrade": "true", "gpu-class.io/class": "high"}), "unknown_annotations",
                      ()), id="upgrade-is-known-the-upgrader-reads-it"),
])
def test_read_pod(case: Part) -> None:
    assert getattr(read(case.pod), case.field) == case.expected


@pytest.mark.parametrize("containers, annotations, resource, expected", [
    pytest.param([container("a"), container("b", {GPU: "2"})], {}, GPU, ("b", Gpus(2, False)),
                 id="the-container-that-limits-the-resource"),
    pytest.param([container("a"), container("b", {GPU: "2"})], {}, AMD_GPU, ("a", Gpus(1, True)),
                 id="first-container-when-none-limits-it"),
    pytest.param([container("a", None, {GPU: 2})], {}, GPU, ("a", Gpus(2, True)), id="a-request-is-the-count"),
    pytest.param([container("a", {GPU: "2"}, {GPU: "1"})], {}, GPU,
                 ("a", "gpu-class: container a requests 1 but limits 2 of nvidia.com/gpu; they must be equal"),
                 id="limit-and-request-differ"),
    pytest.param([container("a", {GPU: "2"})], {"gpu-class.io/count": "4"}, GPU,
                 ("a", "gpu-class: gpu-class.io/count says 4 but container a already has 2 nvidia.com/gpu; remove one "
                       "of them or make them equal"), id="count-disagrees-with-limit"),
    pytest.param([container("a", {GPU: "2"})], {"gpu-class.io/count": "4"}, AMD_GPU, ("a", Gpus(4, True)),
                 id="another-resource-takes-the-annotation"),
    pytest.param([container("a"), container("b", {GPU: "half"})], {"gpu-class.io/container": "b"}, GPU,
                 ("b", "gpu-class: container b has nvidia.com/gpu limit 'half'; it must be a positive whole number"),
                 id="named-container-with-a-bad-limit"),
])
def test_the_container_and_its_gpus(containers: list[dict[str, Any]], annotations: dict[str, str], resource: str,
                                    expected: tuple[str, Gpus | str]) -> None:
    ask = read(make_pod(annotations, containers=containers))
    chosen = ask.container_for(resource)
    assert not isinstance(chosen, str)
    assert (chosen.name, ask.gpus(chosen, resource)) == expected


@pytest.mark.parametrize("containers, init, count, expected", [
    pytest.param([container("a"), container("b", {GPU: "2"})], [], 3, 5, id="app-containers-add-up"),
    pytest.param([container("a")], [container("i", {GPU: "4"}), container("j", None, {GPU: "6"})], 1, 6,
                 id="an-init-container-runs-alone"),
    pytest.param([container("a", {AMD_GPU: "8"})], [], 2, 2, id="other-resources-do-not-count"),
])
def test_gpus_needed_on_one_node(containers: list[dict[str, Any]], init: list[dict[str, Any]], count: int,
                                 expected: int) -> None:
    ask = read(make_pod(containers=containers, extra_spec={"initContainers": init}))
    assert ask.gpus_needed(GPU, ask.containers[0], count) == expected


SNAPSHOT = build_snapshot(CATALOG, [make_node("h100", "NVIDIA-H100-80GB-HBM3"), make_namespace("ml"),
                                    make_namespace("plain", inject=False)])


@pytest.mark.parametrize("pod, namespace, outcome, message", [
    pytest.param(make_pod(extra_spec={"initContainers": "x"}), "plain", "out-of-scope", "namespace plain is not opted in",
                 id="a-namespace-not-opted-in-is-left-alone"),
    pytest.param(make_pod({"gpu-class.io/class": "nope"}, extra_spec={"initContainers": "x"}), "ml", "refused",
                 "gpu-class: unknown class 'nope' in gpu-class.io/class; write one of: high, standard, economy, big, "
                 "balanced, packed, scalable, a10, l4, h20", id="an-unknown-class-before-the-shape-of-resources"),
    pytest.param(make_pod(extra_spec={"initContainers": "x"}), "ml", "refused",
                 "gpu-class: malformed Pod: spec.initContainers must be a list",
                 id="no-class-reads-the-resources-first"),
    pytest.param(make_pod({"gpu-class.io/class": "high"}, extra_spec={"resourceClaims": "x", "initContainers": "x"}),
                 "ml", "refused", "gpu-class: malformed Pod: spec.resourceClaims must be a list",
                 id="claims-before-resources-with-a-class"),
    pytest.param(make_pod({"gpu-class.io/class": "high"}, extra_spec={"nodeSelector": "x"}), "ml", "patched", "",
                 id="a-node-selector-only-kueue-pods-are-judged-by"),
])
def test_a_malformed_part_is_refused_when_the_decision_reaches_it(pod: dict[str, Any], namespace: str, outcome: str,
                                                                  message: str) -> None:
    decision = plan(pod, SNAPSHOT, CATALOG, namespace=namespace)
    assert (decision.outcome, decision.message) == (outcome, message)


# --- absurd values: every annotation the webhook reads refuses them, saying what to write ----------------------


HUGE = "9" * 5000  # more digits than int() reads
ABSURD = ("inf", "nan", "1e400", "1e999", "-1", HUGE)


def absurd(key: str, *values: str, expect: str) -> list[Any]:
    return [pytest.param(key, v, expect, id=f"{key.removeprefix('gpu-class.io/')}-{v if len(v) < 12 else 'huge'}")
            for v in values]


@pytest.mark.parametrize("key, value, expect", [
    *absurd("gpu-class.io/count", *ABSURD, "1025", "999999", expect='a positive whole number of GPUs, at most 1024 (like "1"'),
    *absurd("gpu-class.io/min-memory", *ABSURD, "-1Gi", "0", "65Ti", "99999999999999999999", "1" + "0" * 40,
            expect='a positive Kubernetes quantity of memory per GPU, at most 64Ti, like "40Gi"'),
    *absurd("gpu-class.io/min-compute-capability", *ABSURD, "-9.0", "9.0e400", "1000.0",
            expect='a CUDA compute capability major.minor, like "8.9"'),
    *absurd("gpu-class.io/max-wait", *ABSURD, "1" * 5000 + "s", "99999999h", "25h", "0s",
            expect='a duration of 1s to 24h, like "90s"'),
    *absurd("gpu-class.io/group-size", *ABSURD, "65537", "999999", expect='a positive whole number of Pods, at most 65536'),
    *absurd("gpu-class.io/exclude-types", *ABSURD, expect="names unknown types"),
    *absurd("gpu-class.io/requires", *ABSURD, expect='precisions, comma-separated, of fp4'),
    *absurd("gpu-class.io/container", *ABSURD, expect="which this Pod does not have; containers: main"),
    *absurd("gpu-class.io/upgrade", *ABSURD, "yes", "1", " true", expect='must be "true" or "false"'),
    *absurd("gpu-class.io/class", *ABSURD, expect="write one of: high, standard"),
])
def test_an_absurd_value_of_any_annotation_is_refused_saying_what_to_write(key: str, value: str, expect: str) -> None:
    annotations = {"gpu-class.io/class": "high", "gpu-class.io/group": "train", key: value}
    decision = plan(make_pod(annotations), SNAPSHOT, CATALOG, namespace="ml")
    assert decision.outcome == "refused", decision.message
    assert key in decision.message and expect in decision.message, decision.message
    assert "internal error" not in decision.message and len(decision.message) < 1000


@pytest.mark.parametrize("key, value, field, expected", [
    pytest.param("gpu-class.io/count", "1024", "unlimited", Gpus(1024, True), id="count-at-most"),
    pytest.param("gpu-class.io/min-memory", "64Ti", "min_memory_mib", 64.0 * 2**20, id="min-memory-at-most"),
    pytest.param("gpu-class.io/min-memory", "1e9", "min_memory_mib", 1e9 / 2**20, id="min-memory-an-exponent"),
    pytest.param("gpu-class.io/group-size", "65536", "group", GroupAsk("train", 65536, "gpu-class.io/group-size"),
                 id="group-size-at-most"),
    pytest.param("gpu-class.io/max-wait", "24h", "max_wait", "24h", id="max-wait-at-most"),
    pytest.param("gpu-class.io/upgrade", "True", "upgrade", True, id="upgrade-any-case"),
    pytest.param("gpu-class.io/upgrade", "false", "upgrade", False, id="upgrade-off"),
])
def test_the_largest_sensible_values_are_read(key: str, value: str, field: str, expected: Any) -> None:
    assert getattr(read(make_pod({"gpu-class.io/group": "train", key: value})), field) == expected


@pytest.mark.parametrize("value", [
    pytest.param("1e99999999", id="an-exponent-never-raised"),
    pytest.param("1" * 19 + "Gi", id="more-digits-than-any-memory"),
    pytest.param("1e400", id="beyond-a-float"),
    pytest.param("inf", id="inf"),
])
def test_a_quantity_beyond_reason_is_no_quantity(value: str) -> None:
    assert quantity_mib(value) is None
