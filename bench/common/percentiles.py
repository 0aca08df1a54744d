"""Percentiles and medians, as every experiment reports them."""

from __future__ import annotations

import math
from typing import Sequence


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(math.ceil(fraction * len(sorted_values)), 1)
    return sorted_values[rank - 1]


def rounded_rank_percentile(values: Sequence[float], q: float) -> float:
    """The value at quantile q of `values` in any order, its rank (q of the last) rounded; 0 for none.

    The rank python -m bench apiserver and bench faults report their p50 and p99 by.
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
