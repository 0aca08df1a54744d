"""`python -m bench apiserver`: what gpu-class costs a Pod create on the real API server, and how fast it sees changes.

On the local control plane (tests/e2e/local-cluster):
- Pod create latency, client side (the kubernetes client over one kept-alive connection), with the
  webhook registered and with its configuration removed (the backstop's binding too, or it would
  refuse the unplaced class Pods), in alternating rounds so drift on a shared machine falls on both.
- Node change to the first admission that sees it: a GPU node is created or deleted, then dry-run
  creates are sent back to back until one is placed accordingly.
Writes its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

import kubernetes
from kubernetes.client.exceptions import ApiException

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

from bench.sections import write_section  # noqa: E402

# The client's models are typed; the API takes the plain dict bodies we send, and answers are
# read as the JSON they are.
CoreApi = Any

HOOKS = (("mutatingwebhookconfiguration", "gpu-class.io"),
         ("validatingadmissionpolicybinding", "gpu-class.io-placement"))
NODE_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {"gpu-class.io/class": "high"}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/cuda:12",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _admitted_as(core: CoreApi, namespace: str) -> str:
    """How a class Pod is admitted now: "patched", "unpatched", or "refused" (by either hook)."""
    try:
        pod = json.loads(core.create_namespaced_pod(namespace, _pod("probe"), dry_run="All",
                                                    _preload_content=False).data)
    except ApiException as e:
        if e.status == 403:
            return "refused"
        raise
    return "patched" if "gpu-class.io/types" in (pod["metadata"].get("annotations") or {}) else "unpatched"


def _wait(what: str, probe: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def _set_registered(cluster: local_cluster.Cluster, core: CoreApi, namespace: str,
                    registered: bool, hooks: list[dict[str, Any]]) -> None:
    if registered:
        local_cluster.apply(cluster, hooks)
    else:
        for kind, name in HOOKS:
            cluster.kubectl("delete", kind, name, "--ignore-not-found")
    # The API server applies configuration changes asynchronously.
    want = "patched" if registered else "unpatched"
    _wait("the webhook configuration change to take effect", lambda: _admitted_as(core, namespace) == want)


def measure_creates(cluster: local_cluster.Cluster, core: CoreApi, namespace: str,
                    creates: int, rounds: int) -> dict[str, list[float]]:
    hooks = [o for o in local_cluster.render_install(cluster)
             if (o["kind"].lower(), o["metadata"]["name"]) in HOOKS or o["kind"] == "ValidatingAdmissionPolicy"]
    samples: dict[str, list[float]] = {"with webhook": [], "without webhook": []}
    per_round = max(1, creates // rounds)
    for r in range(rounds * 2):
        registered = r % 2 == 0
        _set_registered(cluster, core, namespace, registered, hooks)
        arm = samples["with webhook" if registered else "without webhook"]
        for _ in range(per_round):
            name = f"c-{uuid.uuid4().hex[:10]}"
            started = time.perf_counter()
            core.create_namespaced_pod(namespace, _pod(name), _preload_content=False)
            arm.append((time.perf_counter() - started) * 1000)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    _set_registered(cluster, core, namespace, True, hooks)
    return samples


def measure_node_changes(core: CoreApi, namespace: str, changes: int) -> list[float]:
    """Milliseconds from a node's create (or delete) returning to the first dry run that sees it."""
    def offers_h100() -> bool:
        # With no H100 node the class has no type present: refused.
        return _admitted_as(core, namespace) == "patched"

    seen: list[float] = []
    name = "bench-h100"
    for i in range(changes):
        present = i % 2 == 0
        if present:
            core.create_node({"metadata": {"name": name, "labels": NODE_LABELS}})
            core.patch_node_status(name, {"status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}})
        else:
            core.delete_node(name)
        changed = time.perf_counter()
        while offers_h100() != present:
            if time.perf_counter() - changed > 30:
                raise RuntimeError("the webhook did not see a node change within 30 s")
        seen.append((time.perf_counter() - changed) * 1000)
    return seen


def _delete_nodes(core: CoreApi) -> None:
    for name in ("bench-h100", "bench-h100-fleet"):
        try:
            core.delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise


def render(samples: dict[str, list[float]], node_ms: list[float], wall_seconds: float, command: str) -> str:
    lines = [
        "## On the real API server (`python -m bench apiserver`)",
        "",
        f"Command: `{command}`; local control plane (tests/e2e/local-cluster), Kubernetes "
        f"{local_cluster.kube_version()}; {wall_seconds:.0f} s wall. Client-side latency of `create pod` "
        "through the kubernetes client, alternating rounds with and without the webhook configuration.",
        "",
        "| | creates | p50 ms | p99 ms | mean ms |",
        "|---|---|---|---|---|",
    ]
    for arm, values in samples.items():
        lines.append(f"| {arm} | {len(values)} | {_percentile(values, 0.5):.2f} | {_percentile(values, 0.99):.2f} "
                     f"| {statistics.fmean(values):.2f} |")
    with_p50 = _percentile(samples["with webhook"], 0.5)
    without_p50 = _percentile(samples["without webhook"], 0.5)
    lines += [
        "",
        f"The webhook adds {with_p50 - without_p50:.2f} ms to the median create ({with_p50 / without_p50:.2f}x).",
        "",
        f"Node change to the first admission that sees it, {len(node_ms)} changes (create and delete of a GPU "
        f"node, dry-run creates back to back): p50 {_percentile(node_ms, 0.5):.1f} ms, "
        f"max {max(node_ms):.1f} ms. This includes one dry-run round trip (the first probe after the change "
        "usually already sees it).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench apiserver", description=__doc__.split("\n\n")[0])
    p.add_argument("--creates", type=int, default=300, help="Pod creates per arm (default 300)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per arm (default 3)")
    p.add_argument("--node-changes", type=int, default=20)
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    started = time.monotonic()
    with local_cluster.running(args.cluster_dir) as cluster:
        core: CoreApi = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)))
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"metadata": {"name": namespace, "labels": {"gpu-class.io/inject": "enabled"}}})
        _wait("the namespace's default ServiceAccount", lambda: bool(core.list_namespaced_service_account(
            namespace, field_selector="metadata.name=default").items))
        _delete_nodes(core)  # left by an interrupted run on a kept cluster
        node_ms = measure_node_changes(core, namespace, args.node_changes)
        core.create_node({"metadata": {"name": "bench-h100-fleet", "labels": NODE_LABELS}})
        core.patch_node_status("bench-h100-fleet", {"status": {
            "allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}]}})
        _wait("the fleet node in the inventory", lambda: _admitted_as(core, namespace) == "patched")
        samples = measure_creates(cluster, core, namespace, args.creates, args.rounds)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_namespace(namespace)
        _delete_nodes(core)
    command = "python -m bench apiserver" + (" " + " ".join(argv) if argv else "")
    text = render(samples, node_ms, time.monotonic() - started, command)
    print(text)
    write_section(args.output, "apiserver", text)
    return 0
