"""The scheduler extender as the real kube-scheduler calls it (gpu-class-extender: the strict profiles with the
extender), and as others cannot: only the scheduler's client certificate is served, and only Pods the webhook's
watch has seen unbound leave anything behind."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import uuid
from pathlib import Path
from typing import Any

import kubernetes
import pytest

import local_cluster
from fleet import TYPE_OF
from kubeobjects import TYPES, make_pod, read_pod, wait_bound, wait_for

pytestmark = pytest.mark.usefixtures("fleet")


def _extender_records(cluster: local_cluster.Cluster, namespace: str) -> list[dict[str, Any]]:
    records = []
    for line in (cluster.logs / "gpuclass.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("msg") == "extender" and str(record.get("pod", "")).startswith(namespace + "/"):
                records.append(record)
    return records


EXTENDER = local_cluster.EXTENDER_SCHEDULER


def test_the_extender_scheduler_filters_through_the_extender(
        cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    names = [f"balanced-{i}" for i in range(4)]
    for name in names:
        core.create_namespaced_pod(namespace, make_pod(name, gpu_class="standard", scheduler=EXTENDER))
        wait_bound(core, namespace, name)  # one at a time, so each decision sees the last one's GPUs taken
    nodes = {name: read_pod(core, namespace, name)["spec"]["nodeName"] for name in names}
    types = read_pod(core, namespace, names[0])["metadata"]["annotations"][TYPES].split(",")

    assert set(types) == {"A100-40GB", "V100"}  # the standard class's types in the fleet
    assert all(TYPE_OF[node] in types for node in nodes.values()), nodes
    # balanced: the node with the largest share of its GPUs free once the Pod is placed: 7 of the
    # A100 node's 8 before 3 of the V100 node's 4
    assert TYPE_OF[nodes[names[0]]] == "A100-40GB"
    # and the Pod went to the balanced profile of the extender scheduler the Pod named
    assert read_pod(core, namespace, names[0])["spec"]["schedulerName"] == EXTENDER + "-balanced"

    core.create_namespaced_pod(namespace, make_pod("fast", gpu_class="high", scheduler=EXTENDER))
    assert TYPE_OF[wait_bound(core, namespace, "fast")] == "H100"

    records = _extender_records(cluster, namespace)
    calls = {(r["verb"], r["pod"].split("/", 1)[1]) for r in records}
    # filter for every Pod; no prioritize: the configuration has no prioritizeVerb (filter keeps only
    # the promised nodes, and the profile's own scores order them)
    assert calls == {("filter", name) for name in [*names, "fast"]}, calls
    # every call came over the extender's listener, with the scheduler's client certificate
    assert {r["caller"] for r in records} == {"gpu-class-scheduler"}
    # Each balanced Pod was sent to one node and counted there until its binding was seen: a Pod the
    # webhook's watch had brought (filter waits for it when the scheduler asks first, as it often does)
    filters = [r for r in records if r["verb"] == "filter"]
    assert [(r["assumed"], r["pod_known"]) for r in filters if r["pod"].split("/", 1)[1] in names] == [
        (nodes[n], True) for n in names], filters


def test_default_scheduler_pods_do_not_reach_the_extender(cluster: local_cluster.Cluster,
                                                          core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, make_pod("stock", gpu_class="standard"))
    assert TYPE_OF[wait_bound(core, namespace, "stock")] in ("A100-40GB", "V100")
    assert _extender_records(cluster, namespace) == []


# --- who may call ----------------------------------------------------------------------------------


def _post(cluster: local_cluster.Cluster, verb: str, pod: dict[str, Any], nodes: list[str], *,
          client: tuple[Path, Path] | None, port: int | None = None) -> tuple[int, Any]:
    """POST ExtenderArgs as kube-scheduler does (nodeCacheCapable), presenting `client` (cert, key) if given."""
    assert cluster.ports
    webhook_dir = cluster.dir / "webhook"
    context = ssl.create_default_context(cafile=str(webhook_dir / "ca.crt"))
    if client is not None:
        context.load_cert_chain(*client)
    conn = http.client.HTTPSConnection("127.0.0.1", port or cluster.ports.extender, context=context, timeout=10)
    try:
        conn.request("POST", f"/{verb}", body=json.dumps({"Pod": pod, "Nodes": None, "NodeNames": nodes}),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _scheduler_certificate(cluster: local_cluster.Cluster) -> tuple[Path, Path]:
    return cluster.dir / "webhook" / "client.crt", cluster.dir / "webhook" / "client.key"


def test_forged_filter_calls_change_no_genuine_answer(cluster: local_cluster.Cluster,
                                                      core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    """The attack of issue 26 on the real control plane: a genuine `filter` for a 1-GPU inference Pod,
    then a dozen for made-up Pods (fresh uids, one GPU each) sent with the scheduler's own certificate,
    then the genuine one again. Each made-up Pod used to be counted on the T4 node for 10 s, so the
    genuine Pod was left no node; now only Pods the watch has seen unbound are counted."""
    # waits for a scheduler that does not run: unbound for as long as the test needs
    core.create_namespaced_pod(namespace, make_pod("genuine", gpu_class="inference", scheduler="no-such-scheduler"))
    genuine = read_pod(core, namespace, "genuine")
    scheduler = _scheduler_certificate(cluster)

    def known() -> bool:
        _post(cluster, "filter", genuine, ["e2e-t4"], client=scheduler)
        return any(r.get("pod_known") for r in _extender_records(cluster, namespace) if r["verb"] == "filter")

    wait_for("the webhook's watch to know the Pod", known)
    status, first = _post(cluster, "filter", genuine, ["e2e-t4"], client=scheduler)
    assert status == 200 and first["NodeNames"] == ["e2e-t4"], first
    for _ in range(12):
        forged = json.loads(json.dumps(genuine))
        forged["metadata"].update(uid=str(uuid.uuid4()), name=f"forged-{uuid.uuid4().hex[:6]}")
        assert _post(cluster, "filter", forged, ["e2e-t4"], client=scheduler)[0] == 200
    assert _post(cluster, "filter", genuine, ["e2e-t4"], client=scheduler) == (200, first)
    forged_calls = [r for r in _extender_records(cluster, namespace) if r["pod"].startswith(f"{namespace}/forged-")]
    assert len(forged_calls) == 12 and not any(r["pod_known"] or r["assumed"] for r in forged_calls)


@pytest.mark.parametrize("where, status", [
    pytest.param("extender", 401, id="extender-port-without-a-certificate"),
    pytest.param("admission", 403, id="admission-port"),
])
def test_callers_without_the_schedulers_certificate_are_refused(cluster: local_cluster.Cluster, namespace: str,
                                                                where: str, status: int) -> None:
    assert cluster.ports
    pod = make_pod("forged", gpu_class="inference")
    pod["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()),
                           annotations={**pod["metadata"]["annotations"], TYPES: "T4"})
    port = cluster.ports.extender if where == "extender" else cluster.ports.webhook
    got, body = _post(cluster, "filter", pod, ["e2e-t4"], client=None, port=port)
    assert (got, body["error"]) == (status, "Unauthorized" if status == 401 else "Forbidden")
    assert _extender_records(cluster, namespace) == [], "refused before it was read"


def test_a_certificate_of_another_ca_is_refused_at_the_handshake(cluster: local_cluster.Cluster,
                                                                 tmp_path: Path) -> None:
    subprocess.run([local_cluster.gpuclass_path(), "certs", "--out", str(tmp_path), "--ip", "127.0.0.1"],
                                 check=True, capture_output=True)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _post(cluster, "filter", make_pod("forged"), ["e2e-t4"], client=(tmp_path / "client.crt", tmp_path / "client.key"))
