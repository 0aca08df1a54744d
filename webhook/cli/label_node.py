"""`gpuclass label-node`: label this node's GPU type from nvidia-smi (cluster/labeller.py).

The standard library only, here and in what it runs: `python -S -m webhook.cli label-node` works on a node with
just Python.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from ..serving import logs  # the standard library only
from .common import Command

if TYPE_CHECKING:
    from .common import Subparsers


def add_parser(sub: Subparsers) -> None:
    ln = sub.add_parser("label-node", help="label this node's GPU type from nvidia-smi")
    ln.add_argument("--node", default=os.environ.get("NODE_NAME"), help="node name (default: $NODE_NAME)")
    ln.add_argument("--interval-seconds", type=float, default=300.0)
    ln.add_argument("--once", action="store_true", help="label once and exit")
    ln.add_argument("--dry-run", action="store_true", help="print the patch, change nothing")
    ln.add_argument("--kubeconfig", default=None)
    ln.add_argument("--log-level", default="info", choices=logs.LEVELS)


def run(args: argparse.Namespace) -> int:
    from ..cluster.labeller import main_label_node

    logs.configure(args.log_level)
    return main_label_node(args)


COMMAND = Command("label-node", add_parser, run)
