"""The e2e tests' own judge of where a Pod can land (landing.py), against Kubernetes' rules for each part of a
Pod's node constraints. No cluster: it is pure; the e2e tests also check it against the scheduler's binds."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pytest

from landing import can_land, escapes, node_type

T4 = "Tesla-T4"
H100 = "NVIDIA-H100-80GB-HBM3"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def make_node(name: str, labels: Mapping[str, str], *, gpus: int = 4, taints: Sequence[Mapping[str, str]] = (),
              unschedulable: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": {"taints": list(taints), "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "8", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}}}


def make_spec(*, selector: Mapping[str, str] | None = None, terms: list[dict[str, Any]] | None = None,
              tolerations: list[dict[str, str]] | None = None, gpus: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return spec


def product_in(*values: str) -> dict[str, Any]:
    return {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(values)}


T4_NODE = make_node("t4", {"nvidia.com/gpu.product": T4, "zone": "a", "rank": "3"})
TAINTED_H100 = make_node("h100", {"nvidia.com/gpu.product": H100}, taints=[GPU_TAINT])


@pytest.mark.parametrize(("spec", "node", "lands"), [
    pytest.param(make_spec(), T4_NODE, True, id="no-constraint"),
    pytest.param(make_spec(selector={"zone": "a"}), T4_NODE, True, id="selector-matches"),
    pytest.param(make_spec(selector={"zone": "b"}), T4_NODE, False, id="selector-differs"),
    pytest.param(make_spec(terms=[{"matchExpressions": [product_in(H100)]}]), T4_NODE, False, id="in-misses"),
    pytest.param(make_spec(terms=[{"matchExpressions": [product_in(H100)]}, {"matchExpressions": [product_in(T4)]}]),
                 T4_NODE, True, id="terms-are-ored"),
    pytest.param(make_spec(terms=[{"matchExpressions": [product_in(H100, T4), product_in(H100)]}]), T4_NODE, False,
                 id="expressions-are-anded"),
    pytest.param(make_spec(terms=[{}]), T4_NODE, False, id="empty-term-matches-nothing"),
    pytest.param(make_spec(terms=[{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]),
                 T4_NODE, False, id="not-in"),
    pytest.param(make_spec(terms=[{"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["a"]}]}]),
                 T4_NODE, True, id="not-in-absent-label"),
    pytest.param(make_spec(terms=[{"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}]), T4_NODE,
                 False, id="does-not-exist"),
    pytest.param(make_spec(terms=[{"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["2"]}]}]),
                 T4_NODE, True, id="gt"),
    pytest.param(make_spec(terms=[{"matchExpressions": [{"key": "rank", "operator": "Lt", "values": ["3"]}]}]),
                 T4_NODE, False, id="lt-strict"),
    pytest.param(make_spec(terms=[{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["t4"]}]}]),
                 T4_NODE, True, id="match-fields-name"),
    pytest.param(make_spec(), TAINTED_H100, False, id="untolerated-taint"),
    pytest.param(make_spec(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]), TAINTED_H100, True,
                 id="tolerated-by-key"),
    pytest.param(make_spec(tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}]),
                 TAINTED_H100, False, id="toleration-value-differs"),
    pytest.param(make_spec(tolerations=[{"operator": "Exists", "effect": "NoExecute"}]), TAINTED_H100, False,
                 id="toleration-of-another-effect"),
    pytest.param(make_spec(), make_node("cordoned", {}, unschedulable=True), False, id="cordoned"),
    pytest.param(make_spec(), make_node("cpu", {}, gpus=0), False, id="no-gpus"),
    pytest.param(make_spec(gpus=8), T4_NODE, False, id="more-gpus-than-allocatable"),
])
def test_can_land_follows_kubernetes_rules(spec: dict[str, Any], node: dict[str, Any], lands: bool) -> None:
    assert can_land(spec, node) is lands


def test_a_node_of_a_product_the_table_lacks_is_never_a_type_of_a_class() -> None:
    odd = make_node("odd", {"nvidia.com/gpu.product": "NVIDIA-Future-GPU"})
    assert node_type(odd) == "unknown:NVIDIA-Future-GPU"
    assert node_type(make_node("cpu", {}, gpus=0)) is None
    pod = {"spec": make_spec(tolerations=[{"operator": "Exists"}])}
    assert escapes(pod, [T4_NODE, TAINTED_H100, odd], {"T4"}) == {"h100": "H100", "odd": "unknown:NVIDIA-Future-GPU"}
