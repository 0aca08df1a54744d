"""Monitoring: the alerts and the dashboard of deploy/components/monitoring (the chart ships the same
files, tests/test_chart.py keeps them identical).

promtool (built from tests/tools/go.mod) checks the rules and runs tests/fixtures/monitoring/
alerts_test.yaml, where each alert is shown firing and not firing on series named as the server
exports them. The names the server exports come from the metrics it defines
(webhook/serving/metrics.py), with the suffixes the Prometheus text format gives each type; every
name the rules, the dashboard and the promtool tests use must be among them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml

import test_deploy as deploy
from test_deploy import Obj, name_of
from tools import gotools

MONITORING = deploy.DEPLOY / "components" / "monitoring"
ALERT_TESTS = deploy.REPO / "tests" / "fixtures" / "monitoring" / "alerts_test.yaml"
RUNBOOKS = deploy.REPO / "docs" / "operators" / "runbooks.md"
MONITORING_PAGE = deploy.REPO / "docs" / "operators" / "monitoring.md"
# Prometheus's own series for each scrape target, and kube-state-metrics' (GpuClassSchedulerNoLeader).
PROMETHEUS_SERIES = {"up"}
KUBE_STATE_METRICS_SERIES = {"kube_lease_renew_time"}
OTHER_SERIES = PROMETHEUS_SERIES | KUBE_STATE_METRICS_SERIES
# runbook_url: the runbooks page as published under the chart's home.
CHART_HOME = yaml.safe_load((deploy.DEPLOY / "chart" / "gpu-class" / "Chart.yaml").read_text())["home"]
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}
EXPECTED_ALERTS = {"GpuClassNoReplicaUp", "GpuClassAdmissionErrors", "GpuClassRefusalsRising",
                   "GpuClassInventoryStale", "GpuClassInventoryLagging", "GpuClassCertificateExpiringSoon", "GpuClassWatchRestarting",
                   "GpuClassBrokenPromises", "GpuClassPodsPendingLong", "GpuClassSchedulerNoLeader"}


def promtool_path() -> Path:
    try:
        return gotools.path_of("promtool")
    except gotools.ToolError as e:
        pytest.fail(f"promtool is missing and could not be built: {e}", pytrace=False)


def exported_series() -> set[str]:
    """Sample names of every metric the server defines."""
    from prometheus_client.metrics import MetricWrapperBase

    from webhook.serving import metrics

    names: set[str] = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def defined_metrics() -> dict[str, tuple[str, ...]]:
    """Each metric the server defines, by the name a user reads in a scrape (a counter's with _total), with its
    label names."""
    from prometheus_client.metrics import MetricWrapperBase

    from webhook.serving import metrics

    found = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            (family,) = value.describe()
            found[family.name + ("_total" if family.type == "counter" else "")] = tuple(value._labelnames)
    return found


SCHEDULER_METRICS = deploy.REPO / "deploy" / "scheduler" / "plugin" / "nodelabelindex" / "metrics.go"
GO_METRIC = re.compile(r"metrics\.New(Counter|Gauge|Histogram)(Vec)?\(&metrics\.\w+Opts\{(.*?)\}\s*"
                       r"(?:,\s*\[\]string\{([^}]*)\})?\)", re.DOTALL)
GO_OUTCOME = re.compile(r"\bOutcome = \"(\w+)\"")


def go_metrics(source: str) -> dict[str, tuple[str, ...]]:
    """Each metric gpu-class-scheduler's plugin defines (component-base's metrics.NewCounter, NewCounterVec, ... with
    a literal Name, as kube-scheduler's /metrics serves it), with its label names."""
    found = {}
    for m in GO_METRIC.finditer(source):
        name = re.search(r'\bName:\s*"([a-z_]+)"', m.group(3))
        assert name, f"a metric without a literal Name in {SCHEDULER_METRICS}: {m.group(0)}"
        found[name.group(1)] = tuple(re.findall(r'"([a-z_]+)"', m.group(4) or ""))
    return found


def scheduler_metrics() -> dict[str, tuple[str, ...]]:
    return go_metrics(SCHEDULER_METRICS.read_text())


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (label matchers, ranges, strings and grouping
    clauses removed; an identifier before "(" is a function)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        after = text[match.end():].lstrip()
        if after.startswith("(") or match.group() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def rule_object() -> Obj:
    rule: Obj = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return rule


def rules() -> list[Obj]:
    return [r for group in rule_object()["spec"]["groups"] for r in group["rules"]]


def dashboard_queries() -> Iterator[tuple[str, str]]:
    dashboard = json.loads((MONITORING / "gpu-class-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets") or []:
            yield panel["title"], target["expr"]


def test_metric_names_reads_promql() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(a_bucket{job="x", le!="+Inf"}[5m])))') == {"a_bucket"}
    assert metric_names("time() - max by (pod) (b_seconds) > 600 and on (pod) c") == {"b_seconds", "c"}


def test_exported_series_include_each_kind() -> None:
    names = exported_series()
    assert {"gpu_class_admission_requests_total", "gpu_class_admission_duration_seconds_bucket",
            "gpu_class_inventory_free_gpus", "gpu_class_certificate_expiry_timestamp_seconds"} <= names


def documented_metrics(text: str) -> dict[str, tuple[str, ...]]:
    """`gpu_class_name{label,label}` as docs/operators/monitoring.md writes each metric."""
    return {m.group(1): tuple(filter(None, (m.group(2) or "").split(",")))
            for m in re.finditer(r"`(gpu_class_[a-z_]+)(?:\{([a-z_,]*)\})?`", text)}


def test_monitoring_page_documents_every_metric_with_its_labels() -> None:
    defined = defined_metrics() | scheduler_metrics()
    documented = documented_metrics(MONITORING_PAGE.read_text())
    assert {name: documented.get(name) for name in defined} == defined


def test_go_metrics_reads_names_and_labels() -> None:
    source = """
    a = metrics.NewCounterVec(&metrics.CounterOpts{
        Name: "gpu_class_a_total",
        Help: "A {b}.",
    }, []string{"x", "y"})
    b = metrics.NewGauge(&metrics.GaugeOpts{Name: "gpu_class_b", StabilityLevel: metrics.ALPHA})
    """
    assert go_metrics(source) == {"gpu_class_a_total": ("x", "y"), "gpu_class_b": ()}
    assert scheduler_metrics(), f"no metric read from {SCHEDULER_METRICS}"


def test_monitoring_page_names_every_prefilter_outcome() -> None:
    outcomes = GO_OUTCOME.findall(SCHEDULER_METRICS.read_text())
    page = MONITORING_PAGE.read_text()
    assert outcomes and [o for o in outcomes if f"`{o}`" not in page] == []


def test_documented_metrics_reads_names_and_labels() -> None:
    assert documented_metrics("`gpu_class_a_total{x,y}` and `gpu_class_b` (`time() - ` this)") == {
        "gpu_class_a_total": ("x", "y"), "gpu_class_b": ()}


def test_rules_name_only_exported_series() -> None:
    unknown = {r["alert"]: metric_names(r["expr"]) - exported_series() - OTHER_SERIES for r in rules()}
    assert {alert: names for alert, names in unknown.items() if names} == {}


def test_dashboard_queries_name_only_exported_series() -> None:
    queries = list(dashboard_queries())
    assert len(queries) >= 10
    unknown = {f"{title}: {expr}": metric_names(expr) - exported_series() - PROMETHEUS_SERIES for title, expr in queries}
    assert {q: names for q, names in unknown.items() if names} == {}


def test_dashboard_covers_what_operators_look_at() -> None:
    used = {name for _, expr in dashboard_queries() for name in metric_names(expr)}
    assert used >= exported_series() - {"gpu_class_admission_duration_seconds_count",
                                        "gpu_class_admission_duration_seconds_sum"}
    exprs = " ".join(expr for _, expr in dashboard_queries())
    assert "histogram_quantile(0.5," in exprs and "histogram_quantile(0.99," in exprs


def test_promtool_tests_use_exported_series() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    used = {re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", s["series"]).group()  # type: ignore[union-attr]
            for t in tests for s in t["input_series"]}
    assert used - exported_series() - OTHER_SERIES == set()


def test_every_alert_has_summary_severity_and_a_runbook_section() -> None:
    runbooks = RUNBOOKS.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
               for h in re.findall(r"^#+\s+(.*)$", runbooks, re.M)}
    assert {r["alert"] for r in rules()} == EXPECTED_ALERTS
    for rule in rules():
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        page, anchor = rule["annotations"]["runbook_url"].split("#")
        assert page == f"{CHART_HOME}/docs/operators/runbooks.md" and anchor in anchors, (
            f"{rule['alert']}: no section #{anchor} in {page}")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool_path()), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          check=False)


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file, beside a copy of the promtool tests."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_object()["spec"]))
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    return tmp_path


def test_promtool_check_rules(rules_dir: Path) -> None:
    done = promtool("check", "rules", "rules.yaml", cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in done.stdout


def test_promtool_checks_the_dashboard_queries(tmp_path: Path) -> None:
    """promtool parses rule expressions: the dashboard's queries, as recording rules, must parse too."""
    records = [{"record": f"dashboard:query{i}", "expr": expr.replace("$__rate_interval", "5m")}
               for i, (_, expr) in enumerate(dashboard_queries())]
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    done = promtool("check", "rules", "dashboard.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules_each_alert_fires_and_stays_quiet(rules_dir: Path) -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c.get("exp_alerts")}
    quiet = {c["alertname"] for t in tests for c in t["alert_rule_test"] if not c.get("exp_alerts")}
    assert fired == quiet == EXPECTED_ALERTS
    done = promtool("test", "rules", ALERT_TESTS.name, cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules_catches_a_wrong_expectation(rules_dir: Path) -> None:
    """The tests above would pass vacuously if promtool ignored expectations; a wrong one must fail."""
    path = rules_dir / ALERT_TESTS.name
    path.write_text(path.read_text().replace("for 20m 0s.", "for 19m 0s.", 1))
    done = promtool("test", "rules", ALERT_TESTS.name, cwd=rules_dir)
    assert done.returncode != 0 and "GpuClassInventoryStale" in done.stdout + done.stderr


# --- the Prometheus Operator objects, checked by hand (no core schema describes them) --------------


SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# each ServiceMonitor scrapes the Service of its name; those of components with a certificate they make
# themselves (kube-scheduler, the upgrader) cannot be verified, the webhook's must be
SELF_SIGNED = {"gpu-class-scheduler", "gpu-class-upgrader"}


def service_monitor_problems(obj: Obj, objects: Sequence[Obj]) -> list[str]:
    problems: list[str] = []
    spec, name, namespace = obj.get("spec") or {}, obj["metadata"]["name"], obj["metadata"].get("namespace")
    services = [s for s in deploy.all_of(objects, "Service") if s["metadata"].get("namespace") == namespace
                and deploy.selects(spec.get("selector"), s["metadata"].get("labels") or {})]
    installed = [s["metadata"]["name"] for s in deploy.all_of(objects, "Service") if s["metadata"]["name"] == name]
    if name not in {deploy.SERVICE, *SELF_SIGNED} or [s["metadata"]["name"] for s in services] != installed:
        problems.append(f"selects Services {[s['metadata']['name'] for s in services]}, not {name} alone")
    if name == deploy.SERVICE and not installed:
        problems.append("the webhook's Service is not in the install")
    for endpoint in spec.get("endpoints") or [{}]:
        ports = {p.get("name") for s in services for p in s["spec"]["ports"]}
        if services and endpoint.get("port") not in ports or endpoint.get("scheme") != "https":
            problems.append(f"endpoint {endpoint} is not a named HTTPS port of the Service")
        if endpoint.get("bearerTokenFile") != SERVICE_ACCOUNT_TOKEN:
            problems.append("the endpoint does not present Prometheus' ServiceAccount token: every /metrics asks for one")
        tls = endpoint.get("tlsConfig") or {}
        if name in SELF_SIGNED:
            if tls != {"insecureSkipVerify": True}:
                problems.append(f"tlsConfig {tls}: the server's certificate is made at its start, verified by nothing")
            continue
        if tls.get("serverName") != f"{deploy.SERVICE}.{namespace}.svc" or tls.get("insecureSkipVerify"):
            problems.append(f"tlsConfig {tls} does not verify the Service's name")
        mounted = {secret for _, secret, _ in deploy.mounted_files(
            deploy.webhook_deployment(objects)["spec"]["template"]["spec"],
            deploy.webhook_container(deploy.webhook_deployment(objects))).values()}
        if deploy.dig(tls, "ca", "secret", "key") != "ca.crt" or deploy.dig(tls, "ca", "secret", "name") not in mounted:
            problems.append("tlsConfig.ca is not ca.crt of the Secret the webhook serves from")
    return problems


def monitoring_problems(obj: Obj, objects: Sequence[Obj]) -> list[str]:
    """What the Prometheus Operator needs of a ServiceMonitor or PrometheusRule in this install."""
    problems: list[str] = []
    spec = obj.get("spec") or {}
    if obj["apiVersion"] != "monitoring.coreos.com/v1":
        problems.append(f"apiVersion {obj['apiVersion']}")
    namespace = obj["metadata"].get("namespace")
    if obj["kind"] == "ServiceMonitor":
        problems += service_monitor_problems(obj, objects)
    elif obj["kind"] == "PrometheusRule":
        if not spec.get("groups") or not all(g.get("rules") for g in spec["groups"]):
            problems.append("no rule groups")
    else:
        problems.append(f"kind {obj['kind']} has no hand check")
    return [f"{name_of(obj)}: {p}" for p in problems]


def test_component_renders_with_an_install(tmp_path: Path) -> None:
    from test_chart import kustomize_install

    objects = kustomize_install(tmp_path, deploy.make_test_certificates(), [deploy.SELF_MANAGED],
                                ["components/monitoring"])
    monitoring = [o for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert sorted(f"{o['kind']} {o['metadata']['name']}" for o in monitoring) == [
        "PrometheusRule gpu-class", "ServiceMonitor gpu-class", "ServiceMonitor gpu-class-scheduler",
        "ServiceMonitor gpu-class-upgrader"]
    assert [p for o in monitoring for p in monitoring_problems(o, objects)] == []
    dashboard = deploy.one_of(objects, "ConfigMap", "gpu-class-dashboard", deploy.SYSTEM_NAMESPACE)
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["gpu-class-dashboard.json"] == (MONITORING / "gpu-class-dashboard.json").read_text()
