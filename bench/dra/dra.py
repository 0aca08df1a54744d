"""`python -m bench dra`: does a class's order hold on GPUs published through DRA, and what does naming
DRA nodes cost? Measured on the real control plane (tests/e2e/local-cluster), no DRA driver running.

A DRA-only fleet: six nodes with no device plugin whose GPUs are ResourceSlices as NVIDIA's driver
publishes them (tests/fixtures/dra), four devices each, of three types of class `high` (H200 >
H100-NVL > L40S), two of the nodes with GFD's product label and four without; half of them busy with
CPU work, so the default profile's least-allocated scores pull towards the idle ones. NVIDIA's
DeviceClasses map nvidia.com/gpu. A stream of 1-GPU Pods, one at a time, each waited for until bound
(or Pending), on each way of placing:

  (a) gpu-class on the default scheduler: the Pod's nvidia.com/gpu limit, served from DRA devices
      through the DeviceClass; the type order is the Pod's preferred node affinity;
  (b) the same on gpu-class-scheduler, the strict profiles (deploy/scheduler);
  (c) the same on gpu-class-extender, the profiles with gpu-class's extender;
  (d) DRA's own order with no gpu-class: a ResourceClaimTemplate whose request lists the three types
      best first in `firstAvailable`, CEL selectors on productName, on the default scheduler.

Each Pod's device is read from the allocation of its claim (the one kube-scheduler makes for an
extended resource, or the template's). A Pod is right when its device is of the best type that had a
free device when it was bound; Pending while a device was free is "wrongly Pending".

Then the cost of naming nodes no product label names: the patch and the admission decision for a
Pod of class `high` with N such nodes of each type (kubernetes.io/hostname values in its affinity),
against the same cluster labelled by GFD.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import kubernetes
from kubernetes.client.exceptions import ApiException

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))
sys.path.insert(0, str(REPO_ROOT / "tests"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)
from builders import make_bare_node, make_device_node, make_pod, make_slice, nvidia_device_classes, nvidia_gpus  # noqa: E402
from kubeobjects import delete_if_present, wait_for  # noqa: E402

from bench.common.commit import measured_at  # noqa: E402
from bench.common.sections import write_section  # noqa: E402
from webhook.core.catalog.loading import load_default_catalog  # noqa: E402
from webhook.core.view.inventory import build_snapshot  # noqa: E402
from webhook.core.admission.patch import build_patch  # noqa: E402
from webhook.core.admission.planner import plan  # noqa: E402

PATHS = ("default", "profiles", "extender", "first-available")
TITLE = {"default": "(a) gpu-class, default scheduler", "profiles": f"(b) gpu-class, {local_cluster.STRICT_SCHEDULER}",
         "extender": f"(c) gpu-class, {local_cluster.EXTENDER_SCHEDULER}",
         "first-available": "(d) DRA firstAvailable alone, default scheduler"}
SCHEDULER = {"default": None, "profiles": local_cluster.STRICT_SCHEDULER,
             "extender": local_cluster.EXTENDER_SCHEDULER, "first-available": None}
ORDER = ("H200", "H100-NVL", "L40S")  # class high, best first, as far as this fleet goes
PRODUCT = {"H200": "NVIDIA H200", "H100-NVL": "NVIDIA H100 NVL", "L40S": "NVIDIA L40S"}
GFD = {"H200": "NVIDIA-H200", "H100-NVL": "NVIDIA-H100-NVL", "L40S": "NVIDIA-L40S"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DEVICES_PER_NODE = 4
PENDING_SECONDS = 5.0


@dataclass(frozen=True)
class DraNode:
    key: str
    gpu_type: str
    labelled: bool  # GFD's product label on it
    busy_cpu_millis: int  # taken by a CPU-only Pod before the stream


FLEET = (
    DraNode("h200-a", "H200", False, 60_000), DraNode("h200-b", "H200", True, 0),
    DraNode("nvl-a", "H100-NVL", False, 0), DraNode("nvl-b", "H100-NVL", False, 60_000),
    DraNode("l40s-a", "L40S", False, 0), DraNode("l40s-b", "L40S", True, 60_000),
)


@dataclass
class PathResult:
    path: str
    placed: int = 0
    right: int = 0
    wrongly_pending: int = 0
    wrong: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _first_available_template() -> dict[str, Any]:
    subrequests = [{"name": t.lower().replace("-", ""), "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {
        "expression": f"device.attributes['gpu.nvidia.com'].productName == '{PRODUCT[t]}'"}}]} for t in ORDER]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "best-gpu"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": subrequests}]}}}}


def _pod(path: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any]
    if path != "first-available":
        pod = make_pod({"gpu-class.io/class": "high"}, name=name, containers=[
            {"name": "main", "image": "registry.example/train:1", "resources": {"requests": {"cpu": "1"}}}],
            extra_spec={"schedulerName": SCHEDULER[path]} if SCHEDULER[path] else None)
    else:
        pod = make_pod(name=name, containers=[
            {"name": "main", "image": "registry.example/train:1",
             "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
            extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "best-gpu"}],
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]})
    pod["metadata"].pop("namespace", None)
    return pod


def _claim_name(pod: dict[str, Any]) -> str | None:
    status = pod.get("status") or {}
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    own = next((s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []), None)
    return extended or own


class Stream:
    """One path's fleet, namespace and Pods on the cluster."""

    def __init__(self, cluster: local_cluster.Cluster, path: str) -> None:
        client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
        # the API takes the plain dict bodies sent, and answers are read as the JSON they are
        self.core: Any = kubernetes.client.CoreV1Api(client)
        self.resource: Any = kubernetes.client.ResourceV1Api(client)
        self.path = path
        self.suffix = uuid.uuid4().hex[:5]
        self.node_type: dict[str, str] = {}
        self.namespace = f"bench-dra-{path}-{self.suffix}"

    def node(self, n: DraNode) -> str:
        return f"bench-dra-{n.key}-{self.suffix}"

    def create(self) -> None:
        labels = {"gpu-class.io/inject": "enabled"} if self.path != "first-available" else {}
        self.core.create_namespace({"metadata": {"name": self.namespace, "labels": labels}})
        # the ServiceAccount admission plugin refuses a Pod until the controller manager has made `default`,
        # later on a busy machine than the first busy Pod below is created
        wait_for(f"the default ServiceAccount of {self.namespace}", lambda: self.core.list_namespaced_service_account(
            self.namespace, field_selector="metadata.name=default").items, seconds=60)
        for n in FLEET:
            name = self.node(n)
            obj = (make_device_node(name, {"nvidia.com/gpu.product": GFD[n.gpu_type]}, {}, taints=[GPU_TAINT])
                   if n.labelled else make_bare_node(name))
            obj["spec"]["taints"] = [GPU_TAINT]
            obj["status"]["allocatable"].update(cpu="96", pods="110")
            status = obj.pop("status")
            self.core.create_node(obj)
            self.core.patch_node(name, {"spec": {"taints": [GPU_TAINT]}})  # replaces TaintNodesByCondition's
            self.core.patch_node_status(name, {"status": {**status, "capacity": status["allocatable"]}})
            self.resource.create_resource_slice(make_slice(name, nvidia_gpus(DEVICES_PER_NODE, PRODUCT[n.gpu_type])))
            self.node_type[name] = n.gpu_type
            if n.busy_cpu_millis:
                self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": f"busy-{n.key}"}, "spec": {
                    "nodeName": name, "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "cpu", "image": "registry.example/batch:1",
                                    "resources": {"requests": {"cpu": f"{n.busy_cpu_millis}m"}}}]}})
        if self.path == "first-available":
            self.resource.create_namespaced_resource_claim_template(self.namespace, _first_available_template())

    def run(self, pods: int) -> PathResult:
        result = PathResult(self.path)
        started = time.monotonic()
        free = {t: DEVICES_PER_NODE * sum(1 for n in FLEET if n.gpu_type == t) for t in ORDER}
        for i in range(pods):
            name = f"p{i:03d}"
            self.core.create_namespaced_pod(self.namespace, _pod(self.path, name))
            best = next((t for t in ORDER if free[t] > 0), None)
            got = self._device_type(name)
            if got is None:
                if best is not None:
                    result.wrongly_pending += 1
                    result.wrong.append(f"{name} Pending while {best} had a free device")
                continue
            result.placed += 1
            free[got] -= 1
            if got == best:
                result.right += 1
            else:
                result.wrong.append(f"{name} got {got} while {best} had a free device")
        result.seconds = time.monotonic() - started
        return result

    def _device_type(self, pod: str) -> str | None:
        """The type of the device the Pod's claim was allocated, once bound; None if it stays Pending."""
        deadline = time.monotonic() + PENDING_SECONDS
        while time.monotonic() < deadline:
            obj = json.loads(self.core.read_namespaced_pod(pod, self.namespace, _preload_content=False).data)
            claim = _claim_name(obj)
            if obj["spec"].get("nodeName") and claim:
                response = self.resource.read_namespaced_resource_claim(claim, self.namespace, _preload_content=False)
                allocation = (json.loads(response.data).get("status") or {}).get("allocation")
                if allocation:
                    (result,) = allocation["devices"]["results"]
                    return self.node_type[result["pool"]]
            time.sleep(0.1)
        return None

    def delete(self) -> None:
        self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        self.core.delete_namespace(self.namespace)
        for n in FLEET:
            delete_if_present(self.resource.delete_resource_slice, f"{self.node(n)}-gpu.nvidia.com")
            delete_if_present(self.core.delete_node, self.node(n))


def run_streams(cluster: local_cluster.Cluster, pods: int, paths: Sequence[str] = PATHS) -> list[PathResult]:
    resource = kubernetes.client.ResourceV1Api(kubernetes.config.new_client_from_config(
        config_file=str(cluster.kubeconfig)))
    created = []  # NVIDIA's classes, unless the cluster has them already (then they stay as they are)
    for c in nvidia_device_classes():
        try:
            resource.create_device_class(c)
            created.append(c["metadata"]["name"])
        except ApiException as e:
            if e.status != 409:
                raise
    results = []
    try:
        for path in paths:
            stream = Stream(cluster, path)
            stream.create()
            try:
                time.sleep(2.0)  # the webhook's watch and the schedulers' caches see the new nodes
                results.append(stream.run(pods))
            finally:
                stream.delete()
    finally:
        for name in created:
            delete_if_present(resource.delete_device_class, name)
    return results


# --- the cost of naming nodes by hostname ---------------------------------------------------

@dataclass(frozen=True)
class NamingCost:
    nodes_per_type: int
    labelled: bool
    patch_bytes: int
    plan_microseconds: float  # a first decision on a snapshot (nothing memoised)


def naming_cost(nodes_per_type: int, labelled: bool, repeats: int = 20) -> NamingCost:
    catalog = load_default_catalog()
    objects: list[dict[str, Any]] = [*nvidia_device_classes()]
    for t in ORDER:
        for i in range(nodes_per_type):
            name = f"gpu-{t.lower()}-{i:05d}.example.internal"
            objects.append(make_device_node(name, {"nvidia.com/gpu.product": GFD[t]}, {}) if labelled
                           else make_bare_node(name))
            objects.append(make_slice(name, nvidia_gpus(8, PRODUCT[t])))
    snapshot = build_snapshot(catalog, objects)
    pod = make_pod({"gpu-class.io/class": "high"})
    plan(pod, snapshot, catalog, namespace="ml")  # warm: the first call imports and caches what every call shares
    timings = []
    for _ in range(repeats):
        snapshot.memo.clear()
        started = time.perf_counter()
        decision = plan(pod, snapshot, catalog, namespace="ml")
        timings.append(time.perf_counter() - started)
    assert decision.placement is not None, decision.message
    patch = build_patch(pod, decision.placement)
    return NamingCost(nodes_per_type, labelled, len(json.dumps(patch, separators=(",", ":"))),
                      sorted(timings)[len(timings) // 2] * 1e6)


# --- report -----------------------------------------------------------------------------------

def render(results: Sequence[PathResult], costs: Sequence[NamingCost], command: str, seconds: float) -> str:
    lines = ["## DRA: placement on GPUs published through Dynamic Resource Allocation", "",
             f"{measured_at()}: `{command}` on the local control plane (Kubernetes {local_cluster.kube_version()}), "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s. Fleet: {len(FLEET)} nodes without a device plugin, "
             f"{DEVICES_PER_NODE} DRA devices each ({', '.join(ORDER)}: two nodes each, two of the six with GFD's "
             "product label), three of them busy with CPU work. 1-GPU Pods of class `high`, one at a time.", "",
             "| path | placed | on the best type with a free device | wrongly Pending | seconds |",
             "|---|---|---|---|---|"]
    for r in results:
        share = f"{r.right}/{r.placed} ({100 * r.right / r.placed:.0f}%)" if r.placed else "-"
        lines.append(f"| {TITLE[r.path]} | {r.placed} | {share} | {r.wrongly_pending} | {r.seconds:.0f} |")
    for r in results:
        if r.wrong:
            shown = "; ".join(r.wrong[:4]) + (f"; and {len(r.wrong) - 4} more" if len(r.wrong) > 4 else "")
            lines.append(f"\n{TITLE[r.path]}: {shown}.")
    lines += ["", "Naming DRA nodes: a class `high` Pod's patch and its admission decision (median of 20, "
                  "nothing memoised) with N nodes of each of the three types.", "",
              "| nodes per type | named by | patch bytes | decision (us) |", "|---|---|---|---|"]
    for c in costs:
        by = "GFD product label" if c.labelled else "kubernetes.io/hostname"
        lines.append(f"| {c.nodes_per_type:,} | {by} | {c.patch_bytes:,} | {c.plan_microseconds:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench dra", description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=24, help="Pods per path (default 24: every device of the fleet)")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    started = time.monotonic()
    costs = [naming_cost(n, labelled) for n in (10, 100, 1000) for labelled in (True, False)]
    with local_cluster.running(args.cluster_dir) as cluster:
        results = run_streams(cluster, args.pods)
    command = "python -m bench dra" + (" " + " ".join(argv) if argv else "")
    text = render(results, costs, command, time.monotonic() - started)
    print(text)
    write_section(args.output, "dra", text)
    return 0
