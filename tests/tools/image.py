"""The gpu-class image, built from the Dockerfile and run with podman, with no registry in reach.

The Dockerfile starts FROM an image no registry here can give us, so the base is made locally:
debootstrap a Debian with Python into a directory, put pip into /usr/local as the official Python
images do (so the Dockerfile's `pip uninstall pip` works as it would there), and `podman import` it
under the name the Dockerfile's FROM uses. The build then runs with `--pull=never`; its pip reaches
the package index through the host network with the host's CA certificates.

Everything is cached in the project's cache directory (tests/e2e/local_cluster.py `cache_dir()`):
the root filesystem as a tarball and podman's own storage, so a second run reuses the base image
and every layer the Dockerfile's inputs did not change.

That storage is shared by every checkout of the project on the machine, and podman's layer cache
cannot tell when the image is stale: buildah (1.28, Debian's) keys a RUN step's cache on its text
and parent layer only, so the runtime stage's `RUN --mount=...,from=build` keeps the wheels of
whatever sources it first saw, however the build stage changed. So the image is keyed by its
sources instead: the Dockerfile, every file its COPY lines take from the context and the base
image's recipe. An image labelled with that digest is reused; otherwise the Dockerfile is built
again without podman's cache (the base image stays; the build's pip fetches the dependencies
again, some tens of seconds). The caller gets the image's ID, never a shared tag another checkout's
build could move onto an image of other sources meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from local_cluster import REPO, cache_dir  # noqa: E402

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-pip-whl and python3-setuptools-whl: the wheels pip is installed from, without a download.
PACKAGES = ("python3", "python3-pip-whl", "python3-setuptools-whl", "ca-certificates")
HOST_PACKAGES = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_PIP_CONF = Path("/etc/pip.conf")
IMAGE_REPOSITORY = "localhost/gpu-class"
SOURCES_LABEL = "gpu-class.test/sources"

# Run inside the new root filesystem: pip into /usr/local, as the python images have it, and no
# "externally managed" marker (those images have none, and the Dockerfile installs with plain pip).
FINISH_ROOTFS = r"""
set -eu
rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
wheel=$(ls /usr/share/python-wheels/pip-*.whl)
python3 "$wheel/pip" install --no-index --no-cache-dir "$wheel"
ln -sf /usr/bin/python3 /usr/local/bin/python
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*
"""


class ImageError(Exception):
    """A step of the image build that failed, with its output."""


def recipe_digest() -> str:
    return hashlib.sha256(repr((SUITE, PACKAGES, FINISH_ROOTFS)).encode()).hexdigest()[:12]


def work_dir() -> Path:
    return cache_dir() / "image"


def base_image_name() -> str:
    """The image the Dockerfile's stages start FROM (all of them must name the same one), with the default of
    an ARG it names (`FROM ${BASE_IMAGE}`: a release passes the base by digest instead)."""
    names = set()
    defaults: dict[str, str] = {}
    for line in dockerfile_lines():
        if arg := re.match(r"\s*ARG\s+(\w+)=(\S+)", line, re.I):
            defaults[arg.group(1)] = arg.group(2)
        found = re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)", line, re.I)
        if found:
            names.add(re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), m.group(0)), found.group(1)))
    if len(names) != 1:
        raise ImageError(f"the Dockerfile's FROM lines name {sorted(names)}; the test makes one base image")
    return names.pop()


def dockerfile_lines() -> list[str]:
    return (REPO / "Dockerfile").read_text().splitlines()


def build_inputs() -> list[Path]:
    """The files the Dockerfile's COPY lines take from the build context (not from another stage)."""
    found: set[Path] = set()
    for line in dockerfile_lines():
        copy = re.match(r"\s*COPY\s+(.*)", line, re.I)
        if not copy:
            continue
        words = copy.group(1).split()
        if any(w.startswith("--from") for w in words):
            continue
        if words and words[0].startswith("["):
            raise ImageError(f"the Dockerfile's {line.strip()!r}: only the plain form of COPY is read here")
        for source in [w for w in words if not w.startswith("--")][:-1]:
            path = REPO / source
            if path.is_dir():
                # .dockerignore keeps __pycache__ out of the context, so it is no input either.
                found.update(f for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
            elif path.is_file():
                found.add(path)
            else:
                raise ImageError(f"the Dockerfile copies {source}, which is not in {REPO}")
    if not found:
        raise ImageError("the Dockerfile's COPY lines name no file of the repository")
    return sorted(found)


def sources_digest() -> str:
    """What the image is made of: the base recipe, the Dockerfile and every file it copies."""
    digest = hashlib.sha256(recipe_digest().encode())
    for path in [REPO / "Dockerfile", *build_inputs()]:
        data = path.read_bytes()
        # Name and length first, so that no two file sets hash alike.
        digest.update(f"{path.relative_to(REPO)}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def run(argv: Sequence[str], *, timeout: float = 1800, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        raise ImageError(f"{' '.join(argv[:4])} ... failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def ensure_host_packages(log: Callable[[str], None]) -> None:
    """podman, runc and debootstrap from Debian's packages; installed here when missing and we are root."""
    missing = [package for command, package in HOST_PACKAGES.items() if shutil.which(command) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(f"{', '.join(missing)} missing: install them with `apt-get install -y {' '.join(missing)}`")
    log(f"installing {' '.join(missing)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-q"], env=env)
    run(["apt-get", "install", "-y", "-q", *missing], env=env)


def containers_conf() -> Path:
    path = work_dir() / "containers.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "[containers]\n"
        "default_ulimits = []\n"
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    return path


def podman_argv(*args: str) -> list[str]:
    """podman on the project's own storage, apart from any other use of podman on the machine."""
    storage = work_dir() / "storage"
    return ["podman", "--root", str(storage / "root"), "--runroot", str(storage / "run"),
            "--storage-driver", "overlay", *args]


def podman_env() -> dict[str, str]:
    return dict(os.environ, CONTAINERS_CONF=str(containers_conf()))


def podman(*args: str, timeout: float = 1800) -> str:
    return run(podman_argv(*args), timeout=timeout, env=podman_env())


def remove_rootfs(root: Path) -> None:
    """Remove a root filesystem left by an earlier try, with what is still mounted in it.

    debootstrap mounts /proc (and /sys) inside the root for its second stage and leaves them mounted when
    a package fails to install; a tree removed around them keeps files, and the next debootstrap then
    stops at the first one ("file already exists")."""
    inside = str(root) + "/"
    with open("/proc/mounts", encoding="utf-8") as fh:
        mounts = [line.split()[1] for line in fh]
    for point in sorted((m for m in mounts if m.startswith(inside)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():
        raise RuntimeError(f"cannot remove {root}, left by an earlier try: remove it by hand (rm -rf) and run again")


def rootfs_tarball(log: Callable[[str], None]) -> Path:
    tarball = work_dir() / f"debian-{SUITE}-python-{recipe_digest()}.tar"
    if tarball.exists():
        return tarball
    root = work_dir() / f"rootfs-{recipe_digest()}"
    started = time.monotonic()
    # debootstrap is most of the time; a finishing step that failed need not repeat it.
    if not (root / ".debootstrapped").exists():
        remove_rootfs(root)
        log(f"debootstrap {SUITE} with {', '.join(PACKAGES)} into {root}")
        run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root), MIRROR])
        (root / ".debootstrapped").touch()
    run(["chroot", str(root), "/bin/sh", "-c", FINISH_ROOTFS])
    partial = tarball.with_suffix(".partial")
    run(["tar", "-C", str(root), "--numeric-owner", "--exclude=./.debootstrapped", "-cf", str(partial), "."])
    partial.rename(tarball)
    remove_rootfs(root)
    log(f"base root filesystem made in {time.monotonic() - started:.0f} s")
    return tarball


def import_base(name: str, label: str, changes: Sequence[str], log: Callable[[str], None]) -> str:
    """The root filesystem imported as image `name` with `changes` (Dockerfile instructions) and
    `label` (key=value), unless an image of that name carries the label already."""
    tarball = rootfs_tarball(log)
    present = podman("images", "--filter", f"label={label}", "--filter", f"reference={name}", "--quiet").strip()
    if not present:
        podman("import", *(a for c in [f"LABEL {label}", *changes] for a in ("--change", c)), str(tarball), name)
    return name


def base_image(log: Callable[[str], None]) -> str:
    return import_base(base_image_name(), f"gpu-class.test/recipe={recipe_digest()}", ['CMD ["python3"]'], log)


def labelled_image(digest: str) -> str | None:
    """The ID of an image already built from these sources, if there is one."""
    found = podman("images", "--filter", f"label={SOURCES_LABEL}={digest}", "--no-trunc", "--quiet").split()
    return found[0].removeprefix("sha256:") if found else None


def remove_images_of_other_sources(digest: str) -> None:
    """Images of other sources a day old: no test of any checkout is about to run them. One still in
    use cannot be removed and is left."""
    old = podman("images", "--filter", f"label={SOURCES_LABEL}", "--filter", "until=24h", "--no-trunc",
                 "--format", "{{.ID}} {{.Labels}}").splitlines()
    for line in old:
        image_id, _, labels = line.partition(" ")
        if f"{SOURCES_LABEL}:{digest}" not in labels:
            subprocess.run(podman_argv("rmi", image_id), capture_output=True, env=podman_env(), timeout=120, check=False)


def build_labelled(dockerfile: Path, context: Path, tag: str, digest: str, *, network: str,
                   mounts: Sequence[str]) -> str:
    """`dockerfile` built without podman's layer cache, labelled with its sources' digest; the image's ID.
    `mounts` (host:container[:options]) reach the RUN steps only."""
    iid_file = work_dir() / f"iid-{digest}-{os.getpid()}"
    try:
        podman("build", "--pull=never", "--no-cache", "--network", network,
               *(f"--volume={m}" for m in mounts), "--label", f"{SOURCES_LABEL}={digest}",
               "--iidfile", str(iid_file), "-t", tag, "-f", str(dockerfile), str(context))
        image_id = iid_file.read_text().strip().removeprefix("sha256:")
    finally:
        iid_file.unlink(missing_ok=True)
    labels = json.loads(podman("image", "inspect", "--format", "{{json .Labels}}", image_id)) or {}
    if labels.get(SOURCES_LABEL) != digest:
        raise ImageError(f"image {image_id[:12]} carries {SOURCES_LABEL}={labels.get(SOURCES_LABEL)}, not {digest}")
    return image_id


def build_image(log: Callable[[str], None] = print) -> str:
    """The Dockerfile built on the local base image from the sources as they are now; returns the
    image's ID."""
    ensure_host_packages(log)
    base_image(log)
    digest = sources_digest()
    existing = labelled_image(digest)
    if existing:
        log(f"image {existing[:12]} is built from these sources ({IMAGE_REPOSITORY}:{digest})")
        return existing
    started = time.monotonic()
    # The host's trust (and its pip.conf, which may name it) reach the build's RUN steps as mounts,
    # so they leave nothing in a layer.
    mounts = [f"{HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro"]
    if HOST_PIP_CONF.exists():
        mounts.append(f"{HOST_PIP_CONF}:/etc/pip.conf:ro")
    image_id = build_labelled(REPO / "Dockerfile", REPO, f"{IMAGE_REPOSITORY}:{digest}", digest,
                              network="host", mounts=mounts)
    log(f"image {image_id[:12]} ({IMAGE_REPOSITORY}:{digest}) built in {time.monotonic() - started:.0f} s")
    remove_images_of_other_sources(digest)
    return image_id


def main() -> int:
    try:
        print(build_image())
    except ImageError as e:
        print(f"build-image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
