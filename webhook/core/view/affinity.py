"""What a Pod's own node constraints keep it to, in the catalog's GPU types. Pure.

The scheduler places, and the kubelet admits, a Pod only where its nodeSelector and required node
affinity hold: of everything a Pod's author writes, they are what the cluster enforces. So each
question "which GPU types can this Pod get" is answered from them, never from a label or annotation
that says so:

- provenance.py: may a Pod Kueue started be left as it came? Only when its required affinity keeps it
  to its class.
- unplaced.py, under `onUnsatisfiable: admit`: may a Pod no type can take go unplaced? Not when its own
  constraints name a GPU type outside its class.
- pods.py (enforced_types) and upgrade.py: did gpu-class place this Pod? Only as far as its required affinity
  enforces the `gpu-class.io/types` it lists.

A label value alone does not say what a Pod gets there: under NVIDIA's mixed MIG strategy a whole GPU's
product value is also the product of its slices' types, which only the resource tells apart. So every
question is asked of (label key, value, resource): the types a node labelled so gives that resource as.
The catalog answers for product labels and `match` keys (Catalog.types_of_label); the live view answers
for `kubernetes.io/hostname`, which gpu-class writes for DRA nodes no product label names (`Hosts`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from ..catalog.model import Catalog
from .dra import HOSTNAME_LABEL

# A required node affinity term as far as it names label values: its (key, values) `In` expressions, ANDed
NodeTerm = tuple[tuple[str, tuple[str, ...]], ...]
# The types the node of a kubernetes.io/hostname offers, as the live view holds it; none for a node it does not know
Hosts = Callable[[str], frozenset[str]]
# Ways a Pod's GPUs may be asked for: each a set of resources that must all be judged within (see resource_sets)
ResourceSets = tuple[tuple[str, ...], ...]


def no_hosts(hostname: str) -> frozenset[str]:
    """Without a live view, a hostname names no type."""
    return frozenset()


def resource_sets(asked: Sequence[str], class_resources: Sequence[str]) -> ResourceSets:
    """What a constraint is judged for: every resource the Pod asks for at once; a Pod that asks for
    none gets one resource of its class from gpu-class, so any one of those will do."""
    return (tuple(asked),) if asked else tuple((r,) for r in class_resources)


def node_term(expressions: Sequence[Any]) -> NodeTerm:
    """A required term's `In` expressions: the only ones that keep a Pod to named label values. An
    expression of another shape or operator is left out, which can only make the term admit more."""
    return tuple(
        (e["key"], tuple(v for v in e["values"] if isinstance(v, str)))
        for e in expressions
        if isinstance(e, dict) and e.get("operator") == "In" and isinstance(e.get("key"), str)
        and isinstance(e.get("values"), list) and e["values"])


def required_terms(pod: Any) -> tuple[NodeTerm, ...]:
    """The required node affinity terms of a Pod's wire JSON, read leniently: a part without its API shape
    gives no term, which keeps the Pod to nothing (whoever asks what it is kept to hears "nothing")."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    affinity = spec.get("affinity") if isinstance(spec, dict) else None
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(node_affinity, dict) else None)
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list) or not all(isinstance(t, dict) for t in terms):
        return ()
    read = []
    for term in terms:
        expressions = term.get("matchExpressions")
        read.append(node_term(expressions) if isinstance(expressions, list) else ())
    return tuple(read)


def named(key: str, value: str, resource: str, catalog: Catalog, hosts: Hosts = no_hosts) -> frozenset[str]:
    """The types a node labelled `key: value` gives `resource` as."""
    found = hosts(value) if key == HOSTNAME_LABEL else catalog.types_of_label(key, value)
    return frozenset(t for t in found
                     if (gpu_type := catalog.types.get(t)) is not None and gpu_type.resource == resource)


def value_within(key: str, value: str, resources: ResourceSets, types: frozenset[str], catalog: Catalog,
                 hosts: Hosts = no_hosts) -> bool:
    """Whether a node labelled `key: value` gives the Pod its GPUs as types of `types` only: for one of
    `resources`, each resource it holds is given there as some type, and only as types of `types`."""
    return any(rs and all((found := named(key, value, r, catalog, hosts)) and found <= types for r in rs)
               for rs in resources)


def keeps_within(terms: Sequence[NodeTerm], types: frozenset[str], resources: ResourceSets, catalog: Catalog,
                 hosts: Hosts = no_hosts) -> bool:
    """Whether required node affinity terms admit only nodes where the Pod's GPUs are types of `types`.
    The terms are ORed, so each must hold an `In` expression all of whose values are within."""
    return bool(terms) and all(
        any(values and all(value_within(key, v, resources, types, catalog, hosts) for v in values)
            for key, values in term)
        for term in terms)


def type_label_keys(catalog: Catalog) -> frozenset[str]:
    """The node label keys that name GPU types: the product labels and the keys of the types' `match`."""
    return frozenset(catalog.product_labels) | {key for t in catalog.types.values() for key, _ in t.match}


# (where the Pod wrote it, label key, value): "nodeSelector", "required node affinity", ...
Constraint = tuple[str, str, str]


def first_outside(constraints: Iterable[Constraint], types: frozenset[str], resources: ResourceSets,
                  catalog: Catalog, hosts: Hosts = no_hosts) -> Constraint | None:
    """The first constraint that names a GPU node whose type, for the Pod's resources, is not of `types`.

    Judged: keys that name GPU types (a product label value no type claims is outside: it is no type of
    the class) and `kubernetes.io/hostname` of a node the live view has GPU types of. Other keys (a zone,
    a pool label of the administrator's) say nothing gpu-class can read about the type."""
    keys = type_label_keys(catalog)
    for where, key, value in constraints:
        judged = key in keys if key != HOSTNAME_LABEL else bool(hosts(value))
        if judged and not value_within(key, value, resources, types, catalog, hosts):
            return where, key, value
    return None
