"""Writing the install's published settings (core/published.py) to the API server, and reading them back.

Each webhook worker writes the ConfigMap once at start, on a thread of its own, retrying with capped
backoff until it holds the worker's data: the API server may not be reachable yet, and serving never
waits on it. It writes only when the data differs, so the workers and replicas of one release
write it once between them; during a rollout the new release's workers write last.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from ..core.published import PUBLISHED_CONFIGMAP

log = logging.getLogger(__name__)

FIRST_RETRY_SECONDS = 1.0
LAST_RETRY_SECONDS = 300.0
REQUEST_TIMEOUT_SECONDS = 30
LABELS = {"app.kubernetes.io/name": "gpu-class", "app.kubernetes.io/part-of": "gpu-class"}


def write_published(api: kubernetes.client.CoreV1Api, namespace: str, data: dict[str, str]) -> bool:
    """Make the ConfigMap hold `data`; True when it wrote, False when it already did."""
    try:
        response: Any = api.read_namespaced_config_map(PUBLISHED_CONFIGMAP, namespace, _preload_content=False,
                                                       _request_timeout=REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status != 404:
            raise
        body: Any = {"metadata": {"name": PUBLISHED_CONFIGMAP, "namespace": namespace, "labels": LABELS}, "data": data}
        api.create_namespaced_config_map(namespace, body, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        return True
    current = json.loads(response.data)
    if current.get("data") == data:
        return False
    metadata = current.get("metadata") or {}
    # a replace with the resourceVersion read: a writer that raced us gets 409 and reads again
    replaced: Any = {"metadata": {"name": PUBLISHED_CONFIGMAP, "namespace": namespace,
                                  "labels": {**(metadata.get("labels") or {}), **LABELS},
                                  "resourceVersion": metadata.get("resourceVersion")}, "data": data}
    api.replace_namespaced_config_map(PUBLISHED_CONFIGMAP, namespace, replaced, _request_timeout=REQUEST_TIMEOUT_SECONDS)
    return True


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
