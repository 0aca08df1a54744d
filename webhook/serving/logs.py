"""Structured JSON logs: one object per line, fields passed as `extra={"fields": {...}}`."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

LEVELS = ("debug", "info", "warning", "error")


_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"), ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """One JSON object per record. It runs once per admission, so it avoids per-call set-up."""

    _second = -1
    _second_text = ""

    def _time(self, created: float) -> str:
        second = int(created)
        if second != self._second:  # the date part changes once a second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self._time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,  # which gunicorn worker: each reads the cluster on its own
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _ENCODER.encode(entry)


_TIME = JsonFormatter()


def write_record(logger: str, msg: str, fields: dict[str, Any]) -> None:
    """One INFO line written straight to stderr, for the line logged on every admission.

    The logging machinery (a LogRecord, the handler's lock, contended by the worker's threads)
    cost more than the decision itself; a single os.write of one line under PIPE_BUF is atomic,
    so lines from several threads never interleave. Callers check the level first.
    """
    entry = {"time": _TIME._time(time.time()), "level": "info", "logger": logger, "pid": os.getpid(), "msg": msg,
             **fields}
    os.write(2, (_ENCODER.encode(entry) + "\n").encode())


def configure(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # the kubernetes client logs every retry of the watch at INFO; ours say more, once
    logging.getLogger("urllib3").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("kubernetes").setLevel(max(logging.WARNING, root.level))
