"""A TCP proxy on loopback that a test can cut: a network partition between one client and the API server.

Put between a process and the API server (the process's kubeconfig names the proxy's address, which the API
server's certificate also covers: 127.0.0.1), it passes bytes both ways, TLS included, untouched. `cut()` is
the partition: every open connection is closed and the listening socket with it, so a new connection is
refused at once, as from a host the network no longer reaches; `heal()` listens on the same port again.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from typing import Iterator

CHUNK_BYTES = 64 * 1024


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self.accepted = 0  # connections passed on, in all

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def heal(self) -> None:
        """Listen again, on the same port."""
        self.start()

    def cut(self) -> None:
        """Close every connection and stop listening: what was sent is lost, and a new connection is refused."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, set()
        if listener is not None:
            # shutdown wakes the thread blocked in accept(); close alone would not on Linux
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def stop(self) -> None:
        self.cut()

    def is_refusing(self) -> bool:
        """Whether a connection to the proxy is refused now (after `cut`)."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
            return False
        except ConnectionRefusedError:
            return True

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._connections |= {client, upstream}
                self.accepted += 1
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        """Copy bytes both ways until either side closes (or `cut` closes both)."""
        with _selector(client, upstream) as selector:
            peer = {client: upstream, upstream: client}
            open_ = True
            while open_:
                try:
                    for key, _ in selector.select():
                        source: socket.socket = key.fileobj  # type: ignore[assignment]
                        data = source.recv(CHUNK_BYTES)
                        if not data:
                            open_ = False
                            break
                        peer[source].sendall(data)
                except (OSError, ValueError):  # closed under us by cut(), or by the other side
                    open_ = False
        with self._lock:
            self._connections -= {client, upstream}
        for conn in (client, upstream):
            with contextlib.suppress(OSError):
                conn.close()


@contextlib.contextmanager
def _selector(*sockets: socket.socket) -> Iterator[selectors.BaseSelector]:
    selector = selectors.DefaultSelector()
    for s in sockets:
        selector.register(s, selectors.EVENT_READ)
    try:
        yield selector
    finally:
        selector.close()


@contextlib.contextmanager
def running_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
