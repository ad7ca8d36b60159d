"""The OFREP endpoints through the official JavaScript SDKs on Node, against a running server: the server SDK
(@openfeature/server-sdk and @openfeature/ofrep-provider) evaluating each value type as the stored variant's
value, the same assignment POST /assignments answers whichever comes first, errors as the SDK reports them and
the tokens it may send; the web SDK (@openfeature/web-sdk and @openfeature/ofrep-web-provider) evaluating in
bulk, polling with the ETag and receiving a change; and examples/openfeature/server.mjs and browser.mjs run as
a reader runs them. tests/e2e/openfeature_js/ holds the small scripts that drive the SDKs.

The packages are clients/openfeature-js's lock, installed by scripts/install-node-clients. In CI
(REQUIRE_POSTGRES=1) a missing node or a failed install fails these tests; elsewhere it skips them.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from assignments.models import Assignment
from devtools.processes import process_stop
from tests.helpers import PROJECT_DIR
from tests.helpers.ofrep import Flag
from tests.helpers.resources import apply_resources, subject_type
from tests.helpers.server import database_url_for_tests, gunicorn, gunicorn_log, tool_missing, wait_until
from tokens.services import api_token_create

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-ofrep-javascript-not-secret"
NODE_PACKAGES = PROJECT_DIR / "clients" / "openfeature-js"
SCRIPTS = (
    PROJECT_DIR / "examples" / "openfeature" / "server.mjs",
    PROJECT_DIR / "examples" / "openfeature" / "browser.mjs",
    *sorted((Path(__file__).parent / "openfeature_js").glob("*.mjs")),
)
# gunicorn's access log (deploy/gunicorn.conf.py): the status of each bulk evaluation.
BULK_LOGGED = re.compile(r'"POST /ofrep/v1/evaluate/flags HTTP/1\.1" (\d{3}) ')
# Each group is enough subjects for both variants of every 50/50 flag below to be served (asserted, not hoped).
SDK_FIRST = [f"sdk-{number}" for number in range(10)]
API_FIRST = [f"api-{number}" for number in range(10)]


class NodeFlag(Flag):
    """A flag as the JavaScript SDKs read it: `read_as` is the SDK's type for it."""

    def evaluation(self, targeting_key: str | None = None) -> dict:
        """What tests/e2e/openfeature_js/*.mjs take for one evaluation of the flag."""
        request = {"key": self.key, "type": self.read_as, "default": self.default}
        return request if targeting_key is None else {**request, "targetingKey": targeting_key}


CHECKOUT = NodeFlag("checkout-button", None, ("control", "green"), "string", "fallback")
LABEL = NodeFlag("button-label", "string", ("Buy", "Buy now"), "string", "fallback")
ONE_CLICK = NodeFlag("one-click", "boolean", (False, True), "boolean", False)
# JavaScript has one number type: integers and floats are both read with getNumberDetails.
FLAGS = (
    CHECKOUT,
    LABEL,
    ONE_CLICK,
    NodeFlag("max-items", "integer", (3, 5), "number", -1),
    NodeFlag("discount", "float", (1.0, 2.5), "number", -1),
    NodeFlag(
        "button-style",
        "object",
        ({"label": "Buy", "color": "#888888"}, {"label": "Buy now", "color": "#00aa00", "badge": None}),
        "object",
        {},
    ),
)
SINGLE_ONLY = NodeFlag("search-ranking", "string", ("bm25", "learned"), "string", "fallback")
COOKIE_BANNER = NodeFlag("cookie-banner", "string", ("Accept", "OK"), "string", "fallback")
DRAFT = NodeFlag("next-checkout", "string", ("Buy", "Pay"), "string", "fallback")
NEW = NodeFlag("onboarding", "boolean", (False, True), "boolean", False)
RESOURCES = (
    subject_type("user"),
    subject_type("cookie"),
    *(flag.document() for flag in FLAGS),
    SINGLE_ONLY.document(bulk_evaluation=False),
    COOKIE_BANNER.document(subject_type="cookie"),
    DRAFT.document(status="draft"),
)


class Node:
    """node running SCRIPTS, copied into a directory beside a link to the installed packages, since an ES
    module's imports are looked up from its own directory up (NODE_PATH is for require() only)."""

    def __init__(self, binary: str, directory: Path):
        self.binary = binary
        self.directory = directory

    def run(self, script: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.binary, script, *args],
            cwd=self.directory,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def lines(self, script: str, *args: str, env: dict[str, str]) -> list[dict]:
        """The JSON lines the script printed, once it has ended well."""
        done = self.run(script, *args, env=env)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    @contextlib.contextmanager
    def started(self, script: str, *args: str, env: dict[str, str]) -> Iterator[Lines]:
        """The script running until the block ends, and the JSON lines it prints, as they come."""
        stderr = self.directory / f"{script}.stderr"
        with stderr.open("w") as errors:
            process = subprocess.Popen(
                [self.binary, script, *args],
                cwd=self.directory,
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        try:
            yield Lines(process, stderr)
        finally:
            process_stop(process)


class Lines:
    """What a running script prints, read by a thread so that a test can wait for a line with a timeout."""

    def __init__(self, process: subprocess.Popen, stderr: Path):
        self.stderr = stderr
        self.printed: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.printed.put(line) for line in process.stdout], daemon=True).start()

    def next(self, *, timeout: float) -> dict:
        try:
            return json.loads(self.printed.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"nothing printed in {timeout} s; stderr:\n{self.stderr.read_text()}") from None


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Node:
    """node 20 or later with the packages of the lock installed, or the tests skipped (failed in CI)."""
    binary = shutil.which("node")
    if binary is None:
        tool_missing("node is not installed")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.removeprefix("v").split(".")[0]) < 20:
        tool_missing(f"node {version} is too old: @openfeature/server-sdk needs 20 or later")
    # A no-op while node_modules holds what the lock names.
    install = subprocess.run(
        [str(PROJECT_DIR / "scripts" / "install-node-clients")], capture_output=True, text=True, timeout=600
    )
    if install.returncode != 0:
        tool_missing(f"scripts/install-node-clients failed: {install.stderr[-2000:]}")
    directory = tmp_path_factory.mktemp("openfeature-js")
    (directory / "node_modules").symlink_to(NODE_PACKAGES / "node_modules")
    for script in SCRIPTS:
        shutil.copy(script, directory / script.name)
    return Node(binary, directory)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Service:
    url: str
    proxy_token: str
    client_token: str

    def assigned(self, key: str, subject_id: str) -> dict:
        """POST /assignments for the user `subject_id` in the experiment `key`, with the proxy token."""
        response = httpx.post(
            f"{self.url}/assignments",
            json={"subject": {"user": subject_id}, "experiments": [key]},
            headers=bearer(self.proxy_token),
        )
        assert response.status_code == 200, response.text
        return response.json()

    def env(self, headers: dict[str, str], **more: str) -> dict[str, str]:
        """The environment of tests/e2e/openfeature_js/*.mjs: the service, the headers that carry a token."""
        return {"SERVICE_URL": self.url, "HEADERS": json.dumps(list(headers.items())), **more}

    def bulk_statuses(self) -> list[str]:
        """The statuses of the bulk evaluations served so far, in gunicorn's access log."""
        return BULK_LOGGED.findall(gunicorn_log(self.url).read_text())


@pytest.fixture
def service(node) -> Iterator[Service]:
    """gunicorn with two workers on the test database, RESOURCES applied; a proxy and a client token."""
    apply_resources(*RESOURCES)
    _, proxy_token = api_token_create(name="backend")
    _, client_token = api_token_create(name="web-app", role="client")
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": SECRET_KEY}
    with gunicorn(env=env, workers=2) as (url, _):
        wait_until(lambda: httpx.get(f"{url}/healthz").status_code == 200, timeout=15)
        yield Service(url, proxy_token, client_token)


def stored(flag: Flag, subject_id: str) -> Assignment:
    return Assignment.objects.select_related("variant").get(experiment__key=flag.key, subject_id=subject_id)


def split(flag: Flag, subject_id: str) -> dict:
    """The details of an evaluation that got the subject's stored assignment."""
    row = stored(flag, subject_id)
    return {
        "value": flag.value_of(row.variant.key),
        "variant": row.variant.key,
        "reason": "SPLIT",
        "flagMetadata": {"experimentStatus": "active", "source": row.source, "cohort": row.cohort},
    }


def answered(details: dict) -> dict:
    """What the SDK answered, of the details it printed."""
    return {key: details.get(key) for key in ("value", "variant", "reason", "flagMetadata")}


def failed(details: dict) -> tuple:
    """A failed evaluation as the SDK reports it: the error's code, and the default value the app passed."""
    return details.get("errorCode"), details["value"], details["reason"], details.get("variant")


def test_ofrep_javascript__server_sdk_every_value_type_either_order__the_stored_variant_same_as_the_api(node, service):
    headers = bearer(service.proxy_token)
    for flag in FLAGS:
        # When the SDK evaluates first, and POST /assignments then asks for the same subjects
        by_sdk = node.lines(
            "evaluate.mjs", json.dumps([flag.evaluation(s) for s in SDK_FIRST]), env=service.env(headers)
        )

        # Then the SDK got the variant it stored, split by the formula, and its value as the flag's type
        assert [answered(details) for details in by_sdk] == [split(flag, s) for s in SDK_FIRST], flag.key
        assert {stored(flag, s).source for s in SDK_FIRST} == {"hashed"}
        # And the API answers the same variants, from the SDK's rows
        by_api = [service.assigned(flag.key, s) for s in SDK_FIRST]
        assert [body["assignments"][flag.key] for body in by_api] == [details["variant"] for details in by_sdk]
        assert [body["new_assignments"] for body in by_api] == [[]] * len(SDK_FIRST)

        # When POST /assignments comes first, then the SDK
        by_api = [service.assigned(flag.key, s) for s in API_FIRST]
        by_sdk = node.lines(
            "evaluate.mjs", json.dumps([flag.evaluation(s) for s in API_FIRST]), env=service.env(headers)
        )

        # Then the SDK gets the variant the API stored
        assert [body["new_assignments"] for body in by_api] == [[flag.key]] * len(API_FIRST)
        assert [details["variant"] for details in by_sdk] == [body["assignments"][flag.key] for body in by_api]
        assert [answered(details) for details in by_sdk] == [split(flag, s) for s in API_FIRST], flag.key

        served = {details["variant"] for details in by_sdk} | {body["assignments"][flag.key] for body in by_api}
        assert served == {"control", "green"}, flag.key


def test_ofrep_javascript__unknown_flag_bad_context_or_wrong_type__the_error_code_and_the_default(node, service):
    evaluations = [
        NodeFlag("no-such-flag", "float", (1.0, 2.5), "number", -1).evaluation("u1"),
        LABEL.evaluation(None),
        LABEL.evaluation("u" * 257),
        # The SDK's type check comes after the service's evaluation, which stores the assignment
        ONE_CLICK.evaluation("u1") | {"type": "string", "default": "fallback"},
    ]

    unknown, no_key, bad_key, wrong_type = node.lines(
        "evaluate.mjs", json.dumps(evaluations), env=service.env(bearer(service.proxy_token))
    )

    # An unknown flag: FLAG_NOT_FOUND and the default, with the service's errorDetails
    answer = httpx.post(
        f"{service.url}/ofrep/v1/evaluate/flags/no-such-flag",
        json={"context": {"targetingKey": "u1"}},
        headers=bearer(service.proxy_token),
    )
    assert (answer.status_code, answer.json().get("errorCode")) == (404, "FLAG_NOT_FOUND"), answer.text
    assert failed(unknown) == ("FLAG_NOT_FOUND", -1, "ERROR", None)
    assert unknown["errorMessage"] == answer.json()["errorDetails"]
    # No targeting key, or one that is no subject ID
    assert failed(no_key) == ("TARGETING_KEY_MISSING", "fallback", "ERROR", None)
    assert failed(bad_key) == ("INVALID_CONTEXT", "fallback", "ERROR", None)
    # A boolean flag read as a string
    assert failed(wrong_type) == ("TYPE_MISMATCH", "fallback", "ERROR", None)
    assert list(Assignment.objects.values_list("experiment__key", "subject_id")) == [(ONE_CLICK.key, "u1")]


def test_ofrep_javascript__tokens__client_as_bearer_and_x_api_key_evaluate_and_nothing_else_unknown_refused(
    node, service
):
    # A client token as Authorization: Bearer, then as X-API-Key, for the same subject
    as_bearer, as_key = (
        node.lines("evaluate.mjs", json.dumps([LABEL.evaluation("u1")]), env=service.env(headers))[0]
        for headers in (bearer(service.client_token), {"X-API-Key": service.client_token})
    )
    assert answered(as_bearer) == answered(as_key) == split(LABEL, "u1")

    # The client token calls nothing but the OFREP paths
    refused = httpx.post(
        f"{service.url}/assignments", json={"subject": {"user": "u1"}}, headers=bearer(service.client_token)
    )
    assert refused.status_code == 403, refused.text

    # The provider reports a 401 as GENERAL, and the app gets its default value
    [unknown] = node.lines("evaluate.mjs", json.dumps([LABEL.evaluation("u2")]), env=service.env(bearer("unknown")))
    assert failed(unknown) == ("GENERAL", "fallback", "ERROR", None)
    assert not Assignment.objects.filter(subject_id="u2").exists()


def test_ofrep_javascript__server_example__prints_the_details_of_its_subject_or_u1_and_exits_1_on_an_error(
    node, service
):
    # The example run as its header says, with a proxy token then a client token
    for token, args, subject_id in ((service.proxy_token, ("u2",), "u2"), (service.client_token, (), "u1")):
        done = node.run("server.mjs", *args, env={"SERVICE_URL": service.url, "TOKEN": token})
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == split(CHECKOUT, subject_id)
        assert service.assigned(CHECKOUT.key, subject_id)["assignments"] == {
            CHECKOUT.key: split(CHECKOUT, subject_id)["variant"]
        }
    # The README's first answer: u1 control, u2 green
    assert sorted(Assignment.objects.values_list("subject_id", "variant__key")) == [("u1", "control"), ("u2", "green")]

    # The provider's error for a 401 has no message
    refused = node.run("server.mjs", env={"SERVICE_URL": service.url, "TOKEN": "not-a-token"})
    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", "GENERAL: \n")


def test_ofrep_javascript__web_sdk_bulk__every_bulk_experiment_of_the_subject_type_each_as_its_type(node, service):
    flags = (*FLAGS, SINGLE_ONLY, COOKIE_BANNER, DRAFT)
    context = {"targetingKey": "u-web", "subjectType": "user"}

    # When the web SDK starts for a user, with a client token
    [started] = node.lines(
        "bulk.mjs",
        json.dumps([flag.evaluation() for flag in flags]),
        env=service.env(bearer(service.client_token), CONTEXT=json.dumps(context)),
    )

    # Then one bulk evaluation brought every running experiment of `user` listed for it: not the one with
    # bulkEvaluation false, not the cookie's, not the draft
    assert started["flags"] == sorted(flag.key for flag in FLAGS)
    # (gunicorn logs a request once it has answered it)
    assert wait_until(service.bulk_statuses, timeout=5) == ["200"]
    # And each reads as the variant it stored for the user, with that variant's value as the flag's type
    assert {flag.key: answered(started["details"][flag.key]) for flag in FLAGS} == {
        flag.key: split(flag, "u-web") for flag in FLAGS
    }
    # And the web provider knows no other flag: it reads only what the bulk evaluation brought
    for flag in (SINGLE_ONLY, COOKIE_BANNER, DRAFT):
        assert failed(started["details"][flag.key]) == ("FLAG_NOT_FOUND", "fallback", "ERROR", None)
    assert not Assignment.objects.exclude(experiment__key__in=[flag.key for flag in FLAGS]).exists()


def test_ofrep_javascript__browser_example_polling__304_until_an_evaluation_changes_then_the_new_value(node, service):
    env = {"SERVICE_URL": service.url, "TOKEN": service.client_token, "SUBJECT_ID": "u-poll", "POLL_INTERVAL_MS": "200"}
    with node.started("browser.mjs", env=env) as printed:
        # When the page starts: the flag as the bulk evaluation stored it
        first = printed.next(timeout=30)
        assert first == split(CHECKOUT, "u-poll")

        # And while nothing changes, each poll sends the ETag back and is answered 304
        wait_until(lambda: service.bulk_statuses().count("304") >= 3, timeout=15)
        assert service.bulk_statuses()[0] == "200"
        assert set(service.bulk_statuses()[1:]) == {"304"}

        # When another experiment starts, nothing changes for the flag the page shows
        apply_resources(NEW.document())
        wait_until(lambda: "200" in service.bulk_statuses()[1:], timeout=15)
        assert Assignment.objects.filter(experiment__key=NEW.key, subject_id="u-poll").exists()

        # When the other variant of the page's flag is declared the winner
        winner = "green" if first["variant"] == "control" else "control"
        apply_resources(CHECKOUT.document(status="winner_declared", winning_variant=winner))

        # Then the next poll brings it, which the page prints
        assert printed.next(timeout=15) == {
            "value": winner,
            "variant": winner,
            "reason": "STATIC",
            "flagMetadata": {"experimentStatus": "winner_declared"},
        }
        wait_until(lambda: service.bulk_statuses()[-1] == "304", timeout=15)
