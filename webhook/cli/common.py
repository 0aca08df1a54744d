"""What several commands share: the shape of a command, the arguments that name an inventory, a cluster or a
scheduler, and reading the catalog and the inventory they name.

Standard library only at import (see __init__.py): what a command reads, it imports when it runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable, NamedTuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from ..cluster.query import Connection
    from ..core.catalog.model import Catalog
    from ..core.view.snapshot import Snapshot

    # argparse names no public type for what add_subparsers returns
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


class Command(NamedTuple):
    """A subcommand of `gpuclass`: its name, how it adds its subparser, and what it runs (the exit status)."""

    name: str
    add_parser: Callable[[Subparsers], None]
    run: Callable[[argparse.Namespace], int]


def add_inventory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", dest="catalog_file", help="catalog YAML (default: the built-in catalog)")
    p.add_argument(
        "--nodes", action="append", default=[], metavar="NODES.yaml",
        help="inventory file: `kubectl get nodes -o yaml` output, or Node/Namespace documents (repeatable)",
    )


def add_scheduler_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler-name", default=None, metavar="NAME",
                   help="the scheduler of the Pods gpu-class places, instead of the catalog's schedulerName "
                        "(the installs that run deploy/scheduler give gpu-class-scheduler)")


def add_metrics_auth_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-auth", choices=("delegated", "none"), default="delegated",
                   help="who may read /metrics: delegated (default): a bearer token the API server accepts "
                        "(TokenReview) of an identity allowed to get /metrics (SubjectAccessReview; the ClusterRole "
                        "gpu-class-metrics-reader); none: anyone, and so only on a loopback address")


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig of the cluster to ask (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current context)")


def read_catalog(args: argparse.Namespace) -> Catalog:
    """The catalog of --config (else the built-in one), with --scheduler-name where the command has it."""
    from ..serving.config import ServeConfig
    from ..serving.server import load_catalog

    return load_catalog(ServeConfig("", "", catalog_file=args.catalog_file,
                                    scheduler_name=getattr(args, "scheduler_name", None)))


def connect_cluster(args: argparse.Namespace) -> Connection:
    """The cluster of --kubeconfig and --context; refused beside --nodes."""
    from ..cluster.loading import InputError
    from ..cluster.query import connect

    if args.nodes:
        raise InputError("give --nodes (a file inventory) or --kubeconfig/--context (the cluster), not both")
    return connect(args.kubeconfig, args.context)


def read_inventory(args: argparse.Namespace, catalog: Catalog) -> tuple[Snapshot, Connection | None]:
    """The file inventory of --nodes, else one read of the cluster (and the connection, to read more)."""
    from ..cluster.loading import load_snapshot
    from ..cluster.query import read_snapshot

    if args.nodes and not (args.kubeconfig or args.context):
        return load_snapshot(tuple(args.nodes), catalog), None
    connection = connect_cluster(args)
    return read_snapshot(connection.api, catalog), connection
