"""gpu-class-scheduler's image, built from deploy/scheduler/plugin/Dockerfile with podman, with no
registry in reach and without compiling Kubernetes again.

The Dockerfile's build stage starts FROM golang:1.26-bookworm, which no registry here can give us.
The base is made locally from what is already on the machine: the Debian root filesystem
tests/tools/image.py debootstraps for the webhook's image, imported with the golang image's
environment (GOPATH=/go, PATH, GOTOOLCHAIN=local) and GOPROXY=off. The build then mounts the host's
Go toolchain at /usr/local/go and the host's module and build caches at the golang image's paths:
`go mod download` finds every module there (it is run on the host first), and `go build` every package that
local_cluster.build_scheduler() compiled (the same flags, CGO_ENABLED=0 and -trimpath, so the same
cache keys), which leaves it a link. The final stage is FROM scratch, which needs no image.

As tests/tools/image.py does, the image is keyed by its sources (the Dockerfile, the files it copies,
the base's recipe and the host's Go version): one labelled with that digest is reused; otherwise the
Dockerfile is built again without podman's layer cache. The caller gets the image's ID.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "e2e")]
import local_cluster  # noqa: E402
from tools.image import (ImageError, SOURCES_LABEL, build_labelled, ensure_host_packages, import_base,  # noqa: E402
                         podman, recipe_digest)

CONTEXT = local_cluster.SCHEDULER_MODULE_DIR
DOCKERFILE = CONTEXT / "Dockerfile"
IMAGE_REPOSITORY = "localhost/gpu-class-scheduler"
GO_PATH = "/go"  # the golang images' GOPATH: the module cache is $GOPATH/pkg/mod
GO_BUILD_CACHE = "/root/.cache/go-build"  # the build stage runs as root, with the default GOCACHE
GOLANG_ENV = {
    "GOPATH": GO_PATH,
    "PATH": f"{GO_PATH}/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "GOTOOLCHAIN": "local",
    # Every module comes from the mounted cache: a missing one fails the build instead of a download.
    "GOPROXY": "off",
}


def go_env(go: str, name: str) -> str:
    return subprocess.run([go, "env", name], capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def host_go() -> tuple[str, str]:
    """The host's go command and its version (go1.26.8)."""
    go = local_cluster.go_toolchain("gpu-class-scheduler's image is built with the host's Go toolchain")
    return go, go_env(go, "GOVERSION")


def base_image_name() -> str:
    """The image the build stage starts FROM; the other stage is FROM scratch."""
    names = {m.group(1) for line in DOCKERFILE.read_text().splitlines()
             if (m := re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)", line, re.I))} - {"scratch"}
    if len(names) != 1:
        raise ImageError(f"{DOCKERFILE} starts FROM {sorted(names)}; the test makes one golang image")
    return names.pop()


def check_go_version(base: str, version: str) -> None:
    """The mounted toolchain must be the release the base image's tag names (golang:1.26-... and go1.26.x)."""
    tag = base.rpartition(":")[2].split("-")[0]
    if not (version + ".").startswith(f"go{tag}."):
        raise ImageError(f"the host's Go is {version} and {DOCKERFILE.name} builds FROM {base}: install Go {tag}")


def build_inputs() -> list[Path]:
    """What the Dockerfile copies from its context: the module's files and Go sources (tests aside)."""
    return [DOCKERFILE, *local_cluster.scheduler_sources()]


def sources_digest(go_version: str) -> str:
    digest = hashlib.sha256(f"{recipe_digest()}\0{go_version}\0".encode())
    for path in build_inputs():
        data = path.read_bytes()
        digest.update(f"{path.relative_to(CONTEXT)}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def base_image(log: Callable[[str], None]) -> str:
    recipe = f"{recipe_digest()}-{hashlib.sha256(repr(GOLANG_ENV).encode()).hexdigest()[:8]}"
    return import_base(base_image_name(), f"gpu-class.test/golang-recipe={recipe}",
                       [f"ENV {k}={v}" for k, v in GOLANG_ENV.items()], log)


def labelled_image(digest: str) -> str | None:
    found = podman("images", "--filter", f"label={SOURCES_LABEL}={digest}", "--filter",
                   f"reference={IMAGE_REPOSITORY}", "--no-trunc", "--quiet").split()
    return found[0].removeprefix("sha256:") if found else None


def build_image(log: Callable[[str], None] = print) -> str:
    """deploy/scheduler/plugin/Dockerfile built from the sources as they are now; returns the image's ID.
    local_cluster.build_scheduler() runs first: it fills the module and build caches the build reads."""
    ensure_host_packages(log)
    go, version = host_go()
    base = base_image_name()
    check_go_version(base, version)
    local_cluster.build_scheduler(log)
    # The Dockerfile's `go mod download` fetches every module the main module's packages and tests
    # need on any platform, a few more than the build: into the host's cache first, from the proxy.
    done = subprocess.run([go, "mod", "download"], cwd=CONTEXT, capture_output=True, text=True, timeout=600,
                          env=local_cluster.go_env())
    if done.returncode != 0:
        raise ImageError(f"go mod download in {CONTEXT} failed:\n{done.stderr}")
    base_image(log)
    digest = sources_digest(version)
    existing = labelled_image(digest)
    if existing:
        log(f"image {existing[:12]} is built from these sources ({IMAGE_REPOSITORY}:{digest})")
        return existing
    mounts = [f"{go_env(go, 'GOROOT')}:/usr/local/go:ro", f"{go_env(go, 'GOMODCACHE')}:{GO_PATH}/pkg/mod",
              f"{go_env(go, 'GOCACHE')}:{GO_BUILD_CACHE}"]
    started = time.monotonic()
    # No network: every module and package comes from the mounted caches.
    image_id = build_labelled(DOCKERFILE, CONTEXT, f"{IMAGE_REPOSITORY}:{digest}", digest, network="none",
                              mounts=mounts)
    log(f"image {image_id[:12]} ({IMAGE_REPOSITORY}:{digest}) built in {time.monotonic() - started:.0f} s")
    return image_id


def main() -> int:
    try:
        print(build_image())
    except (ImageError, local_cluster.ClusterError) as e:
        print(f"build-scheduler-image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
