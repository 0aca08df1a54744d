"""The real JobSet and LeaderWorkerSet controllers beside the local control plane, for end-to-end tests of
the workloads Kueue admits through its `jobset.x-k8s.io/jobset` and `leaderworkerset.x-k8s.io/leaderworkerset`
integrations.

`running_controllers(cluster, (JOBSET, LWS), namespace_label=(key, value))` runs each controller's own
manager (built at the release pinned in tests/tools/<name>/go.mod, see tests/tools/gotools.py) against a
`local_cluster.Cluster`, with the CRDs and webhook configurations of that release's manifests, read from
its module in the Go module cache. Their webhooks are called only in namespaces labelled `key=value`, as
Kueue's are (tests/e2e/kueue.py), so the session's other tests never meet them.

Both are kubebuilder projects laid out alike, so one harness runs both. Certificates differ from Kueue's
harness: both releases write their internal certificates to a fixed path (/tmp/k8s-webhook-server/...)
that two managers on one machine would share, so internal certificate management is off and the harness
issues each its own serving pair (for its webhook Service's DNS name), writes it to the manager's
certificate directory and puts the CA in the webhook configurations, as cert-manager would. The webhook
Service is an ExternalName for 127.0.0.1, as Kueue's. Each CRD has one version, so its conversion webhook
(the releases' CRD patch) is never called and is not installed. Metrics are off ("0"): nothing reads them.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import jsonpatch
import kubernetes
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes.client.exceptions import ApiException

import local_cluster
from kubeobjects import delete_if_present
from tools import gotools

READY_SECONDS = 120.0
WEBHOOK_SECONDS = 60.0


class ControllerError(Exception):
    """A controller could not be set up: what failed, with the manager's log tail where it ran."""


@dataclass(frozen=True)
class Release:
    """Where a kubebuilder project's release keeps what an install applies, and its names there."""

    tool: gotools.Controller
    prefix: str  # config/default's namePrefix: "jobset-", "lws-"
    crds: tuple[str, ...]  # CRD files under the module
    webhook_dir: str  # the webhook kustomization (manifests.yaml and its patches)
    config_group: str  # the Configuration's API group
    # (group, version, kind, plural, spec) of an object its validating webhook refuses: proof that it answers
    probe: tuple[str, str, str, str, dict[str, Any]]

    @property
    def namespace(self) -> str:
        return f"{self.prefix}system"

    @property
    def service(self) -> str:
        return f"{self.prefix}webhook-service"

    @property
    def process(self) -> str:
        return self.tool.name


JOBSET = Release(
    tool=gotools.JOBSET, prefix="jobset-", crds=("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
    webhook_dir="config/components/webhook", config_group="config.jobset.x-k8s.io",
    # the first replicated Job depending on another: only JobSet's validation refuses it, not the CRD schema
    probe=("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", {"spec": {"replicatedJobs": [{
        "name": "r", "dependsOn": [{"name": "s", "status": "Ready"}],
        "template": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                                                     "containers": [{"name": "c", "image": "i"}]}}}}}]}}))
LWS = Release(
    # v0.9.0's manager also runs the DisaggregatedSet controller: without its CRD, the manager's cache of it never
    # syncs and the manager exits two minutes after its start
    tool=gotools.LWS, prefix="lws-", crds=("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
                                           "config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml"),
    webhook_dir="config/webhook", config_group="config.lws.x-k8s.io",
    # a sub-group size that divides neither size nor size - 1: only LWS's validation refuses it
    probe=("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", {"spec": {"leaderWorkerTemplate": {
        "size": 5, "subGroupPolicy": {"subGroupSize": 3},
        "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}))


# --- what is applied (pure) ------------------------------------------------------------------------

def build_crds(source: Path, release: Release) -> list[dict[str, Any]]:
    return [yaml.safe_load((source / path).read_text()) for path in release.crds]


def build_webhook_configurations(source: Path, release: Release, webhook_port: int, ca_bundle: bytes,
                                 namespace_label: tuple[str, str]) -> list[dict[str, Any]]:
    """The release's webhook configurations as its kustomization renders them (manifests.yaml and its
    JSON patches), under the release's names, calling the manager through its Service with `ca_bundle`,
    every webhook narrowed to namespaces labelled `namespace_label`."""
    webhook_dir = source / release.webhook_dir
    kustomization = yaml.safe_load((webhook_dir / "kustomization.yaml").read_text())
    docs = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text())
            if doc}
    for patch_ref in kustomization.get("patches", []):
        name = patch_ref["target"]["name"]
        docs[name] = jsonpatch.apply_patch(docs[name], yaml.safe_load((webhook_dir / patch_ref["path"]).read_text()))
    key, value = namespace_label
    configurations = []
    for doc in docs.values():
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": release.prefix + doc["metadata"]["name"]}
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"caBundle": base64.b64encode(ca_bundle).decode(), "service": {
                "namespace": release.namespace, "name": release.service, "path": path, "port": webhook_port}}
            hook["namespaceSelector"] = {"matchLabels": {key: value}}
        configurations.append(doc)
    return configurations


def build_configuration(release: Release, *, cert_dir: Path, webhook_port: int, health_port: int) -> dict[str, Any]:
    """The manager's Configuration (<config_group>/v1alpha1, what both releases read)."""
    return {
        "apiVersion": f"{release.config_group}/v1alpha1", "kind": "Configuration",
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        # One manager: no lease to wait for at start.
        "leaderElection": {"leaderElect": False},
    }


def issue_serving_pair(cert_dir: Path, release: Release) -> bytes:
    """A CA and a serving pair for the webhook Service's DNS name, in `cert_dir`; returns the CA."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = local_cluster.issue_certificate(local_cluster.x509_name(f"{release.prefix}e2e-ca"), ca_key, None, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    dns = f"{release.service}.{release.namespace}.svc"
    cert = local_cluster.issue_certificate(local_cluster.x509_name(dns), key, (ca, ca_key), server_names=(dns,))
    (cert_dir / "tls.key").write_bytes(local_cluster.pem_key(key))
    (cert_dir / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ca.public_bytes(serialization.Encoding.PEM)


# --- running ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def running_controllers(cluster: local_cluster.Cluster, releases: Sequence[Release], *,
                        namespace_label: tuple[str, str]) -> Iterator[None]:
    """The releases' managers against `cluster`, their webhooks served in namespaces labelled
    `namespace_label`, for a fixture. Yields once every webhook answers the API server. Afterwards (also
    when a start fails): the webhook configurations go first, then the managers, their Services. The
    CRDs stay, as Kueue's do (tests/e2e/kueue.py says why)."""
    try:
        for release in releases:
            try:
                _start(cluster, release, namespace_label)
            except (ControllerError, local_cluster.ClusterError, gotools.ToolError) as e:
                pytest.fail(f"{release.tool.module} did not start: {e}", pytrace=False)
        yield
    finally:
        for release in releases:
            _stop(cluster, release)


def _start(cluster: local_cluster.Cluster, release: Release, namespace_label: tuple[str, str]) -> None:
    log = lambda line: print(line, flush=True)  # noqa: E731 (pytest shows it with -s)
    binary = gotools.build_controller(release.tool, log) / release.tool.binary
    source = gotools.controller_source(release.tool)
    ports = {name: local_cluster.free_port() for name in ("webhook", "health")}
    work = cluster.dir / release.process
    ca = issue_serving_pair(work / "certs", release)
    crds = build_crds(source, release)
    local_cluster.apply(cluster, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release.namespace}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": release.service, "namespace": release.namespace},
         "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}},
        *crds])
    _wait_established(cluster, [c["metadata"]["name"] for c in crds])
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(build_configuration(
        release, cert_dir=work / "certs", webhook_port=ports["webhook"], health_port=ports["health"])))
    cluster.start(release.process, [str(binary), f"--config={config}", f"--kubeconfig={cluster.kubeconfig}"])
    cluster.wait_ready(release.process, lambda: _http_ok(f"http://127.0.0.1:{ports['health']}/readyz"), READY_SECONDS)
    local_cluster.apply(cluster, build_webhook_configurations(source, release, ports["webhook"], ca, namespace_label))
    _wait_webhook_answers(cluster, release, namespace_label)


def _wait_established(cluster: local_cluster.Cluster, names: Sequence[str]) -> None:
    """Until the API server serves the CRDs (`kubectl wait` fails at once on one whose status is not written yet)."""
    def established(name: str) -> bool:
        found = cluster.kubectl("get", "crd", name, "-o", "json", check=False)
        conditions = (json.loads(found.stdout).get("status") or {}).get("conditions") or [] if found.returncode == 0 else []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    deadline = time.monotonic() + READY_SECONDS
    while not all(established(n) for n in names):
        if time.monotonic() > deadline:
            raise ControllerError(f"CRDs {', '.join(names)} not established within {READY_SECONDS:.0f} s")
        time.sleep(0.5)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False


def _wait_webhook_answers(cluster: local_cluster.Cluster, release: Release, namespace_label: tuple[str, str]) -> None:
    """Until the release's validating webhook refuses its probe in a namespace it serves (nothing is stored)."""
    api_client = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
    objects = kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    namespace = f"{release.prefix}e2e-probe"
    key, value = namespace_label
    local_cluster.apply(cluster, [{"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": namespace, "labels": {key: value}}}])
    group, version, kind, plural, body = release.probe
    probe = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": "probe"}, **body}
    deadline = time.monotonic() + WEBHOOK_SECONDS
    last = ""
    try:
        while time.monotonic() < deadline:
            try:
                objects.create_namespaced_custom_object(group, version, namespace, plural, probe, dry_run="All")
                last = "the probe was admitted"
            except ApiException as e:
                last = f"{e.status}: {e.body}"
                if "admission webhook" in (e.body or "") and "denied the request" in (e.body or ""):
                    return
            time.sleep(0.5)
    finally:
        delete_if_present(core.delete_namespace, namespace)
    raise ControllerError(f"the API server did not get answers from {release.tool.module}'s webhooks within "
                          f"{WEBHOOK_SECONDS:.0f} s; last: {last}\n{cluster.log_tail(release.process)}")


def _stop(cluster: local_cluster.Cluster, release: Release) -> None:
    for kind, name in (("mutatingwebhookconfiguration", "mutating-webhook-configuration"),
                       ("validatingwebhookconfiguration", "validating-webhook-configuration")):
        cluster.kubectl("delete", kind, release.prefix + name, "--ignore-not-found", check=False)
    cluster.stop(release.process)
    cluster.kubectl("delete", "service", release.service, "-n", release.namespace, "--ignore-not-found", check=False)
