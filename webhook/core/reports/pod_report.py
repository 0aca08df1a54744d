"""`gpuclass explain pod/NAME`: what gpu-class decided for a Pod that exists, and what became of it. Pure.

Reads the Pod as the API server holds it: the types the webhook wrote (gpu-class.io/types, best
first), the node the scheduler bound it to and that node's type in the inventory. For a Pod not yet
bound, which of its types have a node with room now, judged node by node as the scheduler extender
judges them (extender.judge_node), so the answer is the one the gpu-class scheduler profile would give.
A Pod of a group that runs (gpu-class.io/group, a Pod of it bound) is judged on the group's nodes
only: the scheduler's Pod affinity admits no other.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Literal, Mapping, Sequence, TypedDict

from ..catalog.model import Catalog
from ..catalog.wait import parse_wait
from .explain import scheduler_guarantee
from ..scheduling.extender import PodNeeds, PodProblem, judge_node, read_pod
from ..admission.groups import RunsOn, runs_on
from ..view.nodes import NodeInfo
from ..view.pods import (CLASS_ANNOTATION, GROUP_LABEL, MAX_WAIT_ANNOTATION, TERMINAL_PHASES, GroupName, pod_gpus,
                         pod_group, timestamp_seconds)
from ..view.snapshot import Snapshot
from ..after_bind.upgrade import upgrade_outlook

GPU_CLASS_PREFIX = "gpu-class: "


class TypeRoom(TypedDict):
    type: str
    nodesWithRoom: int
    maxFreeGpus: int  # on the nodes with room
    elsewhere: dict[str, int]  # why the type's other nodes cannot take it: reason -> nodes


PodReport = TypedDict("PodReport", {
    "pod": str,
    "namespace": str,
    "phase": str,
    "class": "str | None",
    "types": "list[str]",  # gpu-class.io/types as written, best first; empty when gpu-class did not place it
    "gpus": int,
    "scheduler": str,
    "order": "str | None",  # strict | preferred, for a Pod gpu-class placed
    "node": "str | None",
    "nodeType": "str | None",
    "nodeProduct": "str | None",
    "nodeDevices": "str | None",  # "dra" or "device-plugin": where the node's devices of that type come from
    "claim": "str | None",  # the ResourceClaim kube-scheduler made for the Pod's GPU limit on a DRA node
    "preferredType": "str | None",
    "onPreferredType": "bool | None",
    "room": "list[TypeRoom] | None",  # only for a Pod not yet bound
    "group": "GroupRoom | None",  # for a Pod the webhook placed in a group (label gpu-class.io/group)
    "problem": "str | None",
    "upgrade": "str | None",  # for a bound Pod: whether the upgrader would move it (upgrade.py)
    "wait": "str | None",  # for a Pod with gpu-class.io/max-wait: what gpu-class-scheduler does with its wait
    # "cluster": judged on every node and Pod; "namespace": the reader may not list them (a tenant), so the
    # report holds what the Pod says and its node where the reader may get it, and no room or upgrade outlook
    "view": "View",
    "nodeSeen": bool,  # the Pod's node was in the inventory read (False where the reader may not get it)
    "schedulerSays": "str | None",  # for a Pod not bound: the scheduler's last word (its PodScheduled condition)
})

View = Literal["cluster", "namespace"]


class GroupDomains(TypedDict):
    key: str  # the topology label its Pods are kept within
    mode: str  # required | preferred
    runsIn: dict[str, int]  # its bound Pods per value of the label


class GroupRoom(TypedDict):
    name: str
    runsOn: dict[str, Any] | None  # None: none of its Pods is bound
    domains: GroupDomains | None  # None: kept within no topology domain


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _group_domains(pod: Mapping[str, Any], group: GroupName, snapshot: Snapshot,
                   catalog: Catalog) -> GroupDomains | None:
    """The topology domain the Pod's group is kept in (the Pod affinity gpu-class wrote on a catalog topology
    label, required or preferred), and its bound Pods per value of it; None when it is kept in none."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    selects = {"matchLabels": {GROUP_LABEL: group[1]}}
    required = [t.get("topologyKey") for t in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
                if isinstance(t, dict) and t.get("labelSelector") == selects]
    preferred = [(t.get("podAffinityTerm") or {}).get("topologyKey")
                 for t in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
                 if isinstance(t, dict) and (t.get("podAffinityTerm") or {}).get("labelSelector") == selects]
    found = next(((k, "required") for k in required if k in catalog.topology_labels), None) or next(
        ((k, "preferred") for k in preferred if k in catalog.topology_labels), None)
    if found is None:
        return None
    key, mode = found
    runs_in: Counter[str] = Counter()
    for node, _ in (snapshot.pod_groups.get(group) or {}).values():
        info = snapshot.nodes.get(node)
        value = info.domain(key) if info is not None else None
        if value is not None:
            runs_in[value] += 1
    return {"key": key, "mode": mode, "runsIn": dict(sorted(runs_in.items()))}


def _room(needs: PodNeeds, snapshot: Snapshot, group: RunsOn | None) -> list[TypeRoom]:
    by_type: dict[str, list[Any]] = {t: [] for t in (needs.types if group is None else group.types)}
    for info in snapshot.nodes.values():
        offer = next((o for o in info.offers if o.type_name in by_type), None)
        if offer is not None and (group is None or group.offers_on(offer)):
            by_type[offer.type_name].append(judge_node(info.name, info, needs, snapshot, from_cache=True))
    rooms: list[TypeRoom] = []
    for type_name, verdicts in by_type.items():
        passed = [v for v in verdicts if v.passed]
        elsewhere = Counter(v.reason.removeprefix(GPU_CLASS_PREFIX) for v in verdicts if not v.passed)
        rooms.append({"type": type_name, "nodesWithRoom": len(passed),
                      "maxFreeGpus": max((v.free_gpus for v in passed), default=0),
                      "elsewhere": dict(sorted(elsewhere.items()))})
    return rooms


def wait_outlook(pod: Mapping[str, Any], types: Sequence[str], node_type: str | None, now_seconds: float) -> str | None:
    """What gpu-class-scheduler does with the Pod's wait for its best type (gpu-class.io/max-wait), as explain says it:
    "waiting for H100 (2m of 10m), then A100-80GB"; None when it has no wait."""
    metadata = pod.get("metadata") or {}
    raw = (metadata.get("annotations") or {}).get(MAX_WAIT_ANNOTATION)
    budget = parse_wait(raw)
    created = timestamp_seconds(metadata.get("creationTimestamp"))
    if budget is None or created is None or not types:
        return None
    best, rest = types[0], (f", then {', '.join(types[1:])}" if len(types) > 1 else "")
    if (pod.get("spec") or {}).get("nodeName"):
        return (f"max-wait {raw}: bound on its best type, {best}" if node_type == best else
                f"max-wait {raw}: bound on {node_type or 'a node of no catalog type'}, not {best}")
    waited = now_seconds - created
    if waited < budget + 1:  # the scheduler's second of the creation stamp's truncation
        return f"waiting for {best} ({_duration(min(waited, budget))} of {raw}){rest}"
    return f"waited its max-wait {raw} for {best}; now placed in its class's order: {', '.join(types)}"


def _duration(seconds: float) -> str:
    """As users write durations: 90 s is 1m30s, 120 s is 2m."""
    s = int(seconds)
    hours, minutes, secs = s // 3600, s % 3600 // 60, s % 60
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs or not s else "")
    return text


def _scheduler_says(pod: Mapping[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "") or None
    return None


def build_pod_report(pod: Mapping[str, Any], snapshot: Snapshot, catalog: Catalog,
                     now_seconds: float | None = None, view: View = "cluster") -> PodReport:
    """What gpu-class did for `pod`; with view "namespace", `snapshot` holds at most the Pod's node."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    spec = pod.get("spec") or {}
    node = spec.get("nodeName") or None
    report: PodReport = {
        "pod": str(metadata.get("name") or ""),
        "namespace": str(metadata.get("namespace") or ""),
        "phase": str((pod.get("status") or {}).get("phase") or "Unknown"),
        "class": annotations.get(CLASS_ANNOTATION) if isinstance(annotations, dict) else None,
        "types": [],
        "gpus": 0,
        "scheduler": str(spec.get("schedulerName") or "default-scheduler"),
        "order": None,
        "node": node,
        "nodeType": None,
        "nodeProduct": None,
        "nodeDevices": None,
        "claim": ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName"),
        "preferredType": None,
        "onPreferredType": None,
        "room": None,
        "group": None,
        "problem": None,
        "upgrade": None,
        "wait": None,
        "view": view,
        "nodeSeen": bool(node) and node in snapshot.nodes,
        "schedulerSays": None if node else _scheduler_says(pod),
    }
    try:
        needs = read_pod(pod, catalog)
    except PodProblem as exc:
        report["problem"] = f"the Pod cannot be read: {exc}"
        return report
    # read_pod checked the containers' shape where it read the types; the API server checks every Pod's
    report["gpus"] = needs.gpus if needs is not None else pod_gpus(pod, catalog.gpu_resource)
    if needs is not None:
        report["types"] = list(needs.types)
        report["preferredType"] = needs.types[0] if needs.types else None
        report["order"] = scheduler_guarantee(report["scheduler"], catalog)[0]
    _report_node(report, snapshot.nodes.get(node) if node else None, needs)
    group = pod_group(pod)
    whole = view == "cluster"
    runs = None if group is None or not whole else runs_on(snapshot, group, needs.resource if needs is not None else None)
    if group is not None:
        report["group"] = {"name": group[1], "runsOn": None if runs is None else runs.as_json(),
                           "domains": _group_domains(pod, group, snapshot, catalog) if whole else None}
    if node is None and needs is not None and whole:
        report["room"] = _room(needs, snapshot, runs)
    outlook = upgrade_outlook(pod, snapshot, catalog) if report["phase"] not in TERMINAL_PHASES and whole else None
    report["upgrade"] = None if outlook is None else outlook.describe()
    if now_seconds is not None and report["phase"] not in TERMINAL_PHASES:
        report["wait"] = wait_outlook(pod, report["types"], report["nodeType"], now_seconds)
    return report


def _report_node(report: PodReport, info: NodeInfo | None, needs: PodNeeds | None) -> None:
    """What the report says of the Pod's node: its type, how it serves GPUs, whether it is the preferred type."""
    if info is not None:
        report["nodeType"], report["nodeProduct"] = info.type_name, info.product
        offer = info.offer(info.type_name) if info.type_name else None
        report["nodeDevices"] = None if offer is None else "dra" if offer.dra else "device-plugin"
    if report["node"] and needs is not None and needs.types:
        report["onPreferredType"] = info is not None and info.type_name == needs.types[0]
    if report["node"] and report["view"] == "namespace" and not report["nodeSeen"]:
        report["onPreferredType"] = None  # its node's type is not known here


def can_run_now(report: PodReport) -> bool:
    """False for a Pod that waits for a node and has no type with room: the one case to exit non-zero for."""
    return report["room"] is None or any(r["nodesWithRoom"] for r in report["room"])


def _waiting(report: PodReport) -> str:
    """Why a Pod with no type with room waits."""
    group = report["group"]
    if group is None or group["runsOn"] is None:
        return "no node of its types has room now: it waits for GPUs to free up or for new nodes"
    types = ", ".join(group["runsOn"]["types"])
    free = "1 free GPU" if report["gpus"] == 1 else f"{report['gpus']} free GPUs"
    return (f"group {group['name']} runs on {types}; no {types} node has {free}: the Pod waits for room there, "
            "never on another type")


def render_pod_json(report: PodReport) -> str:
    return json.dumps(report, indent=2)


def _node_lines(report: PodReport, node: str, types: list[str]) -> list[str]:
    """Where the Pod was scheduled, and how that node's type stands among its types."""
    lines = []
    finished = " and finished" if report["phase"] in TERMINAL_PHASES else ""
    if not report["nodeSeen"] and report["view"] == "namespace":
        lines.append(f"scheduled{finished} on {node} (its GPU type is not shown: your rights do not get nodes)")
    elif report["nodeType"] is None:
        where = "a node of no catalog type" if report["nodeProduct"] else "a node with no GPU product label"
        lines.append(f"scheduled{finished} on {node}, {where}")
    elif report["nodeDevices"] == "dra":
        claim = f", claim {report['claim']}" if report["claim"] else ""
        lines.append(f"scheduled{finished} on {node}: {report['nodeType']} (DRA devices{claim})")
    else:
        lines.append(f"scheduled{finished} on {node}: {report['nodeType']} ({report['nodeProduct']})")
    if report["onPreferredType"]:
        lines.append(f"{report['nodeType']} is its preferred type")
    elif report["onPreferredType"] is None:
        pass
    elif types and report["nodeType"] in types:
        rank = _ordinal(types.index(str(report["nodeType"])) + 1)
        lines.append(f"{report['nodeType']} is its {rank} choice; it preferred {types[0]}")
    elif types:
        lines.append(f"that is none of its types; it preferred {types[0]}")
    return lines


def render_pod_text(report: PodReport) -> str:
    name = f"{report['namespace']}/{report['pod']}"
    lines = [f"Pod {name}: {report['phase']}, class {report['class'] or '(none)'}, {report['gpus']} GPU(s)"]
    if report["problem"]:
        return "\n".join([*lines, report["problem"]])
    types = report["types"]
    if types:
        lines.append(f"gpu-class allowed types (gpu-class.io/types, best first): {', '.join(types)}")
        lines.append(f"order: {report['order']} (scheduler {report['scheduler']})")
    else:
        lines.append("gpu-class did not place this Pod: it has no gpu-class.io/types (created before the webhook "
                     "ran, in a namespace not opted in, or without a class)")
    if report["view"] == "namespace":
        lines.append("your rights do not list the cluster's nodes and Pods: shown is what the Pod and its node say, "
                     "not which types have room now nor whether the upgrader would move it")
    if report["node"] is not None:
        lines.extend(_node_lines(report, report["node"], types))
    if report["schedulerSays"]:
        lines.append(f"{report['scheduler']} says: {report['schedulerSays']}")
    if report["upgrade"]:
        lines.append(report["upgrade"])
    if report["wait"]:
        lines.append(report["wait"])
    group = report["group"]
    if group is not None:
        runs = group["runsOn"]
        lines.append(f"group {group['name']}: none of its Pods is bound yet" if runs is None else
                     f"group {group['name']} runs on {', '.join(runs['types'])} ({runs['labelKey']}="
                     f"{', '.join(runs['products'])}), {runs['pods']} Pod(s) bound")
        domains = group["domains"]
        if domains is not None:
            kept = (f"within one {domains['key']} domain" if domains["mode"] == "required" else
                    f"in as few {domains['key']} domains as the scheduler can")
            spread = ", ".join(f"{v} x {n}" for v, n in domains["runsIn"].items()) or "none bound yet"
            lines.append(f"group {group['name']}: kept {kept} ({domains['mode']}); runs in {len(domains['runsIn'])}: "
                         f"{spread}")
    if report["room"] is not None:
        lines.append(f"not scheduled yet; nodes with room for {report['gpus']} GPU(s) now, by type:")
        lines.append("")
        width = max([len("TYPE"), *(len(r["type"]) for r in report["room"])])
        lines.append(f"{'TYPE':<{width}}   NODES-WITH-ROOM   MOST-FREE   OTHER NODES")
        for r in report["room"]:
            others = "; ".join(f"{n} x {reason}" for reason, n in r["elsewhere"].items())
            others = others or ("-" if r["nodesWithRoom"] else "no nodes of this type")
            lines.append(f"{r['type']:<{width}}   {r['nodesWithRoom']:<15}   {r['maxFreeGpus']:<9}   {others}")
        if not can_run_now(report):
            lines.append("")
            lines.append(_waiting(report))
    return "\n".join(lines)
