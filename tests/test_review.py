"""AdmissionReview parsing and response building."""

from __future__ import annotations

import base64
import copy
import datetime
import enum
import json
import sys
import threading
import uuid
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import CATALOG_NODES, assert_valid_pod, make_catalog, make_pod, make_review
from webhook.core.view.inventory import build_snapshot
from webhook.core.view.namespaces import NamespaceInfo
from webhook.core.admission.review import COMPACT, BadReview, build_response, encode_compact, load_json, parse_review, review_pod

CATALOG = make_catalog()
SNAPSHOT = build_snapshot(CATALOG, CATALOG_NODES)


def respond(review: dict[str, Any]) -> dict[str, Any]:
    request = parse_review(json.dumps(review).encode())
    return dict(build_response(request, review_pod(request, SNAPSHOT, CATALOG)))


@pytest.mark.parametrize("body, error", [
    pytest.param(b"", "not JSON", id="empty"),
    pytest.param(b"{", "not JSON", id="truncated"),
    pytest.param(b"[]", "not a JSON object", id="array"),
    pytest.param(b"[" * 100000 + b"]" * 100000, "not JSON", id="deeply-nested"),
    pytest.param(b'{"kind": "Pod", "apiVersion": "v1"}', "expected kind AdmissionReview", id="wrong-kind"),
    pytest.param(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v2"}', "apiVersion", id="wrong-version"),
    pytest.param(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', "request must be", id="no-request"),
    pytest.param(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"kind": {}}}',
                 "uid", id="no-uid"),
    pytest.param(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "u"}}',
                 "request.kind", id="no-kind"),
    pytest.param(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",'
                 b' "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": 5}}', "operation", id="operation-int"),
    pytest.param(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",'
                 b' "request": {"uid": "u", "kind": {"kind": "Pod"}, "object": "pod"}}', "request.object", id="object-string"),
    pytest.param(b"\xff\xfe", "not JSON", id="not-utf8"),
])
def test_bad_reviews_are_rejected_with_a_reason(body: bytes, error: str) -> None:
    with pytest.raises(BadReview, match=error):
        parse_review(body)


@pytest.mark.parametrize("operation, kind, sub_resource", [
    pytest.param("UPDATE", "Pod", "", id="update"),
    pytest.param("DELETE", "Pod", "", id="delete"),
    pytest.param("CREATE", "Deployment", "", id="deployment"),
    pytest.param("CREATE", "Pod", "binding", id="binding-subresource"),
])
def test_out_of_scope_requests_are_allowed_unchanged(operation: str, kind: str, sub_resource: str) -> None:
    review = make_review(make_pod({"gpu-class.io/class": "high"}), operation=operation, kind=kind, uid="abc")
    review["request"]["subResource"] = sub_resource
    response = respond(review)["response"]
    assert response == {"uid": "abc", "allowed": True}


def test_patched_response_carries_a_patch_that_applies() -> None:
    pod = make_pod({"gpu-class.io/class": "high"})
    body = respond(make_review(pod, uid="u-42"))
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == "u-42" and response["allowed"] is True and response["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert_valid_pod(patched)
    assert patched["metadata"]["annotations"]["gpu-class.io/types"] == "H100,A100"


def test_refusal_tells_the_user_what_to_write() -> None:
    response = respond(make_review(make_pod({"gpu-class.io/class": "turbo"}), uid="r1"))["response"]
    assert response["allowed"] is False and response["uid"] == "r1"
    assert response["status"]["code"] == 403
    assert "unknown class 'turbo'" in response["status"]["message"]
    assert "high" in response["status"]["message"]
    assert "patch" not in response


def test_v1beta1_is_answered_in_kind() -> None:
    review = make_review(make_pod({"gpu-class.io/class": "high"}))
    review["apiVersion"] = "admission.k8s.io/v1beta1"
    assert respond(review)["apiVersion"] == "admission.k8s.io/v1beta1"


def test_namespace_comes_from_the_request_when_the_pod_has_none() -> None:
    pod = make_pod({"gpu-class.io/class": "high"})
    del pod["metadata"]["namespace"]
    review = make_review(pod, namespace="team-a")
    request = parse_review(json.dumps(review).encode())
    assert request.namespace == "team-a"
    assert review_pod(request, SNAPSHOT, CATALOG).decision.outcome == "patched"


def test_admitted_unsatisfiable_pod_is_marked_but_not_placed() -> None:
    import dataclasses

    catalog = dataclasses.replace(CATALOG, on_unsatisfiable="admit")
    pod = make_pod({"gpu-class.io/class": "high", "gpu-class.io/count": "64"})
    request = parse_review(json.dumps(make_review(pod)).encode())
    response = build_response(request, review_pod(request, SNAPSHOT, catalog))["response"]
    assert response["allowed"] is True and any("64 GPU(s)" in w for w in response["warnings"])
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert patched["metadata"]["annotations"]["gpu-class.io/types"] == ""
    assert patched["spec"] == pod["spec"]


# --- gpu-class.io/types on an answered Pod is gpu-class's own -------------------------------------------------


FORGED = {"gpu-class.io/types": "H100"}
KUEUE_STARTED_HIGH = {**make_pod({"gpu-class.io/class": "high", **FORGED}, gpu_limit="1", affinity={"nodeAffinity": {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}]}}})}
KUEUE_STARTED_HIGH["metadata"]["labels"] = {"kueue.x-k8s.io/podset": "main"}


@pytest.mark.parametrize("pod, policy, outcome, types", [
    pytest.param(make_pod(FORGED), None, "out-of-scope", None, id="no-class-no-gpus-forged-types-removed"),
    pytest.param(make_pod({"gpu-class.io/class": "high", **FORGED}, gpu_limit="1"),
                 NamespaceInfo("ml", False, None, None), "out-of-scope", None, id="namespace-not-opted-in-removed"),
    pytest.param(make_pod({"gpu-class.io/class": "high", "gpu-class.io/types": "T4"}, gpu_limit="1"), None, "patched",
                 "H100,A100", id="placed-replaced-by-its-own"),
    pytest.param(make_pod({"gpu-class.io/class": "high", "gpu-class.io/count": "64", **FORGED}), None,
                 "admitted-unsatisfiable", "", id="admitted-unplaced-emptied"),
    pytest.param(KUEUE_STARTED_HIGH, None, "out-of-scope", "H100", id="left-as-decided-with-its-workload-kept"),
    pytest.param(make_pod({"kubernetes.io/config.mirror": "x", **FORGED}), None, "out-of-scope", "H100",
                 id="a-mirror-pod-is-never-changed"),
])
def test_an_answered_pod_carries_only_the_types_gpu_class_wrote(pod: dict[str, Any], policy: NamespaceInfo | None,
                                                                outcome: str, types: str | None) -> None:
    import dataclasses

    catalog = dataclasses.replace(CATALOG, on_unsatisfiable="admit")
    request = parse_review(json.dumps(make_review(pod)).encode())
    review = review_pod(request, SNAPSHOT, catalog, policy)
    assert review.decision.outcome == outcome, review.decision.message
    answered = jsonpatch.apply_patch(copy.deepcopy(pod), list(review.patch))
    assert answered["metadata"].get("annotations", {}).get("gpu-class.io/types") == types
    if types is None:
        assert any("gpu-class.io/types is written by gpu-class" in w for w in review.decision.warnings)


def outcome(parse: Any, body: bytes) -> tuple[str, str]:
    """What a parser makes of a body: the value's repr (NaN equals NaN, 1 differs from 1.0), or the error's type."""
    try:
        return "value", repr(parse(body))
    except (ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


@pytest.mark.parametrize("body", [
    pytest.param(b'{"a": NaN, "b": Infinity, "c": -Infinity}', id="nan-and-infinities"),
    pytest.param(b"123456789012345678901234567890", id="integer-beyond-64-bits"),
    pytest.param(b"-9223372036854775809", id="integer-below-int64"),
    pytest.param(b"18446744073709551615", id="largest-uint64"),
    pytest.param(b"9223372036854775807", id="largest-int64"),
    pytest.param(b"[1e400, -1e400, 1e-400]", id="float-overflow-and-underflow"),
    pytest.param(b"[0.1, 1E2, -0.0, -0, 2.5e-308, 1.7976931348623157e308]", id="float-forms"),
    pytest.param(b'{"a": 1, "a": 2, "b": {"c": 1, "c": [3]}}', id="duplicate-keys-last-wins"),
    pytest.param('{"é": "ü\u2603", "k": "\\u00e9\\ud83d\\ude00"}'.encode(), id="unicode-raw-and-escaped"),
    pytest.param(b'"\\ud800"', id="lone-surrogate-escaped"),
    pytest.param(b'"\\udc00\\ud800"', id="reversed-surrogates-escaped"),
    pytest.param(b'"\xed\xa0\x80"', id="surrogate-raw-utf8"),
    pytest.param(b'"\xff"', id="invalid-utf8"),
    pytest.param(b"\xef\xbb\xbf{}", id="utf8-byte-order-mark"),
    pytest.param('{"a": [1, "\u00e9"]}'.encode("utf-16"), id="utf16"),
    pytest.param('{"a": 1}'.encode("utf-32-le"), id="utf32"),
    pytest.param(b"[" * 1100 + b"]" * 1100, id="nested-beyond-1024"),
    pytest.param(b"[" * 1000 + b"]" * 1000, id="nested-1000"),
    pytest.param(b'"a\tb"', id="raw-control-character"),
    pytest.param(b"{} x", id="trailing-garbage"),
    pytest.param(b" \n{}\r\n\t", id="surrounding-whitespace"),
    pytest.param(b"[01]", id="leading-zero"),
    pytest.param(b"[1.]", id="bare-decimal-point"),
    pytest.param(b"", id="empty"),
    pytest.param(b'{"a": "\\u0000"}', id="escaped-nul"),
])
def test_load_json_reads_every_body_as_the_standard_library_does(body: bytes) -> None:
    assert outcome(load_json, body) == outcome(json.loads, body)


json_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62, max_value=2**70)
                | st.integers(min_value=-(2**70), max_value=-(2**62)) | st.floats() | st.text())
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(json_values, st.booleans())
def test_load_json_matches_the_standard_library_on_generated_documents(value: Any, ensure_ascii: bool) -> None:
    # floats() includes NaN and infinities, text() lone surrogates: both written as json.dumps writes them
    body = json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    assert outcome(load_json, body) == outcome(json.loads, body)


@pytest.mark.parametrize("body, error", [
    pytest.param(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": NaN}',
                 "request must be an object", id="nan-request"),
    pytest.param(b"[" * 1100 + b"]" * 1100, "body is not JSON", id="too-deep"),
    pytest.param(b'"\xff"', "body is not JSON", id="invalid-utf8"),
])
def test_bodies_the_fast_parser_refuses_get_the_standard_answer(body: bytes, error: str) -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default, which json.loads' depth follows (hypothesis raises it)
    try:
        with pytest.raises(BadReview, match=error):
            parse_review(body)
    finally:
        sys.setrecursionlimit(limit)


def standard(value: Any) -> bytes:
    return COMPACT.encode(value).encode()


def written(encode: Any, value: Any) -> tuple[str, Any]:
    """What an encoder makes of a value: its bytes, or the error's type."""
    try:
        return "bytes", encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


class Colour(enum.Enum):
    RED = "red"


class Text(str):
    def __str__(self) -> str:
        return "other"


class Number(int):
    def __repr__(self) -> str:
        return "other"


class Items(dict):  # type: ignore[type-arg]
    def items(self) -> Any:  # the standard encoder asks a dict subclass for its items, orjson reads them itself
        return iter([("shown", 1)])


class Elements(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        return iter(["shown"])


circular: list[Any] = []
circular.append(circular)


@pytest.mark.parametrize("value", [
    pytest.param({"op": "add", "path": "/spec/affinity", "value": {"weight": 100, "values": ["H100"]}}, id="patch"),
    pytest.param([1e-05, 0.00001, 1e16, 1.5, -0.0, 5e-324], id="floats"),
    pytest.param({"a": float("nan"), "b": float("inf"), "c": -float("inf")}, id="nan-and-infinities"),
    pytest.param([2**64, -(2**63) - 1, 2**63 - 1, 2**64 - 1], id="integers-at-64-bits"),
    pytest.param({"é": "ü\u2603", "k": "\U0001f600"}, id="non-ascii"),
    pytest.param({"\x7f": "a\x7fb"}, id="delete-character"),
    pytest.param(["\ud800", "\udc00\ud800"], id="lone-surrogates"),
    pytest.param({1: "a", None: "b", True: "c", 2.5: "d"}, id="keys-that-are-not-strings"),
    pytest.param((1, ("a", None), []), id="tuples"),
    pytest.param([Text("x"), Number(3), {"k": Text("y")}], id="str-and-int-subclasses"),
    pytest.param({"k": Items(hidden=2)}, id="dict-subclass"),
    pytest.param([Elements(["hidden"])], id="list-subclass"),
    pytest.param([Colour.RED], id="enum"),
    pytest.param([uuid.UUID(int=1)], id="uuid"),
    pytest.param([datetime.datetime(2026, 1, 1)], id="datetime"),
    pytest.param(b"bytes", id="bytes"),
    pytest.param({"a": "\u0000\x1f\"\\/"}, id="escapes"),
])
def test_encode_compact_writes_what_the_standard_encoder_writes(value: Any) -> None:
    assert written(encode_compact, value) == written(standard, value)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_encode_compact_matches_the_standard_encoder_on_generated_values(value: Any) -> None:
    assert written(encode_compact, value) == written(standard, value)


def test_a_value_that_contains_itself_is_refused_as_before() -> None:
    # in a thread: a check that followed the value into itself would never return
    result: list[tuple[str, Any]] = []
    worker = threading.Thread(target=lambda: result.append(written(encode_compact, circular)), daemon=True)
    worker.start()
    worker.join(10)
    assert result == [written(standard, circular)] == [("error", "ValueError")]
