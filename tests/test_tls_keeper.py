"""The certificate keeper (cluster/tls_keeper.py) against the fake API server: races, rotation, lost Secrets."""

from __future__ import annotations

import base64
import datetime
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest
from cryptography import x509

from fakeapi import FakeApiServer
from webhook.cluster import tls_keeper
from webhook.core.certificates.rotation import Policy
from webhook.core.certificates.settings import KeeperSettings

NS = "gpu-class-system"
T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
MIN = datetime.timedelta(minutes=1)
POLICY = Policy(ca_validity=300 * MIN, ca_renew_before=60 * MIN, validity=50 * MIN, renew_before=10 * MIN,
                overlap=15 * MIN)
SETTINGS = KeeperSettings(namespace=NS, names=("gpu-class.gpu-class-system.svc",),
                          webhook_configurations=("gpu-class.io", "gpu-class.io-workloads"), policy=POLICY)


def make_webhook_configuration(name: str, webhooks: int) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name}, "webhooks": [
                {"name": f"w{i}.gpu-class.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                 "clientConfig": {"service": {"name": "gpu-class", "namespace": NS}}}
                for i in range(webhooks)]}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.create(make_webhook_configuration("gpu-class.io", 1))
        server.create(make_webhook_configuration("gpu-class.io-workloads", 2))
        yield server


def clients(api: FakeApiServer) -> tuple[Any, Any]:
    client = api.api_client()
    return kubernetes.client.CoreV1Api(client), kubernetes.client.AdmissionregistrationV1Api(client)


def ensure(api: FakeApiServer, now: datetime.datetime) -> tls_keeper.Served:
    return tls_keeper.ensure(*clients(api), SETTINGS, lambda: now)


def secret(api: FakeApiServer, name: str, key: str) -> bytes:
    obj = api.get("Secret", name, NS)
    assert obj is not None, name
    return base64.b64decode(obj["data"][key])


def ca_bundles(api: FakeApiServer) -> set[bytes]:
    found = set()
    for name in SETTINGS.webhook_configurations:
        obj = api.get("MutatingWebhookConfiguration", name)
        assert obj is not None
        found |= {base64.b64decode(w["clientConfig"]["caBundle"]) for w in obj["webhooks"]}
    return found


def is_trusted(cert_pem: bytes, bundle_pem: bytes, now: datetime.datetime) -> bool:
    """What the API server checks: a CA of the bundle signed the certificate, and both are valid now."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        return False
    for ca in x509.load_pem_x509_certificates(bundle_pem):
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, Exception):
            continue
        if ca.not_valid_before_utc <= now < ca.not_valid_after_utc:
            return True
    return False


def the_ca_bundle(api: FakeApiServer) -> bytes:
    bundles = ca_bundles(api)
    assert len(bundles) == 1, "every webhook of both configurations carries the same bundle"
    return bundles.pop()


def test_two_replicas_racing_at_start_share_one_ca(api: FakeApiServer) -> None:
    barrier = threading.Barrier(2)
    results: list[tls_keeper.Served] = []

    def replica() -> None:
        barrier.wait()
        results.append(ensure(api, T0))

    threads = [threading.Thread(target=replica) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 2
    ca = secret(api, "gpu-class-ca", "tls.crt")
    assert results[0].bundle_pem == results[1].bundle_pem == ca == the_ca_bundle(api)
    assert results[0].cert_pem == results[1].cert_pem == secret(api, "gpu-class-tls", "tls.crt")
    assert is_trusted(secret(api, "gpu-class-extender-client", "tls.crt"), ca, T0)
    creates = [r for r in api.request_log if r.method == "POST" and r.path.endswith("/secrets")]
    assert len(creates) >= 3  # each Secret once, and the loser's attempts refused with 409


def test_rotation_keeps_every_served_certificate_trusted(api: FakeApiServer) -> None:
    first = ensure(api, T0)
    cas = {secret(api, "gpu-class-ca", "tls.crt")}
    served = [first.cert_pem]
    # step through the CA's whole life and past it, as a replica's rounds would (a round a third of the overlap)
    now = T0
    while now < T0 + 2 * POLICY.ca_validity:
        now += 10 * MIN
        result = ensure(api, now)
        cas.add(secret(api, "gpu-class-ca", "tls.crt"))
        bundle = the_ca_bundle(api)
        # a replica that has not yet read the latest files serves what it read a round ago
        assert is_trusted(served[-1], bundle, now), now - T0
        assert is_trusted(result.cert_pem, bundle, now)
        served.append(result.cert_pem)
    # two validities: the CA was replaced at least twice, each time without a gap
    assert len(cas) >= 3


def test_rotation_steps_in_order(api: FakeApiServer) -> None:
    rotate_at = T0 + POLICY.ca_validity - POLICY.ca_renew_before
    ensure(api, T0)
    ensure(api, rotate_at - MIN)  # leaves renewed just before, so only the CA is due at rotate_at
    old_serving = secret(api, "gpu-class-tls", "tls.crt")
    ensure(api, rotate_at)
    assert len(x509.load_pem_x509_certificates(the_ca_bundle(api))) == 2, "both CAs trusted during the overlap"
    assert secret(api, "gpu-class-tls", "tls.crt") == old_serving, "leaves wait for the overlap"
    ensure(api, rotate_at + POLICY.overlap)
    moved = secret(api, "gpu-class-tls", "tls.crt")
    assert moved != old_serving
    new_ca = x509.load_pem_x509_certificate(secret(api, "gpu-class-ca", "tls.crt"))
    x509.load_pem_x509_certificate(moved).verify_directly_issued_by(new_ca)
    ensure(api, T0 + POLICY.ca_validity)
    assert len(x509.load_pem_x509_certificates(the_ca_bundle(api))) == 1, "the old CA leaves when it expires"


def test_deleted_serving_secret_is_reissued_by_the_same_ca(api: FakeApiServer) -> None:
    ensure(api, T0)
    bundle = the_ca_bundle(api)
    api.delete("Secret", "gpu-class-tls", NS)
    result = ensure(api, T0 + MIN)
    assert the_ca_bundle(api) == bundle
    assert is_trusted(result.cert_pem, bundle, T0 + MIN)


def test_deleted_ca_secret_keeps_the_old_ca_trusted(api: FakeApiServer) -> None:
    first = ensure(api, T0)
    api.delete("Secret", "gpu-class-ca", NS)
    result = ensure(api, T0 + MIN)
    bundle = the_ca_bundle(api)
    assert result.cert_pem != first.cert_pem
    assert is_trusted(first.cert_pem, bundle, T0 + MIN), "replicas still serving the old certificate"
    assert is_trusted(result.cert_pem, bundle, T0 + MIN)


def test_a_webhook_configuration_created_later_gets_the_bundle(api: FakeApiServer) -> None:
    api.delete("MutatingWebhookConfiguration", "gpu-class.io-workloads")
    ensure(api, T0)
    api.create(make_webhook_configuration("gpu-class.io-workloads", 2))
    ensure(api, T0 + MIN)
    assert the_ca_bundle(api) == secret(api, "gpu-class-ca", "ca.crt")


def test_a_round_that_changes_nothing_writes_nothing(api: FakeApiServer) -> None:
    ensure(api, T0)
    before = len(api.request_log)
    ensure(api, T0 + MIN)
    assert [r.method for r in api.request_log[before:]] == ["GET"] * 5


def test_files_change_as_one_and_a_stale_round_does_not_roll_back(tmp_path: Path, api: FakeApiServer) -> None:
    old = ensure(api, T0)
    api.delete("Secret", "gpu-class-tls", NS)
    new = ensure(api, T0 + MIN)
    assert tls_keeper.write_served(str(tmp_path), new)
    assert not tls_keeper.write_served(str(tmp_path), old)
    assert (tmp_path / "tls.crt").read_bytes() == new.cert_pem
    assert (tmp_path / "tls.key").read_bytes() == new.key_pem
    assert os.path.islink(tmp_path / "tls.crt")
    assert not tls_keeper.write_served(str(tmp_path), new)
    assert len([p for p in os.listdir(tmp_path) if p.startswith("..") and p != "..data"]) == 1


# --- gpuclass serve --manage-certificates ----------------------------------------------------------


def serve_args(tmp_path: Path, *extra: str) -> Any:
    from webhook.cli.parser import build_parser

    return build_parser().parse_args([
        "serve", "--cert-file", str(tmp_path / "tls.crt"), "--key-file", str(tmp_path / "tls.key"),
        "--manage-certificates", NS, *extra])


@pytest.mark.parametrize("extra, message", [
    pytest.param(["--key-file", "/elsewhere/tls.key"], "--key-file", id="key-elsewhere"),
    pytest.param(["--extender-bind", "0.0.0.0:8444", "--client-ca-file", "/etc/ca.crt"], "--client-ca-file",
                 id="client-ca-elsewhere"),
    pytest.param(["--rotation-overlap-seconds", str(40 * 86400)], "overlap", id="overlap-past-ca-renew-before"),
    pytest.param(["--certificates-check-seconds", "600"], "--certificates-check-seconds", id="check-slower-than-overlap"),
])
def test_serve_flags_refuse_what_would_break_rotation(tmp_path: Path, extra: list[str], message: str) -> None:
    from webhook.cli.certs import managed_settings
    from webhook.cluster.loading import InputError

    with pytest.raises(InputError, match=message):
        managed_settings(serve_args(tmp_path, *extra))


def test_serve_ensures_at_start_and_serves_a_certificate_the_ca_bundle_trusts(tmp_path: Path,
                                                                              api: FakeApiServer) -> None:
    import socket
    import ssl

    from webhook.cli.certs import managed_settings
    from webhook.serving.config import ServeConfig
    from webhook.serving.server import ensure_certificates_at_start
    from webhook.serving.tls import CertReloader

    args = serve_args(tmp_path, "--manage-webhook-configuration", "gpu-class.io", "--certificate-name", "localhost")
    settings = managed_settings(args)
    assert settings is not None and settings.directory == str(tmp_path)
    config = ServeConfig(cert_file=args.cert_file, key_file=args.key_file, managed_tls=settings,
                         kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig")))
    ensure_certificates_at_start(config)
    context = CertReloader(config.cert_file, config.key_file).context()
    bundle = base64.b64decode(api.get("MutatingWebhookConfiguration", "gpu-class.io")["webhooks"][0]  # type: ignore[index]
                              ["clientConfig"]["caBundle"])
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = ssl.create_default_context(cadata=bundle.decode())
        with socket.create_connection(listener.getsockname()) as raw:
            accepted, _ = listener.accept()
            server_side = threading.Thread(target=lambda: context.wrap_socket(accepted, server_side=True).close())
            server_side.start()
            with client.wrap_socket(raw, server_hostname="localhost") as tls:
                assert tls.version() is not None  # the API server's check: the name and a CA of caBundle
            server_side.join(5)


def test_serve_without_rights_fails_at_start_saying_what_to_grant(tmp_path: Path, api: FakeApiServer) -> None:
    from webhook.cli.certs import managed_settings
    from webhook.cluster.loading import InputError
    from webhook.serving.config import ServeConfig
    from webhook.serving.server import ensure_certificates_at_start

    args = serve_args(tmp_path)
    config = ServeConfig(cert_file=args.cert_file, key_file=args.key_file, managed_tls=managed_settings(args),
                         kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig")))
    api.fail_next(5, status=403, path_prefix=f"/api/v1/namespaces/{NS}/secrets")
    with pytest.raises(InputError, match="needs get, create and patch on the Secrets gpu-class-ca"):
        ensure_certificates_at_start(config)
