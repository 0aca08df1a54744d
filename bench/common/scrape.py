"""Numbers out of the text a kube-scheduler's /metrics serves (Prometheus' text format). Pure: no I/O.

The experiments that read gpu-class-scheduler's counters (wait, churn) and its extension points' times
(placement, churn) read them here, so a metric is parsed one way wherever it is reported.
"""

from __future__ import annotations

import re
from collections import defaultdict


def read_counter(text: str, metric: str, label: str) -> dict[str, float]:
    """A counter of Prometheus text by one of its labels, summed over the others (the profiles of one
    scheduler process, the queues)."""
    totals: dict[str, float] = {}
    for m in re.finditer(rf"^{re.escape(metric)}\{{(.*)\}} (\S+)$", text, re.M):
        value = re.search(rf'(?:^|,){re.escape(label)}="([^"]*)"', m.group(1))
        if value:
            totals[value.group(1)] = totals.get(value.group(1), 0.0) + float(m.group(2))
    return totals


def read_value(text: str, metric: str) -> float | None:
    """A metric without labels (`name 3`), or None when the text does not have it."""
    m = re.search(rf"^{re.escape(metric)}(?:\{{\}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def read_scheduler_times(text: str) -> dict[str, float]:
    """kube-scheduler's own account so far, all its profiles together: `attempt`, `PreFilter`, `Filter`
    and `Score`, each a `sum` (seconds) and a `count` (scheduling attempts; extension points run)."""
    times: dict[str, float] = defaultdict(float)
    for m in re.finditer(r"^scheduler_(scheduling_attempt|framework_extension_point)_duration_seconds_(sum|count)"
                         r"\{(.*)\} (\S+)$", text, re.M):
        point = re.search(r'extension_point="(\w+)"', m.group(3))
        key = "attempt" if m.group(1) == "scheduling_attempt" else point.group(1) if point else ""
        if key in ("attempt", "PreFilter", "Filter", "Score"):
            times[f"{key} {m.group(2)}"] += float(m.group(4))
    return times
