"""Render the results as markdown (printed, and written to bench/RESULTS.md), with the targets judged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from bench.common.percentiles import median
from .measure import LoadResult, paired_ratios
from bench.common.procs import REPO_ROOT

if TYPE_CHECKING:
    from .results import Results

# the targets, for a 2-core machine
MIN_THROUGHPUT_RATIO = 0.90
MAX_CPU_RATIO = 1.10
MIN_WORKER_SHARE = 1 / 3  # of the busiest worker's requests, in every round
MAX_P99_RATIO = 1.5
MAX_COST_GROWTH = 0.10
MAX_WORKER_RSS_MB = 150.0


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    passed: bool | None  # None: not measured in this run

    @property
    def mark(self) -> str:
        return "n/a" if self.passed is None else ("PASS" if self.passed else "MISS")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def mb(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


NOISY_SHARE = 0.05  # CPU used by neither the server nor the load generator, above which a row is flagged


def errors_cell(result: LoadResult) -> str:
    noisy = f" (other processes used {result.other_cpu_share:.0%} of the CPU)" if result.other_cpu_share > NOISY_SHARE else ""
    if not result.failed:
        return "0" + noisy
    return f"**{result.failed}**: " + "; ".join(f"{k} x{v}" for k, v in result.errors.items()) + noisy


def default_loads(r: Results) -> list[LoadResult]:
    """Every measurement of `gpuclass serve`'s default settings (and the baseline on the same)."""
    loads = [r.baseline_closed, r.mutation_closed, r.baseline_open, r.mutation_open, *(s.closed for s in r.sizes)]
    return [x for x in loads if x is not None]


def verdicts(r: Results) -> list[Verdict]:
    out: list[Verdict] = []
    heads = f"{r.options.headline_nodes:,} nodes"
    rounds = [x for load in default_loads(r) for x in load.rounds if x.requests_per_worker]
    if rounds:
        worst = min(rounds, key=lambda x: x.balance)
        out.append(Verdict(
            f"in every round, no worker below {MIN_WORKER_SHARE:.2f} of the busiest worker's requests "
            f"({len(rounds)} rounds, {r.default_config.name})",
            f"worst {worst.balance:.2f} ({_slash(worst.requests_per_worker)} requests, "
            f"{_slash(worst.connections_per_worker)} connections)",
            worst.balance >= MIN_WORKER_SHARE))
    churned = next((x for x in r.spread if x.placement == "balanced"), None)
    if churned is not None and churned.rounds:
        worst = min(churned.rounds, key=lambda x: min(x.balance, x.connection_balance))
        out.append(Verdict(
            f"through churn, in every pool, no worker below {MIN_WORKER_SHARE:.2f} of the busiest worker's requests "
            f"or connections ({len(churned.rounds)} pools, bench/http/spread.py)",
            f"worst {worst.balance:.2f} ({_slash(worst.requests_per_worker)} requests, "
            f"{_slash(worst.connections_per_worker)} connections)",
            min(worst.balance, worst.connection_balance) >= MIN_WORKER_SHARE))
    if r.baseline_closed and r.mutation_closed and r.baseline_closed.throughput_rps:
        ratios = paired_ratios(r.mutation_closed, r.baseline_closed, "throughput_rps")
        ratio = median(ratios)
        out.append(Verdict(
            f"mutation ({heads}) keeps >= {MIN_THROUGHPUT_RATIO:.0%} of the baseline's peak throughput "
            f"(median of {len(ratios)} interleaved rounds)",
            f"{ratio:.0%} (rounds {_ratios(ratios)}; all rounds {r.mutation_closed.throughput_rps:,.0f} / "
            f"{r.baseline_closed.throughput_rps:,.0f} req/s)",
            ratio >= MIN_THROUGHPUT_RATIO))
        cpu = paired_ratios(r.mutation_closed, r.baseline_closed, "server_cpu_us_per_request")
        out.append(Verdict(
            f"mutation ({heads}) costs <= {MAX_CPU_RATIO:.2f}x the baseline's server CPU per request "
            f"(median of {len(cpu)} interleaved rounds)",
            f"{median(cpu):.2f}x (rounds {_ratios(cpu)}; all rounds {r.mutation_closed.server_cpu_us_per_request:,.0f} / "
            f"{r.baseline_closed.server_cpu_us_per_request:,.0f} us)",
            median(cpu) <= MAX_CPU_RATIO))
    if r.baseline_open and r.mutation_open and r.baseline_open.p99_ms:
        # per round, as the other ratios: pooled, one stalled round of either server decides the p99
        p99 = paired_ratios(r.mutation_open, r.baseline_open, "p99_ms")
        out.append(Verdict(
            f"p99 within {MAX_P99_RATIO}x of the baseline's at half the baseline's peak rate ({r.half_rate:,.0f} req/s, "
            f"median of {len(p99)} interleaved rounds)",
            f"{median(p99):.2f}x (rounds {_ratios(p99)}; all rounds pooled {ms(r.mutation_open.p99_ms)} / "
            f"{ms(r.baseline_open.p99_ms)} ms)",
            median(p99) <= MAX_P99_RATIO))
    by_nodes = {s.nodes: s for s in r.sizes}
    small, large = by_nodes.get(10), by_nodes.get(5000)
    if small and large:
        a, b = small.closed.server_cpu_us_per_request, large.closed.server_cpu_us_per_request
        growth = paired_ratios(large.closed, small.closed, "server_cpu_us_per_request")
        out.append(Verdict(
            "5,000 nodes cost no more per request than 10 nodes, within 10% (server CPU per request, "
            f"median of {len(growth)} interleaved rounds)",
            f"{median(growth) - 1:+.0%} (rounds {_ratios(growth)}; all rounds {b:,.0f} / {a:,.0f} us)",
            median(growth) <= 1 + MAX_COST_GROWTH))
        rss = max(m.rss_kib for m in large.worker_memory) / 1024
        out.append(Verdict(f"a worker with 5,000 nodes under {MAX_WORKER_RSS_MB:.0f} MB RSS",
                           f"{rss:.0f} MB",
                           rss < MAX_WORKER_RSS_MB))
    else:
        out.append(Verdict("5,000 nodes cost no more per request than 10 nodes, within 10%", "not run", None))
        out.append(Verdict(f"a worker with 5,000 nodes under {MAX_WORKER_RSS_MB:.0f} MB RSS", "not run", None))
    return out


def _slash(values: Sequence[int]) -> str:
    return "/".join(f"{v:,}" for v in values)


def _placement_note(r: Results) -> str:
    o = r.options
    where = (f" Servers run on CPU {_cpus(r.cores_used.server)}, the load generators and the bench on CPU "
             f"{_cpus(r.cores_used.load)} (sched_setaffinity): sharing every core, one and the same server differed by "
             "up to 15% in CPU per request from one round to the next; on cores of their own, by about 1%."
             if r.cores_used else " Servers and load generators share every CPU"
             + (" (`--no-pin`)." if not o.pin else " (one CPU: nothing to split)."))
    if o.instances > 1:
        where += (f" The baseline and the {o.headline_nodes:,}-node server each run as {o.instances} processes "
                  "started alike, and their rounds go to each in turn: processes started alike differ by a few "
                  "percent in CPU per request for as long as they run.")
    return where


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _instance_note(*results: LoadResult) -> str:
    notes = []
    for result in results:
        by_instance: dict[str, list[float]] = {}
        for x in result.rounds:
            by_instance.setdefault(x.instance or result.server, []).append(x.server_cpu_us_per_request)
        if len(by_instance) > 1:
            notes.append(" / ".join(f"{name} {median(v):,.0f}" for name, v in by_instance.items()))
    return f" Server CPU us per request by process (closed loop, median of its rounds): {'; '.join(notes)}." if notes else ""


def _ratios(values: Sequence[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def round_rows(label: str, result: LoadResult) -> list[list[str]]:
    rows = []
    for i, x in enumerate(result.rounds, 1):
        rows.append([label.replace(result.server, x.instance or result.server), str(i), f"{x.throughput_rps:,.0f}", f"{x.server_cpu_us_per_request:,.0f}", ms(x.p99_ms),
                     _slash(x.connections_per_worker), _slash(x.requests_per_worker),
                     "/".join(f"{c:.2f}" for c in x.worker_cpu_seconds), f"{x.master_cpu_seconds:.2f}",
                     f"{x.balance:.2f}", f"{x.machine_busy:.0%}"])
    return rows


ROUND_HEADER = ["server", "round", "req/s", "server CPU us/req", "p99 ms", "connections per worker",
                "requests per worker", "worker CPU s", "master CPU s", "least/most requests", "CPU busy"]


def load_row(label: str, result: LoadResult) -> list[str]:
    load = "closed loop (peak)" if result.mode == "closed" else f"open loop {result.rate_per_second:,.0f}/s"
    return [label, load, f"{result.throughput_rps:,.0f}", ms(result.p50_ms), ms(result.p90_ms), ms(result.p99_ms),
            ms(result.max_ms), f"{result.server_cpu_us_per_request:,.0f}", f"{result.client_cpu_us_per_request:,.0f}",
            f"{result.machine_busy:.0%}", errors_cell(result)]


LOAD_HEADER = ["server", "load", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "server CPU us/req",
               "client CPU us/req", "CPU busy", "failed"]


def render(r: Results) -> str:
    o = r.options
    s = o.settings
    parts: list[str] = ["# gpu-class benchmark results", ""]
    parts.append(
        f"`{o.command}` on {r.started}, code {r.versions['code']}: {r.cores} cores, Python {r.python}, "
        f"gunicorn {r.versions['gunicorn']}, "
        f"Flask {r.versions['flask']}, Werkzeug {r.versions['werkzeug']}, {r.versions['openssl']}. "
        f"The whole run took {r.wall_seconds:.0f} s."
        + (" **Quick mode: numbers for the smoke test only.**" if o.quick else "")
        + (f" **The machine was {r.busy_before:.0%} busy with other work when the run started.**"
           if r.busy_before > 0.1 else "")
    )
    parts.append("")
    parts.append(
        f"Load: {s.connections} persistent HTTP/1.1 keep-alive connections over TLS, from {s.processes} load generator "
        f"processes (bench/http/loadgen.py); each measurement is {s.rounds} round(s) of {s.round_seconds:g} s after "
        f"{s.warmup_seconds:g} s of warm-up, alternating between the servers compared. Every request is the "
        f"AdmissionReview of a Deployment's Pod ({r.body_bytes:,} bytes, `gpu-class.io/class: high`), with its own "
        "uid; every response is checked: HTTP 200, uid echoed, allowed, and a JSON patch from the webhook."
        + _placement_note(r)
    )
    parts += ["", "## Targets (for a 2-core machine)", ""]
    parts.append(table(["target", "measured", "result"], [[v.target, v.measured, v.mark] for v in verdicts(r)]))

    if r.baseline_closed and r.mutation_closed and r.baseline_open and r.mutation_open:
        parts += ["", f"## Mutation against the baseline ({o.headline_nodes:,} GPU nodes, {r.default_config.name})", ""]
        parts.append(
            "The baseline runs the same WebhookServer (gunicorn settings, TLS, Flask) and answers every review "
            "with allowed: true after parsing it (bench/common/variant.py). Open loop: requests due at a fixed rate, "
            "latency counted from when each was due."
        )
        parts.append("")
        parts.append(table(LOAD_HEADER, [
            load_row("baseline", r.baseline_closed), load_row("mutation", r.mutation_closed),
            load_row("baseline", r.baseline_open), load_row("mutation", r.mutation_open),
        ]))
        tput = median(paired_ratios(r.mutation_closed, r.baseline_closed, "throughput_rps"))
        cpu_ratio = median(paired_ratios(r.baseline_closed, r.mutation_closed, "server_cpu_us_per_request"))
        parts += ["", (
            f"Medians over the interleaved rounds: throughput ratio mutation/baseline {tput:.2f}; "
            f"server CPU per request ratio baseline/mutation {cpu_ratio:.2f} (the throughput ratio the server would "
            f"reach with the machine to itself); p99 ratio at {r.half_rate:,.0f} req/s: "
            f"{median(paired_ratios(r.mutation_open, r.baseline_open, 'p99_ms')):.2f}. "
            f"Connections per worker in each round: baseline "
            f"{_spread(r.baseline_closed)}, mutation {_spread(r.mutation_closed)}. Every round of these and of the "
            "cluster sizes below is listed under \"Rounds\"."
            + _instance_note(r.baseline_closed, r.mutation_closed)
        )]

    if r.sizes:
        parts += ["", f"## Cost and memory against cluster size ({r.default_config.name})", ""]
        rows = []
        for size in r.sizes:
            c = size.closed
            rows.append([
                f"{size.nodes:,}", f"{size.file_mib:.1f}", f"{size.server.master_check_seconds:.1f}",
                f"{size.server.startup_seconds:.1f}" + (" *" if size.server.note else ""),
                f"{c.throughput_rps:,.0f}", ms(c.p50_ms), ms(c.p99_ms), f"{c.server_cpu_us_per_request:,.0f}",
                "/".join(mb(m.rss_kib) for m in size.worker_memory), "/".join(mb(m.pss_kib) for m in size.worker_memory),
                "/".join(mb(m.private_kib) for m in size.worker_memory), mb(size.master_memory.rss_kib), errors_cell(c),
            ])
        parts.append(table(["GPU nodes", "node file MiB", "master check s", "all workers ready s", "req/s", "p50 ms",
                            "p99 ms", "server CPU us/req", "worker VmRSS MB", "worker PSS MB", "worker private MB",
                            "master VmRSS MB", "failed"], rows))
        parts += ["", "Memory is read after the load from /proc/<pid>/status (VmRSS: every resident page the worker "
                  "maps, including those it shares with the master since fork) and smaps_rollup (PSS: shared pages "
                  "divided among their sharers; private: pages only this worker has, what one more worker costs). "
                  "`master check`: from start until gunicorn listened (the master reads and checks the node file "
                  "before any worker starts)."]
        for problem in r.startup_problems:
            parts.append(f"\n**{problem.label} did not start**: {problem.reason.splitlines()[0]}")

    if r.snapshot or r.live:
        parts += ["", "## Building the inventory", ""]
        if r.snapshot:
            parts.append(f"- `webhook.core.view.inventory.build_snapshot` over {r.snapshot.nodes:,} parsed Node objects: "
                         f"{r.snapshot.build_snapshot_seconds * 1000:,.0f} ms ({r.snapshot.product_groups} product groups). "
                         "Reading the node file is the expensive part: see `master check` above.")
        if r.live:
            parts.append(_live_line(r))
        elif not o.quick:
            parts.append("- Live inventory first sync: not run (add `--live`).")

    if r.breakdown:
        parts += ["", "## Where the app's time goes (in-process, one thread, no gunicorn or TLS)", ""]
        parts.append(table(["step", "us per call"], [[step, f"{us:,.0f}"] for step, us in r.breakdown]))
        parts += ["", "bench/http/breakdown.py times each step of /mutate on the same body. Under load the server "
                  "spends more per request than these add up to: gunicorn, TLS and several threads per worker "
                  "contending for the GIL and the log handler's lock."]

    if default_loads(r):
        parts += ["", f"## Rounds ({r.default_config.name})", ""]
        parts.append("Each measurement above, round by round; round i of the servers compared ran next to each other. "
                     "Connections per worker: read from /proc at the start of the window (and again at its end, for "
                     "any connection reopened); requests per worker: the requests each connection answered in the "
                     "window (the load generator counts them by local port), added up by the worker holding it; "
                     "worker CPU: user + system seconds of each worker over the window.")
        parts.append("")
        rows = []
        for label, load in _labelled_loads(r):
            rows += round_rows(label, load)
        parts.append(table(ROUND_HEADER, rows))

    if r.spread:
        trials = len(r.spread[0].rounds)
        parts += ["", f"## Connection placement ({min(o.sizes):,} GPU nodes, {r.default_config.name})", ""]
        parts.append(
            f"Each way of placing connections on workers, through churn: {trials} pools of {s.connections} "
            "connections one after the other on the same servers, each opened at once (every TCP connection in "
            "the backlog before the first handshake), loaded "
            f"{0.6:g} s in closed loop and left in the middle of a request, as a client that exits under load "
            "leaves (interleaved; bench/http/spread.py). balanced: `gpuclass serve`'s "
            "worker (webhook/serving/balance.py: a worker leaves a new connection to a sibling holding fewer); "
            "accept: gunicorn's gthread worker, the first worker to call accept() wins; reuse-port: gunicorn's "
            "`reuse_port`, a SO_REUSEPORT listener per worker, the kernel picks by a hash of the addresses; "
            "cap: gunicorn's gthread worker with `worker_connections` just above an even share (5).")
        parts.append("")
        parts.append(table(
            ["placement", "connections per worker (fullest first) x pools", "worst least/most requests",
             f"pools with a worker below {MIN_WORKER_SHARE:.2f} (requests or connections)", "reconnects", "failed"],
            [[x.placement, ", ".join(x.splits()), f"{x.worst_balance:.2f}", str(x.rounds_below(MIN_WORKER_SHARE)),
              f"{x.reconnects:,}", str(x.failed)] for x in r.spread]))
        parts += ["", "The cap evens the split only by refusing: gthread closes a kept-alive connection once "
                  "`worker_connections - threads` others are kept alive (the reconnects), and connections beyond "
                  "workers x cap wait in the backlog until one closes; it also needs the client's pool size. "
                  "A SO_REUSEPORT listener belongs to one worker: connections the kernel queued on it while that "
                  "worker starts, stops or dies are lost."]

    if r.configs:
        parts += ["", f"## gunicorn settings ({min(o.sizes):,} GPU nodes)", ""]
        rows = []
        for conf in r.configs:
            rows.append([
                conf.config.name + (" (default)" if conf.config == r.configs[0].config else ""),
                f"{conf.closed.throughput_rps:,.0f}", ms(conf.closed.p50_ms), ms(conf.closed.p99_ms),
                f"{conf.closed.server_cpu_us_per_request:,.0f}", ms(conf.open.p50_ms), ms(conf.open.p99_ms),
                f"{conf.closed.reconnects + conf.open.reconnects:,}",
                "/".join(mb(m.rss_kib) for m in conf.worker_memory),
                f"{conf.idle.answered}/{conf.idle.probes}",
                errors_cell(conf.closed) if conf.closed.failed else errors_cell(conf.open),
            ])
        parts.append(table(["settings", "peak req/s", "p50 ms", "p99 ms", "server CPU us/req",
                            f"p50 ms at {r.half_rate:,.0f}/s", f"p99 ms at {r.half_rate:,.0f}/s", "reconnects",
                            "worker VmRSS MB", "/healthz with idle conns", "failed"], rows))
        parts += ["", "Sync workers close the connection after every response, so every request pays a new TLS "
                  "handshake (`reconnects`); the API server's connection pool cannot help them. "
                  "`/healthz with idle conns`: /healthz probes answered within 1 s on new connections while "
                  "2 x workers x threads other connections sit silent after connecting (bench/http/idle.py): gthread "
                  "gives a new connection a thread and reads its first request blocking, so silent clients hold "
                  "threads; which worker they land on is luck, so a partial count is the same failure. "
                  "Servers other than `gpuclass serve` are noted in the server list below."
                  + (f" Like every server here, these ran on CPU {_cpus(r.cores_used.server)} alone: the table "
                     "compares what each setting costs there, not how more workers spread over more cores."
                     if r.cores_used else "")]

    work = o.workdir.relative_to(REPO_ROOT) if o.workdir.is_relative_to(REPO_ROOT) else o.workdir
    parts += ["", "## Servers", "", f"Each ran as `.venv/bin/python COMMAND` from the repository root; `$WORK` is {work}.", ""]
    parts.append(table(["label", "nodes", "settings", "started with", "ready s"], [
        [s.label, "-" if s.nodes is None else f"{s.nodes:,}", s.config.name, f"`{s.started_with}`",
         f"{s.startup_seconds:.1f}" + (f" ({s.note})" if s.note else "")] for s in r.servers
    ]))
    parts += ["", "Columns: `server CPU us/req` is the CPU time of the gunicorn master and workers over the measured "
              "window divided by the requests answered (the cost of a request, steadier than req/s on a shared "
              "machine); `client CPU us/req` the same for the load generator; "
              "`CPU busy` the share of all cores not idle during the window. See bench/README.md.", ""]
    return "\n".join(parts)


def _labelled_loads(r: Results) -> list[tuple[str, LoadResult]]:
    out: list[tuple[str, LoadResult]] = []
    for label, load in (("baseline closed", r.baseline_closed), (f"mutation-{r.options.headline_nodes} closed", r.mutation_closed),
                        ("baseline open", r.baseline_open), (f"mutation-{r.options.headline_nodes} open", r.mutation_open)):
        if load is not None:
            out.append((label, load))
    out += [(f"mutation-{size.nodes} closed (sizes)", size.closed) for size in r.sizes]
    return out


def _spread(result: LoadResult) -> str:
    return ", ".join("/".join(str(n) for n in per_round) for per_round in result.connections_per_worker)


def _live_line(r: Results) -> str:
    live = r.live
    assert live is not None
    if live.error:
        return f"- Live inventory first sync: failed: {live.error}"
    x = live.result
    return (
        f"- Live inventory (`webhook.cluster.watch.LiveInventory` against tests/fakeapi.py in another process, "
        f"{live.nodes:,} Nodes, {live.pods:,} Pods of which about {live.gpu_pods:,} hold GPUs): first sync "
        f"{'in' if x['synced'] else 'NOT within'} {x['sync_seconds']:.1f} s wall, {x['cpu_seconds']:.1f} s of the "
        f"syncing process's CPU (the rest is the fake serving the lists; filling it took {live.populate_seconds:.0f} s). "
        f"RSS of that process: {mb(x['rss_before_kib'])} MB before, {mb(x['rss_at_sync_kib'])} MB at sync "
        f"(+{(x['rss_at_sync_kib'] - x['rss_before_kib']) / 1024:.0f} MB), {mb(x['rss_settled_kib'])} MB after a "
        f"garbage collection, peak {mb(x['hwm_kib'])} MB. It holds {x['gpu_nodes']:,} GPU nodes in "
        f"{x['product_groups']} product groups and {x['gpu_pods_accounted']:,} GPU Pods ({x['gpus_requested']:,} GPUs); "
        f"Pods watched: {x['watch_pods']}. Every gunicorn worker runs its own watches, so multiply by workers."
    )
