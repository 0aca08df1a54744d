"""The serving TLS context: minimum version, and reloading rotated certificate files."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from servers import write_certs
from webhook.serving.tls import CertReloader


def test_minimum_tls_version_is_1_2(tmp_path: Path) -> None:
    d = write_certs(tmp_path)
    assert CertReloader(str(d / "tls.crt"), str(d / "tls.key")).context().minimum_version == ssl.TLSVersion.TLSv1_2


def test_changed_files_give_a_new_context_and_a_broken_pair_keeps_the_old(tmp_path: Path) -> None:
    d = write_certs(tmp_path / "a")
    reloader = CertReloader(str(d / "tls.crt"), str(d / "tls.key"), check_interval_seconds=0)
    first = reloader.context()
    assert reloader.context() is first  # unchanged files: the same context

    other = write_certs(tmp_path / "b")
    (d / "tls.crt").write_bytes((other / "tls.crt").read_bytes())  # cert rotated, key not yet: mismatch
    assert reloader.context() is first and reloader.reloads == 0
    (d / "tls.key").write_bytes((other / "tls.key").read_bytes())
    second = reloader.context()
    assert second is not first and reloader.reloads == 1


def test_a_bad_pair_at_start_is_an_error(tmp_path: Path) -> None:
    a, b = write_certs(tmp_path / "a"), write_certs(tmp_path / "b")
    with pytest.raises(ssl.SSLError):
        CertReloader(str(a / "tls.crt"), str(b / "tls.key"))
