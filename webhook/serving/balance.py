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

Placing new connections is not enough once a pool has been placed: when a worker dies, its
connections come back to the survivors before gunicorn has started a replacement, and a client under
steady load (the API server) keeps them for as long as it sends. So a worker holding two or more
connections more than a sibling answers its next request with `Connection: close` (one connection at
a time, until the sibling has taken it): the client opens a new one, which the sibling takes.

The count a worker publishes is gunicorn's `nr_conns`, which gunicorn's gthread worker lowers twice
for a connection whose TLS handshake or request its peer cut off (the socket is closed in handle(),
closing it again in finish_request() raises, and the except branch counts it closed once more). A
count one too low reads as "not accepting" to the siblings, which then leave this worker no new
connection at all; finish_request() here retires at most one connection, as it should.

SO_REUSEPORT listeners per worker (gunicorn's `reuse_port`) were measured too: the kernel spreads
connections by a hash of their addresses, which is as random as the race, and connections queued on
the listener of a worker that is starting, stopping or dead are lost.
"""

from __future__ import annotations

import mmap
import threading
import time
from typing import Any

from .intake import IntakeThreadWorker

SLOTS = 256  # more than any worker count; a slot is freed when its worker exits
NOT_ACCEPTING = -1
# then accept anyway: the API server waits seconds for a webhook; a sibling merely starved of CPU on
# a busy node still takes the connection well within this
MAX_DEFER_SECONDS = 0.2
PAUSE_SECONDS = 0.005  # how long the listener stays out of the poller after leaving a connection
# a shed connection not taken by a sibling by then (the client went away, or took it elsewhere):
# the next one may be shed
SHED_SETTLE_SECONDS = 1.0


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


class BalancedThreadWorker(IntakeThreadWorker):
    """gunicorn's gthread worker that leaves a new connection to a sibling holding fewer (and reads each
    request whole before a thread takes it: intake.py)."""

    connection_table: ConnectionTable | None = None  # set by ConnectionTable.assign before fork
    connection_slot: int = 0
    nr_conns: int  # gunicorn's count of the connections this worker holds
    _serving = False  # accepting since run() began, until the worker stops
    _paused_until = 0.0
    _deferring_since: float | None = None
    _deferred_to = (0, 0)  # the sibling this worker began leaving connections to, as first_in_line says
    _shed_at: float | None = None  # when this worker last closed a connection for a sibling to take
    _shed_for = (0, 0)  # that sibling, as first_in_line said then

    def init_process(self) -> None:
        self._shed_lock = threading.Lock()  # request threads decide on shedding one at a time
        super().init_process()

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

    def finish_request(self, conn: Any, fs: Any) -> None:
        held = self.nr_conns
        super().finish_request(conn, fs)
        # one request retires at most its own connection (gunicorn may count it closed twice: see above)
        self.nr_conns = max(self.nr_conns, held - 1)

    def handle_request(self, req: Any, conn: Any) -> bool:
        if self._should_shed():
            req.must_close = True  # answered with Connection: close, then closed like any such request
        return bool(super().handle_request(req, conn))

    def _should_shed(self) -> bool:
        """In a request thread: whether to close this connection so that a sibling holding fewer takes it."""
        table = self.connection_table
        if table is None or not self.alive:
            return False
        first = table.first_in_line(self.connection_slot)
        if first is None or self.nr_conns - first[0] < 2:
            return False
        with self._shed_lock:
            now = time.monotonic()
            if self._shed_at is not None and first <= self._shed_for and now - self._shed_at < SHED_SETTLE_SECONDS:
                return False  # the last one shed has not reached the sibling yet
            self._shed_at, self._shed_for = now, first
            return True
