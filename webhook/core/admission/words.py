"""How the admission's messages quote what a Pod wrote, give memory in GiB, and keep warnings short. Pure.

Every step of the admission writes messages with these; none of them decides anything, so the trace of an
admission (tests/test_admission_pipeline.py) leaves this module out, as it leaves out the catalog and the view.
"""

from __future__ import annotations

from typing import Any

from ..view.nodes import GIB_MIB

WARNING_MAX_CHARS = 120  # the API server asks webhooks to keep warnings this short


def quoted(value: Any) -> str:
    """A value from the Pod, quoted for a message; annotations can be long, messages should not be."""
    text = repr(value)
    return text if len(text) <= 66 else text[:63] + "..."


def short(text: str) -> str:
    """A warning cut to the length the API server asks for."""
    return text if len(text) <= WARNING_MAX_CHARS else text[: WARNING_MAX_CHARS - 3] + "..."


def gib(mib: float) -> str:
    return f"{mib / GIB_MIB:.4g} GiB"
