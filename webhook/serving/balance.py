"""Spread keep-alive connections evenly over the gunicorn workers.

The workers share one listening socket and each accepts whenever its main loop is woken, so which
worker gets a new connection is a race that one worker often wins every time: the API server holds
a few long-lived connections, and with all of them on one worker the other worker sits idle while
requests queue behind a single thread (bench/RESULTS.md, "Connection placement", has the figures).

Each worker publishes how many connections it holds in a table the master maps before forking
(shared anonymous memory, no locks: one writer per slot, aligned 32-bit values). A worker woken by
a new connection leaves it in the backlog while a sibling that is accepting holds fewer; that
sibling is woken by the same connection and takes it. Between workers holding as many, the lower
slot takes it: two workers that both see a tie would otherwise both accept. The wait is bounded (`MAX_DEFER_SECONDS`):
a sibling that is stuck or starved of CPU cannot leave a connection unanswered.

SO_REUSEPORT listeners per worker (gunicorn's `reuse_port`) were measured too: the kernel spreads
connections by a hash of their addresses, which is as random as the race, and connections queued on
the listener of a worker that is starting, stopping or dead are lost.
"""

from __future__ import annotations

import mmap
import time
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

SLOTS = 256  # more than any worker count; a slot is freed when its worker exits
NOT_ACCEPTING = -1
# then accept anyway: the API server waits seconds for a webhook; a sibling merely starved of CPU on
# a busy node still takes the connection well within this
MAX_DEFER_SECONDS = 0.2
PAUSE_SECONDS = 0.005  # how long the listener stays out of the poller after leaving a connection


class ConnectionTable:
    """Connections held per worker slot, shared by fork; -1: the slot's worker does not accept."""

    def __init__(self) -> None:
        # anonymous and MAP_SHARED: the workers see one table; the last value is how many slots have
        # been used, so a worker forked early also sees the siblings forked after it
        self._memory = mmap.mmap(-1, (SLOTS + 1) * 4)
        self.counts = memoryview(self._memory).cast("i")
        for i in range(SLOTS):
            self.counts[i] = NOT_ACCEPTING
        self.counts[SLOTS] = 0
        self._used: set[int] = set()  # the master's own record

    # in the master
    def assign(self, worker: Any) -> None:
        """pre_fork hook: give the worker about to be forked a slot."""
        slot = next(i for i in range(SLOTS) if i not in self._used)
        self._used.add(slot)
        self.counts[slot] = NOT_ACCEPTING
        self.counts[SLOTS] = max(self.counts[SLOTS], slot + 1)
        worker.connection_table = self
        worker.connection_slot = slot

    def release(self, worker: Any) -> None:
        """child_exit hook: the slot of an exited worker takes no more connections."""
        slot = getattr(worker, "connection_slot", None)
        if slot is not None:
            self.counts[slot] = NOT_ACCEPTING
            self._used.discard(slot)

    # in a worker
    def first_in_line(self, slot: int) -> tuple[int, int] | None:
        """(connections, slot) of the other accepting worker next in line: fewest connections, then
        lowest slot; None when no other worker accepts."""
        first: tuple[int, int] | None = None
        for i in range(self.counts[SLOTS]):
            if i != slot and (n := self.counts[i]) != NOT_ACCEPTING and (first is None or (n, i) < first):
                first = (n, i)
        return first


class BalancedThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker that leaves a new connection to a sibling holding fewer."""

    connection_table: ConnectionTable | None = None  # set by ConnectionTable.assign before fork
    connection_slot: int = 0
    _serving = False  # accepting since run() began, until the worker stops
    _paused_until = 0.0
    _deferring_since: float | None = None
    _deferred_to = (0, 0)  # the sibling this worker began leaving connections to, as first_in_line says

    def _publish(self) -> None:
        if self.connection_table is not None:
            held = self.nr_conns if self._serving and self.alive else NOT_ACCEPTING
            self.connection_table.counts[self.connection_slot] = held

    def set_accept_enabled(self, enabled: bool) -> None:
        if enabled and time.monotonic() < self._paused_until:
            return  # run() asks on every loop; the pause decides
        super().set_accept_enabled(enabled)
        self._serving = enabled or (self._serving and self.alive)
        self._publish()  # a stopping worker says so at once: siblings must not leave connections to it

    def accept(self, listener: Any) -> None:
        table = self.connection_table
        if table is not None and self.alive:
            first = table.first_in_line(self.connection_slot)
            if first is not None and first < (self.nr_conns, self.connection_slot):
                now = time.monotonic()
                if self._deferring_since is None or first > self._deferred_to:
                    self._deferring_since, self._deferred_to = now, first  # a new wait: the sibling took one
                if now - self._deferring_since < MAX_DEFER_SECONDS:
                    # level-triggered: the readable listener leaves the poller for a moment, or the loop spins
                    super().set_accept_enabled(False)
                    self._paused_until = now + PAUSE_SECONDS
                    return
        self._deferring_since = None
        super().accept(listener)
        self._publish()

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        # connections closed in callbacks and murder_*() lower nr_conns: publish once per loop
        self._publish()
        if self._paused_until:
            left = self._paused_until - time.monotonic()
            if left > 0:
                timeout = min(timeout, left)
            else:
                self._paused_until = 0.0
                if self.alive:
                    super().set_accept_enabled(True)
        super().wait_for_and_dispatch_events(timeout)
