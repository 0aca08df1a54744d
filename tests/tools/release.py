"""The release command (`.ci/release`): the images of one version, built reproducibly, with an SBOM each, and the
chart's values that pull them by digest.

`.ci/release build --out DIR` builds, from the tree as it is:
- the webhook's image from the Dockerfile, FROM its base by digest (BASE_IMAGE), its Python dependencies from
  requirements.lock with --require-hashes;
- gpu-class-scheduler's image for every Kubernetes minor the chart runs (scheduler.kubernetesMinor and
  olderMinors; `--minor` picks some), from deploy/scheduler/plugin/Dockerfile in the minor's build context
  (deploy/scheduler/releases/context), its golang build stage by digest (podman build --from).
Every build is `podman build --no-cache --timestamp 0`: layers, files and the config carry the epoch rather than
the time of the build, .pyc files are hash-based (the Dockerfile's SOURCE_DATE_EPOCH) and Go builds with -trimpath,
so the same commit on the same bases gives the same image ID. Each image is written as an OCI image layout under
DIR/images (gzip layers); the digest of its manifest there is the one a registry serves once the layout is copied
to it blob for blob (`skopeo copy oci:DIR/images/gpu-class:0.2.0 docker://REGISTRY/gpu-class:0.2.0`), and the
one DIR/values.yaml gives the chart. DIR/sbom holds a CycloneDX SBOM per image (the Python packages from the lock,
checked against what the image holds; the Go modules stamped into the binary, read by cyclonedx-gomod), and
DIR/manifest.json the version, commit, digests and base digests.

The bases here are the ones tests/tools/image.py and scheduler_image.py make (no registry is reachable); where
one is, pull python:3.12-slim and golang:1.26-bookworm first and the same code pins what was pulled.

`.ci/release lock` writes requirements.lock and requirements-build.lock again with pip-compile.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import json
import os
import subprocess
import sys
import shutil
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import yaml

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "e2e")]
import local_cluster  # noqa: E402
import webhook  # noqa: E402
from tools import image, scheduler_image  # noqa: E402
from tools.lockfile import (BUILD_ROOT, RUNTIME_ROOT, lock_problems, normalise, parse_lock,  # noqa: E402
                            requirements_of)
from tools.release_outputs import (SCHEDULER, WEBHOOK, BuiltImage, chart_values, image_sbom,  # noqa: E402
                                   installed_problems, manifest, python_package, version_state)

REPO = local_cluster.REPO
LOCK = REPO / "requirements.lock"
BUILD_LOCK = REPO / "requirements-build.lock"
CHART_VALUES = REPO / "deploy" / "chart" / "gpu-class" / "values.yaml"
CHART_YAML = CHART_VALUES.with_name("Chart.yaml")
SBOM_MODULE_DIR = Path(__file__).resolve().parent / "sbom"
GOMOD_MODULE = "github.com/CycloneDX/cyclonedx-gomod"
SCHEDULER_BINARY = "/usr/local/bin/gpu-class-scheduler"
Log = Callable[[str], None]


class ReleaseError(Exception):
    """A step of the release that failed, with what to do."""


@dataclass(frozen=True)
class Tree:
    version: str
    commit: str
    modified: bool
    commit_time: str  # ISO 8601, the commit's: SBOMs carry it instead of the time of the build


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=60).stdout


def tree_state() -> Tree:
    return Tree(webhook.__version__, git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain").strip()),
                git("log", "-1", "--format=%cI").strip())


# --- the locks -----------------------------------------------------------------------------------------------

def runtime_requirements(src: Path = REPO) -> list[str]:
    setup = configparser.ConfigParser()
    setup.read(src / "setup.cfg")
    return setup["options"]["install_requires"].splitlines()


def build_requirements(src: Path = REPO) -> list[str]:
    with open(src / "pyproject.toml", "rb") as fh:
        requires: list[str] = tomllib.load(fh)["build-system"]["requires"]
    return requires


def lock_report(src: Path = REPO) -> list[str]:
    """Every drift of the two locks of `src` (a copy of the tree) from what they lock, each prefixed with its file."""
    return ([f"{LOCK.name}: {p}" for p in lock_problems(parse_lock((src / LOCK.name).read_text()),
                                                          requirements_of(runtime_requirements(src)), RUNTIME_ROOT)]
            + [f"{BUILD_LOCK.name}: {p}" for p in lock_problems(parse_lock((src / BUILD_LOCK.name).read_text()),
                                                                  requirements_of(build_requirements(src)), BUILD_ROOT)])


def write_locks(log: Log) -> None:
    """pip-compile both locks again (from PyPI: no find-links or index URL of this machine written into them)."""
    common = ["--quiet", "--generate-hashes", "--strip-extras", "--allow-unsafe", "--no-emit-index-url",
              "--no-emit-find-links", "--newline=LF"]
    env = dict(os.environ, CUSTOM_COMPILE_COMMAND=".ci/release lock")
    env.pop("PIP_FIND_LINKS", None)
    compile_ = [sys.executable, "-m", "piptools", "compile", *common]
    for argv in ([*compile_, f"--output-file={LOCK.name}", "setup.cfg"],
                 [*compile_, "--all-build-deps", "--only-build-deps", f"--output-file={BUILD_LOCK.name}",
                  "pyproject.toml"]):
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise ReleaseError(f"{' '.join(argv[2:])} failed:\n{done.stderr}")
        log(f"wrote {argv[-2].split('=', 1)[1]}")


# --- building ------------------------------------------------------------------------------------------------

SCHEDULER_DIRS = ("deploy/scheduler/plugin", "deploy/scheduler/releases")


def snapshot(into: Path) -> Path:
    """A copy of what the builds read (the Dockerfile and its context, gpu-class-scheduler's module and its
    releases), taken once: the images, the lock check and the SBOMs all see one state of the tree, whatever
    changes in it while they build."""
    tracked = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "Dockerfile", ".dockerignore",
                  *(str(p.relative_to(REPO)) for p in image.build_inputs()), *SCHEDULER_DIRS).split("\0")
    for name in sorted({n for n in tracked if n}):
        source = REPO / name
        if source.is_file():  # a file deleted in the tree is no input
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def pinned_base(name: str) -> str:
    """The local image `name` (repository:tag) as repository@sha256:..., its manifest's digest."""
    found = json.loads(image.podman("image", "inspect", name))[0]
    tagged = [t for t in found.get("RepoTags") or [] if t.rsplit(":", 1)[0].endswith(name.split(":")[0])]
    repository = (tagged or [name])[0].rsplit(":", 1)[0]
    return f"{repository}@{found['Digest']}"


def build(dockerfile: Path, context: Path, tree: Tree, *, build_args: Mapping[str, str], base: str,
          from_base: bool, network: str, mounts: Sequence[str]) -> str:
    """A reproducible build; returns the image's ID (sha256:...). `from_base`: the Dockerfile's first FROM
    is replaced by `base` (for one whose FROM takes no ARG)."""
    labels = {"org.opencontainers.image.version": tree.version, "org.opencontainers.image.revision": tree.commit,
              "org.opencontainers.image.base.name": base.partition("@")[0],
              "org.opencontainers.image.base.digest": base.partition("@")[2]}
    with tempfile.TemporaryDirectory() as tmp:
        iid = Path(tmp) / "iid"
        image.podman("build", "--pull=never", "--no-cache", "--timestamp", "0", "--network", network,
                     *(["--from", base] if from_base else []),
                     *(f"--build-arg={k}={v}" for k, v in build_args.items()),
                     *(f"--label={k}={v}" for k, v in labels.items()),
                     *(f"--volume={m}" for m in mounts), "--iidfile", str(iid), "-f", str(dockerfile), str(context))
        image_id = iid.read_text().strip()
    return image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"


def write_layout(image_id: str, out: Path, repository: str, tag: str) -> str:
    """The image written into the OCI image layout out/images/<repository> under `tag`; its manifest's digest."""
    layout = out / "images" / repository
    layout.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        digest_file = Path(tmp) / "digest"
        image.podman("push", "--compression-format", "gzip", "--digestfile", str(digest_file), image_id,
                     f"oci:{layout}:{tag}")
        return digest_file.read_text().strip()


def webhook_image(src: Path, out: Path, tree: Tree, log: Log) -> BuiltImage:
    base = pinned_base(image.base_image(log))
    mounts = [f"{image.HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro"]
    if image.HOST_PIP_CONF.exists():
        mounts.append(f"{image.HOST_PIP_CONF}:/etc/pip.conf:ro")
    started = time.monotonic()
    image_id = build(src / "Dockerfile", src, tree, build_args={"BASE_IMAGE": base}, base=base, from_base=False,
                     network="host", mounts=mounts)
    digest = write_layout(image_id, out, WEBHOOK, tree.version)
    log(f"{WEBHOOK}:{tree.version} {digest} (image {image_id[7:19]}) in {time.monotonic() - started:.0f} s")
    built = BuiltImage(WEBHOOK, tree.version, None, image_id, digest, base, f"sbom/{WEBHOOK}.cdx.json",
                       f"images/{WEBHOOK}")
    write_python_sbom(built, src / LOCK.name, out, tree)
    return built


def installed_packages(image_id: str) -> dict[str, str]:
    """The Python distributions the image's own interpreter finds (normalised name -> version)."""
    listing = ("import importlib.metadata as m, json; "
               "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    found = image.podman("run", "--rm", "--network", "none", "--entrypoint", "python3", image_id, "-c", listing,
                         timeout=300)
    return {normalise(k): v for k, v in json.loads(found).items()}


def write_python_sbom(built: BuiltImage, lock: Path, out: Path, tree: Tree) -> None:
    """The lock's packages as CycloneDX (cyclonedx-py), once the image is seen to hold exactly those."""
    problems = installed_problems(installed_packages(built.image_id), parse_lock(lock.read_text()), "gpu-class",
                                  tree.version)
    if problems:
        raise ReleaseError(f"{WEBHOOK}'s image is not what {LOCK.name} says:\n  " + "\n  ".join(problems))
    done = subprocess.run([str(Path(sys.executable).with_name("cyclonedx-py")), "requirements", "--of", "JSON",
                           "--output-reproducible", "--output-file", "-", str(lock)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise ReleaseError(f"cyclonedx-py failed (pip install -e '.[test]' installs it):\n{done.stderr}")
    write_sbom(out / built.sbom, image_sbom(json.loads(done.stdout), built, timestamp=tree.commit_time,
                                            own=python_package("gpu-class", tree.version)))


def write_sbom(path: Path, bom: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bom, indent=2, sort_keys=True) + "\n")


# --- gpu-class-scheduler -------------------------------------------------------------------------------------

def chart_minors() -> tuple[str, list[str]]:
    """The newest minor (go.mod's, the chart's kubernetesMinor) and the older ones the chart runs."""
    scheduler = yaml.safe_load(CHART_VALUES.read_text())["scheduler"]
    return str(scheduler["kubernetesMinor"]), [str(m) for m in scheduler["olderMinors"]]


@contextlib.contextmanager
def minor_chosen(minor: str | None) -> Iterator[local_cluster.Release]:
    """local_cluster's builds for `minor` (None: go.mod's), as GPUCLASS_KUBERNETES_MINOR picks it."""
    before = os.environ.get(local_cluster.MINOR_ENV)
    if minor is None:
        os.environ.pop(local_cluster.MINOR_ENV, None)
    else:
        os.environ[local_cluster.MINOR_ENV] = minor
    try:
        yield local_cluster.Release.chosen()
    finally:
        if before is None:
            os.environ.pop(local_cluster.MINOR_ENV, None)
        else:
            os.environ[local_cluster.MINOR_ENV] = before


def check_minors(minors: Sequence[str]) -> None:
    newest, older = chart_minors()
    unknown = [m for m in minors if m != newest and m not in older]
    if unknown or not minors:
        raise ReleaseError(f"no gpu-class-scheduler build for Kubernetes {', '.join(unknown) or '(none named)'}: "
                           f"the chart runs {', '.join([*older, newest])}")


def scheduler_images(src: Path, out: Path, tree: Tree, minors: Sequence[str], log: Log) -> list[BuiltImage]:
    newest, _ = chart_minors()
    gomod = cyclonedx_gomod(log)
    return [scheduler_image_for(m, None if m == newest else m, src, out, tree, gomod, log) for m in minors]


def scheduler_image_for(minor: str, older: str | None, src: Path, out: Path, tree: Tree, gomod: Path,
                        log: Log) -> BuiltImage:
    image.ensure_host_packages(log)
    go, go_version = scheduler_image.host_go()
    scheduler_image.check_go_version(scheduler_image.base_image_name(), go_version)
    with minor_chosen(older), tempfile.TemporaryDirectory() as tmp:
        # Fills Go's module and build caches the image's build reads (network none).
        local_cluster.build_scheduler(log)
        context = scheduler_context(src, older, Path(tmp) / "context")
        kube_version = local_cluster.pinned_version(context / "go.mod", "k8s.io/kubernetes")
        downloaded = subprocess.run([go, "mod", "download"], cwd=context, capture_output=True, text=True,
                                    timeout=600, env=local_cluster.go_env())
        if downloaded.returncode != 0:
            raise ReleaseError(f"go mod download in {context} failed:\n{downloaded.stderr}")
        base = pinned_base(scheduler_image.base_image(log))
        mounts = [f"{scheduler_image.go_env(go, 'GOROOT')}:/usr/local/go:ro",
                  f"{scheduler_image.go_env(go, 'GOMODCACHE')}:{scheduler_image.GO_PATH}/pkg/mod",
                  f"{scheduler_image.go_env(go, 'GOCACHE')}:{scheduler_image.GO_BUILD_CACHE}"]
        started = time.monotonic()
        image_id = build(context / "Dockerfile", context, tree, build_args={"KUBE_VERSION": kube_version},
                         base=base, from_base=True, network="none", mounts=mounts)
    tag = tree.version if older is None else f"{tree.version}-k8s{minor}"
    digest = write_layout(image_id, out, SCHEDULER, tag)
    log(f"{SCHEDULER}:{tag} ({kube_version}) {digest} (image {image_id[7:19]}) in {time.monotonic() - started:.0f} s")
    built = BuiltImage(SCHEDULER, tag, minor, image_id, digest, base, f"sbom/{SCHEDULER}-k8s{minor}.cdx.json",
                       f"images/{SCHEDULER}")
    write_go_sbom(built, out, tree, gomod)
    return built


def scheduler_context(src: Path, older: str | None, out: Path) -> Path:
    """The snapshot's plugin for the newest minor; for an older one, the context its releases/context makes."""
    plugin = src / SCHEDULER_DIRS[0]
    if older is None:
        return plugin
    made = subprocess.run([str(src / SCHEDULER_DIRS[1] / "context"), older, str(out)], capture_output=True,
                          text=True, timeout=300)
    if made.returncode != 0:
        raise ReleaseError(made.stderr.strip())
    return out


def cyclonedx_gomod(log: Log) -> Path:
    """cyclonedx-gomod built from tests/tools/sbom/go.mod into the cache, as tests/tools builds its tools."""
    version = local_cluster.pinned_version(SBOM_MODULE_DIR / "go.mod", GOMOD_MODULE)
    digest = local_cluster.files_digest(SBOM_MODULE_DIR, ("go.mod", "go.sum"))
    out = local_cluster.cache_dir() / f"cyclonedx-gomod-{version}-{digest}" / "bin"
    if not (out / ".complete").exists():
        go = local_cluster.go_toolchain("cyclonedx-gomod is built from tests/tools/sbom/go.mod")
        log(f"building cyclonedx-gomod {version} into {out}")
        local_cluster.go_build(go, SBOM_MODULE_DIR, [f"{GOMOD_MODULE}/cmd/cyclonedx-gomod"], out, ldflags="-s -w",
                               expect=["cyclonedx-gomod"], stamp=version, log=log)
    return out / "cyclonedx-gomod"


def write_go_sbom(built: BuiltImage, out: Path, tree: Tree, gomod: Path) -> None:
    """The modules Go stamped into the image's binary (its build info), as cyclonedx-gomod writes them."""
    container = image.podman("create", built.image_id).strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            binary = Path(tmp) / "gpu-class-scheduler"
            image.podman("cp", f"{container}:{SCHEDULER_BINARY}", str(binary))
            done = subprocess.run([str(gomod), "bin", "-json", "-noserial", "-version", f"v{tree.version}",
                                   str(binary)],
                                  capture_output=True, text=True, timeout=300)
    finally:
        image.podman("rm", container)
    if done.returncode != 0:
        raise ReleaseError(f"cyclonedx-gomod bin failed:\n{done.stderr}")
    write_sbom(out / built.sbom, image_sbom(json.loads(done.stdout), built, timestamp=tree.commit_time))


# --- the command ---------------------------------------------------------------------------------------------

def tool_versions(go: str) -> dict[str, str]:
    podman = subprocess.run(["podman", "--version"], capture_output=True, text=True, timeout=60).stdout.split()[-1]
    return {"podman": podman, "go": scheduler_image.go_env(go, "GOVERSION"), "python": sys.version.split()[0]}


def release(out: Path, minors: Sequence[str], *, allow_modified: bool, registry: str | None, log: Log) -> dict[str, object]:
    check_minors(minors)
    tree = tree_state()
    if tree.modified and not allow_modified:
        raise ReleaseError(f"the tree differs from {tree.commit[:12]} (git status): commit, or pass --allow-modified "
                           "for a build that is no release of a commit")
    changelog, problems = version_state(tree.version, yaml.safe_load(CHART_YAML.read_text()),
                                        (REPO / "CHANGELOG.md").read_text())
    if problems:
        raise ReleaseError("the version is not written alike everywhere:\n  " + "\n  ".join(problems))
    if out.exists() and any(out.iterdir()):
        raise ReleaseError(f"{out} is not empty: a release is written into a new directory, so that its layouts "
                           "hold its images alone")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = snapshot(Path(tmp))
        drift = lock_report(src)
        if drift:
            raise ReleaseError("the locks have drifted; run `.ci/release lock`:\n  " + "\n  ".join(drift))
        try:
            images = [webhook_image(src, out, tree, log), *scheduler_images(src, out, tree, minors, log)]
        finally:
            remove_built(tree)
    (out / "values.yaml").write_text(
        f"# gpu-class {tree.version} ({tree.commit}): every image by digest. helm install -f this file.\n"
        + yaml.safe_dump(chart_values(images, registry), sort_keys=True))
    written = manifest(version=tree.version, changelog=changelog, commit=tree.commit, modified=tree.modified, commit_time=tree.commit_time,
                       tools=tool_versions(local_cluster.go_toolchain("gpu-class-scheduler is built with Go")),
                       images=images)
    (out / "manifest.json").write_text(json.dumps(written, indent=2) + "\n")
    log(f"wrote {out}/values.yaml, {out}/manifest.json, {len(images)} SBOMs under {out}/sbom")
    return written


REMOVE_PASSES = 3


def remove_built(tree: Tree) -> None:
    """The release's images, and the stages and layers built on the way (`--all`), out of podman's storage, which
    every checkout shares: the OCI layouts are the release. An image is removed only once nothing is built on it,
    and a removal can meet another podman command holding the storage (a build beside this one), so what is left
    is tried again, a few passes; one still in use elsewhere is left."""
    for _ in range(REMOVE_PASSES):
        found = image.podman("images", "--all", "--filter", f"label=org.opencontainers.image.revision={tree.commit}",
                             "--no-trunc", "--quiet").split()
        if not found:
            return
        for image_id in dict.fromkeys(found):
            subprocess.run(image.podman_argv("rmi", image_id), capture_output=True, env=image.podman_env(),
                           timeout=120, check=False)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=".ci/release", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build", help="build the images, SBOMs, values.yaml and manifest.json into --out")
    built.add_argument("--out", type=Path, default=REPO / "dist" / "release",
                       help="the release directory (default dist/release)")
    built.add_argument("--minor", action="append", default=[],
                       help="only gpu-class-scheduler's build for this Kubernetes minor (repeatable; default all)")
    built.add_argument("--registry", help="write repositories under this registry path into values.yaml")
    built.add_argument("--allow-modified", action="store_true",
                       help="build from a tree that differs from its commit (recorded in manifest.json)")
    commands.add_parser("lock", help="write requirements.lock and requirements-build.lock again with pip-compile")
    commands.add_parser("check", help="fail if the locks have drifted from setup.cfg and pyproject.toml")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "lock":
            write_locks(print)
        elif args.command == "check":
            drift = lock_report()
            print("\n".join(drift) or "the locks hold exactly what setup.cfg and pyproject.toml require")
            return 1 if drift else 0
        else:
            newest, older = chart_minors()
            release(args.out.resolve(), args.minor or [*older, newest], allow_modified=args.allow_modified,
                    registry=args.registry, log=lambda line: print(line, flush=True))
    except (ReleaseError, image.ImageError, local_cluster.ClusterError) as e:
        print(f"release: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
