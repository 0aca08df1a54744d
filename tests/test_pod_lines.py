"""The Pod watch's look at a raw line: which events it need not decode, on Pods as the API server writes them.

A false positive (decoding a line that could not matter) costs a decode; a false negative (skipping one
that could) loses an event. Every case that is skipped is also checked against the reducer itself.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.common.workload import put_in_served_order
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.view.pods import pod_gpu_requests, unbound_gpu_pod
from webhook.core.view.pod_lines import resource_needles, skipped_pod_event

CATALOG = load_default_catalog()
NEEDLES = resource_needles(CATALOG.resources)
UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
KEY = "shop/api-7d9c6b5f4-x2k8q"  # the served Pod's namespace/name
TS = "2026-12-05T08:00:00Z"


def served_pod(*, rv: str = "48151623", limits: dict[str, str] | None = None,
               node: str | None = "cpu-node-17", phase: str = "Running") -> dict[str, Any]:
    """A Deployment's Pod as a watch sends it: managedFields, an owner, env, probes, volumes, a status
    with conditions and container statuses; `limits` adds to the main container's."""
    container: dict[str, Any] = {
        "name": "api", "image": "registry.example/shop/api:4.2.1", "command": ["/bin/sh", "-c", "exec api --port 8080"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_IP", "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": "status.podIP"}}}],
        "resources": {"limits": {"memory": "1Gi", **(limits or {})}, "requests": {"cpu": "250m", "memory": "512Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    pod: dict[str, Any] = {
        "metadata": {
            "name": "api-7d9c6b5f4-x2k8q", "generateName": "api-7d9c6b5f4-", "namespace": "shop", "uid": UID,
            "resourceVersion": rv, "creationTimestamp": TS,
            "labels": {"app": "api", "pod-template-hash": "7d9c6b5f4"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": TS},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "api-7d9c6b5f4",
                                 "uid": "5c1f7a2e-8d4b-4f0e-9a51-3b2c6d7e8f90", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": TS, "fieldsType": "FieldsV1", "fieldsV1": {
                                   "f:spec": {"f:containers": {'k:{"name":"api"}': {".": {}, "f:image": {}}}}}}],
        },
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "containers": [container], "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst", "serviceAccountName": "api", "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": phase, "qosClass": "Burstable"},
        "apiVersion": "v1", "kind": "Pod",
    }
    if node is not None:
        pod["spec"]["nodeName"] = node
        pod["status"].update(hostIP="10.0.3.17", podIP="100.64.3.9", startTime=TS, conditions=[
            {"type": t, "status": "True", "lastTransitionTime": TS} for t in ("Initialized", "Ready", "PodScheduled")
        ], containerStatuses=[{"name": "api", "ready": True, "restartCount": 0, "image": "registry.example/shop/api:4.2.1",
                               "imageID": "registry.example/shop/api@sha256:" + "ab" * 32,
                               "containerID": "containerd://" + "cd" * 32, "started": True,
                               "state": {"running": {"startedAt": TS}}}])
    return put_in_served_order(pod)


def line(kind: str, obj: dict[str, Any]) -> bytes:
    """One watch line, as the API server writes it: compact JSON, the event's type first."""
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


def with_(pod: dict[str, Any], change: Any) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    change(pod)
    return pod


def gpu_pod(**kwargs: Any) -> dict[str, Any]:
    return served_pod(limits={"nvidia.com/gpu": "2"}, **kwargs)


BOOKMARK = b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"48151700",' \
           b'"annotations":{"k8s.io/initial-events-end":"true"}}}}'
EXPIRED = (b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
           b'"message":"too old resource version: 1 (48151623)","reason":"Expired","code":410}}')
CASES = [
    # (line, uids the view holds, the resourceVersion to resume from when skipped; None: decoded)
    pytest.param(line("MODIFIED", served_pod()), set(), "48151623", id="cpu-pod-status-update-skipped"),
    pytest.param(line("ADDED", served_pod(node=None, phase="Pending")), set(), "48151623", id="cpu-pod-created-skipped"),
    pytest.param(line("DELETED", served_pod()), set(), "48151623", id="cpu-pod-deleted-skipped"),
    pytest.param(line("MODIFIED", served_pod()), {"shop/api-7d9c6b5f4-other", "web/api-7d9c6b5f4-x2k8q"}, "48151623",
                 id="other-pods-held-skipped"),
    pytest.param(line("MODIFIED", gpu_pod()), set(), None, id="gpu-pod-decoded"),
    pytest.param(line("ADDED", gpu_pod(node=None, phase="Pending")), set(), None, id="pending-gpu-pod-decoded"),
    pytest.param(line("MODIFIED", served_pod(limits={"nvidia.com/mig-1g.10gb": "1"})), set(), None,
                 id="mig-slice-decoded"),
    pytest.param(line("MODIFIED", served_pod(limits={"amd.com/gpu": "1"})), set(), None, id="other-vendor-decoded"),
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["spec"].update(initContainers=[{
        "name": "warm", "image": "registry.example/warm:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]))),
        set(), None, id="gpu-in-init-container-decoded"),
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["spec"]["containers"][0]["resources"].update(
        requests={"nvidia.com/gpu": "1"}))), set(), None, id="gpu-in-requests-decoded"),
    # a Pod the view holds: decoded whatever the line says, the API's checks notwithstanding
    pytest.param(line("DELETED", gpu_pod()), {KEY}, None, id="held-pod-deleted-decoded"),
    pytest.param(line("DELETED", served_pod()), {KEY}, None, id="held-pod-without-gpu-in-its-line-decoded"),
    pytest.param(line("MODIFIED", served_pod(phase="Succeeded")), {KEY}, None, id="held-pod-finished-decoded"),
    # the name of a GPU resource where the reducer does not look: decoded where it follows a quote (a false
    # positive: one decode), skipped in running text
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["spec"]["containers"][0]["env"].append(
        {"name": "RESOURCE", "value": "nvidia.com/gpu"}))), set(), None, id="gpu-name-as-env-value-decoded"),
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["spec"].update(
        nodeSelector={"nvidia.com/gpu.present": "false"}))), set(), None, id="gpu-domain-label-decoded"),
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["metadata"]["annotations"].update(
        note="runs beside nvidia.com/gpu jobs"))), set(), "48151623", id="gpu-name-in-annotation-text-skipped"),
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["metadata"]["annotations"].update({
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"limits": {"nvidia.com/gpu": "1"}})}))),
        set(), None, id="gpu-name-in-json-inside-an-annotation-decoded"),
    # DRA claims of its own: gpu-class refuses such a Pod, and the devices they hold are counted from the
    # ResourceClaims' watch, not from the Pod
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["spec"].update(
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]))), set(), "48151623",
        id="dra-claim-only-skipped"),
    # not what the fast path knows: decoded
    pytest.param(BOOKMARK, set(), None, id="bookmark-decoded"),
    pytest.param(EXPIRED, set(), None, id="error-decoded"),
    pytest.param(json.dumps({"type": "MODIFIED", "object": {**served_pod(), "kind": "Pod"}}).encode(), set(), None,
                 id="not-compact-decoded"),
    pytest.param(line("MODIFIED", {"apiVersion": "v1", **served_pod()}), set(), None, id="other-key-order-decoded"),
    pytest.param(line("MODIFIED", served_pod()).replace(UID.encode(), b"0a1b\\u0032c3d"), set(), None,
                 id="escaped-uid-decoded"),
    pytest.param(line("MODIFIED", with_(served_pod(), lambda p: p["metadata"].pop("uid"))), set(), None,
                 id="no-uid-decoded"),
    pytest.param(line("MODIFIED", served_pod()).replace(b"x2k8q", b"x2k8\xff"), set(), None,
                 id="name-not-utf-8-decoded"),
]


def holds(pod: dict[str, Any]) -> bool:
    """Whether the reducer keeps the Pod in the view: bound with GPUs, or a known unbound GPU Pod."""
    node, gpus = pod_gpu_requests(pod, CATALOG.resources)
    return bool(node and gpus) or unbound_gpu_pod(pod, CATALOG.resources) is not None


@pytest.mark.parametrize("raw, held, expected", CASES)
def test_skipped_pod_event(raw: bytes, held: set[str], expected: str | None) -> None:
    assert skipped_pod_event(raw, NEEDLES, held) == expected
    if expected is not None:  # never a line the reducer would keep, nor one of a Pod the view holds
        event = json.loads(raw)
        assert event["type"] in ("ADDED", "MODIFIED", "DELETED") and not holds(event["object"])
        meta = event["object"]["metadata"]
        assert f"{meta['namespace']}/{meta['name']}" not in held
        assert event["object"]["metadata"]["resourceVersion"] == expected


@pytest.mark.parametrize("resources, expected", [
    pytest.param(CATALOG.resources, (b'"nvidia.com/', b'"amd.com/'), id="one-per-domain"),
    pytest.param(("example.com/gpu", "gpu", "example.com/mig-1g"), (b'"example.com/', b'"gpu"'),
                 id="a-name-without-domain-whole"),
    pytest.param((), (), id="none"),
])
def test_resource_needles(resources: tuple[str, ...], expected: tuple[bytes, ...]) -> None:
    assert resource_needles(resources) == expected


def test_a_catalog_without_a_domain_still_finds_its_resource() -> None:
    needles = resource_needles(("gpu",))
    assert skipped_pod_event(line("MODIFIED", served_pod(limits={"gpu": "1"})), needles, set()) is None
    assert skipped_pod_event(line("MODIFIED", served_pod(limits={"gpus": "1"})), needles, set()) == "48151623"


OTHER_RESOURCES = ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "example.com/fpga", "nvidia.com.evil/gpu",
                   "intel.com/gpu", "gpu"]
quantities = st.sampled_from(["0", "1", "2", "8", "500m", "1Gi"])
resource_maps = st.dictionaries(st.sampled_from(list(CATALOG.resources) + OTHER_RESOURCES), quantities, max_size=3)
containers = st.lists(st.fixed_dictionaries({"limits": resource_maps, "requests": resource_maps}), max_size=3)


@settings(max_examples=300, deadline=None)
@given(app=containers.filter(bool), init=containers, node=st.sampled_from([None, "n1"]),
       phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
       kind=st.sampled_from(["ADDED", "MODIFIED", "DELETED"]))
def test_no_pod_the_reducer_keeps_is_ever_skipped(app: list[dict[str, Any]], init: list[dict[str, Any]],
                                                  node: str | None, phase: str, kind: str) -> None:
    pod = served_pod(node=node, phase=phase)
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [{**template, "name": f"c{i}", "resources": r} for i, r in enumerate(app)]
    if init:
        pod["spec"]["initContainers"] = [{**template, "name": f"i{i}", "resources": r} for i, r in enumerate(init)]
    if skipped_pod_event(line(kind, pod), NEEDLES, set()) is not None:
        assert not holds(pod)
