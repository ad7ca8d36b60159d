"""docs/how-to/openfeature.md shows parts of the examples in examples/openfeature/, which the end-to-end tests run
against the real server (tests/e2e/test_ofrep_python.py, test_ofrep_javascript.py): every code block of the page but
its shell commands must be found, as it is, in the example it links to, so the page cannot drift from code that runs."""

from __future__ import annotations

import re
import textwrap

import pytest

from tests.helpers import PROJECT_DIR

HOWTO = PROJECT_DIR / "docs" / "how-to" / "openfeature.md"
EXAMPLES = PROJECT_DIR / "examples" / "openfeature"
BLOCK = re.compile(r"^```(python|js)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SUFFIXES = {"python": ".py", "js": ".mjs"}


def blocks() -> list[tuple[str, str]]:
    return [(language, textwrap.dedent(code)) for language, code in BLOCK.findall(HOWTO.read_text(encoding="utf-8"))]


def test_howto__shows_python_and_javascript():
    assert {language for language, _ in blocks()} == {"python", "js"}


@pytest.mark.parametrize(("language", "code"), blocks())
def test_howto__each_block__verbatim_in_an_example_that_runs(language, code):
    sources = [path.read_text(encoding="utf-8") for path in EXAMPLES.glob(f"*{SUFFIXES[language]}")]

    assert any(code in source for source in sources), f"not in examples/openfeature/*{SUFFIXES[language]}:\n{code}"
