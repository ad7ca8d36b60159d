"""docs/index.md and CHANGELOG.md against the tree: every screenshot on the map, the version released the
version the service reports."""

from __future__ import annotations

import re

from core.version import VERSION
from tests.helpers import PROJECT_DIR

DOCS = PROJECT_DIR / "docs"


def test_index__every_screenshot__linked_from_the_map():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    screenshots = sorted(path.name for path in (DOCS / "screenshots").glob("*.png"))

    assert screenshots
    assert [name for name in screenshots if f"(screenshots/{name})" not in index] == []


def test_changelog__latest_release__the_version_the_service_reports():
    # /api/schema's info.version and every command's --version come from core.version
    headings = re.findall(r"^## (\S+)", (PROJECT_DIR / "CHANGELOG.md").read_text(encoding="utf-8"), re.MULTILINE)
    released = [heading for heading in headings if heading != "Unreleased"]

    assert released[0] == VERSION
