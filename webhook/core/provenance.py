"""Who decided a Pod's placement: the one place that says whether gpu-class may leave a Pod as it came. Pure.

Every label and annotation on a Pod, its owner references, scheduling gates and scheduler name are
written by whoever creates the Pod: Kueue's `kueue.x-k8s.io/podset`, gpu-class's own
`gpu-class.io/types`, an ownerReference to a Job (Kubernetes checks neither that the owner exists
nor who wrote the reference). None of them proves that gpu-class decided anything, so none of them
lets a Pod skip or narrow the decision (docs/operators/security.md has the table of marks).

What the cluster does enforce on a Pod is its required node affinity: the scheduler places, and the
kubelet admits, only where it holds. So a Pod is left as it came only when its affinity already
keeps it to the types of a class its namespace allows, which is what gpu-class wrote into the
template of a workload it decided (workload.py). A Pod whose author wrote the same affinity itself
gets no more than the class gives it; any other Pod is decided in full, whatever marks it carries.
"""

from __future__ import annotations

from typing import Literal

from .ask import Malformed, NodeTerm, PodAsk
from .catalog import Catalog, GpuClass

Provenance = Literal["decide", "decided-with-workload", "decided-at-an-earlier-call"]


def provenance(ask: PodAsk, gpu_class: GpuClass, catalog: Catalog, *, queued: bool = False) -> Provenance:
    """`decided-with-workload` for a Pod Kueue started, or gates for the parent whose templates it counted
    (a StatefulSet's, a LeaderWorkerSet's: Kueue's label comes only when it ungates them), whose required
    node affinity keeps it within `gpu_class` (already checked to be allowed in its namespace);
    `decided-at-an-earlier-call` for a queued workload's pod template (`queued`, workload.py) that asks
    for its GPUs, carries gpu-class's types and whose affinity keeps it within the class: the API server
    calls gpu-class again after Kueue's webhook changed the workload, and a second decision on a changed
    cluster could only narrow the first, under the quota Kueue counts; `decide` for everything else.

    Kueue's label only says which rule to apply, never that the rule may be skipped: a Pod Kueue
    started was counted from its workload's template, so deciding it again could write a narrower
    affinity that disagrees with the flavor Kueue chose while its quota is held. The nodeSelector is
    not read: Kueue writes its flavor there, gpu-class writes the affinity, so a Pod with only a
    flavor was never decided by gpu-class (its workload came while no replica answered, say)."""
    if not keeps_within(ask.node_terms, gpu_class, catalog):
        return "decide"
    if ask.kueue_started or ask.counted_at_parent:
        return "decided-with-workload"
    asks_gpus = not isinstance(ask.requested, Malformed) and bool(ask.requested)
    if queued and asks_gpus and ask.types_written is not None:
        return "decided-at-an-earlier-call"
    return "decide"


def keeps_within(node_terms: tuple[NodeTerm, ...], gpu_class: GpuClass, catalog: Catalog) -> bool:
    """Whether required node affinity terms admit only nodes of `gpu_class`'s types: the terms are
    ORed, so each must hold an `In` expression all of whose values name a type of the class."""
    in_class = frozenset(gpu_class.types)
    return bool(node_terms) and all(
        any(values and all(catalog.types_of_label(key, v) & in_class for v in values) for key, values in term)
        for term in node_terms)
