"""The README's figures were measured on the scheduler that ships.

Every link from the README's "What it promises" table to a section of bench/RESULTS.md points to a
section that names the commit it was measured at (`Commit abc1234` or `Code abc1234`), and that
commit is the last one to change what the placement figures are measured on (MEASURED_ON: the default install's
scheduler, deploy/scheduler/plugin, its Go tests, test binaries and the Dockerfile's comments aside, for they are
not in the image; the profiles of the strict and stock-binary paths; the built-in catalog of GPU types and
classes) or a descendant of it (git merge-base --is-ancestor). A figure measured on an older scheduler, profile or
catalog fails here until it is measured again or taken out of the table. A run made with uncommitted changes (the
benches write so in the section) names no commit that holds what it ran, and fails too.

The create-latency figures (`python -m bench apiserver`) are of Pods no scheduler ever sees (they name a scheduler
that does not exist, bench/apiserver/apiserver.py's UNSCHEDULED): the scheduler's changes do not age them, a change
of webhook/ does (a link whose text says `before the current webhook`, PREDATES_WEBHOOK, quotes an older one on
purpose, as for the scheduler).

The pages of docs/ follow the same rule for every link to a section of a bench that places Pods on a scheduler
(SCHEDULED_BENCH: placement, groups, dra, single, churn, wait): the section was measured on the current scheduler,
or the link's text says `before the current scheduler` (PREDATES), and then it must not be (a section measured
again is quoted as current). docs/contributors/benchmarks.md says so to the writer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.test_docs import HEADING, INLINE_CODE, LINK, REPO, markdown_files, prose_lines, rel, slug

TABLE_HEADING = "What it promises, and what holds"
RESULTS = REPO / "bench" / "RESULTS.md"
SCHEDULER = "deploy/scheduler/plugin"
MEASURED_ON = (SCHEDULER, "deploy/scheduler/config.yaml", "deploy/components/stock-scheduler/config.yaml",
               "webhook/core/catalog/catalog.yaml")
# Go tests and `go test -c` output change no scheduler that ships.
NOT_SHIPPED = [f":(exclude,glob){SCHEDULER}/**/*_test.go", f":(exclude,glob){SCHEDULER}/**/*.test"]
MEASURED_AT = re.compile(r"\b(?:Commit|Code) ([0-9a-f]{7,40})\b")
UNSCHEDULED_BENCH = "python -m bench apiserver"
# The benches whose figures are of Pods a scheduler placed: a section naming one of them ages with the scheduler.
SCHEDULED_BENCH = re.compile(r"python -m bench (?:placement|groups|dra|single|churn|wait)\b")
# What a link's text says when it quotes a run made before the current scheduler, on purpose.
PREDATES = "before the current scheduler"
# The same for a create-latency run (UNSCHEDULED_BENCH), which ages with webhook/ (WEBHOOK) instead.
PREDATES_WEBHOOK = "before the current webhook"
WEBHOOK = "webhook"
# tests.test_docs.LINK with the link's text kept as well (group 1; it may run over lines).
LINK_WITH_TEXT = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def table_links() -> list[tuple[str, str, str]]:
    """(the row's question, the link's text, anchor) for each link from the table to bench/RESULTS.md."""
    links, inside = [], False
    for _, line in prose_lines(REPO / "README.md"):
        m = HEADING.match(line)
        if m:
            inside = m.group(2) == TABLE_HEADING
        elif inside and line.startswith("|"):
            question = line.split("|")[1].strip()
            links += [(question, t.group(1), t.group(2).split("#", 1)[1]) for t in LINK_WITH_TEXT.finditer(line)
                      if t.group(2).startswith("bench/RESULTS.md#")]
    return links


@cache
def sections() -> dict[str, str]:
    """Each level-2 section of bench/RESULTS.md by its anchor (GitHub's: a repeated heading gets -1, -2)."""
    seen: dict[str, int] = {}
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for _, line in prose_lines(RESULTS):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            if len(m.group(1)) <= 2:
                current = found.setdefault(base if n == 0 else f"{base}-{n}", [])
        if current is not None:
            current.append(line)
    return {anchor: "\n".join(lines) for anchor, lines in found.items()}


def shipped(commit: str) -> tuple[tuple[str, str], ...]:
    """What the placement figures are measured on at `commit`: each file of MEASURED_ON with its text, the
    scheduler's Go tests aside and its Dockerfile's comment lines (its `# syntax=` directive kept): a comment
    there, such as the build command naming the version, is in no image."""
    # ls-tree takes no pathspec magic: NOT_SHIPPED's globs, applied here
    names = [n for n in git("ls-tree", "-r", "--name-only", commit, "--", *MEASURED_ON).stdout.split()
             if not n.endswith(("_test.go", ".test"))]
    files = []
    for name in names:
        text = git("show", f"{commit}:{name}").stdout
        if name.endswith("Dockerfile"):
            text = "\n".join(line for line in text.splitlines()
                             if not line.lstrip().startswith("#") or line.startswith("# syntax="))
        files.append((name, text))
    return tuple(files)


@cache
def scheduler_commit() -> str:
    """The last commit that changed what the placement figures are measured on (not the scheduler's tests, not a
    comment of its Dockerfile)."""
    proc = git("log", "--format=%H", "--", *MEASURED_ON, *NOT_SHIPPED)
    commits = proc.stdout.split()
    assert proc.returncode == 0 and commits, f"git log found no commit of {MEASURED_ON}: {proc.stderr}"
    return next((c for c in commits if shipped(c) != shipped(f"{c}^")), commits[-1])


def test_the_table_links_results() -> None:
    assert len(table_links()) >= 5, table_links()


def not_current(anchor: str) -> str | None:
    """Why section #anchor's figures are not of what ships (None when they are): no such section, no commit named,
    uncommitted changes, or a commit before the scheduler's last change."""
    section = sections().get(anchor)
    if section is None:
        return f"no section #{anchor} in bench/RESULTS.md"
    m = MEASURED_AT.search(section)
    if not m:
        return f"section #{anchor} names no commit it was measured at (`Commit abc1234`)"
    if "uncommitted changes" in section:
        return f"#{anchor} was run with uncommitted changes: measure it again at a clean commit"
    resolved = git("rev-parse", "--verify", "--quiet", f"{m.group(1)}^{{commit}}")
    # a missing commit is a broken checkout, not an old figure: fail loudly either way
    assert resolved.returncode == 0, (f"commit {m.group(1)} of #{anchor} is not in this repository's history "
                                      "(a shallow clone needs `git fetch --unshallow`)")
    if is_unscheduled(anchor):
        # no scheduler in the measurement (test_the_create_bench_schedules_nothing): it ages with the webhook
        if git("merge-base", "--is-ancestor", webhook_commit(), resolved.stdout.strip()).returncode != 0:
            return (f"#{anchor} was measured at {m.group(1)}, before the webhook's last change "
                    f"{webhook_commit()[:7]} (of {WEBHOOK}/): measure it again")
        return None
    if git("merge-base", "--is-ancestor", scheduler_commit(), resolved.stdout.strip()).returncode != 0:
        return (f"#{anchor} was measured at {m.group(1)}, before the scheduler's last change "
                f"{scheduler_commit()[:7]} (of {', '.join(MEASURED_ON)}): measure it again")
    return None


@cache
def webhook_commit() -> str:
    """The last commit that changed webhook/, what a create-latency figure is measured on."""
    proc = git("log", "-1", "--format=%H", "--", WEBHOOK)
    assert proc.returncode == 0 and proc.stdout.strip(), f"git log found no commit of {WEBHOOK}/: {proc.stderr}"
    return proc.stdout.strip()


def is_unscheduled(anchor: str) -> bool:
    """Whether section #anchor is a create-latency run, which runs no scheduler."""
    section = sections().get(anchor)
    return section is not None and f"`{UNSCHEDULED_BENCH}" in section.splitlines()[0]


def stale_link(where: str, text: str, anchor: str) -> str | None:
    """What is wrong with a link to a figure (None when nothing): it reaches a section not measured on what ships,
    without its text saying so, or says so of a section that is."""
    why = not_current(anchor)
    predates = PREDATES_WEBHOOK if is_unscheduled(anchor) else PREDATES
    if predates in text:
        if why is None or anchor not in sections():
            return f"{where}: [{text}] says {predates!r}, but #{anchor} was measured on it: quote it as current"
        return None
    if why is not None:
        return f"{where}: [{text}]: {why}; or, to quote the older run on purpose, say so in the link's text: {predates!r}"
    return None


@pytest.mark.parametrize("question, text, anchor", table_links(),
                         ids=[f"{q}#{a[:40]}" for q, _, a in table_links()])
def test_a_readme_figure_was_measured_on_what_ships_or_says_it_was_not(question: str, text: str, anchor: str) -> None:
    why = stale_link(question, text, anchor)
    assert why is None, why


@dataclass(frozen=True)
class ResultsLink:
    """A link from a page to a section of bench/RESULTS.md, with its text (joined onto one line)."""
    page: str
    line: int
    text: str
    anchor: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}#{self.anchor[:40]}"


def results_links(path: Path) -> list[ResultsLink]:
    """Every link of `path` to a section of bench/RESULTS.md; its text may run over lines (one paragraph)."""
    numbered = prose_lines(path)
    text = "\n".join(INLINE_CODE.sub("", line) for _, line in numbered)
    found = []
    for m in LINK_WITH_TEXT.finditer(text):
        page, _, anchor = m.group(2).partition("#")
        if anchor and page and (path.parent / page).resolve() == RESULTS:
            line = numbered[text.count("\n", 0, m.start())][0]
            found.append(ResultsLink(rel(path) if path.is_relative_to(REPO) else path.name, line,
                                     " ".join(m.group(1).split()), anchor))
    return found


def is_scheduled(anchor: str) -> bool:
    """Whether section #anchor holds figures of Pods a scheduler placed (an unknown section counts: it is checked)."""
    section = sections().get(anchor)
    return section is None or SCHEDULED_BENCH.search(section) is not None


def docs_placement_links() -> list[ResultsLink]:
    docs = [p for p in markdown_files() if rel(p).startswith("docs/")]
    return [link for page in docs for link in results_links(page)
            if is_scheduled(link.anchor) or is_unscheduled(link.anchor)]


def test_the_docs_link_placement_results() -> None:
    assert len(docs_placement_links()) >= 10, docs_placement_links()


@pytest.mark.parametrize("link", docs_placement_links(), ids=str)
def test_a_docs_figure_is_current_or_says_it_is_not(link: ResultsLink) -> None:
    why = stale_link(str(link), link.text, link.anchor)
    assert why is None, why


@pytest.mark.parametrize("anchor, scheduled", [
    pytest.param("placement-at-scale-python--m-bench-placement", True, id="placement"),
    pytest.param("dra-placement-on-gpus-published-through-dynamic-resource-allocation", True,
                 id="dra-command-in-the-body"),
    pytest.param("narrowing-through-node-churn-python--m-bench-churn", True, id="churn"),
    pytest.param("on-the-real-api-server-run-1-of-2-python--m-bench-apiserver---arms-nonenoop-patchgpu-class", False,
                 id="create-latency"),
    pytest.param("connection-placement-10-gpu-nodes-gthread-workers2-threads1", False, id="placement-of-connections"),
    pytest.param("no-such-section", True, id="unknown-section-checked"),
])
def test_which_sections_age_with_the_scheduler(anchor: str, scheduled: bool) -> None:
    assert is_scheduled(anchor) == scheduled


@pytest.mark.parametrize("anchor, why", [
    pytest.param("one-gpu-type-per-group-on-the-real-scheduler-python--m-bench-groups", "names no commit",
                 id="no-commit"),
    pytest.param("placement-at-100-and-1000-nodes-on-kubernetes-136-gpuclass_kubernetes_minor136-python--m-bench-"
                 "placement---sizes-1001000---paths-defaultprofiles---burst-0", "uncommitted changes",
                 id="uncommitted"),
    pytest.param("narrowing-through-node-churn-python--m-bench-churn", "before the scheduler's last change",
                 id="older-commit"),
    pytest.param("no-such-section", "no section", id="no-section"),
    pytest.param("on-the-real-api-server-run-1-of-2-python--m-bench-apiserver---arms-nonenoop-patchgpu-class",
                 "before the webhook's last change", id="create-latency-before-the-webhook-changed"),
])
def test_why_a_section_is_not_current(anchor: str, why: str) -> None:
    assert why in (not_current(anchor) or ""), not_current(anchor)


def test_a_link_over_two_lines_is_read_with_its_text(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    results = os.path.relpath(RESULTS, tmp_path)
    page.write_text(f"Intro.\n\n```sh\n[in code]({results}#a)\n```\nSee [an earlier run,\n{PREDATES}]({results}#b), "
                    f"[`code`]({results}#c), [a page](README.md#d) and [the file]({results}).\n")
    assert [(link.line, link.text, link.anchor) for link in results_links(page)] == [
        (6, f"an earlier run, {PREDATES}", "b"), (7, "", "c")]


def test_the_create_bench_schedules_nothing() -> None:
    """What lets its figures outlive a scheduler change: every Pod it creates names a scheduler that does not run."""
    from bench.apiserver import apiserver
    from webhook.core.catalog.loading import load_default_catalog

    catalog = load_default_catalog()
    assert apiserver.UNSCHEDULED not in ("default-scheduler", catalog.scheduler_name, *catalog.strict_schedulers)
    assert json.loads(apiserver.measured_pod())["spec"]["schedulerName"] == apiserver.UNSCHEDULED


@pytest.mark.parametrize("commit, ships_a_change", [
    pytest.param("883c1ab", True, id="go-sources-changed"),
    pytest.param("1345777", False, id="go-tests-only"),
    pytest.param("f2ce824", True, id="the-catalog-changed"),
    pytest.param("a81ca74", True, id="the-profiles-changed"),
])
def test_what_ages_a_figure_is_what_the_image_is_built_from(commit: str, ships_a_change: bool) -> None:
    assert git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").returncode == 0, commit
    assert (shipped(commit) != shipped(f"{commit}^")) == ships_a_change


def test_a_comment_of_the_schedulers_dockerfile_ages_no_figure() -> None:
    """f2ce824 changed only a comment line of the scheduler's Dockerfile (and, apart from it, the catalog)."""
    dockerfile = f"{SCHEDULER}/Dockerfile"
    assert git("show", f"f2ce824:{dockerfile}").stdout != git("show", f"f2ce824^:{dockerfile}").stdout
    assert dict(shipped("f2ce824"))[dockerfile] == dict(shipped("f2ce824^"))[dockerfile]
