"""Where a Pod's own node constraints let it go: its nodeSelector, the required node affinity it brought, its
tolerations; read from its wire JSON and judged against a node as the view holds it. Pure.

Placement fidelity (reports/fidelity.py) asks whether a better type had room on a node this Pod could have
used. Only what the scheduler enforces can say "could not": the nodeSelector, the required node affinity and the
tolerations against NoSchedule/NoExecute taints, never a label or annotation that says so. Of the required
affinity, the expression gpu-class appends to every term (patch.merged_node_affinity: an `In` over the class's
types, always the term's last expression) is set aside: it is how the promise is carried, so it must not excuse
the promise (an H200 node whose product value it did not list would otherwise count as "not for this Pod").

Everything here errs towards admitting: an expression that is not read (an operator the API does not have, a
matchFields key other than metadata.name, a label the view does not keep) is taken to hold, and a term left empty
admits every node. Each error can then only count more room, more broken promises, never fewer: a tenant cannot
hide a broken promise by writing something the scheduler does not enforce, or something gpu-class writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .nodes import UNKEPT_LABEL_PREFIXES, NodeInfo, Taint, tolerates_all

NAME_FIELD = "metadata.name"  # the one node field matchFields may name


@dataclass(frozen=True)
class Requirement:
    """One expression of a node selector term: a label's (or, `field`, the node name's) requirement."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()
    field: bool = False


OwnTerm = tuple[Requirement, ...]  # ANDed
Toleration = tuple[tuple[str, str], ...]  # a toleration's string fields, sorted: hashable, as dict() reads it


@dataclass(frozen=True)
class OwnConstraints:
    """A Pod's own node constraints. `terms` are ORed; () is no required affinity of its own."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[OwnTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @property
    def selects(self) -> bool:
        """Whether it names nodes by label or name (beyond tolerations): only then are nodes judged one by one."""
        return bool(self.selector or self.terms)

    def tolerates(self, taints: Iterable[Taint]) -> bool:
        """Whether it tolerates every one of these taints (a node's reserving ones: NoSchedule, NoExecute)."""
        taints = tuple(taints)
        return not taints or tolerates_all((dict(t) for t in self.tolerations), taints)

    def admits(self, node: NodeInfo) -> bool:
        """Whether its nodeSelector and own required affinity hold on the node (taints are `tolerates`)."""
        if not all(_holds(Requirement(k, "In", (v,)), node) for k, v in self.selector):
            return False
        return not self.terms or any(all(_holds(r, node) for r in term) for term in self.terms)


NO_CONSTRAINTS = OwnConstraints()


def own_constraints(pod: Any) -> OwnConstraints:
    """The Pod's own node constraints from its wire JSON; what is not in the API's shape is left out (admits)."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return NO_CONSTRAINTS
    selector = spec.get("nodeSelector")
    tolerations = spec.get("tolerations")
    return OwnConstraints(
        selector=tuple(sorted((k, v) for k, v in selector.items() if isinstance(k, str) and isinstance(v, str)))
        if isinstance(selector, dict) else (),
        terms=_own_terms(spec.get("affinity")),
        tolerations=tuple(tuple(sorted((k, v) for k, v in t.items() if isinstance(v, str)))
                          for t in tolerations if isinstance(t, dict)) if isinstance(tolerations, list) else ())


def _own_terms(affinity: Any) -> tuple[OwnTerm, ...]:
    """The required terms without gpu-class's restriction (each term's last expression, when an `In`)."""
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(node_affinity, dict) else None)
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list):
        return ()
    own: list[OwnTerm] = []
    for term in terms:
        if not isinstance(term, dict):
            return ()
        expressions = [e for e in term.get("matchExpressions") or [] if isinstance(e, dict)]
        if expressions and expressions[-1].get("operator") == "In":
            expressions = expressions[:-1]
        fields = [e for e in term.get("matchFields") or [] if isinstance(e, dict) and e.get("key") == NAME_FIELD]
        read = tuple(r for r in (*(_requirement(e, False) for e in expressions),
                                 *(_requirement(e, True) for e in fields)) if r is not None)
        if not read:
            return ()  # a term that admits every node: the whole affinity does
        own.append(read)
    return tuple(dict.fromkeys(own))  # gpu-class repeats a term once per label key it restricts


def _requirement(expression: Mapping[str, Any], field: bool) -> Requirement | None:
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    if not isinstance(key, str) or operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt") or (
            not isinstance(values, list)):
        return None
    return Requirement(key, operator, tuple(v for v in values if isinstance(v, str)), field)


def _holds(requirement: Requirement, node: NodeInfo) -> bool:
    """Kubernetes' rule for one requirement; one the view cannot judge (a label it does not keep) holds."""
    if requirement.field:
        value: str | None = node.name
    else:
        # a node keeps tens of labels at most: a look along them costs less than a dict built for each node
        value = next((v for k, v in node.labels if k == requirement.key), None)
        if value is None and requirement.key.startswith(UNKEPT_LABEL_PREFIXES):
            return True
    operator, values = requirement.operator, requirement.values
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    return _compares(value, values, greater=operator == "Gt")


def _compares(value: str | None, values: tuple[str, ...], *, greater: bool) -> bool:
    try:
        have, bound = int(value or ""), int(values[0])
    except (ValueError, IndexError):
        return False
    return have > bound if greater else have < bound
