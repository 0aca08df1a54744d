"""Groups (gpu-class.io/group) on the real control plane: Indexed Jobs, the Job controller's burst, the
real default scheduler and gpu-class-scheduler. bench/groups/groups.py makes the pool and judges the groups."""

from __future__ import annotations

import subprocess
import uuid
from typing import Any, Iterator

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

import local_cluster
from bench.groups import groups
from bench.placement.placement import read_catalog
from bench.placement.placement_cluster import drop_namespace, make_namespace
from kubeobjects import make_pod, wait_for

GROUPS = 20  # in a row, per path
PATHS = ("default", "profiles")


@pytest.fixture(scope="module")
def results(cluster: local_cluster.Cluster) -> dict[str, list[groups.Result]]:
    run = groups.run_all(cluster, groups.make_groups(seed=5, count=GROUPS), paths=PATHS)
    return {path: [r for r in run if r.path == path] for path in PATHS}


@pytest.mark.parametrize("path", PATHS)
def test_no_group_runs_on_two_types(results: dict[str, list[groups.Result]], path: str) -> None:
    rs = results[path]
    assert len(rs) == GROUPS
    assert [(r.spec.name, r.products) for r in rs if r.mixed] == []
    assert all(sum(r.products.values()) + r.pending == r.spec.pods for r in rs)


@pytest.mark.parametrize("path", PATHS)
def test_a_sized_group_starts_whole_where_it_fits(results: dict[str, list[groups.Result]], path: str) -> None:
    rs = results[path]
    sized = [r for r in rs if r.spec.sized]
    assert [(r.spec, r.holding, r.products) for r in sized if r.stranded] == []
    for r in sized:
        assert r.types and set(r.types) <= set(r.holding), (r.spec, r.holding, r.types)
    # the run had groups the best type could hold and groups it could not: those went whole to the next type
    assert any(r.spilled_whole for r in sized) and any(r.types == [groups.BEST] for r in sized)


@pytest.mark.parametrize("path", PATHS)
def test_pods_left_pending_were_kept_off_the_other_types_by_the_affinity(
        results: dict[str, list[groups.Result]], path: str) -> None:
    """Only unsized groups leave Pods Pending: where the first one ran, when that type is full."""
    waiting = [r for r in results[path] if r.pending]
    assert waiting and all(not r.spec.sized for r in waiting)
    # The other types' nodes: refused by the node affinity the webhook wrote once the group ran, or by
    # the group's Pod affinity for Pods admitted in the burst before the first was bound. On
    # gpu-class-scheduler, NodeLabelIndex leaves the nodes that affinity does not name out before any
    # Filter runs, and the scheduler gives that as its reason for them.
    kept_off = ("didn't match",) + (("didn't satisfy plugin(s) [NodeLabelIndex]",) if path == "profiles" else ())
    for r in waiting:
        assert all(any(k in reason for k in kept_off) for reason in r.reasons), r.reasons


def test_the_strict_path_keeps_the_class_order_and_the_size(results: dict[str, list[groups.Result]]) -> None:
    assert [(r.spec, r.holding, r.first_room, r.products, r.pending)
            for r in results["profiles"] if not r.as_promised] == []


# --- a burst, explained; the spill of a whole group -----------------------------------------

@pytest.fixture
def pool(core: kubernetes.client.CoreV1Api) -> Iterator[str]:
    """The bench's pool, and a namespace (not opted in) for the Pods that fill its best type."""
    fill = make_namespace(core, "grp-fill", opted_in=False)
    groups.create_pool(core)
    yield fill
    drop_namespace(core, fill)
    groups.delete_pool(core)


def _explain(cluster: local_cluster.Cluster, namespace: str, pod: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([local_cluster.gpuclass_path(), "explain", f"pod/{pod}", "-n", namespace,
                           f"--kubeconfig={cluster.kubeconfig}"], capture_output=True, text=True, timeout=60)


def test_a_burst_waits_on_its_type_and_a_sized_one_spills_whole(
        cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api,
        namespace: str, pool: str) -> None:
    """8 Pods of 1 GPU while H200 has 4 free: without a size, 4 run on H200 and 4 wait there, never on
    H100-NVL; with a size, all 8 go to H100-NVL."""
    catalog = read_catalog()
    types = groups.class_types(catalog)
    groups.fill_best(core, pool, (1, 1, 2))
    state = groups.cluster_state(core, catalog)
    groups.wait_webhook_sees(cluster, namespace, {t: groups.rooms(state, types, 1)[t] for t in groups.POOL}, types)
    batch = kubernetes.client.BatchV1Api(api_client)
    burst = groups.GroupSpec("burst", 8, 1, sized=False, free_best=(1, 1, 2))
    batch.create_namespaced_job(namespace, groups.job_manifest(burst, local_cluster.STRICT_SCHEDULER))
    pods = groups.wait_settled(core, namespace, burst)
    bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}
    assert len(bound) == 4 and all(node.startswith("grp-h200-") for node in bound.values()), bound

    waiting = next(p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName"))
    explained = _explain(cluster, namespace, waiting)
    assert explained.returncode == 1, explained.stderr
    assert "group burst runs on H200 (nvidia.com/gpu.product=NVIDIA-H200), 4 Pod(s) bound" in explained.stdout
    assert "group burst runs on H200; no H200 node has 1 free GPU: the Pod waits for room there" in explained.stdout

    whole = groups.GroupSpec("whole", 8, 1, sized=True, free_best=(0, 0, 0))
    groups.wait_webhook_sees(cluster, namespace, {groups.BEST: 0, groups.NEXT: groups.rooms(state, types, 1)[groups.NEXT]},
                             types)
    batch.create_namespaced_job(namespace, groups.job_manifest(whole, local_cluster.STRICT_SCHEDULER))
    pods = groups.wait_settled(core, namespace, whole)
    assert all(p["spec"].get("nodeName", "").startswith("grp-h100nvl-") for p in pods), pods
    explained = _explain(cluster, namespace, pods[0]["metadata"]["name"])
    assert explained.returncode == 0, explained.stderr
    assert "group whole runs on H100-NVL (nvidia.com/gpu.product=NVIDIA-H100-NVL), 8 Pod(s) bound" in explained.stdout
    for job in ("burst", "whole"):
        batch.delete_namespaced_job(job, namespace, propagation_policy="Background")


# --- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("annotations, says", [
    pytest.param({"gpu-class.io/group": ""}, "gpu-class.io/group must be 1 to 63 letters", id="empty-name"),
    pytest.param({"gpu-class.io/group": "team/job"}, "not 'team/job'", id="malformed-name"),
    pytest.param({"gpu-class.io/group": "g", "gpu-class.io/group-size": "0"},
                 "gpu-class.io/group-size must be a positive whole number of Pods", id="size-zero"),
    pytest.param({"gpu-class.io/group": "g", "gpu-class.io/group-size": "many"}, "not 'many'", id="size-not-a-number"),
    pytest.param({"gpu-class.io/group-size": "4"}, "needs gpu-class.io/group", id="size-without-group"),
    pytest.param({"gpu-class.io/group": "g", "gpu-class.io/group-size": "5000"},
                 "group g of 5000 Pods x 1 GPU(s) can never run on one type of class high", id="never-fits"),
])
@pytest.mark.usefixtures("fleet")  # class high has nodes: the size is judged against them
def test_bad_groups_are_refused_with_what_to_write(core: kubernetes.client.CoreV1Api, namespace: str,
                                                   annotations: dict[str, str], says: str) -> None:
    pod = make_pod(f"bad-{uuid.uuid4().hex[:5]}", gpu_class="high", annotations=annotations)
    error: Any = wait_for("the refusal", lambda: _refusal(core, namespace, pod), seconds=30)
    assert error.status == 403 and says in error.body, error.body


def _refusal(core: kubernetes.client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> ApiException | None:
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as e:
        # the webhook has not yet read the fleet's nodes when the session's first test made them
        if not any(s in (e.body or "") for s in ("retry in a few seconds", "Present: no GPU nodes")):
            return e
    return None
