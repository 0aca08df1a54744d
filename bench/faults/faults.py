"""`python -m bench faults`: gpu-class under load and faults on the real control plane.

On the local control plane (tests/e2e/local-cluster, the backstop policy installed), two replicas of
`gpuclass serve` behind haproxy (bench/faults/replicas.py says why haproxy) are what deploy/'s webhook
configuration calls, with only its URL and CA changed. Three namespaces get the same steady stream of
Pod creations from controllers (bench/faults/faultload.py: Deployments scaled up and down, Jobs whose Pods
run and finish):
- none: no webhook;
- no-op: a no-op webhook (bench/common/variant.py's baseline: the same gunicorn, worker and TLS, answering
  allowed with no patch), two replicas behind the same haproxy, registered as deploy/ registers
  gpu-class (rules, matchConditions, timeout, failure policy), for its own namespace;
- gpu-class: the namespace opted in as a user's is.
Under that load, one fault at a time, each followed by `--settle-seconds` of load:
- kill-replica: SIGKILL one replica's processes; it starts again in place (the kubelet's restart);
- kill-all-replicas: SIGKILL both, 5 s down, then both start again: the webhook is gone for a while,
  its calls fail, and the backstop must refuse every Pod it did not place (the controllers retry);
- roll-replicas: a rollout (maxSurge 1, maxUnavailable 0): a new replica ready, then an old one out of
  haproxy, its preStop sleep, SIGTERM; twice;
- rotate-certificate: a new serving certificate from the same CA, swapped into both replicas' volume;
- rotate-ca: the two-step rotation of deploy/README.md: old and new CA in the caBundle, the serving
  certificate of the new CA, then the new CA alone;
- restart-strict-scheduler: gpu-class-scheduler stopped and started; the new one waits for the lease;
- restart-apiserver: kube-apiserver stopped and started (with what exits when it goes: the strict
  scheduler loses its lease);
- compact-etcd: the API server stopped, etcd's history compacted up to a write made then, the API
  server started again, so that every watch resumes from a resourceVersion that is gone and gets 410
  Gone (compaction alone ends no watch: the API server's watch cache holds the recent history; and
  compacted while it runs, watches move past the compacted revision before it goes). The replicas'
  relists are counted.
Counted for each stretch (bench/faults/faultcount.py, from the API server's audit log and its log): Pods
created without placement, Pods wrongly refused, refusals by the backstop after a failed call (the
controller retries them), webhook calls that failed and calls at or past the webhook's timeout, and
each arm's pod-create p50/p99 in the API server. At the end the load stops and every Deployment must
have all its Pods, every Job must finish and every Pod be bound: the controllers' retries succeeded.
Writes its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
import functools
import json
import math
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from bench.faults.faultcount import Tally, failed_calls, parse_audit, tally
from bench.faults.faultload import Load, Settled, Stream, create_nodes, delete_nodes
from bench.common.kubeapi import Api
from bench.common.percentiles import rounded_rank_percentile
from bench.faults.replicas import Backend, Balancer, CertAuthority, CertVolume, Replicas, ensure_haproxy, served_certificate
from bench.common.sections import write_section

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

ARM_LABEL = "bench.gpu-class.io/arm"
NONE, NOOP, GPU_CLASS = "none", "no-op", "gpu-class"
ARMS = (NONE, NOOP, GPU_CLASS)
CONFIGURATION = "gpu-class.io"
NOOP_CONFIGURATION = "bench-faults-noop.gpu-class.io"
NOOP_WEBHOOK = "pods.noop.faults.bench.gpu-class.io"
# the caBundle with both CAs is in the API server within a second; in a cluster the Secret's update
# reaches the Pods' volumes a minute or so later, so the second step never comes before it
CA_BUNDLE_SETTLE_SECONDS = 5.0
GPUS_PER_NODE = 8
WORKERS = 2  # gpuclass serve's default: each worker watches on its own
WEBHOOK_PATH = "/mutate"

ALL_DOWN_SECONDS = 5.0
FAULTS = ("kill-replica", "kill-all-replicas", "roll-replicas", "rotate-certificate", "rotate-ca", "restart-strict-scheduler",
          "restart-apiserver", "compact-etcd")


class FaultMissed(Exception):
    """The fault did not do what it is meant to (its message says what happened)."""


@dataclass(frozen=True)
class Options:
    rate: float  # Pods per second in each arm's namespace
    steady_seconds: float
    settle_seconds: float  # load after each fault
    faults: tuple[str, ...] = FAULTS
    converge_seconds: float = 300.0


# The test suite's: half the rate the control plane here sustained with three namespaces at once (2
# Pods/s each, `--capacity`), so that a busy CI machine keeps up; and the API server restarted once
# (compact-etcd restarts it too).
SHORT = Options(rate=1.0, steady_seconds=20, settle_seconds=10,
                faults=tuple(f for f in FAULTS if f != "restart-apiserver"))


@dataclass(frozen=True)
class Window:
    """One stretch of the run: steady load, or a fault and the load after it."""

    name: str
    seconds: float
    tallies: Mapping[str, Tally]
    call_errors: Mapping[str, int]  # the gpu-class webhook's failed calls by kind (the API server's log)
    asked: Mapping[str, int]  # Pods asked of the controllers meanwhile, by arm
    note: str  # what the fault did, as seen
    missed: str = ""  # how the fault fell short of what it is meant to do (empty: it did it)


@dataclass(frozen=True)
class Result:
    rate: float
    windows: tuple[Window, ...]
    settled: Settled
    load_call_failures: int  # the stream's own calls that failed (the API server away) and were tried again
    nodes: int
    wall_seconds: float
    timeout_seconds: float


def violations(result: Result) -> list[str]:
    """What misses the targets: 0 Pods unplaced, 0 wrongly refused, 0 calls past the timeout for every
    fault, and every controller's retry succeeding."""
    found = []
    for w in result.windows:
        t = w.tallies[GPU_CLASS]
        for count, what in ((t.unplaced, "Pods created without placement"), (t.wrongly_refused, "Pods wrongly refused"),
                            (t.past_timeout, "webhook calls past the timeout"),
                            (w.call_errors.get("timeout", 0), "webhook calls that timed out")):
            if count:
                found.append(f"{w.name}: {count} {what}" + (f" ({'; '.join(t.errors)})" if t.errors else ""))
        if t.creates == 0:
            found.append(f"{w.name}: no Pod creates in the gpu-class namespace: the stream did not run")
        if w.missed:
            found.append(f"{w.name}: the fault was not made as meant: {w.missed}")
    if result.settled.missing:
        found.append("after the load: " + "; ".join(result.settled.missing))
    return found


# --- the webhooks -----------------------------------------------------------------------------------

def _configuration_path(name: str) -> str:
    return f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"


def point_configuration(api: Api, name: str, url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Point every webhook of configuration `name` at `url` with `ca_bundle`; return the client
    configurations it had."""
    config = api.call("GET", _configuration_path(name))
    before = [copy.deepcopy(w["clientConfig"]) for w in config["webhooks"]]
    for w in config["webhooks"]:
        w["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()}
    api.call("PUT", _configuration_path(name), config)
    return before


def restore_configuration(api: Api, name: str, client_configs: Sequence[Mapping[str, Any]]) -> None:
    config = api.call("GET", _configuration_path(name))
    for w, client in zip(config["webhooks"], client_configs):
        w["clientConfig"] = dict(client)
    api.call("PUT", _configuration_path(name), config)


def noop_configuration(template: Mapping[str, Any], url: str, ca_bundle: bytes) -> dict[str, Any]:
    """deploy/'s configuration for the no-op: same rules, conditions, timeout and failure policy, its
    own name, URL and namespace."""
    config = copy.deepcopy(dict(template))
    config["metadata"] = {"name": NOOP_CONFIGURATION}
    for w in config["webhooks"]:
        w["name"] = NOOP_WEBHOOK
        w["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()}
        for expression in w["namespaceSelector"]["matchExpressions"]:
            if expression["key"] == "gpu-class.io/inject":
                expression.update(key=ARM_LABEL, values=[NOOP])
    return config


def relists(port: int, metrics_port: int, ca_file: Path) -> Counter[str]:
    """A replica's watch restarts after 410 Gone so far, by resource it watches (its workers added up), from its
    metrics listener; its readiness (on the admission port) says which are off: a resource not served here
    (NodePools without Karpenter) has no watch to restart."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with urllib.request.urlopen(f"https://127.0.0.1:{metrics_port}/metrics", context=context, timeout=10) as r:
        text = r.read().decode()
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=10) as r:
            readiness = json.loads(r.read())
    except urllib.error.HTTPError as e:  # 503 while a worker relists: the same detail
        readiness = json.loads(e.read())
    off = {name for name, watch in readiness["watches"].items() if "off" in watch}
    found: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "gpu_class_watch_restarts_total" and sample.labels.get("reason") == "expired"
                    and sample.labels["resource"] not in off):
                found[sample.labels["resource"]] += int(sample.value)
    return found


# --- the suite --------------------------------------------------------------------------------------

@dataclass
class Suite:
    cluster: Any
    options: Options
    log: Callable[[str], None]
    api: Api = field(init=False)
    work: Path = field(init=False)
    namespaces: dict[str, str] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)
    metrics_ports: dict[int, int] = field(default_factory=dict)  # a replica's admission port -> its metrics port

    def __post_init__(self) -> None:
        self.api = Api(self.cluster)
        self.work = self.cluster.dir / "faults"
        self.gpu_backend = Backend.make("gpu-class", "/readyz")
        self.noop_backend = Backend.make("noop", "/healthz")
        self.balancer = Balancer(self.cluster, [self.gpu_backend, self.noop_backend])
        self.ca = CertAuthority.make("gpu-class faults CA")
        self.trusted: list[CertAuthority] = [self.ca]
        self.volume = CertVolume(self.work / "tls")
        self.noop_volume = CertVolume(self.work / "noop-tls")
        self.gpu = Replicas(self.cluster, self.balancer, self.gpu_backend, self._gpuclass_command, self._ca_file)
        self.noop = Replicas(self.cluster, self.balancer, self.noop_backend, self._noop_command, self._ca_file)
        self.load = Load(lambda: Api(self.cluster), [], Stream(self.options.rate))
        self.saved_client: list[dict[str, Any]] = []
        self.timeout_seconds = 0.0

    # certificates
    def _ca_file(self) -> Path:
        path = self.work / "trusted-ca.crt"
        path.write_bytes(b"".join(ca.pem for ca in self.trusted))
        return path

    def _gpuclass_command(self, port: int) -> list[str]:
        return [local_cluster.gpuclass_path(), "serve", f"--kubeconfig={self.cluster.dir / 'gpu-class.kubeconfig'}",
                f"--config={local_cluster.webhook_catalog(self.cluster)}", f"--cert-file={self.volume.file('tls.crt')}",
                f"--key-file={self.volume.file('tls.key')}", f"--bind=127.0.0.1:{port}",
                f"--metrics-bind=127.0.0.1:{self.metrics_ports.setdefault(port, local_cluster.free_port())}",
                "--metrics-auth=none"]

    def _noop_command(self, port: int) -> list[str]:
        # gpuclass serve's worker settings: 2 workers of 1 thread
        return ["env", f"PYTHONPATH={REPO_ROOT}", sys.executable, "-m", "bench.common.variant", "--app", "baseline", f"--cert-file={self.noop_volume.file('tls.crt')}",
                f"--key-file={self.noop_volume.file('tls.key')}", f"--bind=127.0.0.1:{port}", "--workers=2", "--threads=1"]

    def set_ca_bundle(self, cas: Sequence[CertAuthority]) -> None:
        self.trusted = list(cas)
        point_configuration(self.api, CONFIGURATION, self._url(self.gpu_backend), b"".join(ca.pem for ca in cas))

    def _url(self, backend: Backend) -> str:
        return f"https://127.0.0.1:{backend.port}{WEBHOOK_PATH}"

    # set up and tear down
    def setup(self) -> None:
        haproxy = ensure_haproxy(self.log)
        self.volume.write(self.ca.serving_files())
        self.noop_volume.write(self.ca.serving_files())
        self.balancer.start(haproxy)
        self.gpu.start_all()
        self.noop.start_all()
        template = next(o for o in local_cluster.render_install(self.cluster) if o["kind"] == "MutatingWebhookConfiguration")
        self.timeout_seconds = float(template["webhooks"][0]["timeoutSeconds"])
        self.saved_client = point_configuration(self.api, CONFIGURATION, self._url(self.gpu_backend), self.ca.pem)
        local_cluster.apply(self.cluster, [noop_configuration(template, self._url(self.noop_backend), self.ca.pem)])
        suffix = uuid.uuid4().hex[:6]
        labels = {NONE: {}, NOOP: {ARM_LABEL: NOOP}, GPU_CLASS: {"gpu-class.io/inject": "enabled"}}
        for arm in ARMS:
            name = f"faults-{arm.replace('-', '')}-{suffix}"
            self.api.call("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels[arm]}})
            self.namespaces[arm] = name
        for name in self.namespaces.values():
            self._wait(f"the default ServiceAccount of {name}", functools.partial(self._has_service_account, name))
        stream = self.load.stream
        nodes = math.ceil(2 * len(ARMS) * stream.bound_pods() / GPUS_PER_NODE) + 1
        delete_nodes(self.api)
        self.nodes = create_nodes(self.api, nodes)
        self.load.namespaces = [self.namespaces[a] for a in ARMS]
        self._wait_webhooks_called()
        self.load.setup(self.api)

    def _has_service_account(self, namespace: str) -> bool:
        return bool(self.api.call(
            "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts?fieldSelector=metadata.name%3Ddefault")["items"])

    def _is_gone(self, path: str) -> bool:
        return self.api.raw("GET", path)[0] == 404

    def _wait(self, what: str, probe: Callable[[], bool], seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while not probe():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {seconds:.0f} s waiting for {what}")
            time.sleep(0.25)

    def _wait_webhooks_called(self) -> None:
        """Until a dry-run create in each arm is answered as that arm answers (configuration changes
        reach the API server asynchronously)."""
        pod = {"metadata": {"generateName": "probe-", "annotations": {"gpu-class.io/class": "high"}},
               "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}

        def placed(arm: str) -> bool:
            status, data = self.api.raw("POST", f"/api/v1/namespaces/{self.namespaces[arm]}/pods?dryRun=All",
                                        json.dumps(pod).encode())
            return status == 201 and "gpu-class.io/types" in (json.loads(data)["metadata"].get("annotations") or {})

        def noop_called() -> bool:
            before = self._webhook_requests(NOOP_WEBHOOK)
            self.api.raw("POST", f"/api/v1/namespaces/{self.namespaces[NOOP]}/pods?dryRun=All", json.dumps(pod).encode())
            return self._webhook_requests(NOOP_WEBHOOK) > before

        self._wait("the API server to call gpu-class through haproxy", lambda: placed(GPU_CLASS))
        self._wait("the API server to call the no-op webhook", noop_called)

    def _webhook_requests(self, webhook: str) -> int:
        """The API server's calls of `webhook` so far."""
        count = 0
        for family in text_string_to_metric_families(self.api.call("GET", "/metrics")):
            for sample in family.samples:
                if sample.name == "apiserver_admission_webhook_request_total" and sample.labels.get("name") == webhook:
                    count += int(sample.value)
        return count

    def teardown(self) -> None:
        for arm, name in self.namespaces.items():
            self.api.call("DELETE", f"/api/v1/namespaces/{name}", expect=(200, 202, 404))
        self.cluster.kubectl("delete", "mutatingwebhookconfiguration", NOOP_CONFIGURATION, "--ignore-not-found")
        if self.saved_client:
            restore_configuration(self.api, CONFIGURATION, self.saved_client)
        self.gpu.stop_all()
        self.noop.stop_all()
        self.cluster.stop(Balancer.PROCESS)
        for name in self.namespaces.values():
            self._wait(f"namespace {name} to go", functools.partial(self._is_gone, f"/api/v1/namespaces/{name}"), seconds=300)
        delete_nodes(self.api)

    # the run
    def run(self) -> Result:
        started = time.monotonic()
        self.load.start()
        try:
            self.window("steady", lambda: "", self.options.steady_seconds)
            for fault in self.options.faults:
                self.log(f"fault: {fault}")
                self.window(fault, getattr(self, "fault_" + fault.replace("-", "_")), self.options.settle_seconds)
        finally:
            self.load.stop()
        settled = self.load.settle(self.api, self.options.converge_seconds)
        return Result(self.options.rate, tuple(self.windows), settled, self.load.failed_calls, len(self.nodes),
                      time.monotonic() - started, self.timeout_seconds)

    def window(self, name: str, action: Callable[[], str], then_seconds: float) -> None:
        audit_from, log_from = _size(self.cluster.audit_log), _size(self.cluster.logs / "kube-apiserver.log")
        asked_from = Counter(self.load.asked)
        started = time.monotonic()
        missed = ""
        try:
            note = action()
        except FaultMissed as e:
            note, missed = str(e), str(e)
        time.sleep(then_seconds)
        creates = parse_audit(_read(self.cluster.audit_log, audit_from))
        by_namespace = {ns: arm for arm, ns in self.namespaces.items()}
        webhooks = {NONE: None, NOOP: NOOP_WEBHOOK, GPU_CLASS: "pods." + CONFIGURATION}
        tallies = {arm: tally([c for c in creates if by_namespace.get(c.namespace) == arm], webhooks[arm],
                              self.timeout_seconds, placement_expected=arm == GPU_CLASS) for arm in ARMS}
        errors: Counter[str] = Counter(failed_calls(_read(self.cluster.logs / "kube-apiserver.log", log_from),
                                                    "pods." + CONFIGURATION))
        asked = {arm: self.load.asked[ns] - asked_from[ns] for arm, ns in self.namespaces.items()}
        self.windows.append(Window(name, time.monotonic() - started, tallies, dict(errors), asked, note, missed))
        t = tallies[GPU_CLASS]
        self.log(f"  {name}: {t.creates} creates, {t.unplaced} unplaced, {t.wrongly_refused} wrongly refused, "
                 f"{t.refused_after_failed_call} refused by the backstop after {t.failed_calls} failed calls; {note}")

    # the faults: each returns what it saw
    def fault_kill_replica(self) -> str:
        slot = self.gpu.active[0]
        before = self.cluster.pid(self.gpu.process(slot))
        self.gpu.kill([slot])
        return f"replica in slot {slot} killed (pid {before}) and started again (pid {self.cluster.pid(self.gpu.process(slot))})"

    def fault_kill_all_replicas(self) -> str:
        started = time.monotonic()
        self.gpu.kill(list(self.gpu.active), down_seconds=ALL_DOWN_SECONDS)
        return f"no replica served for {time.monotonic() - started:.0f} s (down {ALL_DOWN_SECONDS:.0f} s, then starting)"

    def fault_roll_replicas(self) -> str:
        before = list(self.gpu.active)
        self.gpu.roll()
        return f"replicas in slots {before} replaced by slots {self.gpu.active}"

    def _serve(self, ca: CertAuthority) -> str:
        """New serving files from `ca` into the replicas' volume; until both hand them out."""
        files = ca.serving_files()
        self.volume.write(files)
        wanted = x509.load_pem_x509_certificate(files["tls.crt"])
        ports = [self.gpu_backend.slots[s] for s in self.gpu.active]
        self._wait("both replicas to serve the new certificate",
                   lambda: all(served_certificate(p).serial_number == wanted.serial_number for p in ports), seconds=60)
        return f"serial {wanted.serial_number:x}"

    def fault_rotate_certificate(self) -> str:
        return "both replicas serve the new certificate, " + self._serve(self.ca)

    def fault_rotate_ca(self) -> str:
        new = CertAuthority.make("gpu-class faults CA (rotated)")
        self.set_ca_bundle([self.ca, new])
        time.sleep(CA_BUNDLE_SETTLE_SECONDS)
        serial = self._serve(new)
        time.sleep(CA_BUNDLE_SETTLE_SECONDS)
        self.set_ca_bundle([new])
        self.ca = new
        return f"caBundle old+new, then the new CA's certificate ({serial}), then the new CA alone"

    def fault_restart_strict_scheduler(self) -> str:
        since = datetime.datetime.now(datetime.timezone.utc)
        self.cluster.restart(local_cluster.STRICT_SCHEDULER)
        self.cluster.wait_leader(local_cluster.STRICT_SCHEDULER, since)
        return f"the new scheduler took the lease after {(datetime.datetime.now(datetime.timezone.utc) - since).total_seconds():.1f} s"

    def fault_restart_apiserver(self) -> str:
        started = time.monotonic()
        self.cluster.restart_apiserver()
        return f"the API server answered again {time.monotonic() - started:.0f} s after it was stopped"

    def fault_compact_etcd(self) -> str:
        ports = [self.gpu_backend.slots[s] for s in self.gpu.active]
        before = [relists(p, self.metrics_ports[p], self._ca_file()) for p in ports]
        revisions: list[int] = []
        # compacted while the API server is down: no watch moves past the compacted revision meanwhile
        self.cluster.restart_apiserver(while_stopped=lambda: revisions.append(self.cluster.compact_etcd()))
        revision = revisions[0]
        # every worker of every replica relists each resource it watches
        deadline = time.monotonic() + 90
        while True:
            grown = [{r: n - b[r] for r, n in relists(p, self.metrics_ports[p], self._ca_file()).items()} for p, b in zip(ports, before)]
            if all(n >= WORKERS for g in grown for n in g.values()) or time.monotonic() > deadline:
                break
            time.sleep(1)
        seen = "410 relists in each replica: " + "; ".join(
            ", ".join(f"{r} {n}" for r, n in sorted(g.items())) for g in grown)
        if not all(n >= WORKERS for g in grown for n in g.values()):
            raise FaultMissed(f"compacted at revision {revision}, but not every watch got 410: {seen}")
        return f"compacted at revision {revision}, API server restarted; {seen} (each of {WORKERS} workers, every watch)"


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _read(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def run_suite(cluster: Any, options: Options, log: Callable[[str], None] = print) -> Result:
    suite = Suite(cluster, options, log)
    try:
        suite.setup()
        return suite.run()
    finally:
        suite.teardown()


# --- the report -------------------------------------------------------------------------------------

def render(results: Sequence[Result], command: str) -> str:
    first = results[0]
    lines = [
        "## Under load and faults on the real control plane (`python -m bench faults`)",
        "",
        f"Command: `{command}`; local control plane (tests/e2e/local-cluster), Kubernetes "
        f"{local_cluster.kube_version()}, {os.cpu_count()} CPUs shared with other work. Two `gpuclass serve` "
        "replicas behind haproxy, called by deploy/'s webhook configuration, the backstop installed. Each of "
        f"three namespaces gets {first.rate:g} Pod creations per second from controllers (Deployments scaled up "
        f"and down, Jobs), over {first.nodes} GPU nodes: none (no webhook), no-op (a no-op webhook, two replicas "
        "behind the same haproxy, registered the same way), gpu-class. bench/faults/faults.py says how each fault is made "
        "and how each figure is counted; p50/p99: a Pod create's time in the API server (audit log).",
    ]
    for run, result in enumerate(results, 1):
        lines += ["", f"### Run {run} of {len(results)}: {result.wall_seconds:.0f} s", "",
                  "| stretch | s | creates | unplaced | wrongly refused | refused by the backstop after a failed call "
                  "| failed calls (kinds) | past the timeout | slowest webhook s | no-op: failed calls "
                  "| p50 ms none / no-op / gpu-class | p99 ms none / no-op / gpu-class |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for w in result.windows:
            t = w.tallies[GPU_CLASS]
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(w.call_errors.items())) or "-"
            slowest = "< 0.5" if t.slowest_webhook_seconds is None else f"{t.slowest_webhook_seconds:.2f}"
            lines.append(
                f"| {w.name} | {w.seconds:.0f} | {t.creates} | {t.unplaced} | {t.wrongly_refused} "
                f"| {t.refused_after_failed_call} | {t.failed_calls} ({kinds}) | {t.past_timeout} | {slowest} "
                f"| {w.tallies[NOOP].failed_calls} "
                f"| {' / '.join(f'{w.tallies[a].p50_ms:.1f}' for a in ARMS)} "
                f"| {' / '.join(f'{w.tallies[a].p99_ms:.1f}' for a in ARMS)} |")
        lines += ["", "What each fault did: " + "; ".join(f"{w.name}: {w.note}" for w in result.windows if w.name != "steady")
                  + "."]
        others = {e for w in result.windows for a in ARMS for e in w.tallies[a].errors}
        if others:
            lines += ["", "Refusals and errors: " + "; ".join(sorted(others)) + "."]
        settled = ("every Deployment had all its Pods, every Job had finished and every Pod was bound "
                   f"{result.settled.seconds:.0f} s after the load stopped") if not result.settled.missing else (
            "NOT converged: " + "; ".join(result.settled.missing))
        lines += ["", f"After the load: {settled}. The stream's own calls that failed and were tried again (the API "
                  f"server away): {result.load_call_failures}."]
        found = violations(result)
        lines += ["", "Targets (0 unplaced, 0 wrongly refused, 0 past the timeout, for every fault): "
                  + ("met." if not found else "MISSED: " + "; ".join(found))]
    steady = [w for r in results for w in r.windows if w.name == "steady"]
    if steady:
        lines += ["", "Steady load, every run together, the API server's time for a Pod create:", "",
                  "| arm | creates | p50 ms | p99 ms |", "|---|---|---|---|"]
        for arm in ARMS:
            seconds = [s for w in steady for s in w.tallies[arm].seconds]
            lines.append(f"| {arm} | {len(seconds)} | {rounded_rank_percentile(seconds, 0.5) * 1000:.1f} "
                         f"| {rounded_rank_percentile(seconds, 0.99) * 1000:.1f} |")
    return "\n".join(lines) + "\n"


def sustained(result: Result) -> bool:
    """The stream kept up: every arm created at least 90% of its rate over the steady stretch, and the
    controllers caught up once it stopped."""
    w = result.windows[0]
    return not result.settled.missing and all(w.tallies[a].created / w.seconds >= 0.9 * result.rate for a in ARMS)


def render_capacity(results: Sequence[Result], command: str) -> str:
    lines = [
        "## How much load the control plane here sustains (`python -m bench faults --capacity`)",
        "",
        f"Command: `{command}`; the same setup as the fault runs, no fault: each rate for "
        f"{results[0].windows[0].seconds:.0f} s in each of the three namespaces at once. Sustained: every namespace "
        "created at least 90% of its rate, and every Deployment had all its Pods, every Job had finished and every "
        "Pod was bound once the load stopped.",
        "",
        "| Pods/s per namespace | in all | asked/s none / no-op / gpu-class | created/s none / no-op / gpu-class "
        "| p50 ms none / no-op / gpu-class | p99 ms none / no-op / gpu-class | caught up after the stop | sustained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        w = r.windows[0]
        caught_up = f"{r.settled.seconds:.0f} s" if not r.settled.missing else "no: " + "; ".join(r.settled.missing)
        lines.append(
            f"| {r.rate:g} | {r.rate * len(ARMS):g} | {' / '.join(f'{w.asked[a] / w.seconds:.2f}' for a in ARMS)} "
            f"| {' / '.join(f'{w.tallies[a].created / w.seconds:.2f}' for a in ARMS)} "
            f"| {' / '.join(f'{w.tallies[a].p50_ms:.1f}' for a in ARMS)} | {' / '.join(f'{w.tallies[a].p99_ms:.1f}' for a in ARMS)} "
            f"| {caught_up} | {'yes' if sustained(r) else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=2.0, help="Pod creations per second in each of the three namespaces")
    p.add_argument("--steady-seconds", type=float, default=60.0)
    p.add_argument("--settle-seconds", type=float, default=30.0, help="load after each fault")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, in order (default: {','.join(FAULTS)})")
    p.add_argument("--runs", type=int, default=2, help="runs back to back (default 2)")
    p.add_argument("--short", action="store_true", help="the short form the test suite runs")
    p.add_argument("--capacity", default=None, metavar="RATES",
                   help="instead: the stream alone at each of these rates (comma-separated Pods/s per namespace), "
                        "for --steady-seconds each")
    p.add_argument("--output", type=Path, default=REPO_ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cluster-dir", type=Path, default=None, help="reuse or keep a local cluster here")
    args = p.parse_args(argv)
    options = SHORT if args.short else Options(args.rate, args.steady_seconds, args.settle_seconds,
                                               tuple(f for f in args.faults.split(",") if f))
    unknown = set(options.faults) - set(FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
    command = "python -m bench faults" + (" " + " ".join(argv) if argv else "")
    if args.capacity:
        steps = []
        with local_cluster.running(args.cluster_dir) as cluster:
            for rate in (float(r) for r in args.capacity.split(",")):
                print(f"{rate:g} Pods/s in each namespace", flush=True)
                steps.append(run_suite(cluster, Options(rate, args.steady_seconds, 0, faults=()),
                                       log=lambda line: print(line, flush=True)))
        text = render_capacity(steps, command)
        print(text)
        write_section(args.output, "faults-capacity", text)
        return 0
    results = []
    with local_cluster.running(args.cluster_dir) as cluster:
        for run in range(args.runs):
            print(f"run {run + 1} of {args.runs}", flush=True)
            results.append(run_suite(cluster, options, log=lambda line: print(line, flush=True)))
    text = render(results, command)
    print(text)
    write_section(args.output, "faults", text)
    return 1 if any(violations(r) for r in results) else 0
