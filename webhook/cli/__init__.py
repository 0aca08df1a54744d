"""The `gpuclass` command: serve, certs, inventory, explain, review, demo, catalog, kueue, upgrader, label-node; the one
argument parser (parser.py), to which each command's module (serve.py, ..., label_node.py) adds its subparser.

Installed twice: as `gpuclass`, and as `kubectl-gpu_class` so that kubectl runs it as `kubectl gpu-class`
(kubectl.py).

The top of the import layers (cli > serving > cluster > core, checked by tests/test_architecture.py).
Each command imports what it runs when it runs: `label-node` needs only the standard library, so
`python -S -m webhook.cli label-node --once --dry-run` works on a node with just Python.
"""

from __future__ import annotations

import sys
from typing import Sequence

from . import label_node
from .kubectl import KUBECTL_PLUGIN, kubectl_argv
from .parser import COMMANDS, build_parser

__all__ = ["KUBECTL_PLUGIN", "build_parser", "kubectl_argv", "kubectl_main", "main"]


def main(argv: Sequence[str] | None = None, prog: str = "gpuclass") -> int:
    args = build_parser(prog).parse_args(argv)
    run = next(c.run for c in COMMANDS if c.name == args.command)
    if args.command == label_node.COMMAND.name:  # raises neither error below, and must not need PyYAML to catch them
        return run(args)
    from ..cluster.loading import InputError
    from ..core.catalog.model import CatalogError

    try:
        return int(run(args) or 0)
    except (CatalogError, InputError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl gpu-class ...`, the same commands as a kubectl plugin."""
    return main(kubectl_argv(sys.argv[1:] if argv is None else argv), prog=KUBECTL_PLUGIN)
