"""AdmissionReview parsing and response building."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
import pytest

from builders import CATALOG_NODES, assert_valid_pod, make_catalog, make_pod, make_review
from webhook.core.inventory import build_snapshot
from webhook.core.review import BadReview, build_response, parse_review, review_pod

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
