"""/metrics on a listener of its own, behind the check of core/access/metrics_gate.py.

The webhook serves it from gunicorn on --metrics-bind (the admission port answers /metrics with 404):
`by_listener` hands a connection accepted on the metrics port to `gated_metrics`. The upgrader, which has
no gunicorn, serves the same WSGI app from a small threaded TLS server (`serve_metrics_in_thread`).
"""

from __future__ import annotations

import json
import logging
import os
import socketserver
import ssl
import threading
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from werkzeug.http import HTTP_STATUS_CODES

from ..core.access.metrics_gate import METRICS_PATH, Gate, GateAnswer

log = logging.getLogger("gpu_class.metrics_auth")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Render = Callable[[], tuple[bytes, str]]


def _status_line(status: int) -> str:
    return f"{status} {HTTP_STATUS_CODES.get(status, 'UNKNOWN')}"


def _json(start_response: Callable[..., Any], status: int, error: str, message: str,
          headers: tuple[tuple[str, str], ...] = ()) -> list[bytes]:
    body = json.dumps({"error": error, "message": message}).encode()
    start_response(_status_line(status), [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                          *headers])
    return [body]


def gated_metrics(gate: Gate, render: Render) -> WsgiApp:
    """GET /metrics, answered only when `gate` allows the request's bearer token; /healthz to anyone."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":  # the kubelet's probe, which has no token; tells nothing
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
            return [b"ok"]
        if environ.get("PATH_INFO") != METRICS_PATH:
            return _json(start_response, 404, "Not Found", f"this listener serves {METRICS_PATH} (and /healthz) only")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _json(start_response, 405, "Method Not Allowed", f"{METRICS_PATH} answers GET",
                         (("Allow", "GET, HEAD"),))
        answer = gate.check(environ.get("HTTP_AUTHORIZATION"))
        if answer.status != 200:
            _log_refusal(answer, environ)
            challenge = (("WWW-Authenticate", 'Bearer realm="gpu-class"'),) if answer.status == 401 else ()
            return _json(start_response, answer.status, HTTP_STATUS_CODES[answer.status], answer.message, challenge)
        body, content_type = render()
        start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    return app


def _log_refusal(answer: GateAnswer, environ: dict[str, Any]) -> None:
    fields = {"status": answer.status, "user": answer.username, "peer": environ.get("REMOTE_ADDR"),
              "reason": answer.message}
    # an outage refuses every scrape: say so loudly; a wrong token is the scraper's to fix
    level = logging.WARNING if answer.status == 503 else logging.INFO
    log.log(level, "metrics scrape refused", extra={"fields": fields})


def by_listener(main: WsgiApp, metrics: WsgiApp, metrics_port: int) -> WsgiApp:
    """Requests accepted on `metrics_port` go to `metrics`, all others to `main`."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        sock = environ.get("gunicorn.socket")
        try:
            port = sock.getsockname()[1] if sock is not None else None
        except OSError:
            port = None
        return (metrics if port == metrics_port else main)(environ, start_response)

    return app


class _TlsWsgiServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    context: ssl.SSLContext

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        # the handshake happens on the handler's thread at its first read, under its timeout: a client
        # that stalls it holds that thread, not the accept loop
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


class _QuietHandler(WSGIRequestHandler):
    timeout = 10  # seconds a connection may take per read (handshake included)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # refusals are logged by the app, scrapes are not worth a line each


def self_signed_context(names: tuple[str, ...]) -> ssl.SSLContext:
    """A TLS context with a certificate made now, as kube-scheduler serves its secure port without one given."""
    from .certs import generate

    bundle = generate(list(names))
    # ssl loads a key from a path only: anonymous memory files, since the root filesystem is read-only and the key
    # should reach no disk
    cert_fd, key_fd = os.memfd_create("metrics-tls.crt"), os.memfd_create("metrics-tls.key")
    try:
        os.write(cert_fd, bundle.tls_crt)
        os.write(key_fd, bundle.tls_key)
        return file_context(f"/proc/self/fd/{cert_fd}", f"/proc/self/fd/{key_fd}")
    finally:
        os.close(cert_fd)
        os.close(key_fd)


def file_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def serve_metrics_in_thread(app: WsgiApp, address: str, port: int, context: ssl.SSLContext) -> WSGIServer:
    """Serve `app` over TLS on address:port from a daemon thread; returns the server (shutdown() stops it)."""
    server = make_server(address, port, app, server_class=_TlsWsgiServer, handler_class=_QuietHandler)
    server.context = context
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
