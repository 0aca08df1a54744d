"""`gpuclass upgrader`: move opted-in Pods (gpu-class.io/upgrade: "true") up to a better type of their class
once it has room, by eviction, with leader election (cluster/upgrader.py)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from ..serving import logs  # the standard library only
from .common import Command, add_metrics_auth_arg, read_catalog

if TYPE_CHECKING:
    from .common import Subparsers


def add_parser(sub: Subparsers) -> None:
    u = sub.add_parser("upgrader", help="move opted-in Pods (gpu-class.io/upgrade: \"true\") up to a better type of "
                                        "their class once it has room: evictions, with leader election")
    u.add_argument("--config", dest="catalog_file", help="catalog YAML (default: the built-in catalog)")
    u.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster service account)")
    u.add_argument("--settle-seconds", type=float, default=60.0,
                   help="how long a better type must have had room before a Pod moves to it")
    u.add_argument("--min-on-node-seconds", type=float, default=300.0, help="how long a Pod runs on its node first")
    u.add_argument("--window-seconds", type=float, default=3600.0,
                   help="a replacement of a Pod moved this long ago or less is not moved")
    u.add_argument("--moves-per-minute", type=int, default=6, help="evictions in the whole cluster per minute")
    u.add_argument("--in-flight-per-workload", type=int, default=1,
                   help="moves of one workload not yet done (Pod leaving, waiting or not Ready) before another")
    u.add_argument("--interval-seconds", type=float, default=10.0, help="time between passes")
    u.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "gpu-class-system"))
    u.add_argument("--lease-name", default="gpu-class-upgrader")
    u.add_argument("--metrics-port", type=int, default=9102, help="GET /metrics on this port, over TLS (0: none)")
    u.add_argument("--metrics-address", default="0.0.0.0", help="the address of the metrics listener")
    add_metrics_auth_arg(u)
    u.add_argument("--metrics-cert-file", help="the metrics listener's certificate (default: a self-signed one made "
                                               "at start, as kube-scheduler's secure port makes)")
    u.add_argument("--metrics-key-file", help="its key (with --metrics-cert-file)")
    u.add_argument("--dry-run", action="store_true", help="decide and log, evict nothing")
    u.add_argument("--log-level", default="info", choices=logs.LEVELS)


def run(args: argparse.Namespace) -> int:
    import threading

    from ..cluster.loading import InputError
    from ..cluster.upgrader import Upgrader, UpgraderConfig
    from ..cluster.watch import start_live_inventory
    from ..core.after_bind.upgrade import UpgradeSettings
    from ..serving.metrics import UpgradeMetrics, check_metrics_args, serve_upgrade_metrics

    if args.metrics_port:
        check_metrics_args(args)
    if min(args.moves_per_minute, args.in_flight_per_workload) < 1 or args.interval_seconds <= 0:
        raise InputError("--moves-per-minute and --in-flight-per-workload must be at least 1, --interval-seconds "
                         "more than 0")
    logs.configure(args.log_level)
    catalog = read_catalog(args)
    inventory = start_live_inventory(catalog, kubeconfig=args.kubeconfig)
    metrics = UpgradeMetrics(catalog)
    if args.metrics_port:
        serve_upgrade_metrics(args.metrics_port, args.metrics_address, args.metrics_auth, args.kubeconfig,
                              (args.metrics_cert_file, args.metrics_key_file))
    settings = UpgradeSettings(settle_seconds=args.settle_seconds, min_on_node_seconds=args.min_on_node_seconds,
                               window_seconds=args.window_seconds, moves_per_minute=args.moves_per_minute,
                               in_flight_per_workload=args.in_flight_per_workload)
    config = UpgraderConfig(settings=settings, interval_seconds=args.interval_seconds,
                            lease_namespace=args.lease_namespace, lease_name=args.lease_name, dry_run=args.dry_run)
    upgrader = Upgrader(inventory.api.api_client, catalog, inventory.snapshot, config, metrics)
    stop = threading.Event()
    try:
        upgrader.run(stop)
    except KeyboardInterrupt:
        stop.set()
    finally:
        inventory.stop()
    return 0


COMMAND = Command("upgrader", add_parser, run)
