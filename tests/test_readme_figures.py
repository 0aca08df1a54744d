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
that does not exist, bench/apiserver/apiserver.py's UNSCHEDULED): they name their commit, and the scheduler's
changes do not age them.
"""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from tests.test_docs import HEADING, LINK, REPO, prose_lines, slug

TABLE_HEADING = "What it promises, and what holds"
RESULTS = REPO / "bench" / "RESULTS.md"
SCHEDULER = "deploy/scheduler/plugin"
MEASURED_ON = (SCHEDULER, "deploy/scheduler/config.yaml", "deploy/components/stock-scheduler/config.yaml",
               "webhook/core/catalog/catalog.yaml")
# Go tests and `go test -c` output change no scheduler that ships.
NOT_SHIPPED = [f":(exclude,glob){SCHEDULER}/**/*_test.go", f":(exclude,glob){SCHEDULER}/**/*.test"]
MEASURED_AT = re.compile(r"\b(?:Commit|Code) ([0-9a-f]{7,40})\b")
UNSCHEDULED_BENCH = "python -m bench apiserver"


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def table_links() -> list[tuple[str, str]]:
    """(the row's question, anchor) for each link from the table to bench/RESULTS.md."""
    links, inside = [], False
    for _, line in prose_lines(REPO / "README.md"):
        m = HEADING.match(line)
        if m:
            inside = m.group(2) == TABLE_HEADING
        elif inside and line.startswith("|"):
            question = line.split("|")[1].strip()
            links += [(question, t.split("#", 1)[1]) for t in LINK.findall(line) if t.startswith("bench/RESULTS.md#")]
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


@pytest.mark.parametrize("question, anchor", table_links(), ids=[f"{q}#{a[:40]}" for q, a in table_links()])
def test_a_readme_figure_was_measured_on_the_current_scheduler(question: str, anchor: str) -> None:
    section = sections().get(anchor)
    assert section is not None, f"{question}: no section #{anchor} in bench/RESULTS.md"
    m = MEASURED_AT.search(section)
    assert m, f"{question}: section #{anchor} names no commit it was measured at (`Commit abc1234`)"
    assert "uncommitted changes" not in section, (f"{question}: #{anchor} was run with uncommitted changes: "
                                                  "measure it again at a clean commit")
    resolved = git("rev-parse", "--verify", "--quiet", f"{m.group(1)}^{{commit}}")
    assert resolved.returncode == 0, (f"{question}: commit {m.group(1)} of #{anchor} is not in this repository's "
                                      "history (a shallow clone needs `git fetch --unshallow`)")
    if f"`{UNSCHEDULED_BENCH}" in section.splitlines()[0]:
        return  # no scheduler in the measurement (test_the_create_bench_schedules_nothing)
    ancestor = git("merge-base", "--is-ancestor", scheduler_commit(), resolved.stdout.strip())
    assert ancestor.returncode == 0, (f"{question}: #{anchor} was measured at {m.group(1)}, before the scheduler's "
                                      f"last change {scheduler_commit()[:7]} (of {', '.join(MEASURED_ON)}): "
                                      "measure it again")


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
