"""Workers stay balanced through connection churn: the real gunicorn server over TLS, on one CPU.

A pool of keep-alive connections sends reviews back to back, as the API server's pool does under
load. Pools are closed as clients close them when they stop for good (requests in flight: a
client that exits or restarts), reopened, thinned and refilled, and a worker is killed under them;
after each change the requests each worker answers in a window are counted (the connection each
worker holds, from /proc). The server runs on one CPU, the hardest case: a woken worker that runs
first takes every connection waiting, unless it leaves them to a sibling holding fewer.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from bench.common.procs import children_of, peer_ports
from builders import CATALOG_NODES, make_pod, make_review
from servers import Server, running_server, write_objects

CONNECTIONS = 8
WORKERS = 2
WINDOW_SECONDS = 1.0
MIN_SHARE = 1 / 3  # the least busy worker's requests over the busiest's, in every window


@dataclass
class Connection:
    """One keep-alive connection sending reviews back to back from its own thread."""

    server: Server
    body: bytes
    answered: dict[int, int]  # requests answered, by the local port of the connection that carried them
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    leave_in_flight: bool = True

    def start(self, raw: socket.socket) -> None:
        self.thread = threading.Thread(target=self._run, args=(raw,), daemon=True)
        self.thread.start()

    def _run(self, raw: socket.socket) -> None:
        conn = self.server.connection()
        conn.sock = self.server.context().wrap_socket(raw, server_hostname="localhost")
        while not self.stop.is_set():
            try:
                if conn.sock is None:  # the server closed it (Connection: close) or it broke: reopen
                    conn.connect()
                port = conn.sock.getsockname()[1]
                conn.request("POST", "/mutate", body=self.body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                if response.status == 200:
                    self.answered[port] = self.answered.get(port, 0) + 1
            except (OSError, http.client.HTTPException):
                conn.close()  # a killed worker's connections: the next request reopens, as the API server does
        if self.leave_in_flight:
            # as a client that exits or restarts under load does: the socket closed (no TLS close_notify)
            # in the middle of a request it was sending
            head = (f"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(self.body)}\r\n\r\n").encode()
            try:
                if conn.sock is None:
                    conn.connect()
                conn.sock.sendall(head + self.body[:len(self.body) // 2])
            except OSError:
                pass
        conn.close()

    def close(self, *, leave_in_flight: bool = True) -> None:
        self.leave_in_flight = leave_in_flight
        self.stop.set()


@dataclass
class Pool:
    server: Server
    body: bytes
    connections: list[Connection] = field(default_factory=list)

    def open(self, count: int) -> None:
        """`count` connections at once, as a client's burst of requests opens them: all of them wait in
        the listener's backlog when the workers wake up (the kernel completes TCP handshakes by itself)."""
        raws = [socket.create_connection(("127.0.0.1", self.server.port), timeout=10) for _ in range(count)]
        for raw in raws:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net/http and http.client do
        fresh = [Connection(self.server, self.body, {}) for _ in range(count)]
        for c, raw in zip(fresh, raws):
            c.start(raw)
        self.connections += fresh
        deadline = time.monotonic() + 30
        while not all(c.answered for c in fresh):
            assert time.monotonic() < deadline, "the pool's connections were not all answered within 30 s"
            time.sleep(0.01)

    def close(self, count: int | None = None, *, leave_in_flight: bool = True) -> None:
        """Close `count` connections (all by default), every other one first, so both workers lose some."""
        order = self.connections[::2] + self.connections[1::2]
        leaving = order[:len(order) if count is None else count]
        for c in leaving:
            c.close(leave_in_flight=leave_in_flight)
        for c in leaving:
            assert c.thread is not None
            c.thread.join(timeout=30)
        self.connections = [c for c in self.connections if c not in leaving]

    def answered(self) -> dict[int, int]:
        total: dict[int, int] = {}
        for c in self.connections:
            for port, n in list(c.answered.items()):
                total[port] = total.get(port, 0) + n
        return total


def requests_per_worker(server: Server, pool: Pool, seconds: float = WINDOW_SECONDS) -> list[int]:
    """Requests each worker answered over a window of `seconds` of the pool's load."""
    pids = workers_of(server)
    before, held = pool.answered(), peer_ports(pids, server.port)
    time.sleep(seconds)
    after = pool.answered()
    # a connection reopened during the window is found at its end
    held = [a | b for a, b in zip(held, peer_ports(pids, server.port))]
    return [sum(after.get(p, 0) - before.get(p, 0) for p in ports) for ports in held]


def workers_of(server: Server, timeout_seconds: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_seconds
    while len(pids := children_of(server.process.pid)) != WORKERS:
        assert time.monotonic() < deadline, f"gunicorn has {len(pids)} workers, not {WORKERS}:\n{server.log()}"
        time.sleep(0.05)
    return pids


def balance(per_worker: list[int]) -> float:
    return min(per_worker) / max(per_worker) if max(per_worker) else 0.0


def wait_until_spread(server: Server, timeout_seconds: float = 30.0) -> None:
    """Until the workers' connections differ by one at most (a new worker accepts once it has loaded its app)."""
    deadline = time.monotonic() + timeout_seconds
    while max(held := [len(p) for p in peer_ports(workers_of(server), server.port)]) - min(held) > 1:
        assert time.monotonic() < deadline, f"connections per worker still {held} after {timeout_seconds:.0f}s"
        time.sleep(0.1)


@pytest.fixture
def one_cpu_server(tmp_path: Path) -> Iterator[Server]:
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    cpu = min(os.sched_getaffinity(0))
    with running_server(tmp_path, ["--nodes", str(nodes)], workers=WORKERS, cpus={cpu}) as server:
        # a worker still loading its app does not accept yet (rightly): wait until all of them do
        deadline = time.monotonic() + 30
        while True:
            pool = Pool(server, review_body())
            pool.open(CONNECTIONS)
            held = peer_ports(workers_of(server), server.port)
            pool.close(leave_in_flight=False)
            if all(held):
                break
            assert time.monotonic() < deadline, "a worker took no connection within 30 s"
        yield server


def review_body() -> bytes:
    return json.dumps(make_review(make_pod({"gpu-class.io/class": "high"}))).encode()


def assert_balanced(windows: list[list[int]]) -> None:
    assert all(sum(w) > 0 for w in windows), f"no requests answered in some window: {windows}"
    assert all(balance(w) >= MIN_SHARE for w in windows), f"requests per worker, per pool: {windows}"


@pytest.mark.parametrize("pause_seconds", [
    pytest.param(0.0, id="back-to-back"),
    pytest.param(3.0, id="with-pauses"),
])
def test_consecutive_pools_are_each_spread_over_the_workers(one_cpu_server: Server, pause_seconds: float) -> None:
    windows = []
    for _ in range(4):
        pool = Pool(one_cpu_server, review_body())
        pool.open(CONNECTIONS)
        windows.append(requests_per_worker(one_cpu_server, pool))
        pool.close()
        time.sleep(pause_seconds)
    assert_balanced(windows)


def test_half_the_pool_closed_and_reopened(one_cpu_server: Server) -> None:
    pool = Pool(one_cpu_server, review_body())
    pool.open(CONNECTIONS)
    windows = [requests_per_worker(one_cpu_server, pool)]
    for _ in range(3):
        pool.close(CONNECTIONS // 2)
        pool.open(CONNECTIONS // 2)
        windows.append(requests_per_worker(one_cpu_server, pool))
    pool.close()
    assert_balanced(windows)


def test_connections_cut_off_before_their_first_request_leave_the_spread_intact(one_cpu_server: Server) -> None:
    """Clients that connect and leave during the handshake (probes, timeouts, a client that dies)."""
    windows = []
    for _ in range(3):
        # one per worker, at once (the workers spread them); gunicorn counted each worker's one twice,
        # and -1 connections read to its sibling as "not accepting"
        cut = [socket.create_connection(("127.0.0.1", one_cpu_server.port), timeout=10) for _ in range(WORKERS)]
        for raw in cut:
            raw.close()
        time.sleep(0.3)  # the workers see them go
        pool = Pool(one_cpu_server, review_body())
        pool.open(CONNECTIONS)
        windows.append(requests_per_worker(one_cpu_server, pool))
        pool.close()
    assert_balanced(windows)


def test_a_worker_restarted_by_gunicorn_gets_its_share_back(one_cpu_server: Server) -> None:
    pool = Pool(one_cpu_server, review_body())
    pool.open(CONNECTIONS)
    windows = [requests_per_worker(one_cpu_server, pool)]
    killed = workers_of(one_cpu_server)[0]
    os.kill(killed, signal.SIGKILL)  # its connections break; the clients reopen them on the survivor
    deadline = time.monotonic() + 30
    while killed in children_of(one_cpu_server.process.pid) or len(children_of(one_cpu_server.process.pid)) < WORKERS:
        assert time.monotonic() < deadline, "gunicorn did not replace the killed worker"
        time.sleep(0.05)
    # the same pool, under load all along: the survivor hands connections over to the new worker
    wait_until_spread(one_cpu_server)
    windows.append(requests_per_worker(one_cpu_server, pool))
    pool.close()
    pool = Pool(one_cpu_server, review_body())  # and a fresh pool after the restart
    pool.open(CONNECTIONS)
    windows.append(requests_per_worker(one_cpu_server, pool))
    pool.close()
    assert_balanced(windows)
