"""Where a request's time goes inside the app: each step of /mutate timed in-process, on one thread.

No gunicorn, no TLS, no other threads: this is the app's own CPU per step, to compare with the
server's CPU per request measured under load. Run in its own process by bench/http/run.py (the
Prometheus multiprocess directory must be set before webhook.serving.metrics is imported):

    python -m bench.http.breakdown NODES.yaml     # prints JSON: [[step, microseconds], ...]
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import sys
import tempfile
import time
import timeit
from typing import Any, Callable, Sequence

from bench.common.workload import build_request_body

Step = tuple[str, float]


def best_microseconds(fn: Callable[[], Any], seconds: float = 0.4) -> float:
    """Best of three runs of about `seconds` each, per call."""
    number = max(int(seconds / max(timeit.timeit(fn, number=20) / 20, 1e-7)), 20)
    return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6


def measure_steps(nodes_file: str) -> list[Step]:
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-metrics-"))
    from werkzeug.test import EnvironBuilder

    from kubernetes.watch.watch import iter_resp_lines

    from webhook.cluster.watch import _events
    from webhook.serving import app as webhook_app
    from webhook.serving import logs, metrics
    from webhook.cluster.source import StaticInventory
    from webhook.serving.app import create_app
    from webhook.core.catalog.loading import load_default_catalog
    from webhook.serving.config import ServeConfig
    from webhook.cluster.loading import load_snapshot
    from webhook.core.admission.planner import plan
    from webhook.core.admission.review import build_response, encode_compact, load_json, parse_review, review_pod

    from bench.common.variant import create_baseline_app

    body = build_request_body().data
    catalog = load_default_catalog()
    snapshot = load_snapshot((nodes_file,), catalog)
    logs.configure("info")
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(devnull)

    request = parse_review(body)
    review = review_pod(request, snapshot, catalog)
    answer = build_response(request, review)
    environ = EnvironBuilder(method="POST", path="/mutate", data=body, content_type="application/json").get_environ()

    def wsgi(app: Any) -> Callable[[], None]:
        def call() -> None:
            env = dict(environ)
            env["wsgi.input"] = io.BytesIO(body)
            b"".join(app(env, lambda status, headers: None))
        return call

    # the same Pod as each gpu-class worker's Pods watch reads it, one event per chunk as the API server sends them
    events = [b'{"type":"ADDED","object":' + encode_compact(request.object) + b"}\n"] * 100

    class Stream:  # the client reads a urllib3 response
        def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
            return iter(events)

    def client_lines() -> None:
        for line in iter_resp_lines(Stream()):
            json.loads(line)

    def watch_lines() -> None:
        for _ in _events(events):
            pass

    mutation_app = create_app(catalog, StaticInventory(snapshot))
    baseline_app = create_baseline_app(ServeConfig("", ""))
    root = logging.getLogger()
    steps: list[Step] = [
        ("json.loads(body) (the baseline's parser)", best_microseconds(lambda: json.loads(body))),
        ("review.load_json(body) (orjson, json.loads where they differ)", best_microseconds(lambda: load_json(body))),
        ("review.parse_review", best_microseconds(lambda: parse_review(body))),
        ("planner.plan", best_microseconds(lambda: plan(request.object, snapshot, catalog, namespace=request.namespace))),
        ("review.review_pod (plan + patch)", best_microseconds(lambda: review_pod(request, snapshot, catalog))),
        ("review.review_pod on a snapshot no answer was worked out from yet (its memo empty)", best_microseconds(
            lambda: review_pod(request, dataclasses.replace(snapshot, memo={}), catalog))),
        ("review.build_response + encode_compact (as /mutate answers)", best_microseconds(
            lambda: encode_compact(build_response(request, review)))),
        ("metrics.observe_admission", best_microseconds(lambda: metrics.observe_admission(review, 0.001, catalog))),
        ("app._log_request (info, one thread)", best_microseconds(
            lambda: webhook_app._log_request(request, review, time.perf_counter(), "patched", ""))),
        ("a Pod's watch event read as kubernetes' iter_resp_lines and json.loads read it",
         best_microseconds(client_lines) / len(events)),
        ("a Pod's watch event read as the watch reads it (watch._events: lines of bytes, orjson)",
         best_microseconds(watch_lines) / len(events)),
        ("Flask app, baseline (WSGI call)", best_microseconds(wsgi(baseline_app))),
        ("Flask app, mutation, log level info", best_microseconds(wsgi(mutation_app))),
    ]
    root.setLevel(logging.WARNING)
    steps.append(("Flask app, mutation, log level warning", best_microseconds(wsgi(mutation_app))))
    assert answer["response"]["allowed"]
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    print(json.dumps(measure_steps(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
