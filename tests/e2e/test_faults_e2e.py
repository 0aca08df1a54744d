"""The load-and-fault suite's short form (bench/faults/faults.py) on the session's control plane: two gpu-class
replicas behind haproxy, Pods from controllers in three namespaces, every fault once. The long form,
two runs back to back at the load the control plane here sustains: `python -m bench faults`."""

from __future__ import annotations

import local_cluster
from bench.faults import faults


def test_under_load_and_faults_no_pod_is_unplaced_or_wrongly_refused(cluster: local_cluster.Cluster) -> None:
    result = faults.run_suite(cluster, faults.SHORT, log=lambda line: print(line, flush=True))
    print(faults.render([result], "the short form (tests/e2e/test_faults_e2e.py)"))

    assert faults.violations(result) == []
    assert [w.name for w in result.windows] == ["steady", *faults.SHORT.faults]
    # The books can count what goes wrong: with no replica serving, calls failed and the backstop
    # refused the Pods they left unplaced (and the controllers' retries then succeeded: violations()).
    down = next(w for w in result.windows if w.name == "kill-all-replicas").tallies[faults.GPU_CLASS]
    assert down.failed_calls > 0
    assert down.refused_after_failed_call > 0
