"""Order, the sixth step of an admission: the fit's ranked types written as the preferences kube-scheduler
weighs, and what the Pod is told of its rank. Pure.

Every valid type is required (the fit's `required`); each is preferred with a weight by its rank, the
weights far enough apart that kube-scheduler's NodeAffinity score keeps the ranks apart (weights_for).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

from ..catalog.model import Catalog, GpuClass
from ..view.snapshot import Snapshot
from .decision import Preference, TypeVerdict
from .fit import ClassFit, Fitted
from .groups import GroupScope
from .words import short

MAX_PREFERENCE_WEIGHT = 100  # the API's range for a preferred term's weight is 1..100


class Ordered(NamedTuple):
    """The fit's order, as the patch writes it, and the warnings of the fit."""

    preferences: tuple[Preference, ...]
    warnings: tuple[str, ...]  # the Pod cannot have its class's best type; a type placed by its labels; its group's


def order(fitted: Fitted, excluded: frozenset[str], gpu_class: GpuClass, snapshot: Snapshot,
          catalog: Catalog) -> Ordered:
    """The fit's order. Memoised per snapshot by the fit it orders: class_fit works each fit out once per
    snapshot and question, and the order is the fit's alone (`excluded` and the scope are part of the question)."""
    key = ("order", id(fitted.fit))
    found = snapshot.memo.get(key)
    if found is None or found[0] is not fitted.fit:  # the entry holds its fit, so no other fit can have its id
        found = snapshot.memo[key] = (fitted.fit, _order(fitted.fit, excluded, fitted.scope, gpu_class, snapshot,
                                                         catalog))
    ordered: Ordered = found[1]
    return ordered if not fitted.warnings else Ordered(ordered.preferences, ordered.warnings + fitted.warnings)


def _order(fit: ClassFit, excluded: frozenset[str], scope: GroupScope | None, gpu_class: GpuClass,
           snapshot: Snapshot, catalog: Catalog) -> Ordered:
    if not fit.types:
        return Ordered((), ())
    weights = dict(zip(fit.types, weights_for(len(fit.types))))
    preferences = tuple(Preference(weights[t], t, key, products) for t, key, products in fit.placed_on)
    # a type the Pod's need rules out is its own choice, as an excluded one is: no warning
    ruled_out = excluded | {t for t, _ in fit.unmet}
    warnings = _worse_than_best(gpu_class, fit.verdicts, fit.types[0], snapshot, catalog, ruled_out, scope)
    return Ordered(preferences, warnings + _placed_by_labels(fit.types, catalog))


def rank_gap(higher: int, lower: int) -> int:
    """Points between two ranks once kube-scheduler's NodeAffinity has scaled the best feasible
    node's weight to 100 (DefaultNormalizeScore: integer division)."""
    return MAX_PREFERENCE_WEIGHT - MAX_PREFERENCE_WEIGHT * lower // higher


@functools.cache
def weights_for(n: int) -> tuple[int, ...]:
    """Preference weights for n ranks, best first: the smallest normalised gap between neighbours as
    large as 1..100 allows.

    kube-scheduler's NodeAffinity sums the weights of the preferred terms a node matches and scales
    them so the best feasible node gets 100: when the best types are full, the best type left leads
    the next by rank_gap of their weights, whichever ranks they are. That smallest gap, times the
    plugin's weight, is what the other score plugins must not outweigh (docs/operators/strict-scheduler.md,
    works it out for the shipped profiles; the default profile weighs NodeAffinity 2). Ranks are
    distinct up to 100 types; beyond that the tail shares weight 1.
    """
    for gap in range(MAX_PREFERENCE_WEIGHT - 1, 0, -1):
        weights = _weights_with_gap(gap, n)
        if weights is not None:
            return weights
    return tuple(max(1, MAX_PREFERENCE_WEIGHT - i) for i in range(n))


def _weights_with_gap(gap: int, n: int) -> tuple[int, ...] | None:
    """Each weight the largest whose gap to the one before is at least `gap`; None when 1 is passed."""
    weights = [MAX_PREFERENCE_WEIGHT][:n]
    while len(weights) < n:
        previous = weights[-1]
        # the largest w < previous with 100 * w // previous <= 100 - gap
        weight = min(previous - 1, ((MAX_PREFERENCE_WEIGHT + 1 - gap) * previous - 1) // MAX_PREFERENCE_WEIGHT)
        if weight < 1:
            return None
        weights.append(weight)
    return tuple(weights)


def _placed_by_labels(ordered: Sequence[str], catalog: Catalog) -> tuple[str, ...]:
    """A type made from a node's labels is a guess at its rank: the Pod hears of it, the administrator
    is asked to write it in the catalog (`gpuclass inventory` says the same)."""
    guessed = [t for t in ordered if (facts := catalog.types[t].facts) is not None and facts.from_labels]
    if not guessed:
        return ()
    return (short(f"gpu-class: {', '.join(guessed)} placed by its labels, not the catalog: ask an administrator "
                  "to add it"),)


def _worse_than_best(gpu_class: GpuClass, verdicts: Sequence[TypeVerdict], best_valid: str, snapshot: Snapshot,
                     catalog: Catalog, excluded: frozenset[str], scope: GroupScope | None) -> tuple[str, ...]:
    """A warning when the Pod cannot have the best type of its class that the cluster has.

    performance and cost only: their promise is a type order (balanced and binpack promise a share of
    GPUs, whatever the type). A type the cluster does not have is no news to the user, one the Pod
    excluded is its own choice, and one its group does not run on is the group's: none is warned of.
    """
    if gpu_class.strategy not in ("performance", "cost"):
        return ()
    present = [v for v in verdicts if snapshot.groups(v.type_name) and v.resource == catalog.types[best_valid].resource]
    rank = {name: i for i, name in enumerate(gpu_class.types)}
    present.sort(key=lambda v: rank[v.type_name], reverse=gpu_class.strategy == "cost")
    best = present[0] if present else None
    if best is None or best.valid or best.type_name in excluded:
        return ()
    if scope is not None and best.type_name in dict(scope.left_out):
        return ()
    return (short(f"gpu-class: class {gpu_class.name}: not on {best.type_name} ({best.reason}); "
                  f"best allowed: {best_valid}"),)
