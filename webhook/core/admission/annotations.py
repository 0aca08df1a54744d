"""The gpu-class.io annotations a Pod may carry, each read into its value or the message refusing it. Pure.

ask.read_pod reads them all, once, into the PodAsk; a value the Pod wrote wrong is kept as the message
that tells the user what to write, and the decision refuses it where it reaches it (need.py).
"""

from __future__ import annotations

import re
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..catalog.model import PRECISIONS, Catalog, GroupTopology, Need, parse_compute_capability
from ..catalog.quantity import quantity_mib
from ..catalog.wait import WAIT_FORMS, parse_wait
from ..view.pods import CLASS_ANNOTATION, GROUP_LABEL, MAX_WAIT_ANNOTATION, TYPES_ANNOTATION
from .shape import Malformed
from .words import quoted

PREFIX = "gpu-class.io/"
COUNT_ANNOTATION = PREFIX + "count"
CONTAINER_ANNOTATION = PREFIX + "container"
EXCLUDE_ANNOTATION = PREFIX + "exclude-types"
MIN_MEMORY_ANNOTATION = PREFIX + "min-memory"
# what the Pod's code needs of a GPU, whatever its name: they narrow the class as min-memory does
REQUIRES_ANNOTATION = PREFIX + "requires"
MIN_COMPUTE_CAPABILITY_ANNOTATION = PREFIX + "min-compute-capability"
UPGRADE_ANNOTATION = PREFIX + "upgrade"  # read by the upgrader (upgrade.py), not the webhook
GROUP_ANNOTATION = "gpu-class.io/group"
GROUP_SIZE_ANNOTATION = "gpu-class.io/group-size"
# a node label key of the catalog's topologyLabels (an NVLink domain, a rack, a block): the group starts only
# in one value of it with room for all of it (required), or in as few as it can (preferred). Named as Kueue's
# Topology Aware Scheduling names its own (kueue.x-k8s.io/podset-required-topology).
GROUP_REQUIRED_TOPOLOGY_ANNOTATION = "gpu-class.io/group-required-topology"
GROUP_PREFERRED_TOPOLOGY_ANNOTATION = "gpu-class.io/group-preferred-topology"
# Kueue's own: a Pod carrying one has its topology decided by Kueue's Topology Aware Scheduling
KUEUE_TOPOLOGY_ANNOTATIONS = ("kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology",
                              "kueue.x-k8s.io/podset-unconstrained-topology")
# LeaderWorkerSet writes the number of Pods of its group (leader included) on each of them. The Job
# controller and JobSet put no Pod count on Pods (JobSet's replicas annotations count Jobs).
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"

# the Pod annotations gpu-class reads (and the one it writes): any other gpu-class.io/ key is a slip
POD_ANNOTATIONS = (CLASS_ANNOTATION, COUNT_ANNOTATION, CONTAINER_ANNOTATION, EXCLUDE_ANNOTATION, MIN_MEMORY_ANNOTATION,
                   GROUP_ANNOTATION, GROUP_SIZE_ANNOTATION, GROUP_REQUIRED_TOPOLOGY_ANNOTATION,
                   GROUP_PREFERRED_TOPOLOGY_ANNOTATION, REQUIRES_ANNOTATION, MIN_COMPUTE_CAPABILITY_ANNOTATION,
                   TYPES_ANNOTATION, UPGRADE_ANNOTATION, MAX_WAIT_ANNOTATION)

_COUNT_RE = re.compile(r"[0-9]{1,6}")
# The most a Pod may ask for in an annotation. Beyond them a value is a slip (or a probe), never a need: no
# node offers a thousand GPUs, no GPU has 64 TiB, and a group of more Pods than this is not a job.
MAX_COUNT = 1024  # gpu-class.io/count: GPUs for one Pod
MAX_GROUP_SIZE = 65536  # gpu-class.io/group-size: Pods of one group
MAX_MIN_MEMORY_MIB = 64 * 1024 * 1024  # gpu-class.io/min-memory: 64Ti per GPU
# a label value: the group's name becomes the Pod label its affinity selects on
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_SIZE_RE = re.compile(r"[0-9]{1,6}")


Topology = GroupTopology  # the domain a group asks to be kept within


def topology_annotation(topology: Topology) -> str:
    """The annotation that asks for `topology`."""
    return GROUP_REQUIRED_TOPOLOGY_ANNOTATION if topology.required else GROUP_PREFERRED_TOPOLOGY_ANNOTATION


@dataclass(frozen=True)
class GroupAsk:
    """A Pod's group: its name, and the number of Pods it has when known (and which annotation said so)."""

    name: str
    size: int | None = None
    size_from: str | None = None
    topology: Topology | None = None
    # the Pod carries Kueue's Topology Aware Scheduling annotations: its topology is Kueue's, gpu-class writes none
    kueue_topology: bool = False
    # the annotation of gpu-class's it asked for all the same, dropped for Kueue's
    topology_left_to_kueue: str | None = None


def parse_count(value: Any) -> int | None:
    """A positive whole number of GPUs, as gpu-class.io/count and a container's limit or request are written."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not _COUNT_RE.fullmatch(text) or int(text) == 0:
        return None
    return int(text)


def wanted_count(annotations: Mapping[str, str]) -> int | None | str:
    """gpu-class.io/count; None when absent; or the message refusing it."""
    raw = annotations.get(COUNT_ANNOTATION)
    wanted = None if raw is None else parse_count(raw)
    if raw is not None and (wanted is None or wanted > MAX_COUNT):
        return (f"gpu-class: {COUNT_ANNOTATION} must be a positive whole number of GPUs, at most {MAX_COUNT} (like "
                f"\"1\" or \"4\"), not {quoted(raw)}")
    return wanted


def excluded_types(annotations: Mapping[str, str], catalog: Catalog) -> frozenset[str] | str:
    """gpu-class.io/exclude-types, or the message refusing it."""
    raw = annotations.get(EXCLUDE_ANNOTATION)
    if raw is None:
        return frozenset()
    names = {n.strip() for n in raw.split(",") if n.strip()}
    unknown = sorted(n for n in names if n not in catalog.types)
    if unknown:
        return (
            f"gpu-class: {EXCLUDE_ANNOTATION} names unknown types {quoted(', '.join(unknown))[1:-1]}; "
            f"types: {', '.join(catalog.types)}"
        )
    return frozenset(names)


def min_memory_mib(annotations: Mapping[str, str]) -> float | None | str:
    """gpu-class.io/min-memory as MiB (a Kubernetes quantity), or the message refusing it."""
    raw = annotations.get(MIN_MEMORY_ANNOTATION)
    if raw is None:
        return None
    mib = quantity_mib(raw)
    if mib is None or mib > MAX_MIN_MEMORY_MIB:
        return (f"gpu-class: {MIN_MEMORY_ANNOTATION} must be a positive Kubernetes quantity of memory per GPU, at "
                f"most 64Ti, like \"40Gi\", \"40960Mi\" or \"48G\", not {quoted(raw)}")
    return mib


def read_need(annotations: Mapping[str, str]) -> Need | None | str:
    """gpu-class.io/requires (precisions, comma-separated) and gpu-class.io/min-compute-capability, or
    the message refusing what the Pod wrote."""
    raw_precisions = annotations.get(REQUIRES_ANNOTATION)
    raw_capability = annotations.get(MIN_COMPUTE_CAPABILITY_ANNOTATION)
    if raw_precisions is None and raw_capability is None:
        return None
    precisions = frozenset(p.strip().lower() for p in (raw_precisions or "").split(",") if p.strip())
    unknown = sorted(precisions - set(PRECISIONS))
    if raw_precisions is not None and (unknown or not precisions):
        return (f"gpu-class: {REQUIRES_ANNOTATION} lists tensor-core precisions, comma-separated, of "
                f"{', '.join(PRECISIONS)} (like \"fp8\" or \"fp8,bf16\"), not {quoted(raw_precisions)}")
    capability = None if raw_capability is None else parse_compute_capability(raw_capability)
    if raw_capability is not None and capability is None:
        return (f"gpu-class: {MIN_COMPUTE_CAPABILITY_ANNOTATION} must be a CUDA compute capability major.minor, "
                f"like \"8.9\" or \"9.0\", not {quoted(raw_capability)}")
    return Need(min_compute_capability=capability, precisions=precisions)


def read_group(annotations: Mapping[str, str], topology_labels: Sequence[str] = ()) -> GroupAsk | None | str:
    """The Pod's group, None when it has none, or the message refusing what it wrote. `topology_labels`: the
    catalog's, the node label keys a group may ask to be kept within."""
    name = annotations.get(GROUP_ANNOTATION)
    raw_size = annotations.get(GROUP_SIZE_ANNOTATION)
    topology = read_topology(annotations, topology_labels)
    if name is None:
        if raw_size is not None:
            return (f"gpu-class: {GROUP_SIZE_ANNOTATION} needs {GROUP_ANNOTATION}: name the group whose size "
                    "it is")
        if isinstance(topology, Topology):
            return f"gpu-class: {topology_annotation(topology)} needs {GROUP_ANNOTATION}: name the group it keeps together"
        return topology
    if isinstance(topology, str):
        return topology
    ask = _group_of(name, annotations)
    if isinstance(ask, str):
        return ask
    if any(k in annotations for k in KUEUE_TOPOLOGY_ANNOTATIONS):
        return dataclasses.replace(ask, kueue_topology=True,
                                   topology_left_to_kueue=None if topology is None else topology_annotation(topology))
    return dataclasses.replace(ask, topology=topology)


def read_topology(annotations: Mapping[str, str], topology_labels: Sequence[str]) -> Topology | None | str:
    """gpu-class.io/group-required-topology or group-preferred-topology; None when neither; else the message
    refusing what the Pod wrote (both, or a key the catalog does not name)."""
    required = annotations.get(GROUP_REQUIRED_TOPOLOGY_ANNOTATION)
    preferred = annotations.get(GROUP_PREFERRED_TOPOLOGY_ANNOTATION)
    if required is None and preferred is None:
        return None
    if required is not None and preferred is not None:
        return (f"gpu-class: {GROUP_REQUIRED_TOPOLOGY_ANNOTATION} and {GROUP_PREFERRED_TOPOLOGY_ANNOTATION} are both "
                "set; write one")
    key = (required if required is not None else preferred or "").strip()
    written = GROUP_REQUIRED_TOPOLOGY_ANNOTATION if required is not None else GROUP_PREFERRED_TOPOLOGY_ANNOTATION
    if key not in topology_labels:
        known = ", ".join(topology_labels) or "none (the catalog's topologyLabels is empty)"
        return (f"gpu-class: {written} must be a node label key of the catalog's topologyLabels ({known}), not "
                f"{quoted(key)}")
    return Topology(key, required is not None)


def _group_of(name: str, annotations: Mapping[str, str]) -> GroupAsk | str:
    """The group named `name`, with its size, or the message refusing what the Pod wrote."""
    raw_size = annotations.get(GROUP_SIZE_ANNOTATION)
    if not _NAME_RE.fullmatch(name):
        shown = repr(name) if len(name) <= 66 else repr(name[:60]) + "..."
        return (f"gpu-class: {GROUP_ANNOTATION} must be 1 to 63 letters, digits, '-', '_' or '.', beginning and "
                f"ending with a letter or digit (it becomes the Pod label {GROUP_LABEL}), not {shown}")
    if raw_size is not None:
        size = _size(raw_size)
        if size is None:
            shown = repr(raw_size) if len(raw_size) <= 30 else repr(raw_size[:27]) + "..."
            return (f"gpu-class: {GROUP_SIZE_ANNOTATION} must be a positive whole number of Pods, at most "
                    f"{MAX_GROUP_SIZE} (like \"8\"), not {shown}")
        return GroupAsk(name, size, GROUP_SIZE_ANNOTATION)
    # LeaderWorkerSet's webhook refuses a Pod whose size it cannot read, so a bad value never gets here
    lws = _size(annotations.get(LWS_SIZE_ANNOTATION))
    return GroupAsk(name, lws, LWS_SIZE_ANNOTATION if lws is not None else None)


def max_wait(annotations: Mapping[str, str]) -> str | None | Malformed:
    """gpu-class.io/max-wait as written (checked); None when absent; a Malformed (its value is a str) when wrong."""
    raw = annotations.get(MAX_WAIT_ANNOTATION)
    if raw is None:
        return None
    if parse_wait(raw) is None:
        return Malformed(f"gpu-class: {MAX_WAIT_ANNOTATION} must be {WAIT_FORMS}, not {quoted(raw)}")
    return raw.strip()


def upgrade(annotations: Mapping[str, str]) -> bool | None | str:
    """gpu-class.io/upgrade as the upgrader reads it ("true" or "false", any case), or the message refusing it:
    a value the upgrader would pass over silently leaves the Pod where it is while its author thinks otherwise."""
    raw = annotations.get(UPGRADE_ANNOTATION)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false"):
        return f"gpu-class: {UPGRADE_ANNOTATION} must be \"true\" or \"false\", not {quoted(raw)}"
    return raw.lower() == "true"


def unknown_annotations(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The gpu-class.io/ keys nobody reads, sorted: a typo such as gpu-class.io/min-mem."""
    return tuple(sorted(k for k in annotations if k.startswith(PREFIX) and k not in POD_ANNOTATIONS))


def _size(raw: str | None) -> int | None:
    text = raw.strip() if isinstance(raw, str) else ""
    return int(text) if _SIZE_RE.fullmatch(text) and 0 < int(text) <= MAX_GROUP_SIZE else None
