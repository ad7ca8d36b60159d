"""Every shell example of README.md and docs/ that talks to the demo server, run against one as a reader
would after `scripts/run-demo` and `export TOKEN=...`: it must succeed and print the JSON the doc shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap

import pytest

from tests.server import PROJECT_DIR, demo_server

pytestmark = [pytest.mark.e2e]

DEMO_ADDRESS = "localhost:8000"
DOCS = [PROJECT_DIR / "README.md", *sorted((PROJECT_DIR / "docs").glob("*.md"))]
BLOCK = re.compile(r"^( *)```(?:sh|bash|shell)\n(.*?)^ *```", re.MULTILINE | re.DOTALL)
# An output comment: `# {...}`, optionally after the status (`# 404 {...}`).
OUTPUT = re.compile(r"^# (?:\d{3} )?([\[{].*)$")


def examples() -> list[tuple[str, str]]:
    """(where, script) of every fenced shell block that calls the demo server, in reading order."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            script = textwrap.dedent(match.group(2))
            if DEMO_ADDRESS in script:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path.relative_to(PROJECT_DIR)}:{line}", script))
    return found


def json_values(text: str) -> list:
    """The JSON documents one after another in `text` (curl prints them without separators)."""
    decoder = json.JSONDecoder()
    values, position = [], 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return values
        value, position = decoder.raw_decode(text, position)
        values.append(value)


def documented_outputs(script: str) -> list:
    return [value for line in script.splitlines() if (m := OUTPUT.match(line.strip())) for value in json_values(m[1])]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """scripts/run-demo serving on a SQLite file of its own: (address, token)."""
    with demo_server(tmp_path_factory.mktemp("demo") / "demo.sqlite3") as (address, token, _):
        yield address, token


def test_doc_examples__found__the_readme_and_the_api_reference_among_them():
    places = {where.split(":")[0] for where, _ in examples()}

    assert {"README.md", "docs/api.md", "docs/following-links.md", "docs/identifier-links.md"} <= places


def test_doc_examples__run_in_reading_order_against_the_demo__succeed_and_print_what_they_show(demo):
    address, token = demo
    env = {"PATH": os.environ["PATH"], "TOKEN": token, "HOME": os.environ.get("HOME", "/tmp")}
    for where, script in examples():
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script.replace(DEMO_ADDRESS, address)],
            cwd=PROJECT_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{where}: {done.stderr}"
        expected = documented_outputs(script)
        if expected:
            assert json_values(done.stdout) == expected, f"{where} printed {done.stdout}"
