"""`gpuclass explain`: what the webhook would do for a Pod or a workload of a file (a Job, a JobSet, ...: every kind
it decides), or for a workload that exists (KIND/NAME); what it did for a Pod that exists (pod/NAME); and why."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from .common import (
    Command, add_cluster_args, add_inventory_args, add_scheduler_arg, connect_cluster, read_catalog, read_inventory,
)
from .review import admission_request

if TYPE_CHECKING:
    from ..cluster.query import Connection
    from ..core.admission.workload import WorkloadKind
    from ..core.catalog.model import Catalog
    from ..core.view.snapshot import Snapshot
    from .common import Subparsers

POD_PREFIXES = ("pod/", "pods/", "po/")
# the API version a workload is read at, per (group, kind): those Kueue's integrations read (workload.KINDS)
WORKLOAD_VERSIONS = {"batch": "v1", "apps": "v1", "jobset.x-k8s.io": "v1alpha2", "leaderworkerset.x-k8s.io": "v1",
                     "ray.io": "v1", "kubeflow.org": "v1"}
VERSION_OF_KIND = {("kubeflow.org", "MPIJob"): "v2beta1"}  # the MPI Operator's v2, which Kueue reads
SHORT_NAMES = {"sts": ("apps", "StatefulSet"), "lws": ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")}


def add_parser(sub: Subparsers) -> None:
    e = sub.add_parser(
        "explain", help="what the webhook would do for a Pod or a workload (FILE.yaml: a Pod, Job, StatefulSet, JobSet, "
                        "LeaderWorkerSet, RayCluster, RayJob or Kubeflow job) or a workload that exists (KIND/NAME, "
                        "e.g. jobset/train), or what it did for a Pod that exists (pod/NAME)"
    )
    e.add_argument("pod", metavar="FILE.yaml|pod/NAME|KIND/NAME")
    add_inventory_args(e)
    add_cluster_args(e)
    e.add_argument("-n", "--namespace", default=None,
                   help="namespace of the Pod (default: its metadata.namespace, else the context's, else default)")
    e.add_argument("-o", "--output", choices=("text", "json"), default="text")
    add_scheduler_arg(e)
    e.add_argument("--install-namespace", default=None, metavar="NAMESPACE",
                   help="where gpu-class runs: pod/NAME is judged with the catalog and scheduler names its webhook "
                        "published there, unless --config or --scheduler-name is given (default gpu-class-system)")


def _existing_pod_name(arg: str) -> str | None:
    """NAME of `pod/NAME`, kubectl's way to name an object; a file of that path is still a file."""
    prefix = next((p for p in POD_PREFIXES if arg.startswith(p)), None)
    return arg[len(prefix):] if prefix and not os.path.exists(arg) and "/" not in arg[len(prefix):] else None


def _existing_workload(arg: str) -> tuple[WorkloadKind, str] | None:
    """(kind, NAME) of `KIND/NAME` for a kind the webhook decides, as kubectl names it (`job`, `jobs`,
    `jobsets.jobset.x-k8s.io`, `sts`); a file of that path is still a file."""
    from ..core.admission.workload import KINDS

    prefix, _, name = arg.partition("/")
    if not name or "/" in name or os.path.exists(arg):
        return None
    prefix = prefix.lower()
    for kind in KINDS.values():
        names = {kind.kind.lower(), kind.resource} | {f"{n}.{kind.group}" for n in (kind.kind.lower(), kind.resource)}
        if prefix in names or SHORT_NAMES.get(prefix) == (kind.group, kind.kind):
            return kind, name
    return None


def run(args: argparse.Namespace) -> int:
    from ..cluster.loading import InputError

    catalog = read_catalog(args)
    name = _existing_pod_name(args.pod)
    if name is not None:
        return _explain_existing(args, name, catalog)
    existing = _existing_workload(args.pod)
    if existing is not None:
        return _explain_existing_workload(args, *existing, catalog)
    obj, kind = _read_explained(args.pod)
    snapshot, connection = read_inventory(args, catalog)
    namespace = args.namespace or (obj.get("metadata") or {}).get("namespace") or (connection and connection.namespace)
    namespace = str(namespace or "default")
    if connection is not None and snapshot.namespace(namespace) is None:
        raise InputError(f"namespace {namespace} does not exist in the cluster; give -n NAMESPACE")
    if kind is not None:
        return _print_workload(args, obj, kind, namespace, snapshot, catalog)
    return _explain_file_pod(args, obj, namespace, snapshot, catalog)


def _read_explained(path: str) -> tuple[dict[str, Any], WorkloadKind | None]:
    """The one Pod of the file (None for its kind), else its one workload of a kind the webhook decides."""
    from ..cluster.loading import InputError, read_objects
    from ..core.admission.workload import KINDS

    objects = read_objects(path)
    pods = [o for o in objects if o.get("kind") == "Pod"]
    workloads = [(o, found) for o in objects
                 if (found := KINDS.get((str(o.get("apiVersion") or "").rpartition("/")[0], str(o.get("kind"))))) is not None]
    if len(pods) == 1:
        return pods[0], None
    if not pods and len(workloads) == 1:
        return workloads[0]
    kinds = ", ".join(dict.fromkeys(k.kind for k in KINDS.values()))
    raise InputError(f"{path} must hold exactly one Pod, or one workload the webhook decides ({kinds}, with its "
                     f"apiVersion), found {len(pods)} Pod(s) and {len(workloads)} such workload(s)")


def _explain_existing_workload(args: argparse.Namespace, kind: WorkloadKind, name: str, catalog: Catalog) -> int:
    """The decision the webhook would make for the workload as the API server holds it, created now."""
    from ..cluster.loading import InputError
    from ..cluster.query import read_snapshot, read_workload

    if args.nodes:
        raise InputError(f"{args.pod} is read from the cluster, with the cluster's inventory: drop --nodes")
    connection = connect_cluster(args)
    namespace = args.namespace or connection.namespace or "default"
    version = VERSION_OF_KIND.get((kind.group, kind.kind)) or WORKLOAD_VERSIONS[kind.group]
    obj = read_workload(connection.api, kind.group, version, kind.resource, namespace, name)
    if args.catalog_file is None and args.scheduler_name is None:
        catalog = _installed_catalog(connection, args.install_namespace, catalog)
    return _print_workload(args, obj, kind, namespace, read_snapshot(connection.api, catalog), catalog)


def _print_workload(args: argparse.Namespace, obj: dict[str, Any], kind: WorkloadKind, namespace: str,
                    snapshot: Snapshot, catalog: Catalog) -> int:
    from ..core.reports.workload_explain import explain_workload, workload_json, workload_text
    from ..core.view.snapshot import placing_catalog

    catalog = placing_catalog(catalog, snapshot)  # the catalog the decision is made with, as for a Pod
    explained = explain_workload(obj, kind, snapshot, catalog, namespace)
    if args.output == "json":
        print(json.dumps(workload_json(explained, catalog), indent=2))
    else:
        print(workload_text(explained, catalog))
    return 0 if explained.answer.decision.allowed else 1


def _explain_file_pod(args: argparse.Namespace, pod: dict[str, Any], namespace: str, snapshot: Snapshot,
                      catalog: Catalog) -> int:
    from ..core.admission.review import Request, review_pod
    from ..core.reports.explain import explain_json, explain_text
    from ..core.view.snapshot import placing_catalog

    review = admission_request(pod, namespace)
    req = Request(
        api_version="admission.k8s.io/v1", uid=review["request"]["uid"], operation="CREATE", kind="Pod", group="",
        sub_resource="", namespace=namespace, object=review["request"]["object"], name=review["request"]["name"],
    )
    # the catalog the decision was made with: with the types the nodes' labels made
    catalog = placing_catalog(catalog, snapshot)
    result = review_pod(req, snapshot, catalog)
    if args.output == "json":
        print(json.dumps(explain_json(result, namespace, pod, catalog), indent=2))
    else:
        print(explain_text(result, namespace, pod, catalog))
    return 0 if result.decision.allowed else 1


def _explain_existing(args: argparse.Namespace, name: str, catalog: Catalog) -> int:
    from ..cluster.loading import InputError
    from ..cluster.query import Refused, read_pod, read_snapshot
    from ..core.reports.pod_report import build_pod_report, can_run_now, render_pod_json, render_pod_text

    if args.nodes:
        raise InputError(f"{args.pod} is read from the cluster, with the cluster's inventory: drop --nodes")
    connection = connect_cluster(args)
    namespace = args.namespace or connection.namespace or "default"
    pod = read_pod(connection.api, namespace, name)
    if args.catalog_file is None and args.scheduler_name is None:
        catalog = _installed_catalog(connection, args.install_namespace, catalog)
    try:
        report = build_pod_report(pod, read_snapshot(connection.api, catalog), catalog, time.time())
    except Refused:  # a tenant: what its namespace's rights show, and the Pod's node where it may get it
        node = (pod.get("spec") or {}).get("nodeName")
        report = build_pod_report(pod, _one_node(connection, catalog, node), catalog, time.time(), view="namespace")
    print(render_pod_json(report) if args.output == "json" else render_pod_text(report))
    return 0 if can_run_now(report) else 1


def _installed_catalog(connection: Connection, install_namespace: str | None, builtin: Catalog) -> Catalog:
    """The catalog and scheduler names the install's webhook runs with; the built-in ones, said so, if unreadable."""
    from ..cluster.query import ClusterError, read_published
    from ..core.catalog.model import CatalogError
    from ..core.published.public import INSTALL_NAMESPACE, PUBLISHED_CONFIGMAP, catalog_of

    install_namespace = install_namespace or INSTALL_NAMESPACE
    try:
        return catalog_of(read_published(connection.api, install_namespace), f"{install_namespace}/{PUBLISHED_CONFIGMAP}")
    except (ClusterError, CatalogError) as exc:
        print(f"gpuclass: {exc}; judging with the built-in catalog (give --config and --scheduler-name for yours)",
              file=sys.stderr)
        return builtin


def _one_node(connection: Connection, catalog: Catalog, node: str | None) -> Snapshot:
    """The inventory of the Pod's node alone; empty where there is none or the user may not get it."""
    from ..cluster.query import ClusterError, read_node
    from ..core.view.inventory import Reduced, fixed_snapshot

    empty = fixed_snapshot(catalog, Reduced((), (), (), (), ()))
    if not node:
        return empty
    try:
        return read_node(connection.api, catalog, node)
    except ClusterError:
        return empty


COMMAND = Command("explain", add_parser, run)
