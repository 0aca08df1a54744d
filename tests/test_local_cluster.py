"""tests/e2e/local-cluster's `down`: it finds what a cluster started by the marker in its environment,
without pidfiles or the directory, and leaves other processes alone. Plain processes stand in for the
components here; tests/e2e/test_local_cluster_e2e.py makes a real `up` fail."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

import local_cluster

# a child that calls setsid has left the process group `down` signals through the pidfile
ESCAPES_ITS_GROUP = ["sh", "-c", "setsid sleep 300 & exec sleep 300"]
IGNORES_SIGTERM = ["sh", "-c", "trap '' TERM; sleep 300 & wait"]


def _remove_run(directory: Path) -> None:
    shutil.rmtree(directory / "run")


def _remove_all(directory: Path) -> None:
    shutil.rmtree(directory)


def _nothing(directory: Path) -> None:
    pass


def _wait_marked(directory: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = local_cluster.marked_processes(directory)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    pytest.fail(f"expected {count} processes marked with {directory}, found {local_cluster.marked_processes(directory)}")


@pytest.mark.parametrize("argv, processes, before_down", [
    pytest.param(["sleep", "300"], 1, _nothing, id="by-pidfile"),
    pytest.param(["sleep", "300"], 1, _remove_run, id="pidfiles-gone"),
    pytest.param(["sleep", "300"], 1, _remove_all, id="directory-gone"),
    pytest.param(ESCAPES_ITS_GROUP, 2, _nothing, id="child-left-the-group"),
    pytest.param(ESCAPES_ITS_GROUP, 2, _remove_all, id="child-left-the-group-directory-gone"),
    pytest.param(IGNORES_SIGTERM, 2, _remove_run, id="ignores-sigterm"),
])
def test_down_stops_every_process_the_cluster_started(tmp_path: Path, argv: list[str], processes: int,
                                                      before_down: Callable[[Path], None]) -> None:
    directory = tmp_path / "cluster"
    cluster = local_cluster.Cluster(directory)
    cluster.start("etcd", argv)
    cluster.start("gpuclass-extra", ["sleep", "300"])
    started = _wait_marked(directory, processes + 1)
    before_down(directory)

    local_cluster.down(directory, grace_seconds=0.5)

    assert local_cluster.marked_processes(directory) == []
    assert not any(local_cluster._alive(pid) for pid in started)


def test_a_reused_cluster_runs_what_it_is_asked_to_run(tmp_path: Path) -> None:
    """A component kept running from an earlier `up` is kept when asked for the same command, and started
    again when asked for another (a binary built from changed code): a bench reusing a cluster measures the
    code it names."""
    directory = tmp_path / "cluster"
    cluster = local_cluster.Cluster(directory)
    try:
        cluster.start("gpu-class-scheduler", ["sleep", "300"])
        first = cluster.pid("gpu-class-scheduler")
        cluster.start("gpu-class-scheduler", ["sleep", "300"])
        assert cluster.pid("gpu-class-scheduler") == first
        cluster.start("gpu-class-scheduler", ["sleep", "301"])
        assert cluster.pid("gpu-class-scheduler") != first and cluster.is_running("gpu-class-scheduler")
        assert first is not None and not local_cluster._alive(first)
        assert cluster.argv("gpu-class-scheduler") == ["sleep", "301"]
    finally:
        local_cluster.down(directory, grace_seconds=0.5)


def test_down_twice_and_on_a_directory_that_never_was(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    local_cluster.Cluster(directory).start("etcd", ["sleep", "300"])
    _wait_marked(directory, 1)
    local_cluster.down(directory, grace_seconds=0.5)
    local_cluster.down(directory, grace_seconds=0.5)
    local_cluster.down(tmp_path / "never-made", grace_seconds=0.5)
    assert local_cluster.marked_processes(directory) == []


@pytest.mark.parametrize("pidfile", [
    pytest.param("{pid} 12\n", id="another-start-time"),
    pytest.param("{pid}\n", id="no-start-time-no-marker"),
])
def test_down_spares_a_process_that_took_a_stale_pidfiles_pid(tmp_path: Path, pidfile: str) -> None:
    directory = tmp_path / "cluster"
    (directory / "run").mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (directory / "run" / "kube-apiserver.pid").write_text(pidfile.format(pid=stranger.pid))
        assert not local_cluster.Cluster(directory).is_running("kube-apiserver")
        local_cluster.down(directory, grace_seconds=0.5)
        assert stranger.poll() is None
        assert not (directory / "run" / "kube-apiserver.pid").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_markers_of_another_cluster_are_not_ours(tmp_path: Path) -> None:
    # /tmp/x/cluster and /tmp/x/cluster2: the marker is the whole path, not a prefix
    ours, theirs = tmp_path / "cluster", tmp_path / "cluster2"
    local_cluster.Cluster(theirs).start("etcd", ["sleep", "300"])
    try:
        [pid] = _wait_marked(theirs, 1)
        local_cluster.down(ours, grace_seconds=0.5)
        assert local_cluster._alive(pid)
    finally:
        local_cluster.down(theirs, grace_seconds=0.5)


@pytest.mark.parametrize("argv, flags, expected", [
    pytest.param(["apiserver", "--a=1"], {"--runtime-config": "resource.k8s.io/v1=false"},
                 ["apiserver", "--a=1", "--runtime-config=resource.k8s.io/v1=false"], id="added"),
    pytest.param(["apiserver", "--authorization-mode=Node,RBAC", "--a=1"], {"--authorization-mode": "RBAC"},
                 ["apiserver", "--a=1", "--authorization-mode=RBAC"], id="replaced"),
    pytest.param(["apiserver", "--runtime-config=resource.k8s.io/v1=false", "--a=1"], {"--runtime-config": None},
                 ["apiserver", "--a=1"], id="removed"),
    pytest.param(["apiserver", "--a=1"], {"--runtime-config": None}, ["apiserver", "--a=1"], id="absent-stays-absent"),
    pytest.param(["apiserver", "--a=1", "--ab=2"], {"--a": "3"}, ["apiserver", "--ab=2", "--a=3"],
                 id="by-whole-name-not-prefix"),
])
def test_a_component_restarts_with_its_flags_changed(argv: list[str], flags: dict[str, str | None],
                                                      expected: list[str]) -> None:
    assert local_cluster.with_flags(argv, flags) == expected


def test_the_flags_a_component_ran_with_are_read_back_to_restore_them(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    argv = ["kube-apiserver", "--authorization-mode=Node,RBAC", "--secure-port=6443"]
    changed = local_cluster.with_flags(argv, {"--authorization-mode": "RBAC",
                                              "--runtime-config": "resource.k8s.io/v1=false"})
    (tmp_path / "run" / "kube-apiserver.argv").write_text(json.dumps(changed))
    cluster = local_cluster.Cluster(tmp_path)
    assert cluster.flags("kube-apiserver", ["--authorization-mode", "--runtime-config", "--absent"]) == {
        "--authorization-mode": "RBAC", "--runtime-config": "resource.k8s.io/v1=false", "--absent": None}
    # what a test saves before it changes them puts the argv back as it was
    before = {"--authorization-mode": "Node,RBAC", "--runtime-config": None}
    assert sorted(local_cluster.with_flags(changed, before)) == sorted(argv)


def _status(code: int, message: str) -> str:
    """A Status as kube-apiserver writes it: the message's quotes escaped in the JSON."""
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code})


@pytest.mark.parametrize("status, body, judged", [
    pytest.param(201, "{}", True, id="admitted"),
    pytest.param(422, _status(422, "pods \"probe\" is forbidden: ValidatingAdmissionPolicy 'gpu-class.io-boundary' "
                                   "denied request: failed to configure policy: failed to find resource referenced "
                                   "by paramKind: 'gpu-class.io/v1alpha1, Kind=BoundaryTable'"), False,
                 id="policy-not-configured-yet"),
    pytest.param(403, _status(403, "pods \"probe\" is forbidden: error looking up service account "
                                   "e2e-policy-probe/default: serviceaccount \"default\" not found"), False,
                 id="service-account-not-made-yet"),
    pytest.param(503, "service unavailable", False, id="api-server-starting"),
    pytest.param(403, _status(403, "pods \"probe\" is forbidden: ValidatingAdmissionPolicy 'gpu-class.io-boundary' "
                                   "with binding 'gpu-class.io-boundary' denied request: gpu-class: no"), None,
                 id="refused-for-good"),
])
def test_the_policy_probe_tells_not_yet_from_refused(status: int, body: str, judged: bool | None) -> None:
    if judged is None:
        with pytest.raises(local_cluster.ClusterError, match="a CPU Pod was refused"):
            local_cluster.policy_probe_judged(status, body)
    else:
        assert local_cluster.policy_probe_judged(status, body) is judged
