"""Every shell example of README.md and docs/ that talks to the demo server, and every shell block of the tutorial,
run against one as a reader would after `scripts/run-demo` and `export TOKEN=...`: it must succeed and print the
JSON the doc shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap

import pytest

from tests.helpers import PROJECT_DIR
from tests.helpers.server import demo_server

pytestmark = [pytest.mark.e2e]

DEMO_ADDRESS = "localhost:8000"
TUTORIALS = sorted((PROJECT_DIR / "docs" / "tutorial").glob("*.md"))
# In reading order: the README, the tutorial (every command of which a reader pastes), then the other pages.
DOCS = [
    PROJECT_DIR / "README.md",
    *TUTORIALS,
    *sorted(path for path in (PROJECT_DIR / "docs").rglob("*.md") if path not in TUTORIALS),
]
BLOCK = re.compile(r"^( *)```(?:sh|bash|shell)\n(.*?)^ *```", re.MULTILINE | re.DOTALL)
# An output comment: `# {...}`, optionally after the status (`# 404 {...}`).
OUTPUT = re.compile(r"^# (?:\d{3} )?([\[{].*)$")


def examples() -> list[tuple[str, str]]:
    """(where, script) of every fenced shell block that calls the demo server, and of every one of the tutorial,
    in reading order."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            script = textwrap.dedent(match.group(2))
            if DEMO_ADDRESS in script or path in TUTORIALS:
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
    """scripts/run-demo serving on a SQLite file of its own: (address, token, the file's DATABASE_URL)."""
    database = tmp_path_factory.mktemp("demo") / "demo.sqlite3"
    with demo_server(database) as (address, token, _):
        yield address, token, f"sqlite:///{database}"


def test_doc_examples__found__the_readme_and_the_api_reference_among_them():
    places = {where.split(":")[0] for where, _ in examples()}

    assert {
        "README.md",
        "docs/tutorial/first-experiment.md",
        "docs/reference/api.md",
        "docs/explanation/following-links.md",
    } <= places


def test_doc_examples__run_in_reading_order_against_the_demo__succeed_and_print_what_they_show(demo):
    address, token, database_url = demo
    # The tutorial's manage.py commands act on the demo's database, as they would on the reader's var/db.sqlite3.
    env = {"PATH": os.environ["PATH"], "TOKEN": token, "HOME": os.environ.get("HOME", "/tmp")}
    env |= {"DATABASE_URL": database_url, **{k: v for k, v in os.environ.items() if k == "SECRET_KEY"}}
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
