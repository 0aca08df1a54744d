"""The import contracts of webhook/ and bench/ (setup.cfg, [importlinter]): layers, a pure core, one way from serving
to the cluster, no cycles; in bench/, experiments over bench.common, none importing another but groups over placement.
A broken contract fails here with import-linter's own report of the offending imports."""

from __future__ import annotations

import ast
import configparser
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import bench
import webhook
import webhook.cluster
import webhook.core

REPO = Path(__file__).resolve().parent.parent
SETUP_CFG = REPO / "setup.cfg"
INTERFACE = "webhook.cluster.source"


def lint_imports() -> Path:
    script = Path(sys.executable).parent / "lint-imports"
    if script.exists():
        return script
    found = shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'", pytrace=False)
    return Path(found)


def contract(name: str) -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(SETUP_CFG)
    return config[f"importlinter:contract:{name}"]


def listed(section: configparser.SectionProxy, key: str) -> set[str]:
    return {line.strip() for line in section[key].splitlines() if line.strip()}


def test_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [str(lint_imports()), str(SETUP_CFG), "--no-cache"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    if result.returncode != 0:
        pytest.fail(f"import contract broken (setup.cfg, [importlinter]):\n{result.stdout}{result.stderr}", pytrace=False)


def test_serving_contract_forbids_every_cluster_module_but_the_interface() -> None:
    # the contract names modules, so a new cluster module would be open to serving unless listed
    modules = {m.name for m in pkgutil.walk_packages(webhook.cluster.__path__, prefix="webhook.cluster.")}
    assert INTERFACE in modules
    forbidden = listed(contract("serving-through-source"), "forbidden_modules")
    missing = sorted(modules - {INTERFACE} - forbidden)
    assert not missing, f"add {missing} to forbidden_modules of [importlinter:contract:serving-through-source] in setup.cfg"
    assert INTERFACE not in forbidden


def test_layers_name_every_subpackage() -> None:
    top = {m.name for m in pkgutil.iter_modules(webhook.__path__)}
    layers = listed(contract("layers"), "layers")
    assert top == layers, f"webhook/ holds {sorted(top)}; the layers contract names {sorted(layers)}"


def test_bench_layers_name_every_subpackage() -> None:
    # a subpackage the layers contract does not name would be free to import any experiment
    top = {m.name for m in pkgutil.iter_modules(bench.__path__)}
    layers = {name.strip() for line in listed(contract("bench-layers"), "layers") for name in line.split("|")}
    assert top == layers, f"bench/ holds {sorted(top)}; the bench-layers contract names {sorted(layers)}"


def test_core_rooms_name_every_subpackage_and_nothing_lies_loose() -> None:
    # a module dropped in webhook/core itself, or a room the contract does not name, would be outside every layer
    entries = list(pkgutil.iter_modules(webhook.core.__path__))
    loose = sorted(m.name for m in entries if not m.ispkg)
    assert not loose, f"webhook/core/ holds modules outside its rooms: {loose}; put each in the room of its concern"
    rooms = {m.name for m in entries}
    layers = {name.strip() for line in listed(contract("core-rooms"), "layers") for name in line.split("|")}
    assert rooms == layers, f"webhook/core/ holds {sorted(rooms)}; the core-rooms contract names {sorted(layers)}"


# The sizes a reader can hold in mind: a function on one screen, a class read in one sitting, and in the decision
# path (what a Pod's admission reads) no module a reader must page through.
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250
MAX_DECISION_MODULE_LINES = 400
DECISION_PATH = ("webhook/core/catalog", "webhook/core/view", "webhook/core/admission")


def _definitions(path: Path) -> Iterator[tuple[str, int, int]]:
    """(kind, first line, lines) of each function and class in `path`, nested ones included."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            assert node.end_lineno is not None
            yield ("class" if isinstance(node, ast.ClassDef) else "function"), node.lineno, node.end_lineno - node.lineno + 1


def test_no_function_or_class_outgrows_a_reading() -> None:
    over = []
    for path in sorted((REPO / "webhook").rglob("*.py")):
        for kind, line, size in _definitions(path):
            limit = MAX_CLASS_LINES if kind == "class" else MAX_FUNCTION_LINES
            if size > limit:
                over.append(f"{path.relative_to(REPO)}:{line}: a {kind} of {size} lines (at most {limit})")
    assert not over, "split by what each part does:\n" + "\n".join(over)


def test_no_module_of_the_decision_path_outgrows_a_reading() -> None:
    over = [f"{path.relative_to(REPO)}: {lines} lines" for room in DECISION_PATH
            for path in sorted((REPO / room).rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_DECISION_MODULE_LINES]
    assert not over, f"modules over {MAX_DECISION_MODULE_LINES} lines in the decision path:\n" + "\n".join(over)
