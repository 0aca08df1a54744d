"""`gpuclass explain` says which guarantee a placed Pod's order gets (explain.guarantee)."""

from __future__ import annotations

from typing import Any

import pytest

from builders import make_catalog, make_node, make_pod
from webhook.core.catalog.model import Catalog
from webhook.core.reports.explain import guarantee
from webhook.core.view.inventory import build_snapshot
from webhook.core.admission.review import Request, review_pod

NODES = [make_node("h100-a", "NVIDIA-H100-80GB-HBM3", gpus=8), make_node("a100-a", "A100-SXM4-40GB", gpus=4)]


def review(pod: dict[str, Any], catalog: Catalog) -> Any:
    request = Request(api_version="admission.k8s.io/v1", uid="u", operation="CREATE", kind="Pod", group="",
                      sub_resource="", namespace="ml", object=pod, name=pod["metadata"]["name"])
    return review_pod(request, build_snapshot(catalog, NODES), catalog)


@pytest.mark.parametrize("catalog_extra, spec, expected", [
    pytest.param("", {}, "preferred", id="stock-scheduler-gets-preferences"),
    pytest.param("", {"schedulerName": "gpu-class-scheduler"}, "strict", id="pod-names-the-strict-scheduler"),
    pytest.param("schedulerName: gpu-class-scheduler\n", {}, "strict", id="catalog-routes-to-the-strict-scheduler"),
    pytest.param("strictSchedulers: [gpu-class-extender]\n", {"schedulerName": "gpu-class-extender"}, "strict",
                 id="another-strict-scheduler"),
    pytest.param("strictSchedulers: [gpu-class-extender]\n", {"schedulerName": "gpu-class-scheduler"}, "preferred",
                 id="a-name-not-listed-is-no-promise"),
    pytest.param("schedulerName: gpu-class-scheduler\n", {"schedulerName": "volcano"}, "preferred",
                 id="pod-keeps-its-own-scheduler"),
])
def test_guarantee_follows_the_scheduler(catalog_extra: str, spec: dict[str, Any], expected: str) -> None:
    catalog = make_catalog(catalog_extra)
    pod = make_pod({"gpu-class.io/class": "high"}, extra_spec=spec)
    kind, why = guarantee(pod, review(pod, catalog), catalog)
    assert kind == expected
    assert ("profile that scores the class's strategy" in why) if expected == "strict" else ("preference" in why)


def test_a_refused_pod_has_no_guarantee() -> None:
    catalog = make_catalog()
    pod = make_pod({"gpu-class.io/class": "no-such-class"})
    assert guarantee(pod, review(pod, catalog), catalog)[0] == "none"
