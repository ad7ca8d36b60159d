"""The two shapes of a log line, chosen by LOG_FORMAT: one JSON object per line for machines (the server's
default), or text for a person at a terminal (scripts/run-demo's). docs/reference/metrics-and-logs.md.

Clients choose some of what is logged (the path, the experiment ID), so neither shape lets a value start a
line of its own or reorder the text around it: see `_UNSAFE`.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from datetime import UTC, datetime

import orjson

from core.middleware.requestlog import REQUEST_FIELDS

# What could forge or disguise a line: C0, DEL and C1 controls (line breaks, the terminal's escape
# sequences), the Unicode line and paragraph separators (line breaks to str.splitlines and to many
# viewers), and the bidirectional embeddings, overrides and isolates (they reorder what follows them).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# orjson escapes C0 itself, as JSON requires; the rest is valid raw in a JSON string.
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def _visible(text: str) -> str:
    """`text` with every unsafe character written as an escape a person can read: `\\n`, `\\x1b`, `\\u202e`."""
    return _UNSAFE.sub(_escape, text)


def _json_escape(match: re.Match) -> str:
    # Only ever inside a string: everything outside one in orjson's output is ASCII punctuation.
    return f"\\u{ord(match.group()):04x}"


@functools.lru_cache(maxsize=2)
def _second_text(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _line_time(created: float) -> str:
    """`datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`, the second's text made once
    per second: building the datetime was a tenth of a request line's cost, at every line. The fraction is
    rounded to microseconds as datetime rounds it, then cut to milliseconds."""
    second = math.floor(created)
    microseconds = round((created - second) * 1e6)
    if microseconds >= 1_000_000:
        second, microseconds = second + 1, microseconds - 1_000_000
    return f"{_second_text(second)}.{microseconds // 1000:03d}+00:00"


def _request_fields(record: logging.LogRecord) -> dict:
    return {name: value for name in REQUEST_FIELDS if (value := getattr(record, name, None)) is not None}


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", "request_id", ...the request line's fields, "exception"}`:
    a member is left out rather than null when a record has no value for it. Every unsafe character is a
    JSON escape (`\\u2028`), so no reader splits the line or shows it reordered, and every value parses
    back exactly."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": _line_time(record.created),
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
        text = orjson.dumps(line, default=str).decode()
        # Nearly every line is ASCII without DEL, which no search need look through.
        if text.isascii() and "\x7f" not in text:
            return text
        return _UNSAFE_IN_JSON.sub(_json_escape, text)


class TextFormatter(logging.Formatter):
    """`<time> <level> <logger> [<request ID>] <message>`, then the request line's fields its message does
    not already show (experiment=..., batch_size=..., token_name=...).

    The record is one line, unsafe characters escaped (`_visible`); a traceback follows on lines of its
    own, each indented, so that a line starting at the margin is always the start of a record.
    """

    # The request line's message shows these itself (core/middleware/requestlog.py).
    IN_MESSAGE = frozenset({"method", "path", "status", "duration_ms"})
    DETAIL_INDENT = "    "

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(request_tag)s%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        lines = [_visible(self.formatMessage(record))]
        # Not cached in record.exc_text, as logging.Formatter does: another handler's formatter would
        # find this one's indented text there.
        details = []
        if record.exc_info:
            details.append(self.formatException(record.exc_info))
        elif record.exc_text:
            details.append(record.exc_text)
        if record.stack_info:
            details.append(self.formatStack(record.stack_info))
        for detail in details:
            lines += [self.DETAIL_INDENT + _visible(line) for line in detail.split("\n")]
        return "\n".join(lines)

    def formatMessage(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        record.request_tag = f"[{request_id}] " if request_id is not None else ""
        extra = [f"{name}={value}" for name, value in _request_fields(record).items() if name not in self.IN_MESSAGE]
        return " ".join([super().formatMessage(record), *extra])
