"""Load measurements: run the load generator processes against servers, sample the servers' CPU over
the same window, merge the results.

Servers that are compared are measured in alternating rounds (A, B, A, B, ...) rather than one
after the other, so drift on a shared machine and the luck of how accept() spreads the connections
over the workers (it changes at every reconnect) fall on both sides alike.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .loadgen import Mode, Outcome, Plan
from bench.common.percentiles import percentile
from bench.common.procs import REPO_ROOT, ServerProcess

@dataclass(frozen=True)
class LoadSettings:
    processes: int = 2
    connections: int = 8  # in all, spread over the processes
    rounds: int = 3
    warmup_seconds: float = 0.5  # per round; the servers are primed once before the first round
    round_seconds: float = 3.0
    timeout_seconds: float = 15.0
    start_margin_seconds: float = 0.05  # from "every load generator is connected" to the common start
    quiet_wait_seconds: float = 30.0  # before a round, at most this long for other work on the machine to stop
    churn: bool = False  # each round's pool opened in a burst and left mid-request (bench/http/loadgen.py)


@dataclass(frozen=True)
class Target:
    """A server to load and what its answers must contain."""

    server: ServerProcess
    expect_patch: bool


@dataclass(frozen=True)
class Body:
    path: Path
    uid_offset: int


@dataclass(frozen=True)
class RawRun:
    """One round against one server, before merging."""

    outcomes: tuple[Outcome, ...]
    server_cpu_seconds: tuple[float, ...]  # master, then each worker
    connections_per_worker: tuple[int, ...]
    requests_per_worker: tuple[int, ...]  # answered in the window, by the worker holding the connection
    machine_busy: float  # fraction of all cores' time not idle over the window
    other_cpu_seconds: float  # busy time neither the server nor the load generator used: a noisy machine
    workers_restarted: bool
    instance: str  # the label of the server process that ran it


@dataclass(frozen=True)
class RoundFigures:
    """One round against one server, as the report shows it."""

    throughput_rps: float
    server_cpu_us_per_request: float
    p99_ms: float
    connections_per_worker: tuple[int, ...]
    requests_per_worker: tuple[int, ...]
    worker_cpu_seconds: tuple[float, ...]
    master_cpu_seconds: float
    machine_busy: float
    instance: str = ""

    @property
    def balance(self) -> float:
        """The least busy worker's requests over the busiest's (1: even; 0: a worker idle)."""
        return _least_over_most(self.requests_per_worker)

    @property
    def connection_balance(self) -> float:
        """The same for connections held: workers sharing one CPU answer alike however many each holds,
        so 7/1 connections can still show as even requests."""
        return _least_over_most(self.connections_per_worker)


def _least_over_most(values: Sequence[int]) -> float:
    most = max(values, default=0)
    return min(values) / most if most else 1.0


@dataclass(frozen=True)
class LoadResult:
    server: str
    mode: Mode
    rate_per_second: float  # open mode: the offered rate; closed: 0
    seconds: float  # measured time, all rounds together
    ok: int
    errors: dict[str, int]
    error_samples: tuple[str, ...]
    reconnects: int
    late_sends: int
    throughput_rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    server_cpu_us_per_request: float
    client_cpu_us_per_request: float
    machine_busy: float
    other_cpu_share: float  # of all cores, used by other processes during the windows (should be ~0)
    connections_per_worker: tuple[tuple[int, ...], ...]  # per round: how accept() spread them
    workers_restarted: bool
    late_starts: int  # load generator processes that were not connected by the common start (window skewed)
    rounds: tuple[RoundFigures, ...] = ()

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


CORES = os.cpu_count() or 1


def _machine_times() -> tuple[int, int]:
    """(idle, total) jiffies of all cores, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return idle, sum(values[:8])  # guest time is already inside user time


def machine_busy_now(seconds: float = 1.0) -> float:
    """The share of all cores busy over `seconds`: the bench should start on a quiet machine."""
    before = _machine_times()
    time.sleep(seconds)
    after = _machine_times()
    return 1.0 - (after[0] - before[0]) / max(after[1] - before[1], 1)


QUIET_BUSY = 0.15  # between rounds only idle servers run: more busy than this is someone else's work
QUIET_WAIT_SECONDS = LoadSettings.quiet_wait_seconds


def wait_until_quiet(limit_seconds: float = QUIET_WAIT_SECONDS) -> float:
    """Before a round, wait (a bounded time) while other work keeps the machine busy; seconds waited."""
    started = time.monotonic()
    while machine_busy_now(0.25) > QUIET_BUSY and time.monotonic() - started < limit_seconds:
        time.sleep(0.5)
    return time.monotonic() - started


def run_round(target: Target, body: Body, mode: Mode, settings: LoadSettings, workdir: Path,
              rate_per_second: float = 0.0, warmup_seconds: float | None = None) -> RawRun:
    server = target.server
    wait_until_quiet(settings.quiet_wait_seconds)
    warmup = settings.warmup_seconds if warmup_seconds is None else warmup_seconds
    processes: list[subprocess.Popen[bytes]] = []
    per_process = spread(settings.connections, settings.processes)
    for index, connections in enumerate(per_process):
        plan: Plan = {
            "host": "127.0.0.1", "port": server.port, "server_hostname": "localhost",
            "ca_file": str(server.ca_file), "body_file": str(body.path), "uid_offset": body.uid_offset,
            "connections": connections, "process_index": index, "processes": len(per_process),
            "mode": mode, "rate_per_second": rate_per_second,
            "warmup_seconds": warmup, "duration_seconds": settings.round_seconds,
            "expect_patch": target.expect_patch, "timeout_seconds": settings.timeout_seconds,
            "churn": settings.churn,
        }
        plan_file = workdir / f"plan-{index}.json"
        plan_file.write_text(json.dumps(plan))
        processes.append(subprocess.Popen([sys.executable, "-m", "bench.http.loadgen", str(plan_file)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO_ROOT))
    try:
        for p in processes:  # each connects and sends one request first
            assert p.stdout is not None and p.stdin is not None
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"load generator against {server.label} failed to start ({p.wait()})")
        start_at = time.time() + settings.start_margin_seconds
        for p in processes:
            assert p.stdin is not None
            p.stdin.write(f"{start_at!r}\n".encode())
            p.stdin.close()
        window_start = start_at + warmup
        time.sleep(max(window_start - time.time(), 0.0))
        cpu_before, machine_before = server.cpu_seconds(), _machine_times()
        peers = server.peers_per_worker()
        time.sleep(max(window_start + settings.round_seconds - time.time(), 0.0))
        cpu_after, machine_after = server.cpu_seconds(), _machine_times()
        # a connection reopened during the window is found at its end
        peers = [a | b for a, b in zip(peers, server.peers_per_worker())]
        outcomes: list[Outcome] = []
        for p in processes:
            assert p.stdout is not None
            out = p.stdout.read()
            p.wait(timeout=settings.timeout_seconds + 30)
            if p.returncode != 0:
                raise RuntimeError(f"load generator against {server.label} exited with {p.returncode}")
            outcomes.append(json.loads(out))
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    idle = machine_after[0] - machine_before[0]
    total = max(machine_after[1] - machine_before[1], 1)
    busy = 1.0 - idle / total
    server_cpu = tuple(after - before for before, after in zip(cpu_before, cpu_after))
    client_cpu = sum(o["cpu_seconds"] for o in outcomes)
    ok_by_port: dict[int, int] = {}
    for o in outcomes:
        for port, n in o["ok_by_port"].items():
            ok_by_port[int(port)] = ok_by_port.get(int(port), 0) + n
    return RawRun(
        outcomes=tuple(outcomes),
        server_cpu_seconds=server_cpu,
        connections_per_worker=tuple(len(p) for p in peers),
        requests_per_worker=tuple(sum(ok_by_port.get(port, 0) for port in p) for p in peers),
        machine_busy=busy,
        other_cpu_seconds=max(busy * CORES * settings.round_seconds - sum(server_cpu) - client_cpu, 0.0),
        workers_restarted=not server.workers_unchanged(),
        instance=server.label,
    )


def spread(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def prime(targets: Sequence[Target], body: Body, settings: LoadSettings, workdir: Path) -> None:
    """A short unmeasured run against each server: lazy imports and first-use caches happen here."""
    short = dataclasses.replace(settings, rounds=1, warmup_seconds=0.0, round_seconds=0.5)
    for target in targets:
        run_round(target, body, "closed", short, workdir)


def measure(servers: Sequence[Sequence[Target]], body: Body, mode: Mode, settings: LoadSettings, workdir: Path,
            rate_per_second: float = 0.0) -> list[LoadResult]:
    """`settings.rounds` rounds, alternating over the servers; one merged result per server.

    Each server may run as several instances (processes started alike): round i is run against
    instance i % instances, so that what one process happens to get at start (processes started
    alike differ by a few percent for as long as they run) is not taken for the server's cost.
    """
    runs: list[list[RawRun]] = [[] for _ in servers]
    for r in range(settings.rounds):
        for i, instances in enumerate(servers):
            runs[i].append(run_round(instances[r % len(instances)], body, mode, settings, workdir, rate_per_second))
    return [summarize(instances[0].server.label, mode, rate_per_second, settings, r) for instances, r in zip(servers, runs)]


def summarize(label: str, mode: Mode, rate: float, settings: LoadSettings, runs: Sequence[RawRun]) -> LoadResult:
    outcomes = [o for r in runs for o in r.outcomes]
    latencies = sorted(x for o in outcomes for x in o["latencies_ms"])
    ok = sum(o["ok"] for o in outcomes)
    errors: dict[str, int] = {}
    for o in outcomes:
        for reason, n in o["errors"].items():
            errors[reason] = errors.get(reason, 0) + n
    answered = max(ok + sum(errors.values()), 1)
    seconds = settings.round_seconds * len(runs)
    return LoadResult(
        server=label, mode=mode, rate_per_second=rate, seconds=seconds,
        ok=ok, errors=errors, error_samples=tuple(s for o in outcomes for s in o["error_samples"])[:5],
        reconnects=sum(o["reconnects"] for o in outcomes), late_sends=sum(o["late_sends"] for o in outcomes),
        throughput_rps=ok / seconds,
        p50_ms=percentile(latencies, 0.50), p90_ms=percentile(latencies, 0.90),
        p99_ms=percentile(latencies, 0.99), max_ms=latencies[-1] if latencies else 0.0,
        server_cpu_us_per_request=sum(sum(r.server_cpu_seconds) for r in runs) / answered * 1e6,
        client_cpu_us_per_request=sum(o["cpu_seconds"] for o in outcomes) / answered * 1e6,
        machine_busy=sum(r.machine_busy for r in runs) / len(runs),
        other_cpu_share=sum(r.other_cpu_seconds for r in runs) / (seconds * CORES),
        connections_per_worker=tuple(r.connections_per_worker for r in runs),
        workers_restarted=any(r.workers_restarted for r in runs),
        late_starts=sum(1 for o in outcomes if o["ready_late"]),
        rounds=tuple(_round_figures(r, settings.round_seconds) for r in runs),
    )


def _round_figures(run: RawRun, seconds: float) -> RoundFigures:
    ok = sum(o["ok"] for o in run.outcomes)
    answered = max(ok + sum(sum(o["errors"].values()) for o in run.outcomes), 1)
    latencies = sorted(x for o in run.outcomes for x in o["latencies_ms"])
    return RoundFigures(
        throughput_rps=ok / seconds, server_cpu_us_per_request=sum(run.server_cpu_seconds) / answered * 1e6,
        p99_ms=percentile(latencies, 0.99), connections_per_worker=run.connections_per_worker,
        requests_per_worker=run.requests_per_worker, worker_cpu_seconds=run.server_cpu_seconds[1:],
        master_cpu_seconds=run.server_cpu_seconds[0], machine_busy=run.machine_busy, instance=run.instance,
    )


def paired_ratios(a: LoadResult, b: LoadResult, figure: str) -> list[float]:
    """a's figure over b's, round by round: rounds i of both ran next to each other."""
    return [getattr(x, figure) / getattr(y, figure) for x, y in zip(a.rounds, b.rounds) if getattr(y, figure)]
