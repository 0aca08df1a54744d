"""Start the real `gpuclass serve` (gunicorn over TLS) in a subprocess, and talk to it as the API server does."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml

from webhook.serving import certs


# What one worker watches when every optional API is served (DRA and Karpenter): each path once, the heralds too
WATCHED = {"/api/v1/nodes", "/api/v1/pods", "/api/v1/namespaces", "/apis/resource.k8s.io/v1/resourceslices",
           "/apis/resource.k8s.io/v1/deviceclasses", "/apis/resource.k8s.io/v1/resourceclaims",
           "/apis/resource.k8s.io/v1/resourceclaimtemplates", "/apis/karpenter.sh/v1/nodepools",
           "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "/apis/apiregistration.k8s.io/v1/apiservices"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_certs(directory: Path, names: Sequence[str] = ("localhost",), ips: Sequence[str] = ("127.0.0.1",)) -> Path:
    """ca.crt, the serving pair tls.crt/tls.key and the scheduler's client pair client.crt/client.key."""
    bundle = certs.generate(list(names), list(ips))
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"):
        (directory / name).write_bytes(getattr(bundle, name.replace(".", "_")))
    return directory


def write_objects(path: Path, objects: Sequence[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    return path


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    ca_file: Path
    log_file: Path
    extender_port: int | None = None  # with `extender=True`: --extender-bind, trusting ca_file's clients
    metrics_port: int | None = None  # --metrics-bind

    def metrics(self, token: str | None = None) -> tuple[int, str]:
        """GET /metrics on the metrics listener, with `token` as the bearer token if given."""
        assert self.metrics_port is not None, "started without a metrics listener"
        conn = self.connection(port=self.metrics_port)
        try:
            conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def context(self, **kwargs: Any) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        for k, v in kwargs.items():
            setattr(ctx, k, v)
        return ctx

    def connection(self, timeout: float = 10.0, *, port: int | None = None,
                   client: tuple[Path, Path] | None = None) -> http.client.HTTPSConnection:
        """A connection to `port` (default: the admission listener), presenting `client` (cert, key) if given."""
        context = self.context()
        if client is not None:
            context.load_cert_chain(*client)
        return http.client.HTTPSConnection("localhost", port or self.port, context=context, timeout=timeout)

    def scheduler_connection(self, timeout: float = 10.0) -> http.client.HTTPSConnection:
        """To the extender's listener, as the scheduler calls it: with the client certificate `gpuclass certs` made."""
        assert self.extender_port is not None, "started without extender=True"
        return self.connection(timeout, port=self.extender_port,
                               client=(self.ca_file.parent / "client.crt", self.ca_file.parent / "client.key"))

    def post(self, path: str, body: bytes | dict[str, Any], conn: http.client.HTTPSConnection | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        own = conn is None
        conn = conn or self.connection()
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
        finally:
            if own:
                conn.close()

    def get(self, path: str) -> tuple[int, Any]:
        conn = self.connection()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            raw = resp.read()
            ctype = resp.getheader("Content-Type", "")
            return resp.status, json.loads(raw) if "json" in ctype else raw.decode()
        finally:
            conn.close()

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")


def wait_until_serving(server: Server, timeout_seconds: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"server exited with {server.process.returncode}:\n{server.log()}")
        try:
            status, _ = server.get("/healthz")
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"server did not start within {timeout_seconds}s:\n{server.log()}")


@contextlib.contextmanager
def running_server(tmp: Path, args: Sequence[str], *, cert_dir: Path | None = None, workers: int = 1,
                   env: dict[str, str] | None = None, extender: bool = False,
                   cpus: set[int] | None = None, metrics_auth: str = "none") -> Iterator[Server]:
    """`cpus`: the CPUs the master and its workers run on (set before the master forks its workers).
    `metrics_auth`: none serves /metrics unchecked on loopback; delegated needs --kubeconfig in `args`."""
    cert_dir = cert_dir or write_certs(tmp / "certs")
    port = free_port()
    extender_port = free_port() if extender else None
    metrics_port = free_port()
    log_file = tmp / f"server-{port}.log"
    listener = ["--extender-bind", f"127.0.0.1:{extender_port}", "--client-ca-file", str(cert_dir / "ca.crt")]
    cmd = [
        sys.executable, "-m", "webhook.cli", "serve",
        "--cert-file", str(cert_dir / "tls.crt"), "--key-file", str(cert_dir / "tls.key"),
        "--bind", f"127.0.0.1:{port}", "--workers", str(workers), *(listener if extender else []),
        "--metrics-bind", f"127.0.0.1:{metrics_port}", "--metrics-auth", metrics_auth, *args,
    ]
    with open(log_file, "wb") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                   start_new_session=True)
    if cpus:
        os.sched_setaffinity(process.pid, cpus)
    server = Server(process, port, cert_dir / "ca.crt", log_file, extender_port, metrics_port)
    try:
        wait_until_serving(server)
        if cpus:
            for worker in [int(p) for p in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]:
                assert os.sched_getaffinity(worker) == cpus, "a worker was forked before the server was placed on its CPUs"
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def serving_test_inventory(tmp: Path, *, workers: int = 1, extender: bool = False) -> contextlib.AbstractContextManager[Server]:
    """The real server on the test catalog and the small mixed cluster of builders.py."""
    from builders import CATALOG_NODES, TEST_CATALOG_YAML

    nodes = write_objects(tmp / "nodes.yaml", CATALOG_NODES)
    catalog = tmp / "catalog.yaml"
    catalog.write_text(TEST_CATALOG_YAML)
    return running_server(tmp, ["--nodes", str(nodes), "--config", str(catalog)], workers=workers, extender=extender)
