"""A small run of the placement benchmark (bench/placement/placement.py): on the strict paths, every Pod lands where
its class promised, in a cluster of more than 100 nodes where the best type is a handful of them."""

from __future__ import annotations

import pytest

import local_cluster
from bench.placement import placement
from bench.placement.placement_model import KINDS, Workload, make_fleet, merge

NODES = 110  # more than 100: the default scheduler would score only a sample of them
# Each stream fills its best type (3 H100 nodes of 8 GPUs for `high`, 3 T4 nodes of 4 for `economy`,
# their CPU half taken) and spills over, with a Job, a Deployment and single Pods.
STREAMS = {
    "performance": [Workload("perf-job", "high", 4, 1000, "job", 4, indexed=True),
                    Workload("perf-dep", "high", 2, 1000, "deployment", 3),
                    Workload("perf-8", "high", 8, 1000), Workload("perf-8b", "high", 8, 1000),
                    Workload("perf-1", "high", 1, 500)],
    "cost": [Workload("cost-job", "economy", 2, 500, "job", 3),
             Workload("cost-dep", "economy", 1, 500, "deployment", 4), Workload("cost-4", "economy", 4, 500)],
    "balanced": [Workload("bala-job", "standard", 1, 500, "job", 3),
                 Workload("bala-dep", "standard", 1, 500, "deployment", 3), Workload("bala-2", "standard", 2, 500)],
    "binpack": [Workload("binp-job", "inference", 1, 500, "job", 3),
                Workload("binp-dep", "inference", 1, 500, "deployment", 3), Workload("binp-2", "inference", 2, 500)],
}
# gpu-class-scheduler (NodeLabelIndex), with the extender, and the profiles on the stock binary
STRICT: tuple[placement.Path_, ...] = ("profiles", "extender", "stock")


@pytest.fixture(scope="module")
def results(cluster: local_cluster.Cluster) -> dict[tuple[str, str], placement.StreamResult]:
    (run,) = placement.run_sizes(cluster, [NODES], STREAMS, paths=STRICT, pending_seconds=2.0, burst_pods=0)
    return {(r.strategy, r.path): r for r in run.streams}


def test_the_best_types_are_rare() -> None:
    products = [n.product for n in make_fleet(NODES)]
    assert (products.count("NVIDIA-H100-80GB-HBM3"), products.count("Tesla-T4"), len(products)) == (3, 3, NODES)


@pytest.mark.parametrize("path", STRICT)
@pytest.mark.parametrize("strategy", list(STREAMS))
def test_strict_paths_place_every_pod_where_promised(results: dict[tuple[str, str], placement.StreamResult],
                                                     strategy: str, path: str) -> None:
    verdicts = results[(strategy, path)].verdicts
    for kind in KINDS:
        # every kind of workload was placed, none of it Pending
        v = verdicts[kind]
        expected = sum(w.pods for w in STREAMS[strategy] if w.kind == kind)
        assert (v.placed, v.wrongly_pending, v.rightly_pending) == (expected, 0, 0), (kind, v.wrong)
    v = merge(list(verdicts.values()))
    assert v.right == v.placed, v.wrong
