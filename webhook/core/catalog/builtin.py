"""The built-in catalog's text: catalog.yaml in this package, read as a package resource (setup.cfg's
package_data ships it). loading.load_default_catalog parses it."""

from __future__ import annotations

from importlib import resources

BUILTIN_SOURCE = "built-in catalog"  # what its errors name instead of a file


def default_catalog_text() -> str:
    return resources.files(__package__ or "webhook.core.catalog").joinpath("catalog.yaml").read_text(encoding="utf-8")
