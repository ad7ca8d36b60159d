"""docs/how-to/clients.md's Python and JavaScript clients, run as the page shows them against the real service on a
private PostgreSQL cluster: each fenced block is written to the file its first line names, so what is tested
is what a reader copies. The examples print what the page says; a real database outage is retried after the
503's Retry-After and then answered; an error that is not retried is raised at once; the timeout is kept."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import PROJECT_DIR
from tests.helpers.server import gunicorn, gunicorn_log, silent_server, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]

CLIENTS_DOC = PROJECT_DIR / "docs" / "how-to" / "clients.md"
BLOCK = re.compile(r"^```(?:python|js)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_NAME = re.compile(r"(?:#|//) ([\w.-]+\.(?:py|mjs))\n")
# The last line of an example: its output, as a comment.
OUTPUT = re.compile(r"^(?:#|//) (.*)\n\Z", re.MULTILINE)
DEMO_BASE_URL = "http://localhost:8000"
REQUEST = {"experiment_id": "checkout-button", "subject_ids": ["u1", "u2"]}
# gunicorn's access log (deploy/gunicorn.conf.py): the status, and the user agent last.
ACCESS_LOG_LINE = re.compile(r'"POST /experiment-assignments HTTP/1\.1" (\d{3}) .* "([^"]*)"$')
# Each client's requests are told from the test's own by the user agent their HTTP library sends.
USER_AGENT = {"py": re.compile(r"python-httpx/"), "mjs": re.compile(r"node$")}
PROBE_HEADERS = {"User-Agent": "test-probe"}

# Each calls the page's client once (with the REQUEST above) and prints the outcome as JSON with the seconds the
# call took: {"assignments": {...}} or {"error": <status> or "timeout"}.
CALLS = {
    "call.py": """
import json, sys, time

import httpx

from assignment_client import assign

base_url, token, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
started = time.monotonic()
try:
    outcome = {"assignments": assign("checkout-button", ["u1", "u2"], base_url=base_url, token=token, timeout=timeout)}
except httpx.TimeoutException:
    outcome = {"error": "timeout"}
except httpx.HTTPStatusError as error:
    outcome = {"error": error.response.status_code}
print(json.dumps({**outcome, "seconds": time.monotonic() - started}))
""",
    "call.mjs": """
import { assign, AssignmentError } from "./assignment-client.mjs";

const [baseUrl, token, timeout] = process.argv.slice(2);
const started = performance.now();
let outcome;
try {
  const options = { baseUrl, token, timeout: Number(timeout) * 1000 };
  outcome = { assignments: await assign("checkout-button", ["u1", "u2"], options) };
} catch (error) {
  if (error instanceof AssignmentError) outcome = { error: error.status };
  else if (error.name === "TimeoutError") outcome = { error: "timeout" };
  else throw error;
}
console.log(JSON.stringify({ ...outcome, seconds: (performance.now() - started) / 1000 }));
""",
}

LANGUAGES = [
    pytest.param("py", id="python"),
    pytest.param(
        "mjs", id="javascript", marks=pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
    ),
]


def doc_files() -> dict[str, str]:
    """{file name: text} of every Python and JavaScript block of docs/how-to/clients.md, named by its first line."""
    files = {}
    for match in BLOCK.finditer(CLIENTS_DOC.read_text(encoding="utf-8")):
        name = FILE_NAME.match(match[1])
        assert name, f"a block of docs/how-to/clients.md does not start with the name of its file:\n{match[1]}"
        files[name[1]] = match[1]
    return files


def interpreter(language: str) -> list[str]:
    return [sys.executable] if language == "py" else ["node"]


def run(language: str, directory: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [*interpreter(language), *args],
        cwd=directory,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def call(language: str, directory: Path, base_url: str, token: str, *, timeout: float) -> dict:
    return json.loads(run(language, directory, f"call.{language}", base_url, token, str(timeout)))


def statuses_logged(log_path: Path, language: str, *, after_line: int) -> list[int]:
    """The statuses of the client's POST /experiment-assignments in gunicorn's access log, from line
    `after_line` on."""
    lines = log_path.read_text().splitlines()[after_line:]
    matches = [ACCESS_LOG_LINE.search(line) for line in lines]
    return [int(match[1]) for match in matches if match and USER_AGENT[language].match(match[2])]


def answer_if_503(response: httpx.Response) -> httpx.Response | None:
    return response if response.status_code == 503 else None


@pytest.fixture(scope="module")
def service(service_env):
    """gunicorn on the private cluster: (base URL, its log file, which holds the access log)."""
    with gunicorn(env=service_env, workers=1) as (base_url, _):
        wait_until(lambda: httpx.get(f"{base_url}/healthz").status_code == 200, timeout=15)
        yield base_url, gunicorn_log(base_url)


@pytest.fixture(scope="module")
def clients(tmp_path_factory, service) -> Path:
    """A directory holding the page's files, their examples pointed at the service, and the CALLS."""
    base_url, _ = service
    directory = tmp_path_factory.mktemp("clients")
    for name, text in {**doc_files(), **CALLS}.items():
        (directory / name).write_text(text.replace(DEMO_BASE_URL, base_url))
    return directory


def test_client_examples__page__a_module_and_an_example_per_language():
    assert set(doc_files()) == {"assignment_client.py", "example.py", "assignment-client.mjs", "example.mjs"}


@pytest.mark.parametrize("language", LANGUAGES)
def test_client_examples__example_run__prints_the_output_the_page_shows(language, clients, proxy_token):
    # Given the page's example and the output it shows
    example = doc_files()[f"example.{language}"]
    shown = OUTPUT.search(example)[1]

    # When it is run as the page says, with the token in $TOKEN
    printed = run(language, clients, f"example.{language}", env={"TOKEN": proxy_token})

    # Then it prints that output: the README's first answer
    parse = ast.literal_eval if language == "py" else json.loads
    assert parse(printed) == parse(shown) == {"u1": "control", "u2": "green"}


@pytest.mark.parametrize("language", LANGUAGES)
def test_client_examples__database_down_then_back__503_retried_after_retry_after_then_answered(
    language, clients, service, cluster, proxy_token
):
    base_url, log_path = service
    auth = {"Authorization": f"Bearer {proxy_token}"}
    # Given the service's database stopped: the service answers 503 and says when to retry
    cluster.stop()
    try:
        refused = wait_until(
            lambda: answer_if_503(
                httpx.post(f"{base_url}/experiment-assignments", json=REQUEST, headers={**auth, **PROBE_HEADERS})
            ),
            timeout=15,
        )
        assert refused.headers["retry-after"] == "5"
        lines_before = len(log_path.read_text().splitlines())

        # When the client asks, and the database is back once the client has had its 503
        process = subprocess.Popen(
            [*interpreter(language), f"call.{language}", base_url, proxy_token, "10"],
            cwd=clients,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(lambda: statuses_logged(log_path, language, after_line=lines_before), timeout=15)
    finally:
        cluster.start()
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    outcome = json.loads(stdout)

    # Then it answers the assignments, having waited the 5 seconds of Retry-After after its 503
    assert outcome["assignments"] == {"u1": "control", "u2": "green"}
    assert outcome["seconds"] >= 5
    # (gunicorn logs a request once it has answered it)
    wait_until(lambda: statuses_logged(log_path, language, after_line=lines_before)[-1] == 200, timeout=5)
    statuses = statuses_logged(log_path, language, after_line=lines_before)
    assert statuses[0] == 503 and statuses[-1] == 200 and len(statuses) <= 3, statuses


@pytest.mark.parametrize("language", LANGUAGES)
def test_client_examples__token_refused__raised_without_a_retry(language, clients, service):
    base_url, log_path = service
    lines_before = len(log_path.read_text().splitlines())

    outcome = call(language, clients, base_url, "not-a-token", timeout=10)

    assert outcome["error"] == 401
    assert wait_until(lambda: statuses_logged(log_path, language, after_line=lines_before), timeout=5) == [401]


@pytest.mark.parametrize("language", LANGUAGES)
def test_client_examples__server_never_answers__timeout_raised_after_the_timeout_not_retried(language, clients):
    # Given a server that accepts the connection and never answers
    with silent_server() as port:
        # When the client asks with a timeout of 1 second
        outcome = call(language, clients, f"http://127.0.0.1:{port}", "any-token", timeout=1)

    # Then it gives up after that second, once: a timeout is not retried
    assert outcome["error"] == "timeout"
    assert 1 <= outcome["seconds"] < 1.9
