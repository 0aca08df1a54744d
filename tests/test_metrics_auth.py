"""Who may read /metrics (core/access/metrics_gate.py): the decision from the API server's reviews, the answers kept,
and the real server on its metrics listener asking the fake API server (tests/fakeapi.py) as it would the real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from builders import CATALOG_NODES
from fakeapi import ACCESS_REVIEWS, TOKEN_REVIEWS, FakeApiServer
from servers import Server, free_port, running_server, write_certs, write_objects
from webhook.core.access.metrics_gate import (
    ALLOWED_TTL_SECONDS, MAX_TOKEN_BYTES, REFUSED_TTL_SECONDS, AnswerCache, Identity, MetricsGate, ReviewUnavailable,
    insecure_combination, parse_bearer,
)

READER = "system:serviceaccount:monitoring:prometheus"
STRANGER = "system:serviceaccount:ml-team:default"


@pytest.mark.parametrize("header, token", [
    pytest.param(None, None, id="no-header"),
    pytest.param("", None, id="empty"),
    pytest.param("Basic dXNlcjpwYXNz", None, id="basic-scheme"),
    pytest.param("Bearer", None, id="bearer-without-token"),
    pytest.param("Bearer   ", None, id="bearer-blank"),
    pytest.param("Bearer a b", None, id="token-with-space"),
    pytest.param("Bearer " + "x" * (MAX_TOKEN_BYTES + 1), None, id="token-too-long"),
    pytest.param("Bearer abc.def", "abc.def", id="bearer"),
    pytest.param("bearer abc", "abc", id="scheme-case-insensitive"),
])
def test_parse_bearer(header: str | None, token: str | None) -> None:
    assert parse_bearer(header) == token


class CountingReviewer:
    """An AccessReviewer over plain tables, counting the questions it was asked."""

    def __init__(self, tokens: dict[str, str], readers: set[str], down: bool = False) -> None:
        self.tokens, self.readers, self.down = tokens, readers, down
        self.calls = 0

    def authenticate(self, token: str) -> Identity | None:
        self.calls += 1
        if self.down:
            raise ReviewUnavailable("connection refused")
        return Identity(self.tokens[token]) if token in self.tokens else None

    def authorize(self, identity: Identity, verb: str, path: str) -> bool:
        self.calls += 1
        return verb == "get" and path == "/metrics" and identity.username in self.readers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("token, status, ttl", [
    pytest.param("reader", 200, ALLOWED_TTL_SECONDS, id="allowed-kept-a-minute"),
    pytest.param("stranger", 403, REFUSED_TTL_SECONDS, id="forbidden-kept-briefly"),
    pytest.param("forged", 401, REFUSED_TTL_SECONDS, id="unauthenticated-kept-briefly"),
])
def test_an_answer_is_kept_for_its_time_then_asked_again(token: str, status: int, ttl: float) -> None:
    reviewer = CountingReviewer({"reader": READER, "stranger": STRANGER}, {READER})
    clock = Clock()
    gate = MetricsGate(reviewer, clock)
    assert gate.check(f"Bearer {token}").status == status
    asked = reviewer.calls
    clock.now += ttl - 0.001
    assert gate.check(f"Bearer {token}").status == status and reviewer.calls == asked
    clock.now += 0.002
    assert gate.check(f"Bearer {token}").status == status and reviewer.calls == 2 * asked


def test_an_outage_is_503_and_not_kept() -> None:
    reviewer = CountingReviewer({"reader": READER}, {READER}, down=True)
    gate = MetricsGate(reviewer, Clock())
    answer = gate.check("Bearer reader")
    assert answer.status == 503 and "connection refused" in answer.message
    reviewer.down = False
    assert gate.check("Bearer reader").status == 200, "the API server back: the next scrape is asked again"


def test_the_cache_is_bounded_and_keeps_no_token() -> None:
    cache = AnswerCache(max_entries=3)
    gate = MetricsGate(CountingReviewer({}, set()), Clock(), cache)
    for n in range(10):
        gate.check(f"Bearer random-{n}")
    assert len(cache) == 3
    assert not any("random" in key for key in cache._entries)


@pytest.mark.parametrize("auth, host, refused", [
    pytest.param("none", "0.0.0.0", "anyone who can reach 0.0.0.0", id="none-on-every-address"),
    pytest.param("none", "10.0.0.5", "anyone who can reach 10.0.0.5", id="none-on-a-pod-address"),
    pytest.param("none", "127.0.0.1", None, id="none-on-loopback"),
    pytest.param("none", "::1", None, id="none-on-ipv6-loopback"),
    pytest.param("delegated", "0.0.0.0", None, id="delegated-anywhere"),
    pytest.param("open", "127.0.0.1", "give delegated or none", id="unknown-mode"),
])
def test_insecure_combinations_are_refused(auth: str, host: str, refused: str | None) -> None:
    why = insecure_combination(auth, host)
    assert (why is None) if refused is None else (why is not None and refused in why)


# --- the real server, asking the fake API server --------------------------------------------------


@pytest.fixture(scope="module")
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_token("reader-token", READER, groups=("system:serviceaccounts",))
        server.add_token("stranger-token", STRANGER, groups=("system:serviceaccounts",))
        server.add_token("group-token", "alice", groups=("metrics-readers",))
        server.grant(READER, "get", "/metrics")
        server.grant("group:metrics-readers", "get", "/metrics")
        yield server


@pytest.fixture(scope="module")
def server(api: FakeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("metrics-auth")
    nodes = write_objects(tmp / "nodes.yaml", CATALOG_NODES)
    # one worker: the answers are kept per worker, and the test counts the reviews one worker asks
    with running_server(tmp, ["--nodes", str(nodes), "--kubeconfig", str(api.kubeconfig(tmp / "kubeconfig"))],
                        metrics_auth="delegated") as srv:
        yield srv


def get_metrics(server: Server, authorization: str | None) -> tuple[int, str, str | None]:
    conn = server.connection(port=server.metrics_port)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": authorization} if authorization is not None else {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), resp.getheader("WWW-Authenticate")
    finally:
        conn.close()


def reviews_asked(api: FakeApiServer) -> int:
    return sum(1 for r in api.request_log if r.path in (TOKEN_REVIEWS, ACCESS_REVIEWS))


@pytest.mark.parametrize("authorization, status, says", [
    pytest.param(None, 401, "a bearer token is required", id="no-header"),
    pytest.param("Basic cmVhZGVyOnB3", 401, "a bearer token is required", id="malformed-basic"),
    pytest.param("Bearer", 401, "a bearer token is required", id="malformed-no-token"),
    pytest.param("Bearer not-a-token", 401, "not accepted by the API server", id="token-unauthenticated"),
    pytest.param("Bearer stranger-token", 403, f"'{STRANGER}' may not get /metrics", id="authenticated-denied"),
    pytest.param("Bearer reader-token", 200, "gpu_class_admission_requests_total", id="allowed"),
    pytest.param("Bearer group-token", 200, "gpu_class_admission_requests_total", id="allowed-by-group"),
])
def test_the_metrics_listener_checks_each_scrape(server: Server, authorization: str | None, status: int,
                                                 says: str) -> None:
    got, body, challenge = get_metrics(server, authorization)
    assert (got, says in body) == (status, True), body[:300]
    assert (challenge is not None) is (status == 401), "a 401 says which scheme to use, as RFC 6750 asks"


def test_an_answer_is_kept_so_a_scrape_is_not_two_api_calls(server: Server, api: FakeApiServer) -> None:
    api.add_token("cached-token", "bob")
    api.grant("bob", "get", "/metrics")
    before = reviews_asked(api)
    assert get_metrics(server, "Bearer cached-token")[0] == 200
    assert reviews_asked(api) == before + 2, "a TokenReview, then a SubjectAccessReview"
    api.revoke("bob", "get", "/metrics")
    assert get_metrics(server, "Bearer cached-token")[0] == 200, "kept: not asked again within its minute"
    assert reviews_asked(api) == before + 2
    assert get_metrics(server, "Bearer stranger-token")[0] == 403
    kept = reviews_asked(api)
    assert get_metrics(server, "Bearer stranger-token")[0] == 403 and reviews_asked(api) == kept, "refusals too"


def test_the_api_server_unreachable_is_503_and_logged(server: Server, api: FakeApiServer) -> None:
    api.add_token("outage-token", READER)
    api.set_available(False)
    try:
        status, body, _ = get_metrics(server, "Bearer outage-token")
    finally:
        api.set_available(True)
    assert status == 503 and "cannot check the bearer token" in body
    assert "metrics scrape refused" in server.log() and "TokenReview failed" in server.log()
    assert get_metrics(server, "Bearer outage-token")[0] == 200, "an outage is not kept"


def test_the_admission_port_serves_no_metrics_and_the_metrics_port_nothing_else(server: Server) -> None:
    assert server.get("/metrics")[0] == 404
    conn = server.connection(port=server.metrics_port)
    try:
        conn.request("POST", "/mutate", body=b"{}", headers={"Authorization": "Bearer reader-token"})
        assert conn.getresponse().status == 404
    finally:
        conn.close()


@pytest.mark.parametrize("args, message", [
    pytest.param(["--metrics-auth", "none", "--metrics-bind", "0.0.0.0:{port}"], "anyone who can reach 0.0.0.0",
                 id="unchecked-off-loopback"),
    pytest.param(["--metrics-bind", "127.0.0.1:{port}"], "--metrics-auth delegated checks each scrape's token",
                 id="delegated-without-an-api-server"),
    pytest.param(["--metrics-auth", "none", "--metrics-bind", "127.0.0.1:{bind}"], "needs a port of its own",
                 id="the-admission-port"),
])
def test_a_metrics_misconfiguration_fails_at_start(tmp_path: Path, args: list[str], message: str) -> None:
    certs = write_certs(tmp_path / "certs")
    nodes = write_objects(tmp_path / "nodes.yaml", CATALOG_NODES)
    port, bind = free_port(), free_port()
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--nodes", str(nodes), "--bind", f"127.0.0.1:{bind}",
         "--cert-file", str(certs / "tls.crt"), "--key-file", str(certs / "tls.key"),
         *(a.format(port=port, bind=bind) for a in args)],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"})
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


# --- the upgrader's listener: the same check, over a certificate it makes -------------------------


def test_the_upgraders_metrics_are_behind_the_same_check(api: FakeApiServer, tmp_path: Path) -> None:
    import ssl
    import http.client

    from webhook.serving.metrics import serve_upgrade_metrics

    port = free_port()
    serve_upgrade_metrics(port, "127.0.0.1", "delegated", str(api.kubeconfig(tmp_path / "kubeconfig")), (None, None))
    context = ssl._create_unverified_context()  # self-signed at start, as kube-scheduler's secure port

    def scrape(authorization: str | None) -> int:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        try:
            conn.request("GET", "/metrics", headers={"Authorization": authorization} if authorization else {})
            return conn.getresponse().status
        finally:
            conn.close()

    assert [scrape(None), scrape("Bearer not-a-token"), scrape("Bearer stranger-token"),
            scrape("Bearer reader-token")] == [401, 401, 403, 200]


@pytest.mark.parametrize("args, message", [
    pytest.param(["--metrics-auth", "none"], "anyone who can reach 0.0.0.0", id="unchecked-on-every-address"),
    pytest.param(["--metrics-cert-file", "x.crt"], "go together", id="certificate-without-key"),
])
def test_an_upgrader_metrics_misconfiguration_fails_at_start(args: list[str], message: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cli import main

    assert main(["upgrader", *args]) == 2
    assert message in capsys.readouterr().err
