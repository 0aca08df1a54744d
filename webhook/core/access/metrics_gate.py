"""Who may read /metrics: the decision of Kubernetes' delegated authentication and authorization, pure.

A scrape is checked as kube-rbac-proxy and controller-runtime's metrics filter check theirs: the
bearer token goes to the API server in a TokenReview (who is this?), the identity it names in a
SubjectAccessReview for `get` on the non-resource URL /metrics (may they read it?). No usable token:
401; a token the API server does not accept: 401; an identity without the right: 403; the API server
not answering: 503, so an outage refuses (fails closed) instead of serving to anyone.

The I/O (the two reviews) is behind `AccessReviewer` (webhook/cluster/access_review.py makes the real
one); what is decided from the answers, and how long an answer is kept, is here: the clock is given.

Answers are kept per token (by its SHA-256, never the token itself): an allowed one for 60 s, a
refused one for 10 s, an outage not at all. Prometheus scrapes every 15 to 30 s, so a kept allowance
spares the API server two calls on three scrapes of four; a minute is also the longest a deleted token
or a removed binding still reads metrics (kube-apiserver's own webhook authenticator keeps answers 2
min). A refusal is kept shorter, so that binding the reader takes effect within seconds, yet long
enough that a scraper with a wrong token cannot make every one of its requests two API calls.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping, Protocol

METRICS_PATH = "/metrics"
ALLOWED_TTL_SECONDS = 60.0
REFUSED_TTL_SECONDS = 10.0
MAX_KEPT_ANSWERS = 1024  # answers kept per process; random tokens cannot grow it further
MAX_TOKEN_BYTES = 16 * 1024  # far more than a service account token (about 1 KiB); a longer one is refused unread

Verdict = Literal["allowed", "unauthenticated", "forbidden"]


@dataclass(frozen=True)
class Identity:
    """Who a token is, as the TokenReview's status.user says."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class ReviewUnavailable(Exception):
    """The API server could not answer a review (unreachable, timed out, 5xx, or it refused our own account)."""


class AccessReviewer(Protocol):
    """The two questions asked of the API server; both raise ReviewUnavailable when it cannot answer."""

    def authenticate(self, token: str) -> Identity | None:
        """The identity the token proves, or None when the API server does not accept it."""
        ...

    def authorize(self, identity: Identity, verb: str, path: str) -> bool:
        """Whether `identity` may `verb` the non-resource URL `path`."""
        ...


@dataclass(frozen=True)
class GateAnswer:
    status: Literal[200, 401, 403, 503]
    message: str
    username: str | None = None  # who asked, where known (for the log; never the token)


def parse_bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None when there is none or it is malformed."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token or len(token) > MAX_TOKEN_BYTES:
        return None
    return token


def answer_for(verdict: Verdict, username: str | None) -> GateAnswer:
    if verdict == "allowed":
        return GateAnswer(200, "allowed", username)
    if verdict == "forbidden":
        return GateAnswer(403, f"{username!r} may not get {METRICS_PATH}: bind the ClusterRole "
                               "gpu-class-metrics-reader to it", username)
    return GateAnswer(401, "the bearer token was not accepted by the API server (TokenReview)")


NO_TOKEN = GateAnswer(401, "a bearer token is required (Authorization: Bearer TOKEN) of an identity that may get "
                           f"{METRICS_PATH}, such as a service account bound to the ClusterRole gpu-class-metrics-reader")


def ttl_seconds(verdict: Verdict) -> float:
    return ALLOWED_TTL_SECONDS if verdict == "allowed" else REFUSED_TTL_SECONDS


class AnswerCache:
    """Verdicts by token digest until their time runs out; `now` is given, so the cache reads no clock."""

    def __init__(self, max_entries: int = MAX_KEPT_ANSWERS) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Verdict, str | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, now: float) -> tuple[Verdict, str | None] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[2] <= now:
                del self._entries[key]
                return None
            return entry[0], entry[1]

    def put(self, key: str, verdict: Verdict, username: str | None, now: float) -> None:
        with self._lock:
            self._entries.pop(key, None)
            if len(self._entries) >= self.max_entries:
                for stale in [k for k, e in self._entries.items() if e[2] <= now]:
                    del self._entries[stale]
            while len(self._entries) >= self.max_entries:
                self._entries.popitem(last=False)  # the oldest put
            self._entries[key] = (verdict, username, now + ttl_seconds(verdict))

    def __len__(self) -> int:
        return len(self._entries)


def token_key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


class MetricsGate:
    """Answers one scrape's Authorization header: from the cache, else from the two reviews."""

    def __init__(self, reviewer: AccessReviewer, clock: Callable[[], float], cache: AnswerCache | None = None) -> None:
        self.reviewer = reviewer
        self.clock = clock
        self.cache = cache if cache is not None else AnswerCache()

    def check(self, authorization: str | None) -> GateAnswer:
        token = parse_bearer(authorization)
        if token is None:
            return NO_TOKEN
        key = token_key(token)
        kept = self.cache.get(key, self.clock())
        if kept is not None:
            return answer_for(*kept)
        try:
            identity = self.reviewer.authenticate(token)
            verdict: Verdict = ("unauthenticated" if identity is None
                                else "allowed" if self.reviewer.authorize(identity, "get", METRICS_PATH)
                                else "forbidden")
        except ReviewUnavailable as exc:
            return GateAnswer(503, f"cannot check the bearer token with the API server: {exc}")
        username = identity.username if identity is not None else None
        self.cache.put(key, verdict, username, self.clock())
        return answer_for(verdict, username)


class OpenGate:
    """--metrics-auth none: every scrape is served (the listener is on loopback, checked at start)."""

    def check(self, authorization: str | None) -> GateAnswer:
        return GateAnswer(200, "allowed: --metrics-auth none")


Gate = MetricsGate | OpenGate

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "[::1]", "localhost")


def insecure_combination(auth: str, host: str) -> str | None:
    """Why `auth` may not be served on `host`, or None when it may."""
    if auth not in ("delegated", "none"):
        return f"--metrics-auth {auth}: give delegated or none"
    if auth == "none" and host not in LOOPBACK_HOSTS:
        return (f"--metrics-auth none serves /metrics to anyone who can reach {host or 'every address'}: bind the "
                "metrics listener to 127.0.0.1 (or ::1), or keep --metrics-auth delegated")
    return None
