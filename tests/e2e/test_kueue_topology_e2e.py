"""Beside Kueue's Topology Aware Scheduling (TAS), with the real Kueue (tests/e2e/kueue.py) on the local control plane:
a class Job whose pod template carries Kueue's kueue.x-k8s.io/podset-required-topology has its NVLink domain chosen
by Kueue alone; gpu-class writes no topology of its own for it, and says so when the Job asked gpu-class for one too
(docs/users/groups.md, "Beside Kueue's Topology Aware Scheduling").

Two GB200 NVL72 racks as GPU Feature Discovery labels them (nvidia.com/gpu.clique), 4 trays x 4 GPUs each here;
rack 1 has 2 trays taken by Pods Kueue does not manage, so only rack 2 holds a Job of 4 Pods x 4 GPUs. Kueue reads
the racks through a Topology (levels nvidia.com/gpu.clique, then kubernetes.io/hostname) named by the ResourceFlavor
of the GB200 trays. Kueue v0.19.2 (TopologyAwareScheduling beta, on by default) reads the podset annotation from the
Job's template into the Workload's topology request (jobframework.NewPodSetTopologyRequest), assigns a domain at
admission, starts the Job with its scheduling gate kueue.x-k8s.io/topology on the Pods, and its topology ungater
lifts the gate of each Pod with a nodeSelector of the assigned node (pkg/controller/tas/topology_ungater.go).
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from typing import Any, Iterator

import kubernetes
import pytest

import local_cluster
from kubeobjects import (TYPES, create_node, delete_nodes, fixture_labels, make_namespace, make_pod,
                         other_gpu_nodes_cordoned, wait_for, webhook_metrics)
from kueue import (GROUP, QUEUE_LABEL, VERSION, Kueue, cluster_queue, has_condition, is_admitted, local_queue,
                   running_kueue)

KUEUE_LABEL = ("gpu-class.io/e2e-kueue-tas", "enabled")
SUFFIX = uuid.uuid4().hex[:6]
CLIQUE, HOSTNAME, PRODUCT = "nvidia.com/gpu.clique", "kubernetes.io/hostname", "nvidia.com/gpu.product"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GPU_CLASS_REQUIRED = "gpu-class.io/group-required-topology"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
RACK_1, RACK_2 = f"7e2d0b4a-{SUFFIX}.1", f"7e2d0b4a-{SUFFIX}.2"
TRAYS = 4  # per rack
GPUS = 4  # per tray, and per Pod
PODS = 4
TAKEN_ON_RACK_1 = 2
# a GB200 compute tray's labels as published (tests/fixtures/SOURCES.md), each rack's clique in place of its own
TRAY_LABELS = fixture_labels("nvidia-gb200_oke-bm-gpu-gb200-4_clique_EXCERPT.yaml")
NODES = {f"e2e-tas-{rack.rsplit('.', 1)[1]}-{SUFFIX}-{i}": rack for rack in (RACK_1, RACK_2) for i in range(TRAYS)}
FLAVOR, TOPOLOGY, QUEUE = f"e2e-gb200-{SUFFIX}", f"e2e-nvl72-{SUFFIX}", "gb200"
WARNING = re.compile(r'\d+ \S+ "(.*)"')  # RFC 7234, as the API server passes admission warnings on


@pytest.fixture(scope="module")
def kueue(cluster: local_cluster.Cluster) -> Iterator[Kueue]:
    with running_kueue(cluster, namespace_label=KUEUE_LABEL) as running:
        yield running


@pytest.fixture(scope="module")
def racks(core: kubernetes.client.CoreV1Api, kueue: Kueue) -> Iterator[None]:
    """The racks, nothing else with room, two trays of rack 1 taken; Kueue's Topology, flavor and ClusterQueue."""
    fill = make_namespace(core, "e2e-tas-fill")
    with other_gpu_nodes_cordoned(core):
        for name, rack in NODES.items():
            create_node(core, name, {**TRAY_LABELS, CLIQUE: rack}, gpus=GPUS)
        for name in [n for n, rack in NODES.items() if rack == RACK_1][:TAKEN_ON_RACK_1]:
            taken = make_pod(f"take-{name}", gpus=GPUS)
            taken["spec"].update(nodeName=name, tolerations=[{"operator": "Exists"}])
            core.create_namespaced_pod(fill, taken)  # type: ignore[arg-type]  # (it takes the JSON form too)
        try:
            kueue.apply({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": TOPOLOGY},
                         "spec": {"levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": HOSTNAME}]}})
            kueue.apply({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
                         "spec": {"nodeLabels": {PRODUCT: TRAY_LABELS[PRODUCT]}, "topologyName": TOPOLOGY}})
            kueue.apply(cluster_queue(FLAVOR, flavor=FLAVOR, nominal_quota={"nvidia.com/gpu": len(NODES) * GPUS}))
            wait_for(f"ClusterQueue {FLAVOR} active", lambda: kueue.is_active("clusterqueues", FLAVOR), seconds=60)
            yield
        finally:
            delete_nodes(core, list(NODES))
            core.delete_namespace(fill)


@pytest.fixture
def queued_namespace(core: kubernetes.client.CoreV1Api, kueue: Kueue, racks: None) -> Iterator[str]:
    """Opted in to gpu-class and managed by Kueue, with a LocalQueue on the GB200 ClusterQueue."""
    name = make_namespace(core, "e2e-tas", labels={"gpu-class.io/inject": "enabled", KUEUE_LABEL[0]: KUEUE_LABEL[1]})
    kueue.apply(local_queue(name, QUEUE, cluster_queue_name=FLAVOR))
    wait_for(f"LocalQueue {QUEUE} active", lambda: has_condition(kueue.get("localqueues", QUEUE, name) or {}, "Active"),
             seconds=30)
    yield name
    batch = kubernetes.client.BatchV1Api(core.api_client)
    batch.delete_collection_namespaced_job(name, propagation_policy="Background")
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    # the next test's Job needs rack 2 whole: Kueue frees its quota and domain once the Workload is gone
    wait_for(f"the Workloads of {name} gone", lambda: not kueue.workloads(name), seconds=60)
    core.delete_namespace(name)


def job(name: str, *, also_gpu_class_s: bool) -> dict[str, Any]:
    """An Indexed Job of PODS Pods x GPUS GPUs of class high, one group, its domain asked of Kueue's TAS (and of
    gpu-class too when `also_gpu_class_s`)."""
    annotations = {"gpu-class.io/class": "high", "gpu-class.io/group": name, "gpu-class.io/group-size": str(PODS),
                   KUEUE_REQUIRED: CLIQUE, **({GPU_CLASS_REQUIRED: CLIQUE} if also_gpu_class_s else {})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {QUEUE_LABEL: QUEUE}},
            "spec": {"completionMode": "Indexed", "completions": PODS, "parallelism": PODS, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": annotations}, "spec": {
                         "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         # nothing runs (no kubelets): the image is only a name
                         "containers": [{"name": "main", "image": "registry.example/train:1",
                                         "resources": {"limits": {"nvidia.com/gpu": str(GPUS)}}}]}}}}


def create_job(batch: kubernetes.client.BatchV1Api, namespace: str, body: dict[str, Any]) -> tuple[dict[str, Any],
                                                                                                  list[str]]:
    """The Job as stored, and the warnings its admission answered with."""
    response: Any = batch.create_namespaced_job(namespace, body, _preload_content=False)  # type: ignore[arg-type]
    warnings = [m.group(1) for w in response.headers.getlist("Warning") if (m := WARNING.fullmatch(w))]
    return json.loads(response.data), warnings


def topology_terms(spec: dict[str, Any]) -> list[Any]:
    """Every term of the Pod's (or template's) affinity that names the clique: gpu-class's way to keep a domain."""
    affinity = spec.get("affinity") or {}
    node_terms = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
                  ).get("nodeSelectorTerms") or []
    found: list[Any] = [e for t in node_terms for e in t.get("matchExpressions") or [] if e["key"] == CLIQUE]
    for kind in ("podAffinity", "podAntiAffinity"):
        pod = affinity.get(kind) or {}
        found += [t for t in pod.get("requiredDuringSchedulingIgnoredDuringExecution") or []
                  if t["topologyKey"] == CLIQUE]
        found += [t for t in pod.get("preferredDuringSchedulingIgnoredDuringExecution") or []
                  if t["podAffinityTerm"]["topologyKey"] == CLIQUE]
    return found


def job_pods(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> list[dict[str, Any]]:
    response: Any = core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={name}",
                                             _preload_content=False)
    return list(json.loads(response.data)["items"])


def kueue_kept_series(cluster: local_cluster.Cluster) -> dict[str, float]:
    """gpu_class_group_topology_pods_total of class high by mode, outcome started, as the webhook serves it."""
    found = re.findall(r'^gpu_class_group_topology_pods_total\{(?=[^}]*class="high")(?=[^}]*outcome="started")'
                       r'[^}]*mode="(\w+)"[^}]*\} (\S+)$', webhook_metrics(cluster), re.M)
    return {mode: float(value) for mode, value in found}


@pytest.mark.parametrize("also_gpu_class_s", [False, True], ids=["kueue-s-alone", "gpu-class-s-too"])
def test_kueue_tas_chooses_the_domain_and_gpu_class_keeps_none(
        cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient, core: kubernetes.client.CoreV1Api,
        kueue: Kueue, queued_namespace: str, also_gpu_class_s: bool) -> None:
    ns, name = queued_namespace, f"tas-{SUFFIX}"
    batch = kubernetes.client.BatchV1Api(api_client)
    before = kueue_kept_series(cluster)
    stored, warnings = create_job(batch, ns, job(name, also_gpu_class_s=also_gpu_class_s))

    # gpu-class decided the Job at its template (Kueue counts it there), with no topology term of its own
    template = stored["spec"]["template"]
    assert template["metadata"]["annotations"][TYPES], template
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": str(GPUS)}
    assert topology_terms(template["spec"]) == []
    ignored = [w for w in warnings if GPU_CLASS_REQUIRED in w]
    assert ignored == ([f"gpu-class: {GPU_CLASS_REQUIRED} ignored: Kueue's Topology Aware Scheduling places it"]
                       if also_gpu_class_s else []), warnings
    after = kueue_kept_series(cluster)
    assert after["kueue"] > before["kueue"] and after["required"] == before["required"], (before, after)

    # Kueue admits it with a topology assignment of its own
    workload = wait_for(f"the Workload of {name} admitted", lambda: next(
        (w for w in [kueue.workload_of(ns, "Job", name)] if w and is_admitted(w)), None), seconds=90)
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["topologyAssignment"], assignment
    assert workload["spec"]["podSets"][0]["topologyRequest"]["required"] == CLIQUE

    def bound() -> list[dict[str, Any]] | None:
        pods = job_pods(core, ns, name)
        return pods if len(pods) == PODS and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(f"the {PODS} Pods of {name} bound", bound, seconds=120)
    # Kueue started the Job with its Pods gated, each to be let go onto the node of Kueue's choice
    started: Any = batch.read_namespaced_job(name, ns).spec
    gates = started.template.spec.scheduling_gates or []
    assert TOPOLOGY_GATE in [g.name for g in gates], gates
    # all in one rack, the one with room for all of it, each on the node Kueue's ungater named
    assert Counter(NODES[p["spec"]["nodeName"]] for p in pods) == {RACK_2: PODS}
    for p in pods:
        assert p["spec"]["nodeSelector"][HOSTNAME] == p["spec"]["nodeName"], p["spec"]["nodeSelector"]
        assert TOPOLOGY_GATE not in [g["name"] for g in p["spec"].get("schedulingGates") or []]
        assert topology_terms(p["spec"]) == [], p["spec"]["affinity"]
