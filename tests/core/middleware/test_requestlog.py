"""core/middleware/requestlog.py and core/observability/logformats.py: one line per request with its fields, as
JSON or as text; the token's name, never the token."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from logging.config import dictConfig
from urllib.parse import quote

import pytest
from django.conf import settings

from core.healthz import database_probe, probe_connection
from core.observability.logformats import JsonFormatter, TextFormatter
from tests.helpers.observability import captured_logs, json_lines, request_lines
from tests.helpers.resources import apply_resources, experiment, variant

COOKIE_EXPERIMENT = experiment(
    "banner", subject_type="cookie", variants=[variant("control", 0.5, control=True), variant("short", 0.5)]
)


@pytest.fixture(autouse=True)
def _probe_connection_closed():
    """/healthz keeps a connection of its own open: closed, so the test database can be dropped."""
    yield
    probe_connection.close()
    database_probe.forget()


def test_experiment_assignments__one_line__method_path_status_duration_experiment_batch_token_name(
    api, proxy_token, demo_config
):
    # Given a request of three subject IDs (one repeated)
    with captured_logs() as logs:
        response = api.post(
            "/experiment-assignments",
            {"experiment_id": "checkout-button", "subject_ids": ["u-1", "u-2", "u-1"]},
            HTTP_X_REQUEST_ID="line-1",
        )

    # Then its line has every field, the token's name and not the token, anywhere in the output
    assert response.status_code == 200
    (line,) = request_lines(logs.getvalue())
    assert line["method"] == "POST"
    assert line["path"] == "/experiment-assignments"
    assert line["status"] == 200
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] > 0
    assert line["experiment"] == "checkout-button"
    assert line["batch_size"] == 3
    assert line["token_name"] == "test-proxy"
    assert line["request_id"] == "line-1"
    assert line["level"] == "INFO"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", line["time"])
    assert line["message"] == f"POST /experiment-assignments 200 {line['duration_ms']:.2f} ms"
    assert proxy_token not in logs.getvalue()
    assert proxy_token.partition(".")[2] not in logs.getvalue()


def test_assignments__batch_is_the_experiments_answered__one_named_is_the_experiment(api, demo_config):
    apply_resources(COOKIE_EXPERIMENT)
    with captured_logs() as logs:
        everything = api.post("/assignments", {"subject": {"user": "u-9", "cookie": "c-9"}})
        one = api.post("/assignments", {"subject": {"user": "u-9"}, "experiments": ["checkout-button"]})

    assert everything.status_code == one.status_code == 200
    first, second = request_lines(logs.getvalue())
    assert (first["batch_size"], "experiment" in first) == (2, False)
    assert (second["batch_size"], second["experiment"]) == (1, "checkout-button")


def test_refused_token__line_without_a_token_name_and_without_the_token(anonymous_api, demo_config):
    token = "0123456789ab." + "B" * 43
    with captured_logs() as logs:
        response = anonymous_api.post(
            "/experiment-assignments",
            {"experiment_id": "checkout-button", "subject_ids": ["u-1"]},
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    assert response.status_code == 401
    (line,) = request_lines(logs.getvalue())
    assert line["status"] == 401
    assert "token_name" not in line
    assert token not in logs.getvalue() and "B" * 43 not in logs.getvalue()


def test_every_request__a_line__healthz_pages_and_unknown_paths_too(anonymous_api):
    with captured_logs() as logs:
        anonymous_api.get("/healthz")
        anonymous_api.get("/nowhere?subject=u-1")
        anonymous_api.get("/api/schema")

    lines = request_lines(logs.getvalue())
    assert [(line["path"], line["status"]) for line in lines] == [
        ("/healthz", 200),
        ("/nowhere", 404),
        ("/api/schema", 200),
    ]
    # The query string is not logged: it may carry anything
    assert "u-1" not in logs.getvalue()


def test_same_request_repeated__a_line_each__not_summarised(api, demo_config):
    repeats = 30
    body = {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}
    with captured_logs() as logs:
        for _ in range(repeats):
            api.post("/experiment-assignments", body)

    assert len(request_lines(logs.getvalue())) == repeats


def record(**fields) -> logging.LogRecord:
    made = logging.LogRecord("config.requestlog", logging.INFO, __file__, 1, "POST /x 200 1.50 ms", (), None)
    made.__dict__.update(fields)
    return made


def test_json_formatter__no_request__no_request_members_and_valid_json():
    line = json.loads(JsonFormatter().format(record(request_id=None)))

    assert set(line) == {"time", "level", "logger", "message"}


@pytest.mark.parametrize(
    "created",
    [0.0, 1.0005, 1764644399.9995, 1764644399.9999996, 1764644400.0000004, 1764644400.123456, 4102444799.999],
)
def test_json_formatter__time__as_datetime_writes_it_to_the_millisecond(created):
    line = json.loads(JsonFormatter().format(record(request_id=None, created=created)))

    assert line["time"] == datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


def test_json_formatter__del_and_non_ascii__del_escaped_the_rest_raw():
    line = JsonFormatter().format(record(request_id=None, path="/caf\u00e9\x7f/\u2028"))

    assert "/caf\u00e9\\u007f/\\u2028" in line
    assert json.loads(line)["path"] == "/caf\u00e9\x7f/\u2028"


def test_json_formatter__exception__its_traceback_in_one_member_on_one_line():
    try:
        raise ValueError("boom")
    except ValueError:
        failed = record(request_id="r-1", exc_info=sys.exc_info())

    text = JsonFormatter().format(failed)

    assert "\n" not in text
    assert "ValueError: boom" in json.loads(text)["exception"]


def test_text_formatter__request_line__id_in_brackets_and_the_fields_not_in_the_message():
    text = TextFormatter().format(
        record(
            request_id="r-1",
            method="POST",
            path="/x",
            status=200,
            duration_ms=1.5,
            experiment="checkout-button",
            batch_size=2,
            token_name="demo",
        )
    )

    assert text.endswith(
        " INFO config.requestlog [r-1] POST /x 200 1.50 ms experiment=checkout-button batch_size=2 token_name=demo"
    )


def test_text_formatter__exception_with_a_line_break__traceback_indented_under_its_record():
    try:
        raise ValueError("boom\n2026-11-24 12:00:00,000 INFO config.requestlog forged\u2028x")
    except ValueError:
        failed = record(request_id="r-1", exc_info=sys.exc_info())

    first, *details = TextFormatter().format(failed).split("\n")

    assert first.endswith(" [r-1] POST /x 200 1.50 ms")
    assert details[0] == "    Traceback (most recent call last):"
    assert all(line.startswith("    ") for line in details)
    assert details[-2:] == ["    ValueError: boom", "    2026-11-24 12:00:00,000 INFO config.requestlog forged\\u2028x"]


def test_text_formatter__outside_a_request__no_brackets():
    assert TextFormatter().format(record(request_id=None)).endswith(" INFO config.requestlog POST /x 200 1.50 ms")


@contextlib.contextmanager
def logging_as_text() -> Iterator[None]:
    """The logging configured as LOG_FORMAT=text configures it, for the block."""
    dictConfig(
        {
            **settings.LOGGING,
            "handlers": {
                name: {**handler, "formatter": "text"} for name, handler in settings.LOGGING["handlers"].items()
            },
        }
    )
    try:
        yield
    finally:
        dictConfig(settings.LOGGING)


def test_log_format_text__the_handlers_write_text(anonymous_api):
    with logging_as_text(), captured_logs() as logs:
        anonymous_api.get("/healthz", HTTP_X_REQUEST_ID="t-1")

    assert re.search(r" INFO config\.requestlog \[t-1\] GET /healthz 200 [\d.]+ ms$", logs.getvalue().strip())
    assert json_lines(logs.getvalue()) == []


# A client chooses the path and the experiment ID: with line breaks, a terminal escape, a line separator
# and bidirectional overrides in them, they could forge a line or hide what follows them.
FORGED = "\n2026-11-24 12:00:00,000 INFO config.requestlog [x] GET /healthz 200 1.00 ms"
FORGING_PATH = "/nowhere" + FORGED + "\u2028a\u202eb"
FORGING_EXPERIMENT = "nope\r" + FORGED + "\x1b[31m\u2029c\u2066d\x85"
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def forging_requests(api) -> None:
    api.get(quote(FORGING_PATH))
    api.post("/experiment-assignments", {"experiment_id": FORGING_EXPERIMENT, "subject_ids": ["u-1"]})


def test_log_format_text__line_breaks_and_overrides_sent__one_line_per_record_every_one_escaped(api, demo_config):
    with logging_as_text(), captured_logs() as logs:
        forging_requests(api)

    # Then each record is one line starting with its own time, and what was sent is shown, escaped
    output = logs.getvalue()
    lines = output.removesuffix("\n").split("\n")
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING) ", line) for line in lines)
    assert [line.split()[3] for line in lines].count("config.requestlog") == 2
    assert UNSAFE.findall(output.replace("\n", "")) == []
    forged = "\\n2026-11-24 12:00:00,000 INFO config.requestlog [x] GET /healthz 200 1.00 ms"
    assert f"GET /nowhere{forged}\\u2028a\\u202eb 404 " in output
    assert f"experiment=nope\\r{forged}\\x1b[31m\\u2029c\\u2066d\\x85 " in output


def test_log_format_json__line_breaks_and_overrides_sent__one_line_per_record_exact_values(api, demo_config):
    with captured_logs() as logs:
        forging_requests(api)

    output = logs.getvalue()
    assert UNSAFE.findall(output.replace("\n", "")) == []
    assert len(output.splitlines()) == output.count("\n")
    first, second = request_lines(output)
    assert first["path"] == FORGING_PATH
    assert second["experiment"] == FORGING_EXPERIMENT


def test_log_format__unknown_value__start_up_refused_naming_the_variable():
    env = {**os.environ, "LOG_FORMAT": "xml", "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 1
    assert "LOG_FORMAT must be one of json, text, got 'xml'" in done.stderr
