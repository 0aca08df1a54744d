"""How connections land on workers: each way of placing them, through churn of the pool.

Every trial opens the load generator's connection pool afresh on the same servers (as the API server
does after a restart or an idle timeout), all its connections at once, loads it briefly, reads which
worker holds each connection and how many requests each worker answered, and leaves each connection
in the middle of a request, as a client that exits under load does (gunicorn's gthread worker once
miscounted such connections, and the next pool then went to one worker). The options
(bench/common/variant.py `--placement`):

- balanced: the project's worker (webhook/serving/balance.py), what `gpuclass serve` runs;
- accept: gunicorn's gthread worker; the first worker to call accept() wins;
- reuse-port: gunicorn's `reuse_port`, one SO_REUSEPORT listener per worker, the kernel hashes;
- cap: gunicorn's gthread worker with `worker_connections` just above an even share.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .measure import Body, LoadSettings, RoundFigures, Target, measure, prime
from bench.common.procs import ServerProcess
from bench.common.variant import PLACEMENTS


@dataclass(frozen=True)
class SpreadResult:
    placement: str
    rounds: tuple[RoundFigures, ...]
    failed: int
    reconnects: int

    def splits(self) -> list[str]:
        """Connections per worker, fullest first, with how often each split was seen."""
        seen: dict[str, int] = {}
        for r in self.rounds:
            key = "/".join(str(n) for n in sorted(r.connections_per_worker, reverse=True))
            seen[key] = seen.get(key, 0) + 1
        return [f"{k} x{n}" for k, n in sorted(seen.items(), key=lambda kv: -kv[1])]

    @property
    def worst_balance(self) -> float:
        return min((r.balance for r in self.rounds), default=1.0)

    def rounds_below(self, share: float) -> int:
        """Pools in which a worker answered, or held, less than `share` of the busiest worker's."""
        return sum(1 for r in self.rounds if min(r.balance, r.connection_balance) < share)


def measure_spread(start: Callable[[str], ServerProcess | None], body: Body, settings: LoadSettings, workdir: Path,
                   trials: int) -> list[SpreadResult]:
    """`trials` short closed-loop rounds per placement, interleaved over the placements."""
    servers = [(p, start(p)) for p in PLACEMENTS]
    targets = [(p, Target(s, expect_patch=True)) for p, s in servers if s is not None]
    # placement does not depend on a quiet machine: a short wait keeps many trials affordable
    short = dataclasses.replace(settings, rounds=trials, warmup_seconds=0.2, round_seconds=0.6, quiet_wait_seconds=2.0,
                                churn=True)
    try:
        prime([t for _, t in targets], body, settings, workdir)
        results = measure([(t,) for _, t in targets], body, "closed", short, workdir)
    finally:
        for _, t in targets:
            t.server.stop()
    return [SpreadResult(p, r.rounds, r.failed, r.reconnects) for (p, _), r in zip(targets, results)]

