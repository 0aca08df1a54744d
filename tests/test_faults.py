"""The books of the load-and-fault suite (bench/faults/faultcount.py) and the pieces of bench/faults/faults.py and
bench/faults/replicas.py that need no cluster. Audit events are built in the shape the API server writes them
(tests/e2e/local_cluster.py AUDIT_POLICY), from events of a real run."""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from bench.faults import faults
from bench.faults.faultcount import Create, Tally, call_error, failed_calls, go_duration_seconds, parse_audit, tally
from bench.faults.faultload import Stream
from bench.faults.replicas import CertAuthority, CertVolume, served_certificate

WEBHOOK = "pods.gpu-class.io"
BACKSTOP_MESSAGE = (
    'pods "job-zkdzn-565rx" is forbidden: ValidatingAdmissionPolicy \'gpu-class.io-placement\' with binding '
    "'gpu-class.io-placement' denied request: gpu-class did not place this Pod (webhook down or bypassed): ...")
DENIED_MESSAGE = ('admission webhook "pods.gpu-class.io" denied the request: gpu-class: no node offers a type of '
                  "class high; retry in a few seconds")
RBAC_MESSAGE = ('pods is forbidden: User "system:serviceaccount:kube-system:job-controller" cannot create resource '
                '"pods" in API group "" in the namespace "faults-none-0084ec"')


def audit_event(*, code: int = 201, placed: bool = True, failed_open: bool = False, message: str = "",
                webhook_latency: str | None = None, namespace: str = "faults-gpuclass-1", verb: str = "create",
                uri: str | None = None, stage: str = "ResponseComplete", subresource: str | None = None,
                seconds: str = "35.568702") -> dict[str, Any]:
    annotations = {"authorization.k8s.io/decision": "allow",
                   "mutation.webhook.admission.k8s.io/round_0_index_1": json.dumps(
                       {"configuration": "gpu-class.io", "webhook": WEBHOOK, "mutated": placed and not failed_open})}
    if failed_open:
        annotations["failed-open.mutation.webhook.admission.k8s.io/round_0_index_1"] = WEBHOOK
    if webhook_latency:
        annotations["apiserver.latency.k8s.io/mutating-webhook"] = webhook_latency
    event: dict[str, Any] = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse", "stage": stage,
        "requestURI": uri or f"/api/v1/namespaces/{namespace}/pods", "verb": verb,
        "objectRef": {"resource": "pods", "namespace": namespace, "apiVersion": "v1",
                      **({"subresource": subresource} if subresource else {})},
        "responseStatus": {"metadata": {}, "code": code, **({"message": message} if message else {})},
        "requestReceivedTimestamp": "2026-12-01T17:36:35.559011Z", "stageTimestamp": f"2026-12-01T17:36:{seconds}Z",
        "annotations": annotations,
    }
    if code == 201:
        event["responseObject"] = {"kind": "Pod", "metadata": {"annotations": {
            "gpu-class.io/class": "high", **({"gpu-class.io/types": "H100"} if placed else {})}}}
    return event


def lines(*events: dict[str, Any]) -> str:
    return "\n".join(json.dumps(e) for e in events)


@pytest.mark.parametrize("text, seconds", [
    pytest.param("1.5s", 1.5, id="seconds"),
    pytest.param("523.1ms", 0.5231, id="milliseconds"),
    pytest.param("812µs", 0.000812, id="microseconds"),
    pytest.param("1m2.5s", 62.5, id="minutes-and-seconds"),
    pytest.param("5.000212345s", 5.000212345, id="a-timeout"),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1.5", "1.5 s", "abc", "1.5sx"])
def test_not_a_go_duration(text: str) -> None:
    with pytest.raises(ValueError):
        go_duration_seconds(text)


@pytest.mark.parametrize("event", [
    pytest.param(audit_event(uri="/api/v1/namespaces/n/pods?dryRun=All"), id="dry-run"),
    pytest.param(audit_event(verb="update"), id="another-verb"),
    pytest.param(audit_event(subresource="binding"), id="a-binding"),
    pytest.param(audit_event(stage="ResponseStarted"), id="not-complete"),
])
def test_what_is_not_a_create(event: dict[str, Any]) -> None:
    assert parse_audit(lines(event)) == []


def test_a_create_as_the_audit_log_has_it() -> None:
    text = lines(audit_event(webhook_latency="612.5ms")) + "\n" + '{"kind":"Event","apiVer'  # cut short: the file grows
    assert parse_audit(text) == [Create(namespace="faults-gpuclass-1", code=201, seconds=pytest.approx(0.009691),
                                        failed_open=(), webhook_seconds=pytest.approx(0.6125), placed=True, message="")]


@pytest.mark.parametrize("event, expected", [
    pytest.param(audit_event(), Tally(creates=1, created=1), id="placed"),
    pytest.param(audit_event(failed_open=True, placed=False), Tally(creates=1, created=1, unplaced=1, failed_calls=1),
                 id="created-unplaced-after-a-failed-call"),
    pytest.param(audit_event(placed=False), Tally(creates=1, created=1, unplaced=1), id="created-unplaced-by-the-webhook"),
    pytest.param(audit_event(code=403, failed_open=True, message=BACKSTOP_MESSAGE),
                 Tally(creates=1, refused_after_failed_call=1, failed_calls=1), id="backstop-after-a-failed-call"),
    pytest.param(audit_event(code=403, message=BACKSTOP_MESSAGE),
                 Tally(creates=1, wrongly_refused=1, errors=(BACKSTOP_MESSAGE,)), id="backstop-with-no-failed-call"),
    pytest.param(audit_event(code=403, message=DENIED_MESSAGE),
                 Tally(creates=1, wrongly_refused=1, errors=(DENIED_MESSAGE,)), id="refused-by-the-webhook"),
    pytest.param(audit_event(code=403, message=RBAC_MESSAGE),
                 Tally(creates=1, other_errors=1, errors=(f"HTTP 403: {RBAC_MESSAGE}",)), id="the-api-servers-own"),
    pytest.param(audit_event(code=403, failed_open=True, message=BACKSTOP_MESSAGE, webhook_latency="5.0012s"),
                 Tally(creates=1, refused_after_failed_call=1, failed_calls=1, past_timeout=1,
                       slowest_webhook_seconds=5.0012), id="past-the-timeout"),
    pytest.param(audit_event(webhook_latency="4.99s"), Tally(creates=1, created=1, slowest_webhook_seconds=4.99),
                 id="slow-within-the-timeout"),
])
def test_each_create_is_counted_once_where_it_belongs(event: dict[str, Any], expected: Tally) -> None:
    counted = tally(parse_audit(lines(event)), WEBHOOK, 5.0, placement_expected=True)
    assert counted == Tally(**{**expected.__dict__, "seconds": counted.seconds})
    assert counted.seconds == (pytest.approx(0.009691),)


def test_arms_without_placement_count_no_unplaced_and_a_webhook_of_their_own() -> None:
    creates = parse_audit(lines(audit_event(placed=False), audit_event(code=403, failed_open=True, message=BACKSTOP_MESSAGE)))
    assert tally(creates, None, 5.0, placement_expected=False).unplaced == 0
    # the failed-open annotation names gpu-class's webhook, not the no-op's
    assert tally(creates, "pods.noop.faults.bench.gpu-class.io", 5.0, placement_expected=False).failed_calls == 0


@pytest.mark.parametrize("error, kind", [
    pytest.param('failed calling webhook "pods.gpu-class.io": failed to call webhook: Post '
                 '"https://127.0.0.1:38257/mutate?timeout=5s": EOF', "connection", id="eof-url-says-timeout"),
    pytest.param('failed to call webhook: Post "https://127.0.0.1:1/mutate?timeout=5s": context deadline exceeded',
                 "timeout", id="deadline"),
    pytest.param('failed to call webhook: Post "https://127.0.0.1:1/mutate?timeout=5s": net/http: request canceled '
                 "(Client.Timeout exceeded while awaiting headers)", "timeout", id="client-timeout"),
    pytest.param('failed to call webhook: Post "https://127.0.0.1:1/mutate?timeout=5s": dial tcp 127.0.0.1:1: '
                 "connect: connection refused", "connection", id="refused"),
    pytest.param('failed to call webhook: Post "https://127.0.0.1:1/mutate?timeout=5s": tls: failed to verify '
                 'certificate: x509: certificate signed by unknown authority', "tls", id="unknown-ca"),
    pytest.param("failed to call webhook: the server could not find the requested resource", "other", id="other"),
])
def test_kinds_of_failed_calls(error: str, kind: str) -> None:
    assert call_error(error) == kind


def test_failed_calls_of_one_webhook_from_the_api_servers_log() -> None:
    log = "\n".join([
        'W1201 17:32:35.631903    6225 dispatcher.go:210] Failed calling webhook, failing open pods.gpu-class.io: '
        'failed calling webhook "pods.gpu-class.io": failed to call webhook: Post "https://127.0.0.1:3/mutate?timeout=5s": EOF',
        'W1201 17:26:55.470616    6225 dispatcher.go:210] Failed calling webhook, failing open pods.noop.faults.bench.'
        'gpu-class.io: failed calling webhook "x": failed to call webhook: Post "https://x/mutate": context deadline exceeded',
        "I1201 17:26:55.470616    6225 something else",
    ])
    assert failed_calls(log, WEBHOOK) == ["connection"]


def _window(name: str, **gpu_class: Any) -> faults.Window:
    t = Tally(**{"creates": 10, "created": 10, **gpu_class})
    return faults.Window(name, 10.0, {faults.NONE: Tally(), faults.NOOP: Tally(), faults.GPU_CLASS: t}, {}, {}, "")


def _result(*windows: faults.Window, missing: tuple[str, ...] = ()) -> faults.Result:
    return faults.Result(1.0, windows, faults.Settled(5.0, missing), 0, 3, 60.0, 5.0)


@pytest.mark.parametrize("result, found", [
    pytest.param(_result(_window("steady"), _window("kill-replica", failed_calls=3, refused_after_failed_call=3)), [],
                 id="failed-calls-the-backstop-caught"),
    pytest.param(_result(_window("roll-replicas", unplaced=1)), ["roll-replicas: 1 Pods created without placement"],
                 id="unplaced"),
    pytest.param(_result(_window("rotate-ca", wrongly_refused=2, errors=("denied",))),
                 ["rotate-ca: 2 Pods wrongly refused (denied)"], id="wrongly-refused"),
    pytest.param(_result(_window("kill-replica", past_timeout=1)), ["kill-replica: 1 webhook calls past the timeout"],
                 id="past-the-timeout"),
    pytest.param(_result(_window("steady", creates=0, created=0)),
                 ["steady: no Pod creates in the gpu-class namespace: the stream did not run"], id="no-load"),
    pytest.param(_result(_window("steady"), missing=("ns/d-0: 1 of 2 Pods",)), ["after the load: ns/d-0: 1 of 2 Pods"],
                 id="a-retry-that-never-came"),
])
def test_violations(result: faults.Result, found: list[str]) -> None:
    assert faults.violations(result) == found


def test_a_missed_fault_is_a_violation() -> None:
    window = faults.Window("compact-etcd", 10.0, _window("x").tallies, {}, {}, "no 410", missed="not every watch got 410")
    assert faults.violations(_result(window)) == ["compact-etcd: the fault was not made as meant: not every watch got 410"]


def test_a_timed_out_call_in_the_log_is_a_violation() -> None:
    window = faults.Window("kill-replica", 10.0, _window("x").tallies, {"timeout": 2, "connection": 1}, {}, "")
    assert faults.violations(_result(window)) == ["kill-replica: 2 webhook calls that timed out"]


def test_the_no_op_is_registered_as_gpu_class_is_for_its_own_namespace() -> None:
    deploy = yaml.safe_load((Path(faults.REPO_ROOT) / "deploy" / "base" / "webhook.yaml").read_text())
    noop = faults.noop_configuration(deploy, "https://127.0.0.1:9/mutate", b"CA")
    [ours], [theirs] = deploy["webhooks"], noop["webhooks"]
    for key in ("rules", "matchConditions", "timeoutSeconds", "failurePolicy", "sideEffects", "reinvocationPolicy",
                "admissionReviewVersions", "matchPolicy"):
        assert theirs[key] == ours[key], key
    assert noop["metadata"]["name"] == faults.NOOP_CONFIGURATION and theirs["name"] == faults.NOOP_WEBHOOK
    assert theirs["clientConfig"] == {"url": "https://127.0.0.1:9/mutate", "caBundle": "Q0E="}
    assert {e["key"]: e["values"] for e in theirs["namespaceSelector"]["matchExpressions"]} == {
        faults.ARM_LABEL: [faults.NOOP], "kubernetes.io/metadata.name": ["gpu-class-system", "kube-system"]}


@pytest.mark.parametrize("rate", [0.5, 1, 3, 8, 20])
def test_the_stream_keeps_its_rate_with_about_one_call_a_second(rate: float) -> None:
    stream = Stream(rate)
    from_deployments = stream.replicas / (2 * stream.deployment_interval)
    from_jobs = stream.job_completions / stream.job_interval
    assert from_deployments + from_jobs == pytest.approx(rate)
    assert 1 / stream.deployment_interval + 1 / stream.job_interval <= max(2.0, 2 * rate)
    assert stream.job_parallelism <= stream.job_completions


def test_a_rotation_swaps_every_file_at_once(tmp_path: Path) -> None:
    volume = CertVolume(tmp_path / "tls")
    first, second = CertAuthority.make("first"), CertAuthority.make("second")
    volume.write(first.serving_files())
    before = os.readlink(tmp_path / "tls" / "..data")
    volume.write(second.serving_files())
    after = os.readlink(tmp_path / "tls" / "..data")
    assert before != after and not (tmp_path / "tls" / before).exists()
    assert os.readlink(tmp_path / "tls" / "tls.crt") == "..data/tls.crt"
    cert = x509.load_pem_x509_certificate(volume.file("tls.crt").read_bytes())
    cert.verify_directly_issued_by(second.certificate)


def test_served_certificate_is_the_one_a_new_connection_gets(tmp_path: Path) -> None:
    ca = CertAuthority.make("served")
    files = ca.serving_files()
    (tmp_path / "tls.crt").write_bytes(files["tls.crt"])
    (tmp_path / "tls.key").write_bytes(files["tls.key"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def serve() -> None:
            conn, _ = listener.accept()
            with context.wrap_socket(conn, server_side=True):
                pass

        thread = threading.Thread(target=serve)
        thread.start()
        served = served_certificate(listener.getsockname()[1])
        thread.join()
    served.verify_directly_issued_by(ca.certificate)
