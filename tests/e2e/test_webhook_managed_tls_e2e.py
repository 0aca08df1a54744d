"""tls.mode webhook-managed on a real control plane: a GitOps controller's loop and a CA rotation refuse no Pod.

The chart is rendered with `helm template` (as Argo CD renders it) and applied server-side under a field manager
of its own, again and again, while class Pods are created; the webhook (local-cluster's `gpuclass serve`, run
as the chart's service account with the chart's RBAC) keeps its own CA and certificates with validities of
seconds, so that its CA is replaced and its certificates move to the new one within the test. Every Pod must be
placed: one the API server could not call the webhook for would be admitted undecided and refused by the
backstop.

There are no kubelets: the chart's Deployment, Service and PodDisruptionBudgets are left out of each apply, as
local-cluster leaves them out of its own install; the registration points at the local webhook (webhook.url).
"""

from __future__ import annotations

import base64
import datetime
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from cryptography import x509
from kubernetes.client.exceptions import ApiException

import local_cluster
from fleet import H100_LABELS
from kubeobjects import TYPES, create_node, make_namespace, make_pod, read_pod, running_cluster, wait_for
from tools import gotools
from webhook.cluster.source import ensure_own_certificates
from webhook.core.certificates.rotation import Policy
from webhook.core.certificates.settings import KeeperSettings

CHART = local_cluster.REPO / "deploy" / "chart" / "gpu-class"
NAMESPACE = local_cluster.WEBHOOK_NAMESPACE
CONFIGURATIONS = ("gpu-class.io", "gpu-class.io-workloads")
LEFT_OUT = ("Deployment", "DaemonSet", "Service", "PodDisruptionBudget")  # no kubelets to run them
# Seconds, so the CA is replaced about a minute in: renewed 60 s before its end, certificates moved 20 s later.
SECONDS = {"--ca-validity-seconds": 120, "--ca-renew-before-seconds": 60, "--cert-validity-seconds": 50,
           "--cert-renew-before-seconds": 20, "--rotation-overlap-seconds": 20, "--certificates-check-seconds": 4}


def helm_template(cluster: local_cluster.Cluster) -> str:
    try:
        path = gotools.path_of("helm")
    except gotools.ToolError as e:
        pytest.fail(f"helm is missing and could not be built: {e}", pytrace=False)
    done = subprocess.run([str(path), "template", "gpu-class", str(CHART), "--namespace", NAMESPACE,
                           "--set", "tls.mode=webhook-managed", "--set", f"webhook.url={cluster.webhook_url}"],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        pytest.fail(f"helm template failed:\n{done.stderr}", pytrace=False)
    return done.stdout


def sync(cluster: local_cluster.Cluster, rendered: str) -> None:
    """What Argo CD does with ServerSideApply=true: apply the render under its own field manager."""
    objects = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] not in LEFT_OUT]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=argocd-controller", "-f", "-",
                    input_text=yaml.safe_dump_all(objects))


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[local_cluster.Cluster]:
    with running_cluster(Path(tempfile.mkdtemp(prefix="gpu-class-webhook-managed-e2e-"))) as cluster:
        yield cluster


def ca_bundles(cluster: local_cluster.Cluster) -> set[bytes]:
    found = set()
    for name in CONFIGURATIONS:
        configuration = yaml.safe_load(cluster.kubectl("get", "mutatingwebhookconfiguration", name, "-o",
                                                       "yaml").stdout)
        found |= {base64.b64decode(h["clientConfig"].get("caBundle", "")) for h in configuration["webhooks"]}
    return found


def secret(core: kubernetes.client.CoreV1Api, name: str) -> dict[str, bytes]:
    data = core.read_namespaced_secret(name, NAMESPACE).data or {}
    return {k: base64.b64decode(v) for k, v in data.items()}


def start_managed_webhook(cluster: local_cluster.Cluster) -> None:
    webhook_dir = cluster.dir / "webhook"
    policy = Policy(**{field: datetime.timedelta(seconds=SECONDS[flag]) for field, flag in (
        ("ca_validity", "--ca-validity-seconds"), ("ca_renew_before", "--ca-renew-before-seconds"),
        ("validity", "--cert-validity-seconds"), ("renew_before", "--cert-renew-before-seconds"),
        ("overlap", "--rotation-overlap-seconds"))})
    settings = KeeperSettings(namespace=NAMESPACE, names=("127.0.0.1",), webhook_configurations=CONFIGURATIONS,
                              policy=policy, directory=str(webhook_dir))
    # What the server's master does at start, done first here so that local-cluster's readiness check, which
    # reads ca.crt as the server starts, reads the bundle the server will serve under.
    ensure_own_certificates(str(cluster.kubeconfig), settings, str(webhook_dir))
    cluster.stop("gpuclass")
    local_cluster.start_webhook(cluster, [
        f"--manage-certificates={NAMESPACE}", "--certificate-name=127.0.0.1",
        *(f"--manage-webhook-configuration={name}" for name in CONFIGURATIONS),
        *(f"{flag}={value}" for flag, value in SECONDS.items())])


def create_and_check(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> str | None:
    """None when the Pod was placed; else why not."""
    try:
        core.create_namespaced_pod(namespace, make_pod(name, gpu_class="high"))
    except ApiException as e:
        return f"{name}: refused ({e.status}): {str(e.body)[:300]}"
    try:
        annotations: dict[str, Any] = read_pod(core, namespace, name)["metadata"].get("annotations") or {}
        return None if TYPES in annotations else f"{name}: admitted unplaced: {annotations}"
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def test_gitops_loop_and_a_ca_rotation_refuse_no_pod(own_cluster: local_cluster.Cluster) -> None:
    cluster = own_cluster
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    first = helm_template(cluster)
    sync(cluster, first)  # the chart's RBAC, before the webhook (as its service account) needs it
    start_managed_webhook(cluster)
    first_ca = secret(core, "gpu-class-ca")["tls.crt"]
    assert ca_bundles(cluster) == {secret(core, "gpu-class-ca")["ca.crt"]}

    create_node(core, "managed-h100", H100_LABELS, gpus=8)
    namespace = make_namespace(core, "e2e-managed-tls", labels={"gpu-class.io/inject": "enabled"})
    problems: list[str] = []
    bundle_sizes: set[int] = set()
    cas = {first_ca}
    # until the first CA has expired and left the bundle: through its replacement and the move to the new one
    until = x509.load_pem_x509_certificate(first_ca).not_valid_after_utc.timestamp() \
        + 3 * SECONDS["--certificates-check-seconds"]
    i = 0
    try:
        while time.time() < until:
            if i % 3 == 0:
                rendered = helm_template(cluster)
                assert rendered == first, "two renders of webhook-managed differ"
                sync(cluster, rendered)
            problem = create_and_check(core, namespace, f"pod-{i}")
            if problem:
                problems.append(problem)
            bundles = ca_bundles(cluster)
            assert b"" not in bundles, "a sync took caBundle away"
            if len(bundles) > 1:
                # the keeper writes the two configurations one after the other (a rotation wrote them 23 ms apart):
                # read between its writes they differ for that moment, and must agree once it has written both
                bundles = wait_for("the configurations' caBundles to agree",
                                   lambda: found if len(found := ca_bundles(cluster)) == 1 else None, seconds=10)
                assert b"" not in bundles, "a sync took caBundle away"
            bundle_sizes.add(bundles.pop().count(b"BEGIN CERTIFICATE"))
            cas.add(secret(core, "gpu-class-ca")["tls.crt"])
            i += 1
            time.sleep(1)
    finally:
        core.delete_node("managed-h100")
        core.delete_namespace(namespace)
    assert problems == [], f"{len(problems)} of {i} Pods not placed:\n" + "\n".join(problems[:10])
    assert len(cas) >= 2, "the CA was not replaced within the test"
    assert bundle_sizes == {1, 2}, "the old CA stayed in the bundle beside the new one, then left it"
