"""The Go tools the tests run, built from their Go modules at pinned releases and cached outside the
repository, as tests/e2e/local_cluster.py does for the control plane: helm and promtool for the
chart and monitoring tests (tests/tools/go.mod), and the controller managers the end-to-end tests run
beside the control plane: Kueue (tests/tools/kueue/go.mod), JobSet (tests/tools/jobset/go.mod) and
LeaderWorkerSet (tests/tools/lws/go.mod), each a module of its own: each pins its own Kubernetes
libraries, which need not agree with helm's. Karpenter with its KWOK provider
(tests/tools/karpenter/go.mod, for tests/e2e/karpenter.py) likewise, built with the newer Go its
release asks for (KARPENTER_TOOLCHAIN).

`tests/tools/build-tools` builds them all (once; later calls find them in the cache and return at
once). The tests call `path_of(...)`, `controller_path(...)` and `karpenter_path()`, which build what is
missing, so a fresh machine needs nothing but Go; without Go they fail with a message that says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
# The one cache the project's builds share, and how they are keyed.
from local_cluster import (  # noqa: E402
    ClusterError, cache_dir, files_digest, go_build, go_env, go_toolchain, pinned_version)

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
                    expect=list(TOOLS), stamp=helm_version, log=log)


def path_of(name: str) -> Path:
    return build(_to_stderr) / name


# --- controllers beside the control plane: Kueue, JobSet, LeaderWorkerSet ----------------

@dataclass(frozen=True)
class Controller:
    """A controller manager built from a module of its own under tests/tools (each pins its own
    Kubernetes libraries), with the version its release Makefile stamps into `version_package`."""

    name: str  # its cache directory's prefix and its directory under tests/tools
    module: str  # the published module, whose pin names the version
    package: str  # the main package
    binary: str  # what `go build -o DIR/` names it: the package's last element
    version_package: str  # where GitVersion, GitCommit (and BuildDate) are
    first_build: str  # measured, said while building

    @property
    def dir(self) -> Path:
        return MODULE_DIR / self.name


KUEUE = Controller(
    name="kueue", module="sigs.k8s.io/kueue", package="sigs.k8s.io/kueue/cmd/kueue", binary="kueue",
    version_package="sigs.k8s.io/kueue/pkg/version",
    # Measured with the modules already downloaded, on 2 cores that a build of the Kubernetes components
    # shared: 10 min 13 s (7 min 9 s user, 1 min 28 s system). With Go's build cache warm it only links,
    # in under a minute.
    first_build="about 10 minutes on 2 cores")
# Kueue v0.19.2 is built against JobSet v0.12.0 and LeaderWorkerSet v0.9.0 (tests/tools/kueue/go.mod):
# the releases whose APIs its integrations read.
JOBSET = Controller(
    name="jobset", module="sigs.k8s.io/jobset", package="sigs.k8s.io/jobset", binary="jobset",
    version_package="sigs.k8s.io/jobset/pkg/version",
    # Measured at nice 19 on 2 cores under a load average of 15 to 19 (the shared first build, other tests):
    # 1074 s for about 800 packages. With Go's build cache warm it only links.
    first_build="about 18 minutes on a busy machine")
LWS = Controller(
    name="lws", module="sigs.k8s.io/lws", package="sigs.k8s.io/lws/cmd", binary="cmd",
    version_package="sigs.k8s.io/lws/pkg/version",
    # Measured right after JobSet, whose libraries it mostly shares, in the same conditions: 801 s.
    first_build="about 13 minutes on a busy machine")
CONTROLLERS = (KUEUE, JOBSET, LWS)


def controller_version(controller: Controller) -> str:
    return pinned_version(controller.dir / "go.mod", controller.module)


def controller_bin_dir(controller: Controller) -> Path:
    digest = files_digest(controller.dir, ("go.mod", "go.sum"))
    return cache_dir() / f"{controller.name}-{controller_version(controller)}-{digest}" / "bin"


def build_controller(controller: Controller, log: Callable[[str], None] = print) -> Path:
    """Build a controller's manager into the cache unless it is there; return the directory."""
    try:
        out = controller_bin_dir(controller)
        if (out / ".complete").exists():
            return out
        go = go_toolchain(f"{controller.module}'s manager is built from tests/tools/{controller.name}/go.mod")
        version = controller_version(controller)
        log(f"building {controller.module} {version} into {out} (the first build took {controller.first_build})")
        # The version, as the release Makefile stamps it (the manager logs it at start); commit and build
        # date empty rather than pkg/version's placeholders, which would read as real ones.
        stamp = controller.version_package
        ldflags = f"-s -w -X {stamp}.GitVersion={version} -X {stamp}.GitCommit= -X {stamp}.BuildDate="
        return go_build(go, controller.dir, [controller.package], out, ldflags=ldflags, expect=[controller.binary],
                        stamp=version, log=log)
    except ClusterError as e:
        raise ToolError(str(e)) from None


def controller_path(controller: Controller) -> Path:
    return build_controller(controller, _to_stderr) / controller.binary


def controller_source(controller: Controller) -> Path:
    """The controller's module at the pinned version, in the Go module cache (downloaded if missing): its
    CRDs and webhook manifests are read from there, so they are the ones of the binary's release."""
    try:
        go = go_toolchain(f"{controller.module}'s CRDs and manifests are read from its module "
                          f"(tests/tools/{controller.name}/go.mod)")
    except ClusterError as e:
        raise ToolError(str(e)) from None
    found = subprocess.run([go, "mod", "download", "-json", controller.module], cwd=controller.dir, env=go_env(),
                           capture_output=True, text=True, timeout=600)
    if found.returncode != 0:
        raise ToolError(f"go mod download {controller.module} in {controller.dir} failed: {found.stderr.strip()}")
    return Path(json.loads(found.stdout)["Dir"])


def kueue_version() -> str:
    return controller_version(KUEUE)


def build_kueue(log: Callable[[str], None] = print) -> Path:
    return build_controller(KUEUE, log)


def kueue_path() -> Path:
    return controller_path(KUEUE)


def kueue_source() -> Path:
    return controller_source(KUEUE)


# --- Karpenter ------------------------------------------------------------------

KARPENTER_DIR = MODULE_DIR / "karpenter"
KARPENTER_MODULE = "sigs.k8s.io/karpenter"
# Karpenter's go.mod asks for a newer Go than this project's (go 1.26.9 at v1.15.0): this toolchain,
# which the Go module proxy serves like a module, builds it and reads its module, whatever Go is local.
KARPENTER_TOOLCHAIN = "go1.27.3"
# Measured with the modules and the toolchain already downloaded, on 2 cores that two control planes
# and a benchmark shared (load average 12 to 18): 885 s for 1024 packages (4 min 43 s user, 1 min 2 s
# system: a few minutes on 2 idle cores). Nothing of the Go build cache is shared with the other builds
# (another compiler), so the first build compiles everything, the standard library included.
KARPENTER_FIRST_BUILD = "about 15 minutes"


def karpenter_version() -> str:
    return pinned_version(KARPENTER_DIR / "go.mod", KARPENTER_MODULE)


def karpenter_bin_dir() -> Path:
    return cache_dir() / f"karpenter-{karpenter_version()}-{files_digest(KARPENTER_DIR, ('go.mod', 'go.sum'))}" / "bin"


def karpenter_go(what: str) -> str:
    """The go command of KARPENTER_TOOLCHAIN (fetched into the Go module cache by the local go on first
    use), for `what`. It is run directly, with GOTOOLCHAIN=local, rather than through the local go with
    GOTOOLCHAIN set: go_build's environment sets GOTOOLCHAIN=local itself and refuses a second value."""
    try:
        go = go_toolchain(what)
    except ClusterError as e:
        raise ToolError(str(e)) from None
    found = subprocess.run([go, "env", "GOROOT"], cwd=KARPENTER_DIR, capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, GOTOOLCHAIN=KARPENTER_TOOLCHAIN))
    toolchain_go = Path(found.stdout.strip()) / "bin" / "go"
    if found.returncode != 0 or not toolchain_go.exists():
        raise ToolError(f"could not get Go {KARPENTER_TOOLCHAIN} (GOTOOLCHAIN={KARPENTER_TOOLCHAIN} go env GOROOT "
                        f"in {KARPENTER_DIR}): {found.stderr.strip()}")
    return str(toolchain_go)


def build_karpenter(log: Callable[[str], None] = print) -> Path:
    """Build Karpenter with its KWOK cloud provider (the `kwok` binary) into the cache unless it is
    there; return the directory."""
    try:
        out = karpenter_bin_dir()
        if (out / ".complete").exists():
            return out
        go = karpenter_go("Karpenter's KWOK provider is built from tests/tools/karpenter/go.mod")
        version = karpenter_version()
        log(f"building Karpenter {version} (kwok) into {out} with {KARPENTER_TOOLCHAIN} "
            f"(the first build took {KARPENTER_FIRST_BUILD} on 2 cores)")
        # The version, as Karpenter's release stamps it (it logs it and sends it in its user agent).
        ldflags = f"-s -w -X {KARPENTER_MODULE}/pkg/operator.Version={version}"
        return go_build(go, KARPENTER_DIR, [f"{KARPENTER_MODULE}/kwok"], out, ldflags=ldflags, expect=["kwok"],
                        stamp=version, log=log)
    except ClusterError as e:
        raise ToolError(str(e)) from None


def karpenter_path() -> Path:
    return build_karpenter(_to_stderr) / "kwok"


def karpenter_source() -> Path:
    """Karpenter's module at the pinned version, in the Go module cache (downloaded if missing): its
    CRDs are read from there, so they are the ones of the binary's release."""
    env = go_env()
    go = karpenter_go("Karpenter's CRDs are read from its module (tests/tools/karpenter/go.mod)")
    found = subprocess.run([go, "mod", "download", "-json", KARPENTER_MODULE], cwd=KARPENTER_DIR, env=env,
                           capture_output=True, text=True, timeout=600)
    if found.returncode != 0:
        raise ToolError(f"go mod download {KARPENTER_MODULE} in {KARPENTER_DIR} failed: {found.stderr.strip()}")
    return Path(json.loads(found.stdout)["Dir"])


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main() -> int:
    try:
        print(build())
        for controller in CONTROLLERS:
            print(build_controller(controller))
        print(build_karpenter())
    except ToolError as e:
        print(f"build-tools: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
