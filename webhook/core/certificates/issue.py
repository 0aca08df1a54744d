"""Building and reading the keeper's certificates: PEM in, PEM out, no files, no cluster.

ECDSA P-256 throughout, as `gpuclass certs` and the cert-manager mode use. A leaf never outlives the CA
that signed it: a chain is only as valid as its shortest link.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from typing import Literal, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .rotation import BACKDATE as SKEW, CertFacts
CA_COMMON_NAME = "gpu-class webhook-managed CA"
Usage = Literal["server", "client"]


@dataclass(frozen=True)
class Pair:
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(now: datetime.datetime, validity: datetime.timedelta) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(CA_COMMON_NAME)).issuer_name(_name(CA_COMMON_NAME))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW).not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_leaf(ca: Pair, common_name: str, usage: Usage, names: Sequence[str], now: datetime.datetime,
               validity: datetime.timedelta) -> Pair:
    """A certificate for one usage (server or client authentication), signed by `ca`."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA's key is not an ECDSA key")
    key = ec.generate_private_key(ec.SECP256R1())
    oid = ExtendedKeyUsageOID.SERVER_AUTH if usage == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW).not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([oid]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]),
                                        critical=False)
    return Pair(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def read_pair(cert_pem: bytes, key_pem: bytes, *, is_ca: bool) -> CertFacts | None:
    """The facts of a certificate whose key is `key_pem`; None if either is unreadable or they do not match."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return None
    if cert.public_key() != key.public_key():
        return None
    return facts(cert, is_ca=is_ca)


def facts(cert: x509.Certificate, *, is_ca: bool) -> CertFacts | None:
    try:
        if is_ca:
            key_id = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
        else:
            key_id = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier or b""
    except x509.ExtensionNotFound:
        return None
    return CertFacts(cert.not_valid_before_utc, cert.not_valid_after_utc, key_id, _names(cert))


def _names(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(sorted([*sans.get_values_for_type(x509.DNSName),
                         *(str(a) for a in sans.get_values_for_type(x509.IPAddress))]))


def read_bundle(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle; an unreadable bundle holds none."""
    try:
        return x509.load_pem_x509_certificates(pem) if pem.strip() else []
    except ValueError:
        return []


def previous_ca(bundle_pem: bytes, current: CertFacts) -> tuple[CertFacts, bytes] | None:
    """The CA in the bundle besides `current` (the one it replaced), with its PEM."""
    for cert in read_bundle(bundle_pem):
        found = facts(cert, is_ca=True)
        if found is not None and found.key_id != current.key_id:
            return found, cert.public_bytes(serialization.Encoding.PEM)
    return None
