"""The watch of Karpenter's NodePools: GPU nodes that can appear (core/view/pools.py).

Optional: off, and said so once, where Karpenter is not installed or we may not read them.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import kubernetes

from ..core.view.pools import NODEPOOL_API, Pool, pools_from_object
from .feed import Feed, feeding

log = logging.getLogger("gpu_class.watch")


class PoolsWatch:
    """Every NodePool, reduced to the GPU pools it can make."""

    def __init__(self, feed: Feed, api: kubernetes.client.CoreV1Api) -> None:
        self.feed = feed
        self.catalog = feed.catalog
        self.state = feed.state
        self._submit = feed.submit  # bound once: it is called for every event
        self.state.node_pools = {}
        group, version = NODEPOOL_API.split("/")
        list_pools = functools.partial(kubernetes.client.CustomObjectsApi(api.api_client).list_cluster_custom_object,
                                       group, version, "nodepools")
        self.reflector = feeding(feed, "nodepools", list_pools, self.reduce, self.replace, self.apply,
                                 on_off=self.turned, group=NODEPOOL_API)

    def reduce(self, obj: dict[str, Any]) -> tuple[str, tuple[Pool, ...]]:
        return str((obj.get("metadata") or {}).get("name")), pools_from_object(obj, self.catalog)

    def replace(self, pools: list[tuple[str, tuple[Pool, ...]]]) -> None:
        def apply() -> bool:
            self.state.replace_pools(pools)
            return self.feed.mark_synced("nodepools")
        self._submit(apply, wait=True)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        name, pools = self.reduce(obj)
        held = () if kind == "DELETED" else pools
        self._submit(lambda: self.state.set_pools(name, held))

    def turned(self, name: str, reason: str | None) -> None:
        """NodePools went off (not served: no Karpenter; not allowed) or came back."""
        def apply() -> bool:
            self.state.pools_off = reason
            if reason is not None:
                self.state.node_pools = None
            return self.feed.mark_synced(name)
        self._submit(apply, wait=True)
        if self.feed.logs_changes:
            log.info("Karpenter's NodePools are %s", f"not read: {reason}" if reason else "read")
