"""The reflector: list, then watch, one resource kind, and hand what it reads to the watch that built it
(nodes_watch.py, pods_watch.py, dra_watch.py, pools_watch.py, heralds.py), which feeds the live inventory
(watch.LiveInventory).

The `kubernetes` client does the HTTP, authentication and configuration; responses are read with
`_preload_content=False` and parsed as plain JSON, because turning 150,000 Pods into generated model
objects would cost minutes and gigabytes, and the decision needs only a few fields of each.

What real API servers do, and what the reflector does about it:
- a watch ends after its timeout, or the connection drops: watch again from the last resourceVersion;
- `410 Gone` (as an ERROR event or a status): the history is compacted, list again;
- BOOKMARK events: only a newer resourceVersion to resume from;
- Pod events that cannot change the GPU view (no resource of the catalog, a Pod the view does not hold)
  are told apart on the raw line and never decoded (core/view/pod_lines.py); only their resourceVersion is kept;
- unreachable or failing (at start or for minutes): retry with capped, jittered backoff, forever,
  serving meanwhile from the last known inventory; an answer that says when to ask again (Retry-After, as
  the 429 of a watch cache that is starting after an API server restart) is asked again then;
- a resource it does not serve (404: no resource.k8s.io/v1) or will not let us list from the start
  (403: no RBAC for it): for the DRA resources and NodePools only, that resource is off (empty) and logged once,
  and is tried again every minute, or at once when its herald, watched by name, says the API is served
  (heralds.py: Karpenter's CRD established, DRA's APIService available); Nodes, Namespaces and Pods work as
  they always have. A 403 after a successful list is retried as an error: an API server that restarts
  refuses until its RBAC cache is warm, and the devices last seen are better than none.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, get_args

from kubernetes.client.exceptions import ApiException

from ..core.admission.review import load_json
from .observer import InventoryObserver, NoObserver

log = logging.getLogger("gpu_class.watch")

LIST_PAGE_SIZE = 500
WATCH_TIMEOUT_SECONDS = (240, 360)  # spread so that reflectors do not reconnect in step
BACKOFF_SECONDS = (0.5, 30.0)
OFF_RECHECK_SECONDS = 60  # a resource that is not served or not allowed: how long until we ask again
DRA_GROUP = "resource.k8s.io/v1"
RestartReason = Literal["timeout", "expired", "error"]
RESTART_REASONS: tuple[RestartReason, ...] = get_args(RestartReason)


class Expired(Exception):
    """The resourceVersion we resume from is gone: list again."""


@dataclass
class Reflector:
    """List+watch of one resource kind, feeding `apply` (events) and `replace` (full lists)."""

    name: str
    list_call: Callable[..., Any]
    # each listed object is reduced as its page arrives, so a relist never holds 150,000 whole Pods
    reduce: Callable[[dict[str, Any]], Any]
    replace: Callable[[list[Any]], None]
    apply: Callable[[str, dict[str, Any]], None]
    stop_event: threading.Event
    resource_version: str | None = None
    synced: bool = False
    connected: bool = False
    last_contact: float | None = None  # monotonic time of the last list, event or bookmark
    restarts: int = 0
    relists: int = 0
    errors: int = 0
    observer: InventoryObserver = field(default_factory=NoObserver)
    # optional: a 404 or 403 turns the resource off (told to on_off with the reason) instead of failing
    on_off: Callable[[str, str | None], None] | None = None
    off: str | None = None  # why the resource is off; None: it is read
    after_list: Callable[[], None] | None = None  # once a full list is in the state
    group: str = DRA_GROUP  # an optional resource's API group and version, for what on_off is told
    # set to list an off resource now rather than after OFF_RECHECK_SECONDS or its backoff (its herald says it
    # is served; stop). Each list clears it first: one asked for while a list is under way lists again.
    recheck: threading.Event = field(default_factory=threading.Event)
    max_backoff_seconds: float = BACKOFF_SECONDS[1]
    # a look at each raw watch line before it is decoded: the resourceVersion of an event that need not be
    # (only kept to resume from), None to decode it
    skip: Callable[[bytes], str | None] | None = None
    skipped: int = 0  # events read and not decoded
    _backoff: float = field(default=BACKOFF_SECONDS[0], repr=False)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                if self.off is not None:
                    self.recheck.wait(OFF_RECHECK_SECONDS)
                    continue
                self._watch()
                self._backoff = BACKOFF_SECONDS[0]
                self._restarted("timeout")
            except Expired:
                self.resource_version = None
                self._restarted("expired")
            except Exception as exc:  # API errors, refused or dropped connections, bad JSON: retry
                self.connected = False
                self.errors += 1
                status = getattr(exc, "status", None)
                if status == 410:
                    self.resource_version = None
                    self._restarted("expired")
                    continue
                if status == 404 and self.on_off is not None:
                    self.resource_version = None  # the API went away: the list says it is off
                asked = retry_after(exc)
                # The server's own wait, not ours: a watch cache that starts answers 429 "retry after 1 s" for
                # the seconds it takes, and doubling over those answers would resume up to 30 s late
                wait = (self._backoff * random.uniform(0.5, 1.0) if asked is None
                        else min(asked, self.max_backoff_seconds) * random.uniform(1.0, 1.25))
                log.warning("%s watch failed, retrying in %.1fs: %s", self.name, wait, brief(exc))
                self._restarted("error")
                # an off resource's herald may end the wait (a recheck that failed while the API server restarted)
                (self.recheck if self.off is not None else self.stop_event).wait(wait)
                if asked is None:
                    self._backoff = min(self._backoff * 2, self.max_backoff_seconds)

    def _restarted(self, reason: RestartReason) -> None:
        self.restarts += 1
        self.observer.restarted(self.name, reason)

    def _contact(self) -> None:
        self.last_contact = time.monotonic()
        self.observer.contacted(self.name)

    def _list(self) -> None:
        self.recheck.clear()  # what asked for a list before this one is answered by it
        items: list[Any] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE, "_preload_content": False, "_request_timeout": 60}
            if token:
                kwargs["_continue"] = token
            try:
                response = self.list_call(**kwargs)
            except ApiException as exc:
                # a 403 once listed is passing (an API server that restarts answers 403 until its RBAC
                # cache is warm): retried like any error, serving the last known devices meanwhile
                if self.on_off is not None and (exc.status == 404 or (exc.status == 403 and self.relists == 0)):
                    self._turn_off(exc)
                    return
                raise
            page = _parse(response.data)
            items.extend(r for r in map(self.reduce, page.get("items") or []) if r is not None)
            del page["items"]
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                break
        if self.off is not None and self.on_off is not None:
            self.off = None
            self.on_off(self.name, None)
        self.replace(items)
        self.observer.reading(self.name, True)  # before the flag, as the state: readiness counts the flag
        self.resource_version = metadata.get("resourceVersion")
        self.relists += 1
        self.synced = True
        self.connected = True
        self._contact()
        if self.after_list is not None:
            self.after_list()

    def _turn_off(self, exc: ApiException) -> None:
        """Not served (404) or not allowed (403): off, with what to do about it, until a list works."""
        assert self.on_off is not None
        if exc.status == 404:
            reason = f"the API server does not serve {self.name}.{self.group.split('/')[0]} ({self.group})"
        else:
            reason = (f"not allowed to list {self.name}.{self.group.split('/')[0]} ({brief(exc)}): grant the "
                      "webhook's ServiceAccount get, list and watch on it (deploy/base/rbac.yaml)")
        first = self.off is None
        self.off = reason
        self.resource_version = None
        if first:
            # Told (and published) before the flag is set, as a list is: readiness counts the flag, and
            # a replica ready before the snapshot knows the resource's answer refuses GPU Pods as unsynced.
            self.on_off(self.name, reason)
        self.observer.reading(self.name, False)
        self.synced = True  # off is an answer: readiness does not wait for it
        self.connected = False
        self._contact()

    def _watch(self) -> None:
        timeout = random.randint(*WATCH_TIMEOUT_SECONDS)
        response = self.list_call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            _preload_content=False,
            # a silent dead connection is noticed when nothing, not even a bookmark, arrives in time
            _request_timeout=(10, timeout + 30),
        )
        self.connected = True
        try:
            for line in _lines(response.stream(amt=None, decode_content=False)):
                if self.stop_event.is_set():
                    return
                self.read(line)
        finally:
            response.release_conn()

    def read(self, line: bytes) -> None:
        """One line of the watch: an event, decoded unless `skip` says it need not be."""
        rv = self.skip(line) if self.skip is not None else None
        if rv is None:
            self._handle(_parse(line))
            return
        self.skipped += 1
        self._contact()
        self.resource_version = rv

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired()
            raise RuntimeError(f"watch error event: {obj.get('message') or obj}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        self._contact()
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.apply(str(kind), obj)
        if rv:
            self.resource_version = rv

    def status(self, now: float) -> dict[str, Any]:
        return {
            "synced": self.synced,
            "connected": self.connected,
            "staleSeconds": None if self.last_contact is None else round(now - self.last_contact, 1),
            "restarts": self.restarts,
            "relists": self.relists,
            **({"off": self.off} if self.off is not None else {}),
        }


def _events(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    for line in _lines(chunks):
        yield _parse(line)


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The non-empty lines of a watch (one JSON event per line), as bytes.

    kubernetes' iter_resp_lines decodes every line to str and copies what is left of its buffer once per
    line; a Pod watch in a busy cluster is the worker's largest steady cost besides admissions, and it
    holds the GIL while an admission waits.
    """
    rest = bytearray()
    for chunk in chunks:
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            rest += chunk
            continue
        rest += lines[0]
        lines[0] = bytes(rest)
        rest = bytearray(lines.pop())
        yield from (line for line in lines if line)


def _parse(data: bytes) -> Any:
    """load_json (orjson, reading what json.loads reads, in about half the time), and like the client,
    text that is not UTF-8 is read with replacement characters rather than refused."""
    try:
        return load_json(data)
    except UnicodeDecodeError:
        return json.loads(data.decode("utf-8", errors="replace"))


def retry_after(exc: BaseException) -> float | None:
    """The seconds the API server asked us to wait with its error (its Retry-After header: a 429 while a watch
    cache starts, or while API Priority and Fairness sheds load), or None where it asked for no wait."""
    headers = getattr(exc, "headers", None) if isinstance(exc, ApiException) else None
    try:
        seconds = float((headers or {}).get("Retry-After", ""))
    except ValueError:  # absent, or an HTTP date, which kube-apiserver never sends
        return None
    return seconds if seconds >= 0 else None


def brief(exc: BaseException) -> str:
    """An error in a few words: for the log, and for the reason a resource is off or a namespace unread."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"

