"""The webhook's own CA and certificates (tls.mode webhook-managed): kept in Secrets, trusted through caBundle.

Every replica does the same at start and then periodically (`ensure`): read the CA, serving and client
Secrets, ask core/certificates/rotation.py what is due, write what changed, put the trust bundle into the
caBundle of the webhook configurations, and hand back the serving pair for the server's files. Writes are
conflict-safe across replicas and workers: a Secret is created only if absent (the first create wins, the
others get 409 and start over from what it wrote) and changed only at the resourceVersion it was read at.

The order matters to the Pods being admitted: the CA Secret first, then caBundle, then the leaves, and the
server's files last, so the API server trusts a new CA before any replica serves a certificate it signed.
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

from cryptography.hazmat.primitives import serialization
from kubernetes.client.exceptions import ApiException

from ..core.certificates.issue import Pair, facts, issue_leaf, make_ca, read_bundle, read_pair
from ..core.certificates.rotation import CertFacts, Held, Plan, plan_rotation
from ..core.certificates.settings import KeeperSettings

log = logging.getLogger("gpu_class.tls_keeper")

REQUEST_TIMEOUT_SECONDS = 10
ATTEMPTS = 5  # a conflict means another replica wrote: read again and decide from that
LABELS = {"app.kubernetes.io/name": "gpu-class", "app.kubernetes.io/managed-by": "gpu-class-webhook"}


@dataclass(frozen=True)
class Served:
    """What the server loads: its certificate and key, and the bundle it trusts for the extender's callers."""

    cert_pem: bytes
    key_pem: bytes
    bundle_pem: bytes


class Conflict(Exception):
    """Another writer changed the object since it was read."""


@dataclass(frozen=True)
class Found:
    data: dict[str, bytes] | None  # None: no such Secret
    resource_version: str | None


def read_secret(core: Any, namespace: str, name: str) -> Found:
    try:
        response = core.read_namespaced_secret(name, namespace, _preload_content=False,
                                               _request_timeout=REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status == 404:
            return Found(None, None)
        raise
    body = json.loads(response.data)
    data = {k: base64.b64decode(v) for k, v in (body.get("data") or {}).items()}
    return Found(data, body["metadata"]["resourceVersion"])


def write_secret(core: Any, namespace: str, name: str, found: Found, data: dict[str, bytes]) -> None:
    """Create the Secret if it was absent, else change it at the resourceVersion it was read at; Conflict if
    another writer came first. Unchanged data is not written."""
    if found.data == data:
        return
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    try:
        if found.data is None:
            core.create_namespaced_secret(namespace, {
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "data": encoded,
                "metadata": {"name": name, "namespace": namespace, "labels": LABELS}},
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        else:
            # a merge patch that names the resourceVersion is refused (409) if the Secret changed since
            core.patch_namespaced_secret(name, namespace, {
                "metadata": {"resourceVersion": found.resource_version}, "data": encoded},
                _content_type="application/merge-patch+json", _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status in (404, 409):  # 409: created or changed by another; 404: deleted since read
            raise Conflict(f"Secret {namespace}/{name}") from None
        raise
    log.info("certificate secret written", extra={"fields": {"secret": f"{namespace}/{name}",
                                                              "created": found.data is None}})


def patch_ca_bundles(admission: Any, names: tuple[str, ...], bundle_pem: bytes) -> None:
    """Put the bundle into caBundle of every webhook of the named configurations; one not there yet is skipped
    (a GitOps sync may create the configurations after the Deployment: the next round finds them)."""
    wanted = base64.b64encode(bundle_pem).decode()
    for name in names:
        try:
            response = admission.read_mutating_webhook_configuration(
                name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                log.info("webhook configuration not there yet", extra={"fields": {"configuration": name}})
                continue
            raise
        body = json.loads(response.data)
        ops: list[dict[str, Any]] = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted}
            for i, webhook in enumerate(body.get("webhooks") or [])
            if (webhook.get("clientConfig") or {}).get("caBundle") != wanted]
        if not ops:
            continue
        # the test makes the indexes safe: a configuration changed since it was read is refused
        test = {"op": "test", "path": "/metadata/resourceVersion", "value": body["metadata"]["resourceVersion"]}
        try:
            admission.patch_mutating_webhook_configuration(
                name, [test, *ops], _content_type="application/json-patch+json", _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status in (409, 422):  # a failed test is 422 on kube-apiserver
                raise Conflict(f"MutatingWebhookConfiguration {name}") from None
            raise
        log.info("caBundle written", extra={"fields": {"configuration": name, "webhooks": len(ops)}})


@dataclass(frozen=True)
class _State:
    ca: Found
    serving: Found
    client: Found
    ca_pair: Pair | None
    previous_pem: bytes  # the previous CA's certificate, b"" when there is none
    held: Held


def _read_state(core: Any, s: KeeperSettings) -> _State:
    ca, serving, client = (read_secret(core, s.namespace, n) for n in (s.ca_secret, s.serving_secret, s.client_secret))
    ca_facts = _pair_facts(ca, is_ca=True)
    # The CA Secret's bundle names the CA it replaced; without the CA Secret, the serving Secret's bundle
    # names the CA that signed what replicas serve now.
    bundle = (ca.data or {}).get("ca.crt", b"") if ca_facts else (serving.data or {}).get("ca.crt", b"")
    previous, previous_pem = None, b""
    for cert in read_bundle(bundle):
        found = facts(cert, is_ca=True)
        if found is not None and (ca_facts is None or found.key_id != ca_facts.key_id):
            previous, previous_pem = found, _pem(cert)
            break
    ca_pair = Pair(ca.data["tls.crt"], ca.data["tls.key"]) if ca_facts and ca.data else None
    held = Held(ca=ca_facts, previous_ca=previous, serving=_pair_facts(serving, is_ca=False),
                client=_pair_facts(client, is_ca=False))
    return _State(ca, serving, client, ca_pair, previous_pem, held)


def _pem(cert: Any) -> bytes:
    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _pair_facts(found: Found, *, is_ca: bool) -> CertFacts | None:
    data = found.data or {}
    return read_pair(data.get("tls.crt", b""), data.get("tls.key", b""), is_ca=is_ca)


def ensure_once(core: Any, admission: Any, s: KeeperSettings, now: datetime.datetime) -> tuple[Served, Plan]:
    """One round: Conflict if another writer came first (ensure starts over)."""
    state = _read_state(core, s)
    names = tuple(sorted(s.names))
    plan = plan_rotation(state.held, names, now, s.policy)
    if plan.new_ca or state.ca_pair is None:
        ca = make_ca(now, s.policy.ca_validity)
        # the CA being replaced (or, with its Secret lost, the one the serving Secret names) stays trusted
        previous = (state.ca_pair.cert_pem if state.ca_pair else state.previous_pem) if plan.keep_previous else b""
    else:
        ca = state.ca_pair
        previous = state.previous_pem if plan.keep_previous else b""
    bundle = ca.cert_pem + previous
    write_secret(core, s.namespace, s.ca_secret, state.ca, {"tls.crt": ca.cert_pem, "tls.key": ca.key_pem,
                                                             "ca.crt": bundle})
    patch_ca_bundles(admission, s.webhook_configurations, bundle)
    serving = _leaf(core, s.namespace, s.serving_secret, state.serving, plan.serving is not None, bundle,
                    lambda: issue_leaf(ca, names[0], "server", names, now, s.policy.validity))
    _leaf(core, s.namespace, s.client_secret, state.client, plan.client is not None, bundle,
          lambda: issue_leaf(ca, s.client_common_name, "client", (), now, s.policy.validity))
    if not plan.is_noop:
        log.info("certificates renewed", extra={"fields": {"new_ca": plan.new_ca, "serving": plan.serving,
                                                            "client": plan.client}})
    return Served(serving.cert_pem, serving.key_pem, bundle), plan


def _leaf(core: Any, namespace: str, name: str, found: Found, reissue: bool, bundle: bytes,
          make: Callable[[], Pair]) -> Pair:
    """The leaf as it stands, or reissued; its Secret carries the current bundle either way."""
    data = found.data or {}
    pair = make() if reissue else Pair(data["tls.crt"], data["tls.key"])
    write_secret(core, namespace, name, found, {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "ca.crt": bundle})
    return pair


def ensure(core: Any, admission: Any, s: KeeperSettings, now: Callable[[], datetime.datetime]) -> Served:
    """Make the Secrets and caBundle what they should be now; start over when another replica wrote first."""
    for _ in range(ATTEMPTS):
        try:
            return ensure_once(core, admission, s, now())[0]
        except Conflict as exc:
            log.info("another writer came first; reading again", extra={"fields": {"object": str(exc)}})
    raise RuntimeError(f"certificates in {s.namespace}: still conflicting after {ATTEMPTS} attempts")


def write_served(directory: str, served: Served) -> bool:
    """Put the pair and bundle in `directory` as one change (a symlink swapped, as the kubelet does for a
    Secret volume), so a reader never sees a certificate with another's key. False if they were there already."""
    files = {"tls.crt": served.cert_pem, "tls.key": served.key_pem, "ca.crt": served.bundle_pem}
    current = os.path.join(directory, "..data")
    if all(_read_or_none(os.path.join(current, k)) == v for k, v in files.items()):
        return False
    on_disk = read_bundle(_read_or_none(os.path.join(current, "tls.crt")) or b"")
    if on_disk and on_disk[0].not_valid_before_utc > read_bundle(served.cert_pem)[0].not_valid_before_utc:
        return False  # another worker already wrote a newer certificate: a stale read must not roll it back
    os.makedirs(directory, exist_ok=True)
    version = os.path.join(directory, f"..{os.getpid()}-{threading.get_ident()}-{datetime.datetime.now().timestamp()}")
    os.makedirs(version, mode=0o700)
    for name, data in files.items():
        fd = os.open(os.path.join(version, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    link = os.path.join(directory, f"..data-{os.path.basename(version)}")
    os.symlink(os.path.basename(version), link)
    old = os.path.realpath(current) if os.path.islink(current) else None
    os.replace(link, current)
    for name in files:
        path = os.path.join(directory, name)
        if not os.path.islink(path):
            os.symlink(os.path.join("..data", name), path + ".new")
            os.replace(path + ".new", path)
    if old and os.path.dirname(old) == os.path.realpath(directory):
        _remove_tree(old)
    return True


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _remove_tree(path: str) -> None:
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


def keep(core: Any, admission: Any, s: KeeperSettings, directory: str, stop: threading.Event,
         interval_seconds: float, now: Callable[[], datetime.datetime]) -> None:
    """Every `interval_seconds` until `stop`: ensure, then the files. A failed round is logged and tried again
    at the next: the server keeps serving what it has, which stays valid far longer than a round."""
    while not stop.wait(interval_seconds):
        try:
            write_served(directory, ensure(core, admission, s, now))
        except Exception:  # the API server away, RBAC removed: say so, keep serving
            log.exception("certificate round failed")


def start_keeping(core: Any, admission: Any, s: KeeperSettings, directory: str, interval_seconds: float,
                  now: Callable[[], datetime.datetime]) -> threading.Event:
    stop = threading.Event()
    threading.Thread(target=keep, args=(core, admission, s, directory, stop, interval_seconds, now),
                     name="tls-keeper", daemon=True).start()
    return stop
