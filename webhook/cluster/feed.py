"""What the watches feed: the side of the live inventory (watch.LiveInventory) that takes their changes, and
the reflector that reads a resource for it.

A watch reduces what its reflector reads and submits a change: a function the inventory's applier runs under
the state's lock, which says whether the view changed. Each resource family has its watch (nodes_watch.py,
pods_watch.py, dra_watch.py, pools_watch.py, heralds.py); what an object means is decided in webhook.core.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from ..core.catalog.model import Catalog
from ..core.view.inventory import InventoryState
from .observer import InventoryObserver
from .reflector import BACKOFF_SECONDS, DRA_GROUP, Reflector


class Feed(Protocol):
    """The live inventory as its watches see it."""

    catalog: Catalog
    state: InventoryState
    observer: InventoryObserver
    stop_event: threading.Event
    after_list: Callable[[], None] | None  # told once each full list is in the state
    logs_changes: bool  # a running watch logs what changes; a one-shot read reports it in its output

    def submit(self, apply: Callable[[], bool], *, wait: bool = False) -> None:
        """Queue a change for the applier; `wait`: return once it is published."""

    def mark_synced(self, name: str) -> bool:
        """A full list of `name` is in the state. Under the state's lock."""

    def flush(self) -> None:
        """Publish what is applied and not yet published. Under the state's lock."""

    def later(self, call: Callable[[], None]) -> None:
        """Run `call` once the state's lock is released (from within a change)."""


def feeding(feed: Feed, name: str, list_call: Callable[..., Any], reduce: Callable[[dict[str, Any]], Any],
            replace: Callable[[list[Any]], None], apply: Callable[[str, dict[str, Any]], None], *,
            on_off: Callable[[str, str | None], None] | None = None, group: str = DRA_GROUP,
            max_backoff_seconds: float = BACKOFF_SECONDS[1]) -> Reflector:
    """The reflector of resource `name` for `feed`: it stops with it, tells its observer, and calls its after_list."""
    return Reflector(name, list_call, reduce, replace, apply, feed.stop_event, observer=feed.observer,
                     on_off=on_off, after_list=feed.after_list, group=group, max_backoff_seconds=max_backoff_seconds)
