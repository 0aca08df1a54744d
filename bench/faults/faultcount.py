"""What the API server says happened to each Pod create, counted per stretch of time: the books of
`python -m bench faults` (bench/faults/faults.py).

Two records of the API server, read between byte offsets (both files only grow, across restarts):
- its audit log (tests/e2e/local_cluster.py AUDIT_POLICY): one event per Pod create with the answer,
  the Pod as stored, the time it took, and the annotations admission adds: a webhook that failed open
  (`failed-open.mutation.webhook.admission.k8s.io/round_R_index_I: <webhook>`) and, for a request
  over 0.5 s, the time its mutating webhooks took (`apiserver.latency.k8s.io/mutating-webhook`);
- its log, where each webhook call that failed open is a line with the error
  (`Failed calling webhook, failing open <webhook>: <error>`).
Pure: values in, values out.
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass, field
from typing import Iterable, Literal, Mapping, Sequence

from bench.common.percentiles import rounded_rank_percentile

TYPES_ANNOTATION = "gpu-class.io/types"
FAILED_OPEN_PREFIX = "failed-open.mutation.webhook.admission.k8s.io/"
WEBHOOK_LATENCY = "apiserver.latency.k8s.io/mutating-webhook"
BACKSTOP = "ValidatingAdmissionPolicy 'gpu-class.io-placement'"
FAIL_OPEN_LINE = re.compile(r"Failed calling webhook, failing open (?P<webhook>\S+): (?P<error>.*)$")

Refusal = Literal["webhook", "backstop", "other"]
CallError = Literal["timeout", "connection", "tls", "other"]


@dataclass(frozen=True)
class Create:
    """One Pod create as the API server's audit log has it."""

    namespace: str
    code: int
    seconds: float  # from the request's arrival to its answer
    failed_open: tuple[str, ...]  # the mutating webhooks whose call failed and were ignored
    webhook_seconds: float | None  # the mutating webhooks' share, noted for requests over 0.5 s
    placed: bool  # created, with gpu-class's annotation
    message: str  # the refusal's, for a create that was refused

    def refused_by(self, webhook: str) -> Refusal | None:
        """Who refused the create: the webhook itself, the backstop policy, or anything else."""
        if self.code == 201:
            return None
        if f'admission webhook "{webhook}" denied' in self.message:
            return "webhook"
        if BACKSTOP in self.message:
            return "backstop"
        return "other"


def go_duration_seconds(text: str) -> float:
    """A Go time.Duration as its String() writes it: "1.5s", "523.1ms", "1m2.5s", "812µs"."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(h|ms|m|s|us|µs|ns)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def _timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_audit_line(line: str) -> Create | None:
    """The create a complete audit event records; None for anything else (other verbs, dry runs, a
    line cut short at the end of the file)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    ref = event.get("objectRef") or {}
    if (event.get("verb") != "create" or ref.get("resource") != "pods" or ref.get("subresource")
            or event.get("stage") != "ResponseComplete" or "dryRun=" in event.get("requestURI", "")):
        return None
    annotations: Mapping[str, str] = event.get("annotations") or {}
    status = event.get("responseStatus") or {}
    stored = event.get("responseObject") or {}
    code = int(status.get("code", 0))
    latency = annotations.get(WEBHOOK_LATENCY)
    return Create(
        namespace=ref.get("namespace", ""),
        code=code,
        seconds=(_timestamp(event["stageTimestamp"]) - _timestamp(event["requestReceivedTimestamp"])).total_seconds(),
        failed_open=tuple(sorted(v for k, v in annotations.items() if k.startswith(FAILED_OPEN_PREFIX))),
        webhook_seconds=go_duration_seconds(latency) if latency else None,
        placed=code == 201 and TYPES_ANNOTATION in ((stored.get("metadata") or {}).get("annotations") or {}),
        message=str(status.get("message", "")),
    )


def parse_audit(text: str) -> list[Create]:
    return [c for c in map(parse_audit_line, text.splitlines()) if c is not None]


def call_error(error: str) -> CallError:
    """What kind of failure a failed webhook call was, from the error the API server logged (the URL it
    names, with its `?timeout=5s`, left out)."""
    lowered = re.sub(r'"https?://[^"]*"', "URL", error).lower()
    if any(s in lowered for s in ("deadline exceeded", "client.timeout exceeded", "i/o timeout", "handshake timeout")):
        return "timeout"
    if "x509" in lowered or "certificate" in lowered or "tls:" in lowered:
        return "tls"
    if any(s in lowered for s in ("eof", "connection refused", "connection reset", "broken pipe")):
        return "connection"
    return "other"


def failed_calls(log_text: str, webhook: str) -> list[CallError]:
    """The calls of `webhook` that failed open, by kind, from the API server's log."""
    found: list[CallError] = []
    for line in log_text.splitlines():
        match = FAIL_OPEN_LINE.search(line)
        if match and match.group("webhook") == webhook:
            found.append(call_error(match.group("error")))
    return found


@dataclass(frozen=True)
class Tally:
    """The creates of one arm over one stretch of time."""

    creates: int = 0  # attempts, whatever the answer
    created: int = 0
    unplaced: int = 0  # created without gpu-class's placement
    refused_after_failed_call: int = 0  # the backstop, as it should, after the webhook call failed
    wrongly_refused: int = 0  # by the webhook, or by the backstop when the call had not failed
    other_errors: int = 0  # answers other than created or refused by us (the API server's own)
    failed_calls: int = 0  # webhook calls that failed open
    past_timeout: int = 0  # mutating webhook time at or over the webhook's timeout
    slowest_webhook_seconds: float | None = None  # None: no request took over 0.5 s
    seconds: tuple[float, ...] = ()  # each create's time in the API server
    errors: tuple[str, ...] = field(default=())  # the messages of wrong refusals and other errors, each once

    @property
    def p50_ms(self) -> float:
        return rounded_rank_percentile(self.seconds, 0.5) * 1000

    @property
    def p99_ms(self) -> float:
        return rounded_rank_percentile(self.seconds, 0.99) * 1000


def tally(creates: Iterable[Create], webhook: str | None, timeout_seconds: float,
          placement_expected: bool) -> Tally:
    """Count one arm's creates. `webhook`: the arm's webhook (None: no webhook); `placement_expected`:
    its Pods must carry gpu-class's placement (the gpu-class arm)."""
    counts = {"creates": 0, "created": 0, "unplaced": 0, "refused_after_failed_call": 0, "wrongly_refused": 0,
              "other_errors": 0, "failed_calls": 0, "past_timeout": 0}
    seconds: list[float] = []
    errors: dict[str, None] = {}
    slowest: float | None = None
    for c in creates:
        counts["creates"] += 1
        seconds.append(c.seconds)
        failed = webhook is not None and webhook in c.failed_open
        counts["failed_calls"] += failed
        if c.webhook_seconds is not None:
            slowest = max(slowest or 0.0, c.webhook_seconds)
            counts["past_timeout"] += c.webhook_seconds >= timeout_seconds
        refusal = c.refused_by(webhook or "")
        if refusal is None:
            counts["created"] += 1
            counts["unplaced"] += placement_expected and not c.placed
        elif refusal == "backstop" and failed:
            counts["refused_after_failed_call"] += 1
        elif refusal in ("webhook", "backstop"):
            counts["wrongly_refused"] += 1
            errors[c.message] = None
        else:
            counts["other_errors"] += 1
            errors[f"HTTP {c.code}: {c.message}"] = None
    return Tally(**counts, slowest_webhook_seconds=slowest, seconds=tuple(seconds), errors=tuple(errors))
