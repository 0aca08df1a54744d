"""How `python -m bench apiserver` judges gpu-class's added latency against a no-op's."""

from __future__ import annotations

import pytest

from bench.apiserver.apiserver import YARDSTICK, Scenario, _verdict, fleet_pods


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
