"""Node labels from a node's GPUs (pure): what ``gpuclass label-node`` writes, and the patch to get there.

GPUs from ``webhook.core.labeller.nvidia_smi`` -> ``summarise_gpus`` -> ``build_desired_labels`` -> ``build_label_patch``
(a JSON merge patch holding only the labeller's keys, or None when the node already carries the right values).
Running nvidia-smi and patching the Node is ``webhook.cluster.labeller``'s.

Labels written (and only these; every other label is left alone):

``gpu-type``                       GFD-style model of the node's whole GPUs, e.g. ``NVIDIA-A100-SXM4-80GB``.
                                   Absent when the whole GPUs are of several models, or there are none.
``gpu-class.io/gpu-count``         number of whole (non-MIG) GPUs.
``gpu-class.io/gpu-memory-mib``    the smallest memory.total among the whole GPUs (MiB).
``gpu-class.io/gpu-models-mixed``  ``"true"`` when the whole GPUs are of more than one model.
``gpu-class.io/gpu-mig-enabled``   ``"true"`` when at least one GPU has MIG mode enabled.

Decisions (see ``summarise_gpus``):

* Mixed models: no ``gpu-type``. The webhook places a Pod by ``gpu-type``, and the device plugin hands out
  any free GPU of the node, so naming the majority model would let a Pod that asked for that model land on
  the other one. A node left out of class placement is visible and safe; a wrong placement is silent.
* MIG: a GPU with MIG enabled is offered as slices, not as a whole GPU, so it does not count towards
  ``gpu-type``/``gpu-count``/``gpu-memory-mib``. A node whose GPUs are all MIG-partitioned gets no
  ``gpu-type``: it does not offer the whole GPU a class promises.

Standard library only, like the rest of the labeller, so ``python -S -m webhook.cli label-node`` runs on a
node with just Python.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypedDict

from .nvidia_smi import Gpu

__all__ = [
    "GPU_COUNT_LABEL",
    "GPU_MEMORY_LABEL",
    "GPU_MIG_ENABLED_LABEL",
    "GPU_MODELS_MIXED_LABEL",
    "GPU_TYPE_LABEL",
    "OWNED_LABELS",
    "NodeGpuSummary",
    "NodeLabelPatch",
    "build_desired_labels",
    "build_full_label_patch",
    "build_label_patch",
    "gpu_model_label_value",
    "is_valid_label_value",
    "sanitise_label_value",
    "summarise_gpus",
]

GPU_TYPE_LABEL: Final = "gpu-type"
GPU_COUNT_LABEL: Final = "gpu-class.io/gpu-count"
GPU_MEMORY_LABEL: Final = "gpu-class.io/gpu-memory-mib"
GPU_MODELS_MIXED_LABEL: Final = "gpu-class.io/gpu-models-mixed"
GPU_MIG_ENABLED_LABEL: Final = "gpu-class.io/gpu-mig-enabled"
#: The keys this labeller sets and removes. Running it on a node hands ``gpu-type`` over to it.
OWNED_LABELS: Final[tuple[str, ...]] = (
    GPU_TYPE_LABEL,
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_MODELS_MIXED_LABEL,
    GPU_MIG_ENABLED_LABEL,
)

_LABEL_VALUE_MAX_CHARS: Final = 63
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)?$")
_NOT_LABEL_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_NOT_ALNUM_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def is_valid_label_value(value: str) -> bool:
    """Kubernetes label value rules: at most 63 chars of [A-Za-z0-9._-], alphanumeric at both ends."""
    return len(value) <= _LABEL_VALUE_MAX_CHARS and _LABEL_VALUE.match(value) is not None


def sanitise_label_value(raw: str) -> str | None:
    """Make ``raw`` a valid label value, or None when nothing usable is left.

    Every character outside [A-Za-z0-9._-] becomes "-", the value is cut to 63 characters, and
    non-alphanumeric characters are dropped from both ends. Valid input comes back unchanged.
    """
    value = _NOT_ALNUM_EDGES.sub("", _NOT_LABEL_CHAR.sub("-", raw))
    value = _NOT_ALNUM_EDGES.sub("", value[:_LABEL_VALUE_MAX_CHARS])
    return value or None


def gpu_model_label_value(name: str) -> str | None:
    """The ``gpu-type`` value for an nvidia-smi GPU name, as GPU Feature Discovery spells products.

    GFD replaces each space with "-" ("NVIDIA A100-SXM4-80GB" -> "NVIDIA-A100-SXM4-80GB") and keeps the
    rest, including the "NVIDIA " prefix that newer drivers print and older ones omit, so the value
    matches the ``nvidia.com/gpu.product`` label GFD would set on the same node. Anything still invalid
    as a label value is then sanitised (``sanitise_label_value``).
    """
    return sanitise_label_value(name.strip().replace(" ", "-"))


@dataclass(frozen=True)
class NodeGpuSummary:
    """What the labeller concluded about one node's GPUs."""

    #: The single model of all whole GPUs, as a label value; None when mixed, unknown or no whole GPU.
    gpu_type: str | None
    #: GPUs offered whole (MIG mode not enabled).
    whole_gpu_count: int
    #: Smallest memory.total among whole GPUs; None when there is none or one of them did not say.
    min_memory_mib: int | None
    #: Distinct model label values among whole GPUs, sorted.
    models: tuple[str, ...]
    #: GPUs with MIG mode enabled (offered as slices, excluded from the counts above).
    mig_gpu_count: int
    #: Human-readable reasons for what was left out, for the log.
    notes: tuple[str, ...] = ()

    @property
    def models_mixed(self) -> bool:
        return len(self.models) > 1


def summarise_gpus(gpus: Sequence[Gpu]) -> NodeGpuSummary:
    """Decide the node's GPU type, count and memory from its GPUs (rules in the module docstring)."""
    whole = [gpu for gpu in gpus if gpu.mig_mode != "enabled"]
    mig_gpu_count = len(gpus) - len(whole)
    notes: list[str] = []
    models: set[str] = set()
    unnamed = 0
    for gpu in whole:
        model = gpu_model_label_value(gpu.name)
        if model is None:
            unnamed += 1
        else:
            models.add(model)
    gpu_type: str | None = None
    if len(models) > 1:
        notes.append(
            f"whole GPUs of {len(models)} models ({', '.join(sorted(models))}): "
            f"{GPU_TYPE_LABEL} not set, a Pod could be given any of them"
        )
    elif unnamed:
        notes.append(f"{unnamed} GPU name(s) give no valid label value: {GPU_TYPE_LABEL} not set")
    elif models:
        gpu_type = next(iter(models))
    if mig_gpu_count:
        notes.append(
            f"{mig_gpu_count} GPU(s) with MIG enabled are offered as slices, not counted as whole GPUs"
            + ("" if whole else f"; no whole GPU: {GPU_TYPE_LABEL} not set")
        )
    memories = [gpu.memory_mib for gpu in whole]
    min_memory_mib: int | None = None
    if memories and all(memory is not None for memory in memories):
        min_memory_mib = min(memory for memory in memories if memory is not None)
    elif memories:
        notes.append(f"memory.total unknown for some GPU: {GPU_MEMORY_LABEL} not set")
    return NodeGpuSummary(
        gpu_type=gpu_type,
        whole_gpu_count=len(whole),
        min_memory_mib=min_memory_mib,
        models=tuple(sorted(models)),
        mig_gpu_count=mig_gpu_count,
        notes=tuple(notes),
    )


def build_desired_labels(summary: NodeGpuSummary) -> dict[str, str]:
    """The owned labels the node should carry; an owned key missing here should be absent on the node."""
    labels: dict[str, str] = {}
    if summary.gpu_type is not None:
        labels[GPU_TYPE_LABEL] = summary.gpu_type
    if summary.whole_gpu_count > 0:
        labels[GPU_COUNT_LABEL] = str(summary.whole_gpu_count)
        if summary.min_memory_mib is not None:
            labels[GPU_MEMORY_LABEL] = str(summary.min_memory_mib)
    if summary.models_mixed:
        labels[GPU_MODELS_MIXED_LABEL] = "true"
    if summary.mig_gpu_count > 0:
        labels[GPU_MIG_ENABLED_LABEL] = "true"
    return labels


class NodeLabelPatchMetadata(TypedDict):
    labels: dict[str, str | None]


class NodeLabelPatch(TypedDict):
    """A JSON merge patch (RFC 7386) on a Node: a value sets a label, null removes it."""

    metadata: NodeLabelPatchMetadata


def _check_owned(desired: Mapping[str, str]) -> None:
    foreign = sorted(set(desired) - set(OWNED_LABELS))
    if foreign:
        raise ValueError(f"labels {foreign} are not the labeller's own: it never writes them")


def build_label_patch(current: Mapping[str, str], desired: Mapping[str, str]) -> NodeLabelPatch | None:
    """The merge patch that takes ``current`` to ``desired`` on the owned keys only; None if none is needed.

    Owned keys present in ``current`` but not in ``desired`` are set to null (removed); keys that are not
    owned are never named in the patch, whatever ``current`` holds.
    """
    _check_owned(desired)
    changes: dict[str, str | None] = {}
    for key in OWNED_LABELS:
        wanted = desired.get(key)
        if current.get(key) != wanted:
            changes[key] = wanted
    if not changes:
        return None
    return {"metadata": {"labels": changes}}


def build_full_label_patch(desired: Mapping[str, str]) -> NodeLabelPatch:
    """The patch for a node whose labels are unknown: every owned key, null where not desired.

    Applying it to any node gives the same owned labels (removing an absent label is a no-op); the
    dry run without a cluster prints it.
    """
    _check_owned(desired)
    return {"metadata": {"labels": {key: desired.get(key) for key in OWNED_LABELS}}}
