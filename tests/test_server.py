"""End to end: the real gunicorn server over TLS, called as the API server calls it."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any, Iterator

import jsonpatch
import pytest

from builders import CATALOG_NODES, TEST_CATALOG_YAML, assert_valid_pod, make_pod, make_review
from servers import serving_test_inventory, Server, running_server, write_objects
from webhook.serving.config import ServeConfig


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving_test_inventory(tmp_path_factory.mktemp("server"), workers=2) as srv:
        yield srv


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(response["patch"]))


def test_patches_a_gpu_pod(server: Server) -> None:
    pod = make_pod({"gpu-class.io/class": "high", "gpu-class.io/count": "2"})
    status, body = server.post("/mutate", make_review(pod, uid="e2e-1"))
    assert status == 200
    response = body["response"]
    assert response["uid"] == "e2e-1" and response["allowed"] is True
    patched = jsonpatch.apply_patch(pod, decode_patch(response))
    assert_valid_pod(patched)
    assert patched["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert patched["metadata"]["annotations"]["gpu-class.io/types"] == "H100,A100"
    assert "warnings" not in response  # the cluster has no H200, the Pod gets the best there is: nothing to say


@pytest.mark.parametrize("annotations, warning", [
    # economy (cost): T4 first, and the cluster's T4 node has 1 GPU
    pytest.param({"gpu-class.io/class": "economy", "gpu-class.io/count": "2"}, "gpu-class: class economy: not on T4 "
                 "(too few GPUs: largest allocatable 1, Pod needs 2); best allowed: V100", id="worse-than-the-best-present"),
    pytest.param({"gpu-class.io/min-mem": "40Gi"}, "gpu-class: gpu-class.io/min-mem ignored; known: class, count, "
                 "container, exclude-types, min-memory, group, group-size...", id="input-ignored"),
])
def test_warns_when_the_pod_gets_less_than_the_best_or_input_is_ignored(server: Server, annotations: dict[str, str],
                                                                         warning: str) -> None:
    status, body = server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high", **annotations})))
    assert status == 200 and body["response"]["allowed"] is True
    assert body["response"]["warnings"] == [warning]


def test_refuses_an_unsatisfiable_pod(server: Server) -> None:
    status, body = server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high", "gpu-class.io/count": "9"})))
    assert status == 200
    assert body["response"]["allowed"] is False
    assert "H100 (largest allocatable 8)" in body["response"]["status"]["message"]


def test_out_of_scope_is_allowed_without_patch(server: Server) -> None:
    status, body = server.post("/mutate", make_review(make_pod(), uid="plain"))
    assert status == 200 and body["response"] == {"uid": "plain", "allowed": True}


@pytest.mark.parametrize("body, status", [
    pytest.param(b"not json", 400, id="not-json"),
    pytest.param(b'{"kind": "Pod"}', 400, id="not-a-review"),
])
def test_bad_bodies_get_a_json_4xx_and_the_server_keeps_serving(server: Server, body: bytes, status: int) -> None:
    got, error = server.post("/mutate", body)
    assert got == status
    assert isinstance(error, dict) and error["message"]
    assert server.get("/healthz")[0] == 200


def test_oversized_body_is_refused_before_it_is_read(server: Server) -> None:
    import socket

    declared = 64 * 1024 * 1024  # far beyond the limit: the server must answer without reading it
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with server.context().wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(
                b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {declared}\r\n\r\n".encode() + b"{" + b" " * 65536
            )
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                chunk = tls.recv(65536)
                if not chunk:
                    break
                reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["error"] == "Request Entity Too Large"
    assert server.get("/healthz")[0] == 200


def test_keep_alive_connection_serves_many_reviews(server: Server) -> None:
    conn = server.connection()
    try:
        for i in range(20):
            status, body = server.post("/mutate", make_review(make_pod({"gpu-class.io/class": "high"}), uid=f"k{i}"), conn=conn)
            assert status == 200 and body["response"]["uid"] == f"k{i}"
        assert conn.sock is not None  # the same TLS connection, never re-opened
    finally:
        conn.close()


@pytest.mark.parametrize("maximum, expected", [
    pytest.param(ssl.TLSVersion.TLSv1_2, "TLSv1.2", id="tls1.2"),
    pytest.param(ssl.TLSVersion.MAXIMUM_SUPPORTED, "TLSv1.3", id="tls1.3"),
])
def test_tls_versions_served(server: Server, maximum: ssl.TLSVersion, expected: str) -> None:
    import socket

    ctx = server.context(maximum_version=maximum)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() == expected


def test_readyz_reports_the_file_inventory(server: Server) -> None:
    status, body = server.get("/readyz")
    assert status == 200 and body["ready"] is True and body["nodes"] == 3


def test_misconfiguration_fails_at_start_with_a_message(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "catalog.yaml"
    bad.write_text(TEST_CATALOG_YAML.replace("types: [H100, A100, H200]", "types: [H100, B200]"))
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    result = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--nodes", str(nodes), "--config", str(bad),
         "--cert-file", "x", "--key-file", "y"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "catalog.yaml:" in result.stderr and "unknown type 'B200'" in result.stderr


def test_a_trickling_body_is_cut_off_and_the_server_keeps_serving(server: Server) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as raw:
        with server.context().wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{")
            reply = b""
            # to the end of its JSON answer (the socket's 15 s fails the test: a cut that never came)
            while not reply.endswith(b"}") and (chunk := tls.recv(65536)):
                reply += chunk
    # cut by the read deadline (under the webhooks' timeoutSeconds), as its answer says, not by any later one
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply[:100]
    assert json.loads(body)["message"] == f"request not received whole within {ServeConfig.request_read_seconds}s"
    assert server.get("/healthz")[0] == 200


def test_silent_connections_do_not_stop_the_server(tmp_path: Path) -> None:
    """Clients that connect, shake hands and say nothing are cut off after the first-request deadline."""
    import socket

    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    with running_server(tmp_path, ["--nodes", str(nodes), "--threads", "1"], workers=2) as srv:
        silent = []
        for _ in range(4):  # more than workers x threads
            raw = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            silent.append(srv.context().wrap_socket(raw, server_hostname="localhost"))
        # answered (within the client's 10 s) with every slot held by a silent client: not held behind them
        status, _ = srv.get("/healthz")
        assert status == 200
        for tls in silent:
            tls.settimeout(10)
            assert tls.recv(1) == b""  # the server closed it
            tls.close()
