"""core/observability/logfilters.py: the first record of a kind, then a count, never a flood."""

from __future__ import annotations

import logging
import time

import pytest

from core.observability.logfilters import RepeatSummaryFilter, ServiceUnavailableFilter

WINDOW = 1.0


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


@pytest.fixture
def logged():
    """A logger of its own whose handler has the filter, as the console handler has. Its window, 1 s, outlasts a
    thousand records on a loaded machine (at 0.3 s, one CI run logged them slower than that)."""
    handler = Captured()
    handler.addFilter(RepeatSummaryFilter(window=WINDOW))
    logger = logging.getLogger("tests.logfilters")
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, handler.lines
    logger.removeHandler(handler)


def test_a_thousand_repeats__first_line_now_and_the_count_when_the_window_ends(logged):
    logger, lines = logged

    for _ in range(1000):
        logger.warning("database unavailable: %s", "connection refused")

    assert lines == ["WARNING database unavailable: connection refused"]
    time.sleep(WINDOW + 0.3)
    assert lines == [
        "WARNING database unavailable: connection refused",
        "WARNING database unavailable: connection refused [and 999 more like this in 1 s]",
    ]


def test_failure_again_after_the_window__a_new_first_line(logged):
    logger, lines = logged
    logger.warning("database unavailable: %s", "refused")
    time.sleep(WINDOW + 0.3)

    logger.warning("database unavailable: %s", "refused")

    assert lines == ["WARNING database unavailable: refused", "WARNING database unavailable: refused"]


def test_single_record__no_summary_line(logged):
    logger, lines = logged
    logger.warning("health check: database probe failed")
    time.sleep(WINDOW + 0.3)

    assert lines == ["WARNING health check: database probe failed"]


def test_different_messages_or_levels__each_has_its_first_line(logged):
    logger, lines = logged

    logger.warning("database unavailable: %s", "the database system is shutting down")
    logger.warning("database unavailable: %s", "connection refused")
    logger.error("database unavailable: %s", "connection refused")
    logger.warning("database unavailable: %s", "connection refused")

    assert len(lines) == 3
    time.sleep(WINDOW + 0.3)
    assert lines[3:] == ["WARNING database unavailable: connection refused [and 1 more like this in 1 s]"]


def test_debug_records__never_held_back(logged):
    logger, lines = logged
    logger.setLevel(logging.DEBUG)

    for _ in range(5):
        logger.debug("detail")

    assert len(lines) == 5


@pytest.mark.parametrize(("status", "kept"), [(503, False), (500, True), (404, True)])
def test_service_unavailable_filter__only_503_dropped(status, kept):
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Service Unavailable: %s", ("/x",), None)
    record.status_code = status

    assert ServiceUnavailableFilter().filter(record) is kept
