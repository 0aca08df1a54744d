"""Nodes, Pods and namespaces against the real API server, and waiting on what the cluster does with them."""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import json
import re
import ssl
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import local_cluster

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
CLASS = "gpu-class.io/class"
TYPES = "gpu-class.io/types"


@contextlib.contextmanager
def running_cluster(directory: Path, *, keep: bool = False) -> Iterator[Any]:
    """tests/e2e/local-cluster up in `directory` for a fixture: the test fails with the component's
    log tail when it does not start, and the cluster is stopped afterwards unless `keep`."""
    try:
        cluster = local_cluster.up(directory, log=lambda line: print(line, flush=True))
    except local_cluster.ClusterError as e:
        local_cluster.down(directory)
        pytest.fail(f"the local control plane did not come up: {e}", pytrace=False)
    try:
        yield cluster
    finally:
        if not keep:
            local_cluster.down(directory)


def wait_for(what: str, probe: Callable[[], Any], seconds: float = 30.0, interval: float = 0.2) -> Any:
    """Poll until probe() returns something truthy; fail naming what was awaited and the last value."""
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {seconds:.0f} s waiting for {what} (last: {last!r})", pytrace=False)


def make_namespace(core: kubernetes.client.CoreV1Api, prefix: str, *, labels: Mapping[str, str] | None = None,
                   annotations: Mapping[str, str] | None = None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": dict(labels or {}),
                                        "annotations": dict(annotations or {})}})
    # The ServiceAccount admission plugin refuses Pods until the controller
    # manager has made the namespace's default ServiceAccount.
    wait_for(f"default ServiceAccount in {name}",
             lambda: _exists(lambda: core.read_namespaced_service_account("default", name)))
    return name


def _exists(read: Callable[[], Any]) -> bool:
    try:
        read()
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


# --- Nodes without kubelets ---------------------------------------------------

def fixture_labels(file_name: str) -> dict[str, str]:
    """The GPU Feature Discovery labels of a real node, from tests/fixtures/nodes."""
    doc = yaml.safe_load((FIXTURES / "nodes" / file_name).read_text())
    return dict(doc["metadata"]["labels"])


def create_node(core: kubernetes.client.CoreV1Api, name: str, labels: Mapping[str, str], *,
                gpus: int = 0, resource: str = "nvidia.com/gpu", cpu: str = "64", memory: str = "512Gi",
                taints: Sequence[Mapping[str, str]] = (GPU_TAINT,), ready: bool = True,
                extra_allocatable: Mapping[str, str] | None = None) -> None:
    """A Node as the API holds it: labels and taints in the object, capacity and Ready in its status."""
    core.create_node({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **labels}},
    })
    # The API server's TaintNodesByCondition admission taints every new Node
    # not-ready; the node lifecycle controller (off here: no kubelets) would
    # lift it once the Node is Ready. Writing the taints takes its place.
    core.patch_node(name, {"spec": {"taints": [dict(t) for t in taints] if ready else
                                    [*map(dict, taints), NOT_READY_TAINT]}})
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **({resource: str(gpus)} if gpus else {}),
                   **(extra_allocatable or {})}
    set_node_status(core, name, allocatable=allocatable, ready=ready)


def set_node_status(core: kubernetes.client.CoreV1Api, name: str, *, allocatable: Mapping[str, str] | None = None,
                    ready: bool = True) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status: dict[str, Any] = {"conditions": [{
        "type": "Ready", "status": "True" if ready else "False", "reason": "E2E",
        "lastHeartbeatTime": now, "lastTransitionTime": now}]}
    if allocatable is not None:
        status["capacity"] = dict(allocatable)
        status["allocatable"] = dict(allocatable)
    core.patch_node_status(name, {"status": status})


def has_devices(node: kubernetes.client.V1Node) -> bool:
    """Whether the node offers an extended resource (a GPU or another device), as every GPU node does."""
    return any("/" in name and not name.startswith("hugepages-") for name in (node.status.allocatable or {}))


@contextlib.contextmanager
def other_gpu_nodes_cordoned(core: kubernetes.client.CoreV1Api) -> Iterator[None]:
    """Every GPU node that exists now cordoned while the block runs, then uncordoned: the webhook judges room on every
    node of a type, so a test whose Pods select its own nodes must not leave the session's shared ones with room."""
    cordoned = [n.metadata.name for n in core.list_node().items if has_devices(n) and not n.spec.unschedulable]
    for name in cordoned:
        core.patch_node(name, {"spec": {"unschedulable": True}})
    try:
        yield
    finally:
        for name in cordoned:
            with contextlib.suppress(ApiException):  # a node deleted meanwhile
                core.patch_node(name, {"spec": {"unschedulable": False}})


def webhook_free_gpus(cluster: Any, type_name: str) -> float | None:
    """Free GPUs of the type as the webhook's workers see them (the most any worker sees)."""
    found = re.search(rf'^gpu_class_inventory_free_gpus\{{(?=[^}}]*type="{re.escape(type_name)}")[^}}]*\}} (\S+)$',
                      webhook_metrics(cluster), re.M)
    return None if found is None else float(found.group(1))


def webhook_metrics(cluster: Any) -> str:
    context = ssl.create_default_context(cafile=str(cluster.dir / "webhook" / "ca.crt"))
    with urllib.request.urlopen(cluster.webhook_metrics_url, context=context, timeout=5) as r:
        return str(r.read().decode())


def expired_restarts(cluster: Any, resource: str) -> float:
    """How often the webhook's watch of `resource` listed again after 410 Gone, from its metrics."""
    pattern = (r'^gpu_class_watch_restarts_total\{(?=[^}]*reason="expired")'
               rf'(?=[^}}]*resource="{re.escape(resource)}")[^}}]*\}} (\S+)$')
    return sum(float(v) for v in re.findall(pattern, webhook_metrics(cluster), re.M))


def read_by_every_worker(cluster: Any, resource: str) -> bool:
    """Whether every gunicorn worker of the webhook has listed `resource` (its gauge is the least of any worker)."""
    found = re.search(rf'^gpu_class_inventory_resource_read\{{resource="{re.escape(resource)}"\}} (\S+)$',
                      webhook_metrics(cluster), re.M)
    return found is not None and float(found.group(1)) == 1


def delete_if_present(delete: Callable[..., Any], *args: Any) -> None:
    """Call an API delete; an object already gone is fine."""
    try:
        delete(*args)
    except ApiException as e:
        if e.status != 404:
            raise


def delete_nodes(core: kubernetes.client.CoreV1Api, names: Sequence[str]) -> None:
    for name in names:
        delete_if_present(core.delete_node, name)


# --- Pods ---------------------------------------------------------------------

def make_pod(name: str, *, gpu_class: str | None = None, gpus: int | None = 1, scheduler: str | None = None,
             affinity: Mapping[str, Any] | None = None, annotations: Mapping[str, str] | None = None,
             cpu: str = "100m") -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus is not None else {}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {**({CLASS: gpu_class} if gpu_class else {}),
                                                   **(annotations or {})}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "registry.example/cuda:12",
                                 "resources": {"limits": limits, "requests": {"cpu": cpu}}}]},
    }
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    if affinity:
        pod["spec"]["affinity"] = dict(affinity)
    return pod


def read_pod(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    response = core.read_namespaced_pod(name, namespace, _preload_content=False)
    return json.loads(response.data)


def pod_removals(audit_log: str, since: float, until: float) -> list[str]:
    """Each Pod delete or eviction the audit log holds between two Unix times: when, who, what, the answer."""
    lines = []
    for line in audit_log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:  # a line cut short at the end of the file
            continue
        ref = event.get("objectRef") or {}
        removal = event.get("verb") in ("delete", "deletecollection") or ref.get("subresource") == "eviction"
        if ref.get("resource") != "pods" or not removal or event.get("stage") != "ResponseComplete":
            continue
        at = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        if since <= at <= until:
            who = (event.get("user") or {}).get("username", "?")
            what = f"{ref.get('namespace', '')}/{ref.get('name', '*')}" + (" eviction" if ref.get("subresource") else "")
            code = (event.get("responseStatus") or {}).get("code")
            lines.append(f"{event['requestReceivedTimestamp']} {who} {event['verb']} {what}: {code}")
    return lines


def wait_bound(core: kubernetes.client.CoreV1Api, namespace: str, name: str, seconds: float = 30.0) -> str:
    """The node the scheduler bound the Pod to."""
    def node() -> str | None:
        try:
            return read_pod(core, namespace, name)["spec"].get("nodeName")
        except ApiException as e:
            if e.status != 404:
                raise
            pytest.fail(f"pod {namespace}/{name} was deleted while awaited (the report names who deleted it, from "
                        "the audit log)", pytrace=False)
    return str(wait_for(f"pod {namespace}/{name} bound", node, seconds))


def node_label(core: kubernetes.client.CoreV1Api, node: str, key: str) -> str | None:
    labels = core.read_node(node).metadata.labels or {}
    return labels.get(key)


def dry_run_create(core: kubernetes.client.CoreV1Api, namespace: str, pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod as the API server would store it, after admission (nothing is stored)."""
    response = core.create_namespaced_pod(namespace, dict(pod), dry_run="All", _preload_content=False)
    return json.loads(response.data)


def force_delete_pods(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    """Delete now: with no kubelet to confirm, a graceful delete of a bound Pod would never finish."""
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)


def admission_records(log_file: Path, namespace: str, pod: str | None = None) -> list[dict[str, Any]]:
    """gpu-class's one-line-per-admission log records for a Pod (its name, or its generateName), or for every Pod
    of the namespace."""
    records = []
    for line in log_file.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record.get("msg") == "admission" and record.get("namespace") == namespace and pod in (None, record.get("pod")):
            records.append(record)
    return records


@contextlib.contextmanager
def second_mutator(cluster: Any, namespace: str) -> Iterator[list[str]]:
    """Another mutating webhook, called after gpu-class, that labels every Pod in `namespace`.

    Yields the names of the Pods it was asked about. It serves with the gpu-class test
    certificate (issued for 127.0.0.1), so the same caBundle trusts it.
    """
    calls: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review["request"]
            calls.append(request["object"]["metadata"].get("name", ""))
            patch = [{"op": "add", "path": "/metadata/labels", "value": {"second-mutator": "was-here"}}]
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": request["uid"], "allowed": True, "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode()}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    webhook_dir = cluster.dir / "webhook"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(webhook_dir / "tls.crt"), str(webhook_dir / "tls.key"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    name = f"zz-e2e-second-mutator-{namespace}"  # sorts after gpu-class.io: called after it
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "second.e2e.test", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": f"https://127.0.0.1:{server.server_address[1]}/",
                             "caBundle": base64.b64encode((webhook_dir / "ca.crt").read_bytes()).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Fail", "reinvocationPolicy": "Never", "timeoutSeconds": 5,
        }],
    }
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(config))
    try:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)))
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "second-mutator-probe"},
                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        # The API server picks up a new webhook configuration within a second or so.
        wait_for("the second mutating webhook to be called",
                 lambda: (dry_run_create(core, namespace, probe)["metadata"].get("labels") or {}).get("second-mutator"))
        calls.clear()
        yield calls
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")
        server.shutdown()
        server.server_close()
