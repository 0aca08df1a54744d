"""Server processes under test: start them, find their workers, read their CPU time and memory.

Linux only: CPU time and memory come from /proc, workers are found as children of the gunicorn
master by their parent pid.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class StartupFailed(RuntimeError):
    """The server did not come up; the message says why (and quotes its log)."""


@dataclass(frozen=True)
class Cores:
    """Which CPUs the servers run on, and which the load generators (and the bench itself) run on."""

    server: frozenset[int]
    load: frozenset[int]


def split_cores() -> Cores | None:
    """The first half of this process's CPUs for the servers, the rest for the load; None on one CPU.

    With servers and load generators free to share every core, one and the same server measured in
    back-to-back rounds differed by up to 15% in CPU per request (the scheduler moving and stacking
    them); on cores of their own, by about 1% (bench/README.md).
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return Cores(frozenset(cpus[:half]), frozenset(cpus[half:]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children_of(pid: int) -> list[int]:
    """Pids whose parent is `pid` (gunicorn workers of a master)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # the command name (field 2) is in parentheses and may hold spaces: split after it
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process (all its threads)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: fields 14 and 15


def established_connections(pids: Sequence[int], port: int) -> list[int]:
    """How many established TCP connections to local `port` each process holds (by socket inode)."""
    return [len(peers) for peers in peer_ports(pids, port)]


def peer_ports(pids: Sequence[int], port: int) -> list[set[int]]:
    """For each process, the remote ports of the established TCP connections to local `port` it holds."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "01" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 01: ESTABLISHED
                inodes[cols[9]] = int(cols[2].rsplit(":", 1)[1], 16)
    found: list[set[int]] = []
    for pid in pids:
        held: set[int] = set()
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                held.add(inodes[target[8:-1]])
        found.append(held)
    return found


@dataclass(frozen=True)
class Memory:
    """One process's memory in KiB. rss: VmRSS (counts pages shared with the master after fork);
    pss: its proportional share of them; private: pages only it has (what a new worker adds)."""

    rss_kib: int
    hwm_kib: int
    pss_kib: int
    private_kib: int


def memory_of(pid: int) -> Memory:
    status = _kib_fields(Path(f"/proc/{pid}/status").read_text())
    try:
        rollup = _kib_fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
    except OSError:  # kernels before 4.14
        rollup = {}
    private = rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)
    return Memory(status["VmRSS"], status["VmHWM"], rollup.get("Pss", 0), private)


def _kib_fields(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            values[key] = int(parts[0])
    return values


@dataclass
class ServerProcess:
    """A running server: `gpuclass serve` or a bench variant, a gunicorn master and its workers."""

    label: str
    process: subprocess.Popen[bytes]
    port: int
    ca_file: Path
    log_file: Path
    workers: int
    startup_seconds: float = 0.0  # until every worker was ready and idle
    master_check_seconds: float = 0.0  # until gunicorn listened: the master's configuration check
    worker_pids: list[int] = field(default_factory=list)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:]

    def current_workers(self) -> list[int]:
        return children_of(self.process.pid)

    def cpu_seconds(self) -> list[float]:
        """CPU seconds of the master, then of each worker found at start (a restart is a failure)."""
        return [cpu_seconds(p) for p in (self.process.pid, *self.worker_pids)]

    def connections_per_worker(self) -> list[int]:
        return established_connections(self.worker_pids, self.port)

    def peers_per_worker(self) -> list[set[int]]:
        """The client ports of each worker's connections."""
        return peer_ports(self.worker_pids, self.port)

    def worker_memory(self) -> list[Memory]:
        return [memory_of(p) for p in self.worker_pids]

    def master_memory(self) -> Memory:
        return memory_of(self.process.pid)

    def workers_unchanged(self) -> bool:
        return self.current_workers() == self.worker_pids

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def healthy(port: int, ca_file: Path, timeout_seconds: float = 2.0) -> bool:
    """GET /healthz on a new connection answers 200 within the timeout."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_seconds) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                return tls.recv(64).startswith(b"HTTP/1.1 200")
    except (OSError, ssl.SSLError):
        return False


def _wait_until_idle(server: ServerProcess, deadline: float) -> None:
    """All workers exist and have stopped burning CPU (each loads its inventory after fork, and
    only one of them needs to be ready to answer /healthz)."""
    previous: dict[int, float] = {}
    while time.monotonic() < deadline:
        _check_alive(server)
        pids = server.current_workers()
        try:
            now = {p: cpu_seconds(p) for p in pids}
        except OSError:
            now = {}
        if len(pids) == server.workers and now.keys() == previous.keys() and all(
            now[p] - previous[p] <= 0.02 for p in pids
        ):
            server.worker_pids = pids
            return
        previous = now
        time.sleep(0.4)
    raise StartupFailed(f"{server.label}: workers still busy or missing at the startup deadline\n{server.log_tail()}")


def _check_alive(server: ServerProcess) -> None:
    if server.process.poll() is not None:
        raise StartupFailed(f"{server.label}: exited with {server.process.returncode}\n{server.log_tail()}")
    log = server.log_file.read_text(errors="replace")
    if "WORKER TIMEOUT" in log:
        raise StartupFailed(
            f"{server.label}: gunicorn killed a worker still loading after its worker timeout "
            f"(WORKER TIMEOUT in the log)"
        )


def start_server(label: str, command: Sequence[str], *, port: int, ca_file: Path, log_file: Path, workers: int,
                 startup_timeout_seconds: float, cpus: Collection[int] | None = None) -> ServerProcess:
    """Start a server command (it must bind 127.0.0.1:`port`) and wait until every worker is ready.

    `cpus`: the CPUs the master and its workers run on (set before the master forks its workers).
    """
    started = time.monotonic()
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            list(command), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
    if cpus:
        os.sched_setaffinity(process.pid, cpus)
    server = ServerProcess(label, process, port, ca_file, log_file, workers)
    deadline = started + startup_timeout_seconds
    try:
        while not healthy(port, ca_file):
            _check_alive(server)
            if not server.master_check_seconds and "Listening at:" in log_file.read_text(errors="replace"):
                server.master_check_seconds = time.monotonic() - started
            if time.monotonic() > deadline:
                raise StartupFailed(f"{label}: no answer on /healthz after {startup_timeout_seconds:.0f}s")
            time.sleep(0.2)
        if not server.master_check_seconds:
            server.master_check_seconds = time.monotonic() - started
        _wait_until_idle(server, deadline)
        _check_alive(server)
        if cpus and any(os.sched_getaffinity(pid) != set(cpus) for pid in server.worker_pids):
            raise StartupFailed(f"{label}: a worker was forked before it was placed on CPUs {sorted(cpus)}")
    except BaseException:
        server.stop()
        raise
    server.startup_seconds = time.monotonic() - started
    return server


def gpuclass_serve_command(*, port: int, cert_dir: Path, nodes_file: Path, workers: int, threads: int,
                           log_level: str = "info") -> list[str]:
    """The real server, exactly as the Deployment runs it (`gpuclass serve`), on loopback."""
    return [
        sys.executable, "-m", "webhook.cli", "serve",
        "--nodes", str(nodes_file),
        "--cert-file", str(cert_dir / "tls.crt"), "--key-file", str(cert_dir / "tls.key"),
        "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads),
        "--log-level", log_level,
        # a file inventory, no API server to check scrapes with: metrics unchecked, on loopback
        "--metrics-bind", f"127.0.0.1:{free_port()}", "--metrics-auth", "none",
    ]


def variant_command(*, app: str, port: int, cert_dir: Path, nodes_file: Path | None, workers: int, threads: int,
                    worker_class: str = "gthread", log_level: str = "info", placement: str = "balanced",
                    answer_file: Path | None = None) -> list[str]:
    """A bench variant on webhook.serving.server.WebhookServer (see bench/common/variant.py)."""
    command = [
        sys.executable, "-m", "bench.common.variant", "--app", app,
        "--cert-file", str(cert_dir / "tls.crt"), "--key-file", str(cert_dir / "tls.key"),
        "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads),
        "--worker-class", worker_class, "--log-level", log_level, "--placement", placement,
    ]
    if nodes_file is not None:
        command += ["--nodes", str(nodes_file)]
    if answer_file is not None:
        command += ["--answer-file", str(answer_file)]
    return command
