"""Namespaces as the decision sees them: whether gpu-class places their Pods, their default class and the
classes they allow, from the labels and annotation an administrator writes on the Namespace. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

INJECT_LABEL = "gpu-class.io/inject"
DEFAULT_CLASS_LABEL = "gpu-class.io/default-class"
ALLOWED_CLASSES_ANNOTATION = "gpu-class.io/allowed-classes"


@dataclass(frozen=True)
class NamespaceInfo:
    name: str
    inject: bool
    default_class: str | None
    allowed_classes: tuple[str, ...] | None  # None: every class is allowed


def namespace_info_from_object(obj: Mapping[str, Any]) -> NamespaceInfo | None:
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str):
        return None
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    allowed = annotations.get(ALLOWED_CLASSES_ANNOTATION)
    return NamespaceInfo(
        name=name,
        inject=labels.get(INJECT_LABEL) == "enabled",
        default_class=labels.get(DEFAULT_CLASS_LABEL) or None,
        allowed_classes=None if allowed is None else tuple(c.strip() for c in str(allowed).split(",") if c.strip()),
    )
