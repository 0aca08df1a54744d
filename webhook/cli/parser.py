"""The one argument parser of `gpuclass`: each command adds its own subparser, from its own module."""

from __future__ import annotations

import argparse

from . import catalog, certs, demo, explain, inventory, kueue, label_node, review, serve, upgrader
from .common import Command

# every command, in the order `gpuclass --help` lists them
COMMANDS: tuple[Command, ...] = (
    serve.COMMAND, certs.COMMAND, inventory.COMMAND, explain.COMMAND, review.COMMAND, demo.COMMAND,
    catalog.COMMAND, kueue.COMMAND, upgrader.COMMAND, label_node.COMMAND,
)


def build_parser(prog: str = "gpuclass") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="GPU-type-aware placement for Kubernetes Pods")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser
