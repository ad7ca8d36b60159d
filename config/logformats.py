"""The two shapes of a log line, chosen by LOG_FORMAT: one JSON object per line for machines (the server's
default), or text for a person at a terminal (scripts/run-demo's). docs/observability.md.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import orjson

from config.requestlog import REQUEST_FIELDS


def _request_fields(record: logging.LogRecord) -> dict:
    return {name: value for name in REQUEST_FIELDS if (value := getattr(record, name, None)) is not None}


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", "request_id", ...the request line's fields, "exception"}`:
    a member is left out rather than null when a record has no value for it."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            line["request_id"] = request_id
        line.update(_request_fields(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # A value of another type (an object passed as an argument) is written as its str().
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """`<time> <level> <logger> [<request ID>] <message>`, then the request line's fields its message does
    not already show (experiment=..., batch_size=..., token_name=...)."""

    # The request line's message shows these itself (config/requestlog.py).
    IN_MESSAGE = frozenset({"method", "path", "status", "duration_ms"})

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(request_tag)s%(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        record.request_tag = f"[{request_id}] " if request_id is not None else ""
        extra = [f"{name}={value}" for name, value in _request_fields(record).items() if name not in self.IN_MESSAGE]
        return " ".join([super().formatMessage(record), *extra])
