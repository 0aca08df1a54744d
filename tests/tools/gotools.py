"""helm and promtool for the chart and monitoring tests, built from their Go modules at the releases
pinned in tests/tools/go.mod and cached outside the repository, as tests/e2e/local_cluster.py does
for the control plane.

`tests/tools/build-tools` builds both (once; later calls find them in the cache and return at
once). The tests call `helm()` and `promtool()`, which build what is missing, so a fresh machine
needs nothing but Go; without Go they fail with a message that says so.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
# The one cache the project's builds share, and how they are keyed.
from local_cluster import (  # noqa: E402
    ClusterError, cache_dir, files_digest, go_build, go_toolchain, pinned_version)

MODULE_DIR = Path(__file__).resolve().parent
# The package each tool is built from, and the go.mod line that pins its version.
TOOLS = {
    "helm": ("helm.sh/helm/v4/cmd/helm", "helm.sh/helm/v4"),
    "promtool": ("github.com/prometheus/prometheus/cmd/promtool", "github.com/prometheus/prometheus"),
}
# Measured on 2 shared cores with an empty Go build cache: 35 s of module downloads, then 6 min 49 s
# of compiling (promtool, which pulls in most of Prometheus, is the bulk of it).
FIRST_BUILD = "about 7.5 minutes"


class ToolError(Exception):
    """A tool that could not be built, with what to do about it."""


def pinned(module: str) -> str:
    return pinned_version(MODULE_DIR / "go.mod", module)


def bin_dir() -> Path:
    return cache_dir() / f"tools-helm-{pinned(TOOLS['helm'][1])}-{files_digest(MODULE_DIR, ('go.mod', 'go.sum'))}" / "bin"


def build(log: Callable[[str], None] = print) -> Path:
    """Build helm and promtool into the cache unless they are there; return the directory."""
    try:
        return _build(log)
    except ClusterError as e:  # what the build code shared with the control plane raises
        raise ToolError(str(e)) from None


def _build(log: Callable[[str], None]) -> Path:
    out = bin_dir()
    if (out / ".complete").exists():
        return out
    go = go_toolchain("helm and promtool are built from tests/tools/go.mod")
    helm_version = pinned(TOOLS["helm"][1])
    # What the release Makefile stamps; without it `helm version` says v4.x+unreleased.
    ldflags = f"-s -w -X helm.sh/helm/v4/internal/version.version={helm_version} -X helm.sh/helm/v4/internal/version.metadata="
    log(f"building helm {helm_version} and promtool {pinned(TOOLS['promtool'][1])} into {out} "
        f"(the first build took {FIRST_BUILD} on 2 cores)")
    return go_build(go, MODULE_DIR, [package for package, _ in TOOLS.values()], out, ldflags=ldflags,
                    expect=list(TOOLS), stamp=helm_version, log=log, env={"CGO_ENABLED": "0"})


def path_of(name: str) -> Path:
    return build(lambda line: print(line, file=sys.stderr, flush=True)) / name


def main() -> int:
    try:
        print(build())
    except ToolError as e:
        print(f"build-tools: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
