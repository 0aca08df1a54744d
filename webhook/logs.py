"""Structured JSON logs: one object per line, fields passed as `extra={"fields": {...}}`."""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


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
