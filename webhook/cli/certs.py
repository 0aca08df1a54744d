"""`gpuclass certs`: a CA, the webhook's serving certificate, and the scheduler's client certificate."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from .common import Command

if TYPE_CHECKING:
    from ..core.certificates.settings import KeeperSettings
    from .common import Subparsers


def add_parser(sub: Subparsers) -> None:
    c = sub.add_parser("certs", help="write a CA, a serving certificate (ca.crt, tls.crt, tls.key) and the "
                                     "scheduler's client certificate for the extender (client.crt, client.key)")
    c.add_argument("--out", required=True, help="directory to write into")
    c.add_argument("--service", default="gpu-class")
    c.add_argument("--namespace", default="gpu-class-system")
    c.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    c.add_argument("--ip", action="append", default=[], help="IP address SAN (repeatable)")
    c.add_argument("--days", type=int, default=365, help="serving and client certificate validity")


def write_certs(out: str, dns: list[str], ips: list[str], days: int = 365) -> None:
    from ..serving import certs

    bundle = certs.generate(dns, ips, valid_days=days)
    os.makedirs(out, exist_ok=True)
    for name, data, mode in (
        ("ca.crt", bundle.ca_crt, 0o644),
        ("tls.crt", bundle.tls_crt, 0o644),
        ("tls.key", bundle.tls_key, 0o600),
        ("client.crt", bundle.client_crt, 0o644),
        ("client.key", bundle.client_key, 0o600),
    ):
        path = os.path.join(out, name)
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(path + ".tmp", path)


def run(args: argparse.Namespace) -> int:
    from ..cluster.loading import InputError
    from ..serving import certs

    dns = certs.service_dns_names(args.service, args.namespace) + list(args.dns)
    try:
        write_certs(args.out, dns, list(args.ip), args.days)
    except ValueError as exc:  # a bad --ip
        raise InputError(str(exc)) from None
    print(f"wrote {args.out}/ca.crt, tls.crt, tls.key for {', '.join(dns + list(args.ip))}, "
          f"and client.crt, client.key for the scheduler's calls to the extender")
    print(f"CA bundle for the webhook configuration: base64 -w0 {args.out}/ca.crt")
    return 0


COMMAND = Command("certs", add_parser, run)


def add_managed_args(s: argparse.ArgumentParser) -> None:
    """`gpuclass serve` flags of tls.mode webhook-managed: the webhook keeps its own CA and certificates."""
    g = s.add_argument_group("certificates kept by the webhook (tls.mode webhook-managed)")
    g.add_argument("--manage-certificates", metavar="NAMESPACE",
                   help="keep the CA and certificates in the Secrets gpu-class-ca, gpu-class-tls and "
                        "gpu-class-extender-client of NAMESPACE, renewing them, and write the serving pair to "
                        "--cert-file and --key-file (which must be DIR/tls.crt and DIR/tls.key)")
    g.add_argument("--manage-webhook-configuration", action="append", default=[], metavar="NAME",
                   help="a MutatingWebhookConfiguration whose caBundle is kept (repeatable)")
    g.add_argument("--certificate-name", action="append", default=[], metavar="NAME",
                   help="a DNS name or IP of the serving certificate (repeatable; default: the gpu-class Service's)")
    for flag, default, what in (("--ca-validity-seconds", 365 * 86400, "the CA's validity"),
                                ("--ca-renew-before-seconds", 30 * 86400, "a new CA this long before expiry"),
                                ("--cert-validity-seconds", 30 * 86400, "the certificates' validity"),
                                ("--cert-renew-before-seconds", 10 * 86400, "renewed this long before expiry"),
                                ("--rotation-overlap-seconds", 900, "certificates move to a new CA after this"),
                                ("--certificates-check-seconds", 60, "each worker checks this often")):
        g.add_argument(flag, type=int, default=default, help=f"{what} (default {default})")


def managed_settings(args: argparse.Namespace) -> KeeperSettings | None:
    """The keeper's settings from the flags, or None without --manage-certificates; InputError says what to fix."""
    import datetime

    from ..cluster.loading import InputError
    from ..core.certificates.rotation import Policy
    from ..core.certificates.settings import KeeperSettings
    from ..serving import certs

    if not args.manage_certificates:
        return None
    directory = os.path.dirname(args.cert_file)
    expected = {"--cert-file": (args.cert_file, "tls.crt"), "--key-file": (args.key_file, "tls.key"),
                **({"--client-ca-file": (args.client_ca_file, "ca.crt")} if args.client_ca_file else {})}
    for flag, (given, name) in expected.items():
        if given != os.path.join(directory, name):
            raise InputError(f"--manage-certificates writes {name} beside --cert-file: give {flag} "
                             f"{os.path.join(directory, name)}, not {given}")
    seconds = datetime.timedelta
    try:
        policy = Policy(ca_validity=seconds(seconds=args.ca_validity_seconds),
                        ca_renew_before=seconds(seconds=args.ca_renew_before_seconds),
                        validity=seconds(seconds=args.cert_validity_seconds),
                        renew_before=seconds(seconds=args.cert_renew_before_seconds),
                        overlap=seconds(seconds=args.rotation_overlap_seconds))
    except ValueError as exc:
        raise InputError(f"--manage-certificates: {exc}") from None
    if args.certificates_check_seconds <= 0 or args.certificates_check_seconds * 2 >= args.rotation_overlap_seconds:
        raise InputError("--certificates-check-seconds must be positive and under half of --rotation-overlap-seconds: "
                         "every replica must read the new CA before certificates move to it")
    names = tuple(args.certificate_name) or tuple(certs.service_dns_names("gpu-class", args.manage_certificates))
    return KeeperSettings(namespace=args.manage_certificates, names=names,
                          webhook_configurations=tuple(args.manage_webhook_configuration), policy=policy,
                          directory=directory, interval_seconds=float(args.certificates_check_seconds))
