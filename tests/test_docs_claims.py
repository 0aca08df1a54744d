"""What the docs tell operators is what ships: each claim read from the page and compared with the file it is about.

- Every Helm value a page names in code (`scheduler.kubernetesMinor`, `tls.mode=secret`) is a key of the chart's
  values.yaml, and where the page states its default right after it (`(30)`, `(off by default)`, `, "1.37"`), that is
  values.yaml's default.
- Every `gpuclass` / `kubectl gpu-class` command in inline code names a subcommand and its own flags; a bare `--flag`
  is one of the command line's, a benchmark's, or of a tool named in OTHER_TOOLS_FLAGS; where a page states a flag's
  default (`--interval-seconds`, default 300), it is the parser's (or the one its help names).
- Every metric a page names is exported (webhook/serving/metrics.py, gpu-class-scheduler's metrics.go), and
  monitoring.md documents every metric exported.
- The Kubernetes minors: the compatibility matrix's rows, the chart's `scheduler.kubernetesMinor` and
  `olderMinors`, deploy/scheduler/releases and Chart.yaml's kubeVersion say the same; each phrase of the pages that
  names a range of them, or a limit of the server, says what those files say; a quoted release is the one pinned for
  its minor.
- The workload kinds the pages say the workload webhook decides are the webhook configuration's rules and KINDS.
- Pinned versions quoted in pages (Kueue, Karpenter, Helm, ...) are the ones the build scripts pin (tests/tools,
  tests/e2e/cluster, deploy/scheduler).
- Every Role and ClusterRole of the webhook's RBAC is named where the install describes it, with what it may write.
- One version: webhook.__version__ is the package's (setup.cfg reads it), the chart's version and appVersion, every
  kustomize image tag of ours, and the CHANGELOG's newest section (docs/contributors/architecture.md#releases).
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

import webhook
from test_docs import Command, REPO, check_synopsis, command_start, prose_lines, rel, repo_files, subparsers
from webhook.cli import KUBECTL_PLUGIN, build_parser
from webhook.core.admission.workload import KINDS
from webhook.cluster.watch import MAX_BATCH_SECONDS, SYNC_WAIT_SECONDS
from webhook.serving.config import MAX_ADMISSION_REVIEW_BYTES, MIB, IntakeLimits

CHART = REPO / "deploy" / "chart" / "gpu-class"
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
RELEASES = REPO / "deploy" / "scheduler" / "releases"
CLUSTER_RELEASES = REPO / "tests" / "e2e" / "cluster" / "releases"
INLINE = re.compile(r"(`+)((?:(?!\1).)+?)\1")


def pages() -> list[Path]:
    """The pages operators and users read: the README, the changelog, docs/operators, docs/users, deploy's READMEs."""
    found = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "docs" / "README.md"]
    found += sorted((REPO / "docs" / "operators").glob("*.md")) + sorted((REPO / "docs" / "users").glob("*.md"))
    return found + sorted((REPO / "deploy").rglob("README.md"))


@dataclass(frozen=True)
class Span:
    """A piece of inline code, where it is, and the text after it on its line."""
    page: Path
    line: int
    code: str
    after: str

    def __str__(self) -> str:
        return f"{rel(self.page)}:{self.line}: `{self.code}`"


@cache
def spans() -> tuple[Span, ...]:
    return tuple(Span(page, no, m.group(2).strip(), line[m.end():])
                 for page in pages() for no, line in prose_lines(page) for m in INLINE.finditer(line))


def page_text(page: Path) -> str:
    """A page's prose as one line, so that a sentence wrapped over lines reads whole."""
    return " ".join(line.strip() for _, line in prose_lines(page))


# --- Helm values -----------------------------------------------------------------------------------------------

VALUE_PATH = re.compile(r"(?<![\w./-])([a-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)+)(?:=(\S+))?")
# A dotted word that is a file, an API group or a Python module, not a value: `catalog.yaml`, `tls.crt`,
# `monitoring.coreos.com`, `webhook.core.admission`.
NOT_A_VALUE_TAIL = {"yaml", "yml", "json", "md", "py", "go", "crt", "key", "pem", "txt", "sh", "tpl", "com", "io",
                    "sh", "dev", "org", "mod", "sum", "series"}
PACKAGES = {p.name for p in (REPO / "webhook").iterdir()} | {p.stem for p in (REPO / "webhook").glob("*.py")}
# After a value: `(30)`, `(default 5)`, `(the strict path, on by default)`, `, "1.37"`.
PARENTHESIS = re.compile(r"^\s*\(([^()]*)\)")
STATED = re.compile(r"^(?:default:? )?[`\"]?([\w.\-/]+)[`\"]?$")
QUOTED_AFTER = re.compile(r"^, \"([^\"]+)\"")
HISTORY = re.compile(r"\b(removed|renamed|no longer)\b")


@dataclass(frozen=True)
class NamedValue:
    span: Span
    key: str
    stated_default: str | None

    def __str__(self) -> str:
        default = "" if self.stated_default is None else f" (default {self.stated_default})"
        return f"{self.span} -> {self.key}{default}"


def value_at(key: str) -> Any:
    node: Any = VALUES
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def is_value_path(key: str) -> bool:
    parts = key.split(".")
    if parts[0] not in VALUES or parts[-1] in NOT_A_VALUE_TAIL:
        return False
    return not (parts[0] == "webhook" and parts[1] in PACKAGES)


def stated_default(after: str) -> str | None:
    """The default a page states right after a value's name, as text, or None where it states none."""
    m = PARENTHESIS.match(after)
    if m:
        said = m.group(1).strip()
        by_default = re.search(r"\b(on|off) by default\b", said)
        if by_default:
            return "true" if by_default.group(1) == "on" else "false"
        stated = STATED.match(said)
        return stated.group(1) if stated else None
    quoted = QUOTED_AFTER.match(after)
    return quoted.group(1) if quoted else None


def as_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def named_values() -> list[NamedValue]:
    found = []
    for span in spans():
        if span.page.name == "CHANGELOG.md" and HISTORY.search(span.after):
            continue  # a value the changelog says is gone
        for key, setting in VALUE_PATH.findall(span.code):
            if is_value_path(key):
                alone = span.code == key
                found.append(NamedValue(span, key, stated_default(span.after) if alone and not setting else None))
    return found


NAMED_VALUES = named_values()


@pytest.mark.parametrize("named", NAMED_VALUES, ids=str)
def test_a_value_a_page_names_is_the_charts(named: NamedValue) -> None:
    try:
        default = value_at(named.key)
    except KeyError:
        pytest.fail(f"{named}: values.yaml has no {named.key}", pytrace=False)
    if named.stated_default is not None:
        assert as_text(default) == named.stated_default, (
            f"{named}: the page says its default is {named.stated_default!r}; values.yaml has {default!r}")


def test_values_are_found() -> None:
    """The scan sees what it is meant to: a value with a stated default, and the minors' values."""
    keys = {n.key for n in NAMED_VALUES}
    assert {"tls.mode", "scheduler.olderMinors", "scheduler.kubernetesMinor", "upgrader.enabled"} <= keys
    assert any(n.stated_default for n in NAMED_VALUES)


@pytest.mark.parametrize(("after", "default"), [
    pytest.param(" (30) of the expiry", "30", id="bare"),
    pytest.param(" (the strict path, on by default), and", "true", id="on-by-default"),
    pytest.param(" (off by default)", "false", id="off-by-default"),
    pytest.param(', "1.37") and says', "1.37", id="quoted"),
    pytest.param(" (`gpuclass upgrader` flags)", None, id="a-remark-is-no-default"),
])
def test_stated_default_reads_what_a_page_writes(after: str, default: str | None) -> None:
    assert stated_default(after) == default


def test_a_wrong_default_fails() -> None:
    wrong = NamedValue(Span(REPO / "README.md", 1, "tls.selfManaged.renewBeforeDays", ""),
                       "tls.selfManaged.renewBeforeDays", "15")
    with pytest.raises(AssertionError, match="values.yaml has 30"):
        test_a_value_a_page_names_is_the_charts(wrong)


# --- the command line's flags ----------------------------------------------------------------------------------

# Flags the pages name, written as a bare `--flag`, that belong to another tool than gpuclass.
OTHER_TOOLS_FLAGS = {
    "--set": "helm", "--set-file": "helm", "--create-namespace": "helm",
    "--expander": "cluster-autoscaler",
    "--node-labels": "kubelet",
    "--write-config-to": "kube-scheduler",
    "--feature-gates": "kube-apiserver, kube-scheduler, kubelet",
}
BARE_FLAG = re.compile(r"^(--[a-z][\w-]*)(?:[= ]\S*)?$")


def gpuclass_flags() -> set[str]:
    return {flag for prog in ("gpuclass", KUBECTL_PLUGIN) for sub in subparsers(build_parser(prog)).values()
            for flag in sub._option_string_actions}  # noqa: SLF001 (argparse lists no options publicly)


@cache
def bench_flags() -> frozenset[str]:
    """The benchmarks' flags (`python -m bench placement --sick-percent`), from their parsers' source."""
    return frozenset(flag for path in (REPO / "bench").rglob("*.py")
                     for flag in re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", path.read_text()))


def inline_commands() -> list[Span]:
    return [s for s in spans() if (start := command_start(s.code.split())) is not None and start[1]]


@pytest.mark.parametrize("span", inline_commands(), ids=str)
def test_an_inline_command_names_its_own_flags(span: Span) -> None:
    check_synopsis(Command(span.page, span.line, span.code, synopsis=True))


def bare_flags() -> list[tuple[Span, str]]:
    return [(s, m.group(1)) for s in spans() if (m := BARE_FLAG.match(s.code))]


@pytest.mark.parametrize(("span", "flag"), bare_flags(), ids=lambda x: str(x))
def test_a_bare_flag_is_one_of_the_command_line(span: Span, flag: str) -> None:
    assert flag in gpuclass_flags() or flag in bench_flags() or flag in OTHER_TOOLS_FLAGS, (
        f"{span}: no gpuclass subcommand or benchmark has {flag} (another tool's? add it to OTHER_TOOLS_FLAGS)")


FLAG_DEFAULT_SAID = re.compile(r"^,? \(?default:? `?([\w.\-/]+)`?")
HELP_DEFAULT = re.compile(r"\(default:? `?([\w.\-/]+)")


def flag_defaults(flag: str) -> set[str]:
    """What each subcommand with the flag takes when it is left out: its default, or the one its help names."""
    found = set()
    for prog in ("gpuclass", KUBECTL_PLUGIN):
        for sub in subparsers(build_parser(prog)).values():
            action = sub._option_string_actions.get(flag)  # noqa: SLF001
            if action is None:
                continue
            default = action.default
            if isinstance(default, float) and default.is_integer():
                default = int(default)
            if default is not None:
                found.add(str(default))
            elif m := HELP_DEFAULT.search(action.help or ""):
                found.add(m.group(1))
    return found


def flag_defaults_said() -> list[tuple[Span, str, str]]:
    return [(s, m.group(1), said.group(1)) for s in spans() if (m := BARE_FLAG.match(s.code)) and m.group(1)
            not in OTHER_TOOLS_FLAGS and (said := FLAG_DEFAULT_SAID.match(s.after))]


@pytest.mark.parametrize(("span", "flag", "said"), flag_defaults_said(), ids=lambda x: str(x))
def test_a_flags_default_is_the_one_a_page_says(span: Span, flag: str, said: str) -> None:
    # a flag two subcommands share (--interval-seconds) may default differently in each: the page names one of them
    assert said in flag_defaults(flag), (
        f"{span}: the page says {flag} defaults to {said}; gpuclass: {flag_defaults(flag)}")


def test_flag_defaults_are_found() -> None:
    assert {flag for _, flag, _ in flag_defaults_said()} >= {"--interval-seconds", "--quota", "--install-namespace"}


def test_a_flag_of_another_subcommand_fails() -> None:
    with pytest.raises(AssertionError, match="has no option --settle-seconds"):
        check_synopsis(Command(REPO / "README.md", 1, "gpuclass serve --settle-seconds 60", synopsis=True))


# --- metrics ---------------------------------------------------------------------------------------------------

METRIC = re.compile(r"\b(gpu_class_[a-z0-9_]+)")
HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")


def exported_metrics() -> set[str]:
    ours = set(re.findall(r"\"(gpu_class_[a-z0-9_]+)\"", (REPO / "webhook" / "serving" / "metrics.py").read_text()))
    plugin = REPO / "deploy" / "scheduler" / "plugin" / "nodelabelindex" / "metrics.go"
    return ours | set(re.findall(r"Name:\s*\"(gpu_class_[a-z0-9_]+)\"", plugin.read_text()))


def metrics_named(page: Path) -> set[str]:
    return set(METRIC.findall(page.read_text()))


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_a_metric_a_page_names_is_exported(page: Path) -> None:
    exported = exported_metrics()
    unknown = sorted(m for m in metrics_named(page)
                     if m not in exported and HISTOGRAM_SERIES.sub("", m) not in exported)
    assert not unknown, f"{rel(page)} names metrics nothing exports: {unknown}; exported: {sorted(exported)}"


def test_monitoring_documents_every_metric() -> None:
    missing = sorted(exported_metrics() - metrics_named(REPO / "docs" / "operators" / "monitoring.md"))
    assert not missing, f"docs/operators/monitoring.md does not say what these metrics count: {missing}"


def test_the_metrics_are_found() -> None:
    assert {"gpu_class_admission_requests_total", "gpu_class_scheduler_prefilter_cycles_total"} <= exported_metrics()


# --- Kubernetes minors and releases ----------------------------------------------------------------------------

def minor_of(release: str) -> str:
    return ".".join(release.lstrip("v").split(".")[:2])


def key(minor: str) -> tuple[int, ...]:
    return tuple(int(p) for p in minor.split("."))


def pinned_kubernetes(mod: Path) -> str:
    m = re.search(r"^\s*k8s\.io/kubernetes (v\d+\.\d+\.\d+)\b", mod.read_text(), re.M)
    assert m, f"{rel(mod)} pins no k8s.io/kubernetes"
    return m.group(1)


@cache
def newest_release() -> str:
    return pinned_kubernetes(REPO / "deploy" / "scheduler" / "plugin" / "go.mod")


@cache
def pinned_releases() -> dict[str, str]:
    """Each supported minor's Kubernetes release: the plugin's own, and each older one's module file."""
    older = {p.stem: pinned_kubernetes(p) for p in RELEASES.glob("*.mod")}
    return {**older, minor_of(newest_release()): newest_release()}


def chart_minors() -> list[str]:
    return [VALUES["scheduler"]["kubernetesMinor"], *VALUES["scheduler"]["olderMinors"]]


def matrix_minors() -> list[str]:
    """The first column of compatibility.md's Kubernetes table."""
    text = (REPO / "docs" / "operators" / "compatibility.md").read_text()
    section = text.split("## Kubernetes", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| (1\.\d+) \| (?:e2e tier|recorded run|rendered|not tested)", section, re.M)


def test_the_supported_minors_are_one_list() -> None:
    chart = sorted(chart_minors(), key=key)
    assert chart == sorted(pinned_releases(), key=key), (
        f"values.yaml's scheduler.kubernetesMinor and olderMinors {chart} are not the builds "
        f"(deploy/scheduler/plugin/go.mod and deploy/scheduler/releases/*.mod): {sorted(pinned_releases(), key=key)}")
    assert sorted(p.stem for p in RELEASES.glob("*.series")) == sorted(VALUES["scheduler"]["olderMinors"])
    assert VALUES["scheduler"]["kubernetesMinor"] == minor_of(newest_release())
    assert sorted(matrix_minors(), key=key) == chart, "compatibility.md's table of minors is not the chart's"
    kube_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    assert re.fullmatch(rf">={re.escape(chart[0])}\.0(-0)?", kube_version), (
        f"Chart.yaml's kubeVersion {kube_version} is not the oldest minor built for, {chart[0]}")


def test_each_release_is_the_test_control_planes() -> None:
    """gpu-class-scheduler of a minor is built on the release the local control plane of that minor runs."""
    cluster = {p.stem: pinned_kubernetes(p) for p in CLUSTER_RELEASES.glob("*.mod")}
    cluster[minor_of(pinned_kubernetes(REPO / "tests" / "e2e" / "cluster" / "go.mod"))] = pinned_kubernetes(
        REPO / "tests" / "e2e" / "cluster" / "go.mod")
    assert cluster == pinned_releases()


def minors() -> tuple[str, str, str]:
    """(oldest, newest older, newest) of the minors built for."""
    older = sorted(VALUES["scheduler"]["olderMinors"], key=key)
    return older[0], older[-1], VALUES["scheduler"]["kubernetesMinor"]


@dataclass(frozen=True)
class Phrase:
    """A way the pages state a fact (the minors, a limit): every match on `where` gives `expected()`, and some page
    still says it so (a rewording must update the table, not skip the check)."""
    name: str
    where: tuple[str, ...]
    pattern: str
    expected: Callable[[], tuple[str, ...]]


PHRASES = [
    Phrase("older minors' builds", ("README.md", "docs/operators/install.md", "deploy/scheduler/README.md"),
           r"\b(?:on|`releases/` builds it for each of) (1\.\d+) to (1\.\d+)\b", lambda: minors()[:2]),
    Phrase("every build", ("docs/operators/install.md",), r"\bbuilt for each of (1\.\d+) to (1\.\d+)\b",
           lambda: (minors()[0], minors()[2])),
    Phrase("the newest build",
           ("docs/operators/install.md", "deploy/scheduler/README.md", "docs/operators/compatibility.md"),
           r"\b(?:for|on) (1\.\d+) and newer\b", lambda: minors()[2:]),
    Phrase("the manifests' oldest minor", ("docs/operators/install.md",), r"\bKubernetes (1\.\d+) or newer\b",
           lambda: minors()[:1]),
    Phrase("the chart refuses only a cluster older than every build",
           ("CHANGELOG.md", "docs/operators/strict-scheduler.md", "docs/operators/compatibility.md",
            "docs/operators/install.md"),
           r"\brefuses?\b[^.]{0,120}?\b(?:cluster|clusters) older than (1\.\d+|the Kubernetes minor|every build)\b",
           lambda: ("every build",)),
    Phrase("the largest request body", ("docs/operators/commands.md", "docs/operators/monitoring.md", "CHANGELOG.md"),
           r"\b(?:a body over|an oversized one \(over) (\d+) MiB", lambda: (str(MAX_ADMISSION_REVIEW_BYTES // MIB),)),
    Phrase("the time to read a request", ("docs/operators/monitoring.md", "CHANGELOG.md"),
           r"\b(?:must be read within|not read within) (\d+(?:\.\d+)?) s\b",
           lambda: (f"{IntakeLimits().read_seconds:g}",)),
    Phrase("a worker's wait for its first sync", ("docs/operators/live-inventory.md", "docs/operators/monitoring.md"),
           r"\b(?:waits up to|synced or after) (\d+) s\b", lambda: (f"{SYNC_WAIT_SECONDS:g}",)),
    Phrase("the applier's batch", ("docs/operators/live-inventory.md",), r"\bor (\d+(?:\.\d+)?) s of work\b",
           lambda: (f"{MAX_BATCH_SECONDS:g}",)),
    Phrase("the matrix's stock scheduler tag", ("deploy/components/stock-scheduler/kustomization.yaml",),
           r"newTag: (v1\.\d+\.\d+)", lambda: (pinned_releases()[minors()[0]],)),
]


@pytest.mark.parametrize("phrase", PHRASES, ids=lambda p: p.name)
def test_a_phrase_says_what_ships(phrase: Phrase) -> None:
    seen = 0
    for where in phrase.where:
        path = REPO / where
        text = page_text(path) if path.suffix == ".md" else path.read_text()
        for m in re.finditer(phrase.pattern, text):
            seen += 1
            assert m.groups() == phrase.expected(), (
                f"{where}: {m.group(0)!r} says {m.groups()}; what ships says {phrase.expected()}")
    assert seen, f"no page says {phrase.name} as {phrase.pattern!r} any more: update the table"


KUBE_RELEASE = re.compile(r"\bv(1\.\d+)\.(\d+)\b")


@pytest.mark.parametrize("page", [p for p in pages() if p.name != "CHANGELOG.md"], ids=rel)
def test_a_kubernetes_release_a_page_quotes_is_the_pinned_one(page: Path) -> None:
    """v1.MINOR.PATCH of a minor built for is that minor's pinned release (the changelog keeps old ones)."""
    wrong = [f"v{m.group(1)}.{m.group(2)}" for m in KUBE_RELEASE.finditer(page_text(page))
             if m.group(1) in pinned_releases() and f"v{m.group(1)}.{m.group(2)}" != pinned_releases()[m.group(1)]]
    assert not wrong, f"{rel(page)} quotes {wrong}; the releases built and tested are {pinned_releases()}"


# --- pinned versions of other projects -------------------------------------------------------------------------

def go_pin(mod: str, module: str) -> str:
    m = re.search(rf"^\s*{re.escape(module)} (v\d+\.\d+\.\d+)\b", (REPO / mod).read_text(), re.M)
    assert m, f"{mod} pins no {module}"
    return m.group(1)


PINS = [  # (the name a page writes before the version, its go.mod, the module)
    ("Kueue", "tests/tools/kueue/go.mod", "sigs.k8s.io/kueue"),
    ("JobSet", "tests/tools/jobset/go.mod", "sigs.k8s.io/jobset"),
    ("LeaderWorkerSet", "tests/tools/lws/go.mod", "sigs.k8s.io/lws"),
    ("Karpenter", "tests/tools/karpenter/go.mod", "sigs.k8s.io/karpenter"),
    ("Helm", "tests/tools/go.mod", "helm.sh/helm/v4"),
    ("promtool", "tests/tools/go.mod", "github.com/prometheus/prometheus"),
]
ALL_PAGES = [*pages(), *sorted((REPO / "docs" / "contributors").glob("*.md"))]


@pytest.mark.parametrize(("name", "mod", "module"), PINS, ids=[p[0] for p in PINS])
def test_a_quoted_version_is_the_pinned_one(name: str, mod: str, module: str) -> None:
    pinned, seen = go_pin(mod, module), 0
    for page in ALL_PAGES:
        for m in re.finditer(rf"\b{name}\b\W{{0,3}}\(?(v\d+\.\d+\.\d+)\b", page_text(page)):
            seen += 1
            assert m.group(1) == pinned, f"{rel(page)}: {m.group(0)!r}; {mod} pins {module} {pinned}"
    assert seen, f"no page quotes {name}'s version"


# --- the workload webhook --------------------------------------------------------------------------------------

def kinds_in(cell: str) -> set[str]:
    """`RayJob, RayCluster (`ray.io/rayjob`, ...)` -> {RayJob, RayCluster}."""
    cell = re.sub(r"`[^`]*`|\([^)]*\)", "", cell)
    return {w for w in re.split(r",|\band\b|\s", cell) if re.fullmatch(r"[A-Z][A-Za-z]+", w)}


def configured_kinds(manifest: Path) -> set[str]:
    by_resource = {(k.group, k.resource): k.kind for k in KINDS.values()}
    found = set()
    (config,) = [o for o in yaml.safe_load_all(manifest.read_text())
                 if o and o["kind"] == "MutatingWebhookConfiguration"]
    for hook in config["webhooks"]:
        for rule in hook["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert (group, resource) in by_resource, f"{rel(manifest)}: {group}/{resource} is not in KINDS"
                    found.add(by_resource[(group, resource)])
    return found


def kueue_table_kinds() -> set[str]:
    """The kinds docs/users/kueue.md's table says gpu-class decides at the workload."""
    found: set[str] = set()
    for _, line in prose_lines(REPO / "docs" / "users" / "kueue.md"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].startswith("decided at the "):
            found |= kinds_in(cells[0])
    return found


def install_page_kinds() -> set[str]:
    text = page_text(REPO / "docs" / "operators" / "install.md")
    m = re.search(r"Kueue counts at their pod templates \(([^:]+):", text)
    assert m, "docs/operators/install.md no longer lists the kinds the workload webhook decides"
    return kinds_in(m.group(1))


def test_the_workload_webhook_decides_the_kinds_the_pages_say() -> None:
    kinds = {k.kind for k in KINDS.values()}
    assert configured_kinds(REPO / "deploy" / "base" / "workload-webhook.yaml") == kinds
    assert kueue_table_kinds() == kinds, "docs/users/kueue.md's table"
    assert install_page_kinds() == kinds, "docs/operators/install.md"


def test_kinds_in_reads_a_cell() -> None:
    assert kinds_in("RayJob, RayCluster (`ray.io/rayjob`, `ray.io/raycluster`)") == {"RayJob", "RayCluster"}
    assert kinds_in("`batch/v1` Job (`batch/job`)") == {"Job"}


def test_deploys_readme_lists_every_directory() -> None:
    text = (REPO / "deploy" / "README.md").read_text()
    dirs = [d for d in (REPO / "deploy").iterdir() if d.is_dir()]
    dirs += [d for parent in ("components", "overlays") for d in (REPO / "deploy" / parent).iterdir() if d.is_dir()]
    missing = sorted(rel(d).removeprefix("deploy/") for d in dirs if f"{rel(d).removeprefix('deploy/')}/" not in text)
    assert not missing, f"deploy/README.md does not say what these hold: {missing}"


# --- RBAC ------------------------------------------------------------------------------------------------------

def rbac_objects(path: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all((REPO / path).read_text()) if o and o["kind"] in ("Role", "ClusterRole")]


def rbac_paragraph() -> str:
    text = page_text(REPO / "docs" / "operators" / "install.md")
    m = re.search(r"\*\*RBAC that reads the cluster\*\*(.*?)(?= - \*\*|## )", text)
    assert m, "docs/operators/install.md has no paragraph **RBAC that reads the cluster**"
    return m.group(1)


def test_the_install_names_every_role_and_what_it_may_do() -> None:
    said = rbac_paragraph()
    for role in rbac_objects("deploy/base/rbac.yaml"):
        name = role["metadata"]["name"]
        if role["kind"] == "Role":
            assert f"Role `{name}`" in said, f"install.md's RBAC paragraph does not name the Role {name}"
        for rule in role["rules"]:
            for word in [*rule["resources"], *rule.get("resourceNames", []), *rule["verbs"]]:
                assert re.search(rf"\b{re.escape(word)}\b", said), (
                    f"install.md's RBAC paragraph does not say {role['kind']} {name} grants {word} ({rule})")


# How a page may name a resource kind: its kind's words, plural, in any case ("PodDisruptionBudgets"), or these.
RESOURCE_WORDS = {"resourceslices": "DRA resources", "deviceclasses": "DRA resources",
                  "resourceclaims": "DRA resources", "resourceclaimtemplates": "DRA resources",
                  "customresourcedefinitions": "CRD", "leases": "Lease"}


def test_the_upgraders_rbac_is_what_its_page_says() -> None:
    text = page_text(REPO / "docs" / "users" / "upgrade.md")
    m = re.search(r"its own ServiceAccount and RBAC(.*?)\. It is apart", text)
    assert m, "docs/users/upgrade.md no longer says what the upgrader's RBAC allows"
    said = m.group(1).lower()
    for role in rbac_objects("deploy/upgrader/rbac.yaml"):
        for rule in role["rules"]:
            for resource in rule["resources"]:
                word = RESOURCE_WORDS.get(resource, resource).lower()
                assert word in said or word in said.replace(" ", ""), (
                    f"docs/users/upgrade.md does not say the upgrader's {role['kind']} grants {resource} ({rule})")


def test_the_labellers_rbac_is_what_security_says() -> None:
    (role,) = rbac_objects("deploy/labeller/rbac.yaml")
    verbs = sorted({v for rule in role["rules"] for v in rule["verbs"]})
    resources = sorted({r for rule in role["rules"] for r in rule["resources"]})
    said = f"RBAC ({', '.join(verbs)} {', '.join(resources)})"
    assert said in (REPO / "docs" / "operators" / "security.md").read_text()


# --- one version -----------------------------------------------------------------------------------------------

CHANGELOG_SECTION = re.compile(r"^## (\S+)(?: \((unreleased|\d{4}-\d{2}-\d{2})\))?\s*$", re.M)
OUR_IMAGES = {"gpu-class", "gpu-class-scheduler"}


def test_setup_cfg_reads_the_version_from_the_package() -> None:
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    assert setup["metadata"]["version"] == "attr: webhook.__version__"
    assert re.fullmatch(r"\d+\.\d+\.\d+", webhook.__version__)


def test_the_chart_is_the_packages_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == webhook.__version__


@pytest.mark.parametrize("kustomization", ["deploy/base/kustomization.yaml", "deploy/scheduler/kustomization.yaml",
                                           "deploy/labeller/kustomization.yaml", "deploy/upgrader/kustomization.yaml"])
def test_our_images_are_tagged_with_the_version(kustomization: str) -> None:
    images = yaml.safe_load((REPO / kustomization).read_text())["images"]
    tags = {i["name"]: i["newTag"] for i in images if i["name"] in OUR_IMAGES}
    assert tags and set(tags.values()) == {webhook.__version__}, f"{kustomization}: {tags}"


IMAGE_TAG = re.compile(r"\bgpu-class(?:-scheduler)?:(\d+\.\d+\.\d+)")


def test_every_tag_of_our_images_written_is_the_version() -> None:
    """A build command or image of ours written in a page, manifest or script (`docker build -t
    REGISTRY/gpu-class:X.Y.Z`) names this version, so a release's bump leaves none behind."""
    written = [p for p in repo_files() if p.name != "CHANGELOG.md" and not rel(p).startswith(("tests/", "bench/"))
               and (p.suffix in (".md", ".yaml", ".tpl", ".sh") or p.name in ("Dockerfile", "context"))]
    old = [f"{rel(p)}: {m.group(0)}" for p in written for m in IMAGE_TAG.finditer(p.read_text())
           if m.group(1) != webhook.__version__]
    assert not old, f"images of another version than {webhook.__version__}: {old}"


def test_the_changelogs_newest_section_is_the_version() -> None:
    """The newest section is the version, `(unreleased)` until the release names its date."""
    sections = CHANGELOG_SECTION.findall((REPO / "CHANGELOG.md").read_text())
    assert sections, "CHANGELOG.md has no section `## X.Y.Z (unreleased)` or `## X.Y.Z (YYYY-MM-DD)`"
    version, state = sections[0]
    assert version == webhook.__version__ and state, (
        f"CHANGELOG.md's newest section is `## {version}{f' ({state})' if state else ''}`; the package is "
        f"{webhook.__version__}: its section is `## {webhook.__version__} (unreleased)` until released")
    assert all(s != "unreleased" for _, s in sections[1:]), "only the newest section may be unreleased"
