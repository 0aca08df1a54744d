"""A stand-in for the kubernetes client's API objects, for a LiveInventory fed by hand in-process."""

from __future__ import annotations

from typing import Any


class NoApi:
    """The inventory is fed by hand: its reflectors are made but never call the API."""

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"the bench's inventory called the API ({name})")
        return call
