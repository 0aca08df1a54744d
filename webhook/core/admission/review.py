"""AdmissionReview in, AdmissionReview out. Pure: no Flask, no Kubernetes client.

A body that is not an AdmissionReview raises BadReview (the HTTP layer answers 4xx). A Pod the
webhook will not admit is a normal answer: HTTP 200 with allowed false and a message for the user.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Mapping, NotRequired, TypedDict

import orjson

from ..catalog.model import Catalog
from ..view.snapshot import Snapshot
from ..view.pods import TYPES_ANNOTATION
from .ask import MIRROR_ANNOTATION
from .patch import PatchOp, build_patch, build_unplaced_patch, escape
from .planner import Decision, NamespacePolicy, plan
from .workload import plan_workload, workload_kind

# the standard encoder every answer is written as; json.dumps with options builds a new one per call
COMPACT = json.JSONEncoder(separators=(",", ":"))
API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


# a byte table that turns every digit into b"0" and everything else into b" "
_DIGITS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_NUMBER = b"0" * 19  # 19 digits or more may not fit 64 bits: orjson would read the integer as a float


def load_json(body: bytes) -> Any:
    """json.loads(body): the same value for every body, the same errors, in about half the time.

    orjson parses the API server's 14 kB reviews twice as fast as the standard library, which was
    the largest single cost of an admission (bench/RESULTS.md). It differs where JSON is loose:
    it refuses NaN, Infinity, lone surrogates, a byte order mark, UTF-16/32 and nesting beyond
    1,024, all of which json.loads reads, and it reads an integer beyond 64 bits as a float. So a
    body with a run of 19 digits or one orjson refuses goes to json.loads, which decides: what the
    webhook accepts and how it reads it are exactly what they were with the standard library.
    """
    if body.translate(_DIGITS).find(_LONG_NUMBER) < 0:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return json.loads(body)


def encode_compact(value: Any) -> bytes:
    """COMPACT.encode(value).encode(): the same bytes for every value, mostly written by orjson.

    orjson writes a patch 15 times faster than the standard encoder. For dicts, lists, tuples,
    ASCII strings, integers, booleans and None the two write the same bytes. orjson differs on
    floats (0.00001 where the standard one writes 1e-05, null for NaN), on subclasses, enums, UUIDs
    and dates (it writes them, the standard one may refuse or ask them for their items), on DEL and
    text other than ASCII (written raw, not escaped), and it refuses integers beyond 64 bits and
    lone surrogates. So the standard encoder writes any value holding other types, output with a
    byte that is not printable ASCII, and what orjson refuses; it also raises what it always raised.
    """
    if _plain(value):
        try:
            out = orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError
            pass
        else:
            if out.isascii() and b"\x7f" not in out:
                return out
    return COMPACT.encode(value).encode()


_SCALARS = (str, int, bool, type(None))
_DEPTH = 255  # orjson refuses deeper nesting; a value that refers to itself gets there too


def _plain(value: Any) -> bool:
    """Only dicts, lists and tuples of str, int, bool and None, none of them a subclass, nested < _DEPTH."""
    level, depth = [value], 0
    while level:
        if depth > _DEPTH:
            return False
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is dict:
                below.extend(item.values())
            elif kind is list or kind is tuple:
                below.extend(item)
            elif kind not in _SCALARS:
                return False
        level, depth = below, depth + 1
    return True


class BadReview(ValueError):
    """The request is not an AdmissionReview this webhook can read."""


class Status(TypedDict):
    code: int
    message: str
    reason: NotRequired[str]


class Response(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[str]
    patch: NotRequired[str]
    warnings: NotRequired[list[str]]
    status: NotRequired[Status]


class ReviewResponse(TypedDict):
    apiVersion: str
    kind: str
    response: Response


@dataclass(frozen=True)
class Request:
    """The parts of AdmissionRequest the decision reads."""

    api_version: str
    uid: str
    operation: str
    kind: str
    group: str
    sub_resource: str
    namespace: str
    object: Mapping[str, Any]
    name: str


def parse_review(body: bytes) -> Request:
    try:
        review = load_json(body)
    except (ValueError, RecursionError) as exc:
        raise BadReview(f"body is not JSON: {str(exc)[:200]}") from None
    if not isinstance(review, dict):
        raise BadReview("body is not a JSON object")
    if review.get("kind") != "AdmissionReview" or review.get("apiVersion") not in API_VERSIONS:
        raise BadReview(f"expected kind AdmissionReview with apiVersion in {', '.join(API_VERSIONS)}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("request must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid must be a non-empty string")
    kind = request.get("kind")
    if not isinstance(kind, dict):
        raise BadReview("request.kind must be an object")
    fields = {
        "operation": request.get("operation"),
        "namespace": request.get("namespace", ""),
        "subResource": request.get("subResource", ""),
        "name": request.get("name", ""),
        "kind.kind": kind.get("kind"),
        "kind.group": kind.get("group", ""),
    }
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise BadReview(f"request.{name} must be a string")
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise BadReview("request.object must be an object")
    return Request(
        api_version=review["apiVersion"],
        uid=uid,
        operation=fields["operation"] or "",
        kind=fields["kind.kind"] or "",
        group=fields["kind.group"] or "",
        sub_resource=fields["subResource"] or "",
        namespace=fields["namespace"] or "",
        object=obj or {},
        name=fields["name"] or "",
    )


def is_pod_create(request: Request) -> bool:
    return request.operation == "CREATE" and request.kind == "Pod" and request.group == "" and not request.sub_resource


@dataclass(frozen=True)
class Review:
    """A decision and the patch that carries it out."""

    decision: Decision
    patch: list[PatchOp]


def review_request(request: Request, snapshot: Snapshot, catalog: Catalog, policy: NamespacePolicy = None) -> Review:
    """A Pod, or a workload Kueue queues (decided at the workload: workload.py). `policy`: the namespace
    as the caller read it from the API when the snapshot does not hold it yet (policy.py)."""
    kind = workload_kind(request.kind, request.group, request.operation, request.sub_resource)
    if kind is not None:
        return Review(*plan_workload(request.object, kind, snapshot, catalog, _namespace(request), policy))
    return review_pod(request, snapshot, catalog, policy)


def request_namespace(request: Request) -> str:
    """The namespace the object is created in."""
    return _namespace(request)


def _namespace(request: Request) -> str:
    return request.namespace or str((request.object.get("metadata") or {}).get("namespace") or "")


def review_pod(request: Request, snapshot: Snapshot, catalog: Catalog, policy: NamespacePolicy = None) -> Review:
    if not is_pod_create(request):
        return Review(Decision("out-of-scope", "not a Pod or workload CREATE"), [])
    namespace = _namespace(request)
    decision = plan(request.object, snapshot, catalog, namespace=namespace, policy=policy)
    if decision.outcome == "admitted-unsatisfiable":
        return Review(decision, build_unplaced_patch(request.object))
    if decision.placement is None:
        return _without_own_types(request.object, decision)
    return Review(decision, build_patch(request.object, decision.placement))


def _without_own_types(pod: Mapping[str, Any], decision: Decision) -> Review:
    """An admitted Pod gpu-class does not place loses a gpu-class.io/types it came with.

    The annotation says "gpu-class placed this Pod, on these types", and the backstop, the extender, the
    metrics and the upgrader read it so; written by the Pod's author it is a claim nobody checked. So on
    every Pod the webhook answers the value is gpu-class's own: the types it placed on (build_patch), ""
    for a Pod admitted unplaced (build_unplaced_patch), and none at all here. A Pod left as it came
    because its own node affinity keeps it to its class (provenance.py) keeps it: it is what gpu-class
    wrote into the workload's template, and its readers believe it only as far as that affinity enforces
    it (view.pods.enforced_types), which also covers the Pods the webhook never answers (a namespace not
    opted in, or one created while no replica answered)."""
    annotations = (pod.get("metadata") or {}).get("annotations") if isinstance(pod.get("metadata"), dict) else None
    if (decision.outcome != "out-of-scope" or decision.kept_as_decided or not isinstance(annotations, dict)
            or TYPES_ANNOTATION not in annotations or MIRROR_ANNOTATION in annotations):
        return Review(decision, [])
    warning = f"gpu-class: {TYPES_ANNOTATION} is written by gpu-class, which did not place this Pod: removed"
    return Review(dataclasses.replace(decision, warnings=(*decision.warnings, warning)),
                  [{"op": "remove", "path": f"/metadata/annotations/{escape(TYPES_ANNOTATION)}"}])


def build_response(request: Request, review: Review) -> ReviewResponse:
    response: Response = {"uid": request.uid, "allowed": review.decision.allowed}
    if review.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encode_compact(review.patch)).decode()
    if review.decision.warnings:
        response["warnings"] = list(review.decision.warnings)
    if not review.decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": review.decision.message}
    return {"apiVersion": request.api_version, "kind": "AdmissionReview", "response": response}
