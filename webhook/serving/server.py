"""Run the webhook under gunicorn over TLS.

Everything that can be misconfigured (catalog, inventory file, certificates, kube config) is checked
in the master before any worker starts, so a bad start fails once with a clear message instead of
workers crash-looping. Each worker builds its own app after fork, so watch threads live in the
process that serves from them.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import os
import ssl
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from flask import Flask
from gunicorn.app.base import BaseApplication

from ..cluster.source import (
    InputError, InventorySource, StaticInventory, access_reviewer, check_live_config, ensure_own_certificates,
    read_file_snapshot, start_keeping_boundary, start_keeping_certificates, start_live_inventory, start_publishing,
)
from ..core.access.metrics_gate import Gate, MetricsGate, OpenGate, insecure_combination
from ..core.catalog.builtin import default_catalog_text
from ..core.catalog.loading import load_catalog_text
from ..core.catalog.model import Catalog
from ..core.published.boundary import BoundaryError, BoundaryTable, boundary_data
from ..core.published.public import published_data
from ..core.view.snapshot import Snapshot
from . import logs
from .app import create_app
from .balance import BalancedThreadWorker, ConnectionTable
from .config import ServeConfig
from .tls import CertReloader

log = logging.getLogger("gpu_class.server")


def read_catalog_text(config: ServeConfig) -> str:
    if not config.catalog_file:
        return default_catalog_text()
    try:
        with open(config.catalog_file, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise InputError(f"cannot read catalog {config.catalog_file}: {exc.strerror}") from None


def load_catalog(config: ServeConfig, text: str | None = None) -> Catalog:
    source = config.catalog_file or "the built-in catalog"
    catalog = load_catalog_text(read_catalog_text(config) if text is None else text, source)
    if config.scheduler_name is not None:
        # The install that runs the strict scheduler says so; the catalog stays the user's.
        catalog = dataclasses.replace(catalog, scheduler_name=config.scheduler_name)
    if config.stock_schedulers:
        catalog = dataclasses.replace(catalog, stock_schedulers=config.stock_schedulers)
    return catalog


@dataclass(frozen=True)
class Loaded:
    """What the master reads before forking; a file inventory is then shared with the workers by fork."""

    catalog: Catalog
    snapshot: Snapshot | None  # None: each worker watches the cluster
    catalog_text: str  # as read, for the install's published settings


def _port(address: str, flag: str) -> int:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{flag} {address}: give HOST:PORT, e.g. 0.0.0.0:8444")
    return int(port)


def check_extender_listener(config: ServeConfig) -> int | None:
    """The extender listener's port, or None when there is none; InputError when it is misconfigured."""
    if (config.extender_bind is None) != (config.client_ca_file is None):
        raise InputError("--extender-bind and --client-ca-file go together: the extender's listener serves only "
                         "clients with a certificate of that CA")
    if config.extender_bind is None or config.client_ca_file is None:
        return None
    port = _port(config.extender_bind, "--extender-bind")
    if port == _port(config.bind, "--bind"):
        raise InputError(f"--extender-bind {config.extender_bind}: needs a port of its own, not that of --bind "
                         f"{config.bind} (the API server's admission calls are not asked for a client certificate)")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=config.client_ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise InputError(f"cannot use --client-ca-file {config.client_ca_file}: {exc}") from None
    return port


def check_metrics_listener(config: ServeConfig) -> int:
    """The metrics listener's port; InputError when it is misconfigured or would serve metrics to anyone."""
    port = _port(config.metrics_bind, "--metrics-bind")
    taken = {_port(config.bind, "--bind"): "--bind"}
    if config.extender_bind:
        taken[_port(config.extender_bind, "--extender-bind")] = "--extender-bind"
    if port in taken:
        raise InputError(f"--metrics-bind {config.metrics_bind}: needs a port of its own, not that of {taken[port]} "
                         "(/metrics is served only on its listener, behind its own check)")
    why = insecure_combination(config.metrics_auth, config.metrics_bind.rpartition(":")[0])
    if why:
        raise InputError(why)
    if config.metrics_auth == "delegated":
        try:
            check_live_config(config.kubeconfig)
        except InputError as exc:
            raise InputError(f"--metrics-auth delegated checks each scrape's token with the API server, which cannot "
                             f"be reached: {exc}; or serve metrics unchecked on loopback: --metrics-auth none "
                             "--metrics-bind 127.0.0.1:PORT") from None
    return port


def make_metrics_gate(config: ServeConfig) -> Gate:
    if config.metrics_auth == "none":
        return OpenGate()
    return MetricsGate(access_reviewer(config.kubeconfig), time.monotonic)


def make_inventory(config: ServeConfig, loaded: Loaded) -> InventorySource:
    from .metrics import InventoryMetrics  # after the multiprocess directory is set

    observer = InventoryMetrics(loaded.catalog)
    if loaded.snapshot is not None:
        observer.published(loaded.snapshot)
        return StaticInventory(loaded.snapshot)
    if config.publish_namespace:
        start_publishing(config.kubeconfig, config.publish_namespace, published_data(loaded.catalog_text, loaded.catalog))
    inventory = start_live_inventory(loaded.catalog, kubeconfig=config.kubeconfig, observer=observer,
                                     after_list=keep_listed_from_gc)
    if config.publish_namespace:
        # after the first sync: a table from a partial view would refuse Pods of nodes it has not seen yet
        table = BoundaryTable(loaded.catalog)
        start_keeping_boundary(config.kubeconfig, config.publish_namespace, lambda: table.data(inventory.snapshot()))
    return inventory


def build_app(config: ServeConfig, loaded: Loaded | None = None) -> Flask:
    from .certs import not_valid_after
    from .metrics import observe_certificate

    loaded = loaded or check_config(config)
    if config.managed_tls is not None:
        # every worker of every replica checks: rounds are conflict-safe, and a worker that outlives the
        # others still follows a rotation
        start_keeping_certificates(config.kubeconfig, config.managed_tls, config.managed_tls.directory,
                                   config.managed_tls.interval_seconds)
    with open(config.cert_file, "rb") as fh:
        observe_certificate(not_valid_after(fh.read()).timestamp())
    return create_app(loaded.catalog, make_inventory(config, loaded), max_body_bytes=config.max_body_bytes,
                      metrics_listener=(_port(config.metrics_bind, "--metrics-bind"), make_metrics_gate(config)))


def check_config(config: ServeConfig) -> Loaded:
    """Fail at start, in the master, with a message that says what to fix."""
    text = read_catalog_text(config)
    catalog = load_catalog(config, text)
    try:
        boundary_data(catalog)
    except BoundaryError as exc:
        raise InputError(f"{config.catalog_file or 'the built-in catalog'}: {exc}") from None
    snapshot = None
    if config.nodes_files:
        snapshot = read_file_snapshot(config.nodes_files, catalog)
    else:
        check_live_config(config.kubeconfig)
    try:
        CertReloader(config.cert_file, config.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise InputError(f"cannot use --cert-file {config.cert_file} / --key-file {config.key_file}: {exc}") from None
    check_extender_listener(config)
    check_metrics_listener(config)
    return Loaded(catalog, snapshot, text)


class WebhookServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, config: ServeConfig, app_factory: Callable[[ServeConfig], Flask] = build_app) -> None:
        self.config_values = config
        self.app_factory = app_factory
        super().__init__()

    def load_config(self) -> None:
        c = self.config_values
        extender_port = check_extender_listener(c)
        reloader: dict[str, CertReloader] = {}
        table = ConnectionTable()  # mapped here, in the master, so every worker forked later shares it
        limits = c.intake_limits()

        def pre_fork(_arbiter: Any, worker: Any) -> None:
            table.assign(worker)
            worker.intake_limits = limits

        def child_exit(_arbiter: Any, worker: Any) -> None:
            table.release(worker)
            _mark_worker_dead(worker.pid)

        def ssl_context(_conf: Any, _default_factory: Any) -> ssl.SSLContext:
            # called per connection, in the worker; one reloader per process
            if "r" not in reloader:
                reloader["r"] = CertReloader(c.cert_file, c.key_file, client_ca_file=c.client_ca_file,
                                             extender_port=extender_port)
            return reloader["r"].context()

        settings: dict[str, Any] = {
            "bind": [c.bind, *([c.extender_bind] if extender_port else []), c.metrics_bind],
            "workers": c.workers,
            "worker_class": BalancedThreadWorker,
            "threads": c.threads,
            "certfile": c.cert_file,
            "keyfile": c.key_file,
            "ssl_context": ssl_context,
            "keepalive": c.keepalive_seconds,
            "graceful_timeout": c.graceful_timeout_seconds,
            "timeout": c.worker_timeout_seconds,
            "limit_request_line": c.max_request_line_bytes,
            "limit_request_fields": c.max_header_fields,
            "limit_request_field_size": c.max_header_field_bytes,
            "accesslog": None,
            "loglevel": c.log_level,
            "proc_name": "gpuclass",
            # gunicorn's runtime control socket is not needed and would write under $HOME (read-only in the image)
            "control_socket_disable": True,
            "post_worker_init": _post_worker_init,
            "pre_fork": pre_fork,
            "child_exit": child_exit,
        }
        for key, value in settings.items():
            if key in self.cfg.settings:  # control_socket_disable exists from gunicorn 24 on
                self.cfg.set(key, value)

    def load(self) -> Flask:
        logs.configure(self.config_values.log_level)
        return self.app_factory(self.config_values)


def _post_worker_init(worker: Any) -> None:
    logs.configure(worker.cfg.loglevel)
    # What the worker has now (the app, the catalog, a file inventory from the master) lives as long
    # as the worker: keep the cyclic GC from walking it again on every full collection (with 5,000
    # nodes that walk was the cost per request that grew with the cluster).
    gc.freeze()


def keep_listed_from_gc() -> None:
    """Collect what is garbage now, then take every object left out of the cyclic GC's reach."""
    # A full list replaces the inventory: with 5,000 nodes and their Pods, some 150,000 objects that
    # live until the next list. Left to the cyclic GC, each full collection walks them all holding the
    # GIL (0.4 to 0.8 s measured on 2 shared cores), a pause every admission in the worker waits out.
    # Frozen objects are still freed by reference counting when a later list or event drops them;
    # the collection first keeps cyclic garbage of the moment from being frozen for good.
    gc.collect()
    gc.freeze()


def _mark_worker_dead(pid: int) -> None:
    from .metrics import mark_worker_dead

    mark_worker_dead(pid)


def prepare_metrics_dir() -> None:
    """Workers write metrics to files in one directory that /metrics aggregates; start it empty."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".db"):
                os.unlink(os.path.join(directory, name))
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="gpu-class-metrics-")


def ensure_certificates_at_start(config: ServeConfig) -> None:
    """tls.mode webhook-managed: the Secrets, caBundle and the server's files, before anything reads them."""
    if config.managed_tls is None:
        return
    settings = config.managed_tls
    try:
        ensure_own_certificates(config.kubeconfig, settings, settings.directory)
    except InputError:
        raise
    except Exception as exc:  # forbidden, unreachable: the message says what the keeper needs
        raise InputError(f"--manage-certificates {settings.namespace}: cannot keep the certificates ({exc}); the "
                         f"service account needs get, create and patch on the Secrets {settings.ca_secret}, "
                         f"{settings.serving_secret}, {settings.client_secret} there, and get and patch on the "
                         f"MutatingWebhookConfigurations {', '.join(settings.webhook_configurations) or '(none)'}; "
                         f"and {settings.directory} must be writable") from None


def serve(config: ServeConfig) -> None:
    ensure_certificates_at_start(config)
    loaded = check_config(config)
    prepare_metrics_dir()
    # Also before the fork: a collection in a worker would otherwise touch (and so copy) every page
    # of what the master read.
    gc.freeze()
    WebhookServer(config, functools.partial(build_app, loaded=loaded)).run()
