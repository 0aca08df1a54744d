"""The `gpuclass` command: serve, certs, inventory, explain, review, demo, catalog, kueue, upgrader, label-node; the one
argument parser.

Installed twice: as `gpuclass`, and as `kubectl-gpu_class` so that kubectl runs it as `kubectl gpu-class`.

The top of the import layers (cli > serving > cluster > core, checked by tests/test_architecture.py).
Each command imports what it runs when it runs: `label-node` needs only the standard library, so
`python -S -m webhook.cli label-node --once --dry-run` works on a node with just Python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .serving import logs  # the standard library only

if TYPE_CHECKING:
    from .cluster.query import Connection
    from .core.catalog.model import Catalog
    from .core.view.inventory import Snapshot
    from .core.admission.kueue import Tenant

OUTPUTS = ("table", "wide", "json")  # core.inventory_report.OUTPUTS, without importing PyYAML for label-node
REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = REPO_ROOT / "deploy" / "demo"


def _add_inventory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", dest="catalog_file", help="catalog YAML (default: the built-in catalog)")
    p.add_argument(
        "--nodes", action="append", default=[], metavar="NODES.yaml",
        help="inventory file: `kubectl get nodes -o yaml` output, or Node/Namespace documents (repeatable)",
    )


def _add_scheduler_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler-name", default=None, metavar="NAME",
                   help="the scheduler of the Pods gpu-class places, instead of the catalog's schedulerName "
                        "(the installs that run deploy/scheduler give gpu-class-scheduler)")


def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig of the cluster to ask (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current context)")


def build_parser(prog: str = "gpuclass") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="GPU-type-aware placement for Kubernetes Pods")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the admission webhook over TLS")
    _add_inventory_args(s)
    s.add_argument("--kubeconfig", help="kubeconfig for the live inventory (default: in-cluster service account)")
    s.add_argument("--cert-file", required=True)
    s.add_argument("--key-file", required=True)
    s.add_argument("--bind", default="0.0.0.0:8443", help="HOST:PORT (default 0.0.0.0:8443)")
    s.add_argument("--extender-bind", metavar="HOST:PORT",
                   help="serve the scheduler extender verbs here, to clients with a certificate of --client-ca-file "
                        "(default: not served)")
    s.add_argument("--client-ca-file", help="CA of the scheduler extender's callers (with --extender-bind)")
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--threads", type=int, default=1, help="threads per worker (default 1: see bench/RESULTS.md)")
    s.add_argument("--log-level", default="info", choices=logs.LEVELS)
    _add_scheduler_arg(s)
    s.add_argument("--stock-scheduler", action="append", default=[], metavar="NAME",
                   help="a strict scheduler of the catalog that runs the stock kube-scheduler binary (the "
                        "stock-scheduler install option): it keeps the type order, not gpu-class.io/max-wait, which "
                        "the webhook then drops with a warning (repeatable)")
    s.add_argument("--publish-namespace", metavar="NAMESPACE", default=None,
                   help="write the ConfigMap gpu-class-public there, the catalog and scheduler names gpuclass explain "
                        "reads of this install (default: the Pod's own namespace when run in a Pod, else nowhere; "
                        "'' for nowhere)")

    c = sub.add_parser("certs", help="write a CA, a serving certificate (ca.crt, tls.crt, tls.key) and the "
                                     "scheduler's client certificate for the extender (client.crt, client.key)")
    c.add_argument("--out", required=True, help="directory to write into")
    c.add_argument("--service", default="gpu-class")
    c.add_argument("--namespace", default="gpu-class-system")
    c.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    c.add_argument("--ip", action="append", default=[], help="IP address SAN (repeatable)")
    c.add_argument("--days", type=int, default=365, help="serving and client certificate validity")

    i = sub.add_parser("inventory", help="GPU types, nodes and free GPUs of the cluster, and what each class can place now")
    _add_inventory_args(i)
    _add_cluster_args(i)
    i.add_argument("-o", "--output", choices=OUTPUTS, default="table")

    e = sub.add_parser(
        "explain", help="what the webhook would do for a Pod (POD.yaml), or what it did for one that exists (pod/NAME)"
    )
    e.add_argument("pod", metavar="POD.yaml|pod/NAME")
    _add_inventory_args(e)
    _add_cluster_args(e)
    e.add_argument("-n", "--namespace", default=None,
                   help="namespace of the Pod (default: its metadata.namespace, else the context's, else default)")
    e.add_argument("-o", "--output", choices=("text", "json"), default="text")
    _add_scheduler_arg(e)
    e.add_argument("--install-namespace", default=None, metavar="NAMESPACE",
                   help="where gpu-class runs: pod/NAME is judged with the catalog and scheduler names its webhook "
                        "published there, unless --config or --scheduler-name is given (default gpu-class-system)")

    r = sub.add_parser("review", help="print an AdmissionReview for a Pod, as the API server would send it")
    r.add_argument("pod", metavar="POD.yaml")
    r.add_argument("--namespace", default=None)

    d = sub.add_parser("demo", help="serve the bundled demo inventory on localhost over TLS")
    d.add_argument("--bind", default="127.0.0.1:8443")
    d.add_argument("--certs-dir", default=None, help="where to write the demo certificates (default: certs/demo)")
    d.add_argument("--log-level", default="info", choices=logs.LEVELS)

    c = sub.add_parser("catalog", help="print the built-in catalog (a starting point for --config), or a catalog's "
                                       "types with their facts and its classes (-o table)")
    c.add_argument("--config", dest="catalog_file", help="catalog YAML (default: the built-in catalog)")
    c.add_argument("-o", "--output", choices=("yaml", "table"), default="yaml")

    k = sub.add_parser("kueue", help="print Kueue's ResourceFlavors for the GPU products, the Cohorts that hold "
                                     "their quota, and a ClusterQueue per class (and tenant) that tries them in the "
                                     "class's order")
    _add_inventory_args(k)
    _add_cluster_args(k)
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

    u = sub.add_parser("upgrader", help="move opted-in Pods (gpu-class.io/upgrade: \"true\") up to a better type of "
                                        "their class once it has room: evictions, with leader election")
    u.add_argument("--config", dest="catalog_file", help="catalog YAML (default: the built-in catalog)")
    u.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster service account)")
    u.add_argument("--settle-seconds", type=float, default=60.0,
                   help="how long a better type must have had room before a Pod moves to it")
    u.add_argument("--min-on-node-seconds", type=float, default=300.0, help="how long a Pod runs on its node first")
    u.add_argument("--window-seconds", type=float, default=3600.0,
                   help="a replacement of a Pod moved this long ago or less is not moved")
    u.add_argument("--moves-per-minute", type=int, default=6, help="evictions in the whole cluster per minute")
    u.add_argument("--in-flight-per-workload", type=int, default=1,
                   help="moves of one workload not yet done (Pod leaving, waiting or not Ready) before another")
    u.add_argument("--interval-seconds", type=float, default=10.0, help="time between passes")
    u.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "gpu-class-system"))
    u.add_argument("--lease-name", default="gpu-class-upgrader")
    u.add_argument("--metrics-port", type=int, default=9102, help="GET /metrics on this port (0: none)")
    u.add_argument("--dry-run", action="store_true", help="decide and log, evict nothing")
    u.add_argument("--log-level", default="info", choices=logs.LEVELS)

    ln = sub.add_parser("label-node", help="label this node's GPU type from nvidia-smi")
    ln.add_argument("--node", default=os.environ.get("NODE_NAME"), help="node name (default: $NODE_NAME)")
    ln.add_argument("--interval-seconds", type=float, default=300.0)
    ln.add_argument("--once", action="store_true", help="label once and exit")
    ln.add_argument("--dry-run", action="store_true", help="print the patch, change nothing")
    ln.add_argument("--kubeconfig", default=None)
    ln.add_argument("--log-level", default="info", choices=logs.LEVELS)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "gpuclass") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.command == "label-node":  # raises neither error below, and must not need PyYAML to catch them
        return cmd_label_node(args)
    from .cluster.loading import InputError
    from .core.catalog.model import CatalogError

    try:
        return int(COMMANDS[args.command](args) or 0)
    except (CatalogError, InputError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


KUBECTL_PLUGIN = "kubectl gpu-class"
NAMESPACED_COMMANDS = ("explain", "review")


def kubectl_argv(argv: Sequence[str]) -> list[str]:
    """The `gpuclass` arguments of `kubectl gpu-class ARGV`: kubectl hands a plugin every argument after its name,
    with kubectl's own flags (--kubeconfig, --context, -n) wherever the user typed them, also before the subcommand."""
    globals_parser = argparse.ArgumentParser(add_help=False)
    globals_parser.add_argument("--kubeconfig")
    globals_parser.add_argument("--context")
    globals_parser.add_argument("-n", "--namespace")
    given, rest = globals_parser.parse_known_args(list(argv))
    if rest and rest[0] not in NAMESPACED_COMMANDS:
        given.namespace = None  # kubectl habit: `-n` on a cluster-wide command changes nothing
    flags = [f"--{k}={v}" for k, v in vars(given).items() if v is not None]
    if not rest or rest[0].startswith("-"):  # no subcommand (or --help): let the parser say what exists
        return [*rest, *flags]
    return [rest[0], *flags, *rest[1:]]


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl gpu-class ...`, the same commands as a kubectl plugin."""
    return main(kubectl_argv(sys.argv[1:] if argv is None else argv), prog=KUBECTL_PLUGIN)


def cmd_serve(args: argparse.Namespace) -> int:
    from .cluster.loading import InputError
    from .serving.config import ServeConfig
    from .serving.server import serve

    if args.workers < 1 or args.threads < 1:
        raise InputError("--workers and --threads must be at least 1")
    serve(
        ServeConfig(
            cert_file=args.cert_file,
            key_file=args.key_file,
            bind=args.bind,
            extender_bind=args.extender_bind,
            client_ca_file=args.client_ca_file,
            catalog_file=args.catalog_file,
            scheduler_name=args.scheduler_name,
            stock_schedulers=tuple(args.stock_scheduler),
            nodes_files=tuple(args.nodes),
            kubeconfig=args.kubeconfig,
            publish_namespace=_publish_namespace(args.publish_namespace),
            workers=args.workers,
            threads=args.threads,
            log_level=args.log_level,
        )
    )
    return 0


def _publish_namespace(given: str | None) -> str | None:
    """--publish-namespace, else the namespace of the Pod this runs in, else None."""
    from .cluster.query import SERVICE_ACCOUNT_NAMESPACE

    if given is not None:
        return given or None
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def write_certs(out: str, dns: list[str], ips: list[str], days: int = 365) -> None:
    from .serving import certs

    bundle = certs.generate(dns, ips, valid_days=days)
    os.makedirs(out, exist_ok=True)
    for name, data, mode in (
        ("ca.crt", bundle.ca_crt, 0o644),
        ("tls.crt", bundle.tls_crt, 0o644),
        ("tls.key", bundle.tls_key, 0o600),
        ("client.crt", bundle.client_crt, 0o644),
        ("client.key", bundle.client_key, 0o600),
    ):
        path = os.path.join(out, name)
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(path + ".tmp", path)


def cmd_certs(args: argparse.Namespace) -> int:
    from .cluster.loading import InputError
    from .serving import certs

    dns = certs.service_dns_names(args.service, args.namespace) + list(args.dns)
    try:
        write_certs(args.out, dns, list(args.ip), args.days)
    except ValueError as exc:  # a bad --ip
        raise InputError(str(exc)) from None
    print(f"wrote {args.out}/ca.crt, tls.crt, tls.key for {', '.join(dns + list(args.ip))}, "
          f"and client.crt, client.key for the scheduler's calls to the extender")
    print(f"CA bundle for the webhook configuration: base64 -w0 {args.out}/ca.crt")
    return 0


def admission_request(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": metadata.get("name", ""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "gpuclass-cli"},
            "object": {**pod, "metadata": {**metadata, "namespace": namespace}},
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def _pod_namespace(pod: dict[str, Any], given: str | None) -> str:
    return given or str((pod.get("metadata") or {}).get("namespace") or "default")


def cmd_review(args: argparse.Namespace) -> int:
    from .cluster.loading import read_pod

    pod = read_pod(args.pod)
    print(json.dumps(admission_request(pod, _pod_namespace(pod, args.namespace))))
    return 0


def _catalog(args: argparse.Namespace) -> Catalog:
    from .serving.config import ServeConfig
    from .serving.server import load_catalog

    return load_catalog(ServeConfig("", "", catalog_file=args.catalog_file,
                                    scheduler_name=getattr(args, "scheduler_name", None)))


def _connect(args: argparse.Namespace) -> Connection:
    from .cluster.loading import InputError
    from .cluster.query import connect

    if args.nodes:
        raise InputError("give --nodes (a file inventory) or --kubeconfig/--context (the cluster), not both")
    return connect(args.kubeconfig, args.context)


def _inventory(args: argparse.Namespace, catalog: Catalog) -> tuple[Snapshot, Connection | None]:
    """The file inventory of --nodes, else one read of the cluster (and the connection, to read more)."""
    from .cluster.loading import load_snapshot
    from .cluster.query import read_snapshot

    if args.nodes and not (args.kubeconfig or args.context):
        return load_snapshot(tuple(args.nodes), catalog), None
    connection = _connect(args)
    return read_snapshot(connection.api, catalog), connection


def cmd_inventory(args: argparse.Namespace) -> int:
    from .core.reports.inventory_report import build_report, render

    catalog = _catalog(args)
    snapshot, _ = _inventory(args, catalog)
    print(render(build_report(snapshot, catalog), args.output))
    return 0


POD_PREFIXES = ("pod/", "pods/", "po/")


def _existing_pod_name(arg: str) -> str | None:
    """NAME of `pod/NAME`, kubectl's way to name an object; a file of that path is still a file."""
    prefix = next((p for p in POD_PREFIXES if arg.startswith(p)), None)
    return arg[len(prefix):] if prefix and not os.path.exists(arg) and "/" not in arg[len(prefix):] else None


def cmd_explain(args: argparse.Namespace) -> int:
    from .cluster.loading import InputError, read_pod

    catalog = _catalog(args)
    name = _existing_pod_name(args.pod)
    if name is not None:
        return _explain_existing(args, name, catalog)
    pod = read_pod(args.pod)
    snapshot, connection = _inventory(args, catalog)
    namespace = args.namespace or (pod.get("metadata") or {}).get("namespace") or (connection and connection.namespace)
    namespace = str(namespace or "default")
    if connection is not None and snapshot.namespace(namespace) is None:
        raise InputError(f"namespace {namespace} does not exist in the cluster; give -n NAMESPACE")
    return _explain_file_pod(args, pod, namespace, snapshot, catalog)


def _explain_file_pod(args: argparse.Namespace, pod: dict[str, Any], namespace: str, snapshot: Snapshot,
                      catalog: Catalog) -> int:
    from .core.reports.explain import explain_json, explain_text
    from .core.view.inventory import placing_catalog
    from .core.admission.review import Request, review_pod

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
    from .cluster.loading import InputError
    from .cluster.query import Refused, read_pod, read_snapshot
    from .core.reports.pod_report import build_pod_report, can_run_now, render_pod_json, render_pod_text

    if args.nodes:
        raise InputError(f"{args.pod} is read from the cluster, with the cluster's inventory: drop --nodes")
    connection = _connect(args)
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
    from .cluster.query import ClusterError, read_published
    from .core.catalog.model import CatalogError
    from .core.published.public import INSTALL_NAMESPACE, PUBLISHED_CONFIGMAP, catalog_of

    install_namespace = install_namespace or INSTALL_NAMESPACE
    try:
        return catalog_of(read_published(connection.api, install_namespace), f"{install_namespace}/{PUBLISHED_CONFIGMAP}")
    except (ClusterError, CatalogError) as exc:
        print(f"gpuclass: {exc}; judging with the built-in catalog (give --config and --scheduler-name for yours)",
              file=sys.stderr)
        return builtin


def _one_node(connection: Connection, catalog: Catalog, node: str | None) -> Snapshot:
    """The inventory of the Pod's node alone; empty where there is none or the user may not get it."""
    from .cluster.query import ClusterError, read_node
    from .core.view.inventory import Reduced, fixed_snapshot

    empty = fixed_snapshot(catalog, Reduced((), (), (), (), ()))
    if not node:
        return empty
    try:
        return read_node(connection.api, catalog, node)
    except ClusterError:
        return empty


def cmd_catalog(args: argparse.Namespace) -> int:
    from .core.catalog.model import default_catalog_text
    from .core.catalog.table import render_catalog_table

    if args.output == "table":
        sys.stdout.write(render_catalog_table(_catalog(args)))
    elif args.catalog_file:
        with open(args.catalog_file, encoding="utf-8") as fh:
            sys.stdout.write(fh.read())
    else:
        sys.stdout.write(default_catalog_text())
    return 0


def cmd_kueue(args: argparse.Namespace) -> int:
    import yaml

    from .cluster.loading import InputError
    from .core.admission.kueue import kueue_objects, supply_from_catalog, supply_from_snapshot

    catalog = _catalog(args)
    tenants = _tenants(args.tenant, tuple(catalog.classes), args.cohort)
    if args.nodes or args.kubeconfig or args.context:
        if args.quota is not None or args.label_key is not None:
            raise InputError("--quota and --label-key are for a catalog alone: the cluster's nodes give the "
                             "products, their label keys and their GPUs")
        supply = supply_from_snapshot(catalog, _inventory(args, catalog)[0])
    else:
        if (args.quota or 0) < 0:
            raise InputError("--quota must be 0 or more GPUs")
        if args.label_key is not None and args.label_key not in catalog.product_labels:
            raise InputError(f"--label-key {args.label_key} is none of the catalog's productLabels "
                             f"({', '.join(catalog.product_labels)})")
        supply = supply_from_catalog(catalog, args.quota or 0, args.label_key)
    objects, notes = kueue_objects(catalog, supply, tenants, args.cohort)
    header = ["# Kueue objects for gpu-class (docs/operators/kueue-and-autoscalers.md): a ResourceFlavor per GPU",
              "# product label, Cohorts holding its GPUs as quota once, a ClusterQueue per class trying them in the",
              "# class's order. Add a resource group for cpu and memory if your Pods request them.",
              *(f"# not here: {n}" for n in notes)]
    sys.stdout.write("\n".join(header) + "\n" + yaml.safe_dump_all(objects, sort_keys=False))
    return 0


def _tenants(given: Sequence[str], classes: Sequence[str], root: str) -> tuple[Tenant, ...]:
    """The --tenant arguments, refused where their objects could not all exist side by side."""
    import re

    from .cluster.loading import InputError
    from .core.admission.kueue import Tenant, queue_name

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


def cmd_demo(args: argparse.Namespace) -> int:
    from .cluster.loading import InputError
    from .serving.config import ServeConfig
    from .serving.server import serve

    nodes = [str(DEMO_DIR / "nodes.yaml"), str(DEMO_DIR / "namespaces.yaml")]
    for path in nodes:
        if not os.path.exists(path):
            raise InputError(f"demo inventory {path} not found; run `gpuclass demo` from a checkout of gpu-class")
    certs_dir = args.certs_dir or str(REPO_ROOT / "certs" / "demo")
    host, _, port = args.bind.rpartition(":")
    write_certs(certs_dir, ["localhost"], ["127.0.0.1"])
    url = f"https://{'localhost' if host in ('127.0.0.1', '0.0.0.0', '') else host}:{port}"
    pod = DEMO_DIR / "pod-high.yaml"
    print(
        f"gpu-class demo: serving {DEMO_DIR / 'nodes.yaml'} on {url}/mutate (CA: {certs_dir}/ca.crt)\n"
        f"Send it a Pod as the API server would, from another shell:\n"
        f"  .venv/bin/gpuclass review {pod} --namespace ml-team | curl -s --cacert {certs_dir}/ca.crt "
        f"-H 'Content-Type: application/json' --data-binary @- {url}/mutate\n"
        f"Or ask why: .venv/bin/gpuclass explain {pod} --namespace ml-team --nodes {nodes[0]} --nodes {nodes[1]}\n",
        flush=True,
    )
    serve(
        ServeConfig(
            cert_file=f"{certs_dir}/tls.crt", key_file=f"{certs_dir}/tls.key", bind=args.bind,
            nodes_files=tuple(nodes), workers=1, threads=2, log_level=args.log_level,
        )
    )
    return 0


def cmd_label_node(args: argparse.Namespace) -> int:
    from .cluster.labeller import main_label_node

    logs.configure(args.log_level)
    return main_label_node(args)


def cmd_upgrader(args: argparse.Namespace) -> int:
    import threading

    from .cluster.loading import InputError
    from .cluster.upgrader import Upgrader, UpgraderConfig
    from .cluster.watch import start_live_inventory
    from .core.after_bind.upgrade import UpgradeSettings
    from .serving.metrics import UpgradeMetrics, serve_upgrade_metrics

    if min(args.moves_per_minute, args.in_flight_per_workload) < 1 or args.interval_seconds <= 0:
        raise InputError("--moves-per-minute and --in-flight-per-workload must be at least 1, --interval-seconds "
                         "more than 0")
    logs.configure(args.log_level)
    catalog = _catalog(args)
    inventory = start_live_inventory(catalog, kubeconfig=args.kubeconfig)
    metrics = UpgradeMetrics(catalog)
    if args.metrics_port:
        serve_upgrade_metrics(args.metrics_port)
    settings = UpgradeSettings(settle_seconds=args.settle_seconds, min_on_node_seconds=args.min_on_node_seconds,
                               window_seconds=args.window_seconds, moves_per_minute=args.moves_per_minute,
                               in_flight_per_workload=args.in_flight_per_workload)
    config = UpgraderConfig(settings=settings, interval_seconds=args.interval_seconds,
                            lease_namespace=args.lease_namespace, lease_name=args.lease_name, dry_run=args.dry_run)
    upgrader = Upgrader(inventory.api.api_client, catalog, inventory.snapshot, config, metrics)
    stop = threading.Event()
    try:
        upgrader.run(stop)
    except KeyboardInterrupt:
        stop.set()
    finally:
        inventory.stop()
    return 0


COMMANDS = {
    "upgrader": cmd_upgrader,
    "serve": cmd_serve,
    "certs": cmd_certs,
    "inventory": cmd_inventory,
    "explain": cmd_explain,
    "review": cmd_review,
    "demo": cmd_demo,
    "kueue": cmd_kueue,
    "catalog": cmd_catalog,
    "label-node": cmd_label_node,
}


if __name__ == "__main__":
    sys.exit(main())
