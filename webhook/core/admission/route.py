"""Route, the fourth step of an admission: the scheduler a Pod goes to, and whether it keeps the Pod's wait. Pure.

It comes before the fit because a group that waits for its best type is fitted as one that can wait
(groups.py); the strict scheduler's profile, which depends on the resource the fit chooses, is named with
the placement (place.py).
"""

from __future__ import annotations

from typing import NamedTuple

from ..catalog.model import Catalog, GpuClass
from ..catalog.profiles import Strategy, profile_suffix
from ..view.pods import MAX_WAIT_ANNOTATION
from .ask import PodAsk


class Route(NamedTuple):
    """Where a Pod is sent, and what its scheduler keeps for it."""

    target: str | None  # its own scheduler, else the catalog's; None: it keeps the one it has
    strict: str | None  # the strict scheduler `target` is a profile of, whose profile the placement names
    wait: str | None  # gpu-class.io/max-wait as its scheduler keeps it; None: the Pod does not wait
    not_kept: str | None  # the warning when the Pod asked for a wait nothing will keep


def route(ask: PodAsk, gpu_class: GpuClass, resource: str, catalog: Catalog) -> Route:
    """The Pod's route, for its GPUs of `resource`."""
    target = _target(ask.scheduler_name, catalog)
    strict = None if target is None else catalog.strict_scheduler_of(target)
    scheduler = target if strict is None else strict + profile_suffix(gpu_class.strategy, resource)
    # whether a scheduler keeps the wait depends on which scheduler, not on which of the class's resources
    wait, not_kept = kept_wait(ask, gpu_class, scheduler or ask.scheduler_name, catalog)
    return Route(target, strict, wait, not_kept)


def route_scheduler(pod_scheduler: str | None, catalog: Catalog, strategy: Strategy, resource: str) -> str | None:
    """The schedulerName a placed Pod gets; None leaves the Pod's as it is.

    A Pod that names no scheduler of its own (the API server has written `default-scheduler` before
    admission) gets the catalog's schedulerName. A Pod headed for a strict scheduler, by its own
    choice or the catalog's, goes to the profile that scores as its class's strategy, on the kind of
    resource it requests: the user writes `gpu-class-scheduler` whatever the class.
    """
    target = _target(pod_scheduler, catalog)
    if target is None:
        return None
    strict = catalog.strict_scheduler_of(target)
    return target if strict is None else strict + profile_suffix(strategy, resource)


def _target(pod_scheduler: str | None, catalog: Catalog) -> str | None:
    own = pod_scheduler if pod_scheduler not in (None, "", "default-scheduler") else None
    return own or catalog.scheduler_name


def kept_wait(ask: PodAsk, gpu_class: GpuClass, scheduler_name: str | None,
              catalog: Catalog) -> tuple[str | None, str | None]:
    """The wait for its best type that gpu-class-scheduler keeps for the Pod (its own gpu-class.io/max-wait, else
    its class's maxWait), and the warning when the Pod asked for one that nothing will keep.

    Only gpu-class-scheduler's profiles that rank types (performance, cost) keep a type out for a while; the
    extender and the default scheduler cannot. Kueue chose a queued Pod's type (its flavor) before the Pod
    existed. A group waits as one: its first Pod only where the whole group fits (groups.py, and the scheduler)."""
    asked = ask.max_wait if isinstance(ask.max_wait, str) else None
    wait = asked or gpu_class.max_wait
    if wait is None:
        return None, None
    strict = None if scheduler_name is None else catalog.strict_scheduler_of(scheduler_name)
    why_not = (
        "Kueue chose its type (its flavor) before the Pod existed" if ask.kueue_started else
        f"class {gpu_class.name} ranks nodes ({gpu_class.strategy}), not types" if gpu_class.strategy not in
        ("performance", "cost") else
        "only gpu-class-scheduler keeps it: set schedulerName: gpu-class-scheduler" if strict is None else
        f"{strict} runs the stock kube-scheduler here, which cannot keep it" if strict in catalog.stock_schedulers
        else None)
    if why_not is None:
        return wait, None
    return None, (f"gpu-class: {MAX_WAIT_ANNOTATION} dropped: {why_not}" if asked else None)
