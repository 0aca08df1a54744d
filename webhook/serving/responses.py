"""The JSON HTTP response every route answers with."""

from __future__ import annotations

from typing import Any

from flask import Response

from ..core.admission.review import encode_compact


def json_response(body: Any, status: int = 200) -> Response:
    return Response(encode_compact(body), status=status, mimetype="application/json")
