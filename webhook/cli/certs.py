"""`gpuclass certs`: a CA, the webhook's serving certificate, and the scheduler's client certificate."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from .common import Command

if TYPE_CHECKING:
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
