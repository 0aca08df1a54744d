"""A real Karpenter beside the local control plane, for end-to-end tests of gpu-class with an autoscaler.

`running_karpenter(cluster)` runs Karpenter with its KWOK cloud provider (sigs.k8s.io/karpenter `kwok`,
built at the release pinned in tests/tools/karpenter/go.mod, see tests/tools/gotools.py) against a
`local_cluster.Cluster`, with the CRDs of that release read from its module in the Go module cache.
The KWOK provider's "instances" are Node objects it creates itself; the instance types it offers are
GPU machines of our own (INSTANCE_TYPES), written to the file it reads at start.

Two things take the place of what a real cluster would do:
- KWOKNodeClass has no controller of its own (the KWOK provider ships none), yet a NodePool is Ready,
  and provisions, only when its node class reports Ready=True: the harness writes that status.
- There is no kubelet: `KubeletStandIn`, a thread the context manager starts, does the kubelet's part
  for the Nodes Karpenter creates (see its docstring), so that Karpenter initializes them and the
  scheduler binds Pods there.

Keeping Karpenter off other tests' Pods: Karpenter provisions for every Pod any scheduler marked
Unschedulable, whatever its schedulerName, if some NodePool can take it. The pools `node_pool` builds
carry ISOLATION_TAINT besides the GPU taint, so only Pods that tolerate it (TOLERATIONS) make Karpenter
create nodes; other tests' Pods tolerate the GPU taint at most. A test that wants a Karpenter node
must tolerate ISOLATION_TAINT, and should also require its pools' nodes (the `karpenter.sh/nodepool`
label, NODEPOOL_LABEL) so the scheduler cannot place it on a session node of the same product instead.
Name pools after the test's namespace: the NodePools and their nodes are cluster-scoped. gpu-class
itself reads NodePools (its inventory), and tolerates only their GPU taint: ISOLATION_TAINT keeps the
pools for Pods that tolerate it themselves, as a team's taint keeps a pool for the team, so a gpu-class
test with Karpenter writes that toleration on its Pods. Create pools in the test that uses them and
delete them at its end (`Karpenter.delete_node_pools`).
"""

from __future__ import annotations

import calendar
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import local_cluster
from kubeobjects import GPU_TAINT, delete_if_present
from tools import gotools

GROUP = "karpenter.sh"
VERSION = "v1"
KWOK_GROUP = "karpenter.kwok.sh"
KWOK_VERSION = "v1alpha1"
PROCESS = "karpenter"
NODEPOOL_CRD = f"nodepools.{GROUP}"
NODE_CLASS = "gpu-class-e2e"
PRODUCT_LABEL = "nvidia.com/gpu.product"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# What the KWOK provider labels its Nodes with (kwok/apis/v1alpha1/labels.go): the stand-in's selector.
KWOK_NODE_LABEL = ("kwok.x-k8s.io/node", "fake")
# On NodeClaims and the Nodes Karpenter registers; only the running Karpenter takes it off.
TERMINATION_FINALIZER = "karpenter.sh/termination"
# The API server's TaintNodesByCondition admission puts it on every new Node; the node lifecycle
# controller (off in the local cluster: no kubelets) would lift it once the Node is Ready.
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
# Only Pods that tolerate it make Karpenter act (module docstring).
ISOLATION_TAINT = {"key": "e2e.gpu-class.io/karpenter", "value": "autoscaled", "effect": "NoSchedule"}
TOLERATIONS = (
    {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"},
    {"key": ISOLATION_TAINT["key"], "operator": "Equal", "value": ISOLATION_TAINT["value"], "effect": "NoSchedule"},
)
POOL_TAINTS = (GPU_TAINT, ISOLATION_TAINT)

READY_SECONDS = 120.0
POOL_READY_SECONDS = 30.0
# From deleting NodeClaims until Karpenter has drained and deleted their Nodes and dropped its finalizers.
TERMINATION_SECONDS = 60.0
STAND_IN_INTERVAL_SECONDS = 0.25
# What kwok/main.go logs, and goes on without any instance type, when it cannot read the file.
INSTANCE_TYPES_FAILED = "failed constructing instance types"


class KarpenterError(Exception):
    """Karpenter could not be set up: what failed, with its log tail where it ran."""


# --- instance types and objects (pure builders) ------------------------------------------

@dataclass(frozen=True)
class InstanceType:
    """A GPU machine the KWOK provider offers: one on-demand offering per zone, at `price_per_hour`."""

    name: str
    product: str  # the nvidia.com/gpu.product its GPUs report (GFD's label)
    gpus: int
    cpu: str
    memory: str
    price_per_hour: float
    zones: tuple[str, ...] = ("zone-a",)

    @property
    def capacity(self) -> dict[str, str]:
        """What its kubelet would report; 110 Pods is what the KWOK provider assumes too."""
        return {"cpu": self.cpu, "memory": self.memory, "nvidia.com/gpu": str(self.gpus), "pods": "110"}


H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"
T4 = "Tesla-T4"
# AWS's H100 and A100 machines, by their shape and list price; the names only need to be unique.
INSTANCE_TYPES = (
    InstanceType("p5.48xlarge", H100, gpus=8, cpu="192", memory="2048Gi", price_per_hour=98.32),
    InstanceType("p4d.24xlarge", A100, gpus=8, cpu="96", memory="1152Gi", price_per_hour=32.77),
    InstanceType("g4dn.12xlarge", T4, gpus=4, cpu="48", memory="192Gi", price_per_hour=3.91),
)


def build_instance_types(types: Sequence[InstanceType]) -> list[dict[str, Any]]:
    """The file the KWOK provider reads (INSTANCE_TYPES_FILE_PATH), in the schema of its own
    kwok/cloudprovider/instance_types.json: an offering is the provider's Offering (Price, Available)
    with its Requirements as node selector requirements. (kwok/examples/instance_types.json writes
    `zone`/`capacityType` fields instead; the provider's JSON decoding ignores them, so every offering
    there would have no zone.)"""
    return [{
        "name": t.name,
        "offerings": [{"Price": t.price_per_hour, "Available": True, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
        ]} for zone in t.zones],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": t.capacity,
    } for t in types]


def node_class(name: str = NODE_CLASS) -> dict[str, Any]:
    return {"apiVersion": f"{KWOK_GROUP}/{KWOK_VERSION}", "kind": "KWOKNodeClass", "metadata": {"name": name}}


def ready_condition(generation: int, now: str) -> dict[str, Any]:
    return {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": now,
            "observedGeneration": generation}


def node_pool(name: str, product: str, *, instance_types: Sequence[str] | None = None,
              limits: Mapping[str, str | int] | None = None,
              taints: Sequence[Mapping[str, str]] = POOL_TAINTS, weight: int | None = None,
              labels: Mapping[str, str] | None = None, consolidate_after: str = "Never",
              node_class_name: str = NODE_CLASS) -> dict[str, Any]:
    """A NodePool of nodes labelled with the GPU `product`, made of `instance_types` (by default those
    of INSTANCE_TYPES with that product), tainted with `taints` (the GPU taint and ISOLATION_TAINT by
    default: keep ISOLATION_TAINT, see the module docstring).

    Consolidation waits `consolidate_after`: Never by default, so Karpenter takes no node away during a
    test unless the test asks; nodes never expire."""
    if instance_types is None:
        instance_types = [t.name for t in INSTANCE_TYPES if t.product == product]
    if not instance_types:
        raise ValueError(f"no instance type in INSTANCE_TYPES has GPU {product!r}: name some")
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {PRODUCT_LABEL: product, **(labels or {})}},
            "spec": {
                "nodeClassRef": {"group": KWOK_GROUP, "kind": "KWOKNodeClass", "name": node_class_name},
                "requirements": [
                    {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(instance_types)},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                ],
                "taints": [dict(t) for t in taints],
                "expireAfter": "Never",
            },
        },
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": consolidate_after},
    }
    if limits:
        spec["limits"] = {resource: str(amount) for resource, amount in limits.items()}
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def has_condition(obj: Mapping[str, Any], condition: str) -> bool:
    return any(c.get("type") == condition and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def as_json(found: object) -> dict[str, Any]:
    """What CustomObjectsApi returns: the object's JSON (typed `object` by the client)."""
    assert isinstance(found, dict), type(found)
    return found


def response_json(response: object) -> dict[str, Any]:
    """The JSON of a call made with `_preload_content=False` (the client's types name the model it
    would have built, not the raw response it returns)."""
    return as_json(json.loads(getattr(response, "data")))


# --- the kubelet's part ------------------------------------------------------------------

def plan_node_status(node: Mapping[str, Any], capacity: Mapping[str, str], now: str) -> dict[str, Any] | None:
    """The status a kubelet would report for `node`, a machine with `capacity`: Ready, its capacity, and
    allocatable as Karpenter predicted it (the instance type less its overhead) with anything missing
    taken from capacity. None when the Node already says so."""
    status = node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    # By resource names: the API server writes quantities back in its own form ("1Ki" for "1024").
    reported = (status.get("capacity") or {}).keys() & (status.get("allocatable") or {}).keys()
    if ready and capacity.keys() <= reported:
        return None
    allocatable = {**capacity, **(status.get("allocatable") or {})}
    return {"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "gpu-class e2e kubelet stand-in", "lastHeartbeatTime": now,
                        "lastTransitionTime": now}],
        "capacity": dict(capacity), "allocatable": allocatable}}


def plan_taints(node: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The Node's taints without the not-ready taint, as the node lifecycle controller would leave them
    once the Node is Ready; None when there is none to lift."""
    taints = (node.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if t.get("key") != NOT_READY_TAINT_KEY]
    return kept if len(kept) != len(taints) else None


class KubeletStandIn:
    """The kubelet's part for the Nodes the KWOK provider creates, polled every `interval_seconds`:

    - report the Node Ready with the capacity of its instance type (nvidia.com/gpu included), and lift
      the not-ready taint: Karpenter's initialization waits for Ready=True, for no known ephemeral taint
      (not-ready among them) and for every resource its Pods asked for in allocatable (lifecycle/
      initialization.go). Registration needs none of it: Karpenter registers a Node as soon as it
      exists (it lifts karpenter.sh/unregistered itself, lifecycle/registration.go).
    - confirm the deletion of the Node's Pods that are being deleted (a delete with grace period 0,
      as a kubelet does once the containers are gone), so Karpenter's drain ends.

    Errors other than conflicts (Karpenter writes the same Nodes) are kept in `errors`, not raised:
    the next poll tries again, and a test that waits in vain shows them."""

    def __init__(self, api_client: kubernetes.client.ApiClient, capacities: Mapping[str, Mapping[str, str]],
                 interval_seconds: float = STAND_IN_INTERVAL_SECONDS) -> None:
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._capacities = capacities
        self._interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-stand-in", daemon=True)
        self.errors: list[str] = []
        # how long after its creation a Node is reported Ready, as a machine takes to boot and join; a test sets it
        self.ready_after_seconds = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_seconds):
            try:
                self.sync()
            except Exception as e:  # noqa: BLE001 (a thread that died would stop every later test)
                self.errors = (self.errors + [f"{type(e).__name__}: {e}"])[-10:]

    def sync(self) -> None:
        key, value = KWOK_NODE_LABEL
        listed = self._core.list_node(label_selector=f"{key}={value}", _preload_content=False)
        for node in response_json(listed)["items"]:
            name = node["metadata"]["name"]
            if not node["metadata"].get("deletionTimestamp"):
                self._report(node)
            self._confirm_pod_deletions(name)

    def _report(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        created = calendar.timegm(time.strptime(node["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        if time.time() - created < self.ready_after_seconds:
            return
        capacity = self._capacities.get(node["metadata"].get("labels", {}).get(INSTANCE_TYPE_LABEL, ""))
        if capacity is None:
            self.errors = (self.errors + [f"node {name}: no instance type of ours"])[-10:]
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = plan_node_status(node, capacity, now)
        taints = plan_taints(node)
        try:
            if taints is not None:
                # With the resourceVersion read (so before the status write, which changes it): Karpenter
                # edits the same list (registration), and a write over its edit would bring
                # karpenter.sh/unregistered back. On a conflict the next poll reads again.
                self._core.patch_node(name, {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                                             "spec": {"taints": taints}})
            if status is not None:
                self._core.patch_node_status(name, status)
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    def _confirm_pod_deletions(self, node: str) -> None:
        listed = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                        _preload_content=False)
        for pod in response_json(listed)["items"]:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                with _ignore_not_found():
                    self._core.delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0)


# --- a running Karpenter --------------------------------------------------------------------

@dataclass(frozen=True)
class Karpenter:
    """A running Karpenter (KWOK provider) and its kubelet stand-in, and what tests use of them."""

    cluster: local_cluster.Cluster
    objects: kubernetes.client.CustomObjectsApi
    core: kubernetes.client.CoreV1Api
    instance_types: tuple[InstanceType, ...]
    stand_in: KubeletStandIn
    health_port: int
    metrics_port: int
    version: str

    def log_tail(self, lines: int = 40) -> str:
        errors = self.stand_in.errors
        tail = self.cluster.log_tail(PROCESS, lines)
        return tail + (f"\nkubelet stand-in errors: {'; '.join(errors)}" if errors else "")

    def apply_node_pools(self, *pools: Mapping[str, Any]) -> None:
        """Server-side apply the NodePools, then wait until Karpenter reports each Ready (it provisions
        for Ready pools only)."""
        local_cluster.apply(self.cluster, pools)
        for pool in pools:
            name = pool["metadata"]["name"]
            _wait(f"NodePool {name} Ready", lambda: has_condition(self.node_pool(name) or {}, "Ready"),
                  POOL_READY_SECONDS, self.log_tail)

    def node_pool(self, name: str) -> dict[str, Any] | None:
        try:
            return as_json(self.objects.get_cluster_custom_object(GROUP, VERSION, "nodepools", name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def pool_resources(self, name: str) -> dict[str, str]:
        """What the NodePool has provisioned (status.resources: cpu, memory, nvidia.com/gpu, nodes, ...);
        Karpenter updates it a moment after its nodes change."""
        return dict(((self.node_pool(name) or {}).get("status") or {}).get("resources") or {})

    def node_claims(self, pool: str | None = None) -> list[dict[str, Any]]:
        """The NodeClaims of `pool`, or of every pool."""
        selector = f"{NODEPOOL_LABEL}={pool}" if pool else ""
        listed = self.objects.list_cluster_custom_object(GROUP, VERSION, "nodeclaims", label_selector=selector)
        return list(as_json(listed)["items"])

    def nodes(self, pool: str | None = None) -> list[dict[str, Any]]:
        """The Nodes the KWOK provider created for `pool`, or for every pool."""
        key, value = KWOK_NODE_LABEL
        selector = f"{key}={value}" + (f",{NODEPOOL_LABEL}={pool}" if pool else "")
        listed = self.core.list_node(label_selector=selector, _preload_content=False)
        return list(response_json(listed)["items"])

    def delete_node_pools(self, *names: str) -> None:
        """Delete the pools and their NodeClaims; return once Karpenter has drained and deleted their
        Nodes (Pods still bound there are evicted; the stand-in confirms it)."""
        _delete_pools(self.objects, self.core, names, self.log_tail)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


def _wait(what: str, probe: Callable[[], Any], seconds: float, log_tail: Callable[[], str]) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        if time.monotonic() > deadline:
            raise KarpenterError(f"timed out after {seconds:.0f} s waiting for {what}; Karpenter's log:\n{log_tail()}")
        time.sleep(0.25)


def _delete_pools(objects: kubernetes.client.CustomObjectsApi, core: kubernetes.client.CoreV1Api,
                  pools: Sequence[str] | None, log_tail: Callable[[], str]) -> None:
    """Delete the NodePools `pools` (None: every one), then their NodeClaims, and wait until Karpenter
    has deleted those and their Nodes.

    The pools go first: Karpenter provisions ahead for the Pods on a node being deleted, so a NodeClaim
    deleted while its pool is still there can be replaced by a new one. NodePools carry no finalizer;
    the NodeClaims and Nodes carry Karpenter's, which the running Karpenter takes off once it has
    drained the node."""
    def is_wanted(obj: Mapping[str, Any]) -> bool:
        return pools is None or (obj["metadata"].get("labels") or {}).get(NODEPOOL_LABEL) in pools

    for pool in _list(objects, "nodepools"):
        if pools is None or pool["metadata"]["name"] in pools:
            delete_if_present(objects.delete_cluster_custom_object, GROUP, VERSION, "nodepools",
                              pool["metadata"]["name"])

    def left() -> list[str]:
        claims = [c for c in _list(objects, "nodeclaims") if is_wanted(c)]
        for claim in claims:
            if not claim["metadata"].get("deletionTimestamp"):
                delete_if_present(objects.delete_cluster_custom_object, GROUP, VERSION, "nodeclaims",
                                  claim["metadata"]["name"])
        return [o["metadata"]["name"] for o in claims + [n for n in _kwok_nodes(core) if is_wanted(n)]]

    what = f"NodePools {', '.join(pools)}" if pools is not None else "every NodePool"
    _wait(f"the NodeClaims and Nodes of {what} gone", lambda: not left(), TERMINATION_SECONDS, log_tail)


@contextlib.contextmanager
def running_karpenter(cluster: local_cluster.Cluster, *,
                      instance_types: Sequence[InstanceType] = INSTANCE_TYPES) -> Iterator[Karpenter]:
    """Karpenter (KWOK provider) against `cluster`, offering `instance_types`, for a fixture.

    Yields once Karpenter is ready (its caches synced) with the kubelet stand-in running. Afterwards
    (also when the start fails): every NodePool, then every NodeClaim, is deleted while Karpenter still
    runs, so it drains and deletes their Nodes and takes its finalizers off (`_delete_pools`); then the
    stand-in and the process stop, and whatever is left (from a Karpenter that died) is stripped of its
    finalizers and deleted, with the node class, so later tests in the session see no Karpenter node.
    The CRDs stay, as Kueue's do (tests/e2e/kueue.py). A Karpenter that does not start fails the test
    with its log tail."""
    api_client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    stand_in = KubeletStandIn(api_client, {t.name: t.capacity for t in instance_types})
    try:
        try:
            karpenter = _start(cluster, api_client, tuple(instance_types), stand_in)
        except (KarpenterError, local_cluster.ClusterError, gotools.ToolError) as e:
            pytest.fail(f"Karpenter did not start: {e}", pytrace=False)
        yield karpenter
    finally:
        _stop(cluster, api_client, stand_in)


def _start(cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient,
           instance_types: tuple[InstanceType, ...], stand_in: KubeletStandIn) -> Karpenter:
    objects = kubernetes.client.CustomObjectsApi(api_client)
    log = lambda line: print(line, flush=True)  # noqa: E731 (pytest shows it with -s)
    binary = gotools.build_karpenter(log) / "kwok"
    source = gotools.karpenter_source()
    # A kept cluster (GPUCLASS_E2E_KEEP) may still run the Karpenter of a session that was killed:
    # `start` would leave it running, with its own ports and instance types.
    cluster.stop(PROCESS)
    _remove_leftovers(cluster, api_client)

    install_crds(cluster, karpenter_crds(source))
    local_cluster.apply(cluster, [node_class()])
    # No controller sets it (module docstring); without Ready=True no NodePool becomes Ready.
    created = as_json(objects.get_cluster_custom_object(KWOK_GROUP, KWOK_VERSION, "kwoknodeclasses", NODE_CLASS))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    objects.patch_cluster_custom_object_status(
        KWOK_GROUP, KWOK_VERSION, "kwoknodeclasses", NODE_CLASS,
        {"status": {"conditions": [ready_condition(created["metadata"]["generation"], now)]}})

    work = cluster.dir / "karpenter"
    work.mkdir(exist_ok=True)
    types_file = work / "instance-types.json"
    types_file.write_text(json.dumps(build_instance_types(instance_types), indent=1))
    ports = {name: local_cluster.free_port() for name in ("health", "metrics")}
    # Karpenter's client reads KUBECONFIG only (it parses no --kubeconfig); `env` sets it and execs it.
    cluster.start(PROCESS, [
        "env", f"KUBECONFIG={cluster.kubeconfig}", str(binary),
        "--disable-leader-election", f"--health-probe-port={ports['health']}",
        f"--metrics-port={ports['metrics']}", f"--instance-types-file-path={types_file}", "--log-level=info",
    ])
    cluster.wait_ready(PROCESS, lambda: _http_ok(f"http://127.0.0.1:{ports['health']}/readyz"), READY_SECONDS)
    # kwok/main.go only logs a file it cannot read or parse, and runs on with no instance type at all.
    if INSTANCE_TYPES_FAILED in _log_text(cluster):
        raise KarpenterError(f"Karpenter did not take {types_file}:\n{cluster.log_tail(PROCESS)}")
    stand_in.start()
    return Karpenter(cluster=cluster, objects=objects, core=kubernetes.client.CoreV1Api(api_client),
                     instance_types=instance_types, stand_in=stand_in, health_port=ports["health"],
                     metrics_port=ports["metrics"], version=gotools.karpenter_version())


def karpenter_crds(source: Path) -> list[dict[str, Any]]:
    """Karpenter's own kinds (NodePool, NodeClaim, NodeOverlay, CapacityBuffer) as the KWOK chart installs
    them (hack/kwok/requirements.sh has allowed its labels there), and the KWOKNodeClass."""
    crd_files = sorted((source / "kwok" / "charts" / "crds").glob("*.yaml")) + \
        sorted((source / "kwok" / "apis" / "crds").glob("*.yaml"))
    return [yaml.safe_load(path.read_text()) for path in crd_files]


def install_crds(cluster: local_cluster.Cluster, crds: Sequence[Mapping[str, Any]]) -> None:
    """Apply the CRDs and return once the API server serves each."""
    local_cluster.apply(cluster, crds)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    *(f"crd/{c['metadata']['name']}" for c in crds))


def remove_nodepool_crd(cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient) -> None:
    """Karpenter's NodePool kind no longer served (a kept cluster may hold an earlier session's): its objects
    first, whose finalizers nothing would take off without Karpenter."""
    _remove_leftovers(cluster, api_client)
    cluster.kubectl("delete", "crd", NODEPOOL_CRD, "--ignore-not-found", "--wait=true", "--timeout=60s")


def _log_text(cluster: local_cluster.Cluster) -> str:
    path = cluster.logs / f"{PROCESS}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bool(r.status == 200)
    except urllib.error.HTTPError:
        return False


def _stop(cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient, stand_in: KubeletStandIn) -> None:
    objects = kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    try:
        if cluster.is_running(PROCESS):  # then its CRDs are there
            _delete_pools(objects, core, None, lambda: cluster.log_tail(PROCESS))
    except KarpenterError as e:
        print(f"Karpenter's cleanup: {e}", flush=True)  # what is left is stripped below
    finally:
        stand_in.stop()
        cluster.stop(PROCESS)
        _remove_leftovers(cluster, api_client)


def _remove_leftovers(cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient) -> None:
    """Without Karpenter nothing takes its finalizers off: strip and delete its NodeClaims and the
    Nodes the KWOK provider made, then delete the NodePools and node classes. The kinds are looked up
    first: a start that failed half-way applied some CRDs or none."""
    objects = kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    served = {c["spec"]["names"]["plural"] for c in
              json.loads(cluster.kubectl("get", "crd", "-o", "json").stdout)["items"]
              if c["spec"]["group"] in (GROUP, KWOK_GROUP)}
    strip = {"metadata": {"finalizers": None}}
    if "nodeclaims" in served:
        for claim in _list(objects, "nodeclaims"):
            name = claim["metadata"]["name"]
            with _ignore_not_found():
                objects.patch_cluster_custom_object(GROUP, VERSION, "nodeclaims", name, strip)
                objects.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", name)
    for node in _kwok_nodes(core):
        name = node["metadata"]["name"]
        with _ignore_not_found():
            core.patch_node(name, strip)
            core.delete_node(name)
    if "nodepools" in served:
        for pool in _list(objects, "nodepools"):
            delete_if_present(objects.delete_cluster_custom_object, GROUP, VERSION, "nodepools",
                              pool["metadata"]["name"])
    if "kwoknodeclasses" in served:
        delete_if_present(objects.delete_cluster_custom_object, KWOK_GROUP, KWOK_VERSION, "kwoknodeclasses",
                          NODE_CLASS)


@contextlib.contextmanager
def _ignore_not_found() -> Iterator[None]:
    try:
        yield
    except ApiException as e:
        if e.status != 404:
            raise


def _list(objects: kubernetes.client.CustomObjectsApi, plural: str) -> list[dict[str, Any]]:
    return list(as_json(objects.list_cluster_custom_object(GROUP, VERSION, plural))["items"])


def _kwok_nodes(core: kubernetes.client.CoreV1Api) -> list[dict[str, Any]]:
    key, value = KWOK_NODE_LABEL
    return list(response_json(core.list_node(label_selector=f"{key}={value}", _preload_content=False))["items"])
