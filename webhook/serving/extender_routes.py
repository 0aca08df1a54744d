"""HTTP routes of the scheduler extender: POST /filter and POST /prioritize on the webhook's Flask app.

The routes translate HTTP to extender.py and back, nothing more. Only the scheduler may call them:
a caller without a client certificate of the extender's CA gets a 401, one on the admission
listener a 403, each with a log line (tls.extender_caller decides). A body that is not
ExtenderArgs gets a 400 with a JSON error; everything else gets a 200, because the scheduler
treats any other status as the extender failing (and, for filter, reads a Pod-level failure from
the answer's `Error`). A bug becomes a logged 200 (filter: `Error`; prioritize: no preference),
never a 5xx.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Mapping

from flask import Flask, Response, request

from ..cluster.source import InventorySource
from ..core.catalog.model import Catalog
from ..core.scheduling.extender import (
    Assumed,
    BadExtenderArgs,
    ExtenderArgs,
    FilterOutcome,
    filter_assuming,
    filter_error,
    neutral_priorities,
    parse_extender_args,
    pod_uid,
    prioritize_nodes,
    with_assumed,
)
from .responses import json_response
from .tls import Refusal

log = logging.getLogger("gpu_class.extender")

# How long `filter` waits for the watch to bring a Pod it does not know yet. In `python -m bench
# placement` the scheduler asked first in 23 of 156 calls, and the watch brought the Pod 0.01 to 365 ms
# later (median 6 ms) on a busy 2-core machine.
UNKNOWN_POD_WAIT_SECONDS = 1.0

# who calls an extender verb (a name for the log), or why the call is refused
CallerCheck = Callable[[Mapping[str, Any]], str | Refusal]


def _read_args(body: bytes) -> ExtenderArgs:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested JSON
        raise BadExtenderArgs(f"body is not JSON: {str(exc)[:200]}") from None
    return parse_extender_args(data)


def register_extender_routes(app: Flask, catalog: Catalog, inventory: InventorySource, caller_of: CallerCheck) -> None:
    """Add the extender's verbs to `app` (deploy/scheduler configures filterVerb and prioritizeVerb so).

    `caller_of` tells the scheduler from anyone else (tls.extender_caller in the server).
    """
    # Pods sent to one node and not yet seen bound there, by uid (extender.Assumed). Per worker:
    # kube-scheduler sends one Pod at a time over a kept-alive connection, so its next Pod comes
    # to the worker that answered the last.
    assumed: dict[str, Assumed] = {}
    lock = threading.Lock()
    authenticate = _authenticator(caller_of)
    app.post("/filter")(_filter_verb(authenticate, _known_filter(catalog, inventory, assumed, lock)))
    app.post("/prioritize")(_prioritize_verb(authenticate, catalog, inventory, assumed, lock))


Authenticate = Callable[[str], Response | str]
KnownFilter = Callable[[ExtenderArgs], tuple[FilterOutcome, float]]


def _authenticator(caller_of: CallerCheck) -> Authenticate:
    def authenticate(verb: str) -> Response | str:
        """The caller's name, or the refusal to answer with (logged)."""
        caller = caller_of(request.environ)
        if not isinstance(caller, Refusal):
            return caller
        log.warning("extender call refused", extra={"fields": {
            "verb": verb, "status": caller.status, "peer": request.remote_addr, "reason": caller.message}})
        error = "Unauthorized" if caller.status == 401 else "Forbidden"
        return json_response({"error": error, "message": caller.message}, caller.status)

    return authenticate


def _known_filter(catalog: Catalog, inventory: InventorySource, assumed: dict[str, Assumed],
                  lock: threading.Lock) -> KnownFilter:
    def filter_known(args: ExtenderArgs) -> tuple[FilterOutcome, float]:
        """`filter` on the newest snapshot, and the seconds it waited for the watch.

        The scheduler's informer and our watch get a Pod's creation at about the same time, and the
        scheduler can ask first: while the answer would count a Pod the watch has not brought yet,
        wait for it (UNKNOWN_POD_WAIT_SECONDS at most). A made-up Pod never comes, and costs the wait.
        """
        deadline = time.perf_counter() + UNKNOWN_POD_WAIT_SECONDS
        snapshot, waited = inventory.snapshot(), 0.0
        while True:
            with lock:
                outcome = filter_assuming(args, snapshot, catalog, assumed, time.monotonic())
                assumed.clear()
                assumed.update(outcome.assumptions)
            left = deadline - time.perf_counter()
            if outcome.unknown is None or snapshot.unbound_pods is None or left <= 0:
                return outcome, waited
            waiting = time.perf_counter()
            newer = inventory.wait_newer(snapshot, left)
            waited += time.perf_counter() - waiting
            if newer is snapshot:
                return outcome, waited
            snapshot = newer

    return filter_known


def _filter_verb(authenticate: Authenticate, filter_known: KnownFilter) -> Callable[[], Response]:
    def extender_filter() -> Response:
        started = time.perf_counter()
        caller = authenticate("filter")
        if isinstance(caller, Response):
            return caller
        try:
            args = _read_args(request.get_data(cache=False))
        except BadExtenderArgs as exc:
            _log("filter", None, started, caller=caller, error=str(exc))
            return json_response({"error": "Bad Request", "message": str(exc)}, 400)
        try:
            outcome, waited = filter_known(args)
            result = outcome.result
            # a Pod the watch has not seen unbound is answered, never counted: say so, so that calls
            # for made-up Pods show in the log
            known: dict[str, Any] = {"assumed": outcome.assumed.node if outcome.assumed else None,
                                     "pod_known": outcome.pod_known,
                                     **({"waited_ms": round(waited * 1000, 3)} if waited else {})}
        except Exception:
            log.exception("extender filter failed pod=%s", args.pod_ref)
            result = filter_error(f"gpu-class: internal error filtering nodes for Pod {args.pod_ref}; see its logs")
            known = {}
        failed = len(result["FailedNodes"]) + len(result["FailedAndUnresolvableNodes"])
        _log("filter", args, started, caller=caller, failed=failed, error=result["Error"] or None, **known)
        return json_response(result)

    return extender_filter


def _prioritize_verb(authenticate: Authenticate, catalog: Catalog, inventory: InventorySource,
                     assumed: dict[str, Assumed], lock: threading.Lock) -> Callable[[], Response]:
    def extender_prioritize() -> Response:
        started = time.perf_counter()
        caller = authenticate("prioritize")
        if isinstance(caller, Response):
            return caller
        try:
            args = _read_args(request.get_data(cache=False))
        except BadExtenderArgs as exc:
            _log("prioritize", None, started, caller=caller, error=str(exc))
            return json_response({"error": "Bad Request", "message": str(exc)}, 400)
        try:
            with lock:
                others = {uid: a for uid, a in assumed.items() if uid != pod_uid(args)}
            snapshot = with_assumed(inventory.snapshot(), others, time.monotonic())[0]
            priorities = prioritize_nodes(args, snapshot, catalog)
        except Exception:
            log.exception("extender prioritize failed pod=%s", args.pod_ref)
            priorities = neutral_priorities(args.candidates)
        _log("prioritize", args, started, caller=caller, scored=sum(1 for p in priorities if p["Score"] > 0))
        return json_response(priorities)

    return extender_prioritize


def _log(verb: str, args: ExtenderArgs | None, started: float, **fields: Any) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    record = {
        "verb": verb,
        "pod": args.pod_ref if args is not None else None,
        "nodes": len(args.candidates) if args is not None else None,
        **fields,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    log.info("extender", extra={"fields": record})
