"""Replicas of a webhook server behind one address, as a Deployment's Pods behind a Service, on the
local control plane (tests/e2e/local-cluster), for bench/faults/faults.py.

The Service is haproxy (Debian's package, installed with apt-get when missing), chosen because it
does what kube-proxy and the kubelet do for a Service, and nothing more where it matters:
- TCP mode: TLS ends at the replicas, as behind a Service; haproxy sees bytes, not requests, and a
  kept-alive connection of the API server stays on the replica it first reached;
- a replica gets new connections only while its readiness check passes (an HTTPS GET of /readyz
  each second, two failures to drop it: the kubelet notices a dead container within about as long);
- `drain` stops new connections to a replica and leaves its open ones alone, as an endpoint removed
  while conntrack keeps the flows it has; `maint` takes a slot out entirely;
- no retries: a connection to a replica that is gone fails, as it would through kube-proxy.
nginx's stream module (open source) has no active health checks, and IPVS needs kernel modules a
container may not load.

Each backend has four slots (ports): two serve, two take a rollout's new replicas (maxSurge 1). A
replica is a process of the cluster (`Cluster.start`), so `local-cluster down` stops it too.
Certificates live in a directory laid out as the kubelet lays out a Secret volume: the files are
links through `..data`, which a rotation swaps in one rename.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

SLOTS = 4
PRE_STOP_SECONDS = 5.0  # deploy/base/deployment.yaml's preStop sleep
GRACE_SECONDS = 30.0  # and its terminationGracePeriodSeconds


class ReplicaError(RuntimeError):
    """A replica or the load balancer did not do what was asked, with what it said."""


def ensure_haproxy(log: Callable[[str], None] = print) -> str:
    """The haproxy command; installed from Debian's package when missing and we are root."""
    found = shutil.which("haproxy")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ReplicaError("haproxy missing: the load-and-fault suite puts it in front of the webhook's replicas; "
                           "install it with `apt-get install -y haproxy`")
    log("installing haproxy with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", "haproxy"]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            raise ReplicaError(f"{' '.join(argv)} failed: {(done.stdout + done.stderr)[-2000:]}")
    found = shutil.which("haproxy")
    if not found:
        raise ReplicaError("apt-get installed haproxy, but no haproxy command is on PATH")
    return found


@dataclass(frozen=True)
class Backend:
    """One address the API server calls (`port`) and the slots behind it."""

    name: str
    port: int
    slots: tuple[int, ...]
    check_path: str  # the readiness check: /readyz for gpu-class, /healthz for the no-op

    @staticmethod
    def make(name: str, check_path: str) -> Backend:
        return Backend(name, local_cluster.free_port(), tuple(local_cluster.free_port() for _ in range(SLOTS)),
                       check_path)


class Balancer:
    """haproxy in front of every backend, with its runtime API on a socket in the cluster's run directory."""

    PROCESS = "faults-haproxy"

    def __init__(self, cluster: Any, backends: Sequence[Backend]) -> None:
        self.cluster = cluster
        self.backends = {b.name: b for b in backends}
        self.socket_path = cluster.dir / "run" / "faults-haproxy.sock"
        self.config_path = cluster.dir / "faults-haproxy.cfg"

    def config(self) -> str:
        lines = [
            "global",
            f"    stats socket {self.socket_path} mode 600 level admin",
            "    maxconn 4096",
            "defaults",
            "    mode tcp",
            "    timeout connect 2s",
            # Longer than the API server keeps an idle connection (90 s): the client closes it first, never
            # the proxy while a request may be on its way (gunicorn's own keep-alive is 120 s for that reason).
            "    timeout client 150s",
            "    timeout server 150s",
            "    timeout check 2s",
            "    retries 0",
        ]
        for b in self.backends.values():
            lines += [
                f"frontend {b.name}", f"    bind 127.0.0.1:{b.port}", f"    default_backend {b.name}",
                f"backend {b.name}", "    balance roundrobin",
                f"    option httpchk GET {b.check_path}", "    http-check expect status 200",
                "    default-server check check-ssl verify none inter 1s fall 2 rise 1",
            ]
            lines += [f"    server s{i} 127.0.0.1:{port}" + ("" if i < 2 else " disabled")
                      for i, port in enumerate(b.slots)]
        return "\n".join(lines) + "\n"

    def start(self, haproxy: str) -> None:
        self.config_path.write_text(self.config())
        check = subprocess.run([haproxy, "-c", "-f", str(self.config_path)], capture_output=True, text=True)
        if check.returncode != 0:
            raise ReplicaError(f"haproxy refused {self.config_path}: {check.stdout}{check.stderr}")
        self.cluster.start(self.PROCESS, [haproxy, "-db", "-f", str(self.config_path)])
        self.cluster.wait_ready(self.PROCESS, lambda: bool(self.command("show info")), seconds=30)

    def command(self, text: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(self.socket_path))
            s.sendall(text.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def status(self, backend: str) -> dict[int, str]:
        """Each slot's state as haproxy has it: UP, DOWN, MAINT, DRAIN (or a transition, "DOWN 1/2")."""
        rows = self.command("show stat").splitlines()
        header = rows[0].lstrip("# ").split(",")
        found = {}
        for row in rows[1:]:
            values = dict(zip(header, row.split(",")))
            if values.get("pxname") == backend and values.get("svname", "").startswith("s"):
                found[int(values["svname"][1:])] = values["status"]
        return found

    def set_state(self, backend: str, slot: int, state: str) -> None:
        answer = self.command(f"set server {backend}/s{slot} state {state}").strip()
        if answer:
            raise ReplicaError(f"haproxy: set server {backend}/s{slot} state {state}: {answer}")

    def wait_status(self, backend: str, slot: int, want: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while (now := self.status(backend).get(slot)) != want:
            if time.monotonic() > deadline:
                raise ReplicaError(f"haproxy's {backend}/s{slot} is {now}, not {want}, after {seconds:.0f} s")
            time.sleep(0.1)


class CertVolume:
    """Files as a Secret volume holds them: `name -> ..data/name`, `..data -> ..<stamp>`; a rotation
    writes a new directory and swaps `..data` in one rename, as the kubelet does."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, files: Mapping[str, bytes]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        stamp = f"..{datetime.datetime.now(datetime.timezone.utc):%Y_%m_%d_%H_%M_%S.%f}"
        (self.path / stamp).mkdir()
        for name, data in files.items():
            (self.path / stamp / name).write_bytes(data)
        old = os.readlink(self.path / "..data") if (self.path / "..data").is_symlink() else None
        (self.path / "..data_tmp").symlink_to(stamp)
        os.rename(self.path / "..data_tmp", self.path / "..data")
        for name in files:
            if not (self.path / name).is_symlink():
                (self.path / name).symlink_to(Path("..data") / name)
        if old:
            shutil.rmtree(self.path / old)

    def file(self, name: str) -> Path:
        return self.path / name


@dataclass
class CertAuthority:
    """A CA the suite holds the key of, and serving certificates it signs for the replicas."""

    certificate: x509.Certificate
    key: Any

    @staticmethod
    def make(name: str) -> CertAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        return CertAuthority(local_cluster.issue_certificate(local_cluster.x509_name(name), key, None, ca=True), key)

    @property
    def pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def serving_files(self) -> dict[str, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = local_cluster.issue_certificate(local_cluster.x509_name("gpu-class"), key, (self.certificate, self.key),
                                               server_names=("127.0.0.1", "localhost"))
        return {"tls.crt": cert.public_bytes(serialization.Encoding.PEM), "tls.key": local_cluster.pem_key(key)}


def served_certificate(port: int) -> x509.Certificate:
    """The certificate a replica hands a new connection now."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


@dataclass
class Replicas:
    """The replicas of one server behind one backend: `command(port)` starts one."""

    cluster: Any
    balancer: Balancer
    backend: Backend
    command: Callable[[int], list[str]]
    ca_file: Callable[[], Path]  # the CA that verifies the replicas' certificate now
    active: list[int] = field(default_factory=list)

    def process(self, slot: int) -> str:
        return f"faults-{self.backend.name}-{slot}"

    def is_ready(self, slot: int) -> bool:
        """What the readiness check asks, on new connections: each worker answers some."""
        context = ssl.create_default_context(cafile=str(self.ca_file()))
        url = f"https://127.0.0.1:{self.backend.slots[slot]}{self.backend.check_path}"
        for _ in range(4):
            with urllib.request.urlopen(url, context=context, timeout=5) as r:
                if r.status != 200:
                    return False
        return True

    def start(self, slot: int) -> None:
        """Start a replica in the slot and wait until haproxy sends it connections."""
        self.cluster.start(self.process(slot), self.command(self.backend.slots[slot]))
        self.cluster.wait_ready(self.process(slot), lambda: self.is_ready(slot), seconds=120)
        if self.balancer.status(self.backend.name).get(slot) == "MAINT":
            self.balancer.set_state(self.backend.name, slot, "ready")
        self.balancer.wait_status(self.backend.name, slot, "UP")
        if slot not in self.active:
            self.active.append(slot)

    def start_all(self, count: int = 2) -> None:
        for slot in range(count):
            self.start(slot)

    def kill(self, slots: Sequence[int], down_seconds: float = 0.0) -> None:
        """SIGKILL the replicas' processes, as containers are killed, and after `down_seconds` start
        them again in the same slots, as the kubelet restarts them."""
        for slot in slots:
            pid = self.cluster.pid(self.process(slot))
            if pid is None:
                raise ReplicaError(f"no replica runs in {self.process(slot)}")
            os.killpg(pid, signal.SIGKILL)
            self.cluster.stop(self.process(slot), grace_seconds=5)
        time.sleep(down_seconds)
        for slot in slots:
            self.start(slot)

    def terminate(self, slot: int) -> None:
        """As the kubelet stops a Pod of the Deployment: out of the Service (drain), the preStop sleep,
        SIGTERM to the container's first process, SIGKILL after the grace period."""
        self.balancer.set_state(self.backend.name, slot, "drain")
        time.sleep(PRE_STOP_SECONDS)
        pid = self.cluster.pid(self.process(slot))
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_SECONDS
            while self.cluster.is_running(self.process(slot)) and time.monotonic() < deadline:
                time.sleep(0.1)
        self.cluster.stop(self.process(slot), grace_seconds=1)
        self.balancer.set_state(self.backend.name, slot, "maint")
        self.active.remove(slot)

    def roll(self) -> None:
        """A rollout with maxSurge 1, maxUnavailable 0: a new replica ready before each old one stops."""
        for old in list(self.active):
            new = next(s for s in range(SLOTS) if s not in self.active)
            self.start(new)
            self.terminate(old)

    def stop_all(self) -> None:
        for slot in range(SLOTS):
            self.cluster.stop(self.process(slot))
        self.active.clear()
