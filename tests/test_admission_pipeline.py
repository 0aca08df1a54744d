"""One admission, traced: from review_pod to its patch, each module of the decision is entered once, in the order
planner.decide runs its steps (webhook/core/admission/planner.py; docs/decisions/core-by-concern.md).

How the trace counts, and why:

- A module is *entered* when code outside it calls a function written in it; the caller is the nearest frame of
  the admission below the called one. Control coming back to a module, when a call it made returns, does not enter
  it again. That is also why planner.py, the driver, needs no rule of its own: review_pod enters it once, each step
  returns to it, and it calls the next; a step it calls twice in a row would show as one entry, one step calling
  another would show as the other entered from the step, not from the driver.
- Only code written in the admission's modules counts. The catalog's and the view's modules are record reads and
  are left out, and so is words.py, which writes every step's messages and decides nothing. The methods that
  dataclasses generate (a record's __init__, __eq__, __hash__) are not written in a module: building or comparing
  a record enters nothing. A property or method written on an admission record does count.

The steps are read from planner.decide's own source, so the test follows the code: a step added there is expected
here, where decide calls it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import pytest

from builders import CATALOG_NODES, make_catalog, make_namespace, make_pod, make_review
from webhook.core.admission import planner
from webhook.core.admission.kueue import PODSET_LABEL
from webhook.core.admission.review import Review, parse_review, review_pod
from webhook.core.view.inventory import build_snapshot

PACKAGE = "webhook.core.admission"
ADMISSION = Path(planner.__file__).resolve().parent
LEFT_OUT = {f"{PACKAGE}.words"}  # messages for every step: decides nothing
# review_pod enters the planner, whose plan reads the Pod once, whole (ask.read_pod, which checks its shape, then
# reads its annotations) before decide runs the steps; review_pod then writes the patch
READ = ("review", "planner", "ask", "shape", "annotations")
WRITE = ("patch",)

CATALOG = make_catalog()
NODES = [*CATALOG_NODES, make_namespace("ml"), make_namespace("team", default_class="standard")]
CLASS, GROUP, GROUP_SIZE = "gpu-class.io/class", "gpu-class.io/group", "gpu-class.io/group-size"


def labelled(pod: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    pod["metadata"]["labels"] = labels
    return pod


def pipeline_steps() -> list[str]:
    """The modules of the functions decide calls, in the order its source calls them."""
    tree = ast.parse(inspect.getsource(planner.decide))
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)),
                   key=lambda node: (node.lineno, node.col_offset))
    steps = []
    for call in calls:
        assert isinstance(call.func, ast.Name)
        called = vars(planner).get(call.func.id)
        module = getattr(called, "__module__", "")
        if inspect.isfunction(called) and module.startswith(PACKAGE + ".") and module != planner.__name__:
            steps.append(module.removeprefix(PACKAGE + "."))
    return steps


def _module_of(frame: FrameType) -> str | None:
    """The admission module whose own code runs in `frame`; None for any other code."""
    module = frame.f_globals.get("__name__", "")
    if not module.startswith(PACKAGE + ".") or module in LEFT_OUT:
        return None
    return module.removeprefix(PACKAGE + ".") if Path(frame.f_code.co_filename).parent == ADMISSION else None


@dataclasses.dataclass
class Entry:
    module: str
    caller: str | None  # the admission module that called it; None: the test


def trace(admit: Callable[[], Any]) -> tuple[Any, list[Entry]]:
    """What `admit` returns, and each admission module entered, in order."""
    entries: list[Entry] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or (module := _module_of(frame)) is None:
            return
        below = frame.f_back
        while below is not None and _module_of(below) is None:
            below = below.f_back
        caller = None if below is None else _module_of(below)
        if caller != module:
            entries.append(Entry(module, caller))

    sys.setprofile(profile)
    try:
        result = admit()
    finally:
        sys.setprofile(None)
    return result, entries


def collapsed(entries: list[Entry]) -> list[str]:
    """The modules entered, a run of entries into one module as one: a step that calls a helper module twice
    in a row, with nothing else entered between, has not left it."""
    modules: list[str] = []
    for entry in entries:
        if not modules or modules[-1] != entry.module:
            modules.append(entry.module)
    return modules


@dataclasses.dataclass(frozen=True)
class Case:
    pod: dict[str, Any]
    namespace: str = "ml"
    skipped: tuple[str, ...] = ("unplaced",)  # steps the admission does not reach: a placed Pod skips the unplaced
    within: tuple[tuple[str, str], ...] = ()  # (step, module it enters for its work): a group's scope, in the fit
    outcome: str = "patched"  # a Pod refused gets no patch: patch.py is not entered


CASES = [
    pytest.param(Case(make_pod({CLASS: "high"})), id="a-class-pod"),
    pytest.param(Case(make_pod({CLASS: "high", GROUP: "train", GROUP_SIZE: "2"}), within=(("fit", "groups"),)),
                 id="a-pod-of-a-group"),
    pytest.param(Case(labelled(make_pod({CLASS: "high"}, gpu_limit="1"), {PODSET_LABEL: "main"})),
                 id="a-pod-kueue-started"),
    pytest.param(Case(make_pod(gpu_limit="1"), namespace="team"), id="a-gpu-pod-given-its-namespaces-default-class"),
    # the branch for a fit no type satisfies ends the decision there (the test catalog refuses such a Pod)
    pytest.param(Case(make_pod({CLASS: "high"}, gpu_limit="64"), skipped=("kueue", "place"), outcome="refused"),
                 id="a-pod-no-type-can-take"),
]


def expected(case: Case) -> list[str]:
    modules = list(READ)
    for step in pipeline_steps():
        if step not in case.skipped:
            modules.append(step)
            modules.extend(module for within, module in case.within if within == step)
    return modules + (list(WRITE) if case.outcome == "patched" else [])


def admit(case: Case, snapshot: Any) -> Callable[[], Review]:
    request = parse_review(json.dumps(make_review(case.pod, namespace=case.namespace)).encode())
    return lambda: review_pod(request, snapshot, CATALOG)


@pytest.mark.parametrize("case", CASES)
def test_one_admission_enters_each_step_once_in_the_pipelines_order(case: Case) -> None:
    snapshot = build_snapshot(CATALOG, NODES)
    # the first admission works the fit out, the second finds it in the snapshot's memo: the same road
    for when in ("first", "again"):
        review, entries = trace(admit(case, snapshot))
        assert review.decision.outcome == case.outcome, review.decision.message
        modules = collapsed(entries)
        entered_again = sorted({m for i, m in enumerate(modules) if m in modules[:i]})
        assert not entered_again, f"{when}: {entered_again} entered again after the decision moved on: {modules}"
        assert modules == expected(case), when
        steps = set(pipeline_steps())
        callers = {(e.module, e.caller) for e in entries if e.module in steps}
        assert callers == {(step, "planner") for step in steps & set(modules)}, f"{when}: a step entered from another"


def test_the_pipeline_is_the_named_steps_in_their_order() -> None:
    # route before fit: a group that waits for its best type is fitted as one; unplaced: the branch for a fit no
    # type satisfies
    assert pipeline_steps() == ["policy", "provenance", "need", "route", "fit", "order", "unplaced", "kueue", "place"]
