"""The JSON HTTP response every route answers with."""

from __future__ import annotations

from typing import Any

from flask import Response

from ..core.review import encode_compact


def encode_json(body: Any) -> bytes:
    return encode_compact(body)


def json_response(body: Any, status: int = 200) -> Response:
    return Response(encode_json(body), status=status, mimetype="application/json")
