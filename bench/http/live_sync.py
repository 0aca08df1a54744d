"""The live inventory's first sync against a large cluster: a fake API server in one process, the
webhook's LiveInventory in another, so the second one's memory is the inventory's alone.

    python -m bench.http.live_sync fake --nodes 5000 --pods 150000 --gpu-pods 20000 --kubeconfig OUT
        serves until its stdin closes; prints {"url", "populate_seconds", ...} once it serves
    python -m bench.http.live_sync sync --kubeconfig F [--timeout-seconds S]
        prints {"synced", "sync_seconds", "cpu_seconds", "rss_before_kib", "rss_after_kib", ...}

The fake is tests/fakeapi.py (a loopback kube-apiserver with list paging and watches); it is slower
than a real API server serving from its watch cache, so the sync process's own CPU time is reported
next to the wall time: that part is the webhook's cost.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from bench.common.procs import REPO_ROOT, Memory, memory_of
from bench.common.workload import make_cluster_pods, make_fleet


def fake_api_server_class() -> Any:
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from fakeapi import FakeApiServer  # tests/ is not a package; the fake is shared with the tests

    return FakeApiServer


def serve_fake(nodes: int, pods: int, gpu_pods: int, kubeconfig: Path) -> None:
    started = time.monotonic()
    fake: Any = fake_api_server_class()(bookmark_interval_seconds=30.0)
    fleet = make_fleet(nodes)
    names = [n["metadata"]["name"] for n in fleet]
    for node in fleet:
        fake.create(node)
    for ns in sorted({f"team-{i % 60}" for i in range(min(pods, 60))} | {"ml-team"}):
        fake.create({"kind": "Namespace", "metadata": {"name": ns, "labels": {"gpu-class.io/inject": "enabled"}}})
    del fleet
    for pod in make_cluster_pods(pods, gpu_pods, names):
        fake.create(pod)
    fake.compact()  # the objects stay; their creation events need not (a watch starts from the list)
    gc.collect()
    fake.start()
    fake.kubeconfig(kubeconfig)
    print(json.dumps({"url": fake.url, "populate_seconds": round(time.monotonic() - started, 1),
                      "nodes": nodes, "pods": pods}), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    fake.stop()


def sync(kubeconfig: Path, timeout_seconds: float) -> dict[str, Any]:
    import kubernetes

    from webhook.core.catalog.loading import load_default_catalog
    from webhook.cluster.watch import LiveInventory, check_kube_config

    catalog = load_default_catalog()
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(check_kube_config(str(kubeconfig))))
    gc.collect()
    before = memory_of_self()
    cpu_started, started = time.process_time(), time.monotonic()
    inventory = LiveInventory(catalog, api).start()
    synced = inventory.wait_until_synced(timeout_seconds)
    sync_seconds = time.monotonic() - started
    cpu_seconds = time.process_time() - cpu_started
    at_sync = memory_of_self()
    inventory.stop()
    time.sleep(1.0)
    gc.collect()
    settled = memory_of_self()
    state = inventory.state
    return {
        "synced": synced,
        "watch_pods": inventory.watch_pods,
        "sync_seconds": round(sync_seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "rss_before_kib": before.rss_kib,
        "rss_at_sync_kib": at_sync.rss_kib,
        "rss_settled_kib": settled.rss_kib,
        "hwm_kib": settled.hwm_kib,
        "gpu_nodes": len(state.nodes),
        "product_groups": len(state.summaries),
        "gpu_pods_accounted": len(state.pods),
        "gpus_requested": sum(state.requested.values()),
    }


def memory_of_self() -> Memory:
    return memory_of(os.getpid())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.http.live_sync")
    sub = p.add_subparsers(dest="role", required=True)
    f = sub.add_parser("fake")
    f.add_argument("--nodes", type=int, default=5000)
    f.add_argument("--pods", type=int, default=150_000)
    f.add_argument("--gpu-pods", type=int, default=20_000)
    f.add_argument("--kubeconfig", type=Path, required=True)
    s = sub.add_parser("sync")
    s.add_argument("--kubeconfig", type=Path, required=True)
    s.add_argument("--timeout-seconds", type=float, default=300.0)
    args = p.parse_args(argv)
    if args.role == "fake":
        serve_fake(args.nodes, args.pods, args.gpu_pods, args.kubeconfig)
    else:
        print(json.dumps(sync(args.kubeconfig, args.timeout_seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
