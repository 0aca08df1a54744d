"""The most-patched older minor, on every change: the e2e tier's strict-path tests on a control plane and a
gpu-class-scheduler built at Kubernetes 1.33 (docs/operators/compatibility.md).

1.33's patches to the plugin are the largest (deploy/scheduler/releases/1.33.series), and a change to the plugin or
to what the webhook writes reaches 1.33 only through them: compiling them (test_kubernetes_releases.py) says
nothing of how that scheduler places Pods. The tests run in a pytest of their own, since the minor is chosen per
process (GPUCLASS_KUBERNETES_MINOR) and this session's cluster is the newest minor's; the first run builds the
minor into the cache (about 6 minutes on 2 cores), later runs find it there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import local_cluster

MINOR = "1.33"
# Every Pod where its class promised on each strict path, the index through node changes, one type per group,
# and waiting for the best type
STRICT_PATH_TESTS = ("tests/e2e/test_placement_e2e.py", "tests/e2e/test_scheduler_e2e.py",
                     "tests/e2e/test_groups_e2e.py", "tests/e2e/test_wait_e2e.py")
BUILD_SECONDS = 1800
RUN_SECONDS = 1200
OUTPUT_TAIL = 6000


def minor_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLASS_E2E_")}  # a cluster of its own
    return env | {local_cluster.MINOR_ENV: MINOR, "PYTHONUNBUFFERED": "1"}


def outcomes(report: Path) -> dict[str, int]:
    """Tests by outcome from pytest's JUnit report: a run that passes having run nothing is no pass."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, "0"))
    return counts


def test_the_strict_path_holds_on_kubernetes_1_33(tmp_path: Path) -> None:
    assert MINOR in local_cluster.older_minors()
    built = subprocess.run([str(local_cluster.REPO / "tests" / "e2e" / "local-cluster"), "build"], env=minor_env(),
                           cwd=local_cluster.REPO, capture_output=True, text=True, timeout=BUILD_SECONDS)
    assert built.returncode == 0, f"building Kubernetes {MINOR}:\n{(built.stdout + built.stderr)[-OUTPUT_TAIL:]}"
    report = tmp_path / "report.xml"
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                          f"--basetemp={tmp_path / 'run'}", *STRICT_PATH_TESTS],
                         env=minor_env(), cwd=local_cluster.REPO, capture_output=True, text=True, timeout=RUN_SECONDS)
    output = (ran.stdout + ran.stderr)[-OUTPUT_TAIL:]
    assert ran.returncode == 0, f"the strict path's e2e tests on Kubernetes {MINOR}:\n{output}"
    counts = outcomes(report)
    assert counts["tests"] > 0 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, (counts, output)
    # the control plane and gpu-class-scheduler the tests ran on were the minor's, as each logged at its start
    logs = list((tmp_path / "run").glob("cluster*/logs"))
    assert logs, f"no cluster's logs under {tmp_path / 'run'}"
    for log in logs:
        assert re.search(rf"Version: v{re.escape(MINOR)}\.\d+$", (log / "kube-apiserver.log").read_text(), re.M), log
        assert re.search(rf'"Starting Kubernetes Scheduler" version="v{re.escape(MINOR)}\.\d+"',
                         (log / "gpu-class-scheduler.log").read_text()), log
