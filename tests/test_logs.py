"""Structured logs: one JSON line per admission with the fields an operator needs, and no Pod spec."""

from __future__ import annotations

import json
import logging

import pytest

from builders import CATALOG_NODES, make_catalog, make_pod, make_review
from webhook.serving import logs
from webhook.cluster.source import StaticInventory
from webhook.serving.app import create_app
from webhook.core.view.inventory import build_snapshot

CATALOG = make_catalog()


@pytest.fixture
def client():  # type: ignore[no-untyped-def]
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    logs.configure("info")
    yield create_app(CATALOG, StaticInventory(build_snapshot(CATALOG, CATALOG_NODES))).test_client()
    # threads of other tests may log later: leave no handler on this test's captured stream
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("annotations, outcome, klass, types", [
    pytest.param({"gpu-class.io/class": "high"}, "patched", "high", ["H100", "A100"], id="patched"),
    pytest.param({"gpu-class.io/class": "turbo"}, "refused", "turbo", None, id="refused"),
    pytest.param({}, "out-of-scope", None, None, id="out-of-scope"),
])
def test_one_json_line_per_admission(client, capfd: pytest.CaptureFixture[str], annotations: dict[str, str],  # type: ignore[no-untyped-def]
                                     outcome: str, klass: str | None, types: list[str] | None) -> None:
    pod = make_pod(annotations, name="train-7f9c", containers=[
        {"name": "main", "image": "registry.example/secret-image:1", "env": [{"name": "TOKEN", "value": "s3cr3t"}]}])
    client.post("/mutate", json=make_review(pod, uid="log-1"))
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1
    entry = lines[0]
    assert entry["level"] == "info" and entry["msg"] == "admission" and entry["time"].endswith("Z")
    assert (entry["uid"], entry["namespace"], entry["pod"]) == ("log-1", "ml", "train-7f9c")
    assert (entry["outcome"], entry["class"], entry["types"]) == (outcome, klass, types)
    assert entry["duration_ms"] >= 0
    assert "s3cr3t" not in json.dumps(entry) and "secret-image" not in json.dumps(entry)


def test_bad_requests_are_logged_and_warning_level_silences_admissions(client, capfd: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    client.post("/mutate", data=b"nonsense")
    entry = json.loads(capfd.readouterr().err.strip())
    assert entry["outcome"] == "bad-request" and "not JSON" in entry["message"]
    logs.configure("warning")
    client.post("/mutate", json=make_review(make_pod({"gpu-class.io/class": "high"})))
    assert capfd.readouterr().err == ""


def test_unknown_log_level_is_refused() -> None:
    with pytest.raises(ValueError, match="debug, info, warning, error"):
        logs.configure("loud")
