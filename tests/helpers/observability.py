"""Helpers of the observability tests: the service's log output as its handlers write it, and /metrics read
back into numbers."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@contextlib.contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Everything the service logs meanwhile, formatted and filtered as LOGGING's handlers do (the console's
    and the request log's), written to one stream as well as to theirs."""
    stream = io.StringIO()
    added = []
    for logger_name, handler_name in (("", "console"), ("config.requestlog", "requests")):
        logger = logging.getLogger(logger_name)
        configured = next(handler for handler in logger.handlers if handler.get_name() == handler_name)
        copy = logging.StreamHandler(stream)
        copy.setFormatter(configured.formatter)
        for log_filter in configured.filters:
            # An instance of its own: the repeat summary's count is per handler.
            copy.addFilter(type(log_filter)())
        logger.addHandler(copy)
        added.append((logger, copy))
    try:
        yield stream
    finally:
        for logger, copy in added:
            logger.removeHandler(copy)


def json_lines(text: str) -> list[dict]:
    """The JSON log lines of `text` (gunicorn's own lines are not JSON)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def request_lines(text: str) -> list[dict]:
    return [line for line in json_lines(text) if line["logger"] == "config.requestlog"]


def samples(exposition: str) -> Samples:
    """Every sample of a /metrics answer by (name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def sample(found: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for one not there yet (a labelled counter appears with its first count)."""
    return found.get((name, frozenset(labels.items())), 0.0)
