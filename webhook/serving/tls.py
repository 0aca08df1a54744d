"""Serving TLS context that follows certificate files as they are rotated, and the extender's listener.

gunicorn asks for the context once per accepted connection; we hand back a cached one and rebuild
it when the files change (a Secret volume update, cert-manager renewal), so new connections get the
new certificate with no restart. A half-written pair fails to load and the old context stays.

The scheduler extender's verbs change what the server believes (filter's assumptions), so they are
served on a listener of their own (--extender-bind) that asks for a client certificate and checks
it against --client-ca-file; the admission listener asks for none, so the API server's calls are
the same whatever it is configured to present. Connections to the extender's port are handed to
that listener's context by port, since gunicorn has one context factory for all its listeners.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

log = logging.getLogger("gpu_class.tls")


class ClientAuthSocket(ssl.SSLSocket):
    """A connection to the extender's listener: the client was asked for a certificate.

    A certificate the client CA does not verify fails the handshake, before any request: that
    refusal is logged here, since gunicorn logs failed handshakes only at debug level. The worker
    shakes hands on a non-blocking socket (intake.py): "wants more bytes" is no refusal.
    """

    def do_handshake(self, block: bool = False) -> None:
        try:
            super().do_handshake(block)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            if exc.args and exc.args[0] != ssl.SSL_ERROR_EOF:
                log.warning("extender connection refused", extra={"fields": {
                    "peer": _peer(self), "status": "tls-handshake-failed", "reason": exc.reason or str(exc)}})
            raise


def _peer(sock: socket.socket) -> str | None:
    try:
        return "%s:%s" % sock.getpeername()[:2]
    except OSError:
        return None


class ServerContext(ssl.SSLContext):
    """Routes a connection accepted on the extender's port to the extender's context.

    gunicorn has one context factory for all its listeners; the worker wraps every accepted socket
    through this context (without a handshake: it shakes hands in its event loop, by the request's
    deadline, intake.py).
    """

    # connections accepted on this port go to `extender` (the listener that asks for certificates)
    extender_port: int | None = None
    extender: ssl.SSLContext | None = None

    def wrap_socket(self, sock: socket.socket, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        if self.extender is not None and sock.getsockname()[1] == self.extender_port:
            return self.extender.wrap_socket(sock, *args, **kwargs)
        return super().wrap_socket(sock, *args, **kwargs)


@dataclass(frozen=True)
class Refusal:
    """Why an extender call is refused: 401 without a client certificate, 403 on the wrong listener."""

    status: int
    message: str


def extender_caller(environ: Mapping[str, Any]) -> str | Refusal:
    """Who calls an extender verb: the subject of its verified client certificate, or a Refusal."""
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, ClientAuthSocket):
        return Refusal(403, "the scheduler extender verbs are served only on the extender's listener "
                            "(gpuclass serve --extender-bind), to clients with a certificate of its client CA")
    certificate = sock.getpeercert()
    if not certificate:
        return Refusal(401, "a client certificate signed by the extender's client CA is required "
                            "(kube-scheduler: extenders[].tlsConfig.certFile and keyFile)")
    return _common_name(certificate)


def _common_name(certificate: Mapping[str, Any]) -> str:
    names = [value for rdn in certificate.get("subject", ()) for key, value in rdn if key == "commonName"]
    return str(names[0]) if names else "?"


class CertReloader:
    def __init__(self, cert_file: str, key_file: str, *, client_ca_file: str | None = None,
                 extender_port: int | None = None, check_interval_seconds: float = 1.0) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file  # with extender_port: the extender's listener verifies clients
        self.extender_port = extender_port
        self.check_interval_seconds = check_interval_seconds
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._context = self._load()  # a bad pair at start is a misconfiguration: raise
        self._checked_at = time.monotonic()
        self.reloads = 0

    def _file_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.cert_file, self.key_file, *([self.client_ca_file] if self.client_ca_file else [])):
            st = os.stat(path)  # follows the ..data symlink Kubernetes swaps on update
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        context = self._server_context()
        if self.client_ca_file and self.extender_port:
            extender = self._server_context()
            # optional, not required: a client without one gets a 401 that says what is missing
            extender.verify_mode = ssl.CERT_OPTIONAL
            extender.load_verify_locations(cafile=self.client_ca_file)
            extender.sslsocket_class = ClientAuthSocket
            context.extender, context.extender_port = extender, self.extender_port
        return context

    def _server_context(self) -> ServerContext:
        context = ServerContext(ssl.PROTOCOL_TLS_SERVER)
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
                    log.info("serving certificate (and client CA) reloaded from %s", self.cert_file)
            except (OSError, ssl.SSLError) as exc:
                # mid-rotation (key and cert out of step) or a file briefly missing: keep serving
                log.warning("certificate reload failed, keeping the previous one: %s", exc)
            return self._context
