"""Pods created through the real API server: stored as gpu-class patched them, bound by the real scheduler."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import kubernetes
import pytest
import yaml

import local_cluster
from fleet import FLEET, TYPE_OF
from kubeobjects import (TYPES, admission_records, dry_run_create, make_pod, pod_removals, read_pod, second_mutator,
                         wait_bound, wait_for)

pytestmark = pytest.mark.usefixtures("fleet")

HIGH_PRODUCTS = {"NVIDIA-H100-80GB-HBM3", "A100-SXM4-40GB"}  # the high class's types present in the fleet


def _required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def _product_values(term: dict[str, Any]) -> set[str]:
    return {v for e in term["matchExpressions"] if e["key"] == "nvidia.com/gpu.product" for v in e["values"]}


def test_class_pod_is_stored_patched_and_bound_to_the_best_type(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, make_pod("train", gpu_class="high", gpus=None))
    pod = read_pod(core, namespace, "train")

    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    [term] = _required_terms(pod)
    assert _product_values(term) == HIGH_PRODUCTS
    preferred = pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    weights = [p["weight"] for p in preferred]
    assert weights == sorted(weights, reverse=True) and weights[0] == 100
    assert _product_values(preferred[0]["preference"]) == {"NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    assert pod["metadata"]["annotations"][TYPES] == "H100,A100-40GB"

    node = wait_bound(core, namespace, "train")
    assert TYPE_OF[node] == "H100"


def test_users_own_affinity_is_intersected(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    zone_b = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}]}}}
    core.create_namespaced_pod(namespace, make_pod("zoned", gpu_class="high", affinity=zone_b))
    [term] = _required_terms(read_pod(core, namespace, "zoned"))
    assert {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]} in term["matchExpressions"]
    assert _product_values(term) == HIGH_PRODUCTS
    # zone-b holds the A100 and the T4; only the A100 is in the class.
    assert TYPE_OF[wait_bound(core, namespace, "zoned")] == "A100-40GB"


def test_count_only_some_nodes_hold(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, make_pod("four", gpu_class="high", gpus=4))
    # e2e-h100-small has 2 GPUs: the scheduler must pass it over for the 8-GPU H100.
    assert wait_bound(core, namespace, "four") == "e2e-h100-big"


def test_plain_gpu_pod_without_class_is_left_alone(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    stored = dry_run_create(core, namespace, make_pod("plain", gpus=1))
    assert TYPES not in (stored["metadata"].get("annotations") or {})
    assert "affinity" not in stored["spec"]


@pytest.mark.parametrize("pod, expected", [
    pytest.param(make_pod("unknown", gpu_class="fastest"), ["unknown class 'fastest'", "write one of: high, standard"],
                 id="unknown-class"),
    pytest.param(make_pod("huge", gpu_class="high", gpus=16),
                 ["no ready, schedulable node offers 16 GPU(s) of class high", "Present: "], id="impossible-count"),
])
def test_refusal_reaches_kubectl_apply(cluster: local_cluster.Cluster, namespace: str, pod: dict[str, Any],
                                       expected: list[str]) -> None:
    pod = {**pod, "metadata": {**pod["metadata"], "namespace": namespace}}
    proc = cluster.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(pod), check=False)
    assert proc.returncode != 0
    assert 'admission webhook "pods.gpu-class.io" denied the request: gpu-class:' in proc.stderr
    for text in expected:
        assert text in proc.stderr
    assert cluster.kubectl("-n", namespace, "get", "pods", "-o", "name").stdout == ""


def test_every_replica_of_a_deployment_is_patched_and_bound(api_client: kubernetes.client.ApiClient,
                                                            core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    pod = make_pod("x", gpu_class="high")
    template = {"metadata": {"labels": {"app": "trainer"}, "annotations": pod["metadata"]["annotations"]},
                "spec": {**pod["spec"], "restartPolicy": "Always"}}
    kubernetes.client.AppsV1Api(api_client).create_namespaced_deployment(namespace, {
        "metadata": {"name": "trainer"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "trainer"}}, "template": template},
    })

    def bound() -> list[dict[str, Any]] | None:
        pods = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for("3 replicas bound", bound, seconds=60)
    for p in pods:
        assert p["metadata"]["annotations"][TYPES] == "H100,A100-40GB"
        assert TYPE_OF[p["spec"]["nodeName"]] in ("H100", "A100-40GB")


def test_dry_run_is_answered_and_stores_nothing(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    stored = dry_run_create(core, namespace, make_pod("dry", gpu_class="high"))
    assert stored["metadata"]["annotations"][TYPES] == "H100,A100-40GB"
    assert _product_values(_required_terms(stored)[0]) == HIGH_PRODUCTS
    assert core.list_namespaced_pod(namespace).items == []


def test_fleet_matches_catalog_types() -> None:
    # The fleet's products are the built-in catalog's: a rename there must show up here, not as a
    # puzzling placement failure.
    out = subprocess.run([local_cluster.gpuclass_path(), "catalog"], capture_output=True, text=True, check=True).stdout
    catalog = yaml.safe_load(out)
    product_type = {p: t["name"] for t in catalog["types"] for p in t.get("products", [])}
    for n in FLEET:
        assert product_type[n.labels["nvidia.com/gpu.product"]] == n.gpu_type


def test_reinvocation_after_another_webhook_leaves_the_patch_as_it_was(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    """A second mutating webhook changes the Pod after gpu-class; the API server calls gpu-class again."""
    with second_mutator(cluster, namespace) as calls:
        core.create_namespaced_pod(namespace, make_pod("twice", gpu_class="high"))
        pod = read_pod(core, namespace, "twice")

        records = admission_records(cluster.logs / "gpuclass.log", namespace, "twice")
    reference = dry_run_create(core, namespace, make_pod("reference", gpu_class="high"))

    assert "twice" in calls
    assert pod["metadata"]["labels"]["second-mutator"] == "was-here"
    # gpu-class was called again (reinvocationPolicy: IfNeeded) and added nothing twice.
    assert [r["outcome"] for r in records] == ["patched", "patched"]
    for path in (("spec", "affinity"), ("spec", "tolerations"), ("metadata", "annotations")):
        assert _get(pod, path) == _get(reference, path)
    assert pod["spec"]["containers"][0]["resources"] == reference["spec"]["containers"][0]["resources"]


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) or {}
    return obj


def test_the_audit_log_names_who_deleted_a_pod(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api,
                                                namespace: str) -> None:
    """What a failed end-to-end test reports of the Pods taken while it ran (conftest's report hook)."""
    since = time.time()
    core.create_namespaced_pod(namespace, make_pod("gone", gpus=None))
    core.delete_namespaced_pod("gone", namespace, grace_period_seconds=0)
    removals = wait_for("the delete in the audit log", lambda: [
        r for r in pod_removals(cluster.audit_log.read_text(), since, time.time()) if f" {namespace}/gone:" in r])
    user = cluster.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
    assert [r.split(" ", 1)[1] for r in removals] == [f"{user} delete {namespace}/gone: 200"]
