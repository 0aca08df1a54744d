"""Decide what to do with a Pod: out of scope, refused, or placed on which GPU types. Pure.

plan() reads what the Pod asks once, whole (ask.read_pod), and decides it; decide() runs the admission's
steps in their order, each in a module of its own, each ending the decision or handing its record to the
next. Nothing here performs I/O; patch.py turns a Placement into a JSON Patch.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..catalog.model import Catalog
from ..view.snapshot import Snapshot, placing_catalog
from .ask import PodAsk, read_pod
from .decision import MALFORMED
from .decision import Decision as Decision  # the entry's answer: callers import it from here
from .fit import fit_pod
from .kueue import check_flavor
from .need import check_need
from .order import order
from .place import place
from .policy import NamespacePolicy as NamespacePolicy  # the entry's `policy`: callers import both from here
from .policy import UnreadNamespace as UnreadNamespace
from .policy import choose_class
from .provenance import kept_as_decided
from .route import route
from .shape import MalformedPod
from .unplaced import unplaced


def plan(
    pod: Mapping[str, Any],
    snapshot: Snapshot,
    catalog: Catalog,
    *,
    namespace: str = "",
    policy: NamespacePolicy = None,
    queued: bool = False,
) -> Decision:
    """The whole admission decision for a Pod being created in `namespace`: its ask, read once, decided.
    `queued`: the pod template of a workload Kueue queues (workload.py), decided for as long as it waits."""
    catalog = placing_catalog(catalog, snapshot)
    try:
        ask = read_pod(pod, catalog)
    except MalformedPod as exc:
        return Decision("refused", MALFORMED + str(exc))
    if ask is None:
        return Decision("out-of-scope", "mirror Pod")
    return decide(ask, snapshot, catalog, namespace=namespace, policy=policy, queued=queued)


def decide(ask: PodAsk, snapshot: Snapshot, catalog: Catalog, *, namespace: str = "",
           policy: NamespacePolicy = None, queued: bool = False) -> Decision:
    """The decision for what a Pod asks, in `namespace` (whose policy the caller may have read from
    the API: `policy`): the steps below, in this order. Each may end it; the refusals come in a fixed
    order, the first thing wrong being the one the user hears of.

    `queued`: a pod template Kueue counts now and starts later, once its quota allows: it gets every
    type of the class whose nodes could take it, those cordoned or not ready now included (they may be
    back by then; Kueue's flavors choose among them all), and it is never admitted unplaced: Kueue would
    count no GPUs for it and start it without them."""
    gpu_class = choose_class(ask, snapshot, catalog, namespace, policy)
    if isinstance(gpu_class, Decision):
        return gpu_class
    kept = kept_as_decided(ask, gpu_class, snapshot, catalog, queued=queued)
    if kept is not None:
        return kept
    asked = check_need(ask, gpu_class, snapshot, catalog, namespace)
    if isinstance(asked, Decision):
        return asked
    routed = route(ask, gpu_class, asked.resource, catalog)
    fitted = fit_pod(ask, gpu_class, asked, routed, snapshot, catalog, namespace=namespace, queued=queued)
    ordered = order(fitted, asked.excluded, gpu_class, snapshot, catalog)
    if not fitted.placeable:
        return unplaced(ask, gpu_class, asked, fitted, ordered, snapshot, catalog, queued=queued)
    refused = check_flavor(ask, gpu_class, fitted, ordered)
    if refused is not None:
        return refused
    return place(ask, gpu_class, asked, routed, fitted, ordered)
