"""NodeLabelIndex, gpu-class-scheduler's PreFilter plugin (deploy/scheduler/plugin): its Go tests.

The index and the queueing hint are tested in Go, table-driven, beside the code
(nodelabelindex/*_test.go); this runs them with the Go toolchain that builds the binary, so the
suite fails when they do. How the real scheduler uses the plugin is tests/e2e/test_scheduler_e2e.py.
"""

from __future__ import annotations

import subprocess

import local_cluster


def test_the_plugins_go_tests_pass() -> None:
    go = local_cluster.go_toolchain("NodeLabelIndex's tests are Go tests in deploy/scheduler/plugin")
    done = subprocess.run([go, "test", "-count=1", "-trimpath", "./..."], cwd=local_cluster.SCHEDULER_MODULE_DIR,
                          env=local_cluster.go_env(),
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ok  \tgpu-class.io/scheduler/nodelabelindex" in done.stdout, done.stdout
