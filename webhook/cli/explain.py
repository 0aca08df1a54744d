"""`gpuclass explain`: what the webhook would do for a Pod of a file, or what it did for one that exists
(pod/NAME), and why."""

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
    from ..core.catalog.model import Catalog
    from ..core.view.snapshot import Snapshot
    from .common import Subparsers

POD_PREFIXES = ("pod/", "pods/", "po/")


def add_parser(sub: Subparsers) -> None:
    e = sub.add_parser(
        "explain", help="what the webhook would do for a Pod (POD.yaml), or what it did for one that exists (pod/NAME)"
    )
    e.add_argument("pod", metavar="POD.yaml|pod/NAME")
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


def run(args: argparse.Namespace) -> int:
    from ..cluster.loading import InputError, read_pod

    catalog = read_catalog(args)
    name = _existing_pod_name(args.pod)
    if name is not None:
        return _explain_existing(args, name, catalog)
    pod = read_pod(args.pod)
    snapshot, connection = read_inventory(args, catalog)
    namespace = args.namespace or (pod.get("metadata") or {}).get("namespace") or (connection and connection.namespace)
    namespace = str(namespace or "default")
    if connection is not None and snapshot.namespace(namespace) is None:
        raise InputError(f"namespace {namespace} does not exist in the cluster; give -n NAMESPACE")
    return _explain_file_pod(args, pod, namespace, snapshot, catalog)


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
