"""One-shot reads of the live cluster for the command line: `gpuclass inventory`, `gpuclass explain`.

Connects as kubectl does (--kubeconfig, else $KUBECONFIG, else ~/.kube/config, with --context; in a
Pod without any of those, the service account), lists Nodes, Namespaces and bound, unfinished GPU
Pods once with the watch's own reduction (watch.LiveInventory.read_once), and reads single Pods.
Every failure to reach or use the API becomes a ClusterError with one line to print: a command
line tool that answers a typo in a context name with a traceback is not one people trust.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from ..core.catalog.model import Catalog
from ..core.view.inventory import fixed_snapshot, reduce_objects
from ..core.view.snapshot import Snapshot
from ..core.published.public import PUBLISHED_CONFIGMAP
from .loading import InputError
from .watch import SERVICE_ACCOUNT_TOKEN, LiveInventory, check_kube_config

DEFAULT_KUBECONFIG = os.path.join("~", ".kube", "config")
REQUEST_TIMEOUT_SECONDS = 30


class ClusterError(InputError):
    """The cluster cannot be reached or used; the message is one line that says why."""


class Refused(ClusterError):
    """The API server refused the read (403): the user's rights do not reach it."""


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and os.path.exists(SERVICE_ACCOUNT_TOKEN)


SERVICE_ACCOUNT_NAMESPACE = os.path.join(os.path.dirname(SERVICE_ACCOUNT_TOKEN), "namespace")


@dataclass(frozen=True)
class Connection:
    api: kubernetes.client.CoreV1Api
    namespace: str | None  # the context's namespace: kubectl's default for -n


def client_configuration(kubeconfig: str | None, context: str | None) -> tuple[kubernetes.client.Configuration, str | None]:
    """The client configuration kubectl would use for these flags and this environment, and its namespace."""
    if kubeconfig:
        if not os.path.exists(kubeconfig):
            raise ClusterError(f"--kubeconfig {kubeconfig}: no such file")
        source, paths = f"--kubeconfig {kubeconfig}", kubeconfig
    elif os.environ.get("KUBECONFIG"):
        paths = os.environ["KUBECONFIG"]
        source = f"KUBECONFIG={paths}"
        if not any(os.path.exists(p) for p in paths.split(os.pathsep) if p):
            raise ClusterError(f"{source}: no such file")
    elif os.path.exists(os.path.expanduser(DEFAULT_KUBECONFIG)):
        paths = os.path.expanduser(DEFAULT_KUBECONFIG)
        source = paths
    elif _in_cluster() and context is None:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as fh:
            return check_kube_config(None), fh.read().strip() or None
    else:
        raise ClusterError(
            "no kubeconfig: give --kubeconfig PATH or set KUBECONFIG (or --nodes NODES.yaml for a file inventory)"
        )
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(config_file=paths, context=context, client_configuration=configuration)
    except Exception as exc:  # the loader raises several kinds (ConfigException, ValueError, YAML errors)
        raise ClusterError(_config_problem(source, paths, context, exc)) from None
    contexts, current = kubernetes.config.list_kube_config_contexts(config_file=paths)
    chosen = next((c for c in contexts if c["name"] == (context or current["name"])), current)
    return configuration, (chosen.get("context") or {}).get("namespace") or None


def _config_problem(source: str, paths: str, context: str | None, exc: Exception) -> str:
    try:
        contexts, current = kubernetes.config.list_kube_config_contexts(config_file=paths)
    except Exception:
        return f"{source}: {_one_line(str(exc))}"
    names = [c["name"] for c in contexts]
    if context is not None and context not in names:
        return f"{source}: no context {context!r}; contexts: {', '.join(names) or '(none)'}"
    if context is None and not current:
        return f"{source}: no current context; give --context NAME (contexts: {', '.join(names) or '(none)'})"
    return f"{source}: {_one_line(str(exc))}"


def connect(kubeconfig: str | None, context: str | None) -> Connection:
    configuration, namespace = client_configuration(kubeconfig, context)
    # one try per request: a command line waits for nobody, and urllib3 would log every retry
    configuration.retries = 0
    return Connection(kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration)), namespace)


def _host(api: kubernetes.client.CoreV1Api) -> str:
    return str(api.api_client.configuration.host)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 300 else line[:297] + "..."


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error: urllib3 wraps `Connection refused` in two layers of pool and host detail."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__ or getattr(exc, "reason", None)
        if not isinstance(inner, BaseException) or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _api_message(exc: ApiException) -> str:
    try:
        message = json.loads(exc.body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


@contextlib.contextmanager
def _reporting(api: kubernetes.client.CoreV1Api, doing: str) -> Iterator[None]:
    try:
        yield
    except ClusterError:
        raise
    except ApiException as exc:
        if exc.status is None or exc.status == 0:  # the client's own errors carry no HTTP status
            raise ClusterError(f"{doing} at {_host(api)}: {_one_line(str(exc.reason))}") from None
        raise (Refused if exc.status == 403 else ClusterError)(f"{doing} at {_host(api)}: the API server answered {_one_line(_api_message(exc))}") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        cause = _root_cause(exc)
        reason = getattr(cause, "strerror", None) or str(cause)
        raise ClusterError(f"{doing}: cannot reach the API server at {_host(api)}: {_one_line(str(reason))}") from None
    except ValueError as exc:  # a body that is not the JSON of a list
        raise ClusterError(f"{doing} at {_host(api)}: unexpected answer: {_one_line(str(exc))}") from None


def read_snapshot(api: kubernetes.client.CoreV1Api, catalog: Catalog) -> Snapshot:
    """Nodes, Namespaces and the GPUs bound, unfinished Pods hold, as one list of each reads them now."""
    with _reporting(api, "listing Nodes, Namespaces and GPU Pods"):
        return LiveInventory(catalog, api, watch_pods=True).read_once()


def _read_object(api: kubernetes.client.CoreV1Api, kind: str, key: str, read: Callable[..., Any],
                 missing: str = "") -> dict[str, Any]:
    """One object as the API server holds it, as plain JSON; a 404 says `kind key not found` and `missing`."""
    with _reporting(api, f"reading {kind} {key}"):
        try:
            # the raw response (its .data), as the watch reads: no generated model objects
            response: Any = read(_preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                raise ClusterError(f"{kind} {key} not found at {_host(api)}{missing}") from None
            raise
        obj: dict[str, Any] = json.loads(response.data)
        return obj


def read_pod(api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    """The Pod as the API server holds it, as plain JSON."""
    return _read_object(api, "pod", f"{namespace}/{name}", functools.partial(api.read_namespaced_pod, name, namespace))


def read_workload(api: kubernetes.client.CoreV1Api, group: str, version: str, plural: str, namespace: str,
                  name: str) -> dict[str, Any]:
    """A namespaced object of an API group (a Job, a JobSet...) as the API server holds it, as plain JSON."""
    objects = kubernetes.client.CustomObjectsApi(api.api_client)  # any group's path, not only custom resources'
    return _read_object(api, plural, f"{namespace}/{name}", functools.partial(
        objects.get_namespaced_custom_object, group, version, namespace, plural, name))


def read_published(api: kubernetes.client.CoreV1Api, namespace: str) -> dict[str, Any]:
    """The data of the install's published settings (core/published/public.py), which every signed-in user may read."""
    configmap = _read_object(api, "configmap", f"{namespace}/{PUBLISHED_CONFIGMAP}",
                             functools.partial(api.read_namespaced_config_map, PUBLISHED_CONFIGMAP, namespace),
                             f": no gpu-class webhook runs in {namespace} (give --install-namespace)")
    data = configmap.get("data")
    return data if isinstance(data, dict) else {}


def read_node(api: kubernetes.client.CoreV1Api, catalog: Catalog, name: str) -> Snapshot:
    """An inventory of the one node `name`, no Pods: what a user who may get that node but not list every Pod sees."""
    node = _read_object(api, "node", name, functools.partial(api.read_node, name))
    return fixed_snapshot(catalog, reduce_objects(catalog, [{"kind": "Node", **node}]))
