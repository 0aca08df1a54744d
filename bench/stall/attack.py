"""The clients of `python -m bench stall` on the webhook's port: the attack, and the readiness probe beside it.

The attack runs in a process of its own (forked before the bench starts any thread), at a lower priority, and
attacks only while the bench asks it to: slow clients on one thread (non-blocking sockets, a byte each a second,
a new connection for each one cut) and each oversized sender on a thread of its own (blocking sends: the TLS
encryption releases the GIL). It stops by itself when the bench's process is gone, or after the plan's longest
episode. Every address it reaches is a loopback one.

The probe polls /readyz from a thread of the bench's process, a new TLS connection each time, as the kubelet's
HTTPS probe does.
"""

from __future__ import annotations

import http.client
import ipaddress
import multiprocessing
import multiprocessing.queues
import os
import queue
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

from bench.stall.stall_model import READYZ_TIMEOUT_SECONDS, AttackPlan, AttackTally, Poll, answer_status

SERVER_NAME = "localhost"  # in the local cluster's serving certificate, beside 127.0.0.1


@dataclass(frozen=True)
class Target:
    """The webhook's port on loopback, and the CA its certificate chains to."""

    host: str
    port: int
    ca_file: str

    def __post_init__(self) -> None:
        if not ipaddress.ip_address(self.host).is_loopback:
            raise ValueError(f"{self.host}: the bench attacks loopback addresses only")

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)

    def connect(self, context: ssl.SSLContext, timeout_seconds: float) -> ssl.SSLSocket:
        raw = socket.create_connection((self.host, self.port), timeout=timeout_seconds)
        try:
            return context.wrap_socket(raw, server_hostname=SERVER_NAME)
        except BaseException:
            raw.close()
            raise


def post_head(content_length: int) -> bytes:
    return (f"POST /mutate?timeout=5s HTTP/1.1\r\nHost: {SERVER_NAME}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {content_length}\r\n\r\n").encode()


# --- slow clients ----------------------------------------------------------------------------------------------


@dataclass
class _Slow:
    tls: ssl.SSLSocket
    reply: bytes = b""


def _read_to_end(c: _Slow) -> bool:
    """Read what has arrived; True once the server has closed the connection."""
    try:
        while True:
            data = c.tls.recv(65536)
            if not data:
                return True
            c.reply += data
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return False
    except OSError:  # a reset, or the server's end of TLS without close_notify
        return True


def trickle(target: Target, plan: AttackPlan, stop: threading.Event, tally: AttackTally) -> None:
    """Keep `plan.slow_connections` slow clients open until `stop` (the first ones opened evenly over the plan's
    ramp): each announces a large body, then sends a byte of it every interval; one the server cuts is counted by
    its answer and replaced at once."""
    context = target.context()
    head = post_head(plan.slow_declared_bytes) + b"{"
    open_: list[_Slow] = []

    def end(c: _Slow, how: str | None = None) -> None:
        open_.remove(c)
        key = how or answer_status(c.reply)
        tally.slow_ended[key] = tally.slow_ended.get(key, 0) + 1
        c.tls.close()

    started = counted = time.monotonic()
    next_byte = started + plan.slow_interval_seconds
    try:
        while not stop.is_set():
            now = time.monotonic()
            # opened over the ramp, so that their cuts, and the new connections that follow them, come evenly
            ramp = (now - started) / plan.slow_ramp_seconds if plan.slow_ramp_seconds > 0 else 1.0
            if ramp >= 1:
                tally.slow_held_seconds += len(open_) * (now - counted)
                tally.slow_counted_seconds += now - counted
            counted = now
            wanted = plan.slow_connections if ramp >= 1 else min(int(ramp * plan.slow_connections) + 1,
                                                                  plan.slow_connections)
            failed = 0
            while len(open_) < wanted and failed < 3 and not stop.is_set():
                try:
                    tls = target.connect(context, timeout_seconds=5.0)
                    tls.sendall(head)
                    tls.setblocking(False)
                except OSError:
                    tally.slow_open_failed += 1
                    failed += 1
                    continue
                open_.append(_Slow(tls))
                tally.slow_opened += 1
            if failed:
                stop.wait(0.2)  # the server refuses connections: do not spin
            now = time.monotonic()
            if now >= next_byte:
                for c in list(open_):
                    try:
                        c.tls.send(b" ")
                    except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                        pass
                    except OSError:
                        _read_to_end(c)
                        end(c)
                next_byte = now + plan.slow_interval_seconds
            wait = max(0.0, min(next_byte - time.monotonic(), 0.2 if ramp >= 1 else 0.02))
            if not open_:
                stop.wait(wait)
                continue
            readable, _, _ = select.select([c.tls for c in open_], [], [], wait)
            for c in [c for c in open_ if c.tls in readable]:
                if _read_to_end(c):
                    end(c)
    finally:
        for c in list(open_):
            end(c, "stopped")


# --- oversized requests ------------------------------------------------------------------------------------------


def _read_answer(tls: ssl.SSLSocket, timeout_seconds: float) -> bytes:
    reply = b""
    tls.settimeout(timeout_seconds)
    try:
        while b"\r\n" not in reply:
            data = tls.recv(65536)
            if not data:
                break
            reply += data
    except OSError:
        pass
    return reply


def flood(target: Target, plan: AttackPlan, stop: threading.Event, tally: AttackTally) -> None:
    """Until `stop`: POST a body over the server's limit at full speed, read what is answered, and again."""
    context = target.context()
    head = post_head(plan.oversized_body_bytes)
    chunk = memoryview(b" " * plan.chunk_bytes)
    while not stop.is_set():
        try:
            tls = target.connect(context, timeout_seconds=10.0)
        except OSError:
            tally.oversized_open_failed += 1
            stop.wait(0.2)
            continue
        tally.oversized_begun += 1
        sent = 0
        try:
            tls.sendall(head)
            while sent < plan.oversized_body_bytes and not stop.is_set():
                n = min(plan.chunk_bytes, plan.oversized_body_bytes - sent)
                tls.sendall(chunk[:n])
                sent += n
        except OSError:
            pass  # the server closed it: answered (and lingered), or reset
        reply = _read_answer(tls, 2.0)
        tls.close()
        key = "stopped" if stop.is_set() and not reply else answer_status(reply)
        tally.oversized_ended[key] = tally.oversized_ended.get(key, 0) + 1
        tally.oversized_bytes += sent


# --- the attacking process -------------------------------------------------------------------------------------------


def run_episode(target: Target, plan: AttackPlan, keep_going: Any) -> AttackTally:
    """Attack while keep_going() holds (and at most the plan's longest episode); what it did."""
    started, cpu_started = time.monotonic(), time.process_time()
    stop = threading.Event()
    tallies = [AttackTally() for _ in range(1 + plan.oversized_senders)]
    threads = [threading.Thread(target=trickle, args=(target, plan, stop, tallies[0]), name="slow", daemon=True)]
    threads += [threading.Thread(target=flood, args=(target, plan, stop, t), name=f"oversized-{i}", daemon=True)
                for i, t in enumerate(tallies[1:])]
    for thread in threads:
        thread.start()
    try:
        while keep_going() and time.monotonic() - started < plan.max_episode_seconds:
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
    total = AttackTally()
    for tally in tallies:
        total = total.merge(tally)
    total.seconds = time.monotonic() - started
    total.cpu_seconds = time.process_time() - cpu_started
    return total


def attacker_main(target: Target, plan: AttackPlan, nice: int, go: MpEvent, quit_: MpEvent,
                  results: multiprocessing.queues.Queue[AttackTally]) -> None:
    """The attacking process: one episode each time `go` is set, its tally put on `results` once it is cleared."""
    if nice:
        os.nice(nice)
    parent = os.getppid()

    def bench_alive() -> bool:
        return os.getppid() == parent and not quit_.is_set()

    while bench_alive():
        if go.wait(0.2):
            results.put(run_episode(target, plan, lambda: go.is_set() and bench_alive()))
            while go.is_set() and bench_alive():  # an episode cut short by its limit: wait for the bench
                time.sleep(0.05)


class Attacker:
    """The bench's handle on the attacking process. Start it before the bench starts any thread (it forks)."""

    def __init__(self, target: Target, plan: AttackPlan, nice: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.go, self.quit = ctx.Event(), ctx.Event()
        self.results: multiprocessing.queues.Queue[AttackTally] = ctx.Queue()
        self.process = ctx.Process(target=attacker_main, args=(target, plan, nice, self.go, self.quit, self.results),
                                   name="bench-stall-attacker", daemon=True)
        self.plan = plan

    def start(self) -> None:
        self.process.start()

    def begin(self) -> None:
        self.go.set()

    def end(self) -> AttackTally:
        self.go.clear()
        try:
            return self.results.get(timeout=60)
        except queue.Empty:
            raise RuntimeError(f"the attacking process did not report (alive: {self.process.is_alive()}, "
                               f"exit code {self.process.exitcode})") from None

    def close(self) -> None:
        self.go.clear()
        self.quit.set()
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10)


# --- the readiness probe ---------------------------------------------------------------------------------------------


class ReadyzPoller:
    """/readyz every `interval_seconds` on a new TLS connection, as the kubelet probes; take() hands over the
    polls since the last take()."""

    def __init__(self, target: Target, interval_seconds: float = 0.2,
                 timeout_seconds: float = READYZ_TIMEOUT_SECONDS) -> None:
        self.target, self.interval, self.timeout = target, interval_seconds, timeout_seconds
        self.context = target.context()
        self._polls: list[Poll] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="readyz", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def take(self) -> list[Poll]:
        with self._lock:
            polls, self._polls = self._polls, []
        return polls

    def poll_once(self) -> Poll:
        started = time.monotonic()
        status = 0
        conn = http.client.HTTPSConnection(self.target.host, self.target.port, context=self.context,
                                           timeout=self.timeout)
        try:
            conn.request("GET", "/readyz", headers={"Host": SERVER_NAME, "Connection": "close"})
            response = conn.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            status = 0
        finally:
            conn.close()
        elapsed = time.monotonic() - started
        if elapsed > self.timeout:  # answered, but later than the probe would have waited
            status = 0
        return Poll(started, status, elapsed * 1000)

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            poll = self.poll_once()
            with self._lock:
                self._polls.append(poll)
            due += self.interval
            now = time.monotonic()
            if due < now:  # a poll outlasted the interval: the next falls due on the period, as the kubelet's
                due = now + (self.interval - (now - due) % self.interval)
            self._stop.wait(due - now)
