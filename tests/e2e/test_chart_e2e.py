"""`helm install` and `helm upgrade` of deploy/chart/gpu-class into a real control plane.

There are no kubelets, so the chart's Deployment never runs: the webhook that answers is the
`gpuclass serve` process local-cluster starts. The chart is installed with webhook.url pointing the
registration at that process and with its self-managed certificate naming 127.0.0.1; the test then
does what the kubelet would do with the Secret the chart made, writes it into the files the server
serves from (it reloads them). A Pod created afterwards is placed only if the API server trusts the
chart's CA and the chart's registration sends it to the webhook: otherwise the call fails, the
webhook fails open and the backstop refuses the Pod.

The cluster is one of this module's own: the chart takes over (adopts) objects the session's
cluster set up from deploy/'s kustomize render, which the other tests rely on.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

import local_cluster
from fleet import H100_LABELS
from kubeobjects import TYPES, create_node, make_namespace, make_pod, read_pod, running_cluster, wait_for
from tools import gotools

CHART = local_cluster.REPO / "deploy" / "chart" / "gpu-class"
RELEASE = "gpu-class"
NAMESPACE = local_cluster.WEBHOOK_NAMESPACE


def helm(cluster: local_cluster.Cluster, *args: str) -> str:
    try:
        path = gotools.path_of("helm")
    except gotools.ToolError as e:
        pytest.fail(f"helm is missing and could not be built: {e}", pytrace=False)
    done = subprocess.run([str(path), f"--kubeconfig={cluster.kubeconfig}", "--namespace", NAMESPACE, *args],
                          capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{done.stderr}", pytrace=False)
    return done.stdout


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[local_cluster.Cluster]:
    with running_cluster(Path(tempfile.mkdtemp(prefix="gpu-class-chart-e2e-"))) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def core(own_cluster: local_cluster.Cluster) -> kubernetes.client.CoreV1Api:
    client = kubernetes.config.new_client_from_config(config_file=str(own_cluster.kubeconfig))
    return kubernetes.client.CoreV1Api(client)


def values(cluster: local_cluster.Cluster, **webhook: Any) -> Path:
    path = cluster.dir / f"chart-values-{len(webhook)}.yaml"
    path.write_text(yaml.safe_dump({
        "webhook": {"url": cluster.webhook_url, **webhook},
        "tls": {"selfManaged": {"extraIPs": ["127.0.0.1"], "extraDNSNames": ["localhost"]}},
    }))
    return path


def adopt(cluster: local_cluster.Cluster, values_file: Path) -> list[str]:
    """Hand what the kustomize install made over to the release, as a cluster moving from deploy/'s
    kustomize install to the chart would: Helm's ownership marks, and no other field manager.
    Returns what was handed over."""
    rendered = [o for o in yaml.safe_load_all(helm(cluster, "template", RELEASE, str(CHART), "-f", str(values_file)))
                if o]
    marked = []
    for obj in rendered:
        where = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
        target = [f"{obj['kind']}.{obj['apiVersion'].split('/')[0] if '/' in obj['apiVersion'] else ''}".rstrip("."),
                  obj["metadata"]["name"], *where]
        if cluster.kubectl("get", *target, check=False).returncode != 0:
            continue
        cluster.kubectl("annotate", "--overwrite", *target, f"meta.helm.sh/release-name={RELEASE}",
                        f"meta.helm.sh/release-namespace={NAMESPACE}")
        cluster.kubectl("label", "--overwrite", *target, "app.kubernetes.io/managed-by=Helm")
        # Helm applies server-side, as field manager "helm": fields still owned by kubectl's apply
        # would conflict with every change an upgrade makes, so kubectl's ownership becomes Helm's.
        current = json.loads(cluster.kubectl("get", *target, "-o", "json", "--show-managed-fields").stdout)
        managers = [{**m, "manager": "helm"} if m.get("manager") == "kubectl" else m
                    for m in current["metadata"].get("managedFields") or []]
        cluster.kubectl("patch", *target, "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/metadata/managedFields", "value": managers}]))
        marked.append(f"{obj['kind']} {obj['metadata']['name']}")
    return marked


def secret_data(core: kubernetes.client.CoreV1Api, name: str) -> dict[str, bytes]:
    secret = core.read_namespaced_secret(name, NAMESPACE)
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def serve_chart_certificate(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api) -> bytes:
    """The kubelet's part: the Secret's files where the server reads them; wait until it serves them."""
    data = secret_data(core, "gpu-class-tls")
    directory = cluster.dir / "webhook"
    # ca.crt too: the server's --client-ca-file, which the scheduler's client certificate must chain to
    for name in ("tls.key", "tls.crt", "ca.crt"):
        staged = directory / f".{name}.new"
        staged.write_bytes(data[name])
        staged.replace(directory / name)
    assert cluster.ports
    port = cluster.ports.webhook

    wanted = x509.load_pem_x509_certificate(data["tls.crt"]).public_bytes(serialization.Encoding.DER)

    def serves_it() -> bool:
        context = ssl.create_default_context(cadata=data["ca.crt"].decode())
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                    context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                return tls.getpeercert(binary_form=True) == wanted
        except (ssl.SSLError, OSError):
            return False

    wait_for("the server to serve the chart's certificate", serves_it, seconds=30)
    return data["ca.crt"]


def extender_accepts_the_charts_client_certificate(cluster: local_cluster.Cluster,
                                                   core: kubernetes.client.CoreV1Api, tmp: Path) -> bool:
    """Whether the extender's listener serves a caller with the chart's gpu-class-extender-client (as the
    second scheduler mounts it), once the server has read the chart's CA."""
    data = secret_data(core, "gpu-class-extender-client")
    for name in ("tls.crt", "tls.key"):
        (tmp / name).write_bytes(data[name])
    assert cluster.ports
    context = ssl.create_default_context(cadata=secret_data(core, "gpu-class-tls")["ca.crt"].decode())
    context.load_cert_chain(str(tmp / "tls.crt"), str(tmp / "tls.key"))

    def served() -> bool:
        conn = http.client.HTTPSConnection("127.0.0.1", cluster.ports.extender, context=context, timeout=5)
        try:
            conn.request("POST", "/filter", body=b"{}", headers={"Content-Type": "application/json"})
            return conn.getresponse().status == 400  # past the certificate check: the body is no ExtenderArgs
        except (ssl.SSLError, OSError):
            return False
        finally:
            conn.close()

    return bool(wait_for("the extender to accept the chart's client certificate", served, seconds=30))


def webhook_registration(cluster: local_cluster.Cluster) -> Mapping[str, Any]:
    configuration = yaml.safe_load(cluster.kubectl("get", "mutatingwebhookconfiguration", "gpu-class.io",
                                                   "-o", "yaml").stdout)
    hooks = configuration["webhooks"]
    assert len(hooks) == 1
    hook: Mapping[str, Any] = hooks[0]
    return hook


def placed_types(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> Sequence[str]:
    core.create_namespaced_pod(namespace, make_pod(name, gpu_class="high"))
    pod = read_pod(core, namespace, name)
    annotations = pod["metadata"].get("annotations") or {}
    assert TYPES in annotations, f"the webhook did not place {name}: {annotations}"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"], "a required node affinity over the class's types"
    return str(annotations[TYPES]).split(",")


def test_helm_install_then_upgrade_keeps_the_ca_and_the_webhook_answering(
        own_cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api) -> None:
    cluster = own_cluster
    first = values(cluster)
    assert "MutatingWebhookConfiguration gpu-class.io" in adopt(cluster, first)
    helm(cluster, "install", RELEASE, str(CHART), "-f", str(first))

    ca = serve_chart_certificate(cluster, core)
    assert extender_accepts_the_charts_client_certificate(cluster, core, cluster.dir)
    hook = webhook_registration(cluster)
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
    assert hook["clientConfig"]["url"] == cluster.webhook_url + "/mutate"

    create_node(core, "chart-h100", H100_LABELS, gpus=8)
    try:
        namespace = make_namespace(core, "e2e-chart", labels={"gpu-class.io/inject": "enabled"})
        assert placed_types(core, namespace, "before-upgrade")[0] == "H100"

        kept = ("gpu-class-ca", "gpu-class-tls", "gpu-class-extender-client")
        before = {name: secret_data(core, name) for name in kept}
        changed = values(cluster, timeoutSeconds=7)
        helm(cluster, "upgrade", RELEASE, str(CHART), "-f", str(changed), "--set", "replicas=3")
        after = {name: secret_data(core, name) for name in kept}
        assert after == before, "helm upgrade made a new CA, serving or client certificate"
        hook = webhook_registration(cluster)
        assert hook["timeoutSeconds"] == 7, "the upgrade applied the new values"
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
        deployment = yaml.safe_load(cluster.kubectl("-n", NAMESPACE, "get", "deployment", "gpu-class",
                                                    "-o", "yaml").stdout)
        assert deployment["spec"]["replicas"] == 3
        assert placed_types(core, namespace, "after-upgrade")[0] == "H100"
        assert RELEASE in helm(cluster, "list", "--short")

        # Renewal: an upgrade within renewBeforeDays of the expiry (here: a window longer than the
        # certificate's life) reissues the serving certificate from the same CA.
        helm(cluster, "upgrade", RELEASE, str(CHART), "-f", str(changed), "--set", "replicas=3",
             "--set", "tls.selfManaged.renewBeforeDays=400")
        renewed = {name: secret_data(core, name) for name in kept}
        assert renewed["gpu-class-ca"] == before["gpu-class-ca"]
        assert renewed["gpu-class-tls"]["ca.crt"] == ca
        assert renewed["gpu-class-tls"]["tls.crt"] != before["gpu-class-tls"]["tls.crt"]
        client = renewed["gpu-class-extender-client"]
        assert client["ca.crt"] == ca and client["tls.crt"] != before["gpu-class-extender-client"]["tls.crt"]
        assert base64.b64decode(webhook_registration(cluster)["clientConfig"]["caBundle"]) == ca
        assert serve_chart_certificate(cluster, core) == ca
        assert extender_accepts_the_charts_client_certificate(cluster, core, cluster.dir)
        assert placed_types(core, namespace, "after-renewal")[0] == "H100"
    finally:
        core.delete_node("chart-h100")
