"""`kubectl gpu-class`: the same commands as a kubectl plugin (installed as `kubectl-gpu_class`)."""

from __future__ import annotations

import argparse
from typing import Sequence

KUBECTL_PLUGIN = "kubectl gpu-class"
NAMESPACED_COMMANDS = ("explain", "review")


def kubectl_argv(argv: Sequence[str]) -> list[str]:
    """The `gpuclass` arguments of `kubectl gpu-class ARGV`: kubectl hands a plugin every argument after its name,
    with kubectl's own flags (--kubeconfig, --context, -n) wherever the user typed them, also before the subcommand."""
    globals_parser = argparse.ArgumentParser(add_help=False)
    globals_parser.add_argument("--kubeconfig")
    globals_parser.add_argument("--context")
    globals_parser.add_argument("-n", "--namespace")
    given, rest = globals_parser.parse_known_args(list(argv))
    if rest and rest[0] not in NAMESPACED_COMMANDS:
        given.namespace = None  # kubectl habit: `-n` on a cluster-wide command changes nothing
    flags = [f"--{k}={v}" for k, v in vars(given).items() if v is not None]
    if not rest or rest[0].startswith("-"):  # no subcommand (or --help): let the parser say what exists
        return [*rest, *flags]
    return [rest[0], *flags, *rest[1:]]
