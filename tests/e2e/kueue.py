"""A real Kueue beside the local control plane, for end-to-end tests of gpu-class with Kueue.

`running_kueue(cluster, namespace_label=(key, value))` runs Kueue's own controller manager
(sigs.k8s.io/kueue cmd/kueue, built at the release pinned in tests/tools/kueue/go.mod, see
tests/tools/gotools.py) against a `local_cluster.Cluster`, with the CRDs and webhook configurations of
that release's manifests, read from its module in the Go module cache. Kueue manages Jobs and Pods only
in namespaces labelled `key=value`, and its webhooks are called only there (and for its own
cluster-scoped kinds), so the other tests in the same cluster never meet it.

Certificates are Kueue's own, as a release install runs it (internalCertManagement on): Kueue makes
its CA and serving pair into the Secret kueue-system/kueue-webhook-server-cert and injects the CA into
its webhook configurations and its CRDs' conversion webhooks. Two things take the place of what a
cluster with kubelets and kube-proxy would do:
- there is no kubelet to mount that Secret into the manager's certificate directory: the harness
  writes it there itself, as the Secret volume would;
- the webhooks name the Service kueue-system/kueue-webhook-service, as Kueue's manifests do; here it
  is an ExternalName Service for 127.0.0.1, which the API server resolves to the manager's listener
  (and still checks the certificate for the Service's DNS name).
Why not internalCertManagement off with a pair of our own: then cmd/kueue/main.go reads the metrics
server's pair from the fixed path /etc/kueue/metrics/certs and exits when it is not there, even with
metrics off; that is a write outside the cluster directory, and one that needs root.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import local_cluster
from kubeobjects import delete_if_present
from tools import gotools

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# What Kueue's webhooks add to ClusterQueues, ResourceFlavors and Workloads, and to the Pods it
# manages itself (pod integration); only the running manager takes them off again.
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
POD_FINALIZER = "kueue.x-k8s.io/managed"

# The names a release install uses (config/default: namespace kueue-system, namePrefix kueue-).
# They matter: the API server calls mutating webhook configurations in the order of their names, so
# on a Pod gpu-class's (gpu-class.io) comes before Kueue's here as in a cluster that runs both.
NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
MUTATING_CONFIGURATION = "kueue-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "kueue-validating-webhook-configuration"
PROCESS = "kueue"
READY_SECONDS = 120.0
# From registering the webhook configurations until the API server calls them: Kueue's running
# manager injects its CA into them first (its informer sees them, then an update).
WEBHOOK_SECONDS = 60.0


class KueueError(Exception):
    """Kueue could not be set up: what failed, with the manager's log tail where it ran."""


# --- what is applied: Kueue's manifests, pointed at this cluster (pure) ---------------

def webhook_service_ref(path: str, port: int) -> dict[str, Any]:
    return {"namespace": NAMESPACE, "name": WEBHOOK_SERVICE, "path": path, "port": port}


def build_crds(source: Path, webhook_port: int) -> list[dict[str, Any]]:
    """Kueue's CRDs as its config/components/crd kustomization renders them: the bases, with the
    conversion webhook its patches enable, naming the Service a release install names."""
    crd_dir = source / "config" / "components" / "crd"
    kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
    crds = {doc["metadata"]["name"]: doc for doc in
            (yaml.safe_load((crd_dir / name).read_text()) for name in kustomization["resources"])}
    for patch_ref in kustomization.get("patches", []):
        patch = yaml.safe_load((crd_dir / patch_ref["path"]).read_text())
        conversion = copy.deepcopy(patch["spec"]["conversion"])
        ref = conversion["webhook"]["clientConfig"]["service"]
        conversion["webhook"]["clientConfig"]["service"] = webhook_service_ref(ref["path"], webhook_port)
        crds[patch["metadata"]["name"]]["spec"]["conversion"] = conversion
    return list(crds.values())


def build_webhook_configurations(source: Path, webhook_port: int,
                                 namespace_label: tuple[str, str]) -> list[dict[str, Any]]:
    """Kueue's webhook configurations (config/components/webhook/manifests.yaml) under a release's
    names, every webhook narrowed to namespaces labelled `namespace_label`.

    The selector leaves Kueue's cluster-scoped kinds (ClusterQueue, ResourceFlavor, Cohort) as they
    were: the API server applies a namespaceSelector only to namespaced objects (and Namespaces)."""
    manifests = source / "config" / "components" / "webhook" / "manifests.yaml"
    key, value = namespace_label
    configurations = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        for hook in doc["webhooks"]:
            hook["clientConfig"] = {"service": webhook_service_ref(hook["clientConfig"]["service"]["path"],
                                                                   webhook_port)}
            hook["namespaceSelector"] = {"matchLabels": {key: value}}
        configurations.append(doc)
    names = sorted(c["metadata"]["name"] for c in configurations)
    if names != sorted([MUTATING_CONFIGURATION, VALIDATING_CONFIGURATION]):
        raise KueueError(f"{manifests} holds {names}, not Kueue's two webhook configurations")
    return configurations


# Kueue's integrations the tests turn on by default; the workload tests add those of the controllers
# they run (workload_controllers.py) and `statefulset`, which needs `pod`.
FRAMEWORKS = ("batch/job", "pod")
WORKLOAD_FRAMEWORKS = (*FRAMEWORKS, "statefulset", "jobset.x-k8s.io/jobset", "leaderworkerset.x-k8s.io/leaderworkerset")


def build_configuration(*, cert_dir: Path, webhook_port: int, health_port: int, metrics_port: int,
                        namespace_label: tuple[str, str], frameworks: Sequence[str] = FRAMEWORKS) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, what cmd/kueue of this release reads)."""
    key, value = namespace_label
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {key: value}},
        "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                   "webhookSecretName": WEBHOOK_SECRET},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # HTTPS with a pair made in memory (internal certificates on), behind TokenReview and SubjectAccessReview.
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        # One manager: no lease to wait for at start.
        "leaderElection": {"leaderElect": False},
        "integrations": {"frameworks": list(frameworks)},
        # The visibility API is an aggregated API server of its own (bound to every interface on a fixed
        # port, registered by an APIService): nothing here asks it.
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_service() -> dict[str, Any]:
    """The Service Kueue's webhooks name, resolved by the API server to the manager on loopback
    (nothing here routes a ClusterIP; an ExternalName needs no routing)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}}


# --- objects tests create (pure builders) ---------------------------------------------

def resource_flavor(name: str, *, node_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(node_labels)} if node_labels else {}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, *, flavor: str, nominal_quota: Mapping[str, str | int],
                  namespace_selector: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ClusterQueue of one flavor covering exactly the resources in `nominal_quota`; by default every
    namespace may point a LocalQueue at it (`{}`; none would admit nothing)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {
            "namespaceSelector": dict(namespace_selector or {}),
            "resourceGroups": [{
                "coveredResources": list(nominal_quota),
                "flavors": [{"name": flavor, "resources": [
                    {"name": resource, "nominalQuota": str(quota)} for resource, quota in nominal_quota.items()]}],
            }],
        },
    }


def local_queue(namespace: str, name: str, *, cluster_queue_name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue_name}}


def has_condition(obj: Mapping[str, Any], condition: str) -> bool:
    return any(c.get("type") == condition and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def is_admitted(workload: Mapping[str, Any]) -> bool:
    """Kueue admitted the Workload: quota reserved and every admission check passed."""
    return has_condition(workload, "Admitted")


def as_json(found: object) -> dict[str, Any]:
    """What CustomObjectsApi returns: the object's JSON (typed `object` by the client)."""
    assert isinstance(found, dict), type(found)
    return found


def is_owned_by(obj: Mapping[str, Any], kind: str, name: str) -> bool:
    return any(o.get("kind") == kind and o.get("name") == name
               for o in obj["metadata"].get("ownerReferences") or [])


# --- a running Kueue ------------------------------------------------------------------

@dataclass(frozen=True)
class Kueue:
    """A running Kueue manager, and what tests use of it."""

    cluster: local_cluster.Cluster
    objects: kubernetes.client.CustomObjectsApi
    namespace_label: tuple[str, str]
    webhook_port: int
    health_port: int
    metrics_port: int
    version: str

    def log_tail(self, lines: int = 40) -> str:
        return self.cluster.log_tail(PROCESS, lines)

    def apply(self, *objects: Mapping[str, Any]) -> None:
        """Server-side apply, as `kubectl apply --server-side` (Kueue's webhooks see it as a user's)."""
        local_cluster.apply(self.cluster, objects)

    def apply_resource_flavor(self, name: str, *, node_labels: Mapping[str, str] | None = None) -> None:
        self.apply(resource_flavor(name, node_labels=node_labels))

    def apply_cluster_queue(self, name: str, *, flavor: str, nominal_quota: Mapping[str, str | int]) -> None:
        self.apply(cluster_queue(name, flavor=flavor, nominal_quota=nominal_quota))

    def apply_local_queue(self, namespace: str, name: str, *, cluster_queue_name: str) -> None:
        self.apply(local_queue(namespace, name, cluster_queue_name=cluster_queue_name))

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """One of Kueue's objects, or None when there is none of that name."""
        try:
            if namespace is None:
                found = self.objects.get_cluster_custom_object(GROUP, VERSION, plural, name)
            else:
                found = self.objects.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return as_json(found)

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        listed = self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")
        return list(as_json(listed)["items"])

    def workload_of(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """The Workload Kueue made for the job `kind`/`name` (e.g. "Job", "my-job"), if any yet."""
        return next((w for w in self.workloads(namespace) if is_owned_by(w, kind, name)), None)

    def is_active(self, plural: str, name: str) -> bool:
        """A ClusterQueue or LocalQueue Kueue accepted (its Active condition): the queue admits."""
        found = self.get(plural, name)
        return found is not None and has_condition(found, "Active")

    @property
    def metrics_url(self) -> str:
        return f"https://127.0.0.1:{self.metrics_port}/metrics"


@contextlib.contextmanager
def running_kueue(cluster: local_cluster.Cluster, *, namespace_label: tuple[str, str],
                  frameworks: Sequence[str] = FRAMEWORKS) -> Iterator[Kueue]:
    """Kueue's manager against `cluster`, managing namespaces labelled `namespace_label` with the
    integrations `frameworks` (their CRDs installed first: Kueue reads them at start), for a fixture.

    Yields once Kueue's webhooks answer the API server. Afterwards (also when the start fails):
    Kueue's webhook configurations go first, so no API call in the cluster waits on a manager
    that is stopping; then the manager; then every object of Kueue's kinds, the Pods it put its
    finalizer on, its Secret and Service. Its CRDs stay: without the manager they are inert
    (conversion to v1beta1 aside, which nothing here asks for), a later start in the session applies
    them again as an upgrade would and finds them established, where a deleted CRD would still be
    terminating. A manager that does not start fails the test with its log tail."""
    api_client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        try:
            kueue = _start(cluster, api_client, namespace_label, frameworks)
        except (KueueError, local_cluster.ClusterError, gotools.ToolError) as e:
            pytest.fail(f"Kueue did not start: {e}", pytrace=False)
        yield kueue
    finally:
        _stop(cluster, api_client, namespace_label)


def _start(cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient,
           namespace_label: tuple[str, str], frameworks: Sequence[str]) -> Kueue:
    objects = kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    log = lambda line: print(line, flush=True)  # noqa: E731 (pytest shows it with -s)
    binary = gotools.build_kueue(log) / "kueue"
    source = gotools.kueue_source()
    ports = {name: local_cluster.free_port() for name in ("webhook", "health", "metrics")}
    work = cluster.dir / "kueue"
    cert_dir = work / "certs"
    # A pair left from an earlier manager would be served before ours is written; its CA is gone.
    shutil.rmtree(cert_dir, ignore_errors=True)
    cert_dir.mkdir(parents=True)

    crds = build_crds(source, ports["webhook"])
    local_cluster.apply(cluster, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, webhook_service(),
        # Empty, as config/components/internalcert installs it: Kueue fills it, it does not create it.
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE}},
        *crds])
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    *(f"crd/{c['metadata']['name']}" for c in crds))

    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(build_configuration(
        cert_dir=cert_dir, webhook_port=ports["webhook"], health_port=ports["health"],
        metrics_port=ports["metrics"], namespace_label=namespace_label, frameworks=frameworks)))
    cluster.start(PROCESS, [str(binary), f"--config={config}", f"--kubeconfig={cluster.kubeconfig}"])
    health = f"http://127.0.0.1:{ports['health']}/readyz"
    # The kubelet's part: the Secret Kueue writes, as files in its certificate directory.
    cluster.wait_ready(PROCESS, lambda: _mount_secret(core, cert_dir) and _http_ok(health), READY_SECONDS)

    local_cluster.apply(cluster, build_webhook_configurations(source, ports["webhook"], namespace_label))
    _wait_webhooks_answer(cluster, objects)
    return Kueue(cluster=cluster, objects=objects, namespace_label=namespace_label, webhook_port=ports["webhook"],
                 health_port=ports["health"], metrics_port=ports["metrics"], version=gotools.kueue_version())


def _mount_secret(core: kubernetes.client.CoreV1Api, cert_dir: Path) -> bool:
    """Write Kueue's webhook Secret into `cert_dir` once it exists; True when the files are there.
    tls.crt last: Kueue takes its presence for the whole pair."""
    if (cert_dir / "tls.crt").exists():
        return True
    try:
        secret = core.read_namespaced_secret(WEBHOOK_SECRET, NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    data = secret.data or {}
    if not {"tls.crt", "tls.key", "ca.crt"} <= data.keys():
        return False
    for name in ("ca.crt", "tls.key", "tls.crt"):
        part = cert_dir / f".{name}.tmp"
        part.write_bytes(base64.b64decode(data[name]))
        part.chmod(0o600)
        os.replace(part, cert_dir / name)
    return True


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bool(r.status == 200)
    except urllib.error.HTTPError:
        return False


PROBE_FLAVOR = "e2e-kueue-webhook-probe"


def _wait_webhooks_answer(cluster: local_cluster.Cluster, objects: kubernetes.client.CustomObjectsApi) -> None:
    """Until the API server calls both of Kueue's configurations (nothing is stored): a ResourceFlavor
    comes back with the finalizer Kueue's mutating webhook adds, and a ClusterQueue with a selector
    only Kueue's validation refuses is refused by Kueue's validating webhook."""
    bad_queue = cluster_queue("e2e-kueue-webhook-probe", flavor=PROBE_FLAVOR, nominal_quota={"cpu": 1},
                              namespace_selector={"matchExpressions": [{"key": "probe", "operator": "Bogus"}]})
    deadline = time.monotonic() + WEBHOOK_SECONDS
    last = ""
    while time.monotonic() < deadline:
        try:
            flavor = as_json(objects.create_cluster_custom_object(GROUP, VERSION, "resourceflavors",
                                                                  resource_flavor(PROBE_FLAVOR), dry_run="All"))
            mutated = RESOURCE_IN_USE_FINALIZER in (flavor["metadata"].get("finalizers") or [])
            last = f"ResourceFlavor finalizers after admission: {flavor['metadata'].get('finalizers')}"
            if mutated:
                objects.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", bad_queue, dry_run="All")
                last = "a ClusterQueue with an invalid selector was admitted"
        except ApiException as e:
            last = f"{e.status}: {e.body}"
            if 'admission webhook "vclusterqueue.kb.io" denied' in _status_message(e):
                return
        time.sleep(0.5)
    raise KueueError(f"the API server did not get answers from Kueue's webhooks within {WEBHOOK_SECONDS:.0f} s; "
                     f"last: {last}\n{cluster.log_tail(PROCESS)}")


def _status_message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(e.body)


def _stop(cluster: local_cluster.Cluster, api_client: kubernetes.client.ApiClient,
          namespace_label: tuple[str, str]) -> None:
    for kind, name in (("mutatingwebhookconfiguration", MUTATING_CONFIGURATION),
                       ("validatingwebhookconfiguration", VALIDATING_CONFIGURATION)):
        cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
    cluster.stop(PROCESS)
    # With the manager gone nothing takes its finalizers off or puts objects back: strip and delete.
    # Namespaced kinds first (Workloads, LocalQueues), then the cluster-scoped ones they name. The
    # kinds are those of the CRDs in the cluster: a start that failed half-way applied some or none.
    objects = kubernetes.client.CustomObjectsApi(api_client)
    crds = [c for c in _kubectl_json(cluster, "get", "crd")["items"] if c["spec"]["group"] == GROUP]
    for crd in sorted(crds, key=lambda c: c["spec"]["scope"] != "Namespaced"):
        plural = crd["spec"]["names"]["plural"]
        try:
            listed = as_json(objects.list_cluster_custom_object(GROUP, VERSION, plural))["items"]
        except ApiException as e:
            if e.status == 404:  # applied, never established
                continue
            raise
        for obj in listed:
            _strip_and_delete(objects, plural, obj["metadata"]["name"], obj["metadata"].get("namespace"))
    core = kubernetes.client.CoreV1Api(api_client)
    key, value = namespace_label
    for namespace in _kubectl_json(cluster, "get", "namespace", "-l", f"{key}={value}")["items"]:
        for pod in _kubectl_json(cluster, "get", "pods", "-n", namespace["metadata"]["name"])["items"]:
            finalizers = pod["metadata"].get("finalizers") or []
            if POD_FINALIZER in finalizers:
                core.patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"], [
                    {"op": "replace", "path": "/metadata/finalizers",
                     "value": [f for f in finalizers if f != POD_FINALIZER]}])
    delete_if_present(core.delete_namespaced_service, WEBHOOK_SERVICE, NAMESPACE)
    delete_if_present(core.delete_namespaced_secret, WEBHOOK_SECRET, NAMESPACE)


def _kubectl_json(cluster: local_cluster.Cluster, *args: str) -> dict[str, Any]:
    return as_json(json.loads(cluster.kubectl(*args, "-o", "json").stdout))


def _strip_and_delete(objects: kubernetes.client.CustomObjectsApi, plural: str, name: str,
                      namespace: str | None) -> None:
    strip = {"metadata": {"finalizers": None}}
    try:
        if namespace is None:
            objects.patch_cluster_custom_object(GROUP, VERSION, plural, name, strip)
            objects.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        else:
            objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, strip)
            objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    except ApiException as e:
        if e.status != 404:
            raise
