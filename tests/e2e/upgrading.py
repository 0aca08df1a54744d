"""What the upgrader's end-to-end checks share (tests/e2e/test_upgrade_e2e.py, bench/upgrade/live.py): a stand-in
for the kubelets of a namespace, `gpuclass upgrader` as a process with deploy/upgrader's ServiceAccount, and its
metrics."""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import kubernetes
from kubernetes.client.exceptions import ApiException

import local_cluster
from kubeobjects import delete_if_present

SETTLE_SECONDS = 10
READY_AFTER_SECONDS = 1.0  # how long the fake kubelet takes to start a bound Pod
LEASE = "gpu-class-upgrader"
STARTUP_SECONDS = 60.0


@dataclass
class FakeKubelet:
    """Marks bound Pods of a namespace Running and Ready, and records when each was bound where, and when it went."""

    core: kubernetes.client.CoreV1Api
    namespace: str
    bound: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # uid -> (name, node, first seen bound)
    ready: dict[str, float] = field(default_factory=dict)  # uid -> when marked Ready
    gone: dict[str, float] = field(default_factory=dict)  # uid -> when first seen gone
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.time()
            try:
                pods = self.core.list_namespaced_pod(self.namespace).items
            except ApiException:
                continue
            seen = set()
            for pod in pods:
                uid, node = pod.metadata.uid, pod.spec.node_name
                seen.add(uid)
                if node and uid not in self.bound:
                    self.bound[uid] = (pod.metadata.name, node, now)
                if node and uid not in self.ready and now - self.bound[uid][2] >= READY_AFTER_SECONDS \
                        and pod.metadata.deletion_timestamp is None:
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    status = {"phase": "Running", "startTime": stamp, "conditions": [
                        {"type": "PodScheduled", "status": "True"},
                        {"type": "Initialized", "status": "True"},
                        {"type": "ContainersReady", "status": "True", "lastTransitionTime": stamp},
                        {"type": "Ready", "status": "True", "lastTransitionTime": stamp}]}
                    try:
                        self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, {"status": status})
                        self.ready[uid] = now
                    except ApiException:
                        pass
                if pod.metadata.deletion_timestamp is not None:
                    # as a kubelet finishes a graceful delete: the Pod's phase ends Failed (a Job replaces a Pod
                    # whose podFailurePolicy it matches only then), then it goes
                    if pod.status.phase not in ("Failed", "Succeeded"):
                        try:
                            self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace,
                                                                  {"status": {"phase": "Failed"}})
                        except ApiException:
                            pass
                    delete_if_present(functools.partial(self.core.delete_namespaced_pod, grace_period_seconds=0),
                                      pod.metadata.name, self.namespace)
            for uid in self.bound:
                if uid not in seen and uid not in self.gone:
                    self.gone[uid] = now
            self.stop.wait(0.3)

    def on(self, node: str, prefix: str) -> list[str]:
        """Names of the Pods bound to `node` that are still there."""
        return sorted(n for uid, (n, where, _) in self.bound.items()
                      if where == node and uid not in self.gone and n.startswith(prefix))


@contextlib.contextmanager
def kubelet_standing_in(core: kubernetes.client.CoreV1Api, namespace: str) -> Iterator[FakeKubelet]:
    """A FakeKubelet for the namespace's Pods, running in a thread of its own while the block runs."""
    k = FakeKubelet(core, namespace)
    thread = threading.Thread(target=k.run, daemon=True)
    thread.start()
    try:
        yield k
    finally:
        k.stop.set()
        thread.join(5)


@contextlib.contextmanager
def running_upgrader(cluster: local_cluster.Cluster, name: str, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`gpuclass upgrader` as deploy/upgrader's ServiceAccount, deciding every second with a settle time of
    SETTLE_SECONDS (`extra`: more options); yields the process and its metrics port."""
    port = local_cluster.free_port()
    log = open(cluster.dir / "logs" / f"upgrader-{name}-{uuid.uuid4().hex[:6]}.log", "wb")
    proc = subprocess.Popen([
        local_cluster.gpuclass_path(), "upgrader",
        f"--kubeconfig={local_cluster.service_account_kubeconfig(cluster, 'gpu-class-upgrader')}",
        f"--config={local_cluster.webhook_catalog(cluster)}", f"--lease-namespace={local_cluster.WEBHOOK_NAMESPACE}",
        f"--settle-seconds={SETTLE_SECONDS}", "--min-on-node-seconds=5", "--window-seconds=600",
        "--interval-seconds=1", f"--metrics-port={port}", "--log-level=debug",
        # read by `metric` below without a token: unchecked, so on loopback
        "--metrics-address=127.0.0.1", "--metrics-auth=none", *extra,
    ], stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_listening(proc, port, Path(log.name))
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    """Until the upgrader's metrics listener accepts a connection: on a busy machine its start (imports, the
    inventory's first lists) takes seconds, and a test that read its metrics sooner would see no upgrader at all."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gpuclass upgrader exited with {proc.returncode}: "
                               f"{log_path.read_text(errors='replace')[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"gpuclass upgrader did not listen on {port} within {STARTUP_SECONDS:.0f} s: "
                       f"{log_path.read_text(errors='replace')[-2000:]}")


def metric(port: int, name: str) -> float:
    # the upgrader's certificate is self-signed, made at its start: there is nothing to verify it by
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ssl._create_unverified_context(),
                                timeout=5) as r:
        text = r.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))
