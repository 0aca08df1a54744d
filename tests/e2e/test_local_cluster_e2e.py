"""`local-cluster up` that fails or is stopped part way leaves nothing running (the real components,
each made to fail by a port another process holds, or the command interrupted)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from dataclasses import asdict, fields
from pathlib import Path

import pytest

import local_cluster

SCRIPT = Path(local_cluster.__file__).with_name("local-cluster")


def _state_with_ports(directory: Path) -> local_cluster.Ports:
    ports = local_cluster.Ports(*(local_cluster.free_port() for _ in fields(local_cluster.Ports)))
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps({"ports": asdict(ports)}))
    return ports


def _started(directory: Path) -> set[str]:
    """The components that were started: each has a log."""
    return {p.stem for p in (directory / "logs").glob("*.log")} - {"audit"}


@pytest.mark.parametrize("taken, failing, started_before", [
    pytest.param("apiserver", "kube-apiserver", {"etcd"}, id="api-server"),
    # where the reported failed up stopped: after the control plane, at the webhook
    pytest.param("webhook", "gpuclass", {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"},
                 id="webhook"),
    pytest.param("gpu_scheduler", local_cluster.STRICT_SCHEDULER,
                 {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "gpuclass"},
                 id="strict-scheduler"),
])
def test_a_failed_up_stops_what_it_started(tmp_path: Path, taken: str, failing: str,
                                           started_before: set[str]) -> None:
    directory = tmp_path / "cluster"
    ports = _state_with_ports(directory)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", getattr(ports, taken)))
        holder.listen()
        with pytest.raises(local_cluster.ClusterError, match=f"{failing} exited during start"):
            local_cluster.up(directory, log=lambda line: print(line, flush=True))
    assert started_before | {failing} <= _started(directory)
    assert local_cluster.marked_processes(directory) == []
    assert list((directory / "run").glob("*.pid")) == []


def _up_until_controller_manager(directory: Path) -> subprocess.Popen[str]:
    """`local-cluster up` in a process of its own, once it has started the controller manager."""
    # SIGINT at its default, as for a command in a terminal's foreground: run from a shell's background
    # job (as CI may run the suite) it would inherit SIGINT ignored, and Ctrl-C could not reach it
    proc = subprocess.Popen([str(SCRIPT), "up", str(directory)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (directory / "run" / "kube-controller-manager.pid").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"up did not get as far as the controller manager: {proc.communicate()[0]}")
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_interrupted_up_stops_what_it_started(tmp_path: Path, sig: signal.Signals) -> None:
    directory = tmp_path / "cluster"
    proc = _up_until_controller_manager(directory)
    proc.send_signal(sig)
    try:
        output = proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
        local_cluster.down(directory)  # whatever went wrong, no cluster outlives the test
    assert proc.returncode == 128 + sig, output
    assert "stopping what it started" in output
    assert {"etcd", "kube-apiserver", "kube-controller-manager"} <= _started(directory)
    assert local_cluster.marked_processes(directory) == []


def test_down_finds_what_a_killed_up_left_once_its_directory_is_gone(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    proc = _up_until_controller_manager(directory)
    proc.kill()  # no chance to clean up
    proc.communicate()
    assert local_cluster.marked_processes(directory)
    subprocess.run(["rm", "-rf", str(directory)], check=True)

    for _ in range(2):  # and again, with nothing left to find
        done = subprocess.run([str(SCRIPT), "down", str(directory)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert local_cluster.marked_processes(directory) == []
