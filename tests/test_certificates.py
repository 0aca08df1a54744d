"""The webhook-managed certificates' decisions (core/certificates/rotation.py) and their building (issue.py)."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509

from webhook.core.certificates import issue
from webhook.core.certificates.rotation import BACKDATE, CertFacts, Held, Plan, Policy, plan_rotation

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
DAY = datetime.timedelta(days=1)
POLICY = Policy(ca_validity=365 * DAY, ca_renew_before=30 * DAY, validity=30 * DAY, renew_before=10 * DAY,
                overlap=datetime.timedelta(minutes=15))
NAMES = ("gpu-class.ns.svc", "gpu-class.ns.svc.cluster.local")


def make_ca_facts(key: bytes, made: datetime.datetime = T0) -> CertFacts:
    return CertFacts(made - BACKDATE, made + POLICY.ca_validity, key)  # as issue.make_ca dates it


def make_leaf(issuer: bytes, made: datetime.datetime = T0, names: tuple[str, ...] = NAMES) -> CertFacts:
    return CertFacts(made, made + POLICY.validity, issuer, names)


MADE_B = T0 + 335 * DAY
CA_A, CA_B = make_ca_facts(b"A"), make_ca_facts(b"B", MADE_B)
FRESH = Held(CA_A, None, make_leaf(b"A"), make_leaf(b"A", names=()))


@pytest.mark.parametrize("held, now, expected", [
    pytest.param(Held(None, None, None, None), T0, Plan(True, False, "absent", "absent"), id="nothing-held"),
    pytest.param(FRESH, T0 + DAY, Plan(False, False, None, None), id="all-current"),
    pytest.param(FRESH, T0 + 20 * DAY, Plan(False, False, "expiring", "expiring"), id="leaves-within-renew-before"),
    pytest.param(Held(CA_A, None, make_leaf(b"A", names=("old.svc",)), make_leaf(b"A", names=())), T0 + DAY,
                 Plan(False, False, "names-changed", None), id="serving-names-changed"),
    pytest.param(Held(CA_A, None, make_leaf(b"Z"), make_leaf(b"A", names=())), T0 + DAY,
                 Plan(False, False, "untrusted-issuer", None), id="leaf-of-a-ca-not-in-the-bundle"),
    pytest.param(Held(CA_A, None, None, make_leaf(b"A", names=())), T0 + DAY,
                 Plan(False, False, "absent", None), id="serving-secret-deleted"),
    # the CA within its renew-before: a new one, the old kept; leaves of the old CA stay for now
    pytest.param(Held(CA_A, None, make_leaf(b"A", T0 + 330 * DAY), make_leaf(b"A", T0 + 330 * DAY, ())),
                 T0 + 336 * DAY, Plan(True, True, None, None), id="ca-rotates-leaves-stay"),
    # within the overlap: both CAs trusted, leaves of the old one kept
    pytest.param(Held(CA_B, CA_A, make_leaf(b"A", T0 + 330 * DAY), make_leaf(b"A", T0 + 330 * DAY, ())),
                 MADE_B + datetime.timedelta(minutes=14), Plan(False, True, None, None), id="within-overlap"),
    pytest.param(Held(CA_B, CA_A, make_leaf(b"A", T0 + 330 * DAY), make_leaf(b"A", T0 + 330 * DAY, ())),
                 MADE_B + datetime.timedelta(minutes=15),
                 Plan(False, True, "moves-to-new-ca", "moves-to-new-ca"), id="overlap-passed-leaves-move"),
    pytest.param(Held(CA_B, CA_A, make_leaf(b"B", T0 + 366 * DAY), make_leaf(b"B", T0 + 366 * DAY, ())),
                 T0 + 366 * DAY, Plan(False, False, None, None), id="previous-ca-expired-dropped"),
    pytest.param(Held(CA_A, None, make_leaf(b"A"), None), T0 + 400 * DAY,
                 Plan(True, False, "untrusted-issuer", "absent"), id="ca-expired-everything-anew"),
    # the CA Secret deleted: the serving Secret's bundle still names A, kept while leaves move at once
    pytest.param(Held(None, CA_A, make_leaf(b"A"), make_leaf(b"A", names=())), T0 + DAY,
                 Plan(True, True, "untrusted-issuer", "untrusted-issuer"), id="ca-secret-deleted"),
])
def test_plan_rotation(held: Held, now: datetime.datetime, expected: Plan) -> None:
    assert plan_rotation(held, NAMES, now, POLICY) == expected


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"ca_renew_before": 400 * DAY}, "CA's renew-before", id="ca-renew-before-past-validity"),
    pytest.param({"renew_before": 0 * DAY}, "certificates' renew-before", id="zero-renew-before"),
    pytest.param({"overlap": 40 * DAY}, "overlap", id="overlap-past-ca-renew-before"),
])
def test_policy_refuses_what_would_leave_a_replica_untrusted(kwargs: dict[str, datetime.timedelta],
                                                             message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Policy(**{**POLICY.__dict__, **kwargs})


def test_issued_leaf_reads_back_and_never_outlives_its_ca() -> None:
    ca = issue.make_ca(T0, 20 * DAY)
    leaf = issue.issue_leaf(ca, NAMES[0], "server", ["10.0.0.1", *NAMES], T0, POLICY.validity)
    ca_facts = issue.read_pair(ca.cert_pem, ca.key_pem, is_ca=True)
    leaf_facts = issue.read_pair(leaf.cert_pem, leaf.key_pem, is_ca=False)
    assert ca_facts is not None and leaf_facts is not None
    assert leaf_facts.key_id == ca_facts.key_id
    assert leaf_facts.names == tuple(sorted(["10.0.0.1", *NAMES]))
    assert leaf_facts.not_after == ca_facts.not_after == T0 + 20 * DAY
    cert = x509.load_pem_x509_certificate(leaf.cert_pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))
    assert issue.read_pair(leaf.cert_pem, ca.key_pem, is_ca=False) is None  # a key of another certificate
    assert issue.read_pair(b"junk", leaf.key_pem, is_ca=False) is None
