"""Servers the benchmark compares `gpuclass serve` with, built on the same webhook.serving.server.WebhookServer.

- `--app baseline`: the same gunicorn settings, TLS and Flask, answering every AdmissionReview with
  allowed: true and no patch. It still parses the body (to echo the uid), so the difference to the
  real server is the webhook's own work: review parsing, planning, the patch, its log line. With
  `--answer-file`, it answers with the fields of that file too (bench/apiserver/apiserver.py gives it the patch
  and warnings gpu-class answers for the Pod it creates: the API server's work on the patch, without
  gpu-class's).
- `--app mutation`: the real application, started as webhook.serving.server.serve() starts it, for
  settings `gpuclass serve` does not expose: the worker class (sync workers) and how connections are
  placed on workers (`--placement`: the project's balanced gthread worker, gunicorn's own gthread
  worker where accept() decides, gunicorn's `reuse_port` (a SO_REUSEPORT listener per worker), or a
  per-worker connection cap (`worker_connections`) so a worker holding its share stops accepting).

    python -m bench.common.variant --app baseline --cert-file F --key-file F --bind 127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any, Callable, Sequence

from flask import Flask, Response, request

from bench.common.procs import free_port
from webhook.serving.config import ServeConfig
from webhook.serving.server import WebhookServer, build_app, check_config, prepare_metrics_dir


PLACEMENTS = ("balanced", "accept", "reuse-port", "cap")
# the cap: the bench's 8 connections over 2 workers, plus one, since gthread closes a kept-alive
# connection when worker_connections - threads others are kept alive
CAP_CONNECTIONS = 5


def create_baseline_app(config: ServeConfig, answer: dict[str, Any] | None = None) -> Flask:
    """Allow everything: parse the review, echo its uid, no patch (or `answer`'s fields: a fixed patch)."""
    app = Flask("gpu_class_baseline")
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes

    def _json(body: Any, status: int = 200) -> Response:
        return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")

    @app.post("/mutate")
    def mutate() -> Response:
        try:
            review = json.loads(request.get_data(cache=False))
            uid = review["request"]["uid"]
            api_version = review["apiVersion"]
        except (ValueError, KeyError, TypeError) as exc:
            return _json({"error": "Bad Request", "message": str(exc)}, 400)
        return _json({"apiVersion": api_version, "kind": "AdmissionReview",
                      "response": {**(answer or {}), "uid": uid, "allowed": True}})

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    return app


class VariantServer(WebhookServer):
    """WebhookServer with one gunicorn setting changed after the project's own settings."""

    def __init__(self, config: ServeConfig, app_factory: Callable[[ServeConfig], Flask], worker_class: str,
                 placement: str = "balanced") -> None:
        self.worker_class = worker_class
        self.placement = placement
        super().__init__(config, app_factory=app_factory)

    def load_config(self) -> None:
        super().load_config()
        if self.worker_class == "sync" or self.placement != "balanced":
            self.cfg.set("worker_class", self.worker_class)  # gunicorn's own worker
        if self.placement == "reuse-port":
            self.cfg.set("reuse_port", True)
        if self.placement == "cap":
            self.cfg.set("worker_connections", CAP_CONNECTIONS)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.common.variant", description=__doc__.splitlines()[0])
    p.add_argument("--app", choices=("baseline", "mutation"), required=True)
    p.add_argument("--cert-file", required=True)
    p.add_argument("--key-file", required=True)
    p.add_argument("--bind", required=True)
    p.add_argument("--nodes", action="append", default=[])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--worker-class", choices=("gthread", "sync"), default="gthread")
    p.add_argument("--placement", choices=PLACEMENTS, default="balanced")
    p.add_argument("--log-level", default="info")
    p.add_argument("--answer-file", help="baseline: JSON object whose fields every answer carries (patch, warnings)")
    args = p.parse_args(argv)
    # a port of its own for /metrics, unchecked on loopback (no API server here): variants run side by side
    config = ServeConfig(
        cert_file=args.cert_file, key_file=args.key_file, bind=args.bind, nodes_files=tuple(args.nodes),
        workers=args.workers, threads=args.threads, log_level=args.log_level,
        metrics_bind=f"127.0.0.1:{free_port()}", metrics_auth="none",
    )
    factory: Callable[[ServeConfig], Flask] = create_baseline_app
    if args.answer_file:
        with open(args.answer_file, encoding="utf-8") as fh:
            factory = functools.partial(create_baseline_app, answer=json.load(fh))
    if args.app == "mutation":  # as webhook.serving.server.serve() does
        factory = functools.partial(build_app, loaded=check_config(config))
    prepare_metrics_dir()
    VariantServer(config, factory, args.worker_class, args.placement).run()


if __name__ == "__main__":
    main()
