"""The heralds: objects, each watched by name, whose condition says that an optional API is now served, so that
its reflectors that are off (pools_watch.py, dra_watch.py) list at once rather than at their next minute."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import kubernetes

from ..core.view.pools import NODEPOOL_API
from .feed import Feed, feeding
from .reflector import DRA_GROUP, OFF_RECHECK_SECONDS, Reflector

log = logging.getLogger("gpu_class.watch")

# A herald's watch is one small object: it retries a broken connection within a second, so that an API
# server back from a restart (an upgrade that brings an API) is heard at once, not after the other
# watches' backoff, which grows to BACKOFF_SECONDS[1] over a restart's failed attempts
HERALD_BACKOFF_SECONDS = 1.0


@dataclass(frozen=True)
class Herald:
    """An object, watched by name, whose condition says that an optional API is now served: when it does,
    the reflectors of that API that are off list at once rather than at their next minute."""

    resource: str  # the herald's plural, as the reflector (and the metrics) name it
    api: str  # its group/version
    name: str
    condition: str  # the status condition that is True once the API is served
    serves: str  # the group/version of the optional API it heralds


# Karpenter's CRD: NodePools are read the moment Karpenter is installed, not a minute later.
NODEPOOL_CRD = Herald("customresourcedefinitions", "apiextensions.k8s.io/v1", "nodepools.karpenter.sh",
                      "Established", NODEPOOL_API)
# DRA's APIService: kube-apiserver's aggregator registers one (no service, Available with reason Local) for each
# built-in group version it serves, within a second of serving it and before /readyz passes, and deletes it when
# it starts without that version (kube-aggregator's autoregister, "onstart"). So an API server upgraded or
# restarted with resource.k8s.io/v1 served is read at once, not a minute later.
DRA_API_SERVICE = Herald("apiservices", "apiregistration.k8s.io/v1", "v1.resource.k8s.io", "Available", DRA_GROUP)
HERALDS = (NODEPOOL_CRD, DRA_API_SERVICE)


def says_served(herald: Herald, obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is the herald and says its API is served (its condition True)."""
    if (obj.get("metadata") or {}).get("name") != herald.name:
        return False
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == herald.condition and c.get("status") == "True"
               for c in conditions if isinstance(c, dict))


class HeraldWatch:
    """The watch of `herald`: when it says its API is served, `heralded` are listed at once."""

    def __init__(self, feed: Feed, herald: Herald, list_call: Callable[..., Any], heralded: list[Reflector]) -> None:
        self.feed = feed
        self.herald = herald
        self.heralded = heralded
        self.reflector = feeding(feed, herald.resource, list_call, self.reduce, self.replace, self.apply,
                                 on_off=self.turned, group=herald.api, max_backoff_seconds=HERALD_BACKOFF_SECONDS)

    def reduce(self, obj: dict[str, Any]) -> bool | None:
        return True if says_served(self.herald, obj) else None

    def replace(self, served: list[bool]) -> None:
        self.feed.submit(lambda: self.feed.mark_synced(self.herald.resource), wait=True)
        if served:
            self.heard()

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED" and says_served(self.herald, obj):
            self.heard()

    def turned(self, name: str, reason: str | None) -> None:
        """Not allowed to watch the herald: its API is still asked for every OFF_RECHECK_SECONDS."""
        self.feed.submit(lambda: self.feed.mark_synced(name), wait=True)
        if self.feed.logs_changes and reason is not None:
            herald = self.herald
            log.info("%s %s is not watched (%s): %s, while off, is asked for again every %d s", herald.resource,
                     herald.name, reason, herald.serves, OFF_RECHECK_SECONDS)

    def heard(self) -> None:
        """The herald says its API is served: its resources that are off are listed now."""
        herald = self.herald
        off = [r.name for r in self.heralded if r.off is not None]
        if off and self.feed.logs_changes:
            log.info("%s %s is %s: %s is served, reading %s now", herald.resource, herald.name, herald.condition,
                     herald.serves, ", ".join(off))
        for r in self.heralded:
            # every one, not only those off: one whose list is under way, about to find the API not served,
            # lists again at once
            r.recheck.set()


def herald_watches(feed: Feed, api: kubernetes.client.CoreV1Api, *, pools: list[Reflector],
                   dra: list[Reflector]) -> list[HeraldWatch]:
    """The heralds, by name: Karpenter installed, or DRA served, after gpu-class started is read at once."""
    by_name = {herald: f"metadata.name={herald.name}" for herald in HERALDS}
    return [
        HeraldWatch(feed, NODEPOOL_CRD, functools.partial(
            kubernetes.client.ApiextensionsV1Api(api.api_client).list_custom_resource_definition,
            field_selector=by_name[NODEPOOL_CRD]), pools),
        HeraldWatch(feed, DRA_API_SERVICE, functools.partial(
            kubernetes.client.ApiregistrationV1Api(api.api_client).list_api_service,
            field_selector=by_name[DRA_API_SERVICE]), dra),
    ]
