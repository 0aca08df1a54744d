"""Scope and policy, the first step of an admission: is the Pod gpu-class's to place, and by which class. Pure.

A Pod is in scope in a namespace opted in when it names a class or asks for a GPU; its class is the one it
names, else its namespace's default, else the catalog's, and its namespace's allowed classes bound both. The
namespace's policy is a tenant boundary: a Pod whose namespace the webhook cannot read is never decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog.model import Catalog, GpuClass
from ..view.namespaces import ALLOWED_CLASSES_ANNOTATION, NamespaceInfo
from ..view.pods import CLASS_ANNOTATION
from ..view.snapshot import Snapshot
from .ask import PodAsk
from .decision import MALFORMED, Decision
from .shape import Malformed
from .words import quoted


@dataclass(frozen=True)
class UnreadNamespace:
    """A namespace the webhook's view does not hold yet and the API did not answer for: its policy is unknown."""

    name: str
    error: str


# How the caller knows the namespace: None leaves it to the snapshot (namespaces watched, or not at all)
NamespacePolicy = NamespaceInfo | UnreadNamespace | None


def choose_class(ask: PodAsk, snapshot: Snapshot, catalog: Catalog, namespace: str,
                 policy: NamespacePolicy) -> GpuClass | Decision:
    """The Pod's class, or the decision that it has none to be placed by: out of scope (its namespace not
    opted in, no class and no GPU asked for, no default) or refused (its namespace unread, its class unknown
    or not allowed there). A Pod that names no class is given its namespace's or the catalog's default."""
    ns_info = snapshot.namespace(namespace) if policy is None else policy
    if isinstance(ns_info, NamespaceInfo) and not ns_info.inject:
        return Decision("out-of-scope", f"namespace {namespace} is not opted in")
    if ask.class_name is None:
        if isinstance(ask.requested, Malformed):
            return Decision("refused", MALFORMED + ask.requested.message)
        if not ask.requested:
            return Decision("out-of-scope", "no class annotation and no GPU request")
    if isinstance(ns_info, UnreadNamespace):
        # its default class and allowed classes are a tenant boundary: never decided without them
        return Decision(
            "refused",
            f"gpu-class: cannot read the policy of namespace {namespace} (its default and allowed classes): "
            f"{ns_info.error}; retry in a few seconds",
            class_name=ask.class_name,
        )
    return _class_of(ask, ns_info, catalog, namespace)


def _class_of(ask: PodAsk, ns_info: NamespaceInfo | None, catalog: Catalog, namespace: str) -> GpuClass | Decision:
    """The Pod's class, from its annotation or, for a GPU Pod that names none, its namespace's default; or the
    decision when there is none to place it by (out of scope, or refused)."""
    class_name = ask.class_name
    if class_name is None:
        class_name, source = _default_class(ns_info, catalog)
        if class_name is None and ns_info is not None and ns_info.allowed_classes is not None:
            return Decision("refused", _name_a_class(ns_info, catalog))
        if class_name is None:
            return Decision("out-of-scope", "no class annotation and no default class")
        if class_name not in catalog.classes:
            return Decision(
                "refused",
                f"gpu-class: the {source} names class {quoted(class_name)}, which does not exist; "
                f"an administrator must set it to one of: {', '.join(catalog.classes)}",
            )
    gpu_class = catalog.classes.get(class_name)
    if gpu_class is None:
        return Decision(
            "refused",
            f"gpu-class: unknown class {quoted(class_name)} in {CLASS_ANNOTATION}; "
            f"write one of: {', '.join(_allowed(catalog, ns_info))}",
            class_name=class_name,
        )
    if ns_info is not None and ns_info.allowed_classes is not None and class_name not in ns_info.allowed_classes:
        return Decision(
            "refused",
            f"gpu-class: class {quoted(class_name)} is not allowed in namespace {namespace}; "
            f"allowed classes: {', '.join(ns_info.allowed_classes) or '(none)'}",
            class_name=class_name,
        )
    return gpu_class


def _default_class(ns_info: NamespaceInfo | None, catalog: Catalog) -> tuple[str | None, str]:
    """The class of a GPU Pod that names none, and who set it: the namespace's default-class label; in a
    namespace allowed one class only, that one; else the catalog's defaultClass where the namespace allows
    it. None where there is none: in a namespace with allowed-classes every GPU Pod is the namespace's to
    bound, so none is left out of scope there (the caller refuses it, saying which classes to write)."""
    if ns_info is not None and ns_info.default_class:
        return ns_info.default_class, f"default-class label of namespace {ns_info.name}"
    allowed = None if ns_info is None else ns_info.allowed_classes
    if ns_info is not None and allowed is not None and len(allowed) == 1:
        return allowed[0], f"{ALLOWED_CLASSES_ANNOTATION} annotation of namespace {ns_info.name}"
    if allowed is None or catalog.default_class in allowed:
        return catalog.default_class, "catalog's defaultClass"
    return None, ""


def _name_a_class(ns_info: NamespaceInfo, catalog: Catalog) -> str:
    """The refusal of a GPU Pod with no class where the namespace allows several and sets no default."""
    allowed = _allowed(catalog, ns_info)
    if not allowed:
        return (f"gpu-class: namespace {ns_info.name} allows no class of the catalog ({ALLOWED_CLASSES_ANNOTATION}: "
                f"{quoted(', '.join(ns_info.allowed_classes or ()))}), so its GPU Pods cannot be placed; ask an "
                "administrator to allow one")
    return (f"gpu-class: namespace {ns_info.name} allows only some classes and sets no default class: write "
            f"{CLASS_ANNOTATION}: <one of {', '.join(allowed)}> on the Pod (or its pod template)")


def _allowed(catalog: Catalog, ns_info: NamespaceInfo | None) -> list[str]:
    names = list(catalog.classes)
    if ns_info is not None and ns_info.allowed_classes is not None:
        names = [n for n in names if n in ns_info.allowed_classes]
    return names
