"""Certificate generation for the self-managed path: a CA, a serving certificate and a client certificate.

The client certificate is the scheduler's, for its calls to the extender's listener (tls.py), which
trusts the same CA: one CA to distribute and rotate. Its usage is client authentication only, and
the serving certificate's server authentication only, so neither can stand in for the other.

Returns PEM bytes; writing files is the caller's business.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
from dataclasses import dataclass
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


CLIENT_COMMON_NAME = "gpu-class-scheduler"  # who calls the extender; the server logs it with each call


@dataclass(frozen=True)
class CertBundle:
    ca_crt: bytes
    tls_crt: bytes
    tls_key: bytes
    client_crt: bytes
    client_key: bytes


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use to reach a Service-backed webhook."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def generate(
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    *,
    valid_days: int = 365,
    ca_valid_days: int = 3650,
    now: datetime.datetime | None = None,
) -> CertBundle:
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    not_before = now - datetime.timedelta(minutes=5)  # tolerate clock skew between nodes

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gpu-class CA"))
        .issuer_name(_name("gpu-class CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + datetime.timedelta(days=ca_valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    issue = functools.partial(_issue, ca_cert, ca_key, not_before, now + datetime.timedelta(days=valid_days))
    tls_crt, tls_key = issue(dns_names[0] if dns_names else ip_addresses[0], ExtendedKeyUsageOID.SERVER_AUTH,
                             x509.SubjectAlternativeName(sans))
    client_crt, client_key = issue(CLIENT_COMMON_NAME, ExtendedKeyUsageOID.CLIENT_AUTH, None)
    return CertBundle(ca_crt=ca_cert.public_bytes(serialization.Encoding.PEM), tls_crt=tls_crt, tls_key=tls_key,
                      client_crt=client_crt, client_key=client_key)


def _issue(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, not_before: datetime.datetime,
           not_after: datetime.datetime, common_name: str, usage: x509.ObjectIdentifier,
           names: x509.SubjectAlternativeName | None) -> tuple[bytes, bytes]:
    """A leaf certificate for one usage, signed by the CA: (certificate, key) in PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if names is not None:
        builder = builder.add_extension(names, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def not_valid_after(cert_pem: bytes) -> datetime.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc
