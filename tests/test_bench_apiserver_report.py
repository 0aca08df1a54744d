"""How `python -m bench apiserver` judges gpu-class's added latency against a no-op's, and gives a no-op gpu-class's
admission policies."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.apiserver.apiserver import (COPIES_LABEL, COPY_PROBES, INJECT_LABEL, POLICY_KINDS, YARDSTICK, Scenario,
                                       _verdict, copy_name, fleet_pods, gpu_class_policies, policy_copies)


def scenario(none: float, noop: float, gpu_class: float) -> Scenario:
    # one sample an arm: every percentile is that sample
    return Scenario("s", {"none": [none], "no-op": [noop], "no-op + patch": [noop], "gpu-class": [gpu_class]}, {}, 0)


@pytest.mark.parametrize("none, noop, gpu_class, expected", [
    pytest.param(10.0, 12.0, 12.5, 1.25, id="within"),
    pytest.param(10.0, 12.0, 16.0, 3.0, id="three-times"),
    pytest.param(10.0, 10.0, 12.0, None, id="no-op-added-nothing"),
    pytest.param(10.0, 9.0, 12.0, None, id="no-op-faster-than-none"),
])
def test_ratio_is_none_where_the_no_op_added_nothing(none: float, noop: float, gpu_class: float,
                                                     expected: float | None) -> None:
    assert scenario(none, noop, gpu_class).ratio(0.5) == expected
    assert scenario(none, noop, gpu_class).ratio(0.5, YARDSTICK) == expected


@pytest.mark.parametrize("p50, p99, expected", [
    pytest.param(1.1, 1.3, "PASS", id="at-the-targets"),
    pytest.param(1.11, 1.0, "FAIL", id="p50-over"),
    pytest.param(1.0, 1.31, "FAIL", id="p99-over"),
    pytest.param(None, 1.0, "no verdict (a no-op added nothing measurable)", id="no-ratio"),
])
def test_verdict(p50: float | None, p99: float | None, expected: str) -> None:
    assert _verdict(p50, p99) == expected


@pytest.mark.parametrize("nodes, per_node, gpus", [
    pytest.param(5, 1, [1, 1, 2, 4, 8], id="one-a-node-of-every-size"),
    pytest.param(3, 4, [1] * 12, id="four-a-node-of-one-gpu"),
])
def test_fleet_pods_are_bound_per_node_with_names_of_their_own(nodes: int, per_node: int, gpus: list[int]) -> None:
    names = [f"node-{n}" for n in range(nodes)]
    pods = fleet_pods(names, per_node)
    assert [p["spec"]["nodeName"] for p in pods] == [n for n in names for _ in range(per_node)]
    assert [int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) for p in pods] == gpus
    assert len({p["metadata"]["name"] for p in pods}) == nodes * per_node


BACKSTOP = Path(__file__).resolve().parents[1] / "deploy" / "components" / "backstop"


def backstop_objects() -> list[dict[str, Any]]:
    return [o for f in ("policy.yaml", "boundary.yaml") for o in yaml.safe_load_all((BACKSTOP / f).read_text()) if o]


def test_the_policies_arm_is_judged_by_copies_of_every_policy_on_gpu_class_pod_creates() -> None:
    install = backstop_objects()
    originals = copy.deepcopy(install)
    policies = gpu_class_policies(install)
    # the placement backstop and the boundary judge Pod creates; the claims' boundary judges claims, not Pods
    assert set(policies) == {"gpu-class.io-placement", "gpu-class.io-boundary"}
    # each has a Pod that shows its copy in effect
    assert set(policies) == set(COPY_PROBES)
    copies = policy_copies(install)
    assert install == originals
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in copies}
    assert set(by_name) == {(kind, copy_name(p)) for p in policies for kind in POLICY_KINDS}
    for original in (o for o in originals if o["kind"] in POLICY_KINDS and o["metadata"]["name"] in policies):
        made = by_name[(original["kind"], copy_name(original["metadata"]["name"]))]
        if original["kind"] == POLICY_KINDS[1]:
            assert made["spec"] == {**original["spec"], "policyName": copy_name(original["spec"]["policyName"])}
            continue
        # the same CEL, parameters and failure policy; only the namespaces it selects differ
        assert {k: v for k, v in made["spec"].items() if k != "matchConstraints"} == \
               {k: v for k, v in original["spec"].items() if k != "matchConstraints"}
        selector = made["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"]
        assert {"key": COPIES_LABEL, "operator": "In", "values": ["copied"]} in selector
        assert INJECT_LABEL not in json.dumps(made)


def test_an_install_without_gpu_class_policies_has_nothing_to_copy() -> None:
    claims_only = [o for o in backstop_objects() if "claims" in o["metadata"]["name"]]
    assert claims_only
    with pytest.raises(RuntimeError, match="no admission policy judging Pod creates"):
        policy_copies(claims_only)
