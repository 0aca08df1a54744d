"""How long a Pod may wait for its class's best type: a class's `maxWait` and a Pod's gpu-class.io/max-wait. Pure."""

from __future__ import annotations

import re
from typing import Any

MAX_WAIT_SECONDS = 24 * 3600  # the longest wait: a scheduler keeps a timer per waiting Pod until its end
# digits bounded: int() of a few thousand digits raises, and 24h is 86400s
_WAIT = re.compile(r"(?=\d)(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,6})s)?")

WAIT_FORMS = "a duration of 1s to 24h, like \"90s\", \"10m\", \"2h\" or \"1h30m\""


def parse_wait(raw: Any) -> int | None:
    """Seconds of a wait written as users write durations (90s, 10m, 2h, 1h30m), 1 s to 24 h; None otherwise.
    Every such form reads the same in Go's time.ParseDuration, which gpu-class-scheduler uses."""
    found = _WAIT.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if found is None:
        return None
    hours, minutes, seconds = (int(g or 0) for g in found.groups())
    total = hours * 3600 + minutes * 60 + seconds
    return total if 0 < total <= MAX_WAIT_SECONDS else None
