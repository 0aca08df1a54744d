"""Slow and oversized requests: the real gunicorn server over TLS keeps answering the API server.

Each request is read whole by the worker's event loop before a thread takes it (webhook/serving/intake.py),
by a deadline under the webhooks' timeoutSeconds; a body over what the API server can send is refused
before it is read. Both are answered, logged and counted. The pure parts (framing, the body budget, one
request's reading) are checked first, table by table; then the worker's loop driven by hand on plain sockets,
for the memory budget; then the real server.
"""

from __future__ import annotations

import base64
import json
import os
import select
import selectors
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import jsonpatch
import pytest
from gunicorn import glogging
from gunicorn.config import Config
from gunicorn.workers.gthread import TConn
from prometheus_client.parser import text_string_to_metric_families

from builders import CATALOG_NODES, TEST_CATALOG_YAML, make_pod, make_review
from servers import Server, running_server, write_objects
from webhook.serving.config import MAX_ADMISSION_REVIEW_BYTES, MIB, IntakeLimits, ServeConfig
from webhook.serving.intake import IntakeThreadWorker
from webhook.serving.request import RESERVE, BodyBudget, Framing, Intake, Phase, Refused, read_framing

READ_SECONDS = ServeConfig.request_read_seconds  # the server's deadline for reading a request whole
SLOW_CONNECTIONS = 50  # the most the brief asks a replica to take without slowing the API server's calls
CUT_MARGIN_SECONDS = 3.0  # for a loaded 2-core machine


# --- framing, budget and one request's reading (pure) --------------------------------------------


def framing(method: str = "POST", path: str = "/mutate", version: tuple[int, int] = (1, 1), *,
            content_length: int = 0, chunked: bool = False, expect_continue: bool = False,
            invalid: bool = False) -> Framing:
    return Framing(method, path, version, content_length, chunked, expect_continue, invalid)


@pytest.mark.parametrize("head, expected", [
    pytest.param(b"POST /mutate?timeout=5s HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n",
                 framing(content_length=12), id="content-length"),
    pytest.param(b"GET /readyz HTTP/1.1\r\nHost: x\r\n", framing("GET", "/readyz"), id="no-body"),
    pytest.param(b"POST /mutate HTTP/1.1\r\ncontent-length:  7 \r\nEXPECT: 100-Continue\r\n",
                 framing(content_length=7, expect_continue=True), id="names-any-case"),
    pytest.param(b"POST /mutate HTTP/1.0\r\nContent-Length: 7\r\nExpect: 100-continue\r\n",
                 framing(version=(1, 0), content_length=7), id="no-100-continue-in-1.0"),
    pytest.param(b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", framing(chunked=True), id="chunked"),
    pytest.param(b"POST /mutate HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 8\r\n", framing(invalid=True),
                 id="two-lengths"),
    pytest.param(b"POST /mutate HTTP/1.1\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n",
                 framing(invalid=True), id="length-and-chunked"),
    pytest.param(b"POST /mutate HTTP/1.1\r\nContent-Length: -1\r\n", framing(invalid=True), id="negative-length"),
    pytest.param(b"GET /\r\n", framing("GET", "/", (0, 0), invalid=True), id="not-http-1"),
])
def test_read_framing(head: bytes, expected: Framing) -> None:
    assert read_framing(head) == expected


LIMITS = IntakeLimits(max_body_bytes=20 * MIB, buffer_bytes=40 * MIB, small_body_bytes=1 * MIB,
                      small_reserve_bytes=8 * MIB)


@pytest.mark.parametrize("held, asked, granted", [
    pytest.param([], 20 * MIB, True, id="one-largest-body"),
    pytest.param([20 * MIB], 12 * MIB, True, id="large-up-to-the-reserve"),
    pytest.param([20 * MIB], 13 * MIB, False, id="large-not-into-the-reserve"),
    pytest.param([20 * MIB, 12 * MIB], 1 * MIB, True, id="small-into-the-reserve"),
    pytest.param([20 * MIB, 12 * MIB] + [1 * MIB] * 8, 1, False, id="nothing-past-the-total"),
])
def test_body_budget(held: list[int], asked: int, granted: bool) -> None:
    budget = BodyBudget(LIMITS)
    assert all(budget.reserve(n) for n in held)
    assert budget.reserve(asked) is granted
    for n in held:
        budget.release(n)
    assert budget.reserved_bytes == (asked if granted else 0)


def test_limits_refuse_a_budget_that_cannot_hold_the_largest_body() -> None:
    with pytest.raises(ValueError, match="one body of max_body_bytes"):
        IntakeLimits(max_body_bytes=20 * MIB, buffer_bytes=24 * MIB, small_reserve_bytes=8 * MIB)


def test_the_largest_review_is_what_the_api_server_can_send() -> None:
    # etcd's request limit, JSON-escaped 6 bytes to 1 (`\u003c`), object and oldObject, and 1 MiB of envelope
    assert MAX_ADMISSION_REVIEW_BYTES == 2 * 6 * 1_572_864 + MIB == 19 * MIB


def steps(intake: Intake, arrivals: list[bytes], reserve: bool = True) -> list[Any]:
    """What the intake asks for after each arrival (RESERVE is granted when `reserve`)."""
    seen = []
    for data in arrivals:
        intake.buffer += data
        step = intake.next_step()
        if step == RESERVE and reserve:
            intake.reserved_bytes = intake.body_bytes
            seen.append(RESERVE)
            step = intake.next_step()
        seen.append(step)
    return seen


@pytest.mark.parametrize("arrivals, expected, request_bytes", [
    pytest.param([b"POST /mutate HTTP/1.1\r\nContent-", b"Length: 4\r\n\r\n{}", b"{}"],
                 [LIMITS.max_head_bytes - 31, RESERVE, 2, None], 48, id="head-then-body"),
    pytest.param([b"\r\nGET /readyz HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n"], [None], 24,
                 id="pipelined-next-stays"),
    pytest.param([b"POST /mutate HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"],
                 [Refused(413, "too-large", "body of 99999999 bytes: the limit is 20971520 (what the API server can "
                                            "send)")], 0, id="too-large"),
    pytest.param([b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"],
                 [Refused(411, "bad-request", "a request body needs a Content-Length")], 0, id="chunked"),
    pytest.param([b"GET / HTTP/1.1\r\nX: " + b"a" * LIMITS.max_head_bytes],
                 [Refused(431, "too-large", f"request headers over {LIMITS.max_head_bytes} bytes")], 0,
                 id="endless-headers"),
    pytest.param([b"POST /mutate HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"], [None], 63,
                 id="ambiguous-length-goes-to-gunicorn-alone"),
])
def test_intake_reads_one_request(arrivals: list[bytes], expected: list[Any], request_bytes: int) -> None:
    intake = Intake(LIMITS, 0.0)
    assert steps(intake, arrivals) == expected
    if expected[-1] is None:
        assert intake.phase is Phase.READY
        assert len(intake.take_request()) == request_bytes


def test_a_body_waits_for_its_reservation() -> None:
    intake = Intake(LIMITS, 0.0)
    assert steps(intake, [b"POST /mutate HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}"], reserve=False) == [RESERVE]
    assert intake.next_step() == RESERVE  # nothing more is read until it has one


# --- the worker's loop, on plain sockets: the body budget -----------------------------------------


SMALL = IntakeLimits(read_seconds=1.0, answer_seconds=1.5, max_body_bytes=4 * MIB, buffer_bytes=6 * MIB,
                     small_body_bytes=64 * 1024, small_reserve_bytes=1 * MIB)


class Loop:
    """An IntakeThreadWorker driven by hand: gunicorn's gthread machinery with one request thread, no TLS, and a
    WSGI app that answers with the length of the body it read, after `app_seconds`."""

    def __init__(self, limits: IntakeLimits, app_seconds: float = 0.0) -> None:
        cfg = Config()
        cfg.set("threads", 1)
        self.worker = IntakeThreadWorker(0, os.getpid(), [], None, 30, cfg, glogging.Logger(cfg))
        self.worker.intake_limits = limits
        self.worker.wsgi = self.app
        self.app_seconds = app_seconds
        self.worker.tpool = self.worker.get_thread_pool()
        self.worker.poller = selectors.DefaultSelector()
        self.worker.method_queue.init()
        self.worker.poller.register(self.worker.method_queue.fileno(), selectors.EVENT_READ,
                                    self.worker.method_queue.run_callbacks)
        self.worker.init_intake()

    def app(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        body = environ["wsgi.input"].read()
        time.sleep(self.app_seconds)
        answer = str(len(body)).encode()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(answer)))])
        return [answer]

    def connect(self) -> socket.socket:
        served, client = socket.socketpair()
        self.worker.nr_conns += 1
        self.worker.enqueue_req(TConn(self.worker.cfg, served, ("127.0.0.1", 1), ("127.0.0.1", 2)))
        client.settimeout(10)
        return client

    def run_until(self, condition: Any, timeout_seconds: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_seconds
        while not condition():
            assert time.monotonic() < deadline, "not within the time"
            self.worker.wait_for_and_dispatch_events(0.05)

    def close(self) -> None:
        self.worker.tpool.shutdown(wait=True)
        self.worker.poller.close()


def post(client: socket.socket, declared: int, sent: int) -> None:
    client.sendall(f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode())
    threading.Thread(target=_send_body, args=(client, b"x" * sent), daemon=True).start()  # may wait for the reader


def _send_body(client: socket.socket, body: bytes) -> None:
    try:
        client.sendall(body)
    except OSError:  # refused or cut before all of it went: the server closes, as these tests expect
        pass


class Replies(dict[socket.socket, bytes]):
    """What each client has been answered so far."""

    def read(self, *clients: socket.socket) -> bool:
        """Whether every one of `clients` has a whole answer (ending with its body or JSON)."""
        for client in clients:  # its sender thread may still be writing: no timeout of its own, select
            while select.select([client], [], [], 0)[0] and (data := client.recv(65536)):
                self[client] = self.get(client, b"") + data
        return all(self.get(c, b"").partition(b"\r\n\r\n")[2] for c in clients)


def test_a_body_that_finds_no_room_waits_and_is_read_once_one_frees() -> None:
    loop, replies = Loop(SMALL, app_seconds=0.3), Replies()
    try:
        first, second, small = loop.connect(), loop.connect(), loop.connect()
        post(first, 4 * MIB, 4 * MIB)  # all the room large bodies have (6 MiB less the 1 MiB kept for small ones)
        loop.run_until(lambda: loop.worker._budget.reserved_bytes == 4 * MIB)
        post(second, 2 * MIB, 2 * MIB)
        post(small, 1000, 1000)  # the room kept for small bodies
        loop.run_until(lambda: len(loop.worker._waiting) == 1)  # the second, unread
        loop.run_until(lambda: replies.read(first, small, second))
        assert replies[first].endswith(b"\r\n\r\n4194304") and replies[small].endswith(b"\r\n\r\n1000")
        assert replies[second].endswith(b"\r\n\r\n2097152")
        assert loop.worker._budget.reserved_bytes == 0
    finally:
        loop.close()


def test_a_body_still_without_room_at_its_deadline_gets_503() -> None:
    loop, replies = Loop(SMALL, app_seconds=1.6 * SMALL.read_seconds), Replies()
    try:
        first, second = loop.connect(), loop.connect()
        post(first, 4 * MIB, 4 * MIB)
        loop.run_until(lambda: loop.worker._budget.reserved_bytes == 4 * MIB)
        post(second, 2 * MIB, 2 * MIB)
        loop.run_until(lambda: replies.read(second))
        assert replies[second].startswith(b"HTTP/1.1 503 SERVICE UNAVAILABLE"), replies[second][:80]
        message = json.loads(replies[second].partition(b"\r\n\r\n")[2])["message"]
        assert "buffer for request bodies stayed full" in message
        assert loop.worker._budget.reserved_bytes == 4 * MIB and not loop.worker._waiting, "the first still in the app"
        loop.run_until(lambda: replies.read(first))
        assert replies[first].endswith(b"\r\n\r\n4194304")
    finally:
        loop.close()


# --- the real server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("stall")
    nodes = write_objects(tmp / "nodes.yaml", CATALOG_NODES)
    catalog = tmp / "catalog.yaml"
    catalog.write_text(TEST_CATALOG_YAML)
    # the defaults of `gpuclass serve`: two workers of one thread each
    with running_server(tmp, ["--nodes", str(nodes), "--config", str(catalog)], workers=2) as srv:
        yield srv


def cut_count(server: Server, outcome: str) -> float:
    status, text = server.metrics()
    assert status == 200
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "gpu_class_admission_requests_total" and s.labels == {"outcome": outcome, "class": "none"})


def cut_lines(server: Server, outcome: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("msg") == "request cut" and line.get("outcome") == outcome]


def wait_for(condition: Any, timeout_seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_seconds
    while not (result := condition()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return result


@dataclass
class Slow:
    """A client that declares a large body and sends it a byte at a time."""

    tls: ssl.SSLSocket
    opened: float
    sent_at: float  # its headers and first byte of body
    reply: bytes = b""
    closed_at: float | None = None


@dataclass
class Tricklers:
    server: Server
    clients: list[Slow] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def open(self, count: int, declared: int = 3_000_000, port: int | None = None) -> None:
        head = (f"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {declared}\r\n\r\n{{").encode()
        for _ in range(count):
            opened = time.monotonic()
            raw = socket.create_connection(("127.0.0.1", port or self.server.port), timeout=10)
            tls = self.server.context().wrap_socket(raw, server_side=False, server_hostname="localhost")
            tls.sendall(head)
            tls.setblocking(False)
            self.clients.append(Slow(tls, opened, time.monotonic()))
        if self.thread is None:  # one thread trickles to them all
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def open_ones(self) -> list[Slow]:
        return [c for c in self.clients if c.closed_at is None]

    def _run(self) -> None:
        while not self.stop.is_set() and self.open_ones():
            for c in self.open_ones():
                try:
                    c.tls.send(b" ")  # one byte of the body a second
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    pass
                except OSError:
                    self._read(c)
            until = time.monotonic() + 1.0
            while (left := until - time.monotonic()) > 0 and (clients := self.open_ones()):
                readable, _, _ = select.select([c.tls for c in clients], [], [], left)
                for c in clients:
                    if c.tls in readable:
                        self._read(c)

    def _read(self, c: Slow) -> None:
        try:
            while data := c.tls.recv(65536):
                c.reply += data
        except (ssl.SSLWantReadError, BlockingIOError):
            return
        except OSError:
            pass
        c.closed_at = time.monotonic()  # the server closed it

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        for c in self.clients:
            c.tls.close()


def timed(call: Any) -> tuple[float, float, Any]:
    started = time.monotonic()
    result = call()
    return started, time.monotonic(), result


def test_slow_clients_do_not_hold_the_api_servers_calls_and_are_cut_at_the_deadline(server: Server) -> None:
    before = cut_count(server, "too-slow")
    logged = len(cut_lines(server, "too-slow"))
    slow = Tricklers(server)
    kept = server.connection()
    try:
        slow.open(SLOW_CONNECTIONS)
        honest = []
        review = make_review(make_pod({"gpu-class.io/class": "high"}), uid="honest")
        # while the slow clients trickle: new connections, a kept-alive one, and the readiness probe
        while time.monotonic() - slow.clients[-1].opened < READ_SECONDS - 0.5 or len(honest) < 6:
            honest.append(("mutate", *timed(lambda: server.post("/mutate", review))))
            honest.append(("mutate-kept-alive", *timed(lambda: server.post("/mutate", review, conn=kept))))
            honest.append(("readyz", *timed(lambda: server.get("/readyz"))))
        assert wait_for(lambda: not slow.open_ones(), READ_SECONDS + CUT_MARGIN_SECONDS), \
            f"{len(slow.open_ones())} slow connections still open"
    finally:
        kept.close()
        slow.close()
    for what, started, done, (status, body) in honest:
        assert status == 200, (what, status, body)
        assert body.get("ready", True) is True and body.get("response", {"uid": "honest"})["uid"] == "honest"

    def slow_open_throughout(started: float, done: float) -> int:
        return sum(c.sent_at < started and (c.closed_at is None or c.closed_at > done) for c in slow.clients)

    # the order of events, not a duration: each kind of call was answered, more than once, while nearly all the
    # slow connections were open from before it was sent to after its answer (one held for a cut comes after it)
    during = Counter(what for what, started, done, _ in honest
                     if slow_open_throughout(started, done) >= 0.8 * SLOW_CONNECTIONS)
    assert all(during[what] >= 2 for what in ("mutate", "mutate-kept-alive", "readyz")), (
        f"calls answered while the slow connections were open: {dict(during)} of {len(honest)}")
    for c in slow.clients:
        assert c.reply.startswith(b"HTTP/1.1 408"), c.reply[:80]
        assert json.loads(c.reply.partition(b"\r\n\r\n")[2])["error"] == "Request Timeout"
        assert c.closed_at is not None
        held = c.closed_at - c.opened
        assert READ_SECONDS - 0.5 <= held <= READ_SECONDS + CUT_MARGIN_SECONDS, f"cut after {held:.2f}s"
    assert wait_for(lambda: cut_count(server, "too-slow") - before == SLOW_CONNECTIONS), \
        f"counted {cut_count(server, 'too-slow') - before}"
    lines = wait_for(lambda: cut_lines(server, "too-slow")[logged:] if len(
        cut_lines(server, "too-slow")) - logged == SLOW_CONNECTIONS else None)
    assert lines and {(line["status"], line["path"], line["phase"], line["content_length"]) for line in lines} == {
        (408, "/mutate", "body", 3_000_000)}


def test_a_trickled_header_is_cut_too(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as raw:
        with server.context().wrap_socket(raw, server_hostname="localhost") as tls:
            started = time.monotonic()
            tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")
            reply = b""
            for _ in range(int(READ_SECONDS + CUT_MARGIN_SECONDS)):
                try:
                    tls.sendall(b"X")
                except OSError:
                    break
                tls.settimeout(1.0)
                try:
                    reply += tls.recv(65536)
                    if reply:
                        break
                except TimeoutError:
                    pass
            waited = time.monotonic() - started
    assert reply.startswith(b"HTTP/1.1 408") and waited <= READ_SECONDS + CUT_MARGIN_SECONDS


def raw_exchange(server: Server, data: bytes, *, until: bytes = b"}") -> bytes:
    """Send `data` on a fresh TLS connection and read until the answer ends with `until`, or the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as raw:
        with server.context().wrap_socket(raw, server_hostname="localhost") as tls:
            try:
                tls.sendall(data)
            except OSError:
                pass  # refused before all of it was sent: the answer is waiting
            reply = b""
            while not reply.rstrip().endswith(until):
                try:
                    chunk = tls.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                reply += chunk
    return reply


def test_an_oversized_review_is_refused_logged_and_counted(server: Server) -> None:
    before = cut_count(server, "too-large")
    declared = MAX_ADMISSION_REVIEW_BYTES + 1
    reply = raw_exchange(server, b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                 + f"Content-Length: {declared}\r\n\r\n".encode() + b"{" + b" " * 65536)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    answer = json.loads(body)
    assert answer["error"] == "Request Entity Too Large" and str(MAX_ADMISSION_REVIEW_BYTES) in answer["message"]
    assert wait_for(lambda: cut_count(server, "too-large") - before == 1)
    line = wait_for(lambda: [x for x in cut_lines(server, "too-large") if x["content_length"] == declared])
    assert line and line[0]["status"] == 413 and line[0]["path"] == "/mutate" and line[0]["peer"].startswith("127.0.0.1:")
    assert server.get("/readyz")[0] == 200


def test_a_review_the_json_encoder_escaped_to_3_mib_is_placed(server: Server) -> None:
    """0.57 MiB of Pod, 600,000 `<` in an env value: 3.4 MiB as the API server encodes it (`\\u003c`)."""
    pod = make_pod({"gpu-class.io/class": "high"})
    pod["spec"]["containers"][0]["env"] = [{"name": "PAGE", "value": "<" * 600_000}]
    body = json.dumps(make_review(pod, uid="escaped")).replace("<", "\\u003c").encode()
    assert len(body) > 3.4 * MIB
    status, answer = server.post("/mutate", body)
    assert status == 200 and answer["response"]["uid"] == "escaped" and answer["response"]["allowed"] is True
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(answer["response"]["patch"])))
    assert patched["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    review = json.dumps(make_review(make_pod({"gpu-class.io/class": "high"}), uid="first")).encode()
    both = (b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(review)}\r\n\r\n".encode() + review
            + b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    reply = raw_exchange(server, both, until=b"\x00")  # to the server's close
    first, second = reply.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200") and b'"uid":"first"' in first
    assert second.startswith(b"200") and json.loads(second.partition(b"\r\n\r\n")[2])["ready"] is True


def test_expect_100_continue_is_answered_before_the_body(server: Server) -> None:
    review = json.dumps(make_review(make_pod({"gpu-class.io/class": "high"}), uid="expect")).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as raw:
        with server.context().wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        + f"Expect: 100-continue\r\nContent-Length: {len(review)}\r\n\r\n".encode())
            assert tls.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
            tls.sendall(review)
            reply = b""
            while not reply.endswith(b"}"):
                reply += tls.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200") and b"100 Continue" not in reply and b'"uid":"expect"' in reply


def test_a_chunked_body_is_asked_for_its_length(server: Server) -> None:
    reply = raw_exchange(server, b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"2\r\n{}\r\n0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 411")
    assert server.get("/healthz")[0] == 200


def test_a_conflicting_length_is_refused_by_gunicorn_without_waiting(server: Server) -> None:
    cuts = cut_count(server, "too-slow")
    reply = raw_exchange(server, b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
                                 b"Content-Length: 6\r\n\r\n{}", until=b"\x00")
    # a server that waited for the body either length promises would cut it at the read deadline: a 408, counted
    assert reply.startswith(b"HTTP/1.1 400") and cut_count(server, "too-slow") == cuts


def test_the_extender_listener_reads_the_same_way(tmp_path: Path) -> None:
    """Its handshake (which asks for a client certificate) runs in the worker's loop too."""
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    with running_server(tmp_path, ["--nodes", str(nodes)], extender=True) as srv:
        slow = Tricklers(srv)
        try:
            slow.open(2)
            slow.open(2, port=srv.extender_port)  # no client certificate: asked for, not required
            conn = srv.scheduler_connection()
            try:
                status, body = srv.post("/filter", {"Pod": make_pod({"gpu-class.io/class": "high"}), "Nodes": None,
                                                    "NodeNames": ["h100-a"]}, conn=conn)
                # answered before any slow connection was cut: one held for a worker would come after the cuts
                assert slow.open_ones() == slow.clients
            finally:
                conn.close()
            assert status == 200 and "NodeNames" in body
            assert wait_for(lambda: not slow.open_ones(), READ_SECONDS + CUT_MARGIN_SECONDS)
        finally:
            slow.close()
        assert all(c.reply.startswith(b"HTTP/1.1 408") for c in slow.clients)
