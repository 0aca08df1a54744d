"""Where the serving side gets its inventory: the one module of `webhook.cluster` it may import.

An inventory is anything with `snapshot()` (the immutable view admissions read) and `readiness()`
(what /readyz reports). There are two: a fixed one read from Node files in the master before the
workers fork (`read_file_snapshot` + `StaticInventory`), and the live one each worker starts after
fork (`start_live_inventory`, list+watch in `watch.py`). The kubernetes client is imported only
when a live inventory is asked for, so a server on a file inventory never loads it.

The import contract in setup.cfg keeps `webhook.serving` from importing the other cluster modules;
whatever serving needs from them is named here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..core.catalog.model import Catalog
from ..core.view.snapshot import Snapshot
from ..core.admission.planner import NamespacePolicy
from .loading import InputError, load_snapshot_in_child

if TYPE_CHECKING:
    from ..core.access.metrics_gate import AccessReviewer
    from .watch import InventoryObserver

__all__ = [
    "InputError",
    "InventorySource",
    "access_reviewer",
    "StaticInventory",
    "check_live_config",
    "read_file_snapshot",
    "start_live_inventory",
    "start_keeping_boundary",
    "start_publishing",
]


class InventorySource(Protocol):
    """Where snapshots come from: a file read once, or the live watch."""

    def snapshot(self) -> Snapshot: ...

    def wait_newer(self, than: Snapshot, timeout_seconds: float) -> Snapshot:
        """The first snapshot after `than`, or the current one when none comes within the timeout."""
        ...

    def readiness(self) -> tuple[bool, dict[str, Any]]: ...

    def namespace_policy(self, snapshot: Snapshot, name: str) -> NamespacePolicy:
        """The namespace when `snapshot` should hold it and does not (read elsewhere), else None."""
        ...


class StaticInventory:
    """An inventory fixed at start (read from a file)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def wait_newer(self, than: Snapshot, timeout_seconds: float) -> Snapshot:
        return self._snapshot  # it never changes

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        return True, {"source": "file", "nodes": self._snapshot.node_count}

    def namespace_policy(self, snapshot: Snapshot, name: str) -> NamespacePolicy:
        return None  # a file holds every namespace it will ever hold


def read_file_snapshot(paths: tuple[str, ...], catalog: Catalog) -> Snapshot:
    """A fixed inventory from Node (and Namespace) files, parsed in a child process (see loading.py)."""
    return load_snapshot_in_child(paths, catalog)


def check_live_config(kubeconfig: str | None) -> None:
    """Raise InputError unless the cluster can be reached: `kubeconfig`, else the in-cluster account."""
    from .watch import check_kube_config  # the kubernetes client only where it is used

    check_kube_config(kubeconfig)


def start_live_inventory(
    catalog: Catalog, *, kubeconfig: str | None, observer: InventoryObserver | None = None,
    after_list: Callable[[], None] | None = None,
) -> InventorySource:
    """List, then watch, the cluster in this process; returns once synced or after the sync wait."""
    from . import watch  # the kubernetes client only where it is used

    return watch.start_live_inventory(catalog, kubeconfig=kubeconfig, observer=observer, after_list=after_list)


def _core_api(kubeconfig: str | None) -> Any:
    import kubernetes  # the kubernetes client only where it is used

    from . import watch

    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(watch.check_kube_config(kubeconfig)))


def start_publishing(kubeconfig: str | None, namespace: str, data: dict[str, str]) -> None:
    """Write the install's published settings (core/published/public.py) in `namespace`, on a thread of their own."""
    from . import publish

    publish.start_publishing(_core_api(kubeconfig), namespace, data)


def start_keeping_boundary(kubeconfig: str | None, namespace: str, boundary_of: Callable[[], dict[str, str]]) -> None:
    """Keep the tenant boundary's table (core/published/boundary.py) in `namespace` as `boundary_of` works it out."""
    from . import publish

    import kubernetes

    from . import watch

    api = kubernetes.client.CustomObjectsApi(kubernetes.client.ApiClient(watch.check_kube_config(kubeconfig)))
    publish.start_keeping_boundary(api, namespace, boundary_of)


def access_reviewer(kubeconfig: str | None) -> AccessReviewer:
    """The API server's TokenReview and SubjectAccessReview, asked for each scrape of /metrics the cache cannot answer."""
    from . import access_review  # the kubernetes client only where it is used

    return access_review.access_reviewer(kubeconfig)


def ensure_own_certificates(kubeconfig: str | None, settings: Any, directory: str) -> None:
    """tls.mode webhook-managed: make or renew the CA and certificates in their Secrets, keep caBundle, and write
    the serving pair into `directory` (cluster/tls_keeper.py); once, at start."""
    from . import tls_keeper

    core, admission = _keeper_apis(kubeconfig)
    tls_keeper.write_served(directory, tls_keeper.ensure(core, admission, settings, _utc_now))


def start_keeping_certificates(kubeconfig: str | None, settings: Any, directory: str,
                               interval_seconds: float) -> None:
    """The same as ensure_own_certificates every `interval_seconds`, on a thread of this process."""
    from . import tls_keeper

    core, admission = _keeper_apis(kubeconfig)
    tls_keeper.start_keeping(core, admission, settings, directory, interval_seconds, _utc_now)


def _keeper_apis(kubeconfig: str | None) -> tuple[Any, Any]:
    import kubernetes  # the kubernetes client only where it is used

    from . import watch

    client = kubernetes.client.ApiClient(watch.check_kube_config(kubeconfig))
    return kubernetes.client.CoreV1Api(client), kubernetes.client.AdmissionregistrationV1Api(client)


def _utc_now() -> Any:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc)
