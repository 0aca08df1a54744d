"""`gpuclass demo`: the bundled demo inventory (deploy/demo) served on localhost over TLS."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..serving import logs  # the standard library only
from .certs import write_certs
from .common import Command

if TYPE_CHECKING:
    from .common import Subparsers

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEMO_DIR = REPO_ROOT / "deploy" / "demo"


def add_parser(sub: Subparsers) -> None:
    d = sub.add_parser("demo", help="serve the bundled demo inventory on localhost over TLS")
    d.add_argument("--bind", default="127.0.0.1:8443")
    d.add_argument("--metrics-bind", default="127.0.0.1:8445",
                   help="/metrics, unchecked (--metrics-auth none): so on a loopback address only")
    d.add_argument("--certs-dir", default=None, help="where to write the demo certificates (default: certs/demo)")
    d.add_argument("--log-level", default="info", choices=logs.LEVELS)


def run(args: argparse.Namespace) -> int:
    from ..cluster.loading import InputError
    from ..serving.config import ServeConfig
    from ..serving.server import serve

    nodes = [str(DEMO_DIR / "nodes.yaml"), str(DEMO_DIR / "namespaces.yaml")]
    for path in nodes:
        if not os.path.exists(path):
            raise InputError(f"demo inventory {path} not found; run `gpuclass demo` from a checkout of gpu-class")
    certs_dir = args.certs_dir or str(REPO_ROOT / "certs" / "demo")
    host, _, port = args.bind.rpartition(":")
    write_certs(certs_dir, ["localhost"], ["127.0.0.1"])
    url = f"https://{'localhost' if host in ('127.0.0.1', '0.0.0.0', '') else host}:{port}"
    pod = DEMO_DIR / "pod-high.yaml"
    print(
        f"gpu-class demo: serving {DEMO_DIR / 'nodes.yaml'} on {url}/mutate (CA: {certs_dir}/ca.crt)\n"
        f"Send it a Pod as the API server would, from another shell:\n"
        f"  .venv/bin/gpuclass review {pod} --namespace ml-team | curl -s --cacert {certs_dir}/ca.crt "
        f"-H 'Content-Type: application/json' --data-binary @- {url}/mutate\n"
        f"Or ask why: .venv/bin/gpuclass explain {pod} --namespace ml-team --nodes {nodes[0]} --nodes {nodes[1]}\n"
        f"Metrics, unchecked on loopback (no API server to check tokens with): "
        f"curl -s --cacert {certs_dir}/ca.crt https://localhost:{args.metrics_bind.rpartition(':')[2]}/metrics\n",
        flush=True,
    )
    serve(
        ServeConfig(
            cert_file=f"{certs_dir}/tls.crt", key_file=f"{certs_dir}/tls.key", bind=args.bind,
            # the demo has no API server to check scrapes with: unchecked, which start refuses off loopback
            metrics_bind=args.metrics_bind, metrics_auth="none",
            nodes_files=tuple(nodes), workers=1, threads=2, log_level=args.log_level,
        )
    )
    return 0


COMMAND = Command("demo", add_parser, run)
