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

import enum
import json
import logging
import selectors
import socket
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, NamedTuple

from gunicorn import http as ghttp
from gunicorn import sock as gsock
from gunicorn.http.unreader import Unreader
from gunicorn.workers.gthread import ThreadWorker
from werkzeug.http import HTTP_STATUS_CODES

from . import logs
from .config import IntakeLimits

log = logging.getLogger("gpu_class.server")

READ_CHUNK_BYTES = 256 * 1024  # the most one recv() asks for
LINGER_SECONDS = 1.0  # a closed connection is read (and discarded) this long, so the answer is not lost to a reset
# and at most this much of it: a client still sending the rest of a body refused as too large is no caller that
# reads answers (the API server never sends one). Past it the connection is no longer read but held to its
# deadline: closed at once, the sender would open the next one (and cost the loop a TLS handshake) at full speed
LINGER_MAX_BYTES = 256 * 1024
MIN_WRITE_SECONDS = 0.5  # a thread writes its answer with at least this timeout, even past the deadline

Outcome = Literal["too-slow", "too-large", "busy", "bad-request"]


# --- the request head, read before a thread takes the request (pure) ---------------------------


class Framing(NamedTuple):
    """What the intake needs from a request head to know where the request ends."""

    method: str
    path: str
    version: tuple[int, int]
    content_length: int  # 0 without a Content-Length
    chunked: bool
    expect_continue: bool
    invalid: bool  # framing it cannot trust: handed on as it is, for gunicorn's parser to answer 400


def read_framing(head: bytes) -> Framing:
    """The framing of `head` (the request line and headers, with or without the blank line)."""
    lines = head.split(b"\r\n")
    method, path, version = read_request_line(lines[0])
    lengths: set[bytes] = set()
    chunked = expect = invalid = False
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue  # the blank line, or a malformed one gunicorn refuses
        name, value = name.lower(), value.strip(b" \t")
        if name == b"content-length":
            lengths.add(value)
            invalid |= not value.isdigit()
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"expect":
            expect = value.lower() == b"100-continue"
    invalid |= len(lengths) > 1 or (chunked and bool(lengths)) or version == (0, 0)
    content_length = int(next(iter(lengths))) if lengths and not invalid else 0
    return Framing(method, path, version, content_length, chunked and not invalid, expect and version >= (1, 1),
                   invalid)


def read_request_line(line: bytes) -> tuple[str, str, tuple[int, int]]:
    """(method, path, version) of a request line; version (0, 0) when it is not one."""
    parts = line.split(b" ")
    method = parts[0].decode("latin-1")[:16]
    path = parts[1].split(b"?", 1)[0].decode("latin-1")[:256] if len(parts) > 1 else ""
    version = (0, 0)
    if len(parts) == 3 and parts[2][:5] == b"HTTP/" and parts[2][5:6].isdigit() and parts[2][7:8].isdigit():
        version = (int(parts[2][5:6]), int(parts[2][7:8]))
    return method, path, version


class BodyBudget:
    """The body bytes one worker may hold: reservations of declared lengths, never more than the total."""

    def __init__(self, limits: IntakeLimits) -> None:
        self.limits = limits
        self.reserved_bytes = 0

    def reserve(self, length: int) -> bool:
        room = self.limits.buffer_bytes - self.reserved_bytes
        if length > self.limits.small_body_bytes:
            room -= self.limits.small_reserve_bytes
        if length > room:
            return False
        self.reserved_bytes += length
        return True

    def release(self, length: int) -> None:
        self.reserved_bytes -= length


# --- one connection's request, as it arrives ----------------------------------------------------


class Phase(enum.Enum):
    HANDSHAKE = "handshake"
    HEAD = "headers"
    BODY = "body"
    READY = "ready"  # read whole: a thread has it, or will
    IDLE = "idle"  # answered; kept alive, waiting for the next request


class Refused(NamedTuple):
    status: int
    outcome: Outcome
    message: str


RESERVE = "reserve"


@dataclass
class Intake:
    """One request being read on one connection: its bytes, deadlines and reservation."""

    limits: IntakeLimits
    started: float
    phase: Phase = Phase.HEAD
    buffer: bytearray = field(default_factory=bytearray)
    framing: Framing | None = None
    total_bytes: int = 0  # head and body, once the head is read
    reserved_bytes: int = 0
    waiting: bool = False  # for a reservation
    continue_sent: bool = False
    events: int = 0  # what the poller waits for on its socket (0: not registered)

    @property
    def read_by(self) -> float:
        return self.started + self.limits.read_seconds

    @property
    def answer_by(self) -> float:
        return self.started + self.limits.answer_seconds

    @property
    def body_bytes(self) -> int:
        return self.framing.content_length if self.framing is not None else 0

    def restart(self, now: float) -> None:
        """A new request on a kept-alive connection (bytes already read for it stay)."""
        self.started, self.phase, self.framing, self.total_bytes = now, Phase.HEAD, None, 0
        self.waiting = self.continue_sent = False

    def next_step(self) -> int | str | Refused | None:
        """Bytes to read next (int), RESERVE (the body needs a reservation first), a Refused, or None: read whole."""
        if self.phase is Phase.HEAD:
            while self.buffer[:2] == b"\r\n":  # RFC 9112 2.2: empty lines before a request line are ignored
                del self.buffer[:2]
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) >= self.limits.max_head_bytes:
                    return Refused(431, "too-large", f"request headers over {self.limits.max_head_bytes} bytes")
                return self.limits.max_head_bytes - len(self.buffer)
            self.framing = framing = read_framing(bytes(self.buffer[:end]))
            self.total_bytes = end + 4
            if framing.invalid:
                self.phase = Phase.READY  # gunicorn answers 400 from the head alone
                return None
            if framing.chunked:
                return Refused(411, "bad-request", "a request body needs a Content-Length")
            if framing.content_length > self.limits.max_body_bytes:
                return Refused(413, "too-large", f"body of {framing.content_length} bytes: the limit is "
                                                 f"{self.limits.max_body_bytes} (what the API server can send)")
            self.total_bytes += framing.content_length
            self.phase = Phase.BODY
        if self.phase is Phase.BODY:
            if self.body_bytes and not self.reserved_bytes:
                return RESERVE
            if len(self.buffer) >= self.total_bytes:
                self.phase = Phase.READY
                return None
            return self.total_bytes - len(self.buffer)
        return None

    def take_request(self) -> bytes:
        """The request's bytes; what follows them (a pipelined request) stays buffered."""
        if len(self.buffer) == self.total_bytes:
            request, self.buffer = bytes(self.buffer), bytearray()
            return request
        with memoryview(self.buffer) as view:  # one copy of a body that may be megabytes
            request = bytes(view[:self.total_bytes])
        del self.buffer[:self.total_bytes]
        return request

    def where(self) -> tuple[str | None, str | None]:
        """(method, path) as far as the request line has arrived."""
        if self.framing is not None:
            return self.framing.method, self.framing.path
        line, newline, _ = bytes(self.buffer[:1024]).partition(b"\r\n")
        if not newline:
            return None, None
        method, path, _version = read_request_line(line)
        return method, path


class BufferUnreader(Unreader):  # type: ignore[misc]
    """gunicorn's parser reads the request the intake buffered, and nothing from the socket."""

    def chunk(self, size_hint: int | None = None) -> bytes:
        return b""


def error_response(status: int, message: str) -> bytes:
    """A JSON error answer that closes the connection, as the app writes its errors."""
    reason = HTTP_STATUS_CODES.get(status, "Error")
    body = json.dumps({"error": reason, "message": message}, separators=(",", ":")).encode()
    return (f"HTTP/1.1 {status} {reason.upper()}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


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
        self._lingering: OrderedDict[Any, float] = OrderedDict()  # closing: read and dropped until then
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
                    self._ready_parser(conn)
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

    def _ready_parser(self, conn: Any) -> None:
        conn.parser = ghttp.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader = BufferUnreader()
        conn.initialized = True  # gthread's handle() must not wrap or wait for it again

    def _want(self, conn: Any, events: int) -> None:
        intake: Intake = conn.intake
        if intake.events == events:
            return
        if intake.events:
            self.poller.modify(conn.sock, events, partial(self._on_event, conn))
        else:
            self.poller.register(conn.sock, events, partial(self._on_event, conn))
        intake.events = events

    def _unwatch(self, conn: Any) -> None:
        intake: Intake = conn.intake
        if intake.events:
            self._unregister(conn)
            intake.events = 0

    def _on_event(self, conn: Any, _fileobj: Any) -> None:
        self._advance(conn)

    def _advance(self, conn: Any) -> None:
        """Read what has arrived; hand the request on once whole, refuse it, or wait for more."""
        intake: Intake = conn.intake
        try:
            if intake.phase is Phase.HANDSHAKE:
                try:
                    conn.sock.do_handshake()
                except ssl.SSLWantReadError:
                    return self._want(conn, selectors.EVENT_READ)
                except ssl.SSLWantWriteError:
                    return self._want(conn, selectors.EVENT_WRITE)
                if gsock.is_http2_negotiated(conn.sock):
                    raise ssl.SSLError("HTTP/2 was not offered")
                intake.phase = Phase.HEAD
                self._ready_parser(conn)
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
            self._report(intake, "too-slow", 0, "the answer was not taken within the deadline", _peer(conn), "answer")
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
            return self._linger(conn)
        super().finish_request(conn, fs)  # kept alive: on the poller until its next request
        if intake.buffer and conn in self.keepalived_conns:  # which has arrived already (pipelined)
            self.poller.unregister(conn.sock)
            self.keepalived_conns.remove(conn)
            self._begin(conn)
        return None

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        now = time.monotonic()
        for deadlines in (self._reading, self._lingering):
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
        while self._lingering:
            conn, until = next(iter(self._lingering.items()))
            if until > now:
                break
            self._lingering.pop(conn)
            self._unregister(conn)
            _close_socket(conn)

    def _cut(self, conn: Any) -> None:
        """The request was not read by its deadline: answer it if it began, and close."""
        intake: Intake = conn.intake
        self._reading.pop(conn, None)
        if intake.phase is Phase.HANDSHAKE or not intake.buffer:
            # nothing of a request: a silent client, or one that never finished its handshake
            log.debug("connection from %s closed: no request within %ss (%s)", _peer(conn),
                      self.intake_limits.read_seconds, intake.phase.value)
            return self._close(conn)
        if intake.waiting:
            refusal = Refused(503, "busy", f"the server's buffer for request bodies stayed full for "
                                           f"{self.intake_limits.read_seconds}s")
        else:
            refusal = Refused(408, "too-slow", f"request not received whole within {self.intake_limits.read_seconds}s")
        self._refuse(conn, refusal)

    def _refuse(self, conn: Any, refusal: Refused) -> None:
        intake: Intake = conn.intake
        answered = send_now(conn.sock, error_response(refusal.status, refusal.message))
        self._report(intake, refusal.outcome, refusal.status if answered else 0, refusal.message, _peer(conn),
                     intake.phase.value)
        self._close(conn, linger=answered)

    def _report(self, intake: Intake, outcome: Outcome, status: int, message: str, peer: str | None,
                phase: str) -> None:
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

    def _close(self, conn: Any, *, linger: bool = False) -> None:
        """The connection is done with, from the intake."""
        self._unwatch(conn)
        self._reading.pop(conn, None)
        self._release(conn)
        self.nr_conns -= 1
        if linger:
            self._linger(conn)
        else:
            _close_socket(conn)

    def _drop(self, conn: Any) -> None:
        self.nr_conns -= 1
        _close_socket(conn)

    def _linger(self, conn: Any) -> None:
        """Close after an answer: half-close, then read and drop what the client still sends for a moment,
        so that closing with unread bytes does not reset the connection before the client has read the
        answer (RFC 9112 9.6). Never blocks the loop, unlike gunicorn's close_graceful."""
        try:
            if conn.sock.fileno() < 0:
                return
            conn.sock.shutdown(socket.SHUT_WR)  # an SSLSocket reads raw bytes from now on
            conn.sock.setblocking(False)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_lingering, conn))
        except (OSError, ValueError, KeyError):
            _close_socket(conn)
            return
        self._lingering[conn] = time.monotonic() + LINGER_SECONDS

    def _on_lingering(self, conn: Any, _fileobj: Any) -> None:
        try:
            for _ in range(4):  # then the other connections' turn: the poller calls again while bytes remain
                read = len(conn.sock.recv(65536))
                conn.lingered = getattr(conn, "lingered", 0) + read
                if not read:
                    break
                if conn.lingered >= LINGER_MAX_BYTES:
                    self._unregister(conn)  # held unread until its deadline (_cut_late closes it)
                    return
            else:
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._lingering.pop(conn, None)
        self._unregister(conn)
        _close_socket(conn)

    def _unregister(self, conn: Any) -> None:
        try:
            self.poller.unregister(conn.sock)
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
