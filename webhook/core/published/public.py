"""What an install publishes of itself for the tools its users run. Pure.

`gpuclass explain` and `kubectl gpu-class` must judge a Pod with the catalog and scheduler names the
webhook runs with, not the built-in ones, and a tenant may read neither the webhook's Deployment nor
its catalog ConfigMap (its name carries a content hash). So each webhook worker writes, at start, the
ConfigMap PUBLISHED_CONFIGMAP in its own namespace, which every authenticated user may read by name
(deploy/base/rbac.yaml): the catalog as loaded and the scheduler settings given on its command line.
Written by the process that uses them, it cannot disagree with what the webhook does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ..catalog.loading import load_catalog_text
from ..catalog.model import Catalog, CatalogError

PUBLISHED_CONFIGMAP = "gpu-class-public"
INSTALL_NAMESPACE = "gpu-class-system"
CATALOG_KEY = "catalog.yaml"
SCHEDULER_KEY = "schedulerName"
STOCK_KEY = "stockSchedulers"


def published_data(catalog_text: str, catalog: Catalog) -> dict[str, str]:
    """The ConfigMap's data for the catalog text the webhook loaded and the catalog it runs with."""
    return {CATALOG_KEY: catalog_text, SCHEDULER_KEY: catalog.scheduler_name or "",
            STOCK_KEY: ",".join(catalog.stock_schedulers)}


def catalog_of(data: Mapping[str, Any], source: str) -> Catalog:
    """The catalog an install published, with the scheduler settings the webhook runs with."""
    text = data.get(CATALOG_KEY)
    if not isinstance(text, str) or not text.strip():
        raise CatalogError(f"{source}: no {CATALOG_KEY} (no webhook of this install has started yet)")
    catalog = load_catalog_text(text, f"{source} {CATALOG_KEY}")
    scheduler, stock = data.get(SCHEDULER_KEY), data.get(STOCK_KEY)
    return dataclasses.replace(
        catalog, scheduler_name=scheduler if isinstance(scheduler, str) and scheduler else None,
        stock_schedulers=tuple(s for s in stock.split(",") if s) if isinstance(stock, str) else ())
