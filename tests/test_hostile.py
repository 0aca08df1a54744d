"""Hostile and broken input: whatever a client sends, the answer is a JSON 4xx or a valid AdmissionReview
response whose patch applies, never a 5xx; and no annotation can produce placement the catalog does not allow."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import CATALOG_NODES, make_catalog, make_pod, make_review
from webhook.cluster.source import StaticInventory
from webhook.serving.app import create_app
from webhook.core.view.inventory import build_snapshot

CATALOG = make_catalog()
APP = create_app(CATALOG, StaticInventory(build_snapshot(CATALOG, CATALOG_NODES)), max_body_bytes=256 * 1024)
CLIENT = APP.test_client()
ALL_PRODUCTS = {p for t in CATALOG.types.values() for p in t.products}

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            found += paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += paths(v, prefix + (i,))
    return found


def replaced(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    result = copy.deepcopy(obj)
    target = result
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return result


RICH_POD = make_pod(
    {"gpu-class.io/class": "high", "gpu-class.io/count": "2", "gpu-class.io/exclude-types": "H200"},
    containers=[{"name": "main", "image": "x", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}},
                {"name": "side", "image": "y"}],
    tolerations=[{"key": "k", "operator": "Exists"}],
    affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
)
BASE_REVIEW = make_review(RICH_POD)
REVIEW_PATHS = paths(BASE_REVIEW)


def post(body: bytes) -> tuple[int, Any]:
    response = CLIENT.post("/mutate", data=body, content_type="application/json")
    return response.status_code, response.get_json(silent=True)


def check_answer(status: int, body: Any, request_body: bytes) -> None:
    assert status < 500, body
    assert isinstance(body, dict), "every answer is JSON"
    if status != 200:
        assert 400 <= status < 500 and isinstance(body.get("message"), str)
        return
    response = body["response"]
    assert body["kind"] == "AdmissionReview" and isinstance(response["allowed"], bool)
    review = json.loads(request_body)
    assert response["uid"] == review["request"]["uid"]
    if "patch" in response:
        original = review["request"]["object"]
        ops = json.loads(base64.b64decode(response["patch"]))
        patched = jsonpatch.apply_patch(original, ops)
        if ops == [{"op": "remove", "path": "/metadata/annotations/gpu-class.io~1types"}]:
            # a Pod gpu-class does not place loses the gpu-class.io/types its author wrote, and nothing else
            assert response["allowed"] and "gpu-class.io/types" not in patched["metadata"]["annotations"]
        else:
            check_placement_is_from_the_catalog(patched, len(original["spec"].get("tolerations") or []))
    if not response["allowed"]:
        assert response["status"]["message"]


def check_placement_is_from_the_catalog(pod: dict[str, Any], own_tolerations: int) -> None:
    """Whatever the annotations said, tolerations and product restrictions come from the catalog alone."""
    spec = pod["spec"]
    for tol in (spec.get("tolerations") or [])[own_tolerations:]:
        assert tol["key"] in CATALOG.gpu_taint_keys and tol["operator"] == "Exists"
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    for term in node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
        for expr in term.get("matchExpressions") or []:
            if isinstance(expr, dict) and expr.get("key") in CATALOG.product_labels:
                assert set(expr["values"]) <= ALL_PRODUCTS
    types = pod["metadata"]["annotations"]["gpu-class.io/types"].split(",")
    assert set(types) <= set(CATALOG.types)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_random_bytes(body: bytes) -> None:
    status, answer = post(body)
    assert 400 <= status < 500 and isinstance(answer, dict) and answer["message"]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(json.dumps(BASE_REVIEW)) - 1))
def test_truncated_reviews(cut: int) -> None:
    status, answer = post(json.dumps(BASE_REVIEW).encode()[:cut])
    assert status == 400 and answer["error"] == "Bad Request"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(REVIEW_PATHS), json_value)
def test_wrong_types_in_every_field(path: tuple[Any, ...], value: Any) -> None:
    body = json.dumps(replaced(BASE_REVIEW, path, value)).encode()
    check_answer(*post(body), body)


ANNOTATION_KEYS = ["gpu-class.io/class", "gpu-class.io/count", "gpu-class.io/container", "gpu-class.io/exclude-types",
                   "gpu-class.io/types"]


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(ANNOTATION_KEYS), st.text(max_size=40) | st.sampled_from(
    ["high", "economy", "2", "0", "main", "side", "H100,A100", "A100", "../../", "high\n", " high", "H100*", "*"]),
    min_size=1))
def test_annotations_cannot_inject(annotations: dict[str, str]) -> None:
    pod = copy.deepcopy(RICH_POD)
    pod["metadata"]["annotations"] = annotations
    body = json.dumps(make_review(pod)).encode()
    check_answer(*post(body), body)


@pytest.mark.parametrize("pod", [
    pytest.param(make_pod({"gpu-class.io/class": "high", "x": "é" * 100_000}), id="huge-annotation"),
    pytest.param(make_pod({"gpu-class.io/class": "高"}), id="unicode-class"),
    pytest.param(make_pod({"gpu-class.io/class": "high\u0000"}), id="nul-in-class"),
    pytest.param({"metadata": None, "spec": None}, id="nulls"),
    pytest.param({"metadata": {"annotations": {"gpu-class.io/class": "high"}}, "spec": {"containers": []}}, id="no-containers"),
    pytest.param({"metadata": {"annotations": {"gpu-class.io/class": "high"}}, "spec": {"containers": [None]}}, id="null-container"),
    pytest.param({"metadata": {"annotations": {"gpu-class.io/class": "high"}}, "spec": {"containers": [{"name": "a"}],
                  "affinity": "x"}}, id="affinity-string"),
    pytest.param({"metadata": {"annotations": {"gpu-class.io/class": "high"}}, "spec": {"containers": [{"name": "a"}],
                  "tolerations": {"a": 1}}}, id="tolerations-object"),
    pytest.param({"metadata": {"annotations": {"gpu-class.io/class": "high"}}, "spec": {"containers": [
        {"name": "a", "resources": {"limits": []}}]}}, id="limits-list"),
])
def test_broken_pods_are_answered(pod: dict[str, Any]) -> None:
    body = json.dumps(make_review(pod)).encode()
    check_answer(*post(body), body)


def test_deeply_nested_json_is_a_400() -> None:
    status, answer = post(b'{"a":' * 200_000 + b"1" + b"}" * 200_000)
    assert status in (400, 413) and answer["message"]


def test_a_huge_class_name_gives_a_short_message() -> None:
    body = json.dumps(make_review(make_pod({"gpu-class.io/class": "x" * 100_000}))).encode()
    status, answer = post(body)
    assert status == 200 and answer["response"]["allowed"] is False
    assert len(answer["response"]["status"]["message"]) < 400


def wsgi_answer(call: Any, method: str, body: bytes, content_length: int | None = None) -> tuple[str, list[Any], bytes]:
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(method=method, path="/mutate", query_string="timeout=10s", data=body,
                             content_type="application/json").get_environ()
    if content_length is not None:
        environ["CONTENT_LENGTH"] = str(content_length)
    seen: dict[str, Any] = {}
    chunks = call(environ, lambda status, headers, exc_info=None: seen.update(status=status, headers=headers))
    return seen["status"], list(seen["headers"]), b"".join(chunks)


@pytest.mark.parametrize("method, body, content_length", [
    pytest.param("POST", json.dumps(make_review(make_pod(annotations={"gpu-class.io/class": "high"}))).encode(), None,
                 id="patched"),
    pytest.param("POST", json.dumps(make_review(make_pod(annotations={"gpu-class.io/class": "nope"}))).encode(), None,
                 id="refused"),
    pytest.param("POST", b"{not json", None, id="not-json"),
    pytest.param("POST", b'{"kind": "AdmissionReview"}', None, id="not-a-review"),
    pytest.param("POST", b"{}", 300 * 1024, id="too-large"),
    pytest.param("GET", b"", None, id="wrong-method"),
])
def test_admission_entry_answers_as_the_flask_route(method: str, body: bytes, content_length: int | None) -> None:
    from flask import Flask

    fast = wsgi_answer(APP.wsgi_app, method, body, content_length)
    routed = wsgi_answer(lambda env, sr: Flask.wsgi_app(APP, env, sr), method, body, content_length)
    assert fast == routed
    assert fast[0].split()[0] in {"200", "400", "405", "413"}
