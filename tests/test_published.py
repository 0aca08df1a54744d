"""What an install publishes of itself for `gpuclass explain` (core/published/public.py), and how a worker writes it
(cluster/publish.py): the catalog and scheduler names read back as the webhook runs them, and a write retried
until it lands, with each kind of failure logged once."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from webhook.cluster import publish
from webhook.core.catalog.builtin import default_catalog_text
from webhook.core.catalog.loading import load_default_catalog
from webhook.core.catalog.model import CatalogError
from webhook.core.published.public import catalog_of, published_data

BUILT_IN = load_default_catalog()


@pytest.mark.parametrize("scheduler, stock", [
    pytest.param(None, (), id="no-scheduler"),
    pytest.param("gpu-class-scheduler", (), id="strict-scheduler"),
    pytest.param("gpu-class-scheduler", ("gpu-class-scheduler",), id="stock-binary"),
])
def test_the_published_catalog_reads_back_as_the_webhook_runs_it(scheduler: str | None, stock: tuple[str, ...]) -> None:
    running = dataclasses.replace(BUILT_IN, scheduler_name=scheduler, stock_schedulers=stock)
    read = catalog_of(published_data(default_catalog_text(), running), "ns/gpu-class-public")
    assert (read.scheduler_name, read.stock_schedulers) == (scheduler, stock)
    assert read.types.keys() == running.types.keys() and read.classes == running.classes


@pytest.mark.parametrize("data, says", [
    pytest.param({}, "ns/cm: no catalog.yaml (no webhook of this install has started yet)", id="not-yet-written"),
    pytest.param({"catalog.yaml": "types: [\n"}, "ns/cm catalog.yaml: not valid YAML", id="not-yaml"),
])
def test_a_published_catalog_that_cannot_be_used_says_why(data: dict[str, str], says: str) -> None:
    with pytest.raises(CatalogError, match=says.replace("(", r"\(").replace(")", r"\)")):
        catalog_of(data, "ns/cm")


class Writes:
    """A write that fails with these statuses (None: the API server unreachable) before it lands."""

    def __init__(self, failures: list[int | None]) -> None:
        self.failures, self.calls = list(failures), 0

    def __call__(self, _api: Any, _namespace: str, _data: dict[str, str]) -> bool:
        self.calls += 1
        if self.failures:
            status = self.failures.pop(0)
            raise OSError("connection refused") if status is None else ApiException(status=status, reason="refused")
        return True


@pytest.mark.parametrize("failures, warnings", [
    pytest.param([], 0, id="first-try"),
    pytest.param([403, 403, 403], 1, id="forbidden-said-once"),
    pytest.param([None, 500, None, 500], 2, id="each-kind-said-once"),
])
def test_a_worker_writes_until_it_lands(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                        failures: list[int | None], warnings: int) -> None:
    monkeypatch.setattr(publish, "FIRST_RETRY_SECONDS", 0.001)
    write = Writes(failures)
    with caplog.at_level(logging.INFO, logger=publish.__name__):
        assert publish.publish(kubernetes.client.CoreV1Api(), "ns", {}, threading.Event(), write)
    assert write.calls == len(failures) + 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == warnings
    forbidden = [r.getMessage() for r in caplog.records if "403" in r.getMessage() or "Role gpu-class-publish" in r.getMessage()]
    assert bool(forbidden) == (403 in failures)


def test_a_stopped_worker_stops_writing() -> None:
    stop = threading.Event()
    stop.set()
    write = Writes([500])
    assert not publish.publish(kubernetes.client.CoreV1Api(), "ns", {}, stop, write)
    assert write.calls == 0
