"""The Helm chart (deploy/chart/gpu-class): lint, schema, the objects it renders, and that it and the
kustomize manifests render the same install.

helm is built from tests/tools/go.mod (tests/tools/gotools.py). Every values file under
tests/fixtures/chart is rendered with `helm template` and each object validated against the
Kubernetes schemas; then the safety properties tests/test_deploy.py asserts for the kustomize
renders are asserted for these renders, by running the same test functions on them.

One source of truth: the chart does not render deploy/'s files (Helm cannot read outside the chart)
and kustomize cannot run templates, so a test renders both with the same settings and compares every
object, field by field. A difference fails with a diff of the two.
"""

from __future__ import annotations

import base64
import difflib
import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

import local_cluster
import test_deploy as deploy
from test_deploy import CertificateFiles, Obj, all_of, copy_deploy, kustomize, name_of, one_of
import webhook
from tools import gotools
from webhook.core.catalog.profiles import MIG_RESOURCE_PREFIX, SLICES_SUFFIX, STRICT_SCHEDULER

CHART = deploy.DEPLOY / "chart" / "gpu-class"
VERSION = webhook.__version__  # the chart's appVersion, our images' default tag
VALUES_DIR = deploy.REPO / "tests" / "fixtures" / "chart"
RELEASE = "gpu-class"
NAMESPACE = deploy.SYSTEM_NAMESPACE
# Labels Helm's conventions add and kustomize's renders do not carry.
HELM_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "helm.sh/chart")
HASHED_NAME = re.compile(r'"(gpu-class-catalog|gpu-class-scheduler-config)-[a-z0-9]{10}"')


def helm_path() -> Path:
    try:
        return gotools.path_of("helm")
    except gotools.ToolError as e:
        pytest.fail(f"helm is missing and could not be built: {e}", pytrace=False)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(helm_path()), *args], capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{done.stderr}", pytrace=False)
    return done


def template(*args: str, namespace: str = NAMESPACE) -> list[Obj]:
    done = helm("template", RELEASE, str(CHART), "--namespace", namespace, "--kube-version", "1.37.0", *args)
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def values_files() -> list[str]:
    return sorted(p.name for p in VALUES_DIR.glob("*.yaml"))


VALUES_FILES = values_files()


@pytest.fixture(scope="module")
def chart_renders() -> dict[str, list[Obj]]:
    """The chart rendered with its defaults ("defaults") and with each values file."""
    rendered = {"defaults": template()}
    for name in VALUES_FILES:
        rendered[name] = template("--values", str(VALUES_DIR / name))
    return rendered


# --- lint and schema -------------------------------------------------------------------------------


def test_the_values_files_are_there() -> None:
    assert {"cert-manager-full.yaml", "own-secret.yaml", "self-managed-monitoring.yaml"} <= set(VALUES_FILES)


@pytest.mark.parametrize("values", [None, *VALUES_FILES])
def test_helm_lint_strict(values: str | None) -> None:
    args = ["--values", str(VALUES_DIR / values)] if values else []
    done = helm("lint", "--strict", str(CHART), "--kube-version", "1.37.0", *args, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == webhook.__version__


BAD_VALUES = [
    pytest.param(["--set", "webhook.failurePolicy=Open"], "/webhook/failurePolicy", id="failure-policy"),
    pytest.param(["--set", "webhook.timeoutSeconds=60"], "/webhook/timeoutSeconds", id="timeout-over-30"),
    pytest.param(["--set", "replicas=0"], "/replicas", id="no-replicas"),
    pytest.param(["--set", "replica=3"], "replica", id="misspelt-key"),
    pytest.param(["--set", "tls.mode=vault"], "/tls/mode", id="unknown-tls-mode"),
    pytest.param(["--set", "tls.mode=secret"], "/tls/secretName", id="secret-mode-without-a-secret"),
    pytest.param(["--set", "tls.mode=secret", "--set", "tls.secretName=mine", "--set", "tls.caBundle=nonsense"],
                 "/tls/caBundle", id="secret-mode-ca-not-pem"),
    pytest.param(["--set", "backstop.validationActions={Refuse}"], "/backstop/validationActions", id="backstop-action"),
    pytest.param(["--set", "resources.limits.memory=lots"], "/resources/limits/memory", id="bad-quantity"),
    pytest.param(["--set", "tls.certManager.duration=90d"], "/tls/certManager/duration", id="not-a-go-duration"),
    pytest.param(["--set", "webhook.url=http://127.0.0.1:8443"], "/webhook/url", id="webhook-url-not-https"),
    pytest.param(["--set", "catalog.inline=types: [oops"], "catalog.inline is not YAML", id="inline-catalog-not-yaml"),
    pytest.param(["--set", "tls.mode=secret", "--set", "tls.secretName=mine", "--set", "scheduler.extender=true",
                  "--set-string", "tls.caBundle=-----BEGIN CERTIFICATE-----"], "tls.clientSecretName",
                 id="secret-mode-extender-without-a-client-certificate"),
    pytest.param(["--set", "networkPolicy.admissionFrom=everyone"], "/networkPolicy/admissionFrom",
                 id="admission-sources-not-peers"),
    # where and how each component runs
    pytest.param(["--set", "scheduler.nodeSelectors.pool=system"], "'nodeSelectors' not allowed", id="misspelt-component-key"),
    pytest.param(["--set", "upgrader.tolerations[0].opertor=Exists"], "/upgrader/tolerations/0", id="misspelt-toleration"),
    pytest.param(["--set", "labeller.affinity.nodeAfinity.x=y"], "/labeller/affinity", id="misspelt-affinity"),
    pytest.param(["--set", "podLabels.app\\.kubernetes\\.io/name=other"], "/podLabels/app.kubernetes.io~1name",
                 id="webhook-pod-label-of-the-selector"),
    pytest.param(["--set", "scheduler.podLabels.app\\.kubernetes\\.io/component=other"],
                 "/scheduler/podLabels/app.kubernetes.io~1component", id="scheduler-pod-label-of-the-selector"),
    pytest.param(["--set", "upgrader.podLabels.app\\.kubernetes\\.io/name=other"], "/upgrader/podLabels/app.kubernetes.io~1name",
                 id="upgrader-pod-label-of-the-selector"),
    pytest.param(["--set", "labeller.podLabels.app\\.kubernetes\\.io/component=other"],
                 "/labeller/podLabels/app.kubernetes.io~1component", id="labeller-pod-label-of-the-selector"),
    pytest.param(["--set", "scheduler.podAnnotations.checksum/config=0"], "/scheduler/podAnnotations/checksum~1config",
                 id="pod-annotation-of-the-chart"),
    pytest.param(["--set", "scheduler.extraArgs={-v=4}"], "/scheduler/extraArgs/0", id="extra-arg-not-a-flag"),
    pytest.param(["--set", "scheduler.resources.limits.memory=lots"], "/scheduler/resources/limits/memory",
                 id="scheduler-bad-quantity"),
    pytest.param(["--set", "upgrader.priorityClassName=Critical"], "/upgrader/priorityClassName", id="bad-priority-class"),
    pytest.param(["--set", "image.digest=latest"], "/image/digest", id="digest-not-sha256"),
    pytest.param(["--set", "scheduler.image.digests.latest=sha256:" + "a" * 64], "'latest' not allowed",
                 id="scheduler-digest-not-by-minor"),
    pytest.param(["--set", "webhook.workloadFailurePolicy=Open"], "/webhook/workloadFailurePolicy",
                 id="workload-failure-policy"),
    pytest.param(["--set", "monitoring.prometheusRule.runbookBaseURL=wiki/runbooks#top"],
                 "/monitoring/prometheusRule/runbookBaseURL", id="runbook-base-not-a-url"),
]


@pytest.mark.parametrize(("args", "message"), BAD_VALUES)
def test_wrong_values_fail_with_the_key(args: list[str], message: str) -> None:
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args, check=False)
    assert done.returncode != 0, f"helm accepted {args}"
    assert message in done.stderr, done.stderr


# --- every render -----------------------------------------------------------------------------------

RENDERS = ["defaults", *VALUES_FILES]


@pytest.mark.parametrize("version", deploy.KUBERNETES_VERSIONS)
@pytest.mark.parametrize("render", RENDERS)
def test_objects_validate_against_kubernetes_schemas(chart_renders: dict[str, list[Obj]], render: str,
                                                     version: str) -> None:
    problems = []
    for obj in chart_renders[render]:
        if deploy.is_cert_manager(obj) or deploy.is_prometheus_operator(obj):
            continue  # no core schema: test_custom_resources_are_complete
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{name_of(obj)}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{name_of(obj)}: {exc.message}")
    assert problems == []


@pytest.mark.parametrize("render", RENDERS)
def test_custom_resources_are_complete(chart_renders: dict[str, list[Obj]], render: str) -> None:
    from test_monitoring import monitoring_problems

    objects = chart_renders[render]
    problems = [p for o in objects if deploy.is_cert_manager(o) for p in deploy.cert_manager_problems(o, objects)]
    problems += [p for o in objects if deploy.is_prometheus_operator(o) for p in monitoring_problems(o, objects)]
    assert problems == []


# The properties test_deploy.py asserts of every kustomize install, run on the chart's renders. Each
# takes (renders, rel): the chart renders are handed over in test_deploy's Renders shape.
SAFETY_CHECKS: Sequence[Callable[..., None]] = (
    deploy.test_namespaces_are_explicit,
    deploy.test_system_namespaces_never_opt_in,
    deploy.test_pods_in_system_namespace_meet_restricted_standard,
    deploy.test_webhook_replicas_survive_a_node_loss,
    deploy.test_webhook_probes,
    deploy.test_webhook_security_context,
    deploy.test_webhook_resources_and_shutdown,
    deploy.test_webhook_priority_is_admitted,
    deploy.test_webhook_args_name_mounted_files,
    deploy.test_rbac_reads_the_cluster_and_writes_only_its_own_configmaps,
    deploy.test_everyone_signed_in_may_read_the_published_configmap_and_nothing_else,
    deploy.test_service_reaches_the_webhook_port,
    deploy.test_network_policy_keeps_the_extender_port_to_the_scheduler,
    deploy.test_webhook_sees_only_pod_creations,
    deploy.test_backstop_fails_closed_on_pod_creations,
    deploy.test_every_expression_compiles,
)
# What a values file changes on purpose, so that a property of the shipped install does not hold.
NOT_APPLICABLE = {
    # The catalog is the user's own ConfigMap, which the chart does not render.
    ("own-secret.yaml", "test_webhook_args_name_mounted_files"),
    # The webhook writes its certificate files itself, and writes its own Secrets and caBundle:
    # test_webhook_managed_rbac_is_only_its_secrets_and_webhooks holds that install to what it needs instead.
    ("webhook-managed.yaml", "test_webhook_args_name_mounted_files"),
    ("webhook-managed.yaml", "test_rbac_reads_the_cluster_and_writes_only_its_own_configmaps"),
}


@pytest.mark.parametrize("check", SAFETY_CHECKS, ids=lambda f: f.__name__.removeprefix("test_"))
@pytest.mark.parametrize("render", RENDERS)
def test_chart_keeps_the_safety_properties(chart_renders: dict[str, list[Obj]], render: str,
                                           check: Callable[..., None]) -> None:
    if (render, check.__name__) in NOT_APPLICABLE:
        # Stated in NOT_APPLICABLE and checked there to be a real exception: the check must fail.
        with pytest.raises((AssertionError, KeyError)):
            check(({render: chart_renders[render]}, None), render)
        return
    check(({render: chart_renders[render]}, None), render)


# Labels a values file's webhook.namespaceSelector asks for besides the opt-in.
EXTRA_NAMESPACE_LABELS = {"own-secret.yaml": {"team-kind": "ml"}}


def selected_by(objects: Sequence[Obj], labels: Mapping[str, str]) -> set[bool]:
    """Whether the webhook, and the backstop policy where there is one, serve a namespace with these labels."""
    selectors = [deploy.the_webhook(objects)["namespaceSelector"]]
    selectors += [p["spec"]["matchConstraints"]["namespaceSelector"] for p in all_of(objects, "ValidatingAdmissionPolicy")
                  if p["metadata"]["name"] == deploy.BACKSTOP_POLICY]
    return {deploy.selects(s, labels) for s in selectors}


@pytest.mark.parametrize(("namespace", "selected"), deploy.NAMESPACE_CASES)
@pytest.mark.parametrize("render", RENDERS)
def test_namespace_selection(chart_renders: dict[str, list[Obj]], render: str, namespace: Obj,
                             selected: bool) -> None:
    labels = {**namespace["metadata"]["labels"], **EXTRA_NAMESPACE_LABELS.get(render, {})}
    assert selected_by(chart_renders[render], labels) == {selected}


def test_namespace_selector_values_narrow_the_opt_in(chart_renders: dict[str, list[Obj]]) -> None:
    objects = chart_renders["own-secret.yaml"]
    assert selected_by(objects, deploy.OPTED_IN["metadata"]["labels"]) == {False}
    monitoring = deploy.make_namespace("monitoring", {"gpu-class.io/inject": "enabled", "team-kind": "ml"})
    assert selected_by(objects, monitoring["metadata"]["labels"]) == {False}, "excludedNamespaces"


def test_another_release_namespace_is_never_served() -> None:
    objects = template(namespace="gpu-ops")
    webhook = deploy.the_webhook(objects)
    own = deploy.make_namespace("gpu-ops", {"gpu-class.io/inject": "enabled"})
    assert not deploy.selects(webhook["namespaceSelector"], own["metadata"]["labels"])
    assert webhook["clientConfig"]["service"]["namespace"] == "gpu-ops"
    # everything in the release's namespace, but the scheduler's reader of kube-system's
    # extension-apiserver-authentication (kube-scheduler authenticates its own HTTPS port by delegation)
    elsewhere = {deploy.name_of(o) for o in objects if o["metadata"].get("namespace") not in (None, "gpu-ops")}
    assert elsewhere == {"RoleBinding kube-system/gpu-class-scheduler-extension-apiserver-authentication-reader"}


@pytest.mark.parametrize("case", deploy.MATCH_CASES)
def test_match_conditions_as_in_deploy(chart_renders: dict[str, list[Obj]], case: deploy.MatchCase) -> None:
    assert deploy.webhook_is_called(deploy.the_webhook(chart_renders["defaults"]), case.pod, deploy.OPTED_IN) is case.sent


def test_network_policy_follows_the_values() -> None:
    peers = [{"ipBlock": {"cidr": "10.0.0.0/24"}}, {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    objects = template("--set-json", f"networkPolicy.admissionFrom={json.dumps(peers)}")
    policy = one_of(objects, "NetworkPolicy", "gpu-class", NAMESPACE)
    container = deploy.webhook_container(deploy.webhook_deployment(objects))
    assert deploy.admitted_sources(policy, container, deploy.CONTAINER_PORT) == [peers]
    assert deploy.admitted_sources(policy, container, deploy.EXTENDER_PORT)[0] != peers
    assert all_of(template("--set", "networkPolicy.enabled=false"), "NetworkPolicy") == []


def test_webhook_settings_follow_the_values() -> None:
    objects = template("--set", "webhook.failurePolicy=Fail", "--set", "webhook.timeoutSeconds=9",
                       "--set", "backstop.enabled=false", "--set", "replicas=3", "--set", "priorityClassName=")
    webhook = deploy.the_webhook(objects)
    assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Fail", 9)
    assert all_of(objects, "ValidatingAdmissionPolicy") == all_of(objects, "ValidatingAdmissionPolicyBinding") == []
    spec = deploy.webhook_deployment(objects)["spec"]
    assert spec["replicas"] == 3
    assert "priorityClassName" not in spec["template"]["spec"]
    assert all_of(objects, "ResourceQuota") == [], "the quota exists only to admit system-cluster-critical"


SHIPPED_CATALOG = (CHART / "files" / "catalog.yaml").read_text()
# The shipped catalog with whole GPUs requested as another resource: its MIG and AMD types keep theirs.
ACCEL_CATALOG = SHIPPED_CATALOG.replace("gpuResource: nvidia.com/gpu", "gpuResource: example.com/accel")


@dataclass(frozen=True)
class ResourcesCase:
    values: Mapping[str, Any]
    catalog: str | None  # the catalog whose resources the chart must serve, or None: `named`
    not_sent: tuple[str, ...]
    named: tuple[str, ...] = ()

    def resources(self) -> tuple[str, ...]:
        """What the extender manages, in this order; the Pods the webhook is sent."""
        from webhook.core.catalog.loading import load_catalog_text

        return load_catalog_text(self.catalog).resources if self.catalog is not None else self.named


RESOURCES_CASES = [
    pytest.param(ResourcesCase({}, SHIPPED_CATALOG, ("example.com/accel", "nvidia.com/gpu.shared")),
                 id="shipped-catalog"),
    pytest.param(ResourcesCase({"catalog": {"inline": ACCEL_CATALOG}}, ACCEL_CATALOG, ("nvidia.com/gpu",)),
                 id="inline-catalog-other-gpu-resource"),
    pytest.param(ResourcesCase({"catalog": {"existingConfigMap": "mine"}}, SHIPPED_CATALOG, ("example.com/accel",)),
                 id="own-configmap-resources-unset-are-the-shipped"),
    pytest.param(ResourcesCase({"catalog": {"existingConfigMap": "mine", "resources": ["example.com/accel", "amd.com/gpu"]}},
                               None, ("nvidia.com/gpu", "nvidia.com/mig-1g.5gb"), ("example.com/accel", "amd.com/gpu")),
                 id="own-configmap-resources-named"),
]


@pytest.mark.parametrize("case", RESOURCES_CASES)
def test_catalog_resources_reach_the_expressions_and_the_scheduler(tmp_path: Path, case: ResourcesCase) -> None:
    """A Pod asking for any resource the catalog's types are requested as is sent to the webhook,
    checked by the backstop and sent to the extender; one asking for another resource is not."""
    resources = case.resources()
    (tmp_path / "values.yaml").write_text(yaml.safe_dump({**case.values, "scheduler": {"extender": True}}))
    objects = template("--values", str(tmp_path / "values.yaml"))
    if "inline" in case.values.get("catalog", {}):
        configmap = one_of(objects, "ConfigMap", "gpu-class-catalog", NAMESPACE)
        assert configmap["data"]["catalog.yaml"] == case.values["catalog"]["inline"]
    webhook = deploy.the_webhook(objects)
    policy, binding = deploy.policy_and_binding(objects)
    # Every MIG profile is sent, as deploy/base/webhook.yaml sends it, whether the catalog has it or not.
    sent = [*resources, *(["nvidia.com/mig-9g.99gb"] if any("/mig-" in r for r in resources) else [])]
    for resource, expected in [*((r, True) for r in sent), *((r, False) for r in case.not_sent)]:
        for part in ("limits", "requests"):
            pod = deploy.make_pod(containers=[deploy.make_container(**{part: {resource: "1"}})])
            assert deploy.webhook_is_called(webhook, pod, deploy.OPTED_IN) is expected, (resource, part)
            outcome = deploy.backstop_outcome(policy, binding, pod, deploy.OPTED_IN)
            assert outcome == ("refused" if expected else "not-matched"), (resource, part)
    config = yaml.safe_load(one_of(objects, "ConfigMap", "gpu-class-scheduler-config", NAMESPACE)["data"]["config.yaml"])
    (extender,) = config["extenders"]
    assert extender["managedResources"] == [{"name": r, "ignoredByScheduler": False} for r in resources]
    # every resource is scored by the profiles of its kind (whole GPUs or MIG slices), three of each kind the
    # catalog has, and only there
    kinds = {suffix: [r for r in resources if r.startswith(MIG_RESOURCE_PREFIX) == (suffix == SLICES_SUFFIX)]
             for suffix in ("", SLICES_SUFFIX)}
    names = [p["schedulerName"] for p in config["profiles"]]
    assert sorted(names) == sorted(STRICT_SCHEDULER + s + kind for kind, of_kind in kinds.items() if of_kind
                                   for s in ("", "-binpack", "-balanced"))
    for profile in config["profiles"]:
        (fit,) = [c["args"] for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
        kind = SLICES_SUFFIX if profile["schedulerName"].endswith(SLICES_SUFFIX) else ""
        assert fit["scoringStrategy"]["resources"] == [{"name": r, "weight": 1} for r in kinds[kind]]


def test_shipped_catalog_is_deploys() -> None:
    assert (CHART / "files" / "catalog.yaml").read_bytes() == (deploy.DEPLOY / deploy.BASE / "catalog.yaml").read_bytes()


def test_self_managed_certificate_verifies_for_the_service(chart_renders: dict[str, list[Obj]]) -> None:
    objects = chart_renders["defaults"]
    secret = one_of(objects, "Secret", deploy.TLS_SECRET, NAMESPACE)
    client = one_of(objects, "Secret", deploy.CLIENT_SECRET, NAMESPACE)
    files = CertificateFiles(*(base64.b64decode(secret["data"][k]) for k in ("ca.crt", "tls.crt", "tls.key")),
                             *(base64.b64decode(client["data"][k]) for k in ("tls.crt", "tls.key")))
    assert deploy.self_managed_problems(objects, files) == []
    assert deploy.client_certificate_problems(objects, files) == []
    ca_secret = one_of(objects, "Secret", "gpu-class-ca", NAMESPACE)
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_secret["data"]["tls.crt"]))
    assert ca.public_bytes(serialization.Encoding.PEM) == files.ca_pem
    # The CA key is kept for renewals, but no Pod mounts it.
    for owner, spec in deploy.pod_templates(objects):
        for container in spec["containers"]:
            secrets = {name for kind, name, _ in deploy.mounted_files(spec, container).values() if kind == "Secret"}
            assert "gpu-class-ca" not in secrets, name_of(owner)


def test_cert_manager_issues_and_injects(chart_renders: dict[str, list[Obj]]) -> None:
    deploy.test_cert_manager_issues_and_injects_the_serving_certificate(
        ({deploy.CERT_MANAGER: chart_renders["cert-manager-full.yaml"]}, None))  # type: ignore[arg-type]


# --- one source of truth: the chart and deploy/ render the same install --------------------------


def normalised(obj: Obj) -> Obj:
    """What both renders must agree on: Helm's labels, pod template checksums and kustomize's name
    hashes are each one tool's bookkeeping."""
    obj = json.loads(HASHED_NAME.sub(r'"\1"', json.dumps(obj)))
    # kustomize wraps base64 at 76 columns, Helm does not; the API server reads both alike.
    for hook in obj.get("webhooks") or []:
        if "caBundle" in hook["clientConfig"]:
            hook["clientConfig"]["caBundle"] = "".join(hook["clientConfig"]["caBundle"].split())
    labels = obj["metadata"].get("labels") or {}
    for key in HELM_LABELS:
        labels.pop(key, None)
    template_meta = deploy.dig(obj, "spec", "template", "metadata")
    if isinstance(template_meta, dict):
        annotations = {k: v for k, v in (template_meta.get("annotations") or {}).items() if not k.startswith("checksum/")}
        template_meta.pop("annotations", None)
        if annotations:
            template_meta["annotations"] = annotations
    return obj


def keyed(objects: Sequence[Obj]) -> dict[str, Obj]:
    return {name_of(n): n for n in map(normalised, objects)}


def kustomize_install(tmp: Path, files: CertificateFiles, resources: Sequence[str], components: Sequence[str]) -> list[Obj]:
    root = copy_deploy(tmp)
    files.write(root / deploy.SELF_MANAGED / "certs")
    work = root / "install"
    work.mkdir()
    (work / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"../{r}" for r in resources], "components": [f"../{c}" for c in components],
    }))
    rendered = kustomize(work)
    if isinstance(rendered, str):
        pytest.fail(f"kubectl kustomize failed:\n{rendered}")
    return rendered


SAME_INSTALLS = [
    pytest.param(
        [deploy.SELF_MANAGED, "labeller"], ["components/monitoring"],
        ["--set", "tls.mode=secret", "--set", f"tls.secretName={deploy.TLS_SECRET}",
         "--set", "labeller.enabled=true",
         "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
         "--set", "monitoring.dashboard.enabled=true"],
        # The namespace: Helm installs into one that exists. The Secrets: the user's, in mode secret.
        {f"Namespace {NAMESPACE}", f"Secret {NAMESPACE}/{deploy.TLS_SECRET}", f"Secret {NAMESPACE}/{deploy.CLIENT_SECRET}",
         # the component cannot know whether deploy/upgrader is applied; the chart renders it with upgrader.enabled
         f"ServiceMonitor {NAMESPACE}/gpu-class-upgrader"},
        id="self-managed-labeller-monitoring",
    ),
    pytest.param(
        [deploy.CERT_MANAGER], [], ["--set", "tls.mode=cert-manager"], {f"Namespace {NAMESPACE}"},
        id="cert-manager",
    ),
    pytest.param(
        [deploy.CERT_MANAGER], [deploy.EXTENDER], ["--set", "tls.mode=cert-manager", "--set", "scheduler.extender=true"],
        {f"Namespace {NAMESPACE}"}, id="cert-manager-scheduler-extender",
    ),
    pytest.param(
        # The component's tag is fixed; the chart's follows the cluster (test_scheduler_follows_the_clusters_version).
        [deploy.CERT_MANAGER], [deploy.STOCK], ["--set", "tls.mode=cert-manager", "--set", "scheduler.stockBinary=true",
                                                "--set", "scheduler.image.tag=v1.33.13"],
        {f"Namespace {NAMESPACE}"}, id="cert-manager-stock-scheduler",
    ),
    pytest.param(
        [deploy.CERT_MANAGER, "upgrader"], [], ["--set", "tls.mode=cert-manager", "--set", "upgrader.enabled=true"],
        {f"Namespace {NAMESPACE}"}, id="cert-manager-upgrader",
    ),
    pytest.param(
        [deploy.CERT_MANAGER], [deploy.LABEL_GUARD], ["--set", "tls.mode=cert-manager", "--set", "labelGuard.enabled=true"],
        {f"Namespace {NAMESPACE}"}, id="cert-manager-label-guard",
    ),
    pytest.param(
        [deploy.CERT_MANAGER], [deploy.WITHOUT_STRICT], ["--set", "tls.mode=cert-manager", "--set", "scheduler.enabled=false"],
        {f"Namespace {NAMESPACE}"}, id="cert-manager-without-strict-scheduler",
    ),
]


@pytest.mark.parametrize(("resources", "components", "values", "only_in_kustomize"), SAME_INSTALLS)
def test_chart_and_kustomize_render_the_same_install(tmp_path: Path, resources: list[str], components: list[str],
                                                      values: list[str], only_in_kustomize: set[str]) -> None:
    files = deploy.make_test_certificates()
    from_kustomize = keyed(kustomize_install(tmp_path, files, resources, components))
    from_chart = keyed(template(*values, "--set-string", f"tls.caBundle={files.ca_pem.decode()}"))
    assert set(from_kustomize) - set(from_chart) == only_in_kustomize
    assert set(from_chart) - set(from_kustomize) == set()
    diffs = []
    for key, chart_obj in sorted(from_chart.items()):
        if chart_obj != from_kustomize[key]:
            diffs.append("\n".join(difflib.unified_diff(
                yaml.safe_dump(from_kustomize[key], sort_keys=True).splitlines(),
                yaml.safe_dump(chart_obj, sort_keys=True).splitlines(),
                f"kustomize {key}", f"chart {key}", lineterm="")))
    assert not diffs, "\n\n".join(diffs)


@pytest.mark.parametrize(("groups", "outcome"), [
    pytest.param(["system:masters", "platform-admins"], "not-matched", id="a-named-group"),
    pytest.param(["system:masters"], "refused", id="not-named"),
])
def test_label_guard_lets_the_named_groups_set_namespace_policy(groups: list[str], outcome: str) -> None:
    objects = template("--set", "labelGuard.enabled=true", "--set", f"labelGuard.namespaceAdminGroups={{{','.join(groups)}}}")
    policy, binding = deploy.policy_and_binding(objects, deploy.NAMESPACE_POLICY)
    case = deploy.GuardCase(deploy.NAMESPACE_POLICY, deploy.OPTED_IN,
                            deploy.relabelled(deploy.OPTED_IN, labels={"gpu-class.io/inject": None}),
                            {"username": "ops@example.com", "groups": ["platform-admins", "system:authenticated"]},
                            "refused")
    assert deploy.policy_outcome(policy, binding, deploy.guard_activation(case)) == outcome


def test_label_guard_is_off_by_default(chart_renders: dict[str, list[Obj]]) -> None:
    """The default install's policies: the backstop and the tenant boundary's, no label guard."""
    assert {p["metadata"]["name"] for p in all_of(chart_renders["defaults"], "ValidatingAdmissionPolicy")} == {
        deploy.BACKSTOP_POLICY, "gpu-class.io-boundary", "gpu-class.io-boundary-claims", "gpu-class.io-queued-gpus"}


@pytest.mark.parametrize("name", ["prometheusrule.yaml", "gpu-class-dashboard.json"])
def test_monitoring_files_are_the_components(name: str) -> None:
    assert (CHART / "files" / name).read_bytes() == (deploy.DEPLOY / "components" / "monitoring" / name).read_bytes()


def test_dashboard_configmap_may_go_to_grafanas_namespace() -> None:
    objects = template("--set", "monitoring.dashboard.enabled=true", "--set", "monitoring.dashboard.namespace=grafana")
    dashboard = one_of(objects, "ConfigMap", "gpu-class-dashboard", "grafana")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpu-class-dashboard.json"])["uid"] == "gpu-class"


def test_values_reach_the_deployment(chart_renders: dict[str, list[Obj]]) -> None:
    values = yaml.safe_load((VALUES_DIR / "own-secret.yaml").read_text())
    objects = chart_renders["own-secret.yaml"]
    deployment = deploy.webhook_deployment(objects)
    container = deploy.webhook_container(deployment)
    assert container["image"] == f"{values['image']['repository']}:{values['image']['tag']}"
    assert container["resources"] == values["resources"]
    assert deployment["spec"]["replicas"] == values["replicas"]
    files = deploy.mounted_files(deployment["spec"]["template"]["spec"], container)
    assert files["/etc/gpu-class/catalog.yaml"] == ("ConfigMap", values["catalog"]["existingConfigMap"], "catalog.yaml")
    assert files["/etc/gpu-class/tls/tls.crt"] == ("Secret", values["tls"]["secretName"], "tls.crt")
    ca = base64.b64decode(deploy.the_webhook(objects)["clientConfig"]["caBundle"]).decode()
    assert ca == values["tls"]["caBundle"]
    assert not [o for o in objects if o["kind"] == "Secret"], "mode secret: the chart makes no Secret"


def objects_by_kind(objects: Sequence[Obj]) -> Mapping[str, list[str]]:
    found: dict[str, list[str]] = {}
    for o in objects:
        found.setdefault(o["kind"], []).append(o["metadata"]["name"])
    return found


def test_optional_parts_are_off_by_default(chart_renders: dict[str, list[Obj]]) -> None:
    kinds = objects_by_kind(chart_renders["defaults"])
    assert "DaemonSet" not in kinds and "ServiceMonitor" not in kinds and "PrometheusRule" not in kinds
    # the strict path is not optional: the default install keeps the promise
    assert kinds["Deployment"] == ["gpu-class", "gpu-class-scheduler"]
    assert "Certificate" not in kinds


SCHEDULER_BINARIES = [
    pytest.param([], f"gpu-class-scheduler:{VERSION}", "gpu-class-scheduler", True, id="defaults-our-binary"),
    pytest.param(["--set", "scheduler.image.repository=mirror.example/gpu-class-scheduler"],
                 f"mirror.example/gpu-class-scheduler:{VERSION}", "gpu-class-scheduler", True, id="our-binary-mirrored"),
    # the cluster's release: template() renders for 1.37.0
    pytest.param(["--set", "scheduler.stockBinary=true"], "registry.k8s.io/kube-scheduler:v1.37.0", "kube-scheduler",
                 False, id="stock-binary"),
    pytest.param(["--set", "scheduler.stockBinary=true", "--set", "scheduler.extender=true"],
                 "registry.k8s.io/kube-scheduler:v1.37.0", "kube-scheduler", False, id="stock-binary-extender"),
    pytest.param(["--set", "scheduler.stockBinary=true", "--set", "scheduler.image.repository=mirror.example/kube-scheduler",
                  "--set", "scheduler.image.tag=v1.34.3"], "mirror.example/kube-scheduler:v1.34.3", "kube-scheduler",
                 False, id="stock-binary-own-image"),
]


@pytest.mark.parametrize(("values", "image", "command", "label_index"), SCHEDULER_BINARIES)
def test_scheduler_binary_follows_the_values(values: list[str], image: str, command: str, label_index: bool) -> None:
    """Our binary by default, its profiles narrowed by NodeLabelIndex; with scheduler.stockBinary the stock
    kube-scheduler, whose profiles must not name the plugin it does not have (it would refuse to start)."""
    objects = template(*values)
    (container,) = one_of(objects, "Deployment", "gpu-class-scheduler", NAMESPACE)["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["command"]) == (image, [command, "--config=/etc/gpu-class-scheduler/config.yaml"])
    config = yaml.safe_load(one_of(objects, "ConfigMap", "gpu-class-scheduler-config", NAMESPACE)["data"]["config.yaml"])
    assert ("extenders" in config) is ("scheduler.extender=true" in values)
    for profile in config["profiles"]:
        pre_filter = [p["name"] for p in (profile["plugins"].get("preFilter") or {}).get("enabled") or []]
        assert pre_filter == (["NodeLabelIndex"] if label_index else []), profile["schedulerName"]


SKEW_CASES = [
    pytest.param("1.37.2", [], f"gpu-class-scheduler:{VERSION}", id="our-build-on-its-minor"),
    pytest.param("1.38.0", [], f"gpu-class-scheduler:{VERSION}", id="our-build-on-a-newer-cluster"),
    pytest.param("1.36.3", [], f"gpu-class-scheduler:{VERSION}-k8s1.36", id="the-build-for-an-older-minor"),
    pytest.param("1.33.9", [], f"gpu-class-scheduler:{VERSION}-k8s1.33", id="the-build-for-the-oldest-minor"),
    pytest.param("1.34.2", ["--set", "scheduler.image.tag=1.2.3"], "gpu-class-scheduler:1.2.3-k8s1.34",
                 id="the-build-for-an-older-minor-of-another-release"),
    pytest.param("1.34.2", ["--set", "scheduler.olderMinors={1.35,1.36}"], None, id="older-than-every-build-refused"),
    pytest.param("1.35.4", ["--set", "scheduler.stockBinary=true"], "registry.k8s.io/kube-scheduler:v1.35.4",
                 id="stock-binary-of-the-clusters-release"),
    pytest.param("1.35.4", ["--set", "scheduler.kubernetesMinor=1.35", "--set", "scheduler.image.tag=1.35-build"],
                 "gpu-class-scheduler:1.35-build", id="a-build-for-the-clusters-minor"),
    pytest.param("1.34.1", ["--set", "scheduler.enabled=false"], "", id="without-the-strict-path"),
]


@pytest.mark.parametrize(("kube_version", "values", "image"), SKEW_CASES)
def test_scheduler_follows_the_clusters_version(kube_version: str, values: list[str], image: str | None) -> None:
    """A kube-scheduler may not be newer than the API server: our build only on its minor or newer, the stock
    binary of the cluster's own release."""
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version, *values,
                check=False)
    if image is None:
        assert done.returncode != 0 and "scheduler.stockBinary=true" in done.stderr, done.stderr
        assert f"this cluster's API server ({'.'.join(kube_version.split('.')[:2])})" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    deployments = [o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] == "Deployment"
                   and o["metadata"]["name"] == "gpu-class-scheduler"]
    assert [c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]] == (
        [image] if image else [])


def test_kubernetes_minor_is_the_one_the_scheduler_is_built_on() -> None:
    go_mod = (deploy.DEPLOY / "scheduler" / "plugin" / "go.mod").read_text()
    (pinned,) = re.findall(r"^\s*k8s\.io/kubernetes v(\d+\.\d+)\.\d+", go_mod, re.M)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["scheduler"]["kubernetesMinor"] == pinned
    assert values["scheduler"]["olderMinors"] == local_cluster.older_minors()


def test_image_pull_secrets_reach_the_webhook_and_the_scheduler(chart_renders: dict[str, list[Obj]]) -> None:
    """gpu-class-scheduler's image comes from the same registry as the webhook's."""
    values = yaml.safe_load((VALUES_DIR / "self-managed-monitoring.yaml").read_text())
    objects = chart_renders["self-managed-monitoring.yaml"]
    for name in ("gpu-class", "gpu-class-scheduler"):
        spec = one_of(objects, "Deployment", name, NAMESPACE)["spec"]["template"]["spec"]
        assert spec["imagePullSecrets"] == values["imagePullSecrets"], name


# --- where and how each component runs: every value reaches its own object, and no other ----------

# Every component on, and nothing that differs between two renders of the same values (cert-manager
# issues the certificates), so that a render differs from this one only by what a value changed.
PLACEMENT_BASE = {"tls": {"mode": "cert-manager"}, "upgrader": {"enabled": True}, "labeller": {"enabled": True},
                  "monitoring": {"prometheusRule": {"enabled": True}}}
WEBHOOK = f"Deployment {NAMESPACE}/gpu-class"
SCHEDULER = f"Deployment {NAMESPACE}/gpu-class-scheduler"
UPGRADER = f"Deployment {NAMESPACE}/gpu-class-upgrader"
LABELLER = f"DaemonSet {NAMESPACE}/gpu-class-labeller"
QUOTA = f"ResourceQuota {NAMESPACE}/gpu-class-critical-pods"
# Each component's values: the webhook's at the top level, the others' in their section.
COMPONENTS = {WEBHOOK: None, SCHEDULER: "scheduler", UPGRADER: "upgrader", LABELLER: "labeller"}
DIGEST = "sha256:" + "a" * 64
OTHER_DIGEST = "sha256:" + "b" * 64
THIRD_DIGEST = "sha256:" + "c" * 64

Change = Callable[[dict[str, Obj]], None]


def values_at(section: str | None, key: str, value: Any) -> dict[str, Any]:
    return {key: value} if section is None else {section: {key: value}}


def pod_spec(objects: Mapping[str, Obj], owner: str) -> Obj:
    spec: Obj = objects[owner]["spec"]["template"]["spec"]
    return spec


def merged(owner: str, path: tuple[str, ...], value: Mapping[str, Any]) -> Change:
    """The map at `path` of the pod template gains `value`'s keys (made where there was none)."""
    def change(objects: dict[str, Obj]) -> None:
        target = objects[owner]["spec"]["template"]
        for step in path:
            target = target.setdefault(step, {})
        target.update(value)
    return change


def set_in_pod(owner: str, key: str, value: Any) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        pod_spec(objects, owner)[key] = value
    return change


def set_in_container(owners: Sequence[str], key: str, value: Any) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        for owner in owners:
            pod_spec(objects, owner)["containers"][0][key] = value
    return change


def appended_to_container(owner: str, key: str, items: Sequence[str]) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        pod_spec(objects, owner)["containers"][0][key] += list(items)
    return change


def failure_policies(configuration: str, policy: str) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        for hook in objects[f"MutatingWebhookConfiguration {configuration}"]["webhooks"]:
            hook["failurePolicy"] = policy
    return change


def runbooks_at(page: str) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        for group in objects[f"PrometheusRule {NAMESPACE}/gpu-class"]["spec"]["groups"]:
            for rule in group["rules"]:
                anchor = rule["annotations"]["runbook_url"].split("#")[1]
                rule["annotations"]["runbook_url"] = f"{page}#{anchor}"
    return change


def all_changes(*changes: Change) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        for one in changes:
            one(objects)
    return change


def without(key: str) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        del objects[key]
    return change


def removed_from_pod(owner: str, key: str) -> Change:
    def change(objects: dict[str, Obj]) -> None:
        del pod_spec(objects, owner)[key]
    return change


TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu-class", "effect": "NoSchedule"}
ANTI_AFFINITY = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
    "weight": 10, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                                      "labelSelector": {"matchLabels": {"example.com/spread": "me"}}}}]}}
# Every key given, so that none of the chart's defaults is merged in.
RESOURCES = {"requests": {"cpu": "2", "memory": "3Gi"}, "limits": {"cpu": "4", "memory": "6Gi"}}


def component_cases() -> list[Any]:
    """The same keys for each component, each landing in that component's pod template alone."""
    cases = []
    for owner, section in COMPONENTS.items():
        name = owner.rsplit("/", 1)[1]
        args = "command" if owner == SCHEDULER else "args"
        table: list[tuple[str, Any, Change]] = [
            # merged with the kubernetes.io/os: linux of the defaults (the labeller has none)
            ("nodeSelector", {"pool": "system"}, merged(owner, ("spec", "nodeSelector"), {"pool": "system"})),
            ("tolerations", [TOLERATION], set_in_pod(owner, "tolerations", [TOLERATION])),
            # the labeller keeps its GPU-node nodeAffinity beside it
            ("affinity", ANTI_AFFINITY, merged(owner, ("spec", "affinity"), ANTI_AFFINITY)),
            ("podAnnotations", {"example.com/team": "infra"},
             merged(owner, ("metadata", "annotations"), {"example.com/team": "infra"})),
            ("podLabels", {"example.com/team": "infra"}, merged(owner, ("metadata", "labels"), {"example.com/team": "infra"})),
            ("extraArgs", ["--example-flag=1"], appended_to_container(owner, args, ["--example-flag=1"])),
            ("resources", RESOURCES, set_in_container([owner], "resources", RESOURCES)),
        ]
        if owner != WEBHOOK:  # the webhook's is the scheduler's too: PRIORITY_CASES
            table.append(("priorityClassName", "gpu-class-infra", set_in_pod(owner, "priorityClassName", "gpu-class-infra")))
        cases += [pytest.param(values_at(section, key, value), change, id=f"{name}-{key}") for key, value, change in table]
    return cases


PLACEMENT_CASES = [
    *component_cases(),
    pytest.param({"priorityClassName": "gpu-class-infra"},
                 all_changes(set_in_pod(WEBHOOK, "priorityClassName", "gpu-class-infra"),
                             set_in_pod(SCHEDULER, "priorityClassName", "gpu-class-infra"), without(QUOTA)),
                 id="webhook-priority-class-is-the-schedulers-unless-it-has-one"),
    pytest.param({"scheduler": {"priorityClassName": ""}},
                 removed_from_pod(SCHEDULER, "priorityClassName"),
                 id="scheduler-without-priority-class"),
    pytest.param({"image": {"digest": DIGEST, "tag": "9.9.9"}},
                 set_in_container([WEBHOOK, UPGRADER, LABELLER], "image", f"gpu-class@{DIGEST}"),
                 id="image-digest-for-every-pod-of-the-webhook-image"),
    pytest.param({"scheduler": {"image": {"digests": {"1.37": DIGEST, "1.36": OTHER_DIGEST}}}},
                 set_in_container([SCHEDULER], "image", f"gpu-class-scheduler@{DIGEST}"), id="scheduler-digests"),
    pytest.param({"webhook": {"workloadFailurePolicy": "Fail"}}, failure_policies("gpu-class.io-workloads", "Fail"),
                 id="workload-failure-policy-alone"),
    pytest.param({"webhook": {"failurePolicy": "Fail"}},
                 all_changes(failure_policies("gpu-class.io", "Fail"), failure_policies("gpu-class.io-workloads", "Fail")),
                 id="workload-failure-policy-follows-the-pods-when-empty"),
    pytest.param({"webhook": {"failurePolicy": "Fail", "workloadFailurePolicy": "Ignore"}},
                 failure_policies("gpu-class.io", "Fail"), id="pod-failure-policy-alone"),
    pytest.param({"monitoring": {"prometheusRule": {"runbookBaseURL": "https://wiki.example.com/gpu-class/runbooks"}}},
                 runbooks_at("https://wiki.example.com/gpu-class/runbooks"), id="runbook-base-url"),
]


def placement_render(tmp_path: Path, values: Mapping[str, Any], *args: str) -> dict[str, Obj]:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(PLACEMENT_BASE))
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(dict(values)))
    return keyed(template("--values", str(tmp_path / "base.yaml"), "--values", str(tmp_path / "case.yaml"), *args))


def render_diffs(expected: Mapping[str, Obj], rendered: Mapping[str, Obj]) -> list[str]:
    return ["\n".join(difflib.unified_diff(
        yaml.safe_dump(expected.get(key), sort_keys=True).splitlines(),
        yaml.safe_dump(rendered.get(key), sort_keys=True).splitlines(), f"expected {key}", f"rendered {key}", lineterm=""))
        for key in sorted(set(expected) | set(rendered)) if expected.get(key) != rendered.get(key)]


@pytest.mark.parametrize(("values", "change"), PLACEMENT_CASES)
def test_each_value_reaches_its_place_and_no_other(tmp_path: Path, values: Mapping[str, Any], change: Change) -> None:
    """The render with the value is the default render with exactly `change` made: the value lands where
    it should (tolerations of the scheduler in its pod spec), and nowhere else."""
    expected = placement_render(tmp_path, {})
    change(expected)
    diffs = render_diffs(expected, placement_render(tmp_path, values))
    assert not diffs, "\n\n".join(diffs)


@pytest.mark.parametrize(("values", "quota"), [
    pytest.param({}, True, id="defaults"),
    pytest.param({"priorityClassName": "", "scheduler": {"priorityClassName": "system-cluster-critical"}}, True,
                 id="the-scheduler-alone-at-the-class"),
    pytest.param({"priorityClassName": "", "upgrader": {"enabled": True, "priorityClassName": "system-cluster-critical"}},
                 True, id="the-upgrader-alone-at-the-class"),
    pytest.param({"priorityClassName": "", "upgrader": {"priorityClassName": "system-cluster-critical"}}, False,
                 id="a-component-not-installed"),
    pytest.param({"priorityClassName": "gpu-class-infra"}, False, id="another-class"),
])
def test_quota_admits_the_class_wherever_a_component_uses_it(tmp_path: Path, values: Mapping[str, Any],
                                                               quota: bool) -> None:
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(dict(values)))
    objects = template("--values", str(tmp_path / "values.yaml"))
    assert [name_of(q) for q in all_of(objects, "ResourceQuota")] == ([QUOTA] if quota else [])


@pytest.mark.parametrize("owner", list(COMPONENTS))
def test_pod_labels_never_reach_the_selector(tmp_path: Path, owner: str) -> None:
    """The schema refuses the selector's labels in podLabels (BAD_VALUES); rendered without it, they are
    dropped, so a Pod never leaves its own Deployment's or DaemonSet's selector."""
    forged = {"app.kubernetes.io/name": "other", "app.kubernetes.io/component": "other", "example.com/team": "infra"}
    workload = placement_render(tmp_path, values_at(COMPONENTS[owner], "podLabels", forged), "--skip-schema-validation")[owner]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert labels == {**workload["spec"]["selector"]["matchLabels"], "example.com/team": "infra"}


SCHEDULER_DIGESTS = {"1.37": DIGEST, "1.36": OTHER_DIGEST}
SCHEDULER_DIGEST_CASES = [
    pytest.param("1.37.2", {}, f"gpu-class-scheduler@{DIGEST}", id="the-build-of-its-minor"),
    pytest.param("1.38.0", {}, f"gpu-class-scheduler@{DIGEST}", id="a-newer-cluster-runs-the-newest-build"),
    pytest.param("1.36.3", {}, f"gpu-class-scheduler@{OTHER_DIGEST}", id="an-older-minors-build-without-suffix"),
    pytest.param("1.36.3", {"image": {"tag": "1.2.3"}}, f"gpu-class-scheduler@{OTHER_DIGEST}", id="the-tag-unused"),
    pytest.param("1.37.0", {"image": {"repository": "mirror.example/gpu-class-scheduler"}},
                 f"mirror.example/gpu-class-scheduler@{DIGEST}", id="mirrored"),
    pytest.param("1.35.4", {}, None, id="no-digest-for-the-clusters-build-refused"),
    pytest.param("1.35.4", {"stockBinary": True, "image": {"digests": {"1.35": THIRD_DIGEST}}},
                 f"registry.k8s.io/kube-scheduler@{THIRD_DIGEST}", id="stock-binary-by-the-clusters-minor"),
]


@pytest.mark.parametrize(("kube_version", "scheduler", "image"), SCHEDULER_DIGEST_CASES)
def test_scheduler_digest_follows_the_minor_of_its_build(tmp_path: Path, kube_version: str,
                                                         scheduler: Mapping[str, Any], image: str | None) -> None:
    """Each minor's build is an image of its own: scheduler.image.digests names each by its minor, and the
    one of the build the cluster gets is pulled as repository@digest, without the -k8s suffix of its tag."""
    values = {"scheduler": {**scheduler, "image": {"digests": SCHEDULER_DIGESTS, **scheduler.get("image", {})}}}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version,
                "--values", str(tmp_path / "values.yaml"), check=False)
    if image is None:
        assert done.returncode != 0
        assert 'scheduler.image.digests has no digest for Kubernetes 1.35' in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    (container,) = pod_spec({SCHEDULER: one_of(objects, "Deployment", "gpu-class-scheduler", NAMESPACE)}, SCHEDULER)["containers"]
    assert container["image"] == image


# --- tls.mode webhook-managed: the same render every time, nothing secret in it ---------------------


def test_webhook_managed_renders_the_same_every_time_and_no_key_material() -> None:
    args = ("--values", str(VALUES_DIR / "webhook-managed.yaml"))
    first = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.37.0", *args).stdout
    second = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.37.0", *args).stdout
    assert first == second
    assert "PRIVATE KEY" not in first and "CERTIFICATE" not in first
    objects = [o for o in yaml.safe_load_all(first) if o]
    assert all_of(objects, "Secret") == []
    for configuration in all_of(objects, "MutatingWebhookConfiguration"):
        for webhook_ in configuration["webhooks"]:
            # the webhook writes it; a rendered value would be a diff on every sync
            assert "caBundle" not in webhook_["clientConfig"], webhook_["name"]
    # the self-managed default, by contrast, makes a new CA on each render (no cluster to look up)
    default = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.37.0").stdout
    assert default != helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", "1.37.0").stdout


def _rules_of_the_webhook(objects: Sequence[Obj]) -> list[Obj]:
    """Every rule bound to the webhook's service account, with the namespace it holds in (None: cluster-wide)."""
    bound = set()
    for binding in [*all_of(objects, "RoleBinding"), *all_of(objects, "ClusterRoleBinding")]:
        if any(s.get("kind") == "ServiceAccount" and s["name"] == "gpu-class" for s in binding["subjects"]):
            bound.add((binding["roleRef"]["kind"], binding["roleRef"]["name"], binding["metadata"].get("namespace")))
    rules = []
    for kind, name, namespace in bound:
        roles = [r for r in all_of(objects, kind) if r["metadata"]["name"] == name
                 and (kind == "ClusterRole" or r["metadata"].get("namespace") == namespace)]
        # a role the chart does not render is a built-in one (system:auth-delegator): the same in every mode
        rules += [{**rule, "namespace": namespace} for role in roles for rule in role["rules"]]
    return rules


def test_webhook_managed_rbac_is_only_its_secrets_and_webhooks(chart_renders: dict[str, list[Obj]]) -> None:
    objects = chart_renders["webhook-managed.yaml"]
    configurations = sorted(o["metadata"]["name"] for o in all_of(objects, "MutatingWebhookConfiguration"))
    container = deploy.webhook_container(deploy.webhook_deployment(objects))
    kept = sorted(a.split("=", 1)[1] for a in container["args"] if a.startswith("--manage-webhook-configuration="))
    assert kept == configurations == ["gpu-class.io", "gpu-class.io-workloads"]
    writes = [r for r in _rules_of_the_webhook(objects) if set(r["verbs"]) - {"get", "list", "watch"}]
    secret_writes = [r for r in writes if "secrets" in r["resources"]]
    assert all(r["namespace"] == NAMESPACE for r in secret_writes)
    by_name = [r for r in secret_writes if r.get("resourceNames")]
    assert [sorted(r["resourceNames"]) for r in by_name] == [["gpu-class-ca", "gpu-class-extender-client",
                                                              "gpu-class-tls"]]
    # create is the one verb RBAC cannot limit by name (docs/operators/security.md)
    assert [r["verbs"] for r in secret_writes if not r.get("resourceNames")] == [["create"]]
    webhook_writes = [r for r in writes if "mutatingwebhookconfigurations" in r["resources"]]
    assert [(sorted(r["resourceNames"]), sorted(r["verbs"])) for r in webhook_writes] == [(configurations,
                                                                                           ["get", "patch"])]
    # and the other writes are those of every install (its ConfigMaps), with nothing on Secrets read cluster-wide
    assert not [r for r in _rules_of_the_webhook(objects) if "secrets" in r["resources"] and r["namespace"] is None]
    default_writes = [r for r in _rules_of_the_webhook(chart_renders["defaults"])
                      if set(r["verbs"]) - {"get", "list", "watch"}]
    assert len(writes) == len(default_writes) + 3


def test_cert_manager_takes_your_issuer() -> None:
    objects = template("--values", str(VALUES_DIR / "cert-manager-full.yaml"),
                       "--set", "tls.certManager.issuerRef.name=corp-ca",
                       "--set", "tls.certManager.issuerRef.kind=ClusterIssuer")
    issued = {c["metadata"]["name"]: c["spec"]["issuerRef"] for c in all_of(objects, "Certificate")}
    assert issued == {n: {"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca"}
                      for n in ("gpu-class-serving", "gpu-class-extender-client")}
    assert all_of(objects, "Issuer") == []  # no chart CA beside yours


def documented_example(marker: str) -> Obj:
    """The YAML block that follows `<!-- marker -->` in docs/operators/install.md."""
    text = (deploy.REPO / "docs" / "operators" / "install.md").read_text()
    block = text.split(f"<!-- {marker} -->", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    example: Obj = yaml.safe_load(block)
    return example


def test_the_documented_kustomize_patch_gives_what_the_values_give(tmp_path: Path) -> None:
    """Kustomize users tune a component with a patch (docs/operators/install.md): its example renders the
    objects the chart renders for the same values."""
    example = documented_example("kustomize-placement-example")
    files = deploy.make_test_certificates()
    root = copy_deploy(tmp_path)
    files.write(root / deploy.SELF_MANAGED / "certs")
    work = root / "install"
    work.mkdir()
    (work / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"../{deploy.SELF_MANAGED}"], **example}))
    rendered = kustomize(work)
    assert not isinstance(rendered, str), rendered
    from_kustomize = keyed(rendered)
    toleration = {"key": "node-role.example.com/infra", "operator": "Exists", "effect": "NoSchedule"}
    values = {"tls": {"mode": "secret", "secretName": deploy.TLS_SECRET, "caBundle": files.ca_pem.decode()},
              "image": {"digest": example["images"][0]["digest"]},
              "scheduler": {"nodeSelector": {"node-role.example.com/infra": "true"}, "tolerations": [toleration]}}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    from_chart = keyed(template("--values", str(tmp_path / "values.yaml")))
    assert pod_spec(from_chart, SCHEDULER)["tolerations"] == [toleration]
    diffs = render_diffs({k: from_kustomize[k] for k in (WEBHOOK, SCHEDULER)}, {k: from_chart[k] for k in (WEBHOOK, SCHEDULER)})
    assert not diffs, "\n\n".join(diffs)


def test_configuration_annotations_reach_both_webhook_configurations_beside_cert_managers() -> None:
    objects = template("--values", str(VALUES_DIR / "cert-manager-full.yaml"),
                       "--set-string", r"webhook.configurationAnnotations.argocd\.argoproj\.io/sync-wave=1")
    annotations = {o["metadata"]["name"]: o["metadata"]["annotations"] for o in all_of(objects, "MutatingWebhookConfiguration")}
    assert annotations == {name: {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/gpu-class-serving",
                                  "argocd.argoproj.io/sync-wave": "1"}
                           for name in ("gpu-class.io", "gpu-class.io-workloads")}
