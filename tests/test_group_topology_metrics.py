"""gpu_class_group_topology_pods_total: how each Pod of a group kept within one topology domain was decided, and by
whom (gpu-class's required or preferred, or Kueue's Topology Aware Scheduling), with label values from the catalog
only (webhook/serving/metrics.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import pytest

from builders import make_pod, make_review
from test_group_topology import CLIQUE, RACK_A_FULL, RACKS, with_class_topology
from test_groups import CATALOG, snapshot_with
from webhook.core.admission.annotations import Topology
from webhook.core.admission.kueue import QUEUE_LABEL
from webhook.core.admission.review import Review, parse_review, review_request
from webhook.core.catalog.model import Catalog
from webhook.serving import metrics

C, G, SIZE, COUNT = "gpu-class.io/class", "gpu-class.io/group", "gpu-class.io/group-size", "gpu-class.io/count"
REQUIRED, PREFERRED = "gpu-class.io/group-required-topology", "gpu-class.io/group-preferred-topology"
KUEUE_REQUIRED, KUEUE_PREFERRED = "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"
# a Kueue level as a tenant writes it: any label key, so never a label value of ours
TENANT_LEVEL = "tenant.example.com/block-7f3c"


def group_annotations(size: int, **more: str) -> dict[str, str]:
    return {C: "high", COUNT: "2", G: "train", SIZE: str(size), **more}


def queued_job(annotations: Mapping[str, str]) -> dict[str, Any]:
    """A Job Kueue queues: gpu-class decides it at its pod template (workload.py)."""
    template = {"metadata": {"annotations": dict(annotations)},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "train:1"}]}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "labels": {QUEUE_LABEL: "team-a"}},
            "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed", "template": template}}


def answer(obj: Mapping[str, Any], catalog: Catalog) -> Review:
    kind = str(obj.get("kind", "Pod"))
    body = make_review(obj, kind=kind)
    if kind == "Job":
        body["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
        body["request"]["resource"] = {"group": "batch", "version": "v1", "resource": "jobs"}
    return review_request(parse_review(json.dumps(body).encode()), snapshot_with(RACKS, RACK_A_FULL,
                                                                                  catalog=catalog), catalog)


def counted() -> dict[tuple[str, ...], float]:
    """gpu_class_group_topology_pods_total's series now, by (class, topology, mode, outcome)."""
    order = ("class", "topology", "mode", "outcome")
    return {tuple(s.labels[k] for k in order): s.value for family in metrics.GROUP_TOPOLOGY_PODS.collect()
            for s in family.samples if s.name == "gpu_class_group_topology_pods_total"}


def group_pods() -> dict[str, float]:
    return {s.labels["outcome"]: s.value for family in metrics.GROUP_PODS.collect() for s in family.samples
            if s.name == "gpu_class_group_pods_total"}


@dataclass(frozen=True)
class Case:
    id: str
    obj: dict[str, Any]
    counted: tuple[str, str, str, str] | None  # (class, topology, mode, outcome); None: not a group kept by topology
    group_outcome: str | None = None  # gpu_class_group_pods_total's, counted all the same
    catalog: Catalog = field(default=CATALOG)


CASES = [
    Case("required-started-in-the-rack-with-room", make_pod(group_annotations(10, **{REQUIRED: CLIQUE})),
         ("high", CLIQUE, "required", "started"), "started"),
    Case("required-larger-than-any-rack-waits", make_pod(group_annotations(17, **{REQUIRED: CLIQUE})),
         ("high", CLIQUE, "required", "no-room"), "no-room"),
    Case("required-no-node-in-a-domain-refused",
         make_pod(group_annotations(2, **{REQUIRED: CLIQUE, "gpu-class.io/exclude-types": "H100"})),
         ("high", CLIQUE, "required", "refused"), "refused"),
    Case("preferred", make_pod(group_annotations(20, **{PREFERRED: CLIQUE})),
         ("high", CLIQUE, "preferred", "started"), "started"),
    Case("the-class-s-group-topology", make_pod(group_annotations(10)), ("high", CLIQUE, "required", "started"),
         "started", with_class_topology(Topology(CLIQUE, True))),
    Case("kueue-s-alone", make_pod(group_annotations(10, **{KUEUE_PREFERRED: TENANT_LEVEL})),
         ("high", "none", "kueue", "started"), "started"),
    Case("kueue-s-over-gpu-class-s",
         make_pod(group_annotations(10, **{REQUIRED: CLIQUE, KUEUE_REQUIRED: TENANT_LEVEL})),
         ("high", "none", "kueue", "started"), "started"),
    Case("kueue-s-over-the-class-s", make_pod(group_annotations(10, **{KUEUE_REQUIRED: TENANT_LEVEL})),
         ("high", "none", "kueue", "started"), "started", with_class_topology(Topology(CLIQUE, True))),
    Case("queued-job-decided-at-its-template",
         queued_job(group_annotations(4, **{REQUIRED: CLIQUE, KUEUE_REQUIRED: TENANT_LEVEL})),
         ("high", "none", "kueue", "started"), "started"),
    Case("group-without-a-topology", make_pod(group_annotations(10)), None, "started"),
    Case("malformed-group", make_pod(group_annotations(10, **{G: "-t", REQUIRED: CLIQUE})), None, "refused"),
    Case("no-group", make_pod({C: "high", COUNT: "2"}), None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_group_pod_is_counted_by_who_keeps_its_domain(case: Case) -> None:
    review = answer(case.obj, case.catalog)
    group = review.decision.group
    assert (group.outcome if group is not None else None) == case.group_outcome, review.decision.message
    before, groups_before = counted(), group_pods()
    metrics.observe_admission(review, 0.001, case.catalog)
    after = counted()
    changed = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert changed == ({} if case.counted is None else {case.counted: 1.0})
    # the groups' counter counts each group Pod all the same
    assert {k: v - groups_before.get(k, 0.0) for k, v in group_pods().items() if v != groups_before.get(k, 0.0)} == (
        {} if case.group_outcome is None else {case.group_outcome: 1.0})
    if case.counted is not None:  # among the series created at 0 at start: its first increment is seen
        assert case.counted in metrics.group_topology_label_sets(case.catalog)
    assert all(TENANT_LEVEL not in labels for labels in after)


def test_every_series_is_created_at_zero_at_start_and_bounded_by_the_catalog() -> None:
    catalog = dataclasses.replace(CATALOG, topology_labels=(CLIQUE, "topology.example.com/rack"))
    metrics.start_admission_series(catalog)
    sets = metrics.group_topology_label_sets(catalog)
    assert set(sets) <= set(counted())
    # per class: each key twice (required, preferred) and Kueue's once, by each outcome
    assert len(sets) == len(set(sets)) == len(catalog.classes) * (2 * 2 + 1) * 5
    assert {(k, m) for _, k, m, _ in sets} == {(CLIQUE, "required"), (CLIQUE, "preferred"), ("none", "kueue"),
                                               ("topology.example.com/rack", "required"),
                                               ("topology.example.com/rack", "preferred")}


@pytest.mark.parametrize("key, shown", [
    pytest.param(CLIQUE, CLIQUE, id="a-key-of-the-catalog"),
    # never written by the decision (it reads the key against the catalog); should it be, it adds no series
    pytest.param("tenant.example.com/rack", "unknown", id="a-key-the-catalog-lacks"),
])
def test_the_topology_label_is_a_key_of_the_catalog(key: str, shown: str) -> None:
    pod = make_pod(group_annotations(10, **{REQUIRED: CLIQUE}))
    group = answer(pod, CATALOG).decision.group
    assert group is not None
    forged = dataclasses.replace(group, topology=Topology(key, True))
    assert metrics.group_topology_labels(forged, "high", CATALOG) == ("high", shown, "required", "started")


def test_a_group_left_to_kueue_is_explained_as_kueue_s() -> None:
    from webhook.core.reports.explain import explain_text

    pod = make_pod(group_annotations(4, **{REQUIRED: CLIQUE, KUEUE_REQUIRED: TENANT_LEVEL}))
    review = answer(copy.deepcopy(pod), CATALOG)
    text = explain_text(review, "ml", pod, CATALOG)
    assert "group train: its topology domain is Kueue's to choose (Topology Aware Scheduling)" in text
    assert f"{REQUIRED} ignored: Kueue's Topology Aware Scheduling places it" in text
    assert "kept within one nvidia.com/gpu.clique domain" not in text
