"""Writing the install's published settings (core/published/public.py) to the API server, and reading them back.

Each webhook worker writes the ConfigMap once at start, on a thread of its own, retrying with capped
backoff until it holds the worker's data: the API server may not be reachable yet, and serving never
waits on it. It writes only when the data differs, so the workers and replicas of one release
write it once between them; during a rollout the new release's workers write last.

Each worker also keeps the tenant boundary's table (core/published/boundary.py) current, in a BoundaryTable (a
custom resource: deploy/components/backstop/boundary-table.yaml says why not a ConfigMap): unlike the
settings it follows the live view, so it is checked again every few seconds. What it holds is the union of the
tables its writers wrote lately (core/published/writers.py), so that two versions serving at once, or two views a
moment apart, do not undo each other.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from ..core.published.boundary import BOUNDARY_CONFIGMAP, BoundaryError
from ..core.published.public import PUBLISHED_CONFIGMAP
from ..core.published.writers import next_stored, read_writers

log = logging.getLogger(__name__)

FIRST_RETRY_SECONDS = 1.0
LAST_RETRY_SECONDS = 300.0
REQUEST_TIMEOUT_SECONDS = 30
# the BoundaryTable read and written again at once when another worker wrote between (409)
WRITE_ATTEMPTS = 3
LABELS = {"app.kubernetes.io/name": "gpu-class", "app.kubernetes.io/part-of": "gpu-class"}


def write_published(api: kubernetes.client.CoreV1Api, namespace: str, data: dict[str, str],
                    name: str = PUBLISHED_CONFIGMAP) -> bool:
    """Make the ConfigMap `name` hold `data`; True when it wrote, False when it already did."""
    try:
        response: Any = api.read_namespaced_config_map(name, namespace, _preload_content=False,
                                                       _request_timeout=REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status != 404:
            raise
        body: Any = {"metadata": {"name": name, "namespace": namespace, "labels": LABELS}, "data": data}
        api.create_namespaced_config_map(namespace, body, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        return True
    current = json.loads(response.data)
    if current.get("data") == data:
        return False
    metadata = current.get("metadata") or {}
    # a replace with the resourceVersion read: a writer that raced us gets 409 and reads again
    replaced: Any = {"metadata": {"name": name, "namespace": namespace,
                                  "labels": {**(metadata.get("labels") or {}), **LABELS},
                                  "resourceVersion": metadata.get("resourceVersion")}, "data": data}
    api.replace_namespaced_config_map(name, namespace, replaced, _request_timeout=REQUEST_TIMEOUT_SECONDS)
    return True


BOUNDARY_GROUP, BOUNDARY_VERSION, BOUNDARY_PLURAL = "gpu-class.io", "v1alpha1", "boundarytables"


def write_boundary_table(api: kubernetes.client.CustomObjectsApi, namespace: str, data: dict[str, str],
                         name: str = BOUNDARY_CONFIGMAP, now: Callable[[], float] = time.time) -> bool:
    """Make the BoundaryTable `name` (deploy/components/backstop/boundary-table.yaml) hold `data` among the tables
    written lately (core/published/writers.py); True when it wrote. A custom resource, not a ConfigMap: the API
    server stops reading ConfigMap parameters for good once no binding names that kind, custom resources it
    follows (boundary-table.yaml says more)."""
    where = (BOUNDARY_GROUP, BOUNDARY_VERSION, namespace, BOUNDARY_PLURAL)
    for attempt in range(WRITE_ATTEMPTS):
        try:
            current: Any = api.get_namespaced_custom_object(*where, name, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status != 404:
                raise
            current = None
        stored = next_stored(None if current is None else current.get("data") or {},
                             read_writers((current or {}).get("writers")), data, int(now()))
        if stored is None:
            return False
        metadata = (current or {}).get("metadata") or {}
        body: Any = {"apiVersion": f"{BOUNDARY_GROUP}/{BOUNDARY_VERSION}", "kind": "BoundaryTable",
                     "metadata": {"name": name, "namespace": namespace,
                                  "labels": {**(metadata.get("labels") or {}), **LABELS}},
                     "data": stored.data, "writers": stored.writers_field()}
        try:
            if current is None:
                api.create_namespaced_custom_object(*where, body, _request_timeout=REQUEST_TIMEOUT_SECONDS)
            else:
                # with the resourceVersion read: another worker that wrote meanwhile is read and joined, not undone
                body["metadata"]["resourceVersion"] = metadata.get("resourceVersion")
                api.replace_namespaced_custom_object(*where, name, body, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status != 409 or attempt == WRITE_ATTEMPTS - 1:
                raise
            continue
        return True
    return False


def publish(api: kubernetes.client.CoreV1Api, namespace: str, data: dict[str, str], stop: threading.Event,
            write: Callable[[kubernetes.client.CoreV1Api, str, dict[str, str]], bool] = write_published) -> bool:
    """Write until written or stopped; True once the ConfigMap holds `data`."""
    delay, said = FIRST_RETRY_SECONDS, set()
    where = f"{namespace}/{PUBLISHED_CONFIGMAP}"
    while not stop.is_set():
        try:
            wrote = write(api, namespace, data)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            status = getattr(exc, "status", None)
            if status not in said:  # once per kind of failure, not once per retry
                said.add(status)
                hint = (": the install's RBAC lets the webhook write it (deploy/base/rbac.yaml, Role gpu-class-publish)"
                        if status == 403 else "")
                log.warning("cannot write %s, what gpuclass explain reads of this install (%s)%s; retrying",
                            where, getattr(exc, "reason", None) or exc, hint)
        else:
            log.info("%s %s", "published the catalog and scheduler names to" if wrote else "already published:", where)
            return True
        stop.wait(delay)
        delay = min(delay * 2, LAST_RETRY_SECONDS)
    return False


def start_publishing(api: kubernetes.client.CoreV1Api, namespace: str, data: dict[str, str]) -> threading.Event:
    """Publish on a daemon thread; the event stops it."""
    stop = threading.Event()
    threading.Thread(target=publish, args=(api, namespace, data, stop), name="publish", daemon=True).start()
    return stop


BOUNDARY_CHECK_SECONDS = 2.0
# then the ConfigMap is read again even if the table did not change: one deleted or overwritten (by an apply
# of manifests that hold it) is written back within this
BOUNDARY_REREAD_SECONDS = 30.0


def keep_boundary(api: kubernetes.client.CustomObjectsApi, namespace: str, data_of: Callable[[], dict[str, str]],
                  stop: threading.Event, check_seconds: float = BOUNDARY_CHECK_SECONDS,
                  reread_seconds: float = BOUNDARY_REREAD_SECONDS,
                  write: Callable[..., bool] = write_boundary_table) -> None:
    """Keep the boundary policy's table (core/published/boundary.py) equal to what this worker decides with.

    The table follows the live view (a node of a product no type claims, a DRA node by its hostname),
    so it is worked out again every `check_seconds` and written when it changed; every `reread_seconds` it is
    read again, to repair one deleted, to keep this worker's mark among the writers from expiring and to drop
    the tables of writers gone (core/published/writers.py). Until it is first written the policy refuses every
    Pod it would judge: it fails closed.
    """
    written: dict[str, str] | None = None
    read_at = 0.0
    said: set[Any] = set()
    where = f"{namespace}/{BOUNDARY_CONFIGMAP}"
    while not stop.is_set():
        try:
            data = data_of()
            if data != written or time.monotonic() - read_at >= reread_seconds:
                wrote = write(api, namespace, data, BOUNDARY_CONFIGMAP)
                if wrote or written is None:
                    log.info("%s %s (%d entries)", "wrote the tenant boundary's table to" if wrote else
                             "the tenant boundary's table is current in", where, len(data))
                written, read_at = data, time.monotonic()
                said.clear()
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            status = getattr(exc, "status", None)
            if status not in said:
                said.add(status)
                log.warning("cannot write %s, the tenant boundary's table (%s); GPU Pods of namespaces with "
                            "allowed-classes are refused until it is written; retrying",
                            where, getattr(exc, "reason", None) or exc)
        except BoundaryError as exc:
            if "boundary" not in said:
                said.add("boundary")
                log.error("cannot build the tenant boundary's table: %s", exc)
        stop.wait(check_seconds)


def start_keeping_boundary(api: kubernetes.client.CustomObjectsApi, namespace: str,
                           data_of: Callable[[], dict[str, str]]) -> threading.Event:
    """keep_boundary on a daemon thread; the event stops it."""
    stop = threading.Event()
    threading.Thread(target=keep_boundary, args=(api, namespace, data_of, stop), name="boundary",
                     daemon=True).start()
    return stop
