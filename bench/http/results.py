"""What the suite measured: the results bench/http/run.py gathers and bench/http/report.py renders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.common.procs import Cores, Memory
from .idle import IdleProbe
from .inventory_cost import LiveSyncCost, SnapshotCost
from .measure import LoadResult, LoadSettings
from .spread import SpreadResult


@dataclass(frozen=True)
class ServerConfig:
    """gunicorn settings of one server under test."""

    workers: int
    threads: int
    worker_class: str = "gthread"

    @property
    def name(self) -> str:
        if self.worker_class == "sync":
            return f"sync workers={self.workers}"
        return f"gthread workers={self.workers} threads={self.threads}"


@dataclass(frozen=True)
class Options:
    quick: bool
    sizes: tuple[int, ...]
    headline_nodes: int
    settings: LoadSettings
    compare_configs: bool
    live: bool
    live_nodes: int
    live_pods: int
    live_gpu_pods: int
    output: Path
    json_output: Path | None
    workdir: Path
    startup_timeout_seconds: float
    snapshot_nodes: int
    command: str
    spread_trials: int = 0  # 0: placements not compared
    instances: int = 1  # processes of the baseline and of the headline server, rounds spread over them
    pin: bool = True  # servers and load on CPUs of their own (procs.split_cores)


@dataclass(frozen=True)
class ServerInfo:
    label: str
    nodes: int | None  # None: the baseline (no inventory)
    config: ServerConfig
    started_with: str  # the command line, shortened
    startup_seconds: float
    master_check_seconds: float
    note: str = ""


@dataclass(frozen=True)
class StartupProblem:
    label: str
    nodes: int
    reason: str


@dataclass(frozen=True)
class SizeResult:
    nodes: int
    file_mib: float
    server: ServerInfo
    closed: LoadResult
    worker_memory: tuple[Memory, ...]
    master_memory: Memory


@dataclass(frozen=True)
class ConfigResult:
    config: ServerConfig
    server: ServerInfo
    closed: LoadResult
    open: LoadResult
    worker_memory: tuple[Memory, ...]
    idle: IdleProbe


@dataclass
class Results:
    options: Options
    started: str
    cores: int
    python: str
    versions: dict[str, str]
    body_bytes: int
    default_config: ServerConfig
    busy_before: float  # share of the cores busy just before the run: other work on the machine
    baseline_closed: LoadResult | None = None
    mutation_closed: LoadResult | None = None
    half_rate: float = 0.0
    baseline_open: LoadResult | None = None
    mutation_open: LoadResult | None = None
    servers: list[ServerInfo] = field(default_factory=list)
    startup_problems: list[StartupProblem] = field(default_factory=list)
    sizes: list[SizeResult] = field(default_factory=list)
    configs: list[ConfigResult] = field(default_factory=list)
    snapshot: SnapshotCost | None = None
    breakdown: list[tuple[str, float]] = field(default_factory=list)
    live: LiveSyncCost | None = None
    spread: list[SpreadResult] = field(default_factory=list)
    wall_seconds: float = 0.0
    cores_used: Cores | None = None  # None: servers and load shared every CPU

    def correctness_errors(self) -> int:
        loads = [self.baseline_closed, self.mutation_closed, self.baseline_open, self.mutation_open]
        loads += [s.closed for s in self.sizes]
        loads += [r for c in self.configs for r in (c.closed, c.open)]
        return sum(r.failed for r in loads if r is not None) + sum(s.failed for s in self.spread)
