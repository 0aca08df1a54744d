"""The watches of Nodes and Namespaces: the nodes there are to place on, and the classes each namespace allows."""

from __future__ import annotations

from typing import Any

import kubernetes

from ..core.view.namespaces import NamespaceInfo, namespace_info_from_object
from ..core.view.nodes import NodeInfo, node_info_from_object
from .feed import Feed, feeding


class NodesWatch:
    """Every Node, reduced to what the view keeps of it."""

    def __init__(self, feed: Feed, api: kubernetes.client.CoreV1Api) -> None:
        self.feed = feed
        self.catalog = feed.catalog
        self.state = feed.state
        self._submit = feed.submit  # bound once: it is called for every event
        self.reflector = feeding(feed, "nodes", api.list_node, self.reduce, self.replace, self.apply)

    def reduce(self, obj: dict[str, Any]) -> NodeInfo | None:
        # a node without GPU labels may have GPUs as DRA devices: keep every node
        return node_info_from_object(obj, self.catalog, keep_all=True)

    def replace(self, infos: list[NodeInfo]) -> None:
        def apply() -> bool:
            self.state.replace_nodes(infos)
            return self.feed.mark_synced("nodes")
        self._submit(apply, wait=True)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        info = None if kind == "DELETED" else self.reduce(obj)  # reduced here: only NodeInfo is queued
        self._submit(lambda: self.state.upsert_node(info) if info is not None else self.state.remove_node(name))


class NamespacesWatch:
    """Every Namespace, with its default and allowed classes."""

    def __init__(self, feed: Feed, api: kubernetes.client.CoreV1Api) -> None:
        self.feed = feed
        self.state = feed.state
        self._submit = feed.submit  # bound once: it is called for every event
        self.reflector = feeding(feed, "namespaces", api.list_namespace, namespace_info_from_object, self.replace,
                                 self.apply)

    def replace(self, infos: list[NamespaceInfo]) -> None:
        def apply() -> bool:
            self.state.replace_namespaces(infos)
            return self.feed.mark_synced("namespaces")
        self._submit(apply, wait=True)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        info = namespace_info_from_object(obj)
        if info is None:
            return
        gone = kind == "DELETED"
        self._submit(lambda: self.state.remove_namespace(info.name) if gone else self.state.upsert_namespace(info))
