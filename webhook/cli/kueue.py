"""`gpuclass kueue`: Kueue's objects for the GPU products: a ResourceFlavor each, the Cohorts that hold their
quota, and a ClusterQueue per class (and tenant) that tries them in the class's order."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Sequence

from .common import Command, add_cluster_args, add_inventory_args, read_catalog, read_inventory

if TYPE_CHECKING:
    from ..core.admission.kueue import Tenant
    from .common import Subparsers


def add_parser(sub: Subparsers) -> None:
    k = sub.add_parser("kueue", help="print Kueue's ResourceFlavors for the GPU products, the Cohorts that hold "
                                     "their quota, and a ClusterQueue per class (and tenant) that tries them in the "
                                     "class's order")
    add_inventory_args(k)
    add_cluster_args(k)
    k.add_argument("--quota", type=int, default=None, metavar="GPUS",
                   help="without a cluster to read: the GPUs of each flavor, shared by the tenants (default 0: "
                        "admits nothing until you set it); with one, its nodes' GPUs are the quota")
    k.add_argument("--label-key", default=None, metavar="KEY",
                   help="without a cluster to read: the product label your nodes carry (default: the catalog's "
                        "first productLabels key)")
    k.add_argument("--tenant", action="append", default=[], metavar="NAME=NAMESPACE[,NAMESPACE...]",
                   help="a team whose namespaces get LocalQueues of its own, sharing one cohort with the other "
                        "tenants (repeatable)")
    k.add_argument("--cohort", default="gpu-class", metavar="NAME",
                   help="the root cohort, and the start of every cohort's and ClusterQueue's name (default gpu-class)")


def run(args: argparse.Namespace) -> int:
    import yaml

    from ..cluster.loading import InputError
    from ..core.admission.kueue import kueue_objects, supply_from_catalog, supply_from_snapshot
    from ..core.view.snapshot import placing_catalog

    catalog = read_catalog(args)
    tenants = _tenants(args.tenant, tuple(catalog.classes), args.cohort)
    namespaces = None
    if args.nodes or args.kubeconfig or args.context:
        if args.quota is not None or args.label_key is not None:
            raise InputError("--quota and --label-key are for a catalog alone: the cluster's nodes give the "
                             "products, their label keys and their GPUs")
        snapshot = read_inventory(args, catalog)[0]
        # the types the nodes' labels make of products no type claims, in the classes they meet: as placed
        catalog, namespaces = placing_catalog(catalog, snapshot), snapshot.namespaces
        supply = supply_from_snapshot(catalog, snapshot)
    else:
        if (args.quota or 0) < 0:
            raise InputError("--quota must be 0 or more GPUs")
        if args.label_key is not None and args.label_key not in catalog.product_labels:
            raise InputError(f"--label-key {args.label_key} is none of the catalog's productLabels "
                             f"({', '.join(catalog.product_labels)})")
        supply = supply_from_catalog(catalog, args.quota or 0, args.label_key)
    objects, notes = kueue_objects(catalog, supply, tenants, args.cohort, namespaces)
    header = ["# Kueue objects for gpu-class (docs/operators/kueue-and-autoscalers.md): a ResourceFlavor per GPU",
              "# product label, Cohorts holding its GPUs as quota once, a ClusterQueue per class trying them in the",
              "# class's order. Add a resource group for cpu and memory if your Pods request them.",
              *(f"# not here: {n}" for n in notes)]
    sys.stdout.write("\n".join(header) + "\n" + yaml.safe_dump_all(objects, sort_keys=False))
    for note in notes:  # in the output's comments, and said where a person running it sees it
        print(f"gpuclass kueue: not here: {note}", file=sys.stderr)
    return 0


def _tenants(given: Sequence[str], classes: Sequence[str], root: str) -> tuple[Tenant, ...]:
    """The --tenant arguments, refused where their objects could not all exist side by side."""
    import re

    from ..cluster.loading import InputError
    from ..core.admission.kueue import Tenant, queue_name

    dns_label = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
    if not dns_label.fullmatch(root):
        raise InputError(f"--cohort {root}: a lower-case DNS label")
    tenants = []
    for text in given:
        name, _, namespaces = text.partition("=")
        listed = tuple(n.strip() for n in namespaces.split(",") if n.strip())
        if not dns_label.fullmatch(name) or not listed or not all(dns_label.fullmatch(n) for n in listed):
            raise InputError(f"--tenant {text}: write NAME=NAMESPACE[,NAMESPACE...], each a lower-case DNS label")
        tenants.append(Tenant(name, listed))
    seen: dict[str, str] = {}
    for tenant in tenants:
        for owned in [*(f"namespace {n}" for n in tenant.namespaces),
                      *(f"ClusterQueue {queue_name(c, tenant, root)}" for c in classes)]:
            if owned in seen:
                raise InputError(f"--tenant {tenant.name} and {seen[owned]} both have {owned}")
            seen[owned] = tenant.name
    return tuple(tenants)


COMMAND = Command("kueue", add_parser, run)
