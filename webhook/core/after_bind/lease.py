"""Leader election on a coordination.k8s.io/v1 Lease: who may hold it, and the spec that holds it. Pure.

client-go's leaderelection, reduced to what one controller needs: a candidate takes the Lease when no one
holds it, when it holds it already, or when the holder has not renewed it for leaseDurationSeconds. The
write that takes it carries the resourceVersion it read, so of two candidates that both see it free, the
API server lets one write and answers the other 409.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from ..view.pods import timestamp_seconds


def micro_time(seconds: float) -> str:
    """A MicroTime as the API writes it."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def may_hold(spec: Mapping[str, Any], me: str, now: float) -> bool:
    holder = spec.get("holderIdentity")
    if not holder or holder == me:
        return True
    renewed = timestamp_seconds(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return True  # a Lease no one renews in the API's form holds no one off
    return now - renewed > duration


def held_spec(spec: Mapping[str, Any], me: str, now: float, duration_seconds: int) -> dict[str, Any]:
    """The spec once `me` holds (or renews) the Lease at `now`."""
    taking = spec.get("holderIdentity") != me
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": micro_time(now) if taking else spec.get("acquireTime") or micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (1 if taking and spec.get("holderIdentity") else 0),
    }
