"""Serving TLS context that follows certificate files as they are rotated.

gunicorn asks for the context once per accepted connection; we hand back a cached one and rebuild
it when the files change (a Secret volume update, cert-manager renewal), so new connections get the
new certificate with no restart. A half-written pair fails to load and the old context stays.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from typing import Any

log = logging.getLogger("gpu_class.tls")


class ServerContext(ssl.SSLContext):
    """Puts a deadline on a new connection's handshake and first request.

    gunicorn's gthread worker gives each new connection a thread, shakes hands and reads the first
    request there, blocking: a client that connects and then says nothing would hold the thread
    until it went away, and a few such clients would stop the server. gunicorn wraps every accepted
    socket through this context, so the deadline is set before anything is read.
    """

    first_request_timeout_seconds: float = 3.0

    def wrap_socket(self, sock: socket.socket, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        sock.settimeout(self.first_request_timeout_seconds)
        return super().wrap_socket(sock, *args, **kwargs)


class CertReloader:
    def __init__(self, cert_file: str, key_file: str, *, check_interval_seconds: float = 1.0,
                 first_request_timeout_seconds: float = 3.0) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.check_interval_seconds = check_interval_seconds
        self.first_request_timeout_seconds = first_request_timeout_seconds
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._context = self._load()  # a bad pair at start is a misconfiguration: raise
        self._checked_at = time.monotonic()
        self.reloads = 0

    def _file_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.cert_file, self.key_file):
            st = os.stat(path)  # follows the ..data symlink Kubernetes swaps on update
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        context = ServerContext(ssl.PROTOCOL_TLS_SERVER)
        context.first_request_timeout_seconds = self.first_request_timeout_seconds
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked_at < self.check_interval_seconds:
            return self._context
        with self._lock:
            if now - self._checked_at < self.check_interval_seconds:
                return self._context
            self._checked_at = now
            try:
                stamp = self._file_stamp()
                if stamp != self._stamp:
                    self._context = self._load()
                    self._stamp = stamp
                    self.reloads += 1
                    log.info("serving certificate reloaded from %s", self.cert_file)
            except (OSError, ssl.SSLError) as exc:
                # mid-rotation (key and cert out of step) or a file briefly missing: keep serving
                log.warning("certificate reload failed, keeping the previous one: %s", exc)
            return self._context
