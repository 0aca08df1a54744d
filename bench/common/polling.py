"""Waiting for what a benchmark's cluster should come to."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(what: str, probe: Callable[[], T], seconds: float = 60.0, interval: float = 0.2) -> T:
    """Poll until probe() returns something truthy, and return it; a RuntimeError naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := probe():
            return found
        time.sleep(interval)
    raise RuntimeError(f"timed out after {seconds:.0f} s waiting for {what}")
