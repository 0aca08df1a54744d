"""`gpuclass inventory`: the GPU types, nodes and free GPUs of a cluster (or of --nodes files), and what each
class can place now."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .common import Command, add_cluster_args, add_inventory_args, read_catalog, read_inventory

if TYPE_CHECKING:
    from .common import Subparsers

OUTPUTS = ("table", "wide", "json")  # core.inventory_report.OUTPUTS, without importing PyYAML for label-node


def add_parser(sub: Subparsers) -> None:
    i = sub.add_parser("inventory", help="GPU types, nodes and free GPUs of the cluster, and what each class can place now")
    add_inventory_args(i)
    add_cluster_args(i)
    i.add_argument("-o", "--output", choices=OUTPUTS, default="table")


def run(args: argparse.Namespace) -> int:
    from ..core.reports.inventory_report import build_report, render

    catalog = read_catalog(args)
    snapshot, _ = read_inventory(args, catalog)
    print(render(build_report(snapshot, catalog), args.output))
    return 0


COMMAND = Command("inventory", add_parser, run)
