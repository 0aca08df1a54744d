"""What the live inventory tells as it works (watch.LiveInventory): watch restarts, contact with the API, each
published snapshot, its lag, and each bind. The server's observer is its metrics (serving/metrics.py,
InventoryMetrics)."""

from __future__ import annotations

from typing import Protocol

from ..core.view.pods import UnboundGpuPod
from ..core.view.snapshot import Snapshot


class InventoryObserver(Protocol):
    """Told about watch restarts, contact with the API, and each published snapshot (for metrics)."""

    def watching(self, resources: tuple[str, ...], reasons: tuple[str, ...]) -> None:
        """Before the first list: the resources watched and every reason a watch can restart for."""

    def restarted(self, resource: str, reason: str) -> None: ...

    def contacted(self, resource: str) -> None: ...

    def reading(self, resource: str, read: bool) -> None:
        """After each list: whether the resource is read (False: off, not served or not allowed)."""

    def published(self, snapshot: Snapshot) -> None: ...

    def synced(self) -> None:
        """Once, when every resource has been listed: the worker's view is whole."""

    def lagging(self, seconds: float) -> None:
        """Every LAG_REPORT_SECONDS: the age of the oldest event read and not yet in a published snapshot."""

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        """A GPU Pod seen unbound is now bound to `node`; `before` is the inventory just before the bind,
        in which `counted` of the Pod's own devices on `node` are already in use (its DRA claim)."""


class NoObserver:
    def watching(self, resources: tuple[str, ...], reasons: tuple[str, ...]) -> None:
        pass

    def restarted(self, resource: str, reason: str) -> None:
        pass

    def contacted(self, resource: str) -> None:
        pass

    def reading(self, resource: str, read: bool) -> None:
        pass

    def published(self, snapshot: Snapshot) -> None:
        pass

    def synced(self) -> None:
        pass

    def lagging(self, seconds: float) -> None:
        pass

    def bound(self, pod: UnboundGpuPod, node: str, before: Snapshot, counted: int) -> None:
        pass
