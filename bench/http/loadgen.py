"""The load generator: one process holding several persistent TLS connections, as the API server does.

Run by bench/http/measure.py as separate processes (`python -m bench.http.loadgen PLAN.json`), so it does not
share an interpreter (or a GIL) with the measuring process. Handshake: once its connections are up it
prints `ready`, reads the common start time (epoch seconds) from stdin, runs, and prints one JSON
result.
Standard library only, and lean on purpose: the request is one prebuilt buffer whose uid is
overwritten in place, the response is parsed by hand (status line, Content-Length, JSON body), so
the client spends far less CPU per request than the server and does not become the bottleneck on a
small machine. bench/http/run.py reports the client's CPU per request next to the server's to show it.

Two modes:
- closed: every connection sends its next request as soon as the previous answer arrived (peak rate);
- open: requests are due at a fixed total rate; a free connection of the pool takes the next due
  request, and latency counts from when it was due, so a server that falls behind is charged for
  the queueing too (no coordinated omission).
"""

from __future__ import annotations

import itertools
import json
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, TypedDict

Mode = Literal["closed", "open"]
WARM_SEQ = 0xFFFFFFFFFFFF  # the uid suffix of the warm-up request on each connection


class Plan(TypedDict):
    """What one load generator process does (written as JSON by bench/http/measure.py)."""

    host: str
    port: int
    server_hostname: str
    ca_file: str
    body_file: str
    uid_offset: int
    connections: int
    process_index: int
    processes: int
    mode: Mode
    rate_per_second: float  # open mode: the total rate over all processes
    warmup_seconds: float
    duration_seconds: float
    expect_patch: bool
    timeout_seconds: float
    # churn (bench/http/spread.py): the pool's TCP connections all made before any handshake, as a client's
    # burst opens them, and each left at the end in the middle of a request, as a client that exits does
    churn: bool


class Outcome(TypedDict):
    """One process's result."""

    ok: int
    latencies_ms: list[float]
    errors: dict[str, int]
    error_samples: list[str]
    reconnects: int
    cpu_seconds: float  # this process, during the measured window
    late_sends: int  # open mode: requests sent more than 1 ms after they were due
    ready_late: bool  # the start time given had passed already (the window is skewed)
    ok_by_port: dict[str, int]  # answered in the window, by the connection's local port (the server's worker holds its peer)


class ResponseError(Exception):
    """A response that is not what the API server needs; the message is the reason (counted)."""


@dataclass
class Connection:
    """One persistent TLS connection; reopened (and counted) after the server closes it."""

    plan: Plan
    context: ssl.SSLContext
    sock: ssl.SSLSocket | None = None
    buffer: bytearray = field(default_factory=bytearray)
    reconnects: int = 0
    port: int = 0

    def open(self, raw: socket.socket | None = None) -> ssl.SSLSocket:
        """A TLS connection, over `raw` when the TCP connection is made already."""
        if raw is None:
            raw = connect_tcp(self.plan)
        self.port = raw.getsockname()[1]
        self.sock = self.context.wrap_socket(raw, server_hostname=self.plan["server_hostname"])
        self.buffer.clear()
        return self.sock

    def leave_mid_request(self, request: bytes | bytearray) -> None:
        """Close with half a request sent and no TLS close_notify, as a client that exits under load does."""
        if self.sock is not None:
            try:
                self.sock.sendall(request[:len(request) // 2])
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None

    def exchange(self, request: bytes | bytearray) -> tuple[int, bytes, bool]:
        """Send one request, read one response: (status, body, server keeps the connection)."""
        if self.sock is None:
            self.open()
            self.reconnects += 1
        sock = self.sock
        assert sock is not None
        sock.sendall(request)
        buf = self.buffer
        while (end := buf.find(b"\r\n\r\n")) < 0:
            self._fill(sock)
        head = bytes(buf[:end]).lower()
        status = int(head[9:12])
        length_at = head.find(b"\r\ncontent-length:")
        if length_at < 0:
            raise ResponseError("response without Content-Length")
        line_end = head.find(b"\r\n", length_at + 2)
        length = int(head[length_at + 17: line_end if line_end > 0 else len(head)])
        total = end + 4 + length
        while len(buf) < total:
            self._fill(sock)
        body = bytes(buf[end + 4: total])
        del buf[:total]
        keep_alive = b"\r\nconnection: close" not in head
        return status, body, keep_alive

    def _fill(self, sock: ssl.SSLSocket) -> None:
        chunk = sock.recv(262144)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buffer += chunk


def connect_tcp(plan: Plan) -> socket.socket:
    raw = socket.create_connection((plan["host"], plan["port"]), timeout=plan["timeout_seconds"])
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net/http does
    return raw


def build_request(plan: Plan, body: bytes) -> bytearray:
    head = (
        f"POST /mutate?timeout=10s HTTP/1.1\r\nHost: {plan['server_hostname']}:{plan['port']}\r\n"
        f"User-Agent: kube-apiserver-admission\r\nAccept: application/json, */*\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nAccept-Encoding: gzip\r\n\r\n"
    ).encode()
    return bytearray(head + body)


def check_response(status: int, body: bytes, uid: str, expect_patch: bool) -> None:
    if status != 200:
        raise ResponseError(f"HTTP {status}")
    try:
        response = json.loads(body)["response"]
    except (ValueError, KeyError, TypeError):
        raise ResponseError("body is not an AdmissionReview") from None
    if response.get("uid") != uid:
        raise ResponseError("uid not echoed")
    if response.get("allowed") is not True:
        raise ResponseError("not allowed: " + str((response.get("status") or {}).get("message"))[:120])
    if expect_patch and not (response.get("patchType") == "JSONPatch" and response.get("patch")):
        raise ResponseError("no patch")


@dataclass
class Worker:
    """One connection's loop; results are merged by the process after all threads end."""

    plan: Plan
    conn: Connection
    request: bytearray
    uid_offset: int
    conn_index: int
    latencies: list[float] = field(default_factory=list)
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)
    late_sends: int = 0
    ok_by_port: dict[int, int] = field(default_factory=dict)

    def one(self, seq: int, due: float, window_start: float) -> None:
        uid = f"{self.plan['process_index']:08x}-{self.conn_index:04x}-4000-8000-{seq:012x}"
        self.request[self.uid_offset: self.uid_offset + 36] = uid.encode()
        try:
            status, body, keep_alive = self.conn.exchange(self.request)
            done = time.perf_counter()
            check_response(status, body, uid, self.plan["expect_patch"])
            if not keep_alive:
                self.conn.close()
        except (OSError, ssl.SSLError, ValueError, ResponseError) as exc:
            self.conn.close()
            reason = str(exc) if isinstance(exc, ResponseError) else type(exc).__name__
            if due >= window_start:
                self.errors[reason] = self.errors.get(reason, 0) + 1
                if len(self.samples) < 3:
                    self.samples.append(f"{reason}: {exc}"[:300])
            return
        if due >= window_start:
            self.ok += 1
            self.latencies.append((done - due) * 1000.0)
            port = self.conn.port
            self.ok_by_port[port] = self.ok_by_port.get(port, 0) + 1

    def closed_loop(self, window_start: float, end: float) -> None:
        seq = 0
        while (now := time.perf_counter()) < end:
            self.one(seq, now, window_start)
            seq += 1

    def open_loop(self, start: float, window_start: float, end: float, tickets: Iterator[int], interval: float,
                  phase: float) -> None:
        while True:
            k = next(tickets)  # itertools.count: atomic under the GIL, shared by the pool
            due = start + phase + k * interval
            if due >= end:
                return
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            elif wait < -0.001 and due >= window_start:
                self.late_sends += 1
            self.one(k, due, window_start)


def run(plan: Plan, start_at: Callable[[], float]) -> Outcome:
    """Connect, then wait for `start_at()` (the common start, epoch seconds) and run the plan."""
    with open(plan["body_file"], "rb") as fh:
        body = fh.read()
    context = ssl.create_default_context(cafile=plan["ca_file"])
    request = build_request(plan, body)
    uid_offset = len(request) - len(body) + plan["uid_offset"]
    workers = [Worker(plan, Connection(plan, context), bytearray(request), uid_offset, i)
               for i in range(plan["connections"])]

    def warm(worker: Worker, raw: socket.socket | None = None) -> None:
        # a warm pool: connected and used once before the clock starts. The API server dials with a
        # request in hand; a connection left idle after its handshake would hold one of the server's
        # threads until its first request arrives (gunicorn's gthread worker reads it blocking)
        worker.conn.open(raw)
        worker.one(WARM_SEQ, time.perf_counter(), float("inf"))

    if plan["churn"]:
        # every TCP connection waits in the server's backlog before the first is used, then all of
        # them shake hands and send at once
        raws = [connect_tcp(plan) for _ in workers]
        warming = [threading.Thread(target=warm, args=(w, raw)) for w, raw in zip(workers, raws)]
        for t in warming:
            t.start()
        for t in warming:
            t.join()
    else:
        for w in workers:
            warm(w)
    common_start = start_at()
    # map the shared epoch start onto this process's monotonic clock
    ready_late = time.time() > common_start
    start = time.perf_counter() + max(common_start - time.time(), 0.0)
    window_start = start + plan["warmup_seconds"]
    end = window_start + plan["duration_seconds"]
    threads: list[threading.Thread] = []
    if plan["mode"] == "closed":
        for w in workers:
            threads.append(threading.Thread(target=w.closed_loop, args=(window_start, end)))
    else:
        # this process serves every `processes`-th due time of the total schedule
        interval = plan["processes"] / plan["rate_per_second"]
        phase = plan["process_index"] / plan["rate_per_second"]
        tickets = itertools.count()
        for w in workers:
            threads.append(threading.Thread(target=w.open_loop,
                                            args=(start, window_start, end, tickets, interval, phase)))
    for t in threads:
        t.start()
    time.sleep(max(window_start - time.perf_counter(), 0.0))
    cpu_at_window = time.process_time()
    time.sleep(max(end - time.perf_counter(), 0.0))
    cpu_seconds = time.process_time() - cpu_at_window
    for t in threads:
        t.join()
    errors: dict[str, int] = {}
    for w in workers:
        for reason, n in w.errors.items():
            errors[reason] = errors.get(reason, 0) + n
        if plan["churn"]:
            w.conn.leave_mid_request(w.request)
        else:
            w.conn.close()
    return {
        "ok": sum(w.ok for w in workers),
        "latencies_ms": [x for w in workers for x in w.latencies],
        "errors": errors,
        "error_samples": [s for w in workers for s in w.samples][:5],
        "reconnects": sum(w.conn.reconnects for w in workers),
        "cpu_seconds": cpu_seconds,
        "late_sends": sum(w.late_sends for w in workers),
        "ready_late": ready_late,
        "ok_by_port": {str(port): n for w in workers for port, n in w.ok_by_port.items()},
    }


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        plan: Plan = json.load(fh)

    def handshake() -> float:
        print("ready", flush=True)
        return float(sys.stdin.readline())

    json.dump(run(plan, handshake), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
