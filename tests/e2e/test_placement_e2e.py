"""A small run of the placement benchmark (bench/placement.py): Pods land where their class promised."""

from __future__ import annotations

import pytest

import local_cluster
from bench import placement

PODS = 16  # enough to fill the H100 nodes (24 GPUs) and fall back to the next type


@pytest.fixture(scope="module")
def results(cluster: local_cluster.Cluster) -> dict[str, placement.StreamResult]:
    streams = {"performance": placement.make_streams(seed=3, pods_per_class=PODS)["performance"]}
    run = placement.run_all(cluster, placement.make_fleet(), streams, pending_seconds=2.0)
    return {r.path: r for r in run}


@pytest.mark.parametrize("path", ["profiles", "extender"])
def test_strict_paths_place_every_pod_on_the_promised_type(results: dict[str, placement.StreamResult],
                                                            path: str) -> None:
    v = results[path].verdicts
    assert v.placed >= PODS // 2, v
    assert (v.right, v.wrongly_pending) == (v.placed, 0), v.wrong


def test_stock_scheduler_path_strands_nothing(results: dict[str, placement.StreamResult]) -> None:
    v = results["default"].verdicts
    assert v.placed >= PODS // 2, v
    assert v.wrongly_pending == 0, v.wrong
