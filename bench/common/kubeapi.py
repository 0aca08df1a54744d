"""The API server of the local control plane as its admin, over one kept-alive HTTPS connection.

A lean client keeps its own time (and the GIL) out of what the benchmarks measure. One per thread.
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "tests" / "e2e"))

import local_cluster  # noqa: E402  (tests/e2e is not a package)

MERGE_PATCH = "application/merge-patch+json"


class ApiError(RuntimeError):
    """An answer other than the one expected; `status` is its HTTP status (0: no answer at all)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Api:
    def __init__(self, cluster: local_cluster.Cluster, timeout_seconds: float = 60) -> None:
        self.host, port = cluster.server.removeprefix("https://").rsplit(":", 1)
        self.port = int(port)
        self.timeout_seconds = timeout_seconds
        self.context = ssl.create_default_context(cafile=str(cluster.pki / "ca.crt"))
        self.context.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout_seconds)

    def call(self, method: str, path: str, body: Any = None, *, expect: Iterable[int] = (200, 201),
             content_type: str = "application/json") -> Any:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        try:
            status, answer = self.raw(method, path, data, content_type=content_type)
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(f"{method} {path}: {exc}", 0) from exc
        if status not in expect:
            raise ApiError(f"{method} {path}: HTTP {status}: {answer[:300]!r}", status)
        return json.loads(answer) if answer.startswith(b"{") else answer.decode()

    def raw(self, method: str, path: str, body: bytes | None = None, *,
            content_type: str = "application/json") -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=body, headers={"Content-Type": content_type})
                response = self.conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = self._connect()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()
