"""`gpuclass catalog`: the built-in catalog (a starting point for --config), or a catalog's types with their
facts and its classes (-o table)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .common import Command, read_catalog

if TYPE_CHECKING:
    from .common import Subparsers


def add_parser(sub: Subparsers) -> None:
    c = sub.add_parser("catalog", help="print the built-in catalog (a starting point for --config), or a catalog's "
                                       "types with their facts and its classes (-o table)")
    c.add_argument("--config", dest="catalog_file", help="catalog YAML (default: the built-in catalog)")
    c.add_argument("-o", "--output", choices=("yaml", "table"), default="yaml")


def run(args: argparse.Namespace) -> int:
    from ..core.catalog.builtin import default_catalog_text
    from ..core.catalog.table import render_catalog_table

    if args.output == "table":
        sys.stdout.write(render_catalog_table(read_catalog(args)))
    elif args.catalog_file:
        with open(args.catalog_file, encoding="utf-8") as fh:
            sys.stdout.write(fh.read())
    else:
        sys.stdout.write(default_catalog_text())
    return 0


COMMAND = Command("catalog", add_parser, run)
