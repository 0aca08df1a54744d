"""`python -m bench apiserver` still runs: tiny sizes, on a control plane of its own.

No latency targets here (a CI machine's speed says nothing); only that every arm's creates went
through in every scenario, that every webhook was called by the API server, and that the report
has the shape docs/contributors/benchmarks.md points to.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ARMS = ("none", "no-op", "no-op + patch", "no-op + 1-op patch", "no-op + patch + policies", "gpu-class")
CREATES = 6


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("bench-apiserver")
    run = subprocess.run(
        [sys.executable, "-m", "bench", "apiserver", "--creates", str(CREATES), "--bursts", "1", "--binds", "40",
         "--fleet", "20", "--pods-per-node", "2", "--churn", "20", "--node-changes", "2", "--output", str(tmp / "RESULTS.md"), "--workdir", str(tmp / "work")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, f"bench apiserver failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return (tmp / "RESULTS.md").read_text()


def scenario_rows(report: str) -> dict[str, dict[str, list[str]]]:
    """Scenario title -> arm -> the cells of its row."""
    found: dict[str, dict[str, list[str]]] = {}
    title = ""
    for line in report.splitlines():
        if line.startswith("### "):
            title = line[4:]
            found[title] = {}
        elif title and line.startswith("| ") and not line.startswith("| arm") and "---" not in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] in ARMS:
                found[title][cells[0]] = cells
    return found


def test_every_scenario_measured_every_arm(report: str) -> None:
    rows = scenario_rows(report)
    assert [t.split()[0] for t in rows] == ["Steady", "While", "20"], list(rows)
    for title, arms in rows.items():
        assert list(arms) == list(ARMS), title
        counts = {int(cells[1]) for cells in arms.values()}
        assert len(counts) == 1 and counts.pop() >= (CREATES if "While" not in title else 1), (title, arms)
        for arm, cells in arms.items():
            assert float(cells[2]) > 0, (title, arm, cells)
            if arm == "none":
                assert cells[4:] == ["-", "-", "-"], (title, cells)
            else:  # the API server timed calls to every webhook: each arm's configuration was in effect
                assert float(cells[6]) > 0, (title, arm, cells)
        # the no-op's creates under copies of gpu-class's policies, taken apart from the rest of gpu-class's cost
        # (the bench refuses to measure before each copy refused a Pod of its own)
        assert re.search(r"gpu-class's admission policies \(no-op \+ patch \+ policies less no-op \+ patch\) [+-][\d.]+ ms; "
                         r"gpu-class's own \(less no-op \+ patch \+ policies\) [+-][\d.]+ ms", report), title


def test_the_targets_are_judged_per_scenario(report: str) -> None:
    # a ratio is absent ("-", no verdict) where a no-op's percentile came out at or below no webhook's,
    # which tiny samples on a shared machine can give
    ratio, verdict = r"(?:-?[\w.]+x|-)", r"(PASS|FAIL|no verdict \(a no-op added nothing measurable\))"
    verdicts = re.findall(rf"^\| (.+?) \| {ratio} \| {ratio} \| {verdict} \| {ratio} \| {ratio} \|$", report, re.M)
    assert [v[0].split()[0] for v in verdicts] == ["steady", "while", "20"], report[-2000:]
    assert "Node change to the first admission that sees it, 2 changes" in report


def test_the_report_names_the_code_it_measured(report: str) -> None:
    assert re.search(r"^(Commit|Uncommitted changes on top of) [0-9a-f]{7,}, \d{4}-\d\d-\d\d \d\d:\d\d UTC\. "
                     r"Command: `python -m bench apiserver ", report, re.M), report[:500]


def test_the_fleet_scenario_restarts_the_replica_and_churns_pods_without_gpus(report: str) -> None:
    assert "### 20 GPU nodes and 40 GPU Pods in the inventory, 20 Pod events a second asked of Pods without GPUs" in report
    replica = re.search(r"every worker's view whole after ([\d.]+) s; memory ([\d,]+) MiB \(PSS of the master and its "
                        r"workers; ([\d,]+) MiB RSS summed\); (\d+) watch streams", report)
    assert replica, report[-3000:]
    first_sync, pss, rss, watches = (float(g.replace(",", "")) for g in replica.groups())
    assert first_sync > 0 and 0 < pss <= rss
    assert watches >= 2 * 3  # two workers, each watching at least Nodes, Namespaces and Pods
    churned = re.search(r"20 watch events a second asked, ([\d,]+) made \(([\d,]+) events", report)
    assert churned and int(churned.group(2).replace(",", "")) > 0, report[-3000:]
