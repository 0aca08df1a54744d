"""Who decided a Pod's placement: the one place that says whether gpu-class may leave a Pod as it came. Pure.

Every label and annotation on a Pod, its owner references, scheduling gates and scheduler name are
written by whoever creates the Pod: Kueue's `kueue.x-k8s.io/podset`, gpu-class's own
`gpu-class.io/types`, an ownerReference to a Job (Kubernetes checks neither that the owner exists
nor who wrote the reference). None of them proves that gpu-class decided anything, so none of them
lets a Pod skip or narrow the decision (docs/operators/security.md has the table of marks).

What the cluster does enforce on a Pod is its required node affinity: the scheduler places, and the
kubelet admits, only where it holds. So a Pod is left as it came only when its affinity already
keeps it to the types of a class its namespace allows, for the GPU resources it asks for, which is
what gpu-class wrote into the template of a workload it decided (workload.py). A Pod whose author
wrote the same affinity itself gets no more than the class gives it; any other Pod is decided in
full, whatever marks it carries.

The resource is part of the type: under NVIDIA's mixed MIG strategy an H100's product value is also
the product of its slices, so an affinity to that value keeps a Pod to a slice class only if what it
asks for is a slice. Every GPU resource the Pod holds (any container or init container, limit or
request) must be one a type of the class is given as on every value the affinity names (affinity.py).
"""

from __future__ import annotations

from typing import Literal

from ..catalog.model import Catalog, GpuClass
from ..view.affinity import Hosts, NodeTerm, ResourceSets, keeps_within as keeps_types_within, no_hosts, resource_sets
from ..view.snapshot import Snapshot
from .ask import PodAsk
from .decision import Decision
from .shape import Malformed

Provenance = Literal["decide", "decided-with-workload", "decided-at-an-earlier-call"]


def kept_as_decided(ask: PodAsk, gpu_class: GpuClass, snapshot: Snapshot, catalog: Catalog, *,
                    queued: bool) -> Decision | None:
    """The decision that leaves the Pod as it came, where its own node affinity already carries gpu-class's
    decision (provenance says when); None: the Pod is decided in full."""
    decided = provenance(ask, gpu_class, catalog, queued=queued, hosts=snapshot.types_of_host)
    if decided == "decided-with-workload":
        return Decision("out-of-scope", f"decided with its workload, which Kueue started: its node affinity "
                                        f"keeps it to class {gpu_class.name}", class_name=gpu_class.name,
                        kept_as_decided=True)
    if decided == "decided-at-an-earlier-call":
        return Decision("out-of-scope", f"decided at an earlier call: its node affinity keeps it to class "
                                        f"{gpu_class.name} and it asks for its GPUs; deciding again could only "
                                        "narrow it", class_name=gpu_class.name, kept_as_decided=True)
    return None


def provenance(ask: PodAsk, gpu_class: GpuClass, catalog: Catalog, *, queued: bool = False,
               hosts: Hosts = no_hosts) -> Provenance:
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
    flavor was never decided by gpu-class (its workload came while no replica answered, say).

    `hosts`: the types of a node by its kubernetes.io/hostname, from the live view (DRA nodes no
    product label names are kept to by hostname)."""
    if isinstance(ask.requested, Malformed):
        return "decide"  # what it asks for is unknown: the decision refuses it as malformed
    resources = resource_sets(ask.requested, catalog.class_resources(gpu_class.name))
    if not keeps_within(ask.node_terms, gpu_class, catalog, resources, hosts):
        return "decide"
    if ask.kueue_started or ask.counted_at_parent:
        return "decided-with-workload"
    if queued and ask.requested and ask.types_written is not None:
        return "decided-at-an-earlier-call"
    return "decide"


def keeps_within(node_terms: tuple[NodeTerm, ...], gpu_class: GpuClass, catalog: Catalog,
                 resources: ResourceSets, hosts: Hosts = no_hosts) -> bool:
    """Whether required node affinity terms admit only nodes where the Pod's GPU resources are types of
    `gpu_class`: the terms are ORed, so each must hold an `In` expression all of whose values give each
    resource as a type of the class, and as no other type."""
    return keeps_types_within(node_terms, frozenset(gpu_class.types), resources, catalog, hosts)
