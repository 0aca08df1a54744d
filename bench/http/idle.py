"""Does the server still answer while some clients hold connections open and send nothing?

gunicorn's gthread worker gives a new connection a thread, does the TLS handshake there and then
reads the first request, blocking. A client that connects and stays silent (a stuck client, a
scanner, a load balancer's TCP check that lingers) holds that thread until it goes away. With
workers x threads such connections, every thread may be held. This probe opens that many silent TLS
connections, then asks /healthz on fresh connections, as a kubelet probe or the API server would.
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common.procs import healthy


@dataclass(frozen=True)
class IdleProbe:
    idle_connections: int
    handshakes_done: int  # of the silent connections: the others waited for a free thread
    answered: int  # /healthz probes answered within the timeout
    probes: int


def probe_with_idle_connections(port: int, ca_file: Path, idle: int, *, probes: int = 2,
                                timeout_seconds: float = 1.0, handshake_seconds: float = 0.3) -> IdleProbe:
    """Hold `idle` silent connections (a worker's main thread keeps accepting while its threads are
    held, so where they land is luck: ask for more than workers x threads), then probe /healthz."""
    context = ssl.create_default_context(cafile=str(ca_file))
    held: list[socket.socket] = []
    handshakes = 0
    try:
        for _ in range(idle):
            raw = socket.create_connection(("127.0.0.1", port), timeout=handshake_seconds)
            try:
                held.append(context.wrap_socket(raw, server_hostname="localhost"))
                handshakes += 1
            except (OSError, ssl.SSLError):
                held.append(raw)  # the handshake is still waiting for a thread: keep the connection open
        time.sleep(0.2)
        answered = 0
        for _ in range(probes):
            answered += healthy(port, ca_file, timeout_seconds=timeout_seconds)
        return IdleProbe(idle, handshakes, answered, probes)
    finally:
        for sock in held:
            sock.close()
