"""The Flask application: routes translate HTTP to review/planner calls and back, nothing more."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

from flask import Flask, Response, request
from werkzeug.exceptions import ClientDisconnected, HTTPException, InternalServerError
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wrappers import Request as WerkzeugRequest

from ..cluster.source import InventorySource
from ..core.catalog.model import Catalog
from ..core.admission.review import (
    BadReview, Review, build_response, encode_compact, parse_review, request_namespace, review_request,
)
from . import logs
from .config import MAX_ADMISSION_REVIEW_BYTES
from ..core.access.metrics_gate import Gate
from .extender_routes import CallerCheck, register_extender_routes
from .metrics_listener import by_listener, gated_metrics
from .responses import json_response
from .tls import extender_caller

log = logging.getLogger("gpu_class.admission")


def create_app(
    catalog: Catalog,
    inventory: InventorySource,
    *,
    max_body_bytes: int = MAX_ADMISSION_REVIEW_BYTES,
    extender_caller_of: CallerCheck = extender_caller,
    metrics_listener: tuple[int, Gate] | None = None,
) -> Flask:
    """`metrics_listener`: the port that serves /metrics, and who may read it there; None: /metrics is not served."""
    # imported here, not at the top: under gunicorn the multiprocess directory must be set first
    from . import metrics

    metrics.start_admission_series(catalog)
    app = Flask("gpu_class")
    # more than the API server can send (config.py); under gunicorn the worker refuses it first (intake.py)
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    admit = _admission(catalog, inventory, max_body_bytes)
    _add_routes(app, catalog, inventory, admit)
    register_extender_routes(app, catalog, inventory, extender_caller_of)
    app.wsgi_app = _admission_first(app.wsgi_app, admit)  # type: ignore[method-assign, assignment]
    if metrics_listener is not None:
        # the admission port stays free of /metrics: whoever can reach it (the API server, by network policy
        # anyone) reads no metrics there
        port, gate = metrics_listener
        metrics_app = gated_metrics(gate, _render_metrics(catalog, inventory))
        app.wsgi_app = by_listener(app.wsgi_app, metrics_app, port)  # type: ignore[method-assign, assignment]
    return app


def _render_metrics(catalog: Catalog, inventory: InventorySource) -> Callable[[], tuple[bytes, str]]:
    from . import metrics  # see create_app

    def render() -> tuple[bytes, str]:
        metrics.observe_pending(inventory.snapshot(), catalog, time.time())
        return metrics.render()

    return render


Admit = Callable[[dict[str, Any]], tuple[bytes, int]]


def _admission(catalog: Catalog, inventory: InventorySource, max_body_bytes: int) -> Admit:
    """The admission, one function of the WSGI environ: _admission_first calls it straight from WSGI."""
    from . import metrics  # see create_app

    def admit(environ: dict[str, Any]) -> tuple[bytes, int]:
        """/mutate: the encoded answer and its HTTP status."""
        started = time.perf_counter()
        # under gunicorn the body is in memory already: the worker reads each request whole, by a
        # deadline, before a thread takes it (intake.py), so this read never waits on a slow client
        reader = WerkzeugRequest(environ)
        reader.max_content_length = max_body_bytes  # larger: RequestEntityTooLarge, before reading
        try:
            body = reader.get_data(cache=False)
        except (OSError, ClientDisconnected):  # shorter than its Content-Length (werkzeug reports a disconnect)
            metrics.observe_admission(None, time.perf_counter() - started, catalog, "bad-request")
            return encode_compact({"error": "Bad Request", "message": "body shorter than its Content-Length"}), 400
        try:
            req = parse_review(body)
        except BadReview as exc:
            metrics.observe_admission(None, time.perf_counter() - started, catalog, "bad-request")
            _log_request(None, None, started, "bad-request", str(exc))
            return encode_compact({"error": "Bad Request", "message": str(exc)}), 400
        try:
            snapshot = inventory.snapshot()
            result = review_request(req, snapshot, catalog,
                                    inventory.namespace_policy(snapshot, request_namespace(req)))
            answer = build_response(req, result)
        except Exception:
            # a bug must not become a 5xx (the API server would apply failurePolicy silently):
            # refuse this Pod with a message that points at the logs
            log.exception("admission failed uid=%s", req.uid)
            metrics.observe_admission(None, time.perf_counter() - started, catalog, "error")
            _log_request(req, None, started, "error", "internal error")
            return encode_compact(_internal_error(req.api_version, req.uid)), 200
        metrics.observe_admission(result, time.perf_counter() - started, catalog)
        _log_request(req, result, started, result.decision.outcome, result.decision.message)
        return encode_compact(answer), 200

    return admit


def _add_routes(app: Flask, catalog: Catalog, inventory: InventorySource, admit: Admit) -> None:
    """Every route but the extender's and /metrics (metrics_listener.py): /mutate (as Flask reaches it), health and
    readiness."""

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        return json_response({"error": exc.name, "message": exc.description}, exc.code or 400)

    @app.post("/mutate")
    def mutate() -> Response:  # reached only when the WSGI entry below passes a request on (tests may call it)
        body, status = admit(request.environ)
        return Response(body, status=status, mimetype="application/json")

    @app.get("/healthz")
    def healthz() -> Response:
        return json_response({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        ready, detail = inventory.readiness()
        return json_response({"ready": ready, **detail}, 200 if ready else 503)


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _admission_first(flask_app: WsgiApp, admit: Admit) -> WsgiApp:
    """POST /mutate answered straight from WSGI; every other request goes through Flask.

    Flask's request dispatch (contexts, URL matching, session, signals, the Response object) cost
    more per admission than the decision itself (bench/RESULTS.md). The answer is what the Flask
    route gave: the same body, status line and headers, the same JSON error for a body that is too
    large, the same JSON 500 for a bug outside the decision (which Flask would also log).
    """

    def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/mutate" or environ.get("REQUEST_METHOD") != "POST":
            return flask_app(environ, start_response)
        try:
            body, status = admit(environ)
        except HTTPException as exc:  # RequestEntityTooLarge
            status = exc.code or 400
            body = encode_compact({"error": exc.name, "message": exc.description})
        except Exception:
            log.exception("Exception on /mutate [POST]")
            status = 500
            body = encode_compact({"error": "Internal Server Error",
                                "message": InternalServerError.description})
        # werkzeug's status line: the reason phrase in capitals
        start_response(f"{status} {HTTP_STATUS_CODES.get(status, 'UNKNOWN').upper()}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return wsgi_app


def _internal_error(api_version: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {"code": 500, "message": f"gpu-class: internal error placing this Pod (uid {uid}); see the webhook's logs"},
        },
    }


def _log_request(req: Any, result: Review | None, started: float, outcome: str, message: str) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    pod_meta = req.object.get("metadata") if req is not None else None
    pod_meta = pod_meta if isinstance(pod_meta, dict) else {}
    record = {
        "uid": req.uid if req is not None else None,
        "namespace": req.namespace if req is not None else None,
        "pod": pod_meta.get("name") or pod_meta.get("generateName") or (req.name if req is not None else None),
        "class": (result.decision.class_name or "")[:63] or None if result is not None else None,
        "outcome": outcome,
        "types": list(result.decision.placement.types) if result and result.decision.placement else None,
        "group": (result.decision.group.name[:63] or None) if result and result.decision.group else None,
        "message": message or None,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    logs.write_record(log.name, "admission", record)
