"""Install, upgrade and roll back a Helm release of deploy/chart/gpu-class with class Pods in flight: none refused,
none misplaced (docs/operators/upgrades.md is the procedure this follows).

Versions N and N+1 are the chart of this tree with two catalogs: N the shipped one, N+1 the same with the class
`high` changed (its A100s taken out, T4 put in). A catalog edit is what changes the decisions of a release most
often, and it is a change every Pod shows: the types its required affinity admits say which version placed it. An
older commit of the chart would test that the old chart installs, not more, and would hide, behind changes of
flags and names, whether each Pod was placed by one whole version.

There are no kubelets, so the test does their part, as the Deployment controller and the kubelet would do it for
the chart's Deployment (maxSurge 1, maxUnavailable 0, the 5 s preStop sleep): the replicas are `gpuclass serve`
processes run as the chart's ServiceAccount, behind haproxy as behind the chart's Service (bench/faults/replicas.py
says why haproxy), serving the release's Secret and reading the release's catalog ConfigMap, as the volumes would
give them. A rollout happens when a step changes the Deployment's Pod template (the catalog's checksum), one
replica at a time: a new one ready before an old one is drained and stopped, so for a while both versions serve.
The registration (webhook.url) points at haproxy.

During each step (install, upgrade, rollback) 200 class Pods are created: a third from the step's start, a third
from the switch's start (the first new replica, or the opt-in), a third from its end. Each is judged by this
test's own node-selector matcher over the test's nodes (one H100, one A100, one T4), never by gpu-class's
annotations: its required affinity must admit only types its class has in the version that could have answered it
(by the time it was sent and answered: before the first new replica started, only the old; after the last old one
stopped, only the new; between, either, but one whole version), and a bound Pod must be on such a node.

The Pods' namespace is bounded to the class (gpu-class.io/allowed-classes), so the tenant boundary judges each one
too, and no refusal is excused: while both versions serve, the boundary's table is the union of both versions'
tables (webhook/core/published/writers.py), so a Pod either version placed passes it.

On install, the Pods' namespace opts in (gpu-class.io/inject) once the release answers, as install.md says to; a
Pod answered before that was not gpu-class's to place, and must come back as it was sent.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import local_cluster
from bench.faults.replicas import Backend, Balancer, CertVolume, Replicas, ensure_haproxy
from fleet import H100_LABELS
from kubeobjects import (create_node, dry_run_create, fixture_labels, force_delete_pods, make_namespace, make_pod,
                         running_cluster, wait_for)
from test_chart_e2e import adopt, helm, secret_data

CHART = local_cluster.REPO / "deploy" / "chart" / "gpu-class"
RELEASE = "gpu-class"
NAMESPACE = local_cluster.WEBHOOK_NAMESPACE
CLASS = "high"
PODS_PER_STEP = 200
PODS_PER_SECOND = 10.0
CREATORS = 4
NODES = {  # name -> (type, labels): one node of each type either version's `high` may or may not admit
    "rel-h100": ("H100", H100_LABELS),
    "rel-a100": ("A100-40GB", fixture_labels("a100-sxm4-40gb_gce_before-mig.yaml")),
    "rel-t4": ("T4", fixture_labels("tesla-t4_openshift_driver580.yaml")),
}
GPUS_PER_NODE = 100  # room for a whole step's Pods on the two types a version admits
REGISTRATION_KINDS = ("MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


# --- versions ------------------------------------------------------------------

@dataclass(frozen=True)
class Version:
    """A version of the release, as the test knows it: the types of CLASS among the nodes, read from its catalog.
    `allowed` None: gpu-class did not serve the namespace yet, and the Pod must come back as it was sent."""

    name: str
    allowed: frozenset[str] | None


SHIPPED = (CHART / "files" / "catalog.yaml").read_text()


def changed_catalog(text: str) -> str:
    """The shipped catalog with CLASS's A100s taken out and T4 put in."""
    line = re.search(rf"  - name: {CLASS}\n    types: \[(.*?)\]", text, re.S)
    assert line, f"the shipped catalog has no class {CLASS} in the shape this test edits"
    types = [t.strip() for t in line.group(1).split(",") if not t.strip().startswith(("A100", "A800"))] + ["T4"]
    return text[:line.start(1)] + ", ".join(types) + text[line.end(1):]


def class_types(catalog_text: str) -> frozenset[str]:
    """The types of CLASS among the test's nodes, read from the catalog by the test (not by gpu-class)."""
    classes = {c["name"]: c for c in yaml.safe_load(catalog_text)["classes"]}
    return frozenset(t for t, _ in NODES.values() if t in classes[CLASS]["types"])


NOT_SERVED = Version("not served yet", None)
N = Version("N (shipped catalog)", class_types(SHIPPED))
N1 = Version("N+1 (changed catalog)", class_types(changed_catalog(SHIPPED)))


# --- the test's own matcher ----------------------------------------------------

def expression_admits(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt"):
        if key not in labels:
            return False
        have, bound = int(labels[key]), int(values[0])
        return have > bound if operator == "Gt" else have < bound
    raise AssertionError(f"unknown node selector operator {operator!r}")


def pod_admits(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes' rule: the nodeSelector, and one of the required terms (ORed) whose expressions all hold
    (a term without expressions admits nothing)."""
    spec = pod["spec"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(term.get("matchExpressions") and all(expression_admits(e, labels) for e in term["matchExpressions"])
               for term in required["nodeSelectorTerms"])


def admitted_types(pod: Mapping[str, Any], labels_of: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    return frozenset(NODES[name][0] for name, labels in labels_of.items() if pod_admits(pod, labels))


def affinity_pod(*terms: list[dict[str, Any]], node: str | None = None,
                 node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "nodeSelector": dict(node_selector or {})}
    if terms:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}
    return {"metadata": {"name": "p"}, "spec": spec}


PRODUCT = "nvidia.com/gpu.product"
LABELS_OF = {name: {**labels, "kubernetes.io/hostname": name} for name, (_, labels) in NODES.items()}
H100_TERM = [{"key": PRODUCT, "operator": "In", "values": [H100_LABELS[PRODUCT]]}]
A100_TERM = [{"key": PRODUCT, "operator": "In", "values": [LABELS_OF["rel-a100"][PRODUCT]]}]
T4_TERM = [{"key": PRODUCT, "operator": "In", "values": [LABELS_OF["rel-t4"][PRODUCT]]}]


@pytest.mark.parametrize(("pod", "types"), [
    pytest.param(affinity_pod(), {"H100", "A100-40GB", "T4"}, id="no-affinity-admits-every-node"),
    pytest.param(affinity_pod(H100_TERM), {"H100"}, id="in"),
    pytest.param(affinity_pod(H100_TERM, T4_TERM), {"H100", "T4"}, id="terms-ored"),
    pytest.param(affinity_pod(H100_TERM + T4_TERM), set(), id="expressions-anded"),
    pytest.param(affinity_pod([]), set(), id="an-empty-term-admits-nothing"),
    pytest.param(affinity_pod([{"key": PRODUCT, "operator": "NotIn", "values": [H100_LABELS[PRODUCT]]}]),
                 {"A100-40GB", "T4"}, id="not-in"),
    pytest.param(affinity_pod([{"key": "nvidia.com/mig.strategy", "operator": "DoesNotExist"}]),
                 {"H100", "T4"}, id="does-not-exist"),
    pytest.param(affinity_pod([{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["50000"]}]),
                 {"H100"}, id="gt"),
    pytest.param(affinity_pod([{"key": "nvidia.com/gpu.memory", "operator": "Lt", "values": ["40000"]}]),
                 {"T4"}, id="lt"),
    pytest.param(affinity_pod(H100_TERM, A100_TERM, node_selector={"kubernetes.io/hostname": "rel-a100"}),
                 {"A100-40GB"}, id="node-selector-anded-with-every-term"),
])
def test_the_matcher_reads_required_affinity_as_kubernetes_does(pod: dict[str, Any], types: set[str]) -> None:
    assert admitted_types(pod, LABELS_OF) == types


@pytest.mark.parametrize(("pod", "versions", "wrong"), [
    pytest.param(affinity_pod(H100_TERM, A100_TERM, node="rel-a100"), [N], False, id="placed-by-n"),
    pytest.param(affinity_pod(H100_TERM, A100_TERM), [N1], True, id="n-placement-after-the-switch"),
    pytest.param(affinity_pod(H100_TERM, T4_TERM, node="rel-t4"), [N, N1], False, id="either-while-both-serve"),
    pytest.param(affinity_pod(A100_TERM, T4_TERM), [N, N1], True, id="a-mix-of-both-versions"),
    pytest.param(affinity_pod(H100_TERM, node="rel-t4"), [N], True, id="bound-outside-the-class"),
    pytest.param(affinity_pod([{"key": PRODUCT, "operator": "In", "values": ["nothing"]}]), [N], True,
                 id="admits-no-node"),
    pytest.param(affinity_pod(), [NOT_SERVED], False, id="not-served-left-as-sent"),
    pytest.param(affinity_pod(H100_TERM), [NOT_SERVED], True, id="placed-where-not-served"),
    pytest.param(affinity_pod(), [N], True, id="unplaced-where-served"),
])
def test_the_judge_names_every_pod_no_version_could_have_left_so(pod: dict[str, Any], versions: list[Version],
                                                                  wrong: bool) -> None:
    assert (misplacement(pod, versions, LABELS_OF) is not None) == wrong


# --- the steps -----------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """One create: when it was sent and answered (monotonic seconds), and the refusal, if any."""

    name: str
    sent: float
    answered: float
    refused: str | None


@dataclass
class Window:
    """When the versions of a step could answer: `before` alone until the switch starts, `after` alone once it is
    done, either between. The times are monotonic seconds; the events let the load keep pace with the switch."""

    before: Version
    after: Version
    started: float = float("inf")
    done: float = float("inf")
    started_event: threading.Event = field(default_factory=threading.Event)
    done_event: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.started = time.monotonic()
        self.started_event.set()

    def end(self) -> None:
        self.done = time.monotonic()
        self.done_event.set()

    def versions(self, answer: Answer) -> list[Version]:
        if answer.answered < self.started:
            return [self.before]
        if answer.sent > self.done:
            return [self.after]
        return [self.before, self.after]


def create_pods(kubeconfig: Path, namespace: str, prefix: str, window: Window) -> list[Answer]:
    """PODS_PER_STEP class Pods from CREATORS threads, each with a client of its own: a third from the step's
    start, a third from the switch's start and a third from its end, each third at PODS_PER_SECOND. So every step
    has Pods sent before the switch, while both versions serve, and after, however long its parts take."""
    third = -(-PODS_PER_STEP // 3)
    begun = time.monotonic()

    def phase_start(i: int) -> float:
        if i < third:
            return begun
        event = window.started_event if i < 2 * third else window.done_event
        if not event.wait(timeout=300):
            raise TimeoutError(f"the step's switch did not {'start' if i < 2 * third else 'end'} within 300 s")
        return window.started if i < 2 * third else window.done

    def creator(k: int) -> list[Answer]:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
        answers = []
        for i in range(k, PODS_PER_STEP, CREATORS):
            at = phase_start(i) + (i % third) / PODS_PER_SECOND
            time.sleep(max(0.0, at - time.monotonic()))
            name, sent = f"{prefix}-{i:03d}", time.monotonic()
            try:
                core.create_namespaced_pod(namespace, make_pod(name, gpu_class=CLASS))
                refused = None
            except ApiException as e:
                refused = f"{e.status}: {str(e.body)[:300]}"
            answers.append(Answer(name, sent, time.monotonic(), refused))
        return answers

    with ThreadPoolExecutor(CREATORS) as pool:
        return [a for answers in pool.map(creator, range(CREATORS)) for a in answers]


def during(kubeconfig: Path, namespace: str, prefix: str, window: Window, step: Callable[[], None]) -> list[Answer]:
    """Run `step` (which starts and ends `window`'s switch) while the Pods of the step are created."""
    with ThreadPoolExecutor(1) as pool:
        load = pool.submit(create_pods, kubeconfig, namespace, prefix, window)
        try:
            step()
        finally:  # a failed step: the load stops waiting for it
            window.started_event.set()
            window.done_event.set()
        return load.result(timeout=300)


def settled_pods(core: kubernetes.client.CoreV1Api, namespace: str, seconds: float = 60.0) -> list[dict[str, Any]]:
    """The namespace's Pods once the scheduler has stopped binding them (the bound count unchanged for 3 s)."""
    deadline, last, since = time.monotonic() + seconds, -1, time.monotonic()
    while True:
        response: Any = core.list_namespaced_pod(namespace, _preload_content=False)
        pods: list[dict[str, Any]] = json.loads(response.data)["items"]
        bound = sum(1 for p in pods if p["spec"].get("nodeName"))
        if bound != last:
            last, since = bound, time.monotonic()
        if time.monotonic() - since >= 3.0 or time.monotonic() > deadline:
            return pods
        time.sleep(0.5)


def misplacement(pod: Mapping[str, Any], versions: Sequence[Version],
                 labels_of: Mapping[str, Mapping[str, str]]) -> str | None:
    """None when the Pod is as one of `versions` must leave it; else what is wrong."""
    name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
    types = admitted_types(pod, labels_of)
    for version in versions:
        if version.allowed is None:
            if not (pod["spec"].get("affinity") or {}).get("nodeAffinity") and node is None:
                return None
        elif types and types <= version.allowed and (node is None or NODES[node][0] in version.allowed):
            return None
    return (f"{name}: admits {sorted(types)}, bound to {node}; allowed: "
            + " or ".join(f"{v.name}: {sorted(v.allowed) if v.allowed is not None else 'as sent'}" for v in versions))


@dataclass(frozen=True)
class Outcome:
    """A step's Pods as judged: the refused and the misplaced (with why), how many were bound, how many were
    answered before the switch, sent after it and between, and the types those sent after it admit."""

    step: str
    refused: list[str]
    misplaced: list[str]
    bound: int
    before: int
    after: int
    between: int
    types_after: frozenset[str]
    switch_seconds: float

    def line(self) -> str:
        return (f"{self.step}: {len(self.refused)} refused, {len(self.misplaced)} misplaced of {PODS_PER_STEP} "
                f"({self.before} answered before the switch, {self.between} during it ({self.switch_seconds:.1f} s), "
                f"{self.after} sent after it; {self.bound} bound)")


def judge(core: kubernetes.client.CoreV1Api, step: str, namespace: str, answers: Sequence[Answer], window: Window,
          labels_of: Mapping[str, Mapping[str, str]]) -> Outcome:
    """A step's Pods judged, once the scheduler is done with them; then deleted, freeing the nodes."""
    by_name = {p["metadata"]["name"]: p for p in settled_pods(core, namespace)}
    misplaced = []
    for a in (a for a in answers if not a.refused):
        found = by_name.get(a.name)
        problem = misplacement(found, window.versions(a), labels_of) if found else f"{a.name}: admitted, then gone"
        if problem:
            misplaced.append(problem)
    after = [a for a in answers if a.sent > window.done and a.name in by_name]
    before = sum(1 for a in answers if a.answered < window.started)
    outcome = Outcome(step, [f"{a.name}: {a.refused}" for a in answers if a.refused], misplaced,
                      sum(1 for p in by_name.values() if p["spec"].get("nodeName")), before, len(after),
                      len(answers) - before - len(after),
                      frozenset().union(*(admitted_types(by_name[a.name], labels_of) for a in after)),
                      window.done - window.started)
    force_delete_pods(core, namespace)
    wait_for("the step's Pods gone", lambda: not core.list_namespaced_pod(namespace).items, seconds=60)
    return outcome


# --- the release ---------------------------------------------------------------

@dataclass
class Release:
    """The release's replicas as the kubelet runs them, from what the release holds in the cluster."""

    cluster: local_cluster.Cluster
    core: kubernetes.client.CoreV1Api
    work: Path
    backend: Backend = field(init=False)
    replicas: Replicas = field(init=False)
    catalog: Path = field(init=False)  # what a replica started now reads (the ConfigMap's volume)
    volume: CertVolume = field(init=False)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.backend = Backend.make("release", "/readyz")
        self.volume = CertVolume(self.work / "tls")
        balancer = Balancer(self.cluster, [self.backend])
        balancer.start(ensure_haproxy())
        self.replicas = Replicas(self.cluster, balancer, self.backend, self.command,
                                 lambda: self.volume.file("ca.crt"))

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.backend.port}"

    def command(self, port: int) -> list[str]:
        """The chart's container args, with loopback addresses and the volumes' paths; one worker (the chart's
        default is 2) to spare the shared CPUs three replicas run on during a rollout."""
        return [local_cluster.gpuclass_path(), "serve", f"--kubeconfig={self.cluster.dir / 'gpu-class.kubeconfig'}",
                "--scheduler-name=gpu-class-scheduler", f"--config={self.catalog}",
                f"--cert-file={self.volume.file('tls.crt')}", f"--key-file={self.volume.file('tls.key')}",
                f"--bind=127.0.0.1:{port}", f"--metrics-bind=127.0.0.1:{local_cluster.free_port()}",
                "--metrics-auth=none", f"--publish-namespace={NAMESPACE}", "--workers=1"]

    def mount(self) -> None:
        """What the kubelet gives a new Pod: the Secret's files and the catalog ConfigMap's."""
        self.volume.write(secret_data(self.core, "gpu-class-tls"))
        config_map: Any = self.core.read_namespaced_config_map("gpu-class-catalog", NAMESPACE)
        self.catalog = self.work / f"catalog-{config_map.metadata.resource_version}.yaml"
        self.catalog.write_text(config_map.data["catalog.yaml"])

    def pod_template(self) -> dict[str, Any]:
        deployment = yaml.safe_load(self.cluster.kubectl("-n", NAMESPACE, "get", "deployment", RELEASE, "-o",
                                                         "yaml").stdout)
        return dict(deployment["spec"]["template"])

    def roll(self, window: Window) -> None:
        """The Deployment's rollout: a new replica, then an old one drained and stopped, one at a time."""
        self.mount()
        window.start()
        self.replicas.roll()
        window.end()


def values_file(work: Path, url: str, name: str, **more: Any) -> Path:
    path = work / f"values-{name}.yaml"
    path.write_text(yaml.safe_dump({"webhook": {"url": url}, "tls": {"selfManaged": {"extraIPs": ["127.0.0.1"]}},
                                    **more}))
    return path


def webhook_timeout(cluster: local_cluster.Cluster) -> int:
    configuration = yaml.safe_load(cluster.kubectl("get", "mutatingwebhookconfiguration", "gpu-class.io", "-o",
                                                   "yaml").stdout)
    return int(configuration["webhooks"][0]["timeoutSeconds"])


def places(core: kubernetes.client.CoreV1Api, namespace: str) -> bool:
    """Whether a class Pod created now comes back with a required node affinity (a dry run)."""
    pod = dry_run_create(core, namespace, make_pod("probe", gpu_class=CLASS))
    return bool(((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))


def without_gpu_class(cluster: local_cluster.Cluster, values: Path) -> None:
    """A cluster with no gpu-class serving: local-cluster's own webhook stopped and its registrations gone. What
    else its install made (ServiceAccounts, RBAC, which its strict scheduler runs under) is handed to the release,
    as a cluster moving from the kustomize install would."""
    cluster.stop("gpuclass")
    for obj in local_cluster.render_install(cluster):
        if obj["kind"] in REGISTRATION_KINDS:
            cluster.kubectl("delete", "--ignore-not-found", obj["kind"], obj["metadata"]["name"])
    adopt(cluster, values)


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[local_cluster.Cluster]:
    with running_cluster(Path(tempfile.mkdtemp(prefix="gpu-class-release-e2e-"))) as cluster:
        yield cluster


def install_step(cluster: local_cluster.Cluster, core: kubernetes.client.CoreV1Api, release: Release, values: Path,
                 namespace: str, window: Window) -> Callable[[], None]:
    """`helm install`, the replicas once the release holds their Secret and catalog, then (once they answer) the
    namespace opts in: the switch, from not served to N."""
    def install() -> None:
        helm(cluster, "install", RELEASE, str(CHART), "-f", str(values))
        release.mount()
        release.replicas.start_all(2)
        wait_for("the release's replicas to place Pods", lambda: places(core, local_cluster.PROBE_NAMESPACE),
                 seconds=60)
        window.start()
        core.patch_namespace(namespace, {"metadata": {"labels": {"gpu-class.io/inject": "enabled"}}})
        wait_for("the namespace served", lambda: all(places(core, namespace) for _ in range(4)), seconds=30)
        window.end()
    return install


def change_step(cluster: local_cluster.Cluster, release: Release, values: Path | None,
                window: Window) -> Callable[[], None]:
    """`helm upgrade` with `values`, or (None) `helm rollback` to the first revision; the catalog's checksum
    changes the Deployment's Pod template, so it rolls out: the switch."""
    def change() -> None:
        template = release.pod_template()
        if values is not None:
            helm(cluster, "upgrade", RELEASE, str(CHART), "-f", str(values))
        else:
            helm(cluster, "rollback", RELEASE, "1")
        assert release.pod_template() != template, "the step left the Deployment's Pod template as it was"
        release.roll(window)
    return change


def test_install_upgrade_and_rollback_with_pods_in_flight_refuse_and_misplace_none(
        own_cluster: local_cluster.Cluster) -> None:
    cluster, started = own_cluster, time.monotonic()
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    assert (N.allowed, N1.allowed) == (frozenset({"H100", "A100-40GB"}), frozenset({"H100", "T4"})), \
        "the catalogs changed under the test"
    for name, (_, labels) in NODES.items():
        create_node(core, name, labels, gpus=GPUS_PER_NODE)
    labels_of = {name: dict(core.read_node(name).metadata.labels or {}) for name in NODES}  # type: ignore[union-attr]
    release = Release(cluster, core, cluster.dir / "release")
    first = values_file(release.work, release.url, "n")
    second = values_file(release.work, release.url, "n1", catalog={"inline": changed_catalog(SHIPPED)},
                         webhook={"url": release.url, "timeoutSeconds": 7})
    without_gpu_class(cluster, first)
    # bounded to CLASS: the tenant boundary judges each Pod too, with the table the replicas of both versions keep
    namespace = make_namespace(core, "e2e-release", annotations={"gpu-class.io/allowed-classes": CLASS})
    outcomes = []
    for step, old, new, timeout_seconds in (("install", NOT_SERVED, N, 5), ("upgrade", N, N1, 7),
                                            ("rollback", N1, N, 5)):
        window = Window(old, new)
        action = (install_step(cluster, core, release, first, namespace, window) if step == "install" else
                  change_step(cluster, release, second if step == "upgrade" else None, window))
        began = time.monotonic()
        answers = during(cluster.kubeconfig, namespace, step, window, action)
        print(f"{step}: {time.monotonic() - began:.0f} s, switch started {window.started - began:.0f} s in")
        outcomes.append(judge(core, step, namespace, answers, window, labels_of))
        assert webhook_timeout(cluster) == timeout_seconds, f"the {step} left the registration as it was"

    report = "\n".join(o.line() for o in outcomes)
    print(f"{report}\n({time.monotonic() - started:.0f} s after the cluster was up)")
    problems = [p for o in outcomes for p in o.refused + o.misplaced]
    assert not problems, report + "\n" + "\n".join(problems[:20])
    assert all(o.before and o.between and o.after for o in outcomes), f"a step had no Pods in flight in a phase:\n{report}"
    assert all(o.bound for o in outcomes), "a step bound no Pod: nothing was judged by where it went"
    # not vacuous: what was sent after each switch was placed by the new version, as only it places
    assert [o.types_after for o in outcomes] == [N.allowed, N1.allowed, N.allowed], report
