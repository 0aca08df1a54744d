"""The benchmark suite: start the servers, load them as the API server does, judge the targets, write
bench/RESULTS.md.

    .venv/bin/python -m bench            # the full suite, a few minutes on 2 cores
    .venv/bin/python -m bench --quick    # a few seconds: 10 nodes, short rounds (the CI smoke test)
    .venv/bin/python -m bench --live     # also the live inventory's first sync at 5,000 nodes, 150,000 Pods

Measured on the real `gpuclass serve` (gunicorn gthread over TLS), with a baseline on the same
WebhookServer that allows everything (bench/common/variant.py); see bench/README.md for the method.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import yaml

from webhook.serving import certs
from webhook.serving.config import ServeConfig

from . import report
from .idle import probe_with_idle_connections
from bench.common.sections import carry_sections
from .spread import measure_spread
from .inventory_cost import measure_live_sync, time_build_snapshot
from .measure import Body, LoadResult, LoadSettings, Target, machine_busy_now, measure, prime
from bench.common.procs import (
    REPO_ROOT, ServerProcess, StartupFailed, free_port, split_cores, gpuclass_serve_command, start_server, variant_command,
)
from bench.common.workload import build_request_body, make_fleet, make_node_list
from .results import ConfigResult, Options, Results, ServerConfig, ServerInfo, SizeResult, StartupProblem

DEFAULT_OUTPUT = REPO_ROOT / "bench" / "RESULTS.md"


_SERVE_DEFAULTS = ServeConfig(cert_file="", key_file="")
# what `gpuclass serve` defaults to (webhook/config.py): the baseline and the headline run with it
DEFAULT_CONFIG = ServerConfig(_SERVE_DEFAULTS.workers, _SERVE_DEFAULTS.threads)
CONFIGS_TO_COMPARE = tuple(c for c in (
    ServerConfig(2, 4), ServerConfig(2, 2), ServerConfig(2, 1), ServerConfig(3, 1), ServerConfig(4, 2),
    ServerConfig(1, 8), ServerConfig(2, 1, "sync"),
) if c != DEFAULT_CONFIG)


class Suite:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.work = options.workdir
        self.work.mkdir(parents=True, exist_ok=True)
        self.cert_dir = self._write_certs()
        request = build_request_body()
        body_path = self.work / "admission-review.json"
        body_path.write_bytes(request.data)
        self.body = Body(body_path, request.uid_offset)
        self.results = Results(
            options=options,
            started=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            cores=os.cpu_count() or 1,
            python=platform.python_version(),
            versions=_versions(),
            body_bytes=len(request.data),
            default_config=DEFAULT_CONFIG,
            busy_before=machine_busy_now(),
        )
        if self.results.busy_before > 0.1:
            print(f"bench: the machine is {self.results.busy_before:.0%} busy before the start; results will be "
                  "disturbed (see the report's notes)", file=sys.stderr)
        self.servers: list[ServerProcess] = []
        self.written: set[int] = set()
        self.cores = split_cores() if options.pin else None
        if self.cores is not None:
            os.sched_setaffinity(0, self.cores.load)  # the load generators are started from here
        self.results.cores_used = self.cores

    def _write_certs(self) -> Path:
        bundle = certs.generate(["localhost"], ["127.0.0.1"])
        cert_dir = self.work / "certs"
        cert_dir.mkdir(exist_ok=True)
        (cert_dir / "ca.crt").write_bytes(bundle.ca_crt)
        (cert_dir / "tls.crt").write_bytes(bundle.tls_crt)
        (cert_dir / "tls.key").write_bytes(bundle.tls_key)
        return cert_dir

    def close(self) -> None:
        for server in self.servers:
            server.stop()

    # ------------------------------------------------------------------ servers
    def _start(self, label: str, command: list[str], nodes: int | None, config: ServerConfig,
               note: str = "") -> ServerProcess:
        port = int(command[command.index("--bind") + 1].rsplit(":", 1)[1])
        server = start_server(label, command, port=port, ca_file=self.cert_dir / "ca.crt",
                              log_file=self.work / f"{label}.log", workers=config.workers,
                              startup_timeout_seconds=self.o.startup_timeout_seconds,
                              cpus=self.cores.server if self.cores else None)
        self.servers.append(server)
        shown = " ".join(_shorten(a, self.work) for a in command[1:])
        self.results.servers.append(ServerInfo(label, nodes, config, shown, server.startup_seconds,
                                               server.master_check_seconds, note))
        return server

    def start_baseline(self, instance: int = 0) -> ServerProcess:
        port = free_port()
        command = variant_command(app="baseline", port=port, cert_dir=self.cert_dir, nodes_file=None,
                                  workers=DEFAULT_CONFIG.workers, threads=DEFAULT_CONFIG.threads)
        return self._start("baseline" + _instance_suffix(instance), command, None, DEFAULT_CONFIG)

    def nodes_file(self, nodes: int) -> Path:
        path = self.work / f"nodes-{nodes}.yaml"
        if nodes not in self.written:  # once per run (the work directory may hold an older fleet)
            # `kubectl get nodes -o yaml`; libyaml's dumper only to save the bench's time
            dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
            path.write_text(yaml.dump(make_node_list(make_fleet(nodes)), Dumper=dumper, sort_keys=False))
            self.written.add(nodes)
        return path

    def start_placement(self, nodes: int, placement: str) -> ServerProcess | None:
        """The real app on bench/common/variant.py with another way of placing connections on workers."""
        try:
            command = variant_command(app="mutation", port=free_port(), cert_dir=self.cert_dir,
                                      nodes_file=self.nodes_file(nodes), workers=DEFAULT_CONFIG.workers,
                                      threads=DEFAULT_CONFIG.threads, placement=placement)
            return self._start(f"placement-{placement}-{nodes}", command, nodes, DEFAULT_CONFIG,
                               note=f"bench/common/variant.py --placement {placement}")
        except StartupFailed as exc:
            self.results.startup_problems.append(StartupProblem(f"placement-{placement}", nodes, str(exc)))
            return None

    def start_mutation(self, nodes: int, config: ServerConfig = DEFAULT_CONFIG, instance: int = 0) -> ServerProcess | None:
        """`gpuclass serve --nodes` (sync workers: bench/common/variant.py); None when it does not start."""
        label = f"mutation-{nodes}" + ("" if config == DEFAULT_CONFIG else f"-{config.worker_class}-{config.workers}x{config.threads}")
        label += _instance_suffix(instance)
        nodes_file = self.nodes_file(nodes)
        port = free_port()
        try:
            if config.worker_class == "gthread":
                command = gpuclass_serve_command(port=port, cert_dir=self.cert_dir, nodes_file=nodes_file,
                                                 workers=config.workers, threads=config.threads)
                return self._start(label, command, nodes, config)
            command = variant_command(app="mutation", port=port, cert_dir=self.cert_dir, nodes_file=nodes_file,
                                      workers=config.workers, threads=config.threads, worker_class=config.worker_class)
            return self._start(label, command, nodes, config,
                               note="bench/common/variant.py: `gpuclass serve` has no worker class flag")
        except StartupFailed as exc:
            self.results.startup_problems.append(StartupProblem(label, nodes, str(exc)))
            return None

    # ------------------------------------------------------------------ the suite
    def run(self) -> Results:
        o, r = self.o, self.results
        baselines = tuple(Target(self.start_baseline(i), expect_patch=False) for i in range(o.instances))
        mutation_by_size: dict[int, Target] = {}
        for nodes in o.sizes:
            server = self.start_mutation(nodes)
            if server is not None:
                mutation_by_size[nodes] = Target(server, expect_patch=True)
        if not mutation_by_size:
            return r  # the report shows why (startup problems)
        headline_nodes = o.headline_nodes if o.headline_nodes in mutation_by_size else next(iter(mutation_by_size))
        headlines = (mutation_by_size[headline_nodes], *(
            Target(s, expect_patch=True) for i in range(1, o.instances)
            if (s := self.start_mutation(headline_nodes, instance=i)) is not None))
        if not o.quick:
            prime([*baselines, *mutation_by_size.values(), *headlines[1:]], self.body, o.settings, self.work)

        # 1, 2: peak throughput, then latency at half the baseline's peak
        compared = [baselines, headlines]
        r.baseline_closed, r.mutation_closed = measure(compared, self.body, "closed", o.settings, self.work)
        r.half_rate = round(r.baseline_closed.throughput_rps / 2, 0)
        r.baseline_open, r.mutation_open = measure(compared, self.body, "open", o.settings, self.work,
                                                   rate_per_second=r.half_rate)

        # 3, 4: cost and memory against cluster size
        sizes = sorted(mutation_by_size)
        targets = [mutation_by_size[n] for n in sizes]
        if len(targets) > 1:
            closed_by_size = measure([(t,) for t in targets], self.body, "closed", o.settings, self.work)
        else:
            closed_by_size = [r.mutation_closed]
        for nodes, target, closed in zip(sizes, targets, closed_by_size):
            info = next(s for s in r.servers if s.label == target.server.label)
            r.sizes.append(SizeResult(
                nodes, self.nodes_file(nodes).stat().st_size / 2**20, info, closed,
                tuple(target.server.worker_memory()), target.server.master_memory(),
            ))
        r.snapshot = time_build_snapshot(o.snapshot_nodes)

        # 5: how each way of placing connections spreads them over the workers
        if o.spread_trials:
            r.spread = measure_spread(lambda p: self.start_placement(sizes[0], p), self.body, o.settings, self.work,
                                      o.spread_trials)

        # 6: gunicorn settings, against the smallest inventory (the cost does not depend on it)
        if o.compare_configs:
            self._compare_configs(mutation_by_size[sizes[0]])
        for server in self.servers:
            server.stop()
        if not o.quick:
            r.breakdown = measure_breakdown(self.nodes_file(min(o.sizes)))

        if o.live:
            r.live = measure_live_sync(self.work, o.live_nodes, o.live_pods, o.live_gpu_pods, timeout_seconds=600)
        return r

    def _compare_configs(self, default: Target) -> None:
        o, r = self.o, self.results
        nodes = next(s.nodes for s in r.sizes if s.server.label == default.server.label)
        configs = [DEFAULT_CONFIG]
        targets = [default]
        for config in CONFIGS_TO_COMPARE:
            server = self.start_mutation(nodes, config)
            if server is not None:
                configs.append(config)
                targets.append(Target(server, expect_patch=True))
        others = targets[1:]
        prime(others, self.body, o.settings, self.work)
        settings = dataclasses.replace(o.settings, rounds=min(2, o.settings.rounds))  # a side comparison: kept short
        closed = measure([(t,) for t in targets], self.body, "closed", settings, self.work)
        opened = measure([(t,) for t in targets], self.body, "open", settings, self.work, rate_per_second=r.half_rate)
        for config, target, c, op in zip(configs, targets, closed, opened):
            info = next(s for s in r.servers if s.label == target.server.label)
            memory = tuple(target.server.worker_memory())
            # last: it may leave threads held until the silent connections close
            idle = probe_with_idle_connections(target.server.port, target.server.ca_file,
                                               idle=2 * config.workers * config.threads)
            r.configs.append(ConfigResult(config, info, c, op, memory, idle))
        for target in others:
            target.server.stop()


def _instance_suffix(instance: int) -> str:
    return f"#{instance + 1}" if instance else ""


def measure_breakdown(nodes_file: Path) -> list[tuple[str, float]]:
    """The app's steps timed in a fresh process (bench/http/breakdown.py)."""
    out = subprocess.run([sys.executable, "-m", "bench.http.breakdown", str(nodes_file)], capture_output=True,
                         cwd=REPO_ROOT, check=True, timeout=300).stdout
    return [(str(step), float(us)) for step, us in json.loads(out)]


def _shorten(arg: str, workdir: Path) -> str:
    """A command argument as the report shows it: $WORK for the work directory."""
    if arg.startswith(str(workdir) + "/"):
        return "$WORK/" + arg[len(str(workdir)) + 1:]
    return shlex.quote(arg)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("gunicorn", "flask", "werkzeug")} | {"openssl": _openssl(),
                                                                                "code": _code_version()}


def _code_version() -> str:
    """The commit measured, and whether webhook/ had uncommitted changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=REPO_ROOT, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "webhook"], capture_output=True, text=True,
                               cwd=REPO_ROOT, timeout=10).stdout.strip()
    except OSError:
        return "unknown"
    return (commit or "unknown") + (" with uncommitted changes in webhook/" if dirty else "")


def _openssl() -> str:
    import ssl

    return ssl.OPENSSL_VERSION


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench", description="Benchmark gpuclass serve (see bench/README.md)")
    p.add_argument("--quick", action="store_true", help="a few seconds: 10 nodes, one short round (CI smoke test)")
    p.add_argument("--sizes", default=None, help="GPU node counts, comma separated (default 10,1000,5000)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds per measurement (default 6)")
    p.add_argument("--instances", type=int, default=None,
                   help="processes each of the baseline and the headline server, rounds spread over them (default 2)")
    p.add_argument("--no-pin", action="store_true",
                   help="let servers and load generators share every CPU (default: CPUs of their own)")
    p.add_argument("--spread-trials", type=int, default=None,
                   help="reconnects of the pool per connection placement compared (default 12; --quick: none)")
    p.add_argument("--round-seconds", type=float, default=None, help="measured seconds per round (default 3)")
    p.add_argument("--connections", type=int, default=8, help="persistent connections in all (default 8)")
    p.add_argument("--processes", type=int, default=2, help="load generator processes (default 2)")
    p.add_argument("--no-configs", action="store_true", help="skip the gunicorn settings comparison")
    p.add_argument("--live", action="store_true", help="also time the live inventory's first sync (about 2 min)")
    p.add_argument("--live-nodes", type=int, default=5000)
    p.add_argument("--live-pods", type=int, default=150_000)
    p.add_argument("--live-gpu-pods", type=int, default=20_000)
    p.add_argument("--output", type=Path, default=None, help=f"markdown report (default {DEFAULT_OUTPUT.relative_to(REPO_ROOT)}; "
                   "--quick: bench/out/quick/RESULTS.md)")
    p.add_argument("--json", type=Path, default=None, dest="json_output", help="also write the results as JSON")
    p.add_argument("--workdir", type=Path, default=None, help="certificates, node files, logs (default bench/out/...)")
    p.add_argument("--startup-timeout", type=float, default=240.0, help="seconds for a server to start (default 240)")
    args = p.parse_args(argv)
    quick = bool(args.quick)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else ((10,) if quick else (10, 1000, 5000))
    settings = LoadSettings(
        processes=args.processes, connections=args.connections,
        rounds=args.rounds or (1 if quick else 6),
        warmup_seconds=0.2 if quick else 0.5,
        round_seconds=args.round_seconds or (0.7 if quick else 3.0),
    )
    workdir = args.workdir or REPO_ROOT / "bench" / "out" / ("quick" if quick else "run")  # reused: files are rewritten
    output = args.output or (REPO_ROOT / "bench" / "out" / "quick" / "RESULTS.md" if quick else DEFAULT_OUTPUT)
    python = os.path.relpath(sys.executable, Path.cwd()) if sys.executable.startswith(str(Path.cwd())) else sys.executable
    return Options(
        quick=quick, sizes=sizes, headline_nodes=max(sizes), settings=settings,
        compare_configs=not (quick or args.no_configs), live=bool(args.live), live_nodes=args.live_nodes,
        live_pods=args.live_pods, live_gpu_pods=args.live_gpu_pods, output=output, json_output=args.json_output,
        workdir=workdir.resolve(), startup_timeout_seconds=args.startup_timeout,
        snapshot_nodes=max(sizes) if quick else 5000,
        spread_trials=args.spread_trials if args.spread_trials is not None else (0 if quick else 12),
        instances=max(1, args.instances or (1 if quick else 2)), pin=not args.no_pin,
        command=" ".join([python, "-m", "bench", *(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    started = time.monotonic()
    suite = Suite(options)
    try:
        results = suite.run()
    finally:
        suite.close()
    results.wall_seconds = time.monotonic() - started
    text = report.render(results)
    print(text)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    old = options.output.read_text() if options.output.exists() else ""
    options.output.write_text(carry_sections(old, text))
    if options.json_output is not None:
        options.json_output.write_text(json.dumps(_jsonable(results), indent=2) + "\n")
    errors = results.correctness_errors()
    if errors:
        print(f"bench: {errors} responses were wrong or missing (see the errors column)", file=sys.stderr)
    return 1 if errors else 0


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, LoadResult):
            out["failed"] = value.failed
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value
