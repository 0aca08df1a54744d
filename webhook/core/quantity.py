"""Kubernetes resource quantities (`40Gi`, `81559Mi`, `48G`, `85899345920`, `1e3`) as MiB. Pure.

Read where memory is given as a quantity: a Pod's gpu-class.io/min-memory annotation and a DRA
device's `memory` capacity.
"""

from __future__ import annotations

import re
from typing import Any

_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)|e([0-9]+))?")
_BYTES = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def quantity_mib(value: Any) -> float | None:
    """The quantity in MiB; None when it is not a quantity, or is 0."""
    match = _QUANTITY.fullmatch(str(value).strip()) if isinstance(value, (str, int, float)) else None
    if match is None:
        return None
    number = float(match.group(1)) * _BYTES[match.group(2)] * (10 ** int(match.group(3) or 0))
    return number / 2**20 if number > 0 else None
