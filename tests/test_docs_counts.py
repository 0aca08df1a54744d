"""The test counts of docs/contributors/tests.md (tests/tools/count_tests.py): how a file's kind, its items and the
Go plugin's tests are read, and that the page's table is what the suite holds now."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import count_tests
from tools.count_tests import BEGIN, END, CountError, Counts, KindRule, go_functions, items_by_file, kind_of


@pytest.mark.parametrize("path, kind", [
    pytest.param("tests/test_planner.py", "behaviour", id="a-file-no-rule-names"),
    pytest.param("tests/test_something_new.py", "behaviour", id="a-new-file-is-behaviour"),
    pytest.param("tests/test_chart.py", "rendering", id="the-chart"),
    pytest.param("tests/test_chart_values.py", "rendering", id="a-new-chart-file"),
    pytest.param("tests/test_deploy.py", "rendering", id="kustomize"),
    pytest.param("tests/test_scheduler.py", "rendering", id="the-schedulers-configuration"),
    pytest.param("tests/test_scheduler_image.py", "behaviour", id="not-every-scheduler-file-renders"),
    pytest.param("tests/test_scheduler_plugin.py", "go", id="the-go-plugins-tests"),
    pytest.param("tests/test_docs_claims.py", "docs", id="docs-claims"),
    pytest.param("tests/test_docs_counts.py", "docs", id="this-file"),
    pytest.param("tests/test_readme_figures.py", "docs", id="readme"),
    pytest.param("tests/e2e/test_chart_e2e.py", "e2e", id="an-e2e-file-named-like-a-rendering-one"),
    pytest.param("tests/e2e/test_docs_e2e.py", "e2e", id="an-e2e-file-named-like-a-docs-one"),
])
def test_each_file_is_of_the_kind_its_path_says(path: str, kind: str) -> None:
    assert kind_of(path) == kind


def test_a_file_two_rules_name_is_refused_naming_both() -> None:
    rules = (KindRule("docs", "docs", "", ("tests/test_docs*.py",)), KindRule("e2e", "e2e", "", ("tests/*",)))
    with pytest.raises(CountError, match=r"tests/test_docs\.py is named by the rules of \['docs', 'e2e'\]"):
        kind_of("tests/test_docs.py", rules)


COLLECTED = """tests/test_a.py::test_one
tests/test_a.py::test_table[x::y]
tests/e2e/test_b.py::TestClass::test_two

3 tests collected in 0.12s
"""


@pytest.mark.parametrize("collected, expected", [
    pytest.param(COLLECTED, {"tests/test_a.py": 2, "tests/e2e/test_b.py": 1}, id="items-by-file"),
    pytest.param("tests/test_a.py::test_one\n\n1 test collected in 0.01s\n", {"tests/test_a.py": 1}, id="one-test"),
])
def test_items_are_counted_by_file(collected: str, expected: dict[str, int]) -> None:
    assert items_by_file(collected) == expected


@pytest.mark.parametrize("collected, message", [
    pytest.param(COLLECTED.replace("3 tests", "4 tests"), "read 3 items but pytest collected 4", id="a-line-not-read"),
    pytest.param("tests/test_a.py::test_one\n\n1 error in 0.1s\n", "pytest reported no total", id="no-total"),
])
def test_a_count_that_does_not_add_up_is_refused(collected: str, message: str) -> None:
    with pytest.raises(CountError, match=message):
        items_by_file(collected)


@pytest.mark.parametrize("source, expected", [
    pytest.param("func TestIndex(t *testing.T) {\n}\nfunc TestOrder_ties(t *testing.T) {}\n", (2, 0), id="tests"),
    pytest.param("func BenchmarkOrder(b *testing.B) {}\n", (0, 1), id="a-benchmark"),
    pytest.param("func TestMain(m *testing.M) {}\n", (0, 0), id="test-main-is-no-test"),
    pytest.param("func Testify(t *testing.T) {}\n", (0, 0), id="a-lowercase-after-test-is-no-test"),
    pytest.param("// func TestOld(t *testing.T) {}\n", (0, 0), id="commented-out"),
    pytest.param("func (s *suite) TestX(t *testing.T) {}\n", (0, 0), id="a-method"),
    pytest.param("func helper(t *testing.T) {}\n", (0, 0), id="a-helper"),
])
def test_go_tests_are_what_the_go_tool_would_run(source: str, expected: tuple[int, int]) -> None:
    assert go_functions([source]) == expected


def test_the_table_adds_the_kinds_up_and_names_the_go_tests() -> None:
    counts = Counts({"tests/test_planner.py": 5, "tests/test_bench_churn.py": 2, "tests/test_chart.py": 3,
                     "tests/test_docs.py": 4, "tests/test_scheduler_plugin.py": 1, "tests/e2e/test_x_e2e.py": 7},
                    go_tests=12, go_benchmarks=2)
    block = count_tests.render(counts)
    rows = {line.split(" | ")[0].lstrip("| "): line.rsplit(" | ", 1)[1].rstrip(" |")
            for line in block.splitlines() if line.startswith("| ") and not line.startswith(("| kind", "| ---"))}
    assert rows == {"behaviour": "7", "rendering": "3", "docs and strings": "4", "Go plugin": "1", "e2e": "7",
                    "all": "22"}
    assert "2 test the benchmarks' code" in block
    assert "runs 12 Go test functions" in block and "its 2 benchmarks not run" in block
    assert block.startswith(BEGIN) and block.endswith(END)


@pytest.mark.parametrize("page, expected", [
    pytest.param(f"before\n{BEGIN}\nold\n{END}\nafter\n", "before\nNEW\nafter\n", id="only-the-block"),
    pytest.param(f"{BEGIN}{END}", "NEW", id="an-empty-block"),
])
def test_write_replaces_the_block_and_keeps_the_page(page: str, expected: str) -> None:
    assert count_tests.replace_block(page, "NEW") == expected


@pytest.mark.parametrize("page", [
    pytest.param("no markers\n", id="none"),
    pytest.param(f"{END}\n{BEGIN}\n", id="in-the-wrong-order"),
])
def test_a_page_without_the_block_is_refused(page: str) -> None:
    with pytest.raises(CountError, match="has no block"):
        count_tests.replace_block(page, "NEW")


def test_the_pages_table_is_what_the_suite_holds_now() -> None:
    counted = count_tests.render(count_tests.collect())
    written = count_tests.current_block(count_tests.DOC.read_text())
    assert written == counted, f"the test counts of docs/contributors/tests.md are stale: run {count_tests.COMMAND}"


def test_write_puts_the_count_into_the_page_and_a_page_without_the_block_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    counts = Counts({"tests/test_planner.py": 3}, go_tests=1, go_benchmarks=0)
    monkeypatch.setattr(count_tests, "collect", lambda: counts)
    page = tmp_path / "tests.md"
    monkeypatch.setattr(count_tests, "DOC", page)
    page.write_text(f"# Tests\n{BEGIN}\nstale\n{END}\nkept\n")
    assert count_tests.main(["--write"]) == 0
    assert page.read_text() == f"# Tests\n{count_tests.render(counts)}\nkept\n"
    page.write_text("# Tests\n")
    assert count_tests.main(["--write"]) == 1
    assert "has no block" in capsys.readouterr().err
    assert page.read_text() == "# Tests\n"
