"""`gpuclass serve`: the admission webhook over TLS (and the scheduler extender's verbs, where asked)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..serving import logs  # the standard library only
from .certs import add_managed_args, managed_settings
from .common import Command, add_inventory_args, add_metrics_auth_arg, add_scheduler_arg

if TYPE_CHECKING:
    from .common import Subparsers


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser("serve", help="run the admission webhook over TLS")
    add_inventory_args(s)
    s.add_argument("--kubeconfig", help="kubeconfig for the live inventory (default: in-cluster service account)")
    s.add_argument("--cert-file", required=True)
    s.add_argument("--key-file", required=True)
    s.add_argument("--bind", default="0.0.0.0:8443", help="HOST:PORT (default 0.0.0.0:8443)")
    s.add_argument("--extender-bind", metavar="HOST:PORT",
                   help="serve the scheduler extender verbs here, to clients with a certificate of --client-ca-file "
                        "(default: not served)")
    s.add_argument("--client-ca-file", help="CA of the scheduler extender's callers (with --extender-bind)")
    s.add_argument("--metrics-bind", default="0.0.0.0:8445", metavar="HOST:PORT",
                   help="serve /metrics here, over TLS with --cert-file (default 0.0.0.0:8445; never on --bind)")
    add_metrics_auth_arg(s)
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--threads", type=int, default=1, help="threads per worker (default 1: see bench/RESULTS.md)")
    s.add_argument("--log-level", default="info", choices=logs.LEVELS)
    add_scheduler_arg(s)
    s.add_argument("--stock-scheduler", action="append", default=[], metavar="NAME",
                   help="a strict scheduler of the catalog that runs the stock kube-scheduler binary (the "
                        "stock-scheduler install option): it keeps the type order, not gpu-class.io/max-wait, which "
                        "the webhook then drops with a warning (repeatable)")
    s.add_argument("--publish-namespace", metavar="NAMESPACE", default=None,
                   help="write the ConfigMap gpu-class-public there, the catalog and scheduler names gpuclass explain "
                        "reads of this install (default: the Pod's own namespace when run in a Pod, else nowhere; "
                        "'' for nowhere)")
    add_managed_args(s)


def run(args: argparse.Namespace) -> int:
    from ..cluster.loading import InputError
    from ..serving.config import ServeConfig
    from ..serving.server import serve

    if args.workers < 1 or args.threads < 1:
        raise InputError("--workers and --threads must be at least 1")
    serve(
        ServeConfig(
            cert_file=args.cert_file,
            key_file=args.key_file,
            bind=args.bind,
            extender_bind=args.extender_bind,
            client_ca_file=args.client_ca_file,
            metrics_bind=args.metrics_bind,
            metrics_auth=args.metrics_auth,
            catalog_file=args.catalog_file,
            scheduler_name=args.scheduler_name,
            stock_schedulers=tuple(args.stock_scheduler),
            nodes_files=tuple(args.nodes),
            kubeconfig=args.kubeconfig,
            publish_namespace=_publish_namespace(args.publish_namespace),
            workers=args.workers,
            threads=args.threads,
            log_level=args.log_level,
            managed_tls=managed_settings(args),
        )
    )
    return 0


def _publish_namespace(given: str | None) -> str | None:
    """--publish-namespace, else the namespace of the Pod this runs in, else None."""
    from ..cluster.query import SERVICE_ACCOUNT_NAMESPACE

    if given is not None:
        return given or None
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


COMMAND = Command("serve", add_parser, run)
