"""gpu-class with a real Karpenter (tests/e2e/karpenter.py, KWOK provider) on the local control plane: GPU
pools at zero nodes grow in the class's order (docs/users/scale-to-zero.md).

The first test installs Karpenter's NodePool kind while gpu-class runs, before Karpenter runs. The `karpenter`
fixture then starts Karpenter once for the module. The next test keeps gpu-class out (its
namespace carries no opt-in label) and writes its Pod by hand: it proves that Karpenter, given a GPU
pool per product, creates a node of the pool the Pod's product asks for, that the kubelet stand-in
makes the node Ready, and that the scheduler binds the Pod there. The others run Pods that carry only
the class.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

import kubernetes
import pytest

import local_cluster
from karpenter import (A100, GROUP, H100, INSTANCE_TYPE_LABEL, ISOLATION_TAINT, NODEPOOL_CRD, NODEPOOL_LABEL,
                       PRODUCT_LABEL, T4, VERSION, Karpenter, has_condition, install_crds, karpenter_crds, node_pool,
                       remove_nodepool_crd, running_karpenter)
from karpenter import PROCESS as KARPENTER_PROCESS
from kubeobjects import (CLASS, GPU_TAINT, TYPES, admission_records, delete_if_present, dry_run_create,
                         force_delete_pods, make_namespace, make_pod, node_label, read_by_every_worker, read_pod,
                         wait_bound, wait_for)
from tools import gotools
from webhook.cluster.reflector import OFF_RECHECK_SECONDS
from webhook.core.catalog.loading import load_default_catalog



@pytest.fixture(scope="module")
def karpenter(cluster: local_cluster.Cluster) -> Iterator[Karpenter]:
    with running_karpenter(cluster) as running:
        yield running


def gpu_pod(name: str, *, product: str, pools: list[str]) -> dict[str, Any]:
    """One GPU for the default scheduler, on a node of `product` from one of `pools` (not on a session
    node of the same product), tolerating the pools' taints."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "tolerations": [
                {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"},
                {"key": ISOLATION_TAINT["key"], "operator": "Equal", "value": ISOLATION_TAINT["value"],
                 "effect": "NoSchedule"},
            ],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": [product]},
                                      {"key": NODEPOOL_LABEL, "operator": "In", "values": pools}]}]}}},
            # Nothing runs (no kubelets): the image is only a name.
            "containers": [{"name": "main", "image": "registry.example/cuda:12",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}}}],
        },
    }


def test_karpenter_installed_after_gpu_class_is_offered_by_its_herald(
        cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient,
        core: kubernetes.client.CoreV1Api) -> None:
    """Karpenter installed while gpu-class runs: once its NodePool CRD and a NodePool are created, class Pods
    are admitted with the pool because each worker watches that CRD by name, not at the minute a worker that found
    NodePools not served waits before it asks again (OFF_RECHECK_SECONDS; that took 44 s): every worker reads the
    pool before any of them could have asked again, which is an order of events, not a time a loaded machine can
    miss. First in the module and on none of its fixtures, so before the `karpenter` fixture
    starts Karpenter (whose informers a removed CRD would break): gpu-class reads NodePools whether or not
    Karpenter's controller runs. The pool offers H200, on none of the session's nodes and better than all of
    them, so class high's types start with it once the pool is read."""
    assert not cluster.is_running(KARPENTER_PROCESS), "Karpenter runs: its NodePool CRD cannot be taken away under it"
    # a worker finds NodePools not served after this, so asks again no earlier than a minute after it
    recheck_at = time.monotonic() + OFF_RECHECK_SECONDS
    remove_nodepool_crd(cluster, api_client)
    wait_for("a webhook worker to find NodePools not served",
             lambda: not read_by_every_worker(cluster, "nodepools"), seconds=90, interval=0.5)
    ns = make_namespace(core, "e2e-kp", labels={"gpu-class.io/inject": "enabled"})
    (crd,) = [c for c in karpenter_crds(gotools.karpenter_source()) if c["metadata"]["name"] == NODEPOOL_CRD]
    pool = {**node_pool("", "NVIDIA-H200", instance_types=["p5en.48xlarge"]), "metadata": {"name": f"{ns}-h200"}}
    objects = kubernetes.client.CustomObjectsApi(api_client)
    try:
        assert "H200" not in placed_types(core, ns).split(","), "no session node offers H200"
        installed = time.monotonic()
        install_crds(cluster, [crd])
        objects.create_cluster_custom_object(GROUP, VERSION, "nodepools", pool)
        created = time.monotonic()
        wait_for("every webhook worker to offer the pool's H200", lambda: read_by_every_worker(cluster, "nodepools")
                 and all(placed_types(core, ns).split(",")[0] == "H200" for _ in range(4)), seconds=70, interval=0.1)
        took = time.monotonic() - created
        print(f"\nKarpenter installed after gpu-class: a class Pod admitted with its NodePool {took:.2f} s after the "
              f"pool was created, {time.monotonic() - installed:.2f} s after the CRD was applied")
        assert time.monotonic() < recheck_at, "read no sooner than a worker's own recheck would have read it"
    finally:
        delete_if_present(objects.delete_cluster_custom_object, GROUP, VERSION, "nodepools", pool["metadata"]["name"])
        core.delete_namespace(ns)


def test_pending_gpu_pod_gets_a_node_from_the_pool_of_its_product(
        karpenter: Karpenter, core: kubernetes.client.CoreV1Api, plain_namespace: str) -> None:
    ns = plain_namespace
    h100_pool, a100_pool = f"{ns}-h100", f"{ns}-a100"
    karpenter.apply_node_pools(node_pool(h100_pool, H100, limits={"nvidia.com/gpu": 16}),
                               node_pool(a100_pool, A100, limits={"nvidia.com/gpu": 16}))
    try:
        assert karpenter.nodes(h100_pool) == [] and karpenter.nodes(a100_pool) == []

        pod = gpu_pod("trainer", product=H100, pools=[h100_pool, a100_pool])
        core.create_namespaced_pod(ns, pod)  # type: ignore[arg-type]  # (it takes the JSON form too)
        node = wait_bound(core, ns, "trainer", seconds=120)

        # The scheduler binds once the Node is Ready and untainted; Karpenter records it a moment later.
        claim = wait_for(f"the NodeClaim of {h100_pool} initialized",
                         lambda: next((c for c in karpenter.node_claims(h100_pool) if has_condition(c, "Initialized")),
                                      None))
        assert len(karpenter.node_claims(h100_pool)) == 1
        assert claim["status"]["nodeName"] == node
        assert claim["metadata"]["labels"][PRODUCT_LABEL] == H100
        assert claim["metadata"]["labels"][INSTANCE_TYPE_LABEL] == "p5.48xlarge"
        assert node_label(core, node, PRODUCT_LABEL) == H100
        assert karpenter.node_claims(a100_pool) == []
        wait_for(f"NodePool {h100_pool} counting the node's 8 GPUs",
                 lambda: karpenter.pool_resources(h100_pool).get("nvidia.com/gpu") == "8")
    finally:
        force_delete_pods(core, ns)
        karpenter.delete_node_pools(h100_pool, a100_pool)
    assert karpenter.nodes() == [] and karpenter.node_claims() == []


# --- gpu-class with Karpenter -----------------------------------------------------------------------
# Pods of class `high` as users write them (the class, a count, the strict scheduler) in an opted-in
# namespace; NodePools of the harness (H100 and A100, in class high, and T4, outside it) at zero nodes.
# The session's shared GPU nodes are cordoned for the module, so no node exists that could take a Pod:
# every bind goes through a node Karpenter creates.

STRICT = "gpu-class-scheduler"


# What the node lifecycle controller puts on a cordoned Node; it is off here (no kubelets), and Karpenter
# reads a cordon from this taint alone: without it Karpenter counts on the node and creates none.
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def no_schedulable_gpu_nodes(core: kubernetes.client.CoreV1Api, karpenter: Karpenter) -> Iterator[None]:
    """The session's GPU nodes cordoned, as a cluster cordons them, for the module; as they were afterwards."""
    wire = kubernetes.client.ApiClient().sanitize_for_serialization
    taints = {n.metadata.name: wire(n.spec.taints or []) for n in core.list_node().items
              if PRODUCT_LABEL in (n.metadata.labels or {}) and not (n.spec and n.spec.unschedulable)}
    for name, before in taints.items():
        core.patch_node(name, {"spec": {"unschedulable": True, "taints": [*before, UNSCHEDULABLE_TAINT]}})
    yield
    for name, before in taints.items():
        core.patch_node(name, {"spec": {"unschedulable": False, "taints": before or None}})


@pytest.fixture
def class_namespace(core: kubernetes.client.CoreV1Api, apps: kubernetes.client.AppsV1Api,
                    batch: kubernetes.client.BatchV1Api, no_schedulable_gpu_nodes: None) -> Iterator[str]:
    name = make_namespace(core, "e2e-kp", labels={"gpu-class.io/inject": "enabled"})
    yield name
    apps.delete_collection_namespaced_deployment(name)
    batch.delete_collection_namespaced_job(name, propagation_policy="Background")
    force_delete_pods(core, name)
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def apps(api_client: kubernetes.client.ApiClient) -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(api_client)


@pytest.fixture(scope="module")
def batch(api_client: kubernetes.client.ApiClient) -> kubernetes.client.BatchV1Api:
    return kubernetes.client.BatchV1Api(api_client)


ISOLATED = {"key": ISOLATION_TAINT["key"], "operator": "Exists"}


def class_pod(name: str, *, gpus: int = 1, scheduler: str | None = STRICT) -> dict[str, Any]:
    """A class `high` Pod that tolerates the harness's pools' own taint: gpu-class tolerates only the GPU
    taint, so the pools are offered only to Pods that tolerate the rest themselves."""
    pod = make_pod(name, gpu_class="high", gpus=gpus, scheduler=scheduler)
    pod["spec"]["tolerations"] = [dict(ISOLATED)]
    return pod


def placed_types(core: kubernetes.client.CoreV1Api, namespace: str, gpus: int = 1) -> str:
    """gpu-class.io/types of a class `high` Pod as gpu-class would place it now, or its refusal."""
    try:
        pod = dry_run_create(core, namespace, class_pod("probe", gpus=gpus))
    except kubernetes.client.exceptions.ApiException as e:
        return f"refused: {e.body}"
    return str((pod["metadata"].get("annotations") or {}).get(TYPES))


def sees_pools(karpenter: Karpenter, core: kubernetes.client.CoreV1Api, namespace: str, types: str) -> None:
    """Until every gunicorn worker of gpu-class reads NodePools (each hears of Karpenter's CRD by its own watch;
    an answer reaches one worker only, and the API server may send every probe to the same one), then until its
    answers place class high on the pools' types."""
    wait_for("every webhook worker reading NodePools",
             lambda: read_by_every_worker(karpenter.cluster, "nodepools"), seconds=90, interval=1.0)
    wait_for(f"gpu-class to place class high on {types}",
             lambda: all(placed_types(core, namespace) == types for _ in range(4)), seconds=30, interval=0.5)


@contextlib.contextmanager
def class_pools(karpenter: Karpenter, core: kubernetes.client.CoreV1Api, namespace: str,
                **pools: dict[str, Any]) -> Iterator[dict[str, str]]:
    """NodePools named after the test's namespace (`h100=node_pool(...)` is pool NAMESPACE-h100), seen by
    gpu-class as class high's H100 and A100-40GB pools; afterwards the Pods go, then the pools and nodes."""
    names = {key: f"{namespace}-{key}" for key in pools}
    karpenter.apply_node_pools(*({**pool, "metadata": {"name": names[key]}} for key, pool in pools.items()))
    try:
        sees_pools(karpenter, core, namespace, "H100,A100-40GB")
        yield names
    finally:
        force_delete_pods(core, namespace)
        karpenter.delete_node_pools(*names.values())


def template(name: str, *, gpus: int, group: str | None = None) -> dict[str, Any]:
    annotations = {CLASS: "high", "gpu-class.io/count": str(gpus), **({"gpu-class.io/group": group} if group else {})}
    return {"metadata": {"labels": {"app": name}, "annotations": annotations},
            "spec": {"schedulerName": STRICT, "terminationGracePeriodSeconds": 0, "tolerations": [dict(ISOLATED)],
                     "containers": [{"name": "main", "image": "registry.example/cuda:12"}]}}


def bound_pods(core: kubernetes.client.CoreV1Api, namespace: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items
            if p.spec.node_name and p.metadata.deletion_timestamp is None}


def test_class_pods_at_zero_nodes_grow_the_best_types_pool_and_bind_there(
        karpenter: Karpenter, core: kubernetes.client.CoreV1Api, apps: kubernetes.client.AppsV1Api,
        batch: kubernetes.client.BatchV1Api, class_namespace: str) -> None:
    ns = class_namespace
    assert not any(t.scalable for t in load_default_catalog().types.values()), "no type needs the flag"
    with class_pools(karpenter, core, ns, h100=node_pool("", H100, limits={"nvidia.com/gpu": 16}),
                     a100=node_pool("", A100, limits={"nvidia.com/gpu": 16}),
                     t4=node_pool("", T4, instance_types=["g4dn.12xlarge"])) as pools:
        created = time.monotonic()
        core.create_namespaced_pod(ns, class_pod("single"))
        pod = read_pod(core, ns, "single")
        # exactly the pools' values; of their taints the GPU's alone (the Pod tolerates the other itself)
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
            {"key": PRODUCT_LABEL, "operator": "In", "values": sorted([A100, H100])}]}]
        # (the API server's DefaultTolerationSeconds adds the node.kubernetes.io/ ones to every Pod)
        gpu_class_tolerations = [t for t in pod["spec"]["tolerations"] if not t["key"].startswith("node.kubernetes.io/")]
        assert sorted(gpu_class_tolerations, key=str) == sorted(
            [ISOLATED, {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}], key=str)
        node = wait_bound(core, ns, "single", seconds=180)
        print(f"\nclass high Pod at zero nodes, create to bind through a new H100 node: "
              f"{time.monotonic() - created:.1f} s ({STRICT})")
        apps.create_namespaced_deployment(ns, {"metadata": {"name": "serve"}, "spec": {
            "replicas": 2, "selector": {"matchLabels": {"app": "serve"}}, "template": template("serve", gpus=1)}})
        batch.create_namespaced_job(ns, {"metadata": {"name": "train"}, "spec": {
            "completions": 3, "parallelism": 3, "completionMode": "Indexed",
            "template": {**template("train", gpus=2, group="train"),
                         "spec": {**template("train", gpus=2)["spec"], "restartPolicy": "Never"}}}})
        try:
            bound = wait_for("the Deployment's and the Job's 5 Pods bound",
                             lambda: b if len(b := bound_pods(core, ns)) == 6 else None, seconds=180)
        except pytest.fail.Exception as e:
            decided = admission_records(karpenter.cluster.logs / "gpuclass.log", ns)
            pytest.fail(f"{e}\ngpu-class decided in {ns}:\n" + "\n".join(map(str, decided)), pytrace=False)
        h100_nodes = {n["metadata"]["name"] for n in karpenter.nodes(pools["h100"])}
        assert node in h100_nodes and set(bound.values()) <= h100_nodes, (bound, h100_nodes)
        assert karpenter.node_claims(pools["a100"]) == [] and karpenter.node_claims(pools["t4"]) == []
        # the controllers would make the Pods again while their pools go
        apps.delete_collection_namespaced_deployment(ns)
        batch.delete_collection_namespaced_job(ns, propagation_policy="Background")


# (8, 8): the H100 pool at its limit. (12, 4): 4 GPUs left, but its nodes (p5.48xlarge) carry 8, so
# Karpenter creates none even for a Pod of 4 (filterByRemainingResources). gpu-class still offers H100, for
# the node the first Pod holds (its 8 devices fit the Pod); that the pool is left out is tests/test_pools.py's.
@pytest.mark.parametrize("limit, second_gpus", [(8, 8), (12, 4)], ids=["at-its-limit", "4-left-nodes-of-8"])
def test_with_the_best_pool_at_its_limit_the_next_types_pool_grows(
        karpenter: Karpenter, core: kubernetes.client.CoreV1Api, class_namespace: str, limit: int,
        second_gpus: int) -> None:
    ns = class_namespace
    with class_pools(karpenter, core, ns, h100=node_pool("", H100, limits={"nvidia.com/gpu": limit}),
                     a100=node_pool("", A100, limits={"nvidia.com/gpu": 16})) as pools:
        core.create_namespaced_pod(ns, class_pod("first", gpus=8))
        first = wait_bound(core, ns, "first", seconds=180)
        assert node_label(core, first, NODEPOOL_LABEL) == pools["h100"]
        wait_for("the H100 pool's first node counted", lambda: karpenter.pool_resources(pools["h100"]).get(
            "nvidia.com/gpu") == "8")
        created = time.monotonic()
        core.create_namespaced_pod(ns, class_pod("second", gpus=second_gpus))
        second = wait_bound(core, ns, "second", seconds=180)
        print(f"\nclass high Pod, best pool at its limit, create to bind through a new A100 node: "
              f"{time.monotonic() - created:.1f} s ({STRICT})")
        assert node_label(core, second, NODEPOOL_LABEL) == pools["a100"]
        assert node_label(core, second, PRODUCT_LABEL) == A100
        assert len(karpenter.node_claims(pools["h100"])) == 1


def test_a_pool_capped_or_deleted_is_gone_at_the_next_admission(
        karpenter: Karpenter, core: kubernetes.client.CoreV1Api, class_namespace: str) -> None:
    ns = class_namespace
    with class_pools(karpenter, core, ns, h100=node_pool("", H100, limits={"nvidia.com/gpu": 16}),
                     a100=node_pool("", A100)) as pools:
        karpenter.apply_node_pools(node_pool(pools["h100"], H100, limits={"nvidia.com/gpu": 0}))
        wait_for("the capped H100 pool left out", lambda: placed_types(core, ns) == "A100-40GB", seconds=30)
        karpenter.delete_node_pools(pools["a100"])
        refusal = wait_for("no pool left: refused",
                           lambda: t if (t := placed_types(core, ns)).startswith("refused") else None, seconds=30)
        assert "no ready, schedulable node offers 1 GPU(s) of class high" in refusal
        assert karpenter.nodes() == []


@pytest.mark.parametrize("scheduler", [None, STRICT, "gpu-class-extender"],
                         ids=["default-scheduler", STRICT, "gpu-class-extender"])
def test_every_path_grows_the_best_types_pool(karpenter: Karpenter, core: kubernetes.client.CoreV1Api,
                                              class_namespace: str, scheduler: str | None) -> None:
    """Karpenter acts on a Pod any scheduler marked Unschedulable: on each path a class Pod at zero nodes
    binds on a new node of the best type's pool."""
    ns = class_namespace
    with class_pools(karpenter, core, ns, h100=node_pool("", H100), a100=node_pool("", A100)) as pools:
        created = time.monotonic()
        core.create_namespaced_pod(ns, class_pod("one", scheduler=scheduler))
        node = wait_bound(core, ns, "one", seconds=180)
        print(f"\nclass high Pod at zero nodes, create to bind through a new node: {time.monotonic() - created:.1f} s "
              f"({scheduler or 'default-scheduler'})")
        assert node_label(core, node, NODEPOOL_LABEL) == pools["h100"]
        assert karpenter.node_claims(pools["a100"]) == []


@contextlib.contextmanager
def nodes_ready_after(karpenter: Karpenter, seconds: float) -> Iterator[None]:
    """Karpenter's new Nodes reported Ready `seconds` after their creation, as machines take to boot and join."""
    karpenter.stand_in.ready_after_seconds = seconds
    try:
        yield
    finally:
        karpenter.stand_in.ready_after_seconds = 0.0


# (max-wait, the H100 pool's GPU limit, the pool the Pod binds on, the least and most seconds to bind)
WAITS = [
    pytest.param("2m", 16, "h100", 25.0, 150.0, id="waits-for-a-new-h100-node"),
    pytest.param("10s", 16, "a100", 10.0, 30.0, id="spent-before-the-h100-node-is-ready-binds-on-a100"),
    pytest.param("2m", 0, "a100", 0.0, 10.0, id="a-capped-h100-pool-is-not-waited-for"),
]


@pytest.mark.parametrize("max_wait, h100_limit, pool, least, most", WAITS)
def test_max_wait_with_the_best_pool_at_zero_and_an_a100_node_with_room(
        karpenter: Karpenter, core: kubernetes.client.CoreV1Api, class_namespace: str, max_wait: str,
        h100_limit: int, pool: str, least: float, most: float) -> None:
    ns = class_namespace
    with class_pools(karpenter, core, ns, h100=node_pool("", H100, limits={"nvidia.com/gpu": 16}),
                     a100=node_pool("", A100, limits={"nvidia.com/gpu": 16})) as pools:
        seed = class_pod("seed")  # an A100 node with 7 GPUs free: a Pod that cannot have H100 grows that pool
        seed["metadata"]["annotations"]["gpu-class.io/exclude-types"] = "H100"
        core.create_namespaced_pod(ns, seed)
        assert node_label(core, wait_bound(core, ns, "seed", seconds=180), NODEPOOL_LABEL) == pools["a100"]
        if h100_limit == 0:
            karpenter.apply_node_pools(node_pool(pools["h100"], H100, limits={"nvidia.com/gpu": 0}))
            wait_for("the capped H100 pool left out", lambda: placed_types(core, ns) == "A100-40GB", seconds=30)
        with nodes_ready_after(karpenter, 30.0):
            pod = class_pod("patient")
            pod["metadata"]["annotations"]["gpu-class.io/max-wait"] = max_wait
            created = time.monotonic()
            core.create_namespaced_pod(ns, pod)
            node = wait_bound(core, ns, "patient", seconds=most + 30)
            took = time.monotonic() - created
        print(f"\nmax-wait {max_wait}, H100 pool limit {h100_limit}: bound on {pool} after {took:.1f} s")
        assert node_label(core, node, NODEPOOL_LABEL) == pools[pool]
        assert least <= took <= most, f"bound after {took:.1f} s"
