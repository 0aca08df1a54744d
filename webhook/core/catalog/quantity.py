"""Kubernetes resource quantities (`40Gi`, `81559Mi`, `48G`, `85899345920`, `1e3`) as MiB. Pure.

Read where memory is given as a quantity: a Pod's gpu-class.io/min-memory annotation and a DRA
device's `memory` capacity.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Digits bounded: a value comes from a Pod's author, and an unbounded one is work without end (1e99999999
# raised 10 to that power) or an overflow (1e400 as a float). Eighteen digits and a three-digit exponent
# hold any memory a device could have, many times over.
_QUANTITY = re.compile(
    r"([0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})(?:(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)|e([0-9]{1,3}))?")
_BYTES = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def quantity_mib(value: Any) -> float | None:
    """The quantity in MiB; None when it is not a quantity, is 0, or is too large for a float."""
    match = _QUANTITY.fullmatch(str(value).strip()) if isinstance(value, (str, int, float)) else None
    if match is None:
        return None
    try:
        number = float(match.group(1)) * _BYTES[match.group(2)] * 10.0 ** int(match.group(3) or 0)
    except OverflowError:
        return None
    return number / 2**20 if 0 < number < math.inf else None
