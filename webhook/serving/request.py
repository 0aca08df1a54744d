"""One request as it arrives on a connection, pure: the framing its head declares, its deadlines and phase, the
body bytes a worker may hold. The worker that reads with them is intake.py."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from gunicorn.http.unreader import Unreader
from werkzeug.http import HTTP_STATUS_CODES

from .config import IntakeLimits

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

    def refusal_at_deadline(self) -> Refused | None:
        """What a request not read by its deadline is answered; None when nothing of one came (closed unanswered)."""
        if self.phase is Phase.HANDSHAKE or not self.buffer:
            return None
        if self.waiting:
            return Refused(503, "busy", f"the server's buffer for request bodies stayed full for "
                                        f"{self.limits.read_seconds}s")
        return Refused(408, "too-slow", f"request not received whole within {self.limits.read_seconds}s")

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
