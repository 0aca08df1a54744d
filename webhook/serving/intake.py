"""Read each request whole in the worker's event loop, before a request thread takes it.

gunicorn's gthread worker hands a connection to a request thread as soon as it is accepted or
readable, and the thread then reads the TLS handshake, the headers and the body with blocking
reads. A socket timeout bounds each read, not the request: a client that sends one byte a second
holds the thread for as long as it likes, and two such clients held both threads of the default
server (`--workers 2 --threads 1`), so the API server's calls waited or timed out.

Here the worker's main loop does that reading itself, on non-blocking sockets: it shakes hands,
buffers the headers and then the body up to its Content-Length, and only hands the complete request
to a thread (gunicorn's own parser then reads it from memory, and can never wait on the socket). A
slow client costs a buffer and a slot in the poller, not a thread, so the threads stay free for the
requests that have arrived whole.

Each request has a deadline (`IntakeLimits`): it must be read within `read_seconds` (from the accept
for a new connection, which includes the handshake; from its first byte on a kept-alive one), and
answered within `answer_seconds`, both under the API server's webhook timeout (5 s). A request not
read in time is cut: answered 408 (503 if it waited for buffer memory), logged, and for `/mutate`
counted in `gpu_class_admission_requests_total` (outcomes `too-slow`, `busy`). A body over
`max_body_bytes` is answered 413 before it is read, logged and counted (`too-large`).

Memory is bounded per worker: headers up to `max_head_bytes` per connection, and bodies only with a
reservation of their declared length from a budget of `buffer_bytes`; a body that does not fit waits
(its connection is not read) until one is released. Bodies above `small_body_bytes` may not take the
last `small_reserve_bytes`, so slow clients declaring large bodies cannot keep the budget from the
small ones the API server sends for most Pods.

Chunked request bodies have no length to reserve and are answered 411: the callers (the API server,
kube-scheduler, the kubelet, Prometheus) send Content-Length. HTTP/2 is not offered (no ALPN).
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import time
from collections import OrderedDict
from functools import partial
from typing import Any

from gunicorn import http as ghttp
from gunicorn import sock as gsock
from gunicorn.workers.gthread import ThreadWorker

from . import logs
from .config import IntakeLimits
from .request import RESERVE, BodyBudget, BufferUnreader, Intake, Outcome, Phase, Refused, error_response

log = logging.getLogger("gpu_class.server")

READ_CHUNK_BYTES = 256 * 1024  # the most one recv() asks for
LINGER_SECONDS = 1.0  # a closed connection is read (and discarded) this long, so the answer is not lost to a reset
# and at most this much of it: a client still sending the rest of a body refused as too large is no caller that
# reads answers (the API server never sends one). Past it the connection is no longer read but held to its
# deadline: closed at once, the sender would open the next one (and cost the loop a TLS handshake) at full speed
LINGER_MAX_BYTES = 256 * 1024
MIN_WRITE_SECONDS = 0.5  # a thread writes its answer with at least this timeout, even past the deadline


def send_now(sock: socket.socket, data: bytes) -> bool:
    """Write `data` without waiting (the socket is non-blocking); False when it did not all go."""
    view = memoryview(data)
    try:
        while view:
            view = view[sock.send(view):]
    except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, OSError):
        return False
    return True


# --- the worker ----------------------------------------------------------------------------------


class IntakeThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker that gives a request to a thread only once it has been read whole."""

    intake_limits = IntakeLimits()  # the server sets its own before fork (server.py)
    nr_conns: int

    def init_process(self) -> None:
        self.init_intake()
        super().init_process()

    def init_intake(self) -> None:
        self._budget = BodyBudget(self.intake_limits)
        # connections being read, in the order of their deadlines (every deadline is its start plus the same time)
        self._reading: OrderedDict[Any, float] = OrderedDict()
        self._lingering = Lingering(self)
        self._waiting: list[Any] = []  # for a reservation, first come first served
        self._resuming = False
        self._released_again = False

    # -- where gthread hands connections to threads
    def enqueue_req(self, conn: Any) -> None:
        intake: Intake | None = getattr(conn, "intake", None)
        if intake is not None and intake.phase is Phase.READY:
            super().enqueue_req(conn)
        else:
            self._begin(conn)

    def _begin(self, conn: Any) -> None:
        now = time.monotonic()
        intake: Intake | None = getattr(conn, "intake", None)
        try:
            if intake is None:  # accepted just now
                intake = conn.intake = Intake(self.intake_limits, now)
                if self.cfg.is_ssl:
                    # no I/O yet: the handshake is done here, in steps, as its bytes arrive
                    conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                        conn.sock, server_side=True, do_handshake_on_connect=False,
                        suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
                    intake.phase = Phase.HANDSHAKE
                else:
                    _ready_parser(self.cfg, conn)
            else:  # kept alive: its next request has begun to arrive
                intake.restart(now)
                intake.buffer[:0] = conn.parser.unreader.take_buffered()
            conn.sock.setblocking(False)
        except (OSError, ValueError) as exc:  # the peer left before (ENOTCONN)
            log.debug("connection dropped before its request: %s", exc)
            self._drop(conn)
            return
        self._reading.pop(conn, None)
        self._reading[conn] = intake.read_by
        self._want(conn, selectors.EVENT_READ)
        self._advance(conn)

    def _want(self, conn: Any, events: int) -> None:
        intake: Intake = conn.intake
        if intake.events == events:
            return
        if intake.events:
            self.poller.modify(conn.sock, events, partial(self._advance, conn))
        else:
            self.poller.register(conn.sock, events, partial(self._advance, conn))
        intake.events = events

    def _unwatch(self, conn: Any) -> None:
        intake: Intake = conn.intake
        if intake.events:
            _unregister(self.poller, conn)
            intake.events = 0

    def _advance(self, conn: Any, _fileobj: Any = None) -> None:
        """Read what has arrived; hand the request on once whole, refuse it, or wait for more."""
        intake: Intake = conn.intake
        try:
            if intake.phase is Phase.HANDSHAKE:
                wants = _handshake_wants(conn.sock)
                if wants is not None:
                    return self._want(conn, wants)
                intake.phase = Phase.HEAD
                _ready_parser(self.cfg, conn)
                self._want(conn, selectors.EVENT_READ)
            while True:
                step = intake.next_step()
                if step is None:
                    return self._hand_over(conn)
                if isinstance(step, Refused):
                    return self._refuse(conn, step)
                if step == RESERVE:
                    if not self._reserve(conn):
                        return
                    continue
                assert isinstance(step, int)
                try:
                    data = conn.sock.recv(min(step, READ_CHUNK_BYTES))
                except (ssl.SSLWantReadError, BlockingIOError):
                    return self._want(conn, selectors.EVENT_READ)
                except ssl.SSLWantWriteError:
                    return self._want(conn, selectors.EVENT_WRITE)
                if not data:
                    if intake.buffer or intake.phase is Phase.BODY:
                        log.debug("client %s closed its connection in the middle of a request", _peer(conn))
                    return self._close(conn)
                intake.buffer += data
        except (OSError, ssl.SSLError, ValueError) as exc:  # a reset, a failed handshake (logged by tls.py for the extender)
            log.debug("connection from %s dropped while reading a request: %s", _peer(conn), exc)
            self._close(conn)

    def _reserve(self, conn: Any) -> bool:
        intake: Intake = conn.intake
        if not self._budget.reserve(intake.body_bytes):
            if not intake.waiting:
                intake.waiting = True
                self._waiting.append(conn)
            self._unwatch(conn)  # not read until a reservation frees
            return False
        intake.reserved_bytes, intake.waiting = intake.body_bytes, False
        self._want(conn, selectors.EVENT_READ)
        if intake.framing is not None and intake.framing.expect_continue and len(intake.buffer) < intake.total_bytes:
            intake.continue_sent = send_now(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _release(self, conn: Any) -> None:
        intake: Intake | None = getattr(conn, "intake", None)
        if intake is None:
            return
        if intake.waiting:
            intake.waiting = False
            self._waiting.remove(conn)
        if intake.reserved_bytes:
            self._budget.release(intake.reserved_bytes)
            intake.reserved_bytes = 0
            self._resume_waiting()

    def _resume_waiting(self) -> None:
        if self._resuming:
            self._released_again = True  # offered once the pass under way ends
            return
        self._resuming = True
        try:
            while True:
                self._released_again = False
                waiting, self._waiting = self._waiting, []
                for conn in waiting:
                    conn.intake.waiting = False
                for conn in waiting:
                    if conn in self._reading:
                        self._advance(conn)  # reserves, or waits again in the same order
                if not self._released_again:
                    break
        finally:
            self._resuming = False

    def _hand_over(self, conn: Any) -> None:
        intake: Intake = conn.intake
        self._unwatch(conn)
        self._reading.pop(conn, None)
        conn.parser.unreader.unread(intake.take_request())
        super().enqueue_req(conn)

    # -- in the request thread
    def handle_request(self, req: Any, conn: Any) -> bool:
        intake: Intake | None = getattr(conn, "intake", None)
        if intake is None:
            return bool(super().handle_request(req, conn))
        if intake.continue_sent:
            req._expected_100_continue = False  # sent by the intake already
        # the answer goes out by the request's deadline; a client that does not read it does not hold the thread
        conn.sock.settimeout(max(intake.answer_by - time.monotonic(), MIN_WRITE_SECONDS))
        try:
            return bool(super().handle_request(req, conn))
        except TimeoutError:
            report_cut(intake, "too-slow", 0, "the answer was not taken within the deadline", _peer(conn), "answer")
            raise StopIteration() from None  # gthread closes the connection

    # -- back in the main loop
    def finish_request(self, conn: Any, fs: Any) -> None:
        intake: Intake | None = getattr(conn, "intake", None)
        if intake is None:
            return super().finish_request(conn, fs)  # type: ignore[no-any-return]
        intake.phase = Phase.IDLE
        self._release(conn)
        try:
            keep = not fs.cancelled() and bool(fs.result())
        except Exception:
            keep = False
        if not keep:
            self.nr_conns -= 1
            return self._lingering.add(conn)
        super().finish_request(conn, fs)  # kept alive: on the poller until its next request
        if intake.buffer and conn in self.keepalived_conns:  # which has arrived already (pipelined)
            self.poller.unregister(conn.sock)
            self.keepalived_conns.remove(conn)
            self._begin(conn)
        return None

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        now = time.monotonic()
        for deadlines in (self._reading, self._lingering.until):
            for first in deadlines.values():
                timeout = max(min(timeout, first - now), 0.0)
                break
        super().wait_for_and_dispatch_events(timeout)
        self._cut_late()

    def _cut_late(self) -> None:
        now = time.monotonic()
        while self._reading:
            conn, read_by = next(iter(self._reading.items()))
            if read_by > now:
                break
            self._cut(conn)
        self._lingering.expire(now)

    def _cut(self, conn: Any) -> None:
        """The request was not read by its deadline: answer it if it began, and close."""
        intake: Intake = conn.intake
        self._reading.pop(conn, None)
        refusal = intake.refusal_at_deadline()
        if refusal is None:  # nothing of a request: a silent client, or one that never finished its handshake
            log.debug("connection from %s closed: no request within %ss (%s)", _peer(conn),
                      self.intake_limits.read_seconds, intake.phase.value)
            return self._close(conn)
        self._refuse(conn, refusal)

    def _refuse(self, conn: Any, refusal: Refused) -> None:
        intake: Intake = conn.intake
        answered = send_now(conn.sock, error_response(refusal.status, refusal.message))
        report_cut(intake, refusal.outcome, refusal.status if answered else 0, refusal.message, _peer(conn),
                     intake.phase.value)
        self._close(conn, linger=answered)

    def _close(self, conn: Any, *, linger: bool = False) -> None:
        """The connection is done with, from the intake."""
        self._unwatch(conn)
        self._reading.pop(conn, None)
        self._release(conn)
        self.nr_conns -= 1
        if linger:
            self._lingering.add(conn)
        else:
            _close_socket(conn)

    def _drop(self, conn: Any) -> None:
        self.nr_conns -= 1
        _close_socket(conn)



def _ready_parser(cfg: Any, conn: Any) -> None:
    conn.parser = ghttp.get_parser(cfg, conn.sock, conn.client)
    conn.parser.unreader = BufferUnreader()
    conn.initialized = True  # gthread's handle() must not wrap or wait for it again


def _handshake_wants(sock: ssl.SSLSocket) -> int | None:
    """What the poller waits for before a TLS handshake can go on; None once it is done."""
    try:
        sock.do_handshake()
    except ssl.SSLWantReadError:
        return selectors.EVENT_READ
    except ssl.SSLWantWriteError:
        return selectors.EVENT_WRITE
    if gsock.is_http2_negotiated(sock):
        raise ssl.SSLError("HTTP/2 was not offered")
    return None


def _unregister(poller: selectors.BaseSelector, conn: Any) -> None:
    try:
        poller.unregister(conn.sock)
    except (KeyError, ValueError, OSError):
        pass


def _close_socket(conn: Any) -> None:
    try:
        conn.sock.close()
    except OSError:
        pass


def _peer(conn: Any) -> str | None:
    client = getattr(conn, "client", None)
    if isinstance(client, tuple) and len(client) >= 2:
        return f"{client[0]}:{client[1]}"
    return None


def report_cut(intake: Intake, outcome: Outcome, status: int, message: str, peer: str | None, phase: str) -> None:
    """One log line per request cut or refused; one count when it was the API server's /mutate."""
    method, path = intake.where()
    if path == "/mutate":
        from . import metrics  # imported in the worker: the multiprocess directory is set by then

        metrics.observe_cut(outcome)
    if log.isEnabledFor(logging.INFO):
        logs.write_record(log.name, "request cut", {
            "outcome": outcome, "status": status or None, "method": method, "path": path, "peer": peer,
            "phase": phase, "received_bytes": len(intake.buffer),
            "content_length": intake.framing.content_length if intake.framing else None, "message": message,
            "duration_ms": round((time.monotonic() - intake.started) * 1000, 3)})


class Lingering:
    """Connections closed after an answer: half-closed, then what the client still sends is read and dropped for
    a moment, so that closing with unread bytes does not reset the connection before the client has read the
    answer (RFC 9112 9.6). Never blocks the loop, unlike gunicorn's close_graceful."""

    def __init__(self, worker: IntakeThreadWorker) -> None:
        self.worker = worker  # its poller exists only once gthread's init_process has run
        self.until: OrderedDict[Any, float] = OrderedDict()  # in the order of their deadlines

    def add(self, conn: Any) -> None:
        try:
            if conn.sock.fileno() < 0:
                return
            conn.sock.shutdown(socket.SHUT_WR)  # an SSLSocket reads raw bytes from now on
            conn.sock.setblocking(False)
            self.worker.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))
        except (OSError, ValueError, KeyError):
            _close_socket(conn)
            return
        self.until[conn] = time.monotonic() + LINGER_SECONDS

    def expire(self, now: float) -> None:
        while self.until:
            conn, until = next(iter(self.until.items()))
            if until > now:
                break
            self.until.pop(conn)
            _unregister(self.worker.poller, conn)
            _close_socket(conn)

    def _on_readable(self, conn: Any, _fileobj: Any) -> None:
        try:
            for _ in range(4):  # then the other connections' turn: the poller calls again while bytes remain
                read = len(conn.sock.recv(65536))
                conn.lingered = getattr(conn, "lingered", 0) + read
                if not read:
                    break
                if conn.lingered >= LINGER_MAX_BYTES:
                    _unregister(self.worker.poller, conn)  # held unread until its deadline (expire closes it)
                    return
            else:
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self.until.pop(conn, None)
        _unregister(self.worker.poller, conn)
        _close_socket(conn)
