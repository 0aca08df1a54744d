"""The cost of building the inventory: build_snapshot over Node objects, and the live path's first sync."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.core.catalog.loading import load_default_catalog
from webhook.core.view.inventory import build_snapshot

from bench.common.procs import REPO_ROOT
from bench.common.workload import make_fleet


@dataclass(frozen=True)
class SnapshotCost:
    nodes: int
    build_snapshot_seconds: float  # best of a few runs, Node objects already parsed
    product_groups: int


def time_build_snapshot(nodes: int, repeats: int = 3) -> SnapshotCost:
    catalog = load_default_catalog()
    objects = make_fleet(nodes)
    best = float("inf")
    groups = 0
    for _ in range(repeats):
        started = time.perf_counter()
        snapshot = build_snapshot(catalog, objects)
        best = min(best, time.perf_counter() - started)
        groups = sum(len(g) for g in snapshot.groups_by_type.values()) + len(snapshot.unknown_groups)
    return SnapshotCost(nodes, best, groups)


@dataclass(frozen=True)
class LiveSyncCost:
    nodes: int
    pods: int
    gpu_pods: int
    populate_seconds: float  # filling the fake API server (not the webhook's cost)
    result: dict[str, Any]  # what `python -m bench.http.live_sync sync` printed
    error: str | None = None


def measure_live_sync(workdir: Path, nodes: int, pods: int, gpu_pods: int, timeout_seconds: float) -> LiveSyncCost:
    """Fake API server in one process, LiveInventory in another (so its memory is its own)."""
    kubeconfig = workdir / "fake-kubeconfig.json"
    fake = subprocess.Popen(
        [sys.executable, "-m", "bench.http.live_sync", "fake", "--nodes", str(nodes), "--pods", str(pods),
         "--gpu-pods", str(gpu_pods), "--kubeconfig", str(kubeconfig)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO_ROOT,
    )
    try:
        assert fake.stdout is not None
        line = fake.stdout.readline()
        if not line:
            return LiveSyncCost(nodes, pods, gpu_pods, 0.0, {}, f"fake API server exited with {fake.wait()}")
        ready = json.loads(line)
        sync = subprocess.run(
            [sys.executable, "-m", "bench.http.live_sync", "sync", "--kubeconfig", str(kubeconfig),
             "--timeout-seconds", str(timeout_seconds)],
            capture_output=True, cwd=REPO_ROOT, timeout=timeout_seconds + 60,
        )
        if sync.returncode != 0:
            return LiveSyncCost(nodes, pods, gpu_pods, ready["populate_seconds"], {},
                                sync.stderr.decode(errors="replace")[-2000:])
        return LiveSyncCost(nodes, pods, gpu_pods, ready["populate_seconds"], json.loads(sync.stdout))
    finally:
        if fake.stdin is not None:
            fake.stdin.close()
        try:
            fake.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fake.kill()
            fake.wait()
