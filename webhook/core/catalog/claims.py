"""Refused at loading: types that one node or one DRA device could be at once. Its devices would be
counted twice, and the affinities of the two types could not tell their nodes apart. Pure.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Mapping, Sequence

from .fields import FieldPath, Located
from .matching import is_glob, short_attribute
from .model import GpuType


@dataclass(frozen=True)
class _Claim:
    """One label value a type names its nodes by, and where the catalog says so."""

    key: str
    value: str
    resource: str
    type_name: str
    path: FieldPath


def _claims(types: Mapping[str, GpuType], product_labels: Sequence[str]) -> list[_Claim]:
    claims = []
    for t_index, t in enumerate(types.values()):
        if t.products:
            for p_index, product in enumerate(t.products):
                for key in product_labels:
                    claims.append(_Claim(key, product, t.resource, t.name, ("types", t_index, "products", p_index)))
        for key, values in t.match:
            for v_index, value in enumerate(values):
                claims.append(_Claim(key, value, t.resource, t.name, ("types", t_index, "match", key, v_index)))
    return claims


def check_label_claims(types: Mapping[str, GpuType], product_labels: Sequence[str], loc: Located) -> None:
    """Types requested as one resource must be told apart by their labels: a node that two of them
    named would count its devices twice, and their affinities could not separate their nodes.
    Types of different resources may share labels: a mixed-MIG node offers one type per profile."""
    exact: dict[tuple[str, str, str], _Claim] = {}
    globs: dict[tuple[str, str, str], _Claim] = {}
    for c in _claims(types, product_labels):
        owners = globs if is_glob(c.value) else exact
        other = owners.get((c.key, c.value, c.resource))
        if other is not None and other.type_name != c.type_name:
            what = "glob" if is_glob(c.value) else "product" if c.path[2] == "products" else f"label {c.key}="
            shown = f"{what} {c.value!r}" if what != f"label {c.key}=" else f"{what}{c.value}"
            raise loc.error(c.path, f"{shown} is claimed by types {other.type_name} and {c.type_name} "
                                    f"(both requested as {c.resource})")
        owners.setdefault((c.key, c.value, c.resource), c)
    for (key, pattern, resource), g in globs.items():
        for (e_key, value, e_resource), e in exact.items():
            if (e_key, e_resource) == (key, resource) and e.type_name != g.type_name and fnmatch.fnmatchcase(value, pattern):
                raise loc.error(g.path, f"glob {pattern!r} of type {g.type_name} also matches {value!r} of type "
                                        f"{e.type_name} (both requested as {resource})")


def _may_both_match(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether one attribute value could match both lists: a shared exact value, or a glob of one
    matching an exact value of the other (two globs are taken to be written apart on purpose)."""
    exact_a, exact_b = {v for v in a if not is_glob(v)}, {v for v in b if not is_glob(v)}
    return bool(exact_a & exact_b) or any(fnmatch.fnmatchcase(v, g) for g in a if is_glob(g) for v in exact_b) or any(
        fnmatch.fnmatchcase(v, g) for g in b if is_glob(g) for v in exact_a)


def check_device_claims(types: Mapping[str, GpuType], loc: Located) -> None:
    """One DRA device must be one type: a device two types matched would be counted twice (and of two
    resources, it is still one device). Types of one driver must differ in a shared attribute."""
    seen: list[tuple[int, str, str, Mapping[str, tuple[str, ...]]]] = []
    for t_index, t in enumerate(types.values()):
        for driver, attributes in t.devices:
            mine = dict(attributes)
            for _, other_name, other_driver, theirs in seen:
                if other_driver != driver or other_name == t.name:
                    continue
                shared = [n for n in mine if n in theirs]
                if all(_may_both_match(mine[n], theirs[n]) for n in shared):
                    told = ", ".join(short_attribute(driver, n) for n in shared) or "no attribute"
                    raise loc.error(("types", t_index, "match", driver),
                                    f"types {other_name} and {t.name} can both match one device of {driver} "
                                    f"(they share values of {told}); give each attributes the other does not match")
            seen.append((t_index, t.name, driver, mine))
