"""How many tests the suite holds, of which kind: the table of docs/contributors/tests.md, counted from what pytest
collects (a parametrized case is one item; collection runs no test and starts no cluster).

Each test file is of one kind, by the first and only rule of KIND_RULES whose pattern its path matches; a file no
rule names is behaviour, so a new test file needs no entry unless it renders, checks the docs or needs a cluster.
A file two rules name is an error: the kinds would not add up to the suite. gpu-class-scheduler's plugin is tested
in Go, and those tests are one pytest item (tests/test_scheduler_plugin.py): its `func Test...` functions are
counted beside it from the `*_test.go` files, without building anything.

    .venv/bin/python tests/tools/count_tests.py          # print the table
    .venv/bin/python tests/tools/count_tests.py --write  # write it into docs/contributors/tests.md

tests/test_docs_counts.py fails when the page's table is not what this counts now.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "contributors" / "tests.md"
GO_PLUGIN = Path("deploy/scheduler/plugin")
COMMAND = ".venv/bin/python tests/tools/count_tests.py --write"
# Plain asserts: collection needs no assertion rewriting, which costs about a third of its time.
COLLECT = ("-m", "pytest", "--collect-only", "-q", "--assert=plain", "-p", "no:cacheprovider", "tests")
BEGIN = "<!-- counted by tests/tools/count_tests.py: begin -->"
END = "<!-- counted by tests/tools/count_tests.py: end -->"

Kind = Literal["behaviour", "rendering", "docs", "go", "e2e"]
BEHAVIOUR: Kind = "behaviour"


class CountError(Exception):
    """The suite could not be counted, or a file is of two kinds."""


@dataclass(frozen=True)
class KindRule:
    kind: Kind
    name: str
    checks: str
    patterns: tuple[str, ...]


@dataclass(frozen=True)
class Part:
    """A share of the behaviour items the page names apart (a file of another kind is not counted in it)."""
    checks: str
    patterns: tuple[str, ...]


# fnmatch patterns over the path from the repository root ('*' also crosses '/', so none below starts with one).
KIND_RULES: tuple[KindRule, ...] = (
    KindRule("rendering", "rendering",
             "the install as it is rendered and shipped: the chart, the kustomize manifests, the monitoring files, "
             "the scheduler's configuration",
             ("tests/test_chart*.py", "tests/test_deploy*.py", "tests/test_kustomize*.py", "tests/test_monitoring*.py",
              "tests/test_scheduler.py")),
    KindRule("docs", "docs and strings",
             "links, anchors and commands of the Markdown pages, their claims about what ships, the README's figures "
             "and its quick-start, this table",
             ("tests/test_docs*.py", "tests/test_readme*.py", "tests/test_quickstart*.py")),
    KindRule("go", "Go plugin",
             "gpu-class-scheduler's plugin, by `go test ./...` in `deploy/scheduler/plugin` (one item)",
             ("tests/test_scheduler_plugin.py",)),
    KindRule("e2e", "e2e", "the real control plane (and, without one, the tier's own judge of where a Pod can land)",
             ("tests/e2e/*",)),
)
BEHAVIOUR_RULE = KindRule(BEHAVIOUR, "behaviour",
                          "what the webhook, the labeller, the CLI and the benchmarks' own code do, without a cluster",
                          ())
BEHAVIOUR_PARTS: tuple[Part, ...] = (
    Part("the benchmarks' code", ("tests/test_bench_*.py", "tests/test_placement_bench.py", "tests/test_faults.py")),
    Part("the test harness itself",
         ("tests/test_fakeapi.py", "tests/test_local_cluster.py", "tests/test_kubernetes_releases.py")),
)


@dataclass(frozen=True)
class Counts:
    items_by_file: Mapping[str, int]
    go_tests: int
    go_benchmarks: int


def _matches(path: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def kind_of(path: str, rules: Sequence[KindRule] = KIND_RULES) -> Kind:
    named = [rule.kind for rule in rules if _matches(path, rule.patterns)]
    if len(named) > 1:
        raise CountError(f"{path} is named by the rules of {named}: narrow a pattern of KIND_RULES so one names it")
    return named[0] if named else BEHAVIOUR


def items_by_file(collected: str) -> dict[str, int]:
    """Items per file from `pytest --collect-only -q`'s output, checked against the total pytest reports."""
    counts: Counter[str] = Counter()
    for line in collected.splitlines():
        if not line.strip():
            break
        if "::" in line:
            counts[line.split("::", 1)[0]] += 1
    total = re.search(r"^(\d+) tests? collected", collected, re.MULTILINE)
    if total is None:
        raise CountError(f"pytest reported no total; its output ends:\n{collected[-2000:]}")
    if sum(counts.values()) != int(total.group(1)):
        raise CountError(f"read {sum(counts.values())} items but pytest collected {total.group(1)}")
    return dict(counts)


_GO_FUNC = re.compile(r"^func (Test|Benchmark)(?![a-z])\w*\(\w+ \*testing\.([TB])\)", re.MULTILINE)


def go_functions(sources: Iterable[str]) -> tuple[int, int]:
    """(tests, benchmarks) the go tool would find: top-level `func TestX(t *testing.T)` and `BenchmarkX(b *testing.B)`."""
    found = Counter(f"{prefix}{kind}" for text in sources for prefix, kind in _GO_FUNC.findall(text))
    return found["TestT"], found["BenchmarkB"]


def collect(repo: Path = REPO) -> Counts:
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    done = subprocess.run([sys.executable, *COLLECT], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise CountError(f"pytest could not collect the suite (exit {done.returncode}):\n"
                         f"{done.stdout[-4000:]}{done.stderr[-2000:]}")
    sources = [path.read_text() for path in sorted((repo / GO_PLUGIN).rglob("*_test.go"))]
    tests, benchmarks = go_functions(sources)
    return Counts(items_by_file(done.stdout), tests, benchmarks)


def _number(value: int) -> str:
    return f"{value:,}"


def _files(patterns: Sequence[str]) -> str:
    return ", ".join(f"`{pattern}`" for pattern in patterns)


def render(counts: Counts) -> str:
    """The page's block: the table by kind, the shares of behaviour, the Go tests, and how to count again."""
    by_kind: Counter[Kind] = Counter()
    for path, items in counts.items_by_file.items():
        by_kind[kind_of(path)] += items
    rows = [f"| {BEHAVIOUR_RULE.name} | {BEHAVIOUR_RULE.checks} | every test file no rule below names | "
            f"{_number(by_kind[BEHAVIOUR])} |"]
    rows += [f"| {rule.name} | {rule.checks} | {_files(rule.patterns)} | {_number(by_kind[rule.kind])} |"
             for rule in KIND_RULES]
    rows.append(f"| all | | `tests/` | {_number(sum(by_kind.values()))} |")
    behaviour = {path: n for path, n in counts.items_by_file.items() if kind_of(path) == BEHAVIOUR}
    parts = [f"{_number(sum(n for path, n in behaviour.items() if _matches(path, part.patterns)))} "
             f"test {part.checks} ({_files(part.patterns)})" for part in BEHAVIOUR_PARTS]
    return "\n".join([
        BEGIN,
        "| kind | what it checks | files | items |",
        "| --- | --- | --- | ---: |",
        *rows,
        "",
        f"Of the behaviour items, {'; '.join(parts)}. The Go plugin's one item runs {counts.go_tests} Go test "
        f"functions (`func Test...` in `deploy/scheduler/plugin`'s `*_test.go`, most of them tables of cases), "
        f"its {counts.go_benchmarks} benchmarks not run.",
        "",
        f"Counted by `{COMMAND}`, which writes this table.",
        END,
    ])


def _block_bounds(page: str) -> tuple[int, int]:
    start, stop = page.find(BEGIN), page.find(END)
    if start < 0 or stop < start:
        raise CountError(f"the page has no block between {BEGIN!r} and {END!r} to hold the counts")
    return start, stop + len(END)


def replace_block(page: str, block: str) -> str:
    start, stop = _block_bounds(page)
    return page[:start] + block + page[stop:]


def current_block(page: str) -> str:
    start, stop = _block_bounds(page)
    return page[start:stop]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help="write the table into docs/contributors/tests.md")
    args = parser.parse_args(argv)
    try:
        block = render(collect())
        if args.write:
            DOC.write_text(replace_block(DOC.read_text(), block))
    except CountError as error:
        print(f"count_tests: {error}", file=sys.stderr)
        return 1
    print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
