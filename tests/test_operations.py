"""Operating the real server: metrics across workers, certificate rotation under requests, graceful
shutdown, and a steady stream of admissions while workers die, watches drop and the API fails."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from builders import (
    CATALOG_NODES, TEST_CATALOG_YAML, make_catalog, make_namespace, make_node, make_pod, make_review, placed_affinity,
)
from fakeapi import FakeApiServer
from servers import WATCHED, Server, running_server, write_certs, write_objects


def worker_pids(master: int, expected: int = 1, timeout_seconds: float = 20.0) -> list[int]:
    """The master's worker processes, once at least `expected` of them have started."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        pids = [int(p) for p in Path(f"/proc/{master}/task/{master}/children").read_text().split()]
        if len(pids) >= expected or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def catalog_file(tmp: Path) -> Path:
    path = tmp / "catalog.yaml"
    path.write_text(TEST_CATALOG_YAML)
    return path


def types_of(body: dict[str, Any]) -> str | None:
    response = body["response"]
    if "patch" not in response:
        return None
    ops = json.loads(base64.b64decode(response["patch"]))
    return next((op["value"] for op in ops if op["path"] == "/metadata/annotations/gpu-class.io~1types"), None)


def scrape(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = server.metrics()
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_add_up_across_workers(tmp_path: Path) -> None:
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    with running_server(tmp_path, ["--nodes", str(nodes), "--config", str(catalog_file(tmp_path))], workers=2) as server:
        assert len(worker_pids(server.process.pid, 2)) == 2
        for i in range(12):  # a new connection each: they spread over both workers
            assert server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high"}), uid=f"p{i}"))[0] == 200
        for i in range(5):
            server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "turbo"}), uid=f"r{i}"))
        for _ in range(3):
            assert server.post("/mutate", b"nonsense")[0] == 400
        for _ in range(3):  # whichever worker answers the scrape, the sums are the same
            samples = scrape(server)
            assert samples[("gpu_class_admission_requests_total", (("class", "high"), ("outcome", "patched")))] == 12
            # an unknown class is counted under 'unknown', never under the name the Pod wrote
            assert samples[("gpu_class_admission_requests_total", (("class", "unknown"), ("outcome", "refused")))] == 5
            assert samples[("gpu_class_admission_requests_total", (("class", "none"), ("outcome", "bad-request")))] == 3
            assert samples[("gpu_class_admission_duration_seconds_count", ())] == 20
            assert samples[("gpu_class_admission_preferred_type_total", (("class", "high"), ("type", "H100")))] == 12
            assert samples[("gpu_class_inventory_nodes", (("state", "ready"), ("type", "H100")))] == 1
            assert samples[("gpu_class_certificate_expiry_timestamp_seconds", ())] > time.time() + 300 * 86400


def test_inventory_metrics_count_dra_devices_like_device_plugin_gpus(tmp_path: Path) -> None:
    """The demo's DRA node pool (deploy/demo/dra.yaml): two H200 nodes whose GPUs are DRA devices, a claim
    holding one of them. The served inventory's gauges count them as they count device-plugin GPUs."""
    demo = Path(__file__).parent.parent / "deploy" / "demo"
    args = ["--nodes", str(demo / "nodes.yaml"), "--nodes", str(demo / "dra.yaml")]
    with running_server(tmp_path, args, workers=1) as server:
        samples = scrape(server)
    assert samples[("gpu_class_inventory_free_gpus", (("resource", "nvidia.com/gpu"), ("type", "H200")))] == 7
    assert samples[("gpu_class_inventory_nodes", (("state", "ready"), ("type", "H200")))] == 2


def series(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> dict[tuple[str, ...], float]:
    """One metric's samples by their label values, in the order the metric declares its labels."""
    order = {"gpu_class_admission_requests_total": ("outcome", "class"),
             "gpu_class_admission_preferred_type_total": ("class", "type"),
             "gpu_class_watch_restarts_total": ("resource", "reason"),
             "gpu_class_group_pods_total": ("outcome",),
             "gpu_class_placements_total": ("class", "outcome"),
             "gpu_class_pending_pods": ("class", "longer_than"),
             "gpu_class_inventory_resource_read": ("resource",)}[name]
    return {tuple(dict(labels)[k] for k in order): v for (n, labels), v in samples.items() if n == name}


def test_labelled_series_known_at_start_are_exported_at_zero(tmp_path: Path) -> None:
    from builders import make_catalog
    from webhook.serving.metrics import admission_label_sets, preferred_type_label_sets

    catalog = make_catalog()
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    with running_server(tmp_path, ["--nodes", str(nodes), "--config", str(catalog_file(tmp_path))], workers=2) as server:
        assert len(worker_pids(server.process.pid, 2)) == 2
        before = scrape(server)
        admissions = series(before, "gpu_class_admission_requests_total")
        preferred = series(before, "gpu_class_admission_preferred_type_total")
        assert set(admissions) == set(admission_label_sets(catalog)) and set(admissions.values()) == {0.0}
        assert set(preferred) == set(preferred_type_label_sets(catalog)) and set(preferred.values()) == {0.0}
        for labels in [("patched", "high"), ("refused", "high"), ("refused", "unknown"), ("refused", "none"),
                       ("out-of-scope", "none"), ("bad-request", "none"), ("error", "none")]:
            assert admissions[labels] == 0, labels
        assert ("admitted-unsatisfiable", "high") not in admissions  # the test catalog denies instead
        assert preferred[("high", "H200")] == 0 and preferred[("economy", "T4")] == 0
        assert series(before, "gpu_class_watch_restarts_total") == {}  # a file inventory watches nothing
        groups = series(before, "gpu_class_group_pods_total")
        assert groups == {(o,): 0.0 for o in ("started", "followed", "no-room", "refused", "unplaced")}

        server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high", "gpu-class.io/group": "g"})))
        server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high", "gpu-class.io/group": "-g"})))
        server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "turbo"})))
        server.post("/mutate", make_review(make_pod()))
        server.post("/mutate", b"nonsense")
        after = scrape(server)
        # the first increment of each is visible as a step from 0, and no series appeared that was not there
        changed = {k: v for k, v in series(after, "gpu_class_admission_requests_total").items() if v != admissions[k]}
        assert changed == {("patched", "high"): 1, ("refused", "high"): 1, ("refused", "unknown"): 1,
                           ("out-of-scope", "none"): 1, ("bad-request", "none"): 1}
        assert {k: v for k, v in series(after, "gpu_class_group_pods_total").items() if v != groups[k]} == {
            ("started",): 1, ("refused",): 1}
        assert set(series(after, "gpu_class_admission_preferred_type_total")) == set(preferred)
        assert series(after, "gpu_class_admission_preferred_type_total")[("high", "H100")] == 1


def test_watch_restart_series_are_exported_at_zero(tmp_path: Path) -> None:
    with FakeApiServer(bookmark_interval_seconds=0.5) as api:
        api.create(make_namespace("ml"))
        api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        args = ["--kubeconfig", str(kubeconfig), "--config", str(catalog_file(tmp_path))]
        with running_server(tmp_path, args, workers=1) as server:
            assert api.wait_for_watches(3, timeout_seconds=20)  # the test catalog's strategies need Pods too
            restarts = series(scrape(server), "gpu_class_watch_restarts_total")
            assert restarts == {(resource, reason): 0.0
                                for resource in ("nodes", "namespaces", "pods", "deviceclasses", "resourceslices",
                                                 "resourceclaims", "resourceclaimtemplates", "nodepools",
                                                 "customresourcedefinitions", "apiservices")
                                for reason in ("timeout", "expired", "error")}
            # this fake serves neither DRA nor Karpenter (but CRDs and APIServices, as every API server, their
            # heralds): read, and not read, by every worker
            read = series(scrape(server), "gpu_class_inventory_resource_read")
            assert read == {("nodes",): 1, ("namespaces",): 1, ("pods",): 1, ("deviceclasses",): 0,
                            ("resourceslices",): 0, ("resourceclaims",): 0, ("resourceclaimtemplates",): 0,
                            ("nodepools",): 0,
                            ("customresourcedefinitions",): 1, ("apiservices",): 1}, read
            api.drop_watches()
            deadline = time.monotonic() + 10
            while sum(series(scrape(server), "gpu_class_watch_restarts_total").values()) < 3:
                assert time.monotonic() < deadline, "the dropped watches were not counted as restarts"
                time.sleep(0.1)
            assert set(series(scrape(server), "gpu_class_watch_restarts_total")) == set(restarts)


def placed_pod(name: str, node: str | None = None, gpus: int = 1, types: str = "H100,A100") -> dict[str, Any]:
    """A Pod as the webhook leaves it (class, types and the affinity the inventory believes them by), bound to
    `node` or not yet."""
    pod = make_pod({"gpu-class.io/class": "high", "gpu-class.io/types": types}, name=name, gpu_limit=str(gpus),
                   affinity=placed_affinity(types.split(",")))
    pod["metadata"]["namespace"] = "ml"
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


def watches(api: FakeApiServer) -> Counter[str]:
    """Watch requests by path: a reflector watches once its list is in the worker's inventory."""
    return Counter(r.path for r in api.request_log if r.is_watch)


def test_binds_are_counted_once_across_workers_and_worker_deaths(tmp_path: Path) -> None:
    """Both workers watch and see every bind; one counts it. Killing each original worker in turn
    kills the one that counted at some point: the next takes over, and no bind is lost or doubled.

    A bind is judged only by a worker that has read every resource (fidelity.judge_bind): the binds
    wait until each worker has listed every one (WATCHED), DRA's and NodePools among them (served here, so that
    each one's watch says its list is in)."""
    with FakeApiServer(bookmark_interval_seconds=0.5, serve_dra=True, serve_karpenter=True) as api:
        api.create(make_namespace("ml"))
        api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
        api.create(make_node("a100-a", "A100-SXM4-40GB", gpus=4))
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        args = ["--kubeconfig", str(kubeconfig), "--config", str(catalog_file(tmp_path))]
        with running_server(tmp_path, args, workers=2) as server:
            # every resource of both workers: a bind a worker sees before its lists are all in is never judged
            assert api.wait_for_watches(2 * len(WATCHED), timeout_seconds=60), watches(api)
            originals = worker_pids(server.process.pid, 2)
            placements = series(scrape(server), "gpu_class_placements_total")
            assert placements == {(c, o): 0.0 for c in make_catalog().classes for o in ("best", "fallback", "broken")}
            for round_ in range(3):
                for name in ("p1", "p2", "p3"):
                    api.create(placed_pod(name))
                deadline = time.monotonic() + 20
                while series(scrape(server), "gpu_class_pending_pods")[("high", "0s")] != 3:
                    assert time.monotonic() < deadline, "the new Pods are not counted Pending"
                    time.sleep(0.1)
                api.update(placed_pod("p1", "h100-a"))  # the best type: best
                api.update(placed_pod("p2", "a100-a"))  # H100 had 7 GPUs free: broken
                api.create(placed_pod("fill", "h100-a", gpus=7))  # created bound: no bind the watch saw
                api.update(placed_pod("p3", "a100-a"))  # H100 full: fallback
                expected = {("high", o): float(round_ + 1) for o in ("best", "fallback", "broken")}
                deadline = time.monotonic() + 20
                while {k: v for k, v in series(scrape(server), "gpu_class_placements_total").items() if v} != expected:
                    assert time.monotonic() < deadline, (round_, series(scrape(server), "gpu_class_placements_total"),
                                                         [line for line in server.log().splitlines()
                                                          if '"level":"info"' not in line][-20:])
                    time.sleep(0.1)
                # the worker that answers the scrape may see the binds a moment after the one that counted them
                deadline = time.monotonic() + 20
                while series(scrape(server), "gpu_class_pending_pods")[("high", "0s")] != 0:
                    assert time.monotonic() < deadline, "bound Pods still counted Pending"
                    time.sleep(0.1)
                for name in ("p1", "p2", "p3", "fill"):
                    api.delete("Pod", name, "ml")
                if round_ < 2:  # a new worker has listed everything before the next round's Pods exist
                    before = watches(api)
                    assert set(before) == WATCHED, before  # every resource the worker reads, the heralds too
                    os.kill(originals[round_], signal.SIGKILL)
                    deadline = time.monotonic() + 30
                    while any(watches(api)[path] <= n for path, n in before.items()):
                        assert time.monotonic() < deadline, ("the new worker does not watch everything", watches(api))
                        time.sleep(0.1)
            time.sleep(1.0)  # a late second count would show now
            assert {k: v for k, v in series(scrape(server), "gpu_class_placements_total").items() if v} == expected
            lines = [json.loads(line) for line in server.log().splitlines() if '"msg":"placement"' in line]
            assert sorted(r["outcome"] for r in lines) == ["broken"] * 3 + ["fallback"] * 3
            assert {(r["pod"], r["node"], r["better"]) for r in lines} == {("p2", "a100-a", "H100 had room"),
                                                                           ("p3", "a100-a", None)}


def test_pending_pods_are_counted_by_the_worker_that_answers(tmp_path: Path) -> None:
    with FakeApiServer(bookmark_interval_seconds=0.5) as api:
        api.create(make_namespace("ml"))
        api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
        for name in ("a", "b"):
            api.create(placed_pod(name))
        api.create({**placed_pod("unplaced"), "metadata": {"name": "unplaced", "namespace": "ml"}})
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        args = ["--kubeconfig", str(kubeconfig), "--config", str(catalog_file(tmp_path))]
        with running_server(tmp_path, args, workers=2) as server:
            assert api.wait_for_watches(6, timeout_seconds=20)
            for _ in range(4):  # whichever worker answers, the same figures, from its own inventory
                pending = series(scrape(server), "gpu_class_pending_pods")
                assert set(pending) == {(c, b) for c in make_catalog().classes for b in ("0s", "1m", "5m", "15m", "1h")}
                assert {k: v for k, v in pending.items() if v} == {("high", "0s"): 2}
            api.update(placed_pod("a", "h100-a"))
            deadline = time.monotonic() + 20
            while series(scrape(server), "gpu_class_pending_pods")[("high", "0s")] != 1:
                assert time.monotonic() < deadline, "the bound Pod is still counted Pending"
                time.sleep(0.1)


def rotate(cert_dir: Path, new: Path) -> None:
    """Replace key and certificate as a Secret volume update does: both at once, by renaming."""
    for name in ("tls.key", "tls.crt"):
        tmp = cert_dir / f".{name}.new"
        tmp.write_bytes((new / name).read_bytes())
        os.replace(tmp, cert_dir / name)


def issuer_of(server: Server, ctx: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            cert = tls.getpeercert()
            assert cert is not None
            return str(cert["serialNumber"])


def test_inventory_gauges_follow_a_burst_of_snapshots_once_per_interval() -> None:
    """A burst of published snapshots (a burst of binds) writes the gauges once at its start and once after."""
    from prometheus_client import REGISTRY

    from webhook.core.catalog.loading import load_catalog_text
    from webhook.core.view.inventory import InventoryState
    from webhook.core.view.nodes import node_info_from_object
    from webhook.serving.metrics import InventoryMetrics

    catalog = load_catalog_text(TEST_CATALOG_YAML, "catalog")
    state = InventoryState(catalog=catalog, synced=True)
    state.replace_nodes([i for i in (node_info_from_object(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8),
                                                                    catalog),) if i])
    state.replace_pods([])

    def free_h100() -> float | None:
        return REGISTRY.get_sample_value("gpu_class_inventory_free_gpus", {"type": "H100", "resource": "nvidia.com/gpu"})

    def burst(observer: InventoryMetrics) -> None:
        observer.published(state.publish())
        for gpus in range(1, 8):  # the binds of the burst, one snapshot each
            state.set_pod(f"ml/p{gpus}", "h100-a", {"nvidia.com/gpu": 1})
            observer.published(state.publish())

    burst(InventoryMetrics(catalog, interval_seconds=3600))
    assert free_h100() == 8  # the burst's first snapshot, at once; the others wait for the interval
    state.replace_pods([])
    burst(InventoryMetrics(catalog, interval_seconds=0.2))
    deadline = time.monotonic() + 10
    while free_h100() != 1:  # the burst's last snapshot, when the interval ends
        assert time.monotonic() < deadline, f"the gauge stayed at {free_h100()}"
        time.sleep(0.05)


def test_certificate_rotation_while_requests_run(tmp_path: Path) -> None:
    old, new = write_certs(tmp_path / "old"), write_certs(tmp_path / "new")
    live = write_certs(tmp_path / "live")
    rotate(live, old)
    (live / "ca.crt").write_bytes(old.joinpath("ca.crt").read_bytes() + new.joinpath("ca.crt").read_bytes())
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    with running_server(tmp_path, ["--nodes", str(nodes)], cert_dir=live, workers=2) as server:
        ctx = server.context()
        first = issuer_of(server, ctx)
        stop = threading.Event()
        results: list[int | str] = []

        def client() -> None:
            while not stop.is_set():
                try:  # a new TLS connection per request: each one sees the certificate of the moment
                    results.append(server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high"})))[0])
                except (OSError, http.client.HTTPException) as exc:
                    results.append(repr(exc))

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        rotate(live, new)
        deadline = time.monotonic() + 10
        while issuer_of(server, ctx) == first and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join()
        assert issuer_of(server, ctx) != first, "new connections must get the new certificate"
        failures = [r for r in results if r != 200]
        assert len(results) > 50 and failures == []


def test_graceful_shutdown_finishes_in_flight_and_closes_idle(tmp_path: Path) -> None:
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    with running_server(tmp_path, ["--nodes", str(nodes)], workers=1) as server:
        idle = server.connection()
        assert server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high"})), conn=idle)[0] == 200

        body = json.dumps(make_review(make_pod({"gpu-class.io/class": "high"}), uid="in-flight")).encode()
        busy = server.context().wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=15),
                                            server_hostname="localhost")
        busy.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:100])
        time.sleep(0.3)  # the request has started: headers and part of the body are in
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        busy.sendall(body[100:])
        reply = b""
        while not reply.endswith(b"}"):
            chunk = busy.recv(65536)
            if not chunk:
                break
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        assert json.loads(reply.partition(b"\r\n\r\n")[2])["response"]["uid"] == "in-flight"
        busy.close()

        # the idle keep-alive connection is closed by the server, so the API server does not reuse it
        assert idle.sock is not None
        idle.sock.settimeout(15)
        assert idle.sock.recv(1) == b""
        # exits of itself, once done: the wait is the Deployment's grace period, after which Kubernetes would kill it
        assert server.process.wait(timeout=30) == 0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


@dataclass
class Outcome:
    sent: float
    received: float
    types: str | None = None
    error: str | None = None
    retried: bool = False


@dataclass
class LoadResult:
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def admission_client(server: Server, stop: threading.Event, result: LoadResult) -> None:
    """Like the API server: a persistent connection, a retry on a connection reset or EOF."""
    review = make_review(make_pod({"gpu-class.io/class": "high"}))
    conn = server.connection()
    while not stop.is_set():
        sent = time.monotonic()
        outcome: Outcome | None = None
        for attempt in (1, 2):
            try:
                status, body = server.post("/mutate", review, conn=conn)
                assert status == 200 and body["response"]["uid"] == review["request"]["uid"], body
                outcome = Outcome(sent, time.monotonic(), types=types_of(body) or "", retried=attempt == 2)
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = server.connection()
                if attempt == 2:
                    outcome = Outcome(sent, time.monotonic(), error=repr(exc), retried=True)
        assert outcome is not None
        with result.lock:
            result.outcomes.append(outcome)
        time.sleep(0.005)
    conn.close()


def test_faults_under_load(tmp_path: Path) -> None:
    certs = write_certs(tmp_path / "live")
    new = write_certs(tmp_path / "new")
    (certs / "ca.crt").write_bytes(certs.joinpath("ca.crt").read_bytes() + new.joinpath("ca.crt").read_bytes())
    with FakeApiServer(bookmark_interval_seconds=0.5) as api:
        api.create(make_namespace("ml"))
        api.create(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8))
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        args = ["--kubeconfig", str(kubeconfig), "--config", str(catalog_file(tmp_path))]
        with running_server(tmp_path, args, cert_dir=certs, workers=2) as server:
            assert api.wait_for_watches(6, timeout_seconds=20)
            # the inventory over time: (monotonic start, the types a 'high' Pod may get then)
            states: list[tuple[float, str]] = [(0.0, "H100")]
            faults: list[float] = []  # when each fault was done
            stop = threading.Event()
            result = LoadResult()
            clients = [threading.Thread(target=admission_client, args=(server, stop, result)) for _ in range(4)]
            for c in clients:
                c.start()

            def at(seconds: float) -> None:
                time.sleep(max(0.0, t0 + seconds - time.monotonic()))

            t0 = time.monotonic()
            at(1.0)
            api.create(make_node("a100-a", "A100-SXM4-40GB", gpus=4))
            states.append((time.monotonic(), "H100,A100"))
            at(2.5)
            os.kill(worker_pids(server.process.pid)[0], signal.SIGKILL)
            faults.append(time.monotonic())
            at(4.0)
            api.drop_watches()
            faults.append(time.monotonic())
            at(5.5)
            api.set_available(False)
            api.compact()
            api.set_available(True)  # reconnecting watches get 410 and relist
            faults.append(time.monotonic())
            at(7.0)
            api.fail_next(2, status=500)
            api.drop_watches()
            faults.append(time.monotonic())
            at(8.5)
            rotate(certs, new)
            faults.append(time.monotonic())
            at(10.0)
            api.update(make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8, unschedulable=True))
            states.append((time.monotonic(), "A100"))
            at(13.0)
            stop.set()
            for c in clients:
                c.join()
            metrics = scrape(server)

    outcomes = result.outcomes
    lost = [o for o in outcomes if o.error is not None]
    # the load ran across every fault, whatever its rate on this machine: requests sent before the first and
    # after the last, and not one lost
    assert outcomes and min(o.sent for o in outcomes) < faults[0] and max(o.sent for o in outcomes) > faults[-1]
    assert lost == []
    slack_seconds = 3.0  # how long a change may take to reach every worker through a recovering watch
    wrong = []
    for o in outcomes:
        allowed = {types for i, (start, types) in enumerate(states)
                   if start <= o.received and (i + 1 == len(states) or states[i + 1][0] >= o.sent - slack_seconds)}
        if o.types not in allowed:
            wrong.append((o, allowed))
    assert wrong == []
    assert any(o.types == "A100" for o in outcomes[-20:]), "the last change reached the decision"
    restarts = sum(v for (name, _), v in metrics.items() if name == "gpu_class_watch_restarts_total")
    assert restarts >= 6
    report = {
        "requests": len(outcomes), "retried": sum(o.retried for o in outcomes), "lost": len(lost), "wrong": len(wrong),
        "watch_restarts": restarts,
    }
    print(f"faults under load: {report}")


def connections_held(pids: list[int], port: int) -> list[int]:
    """Established connections to local `port` that each process holds (socket inodes from /proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[3] == "01" and int(cols[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(f"socket:[{cols[9]}]")
    return [sum(1 for fd in os.listdir(f"/proc/{pid}/fd") if _link(f"/proc/{pid}/fd/{fd}") in inodes) for pid in pids]


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


@pytest.mark.parametrize("workers, connections", [
    pytest.param(2, 8, id="2-workers-8-connections"),
    pytest.param(3, 6, id="3-workers-6-connections"),
])
def test_keep_alive_connections_spread_evenly_over_workers(tmp_path: Path, workers: int, connections: int) -> None:
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    with running_server(tmp_path, ["--nodes", str(nodes)], workers=workers) as server:
        pids = worker_pids(server.process.pid, expected=workers)
        review = make_review(make_pod({"gpu-class.io/class": "high"}))

        def open_pool() -> list[int]:
            """A fresh pool, opened at once as the API server's is: the connections each worker holds."""
            pool = [server.connection() for _ in range(connections)]
            threads = [threading.Thread(target=server.post, args=("/mutate", review, c)) for c in pool]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            held = connections_held(pids, server.port)
            for c in pool:
                c.close()
            time.sleep(0.3)  # the workers see the closed connections
            return held

        # a worker still loading its app does not accept yet (rightly): wait until all of them do
        deadline = time.monotonic() + 15
        while 0 in open_pool() and time.monotonic() < deadline:
            pass
        for _ in range(3):
            assert open_pool() == [connections // workers] * workers


def test_a_product_placed_by_its_labels_is_counted_for_the_operator(tmp_path: Path) -> None:
    """A GPU node of a product no type claims, placed by its GFD labels: the gauge names the product to add to
    the catalog."""
    labels = {"nvidia.com/gpu.family": "x-next", "nvidia.com/gpu.compute.major": "11",
              "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.memory": "307200"}
    nodes = write_objects(tmp_path / "nodes.yaml", [make_node(f"x300-{i}", "NVIDIA-X300", labels=labels)
                                                    for i in range(2)] + [make_node("h100", "NVIDIA-H100-80GB-HBM3")])
    with running_server(tmp_path, ["--nodes", str(nodes)], workers=1) as server:
        samples = scrape(server)
    assert samples[("gpu_class_label_placed_nodes", (("product", "NVIDIA-X300"),))] == 2
    assert not any(name == "gpu_class_label_placed_nodes" and dict(labels).get("product") != "NVIDIA-X300"
                   for name, labels in samples)
