"""The documentation's budget and shape: every page within 16 KB, all of them within 200 KB, the explanation of
performance within 10 KB, each page one kind (a folder of its own under docs/), and no commit hash: a page states
what holds now, and the measurements that name commits live in bench/results/."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import PROJECT_DIR

DOCS = PROJECT_DIR / "docs"
PAGE_BYTES = 16_000
TOTAL_BYTES = 200_000
PERFORMANCE = DOCS / "explanation" / "performance.md"
PERFORMANCE_BYTES = 10_000
KINDS = ("tutorial", "how-to", "reference", "explanation")
MAP = DOCS / "index.md"
# A word of 7 to 40 lowercase hexadecimal digits; a commit hash has both digits and letters, unlike a number or
# a word such as "deadbeef".
HEX_WORD = re.compile(r"\b[0-9a-f]{7,40}\b")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def size(page: Path) -> int:
    return len(page.read_bytes())


def commit_like(text: str) -> list[str]:
    return [word for word in HEX_WORD.findall(text) if re.search(r"[0-9]", word) and re.search(r"[a-f]", word)]


def test_docs__pages__found():
    assert MAP in pages()
    assert PERFORMANCE in pages()


def test_docs__every_page__at_most_16_kb():
    over = {str(page.relative_to(PROJECT_DIR)): size(page) for page in pages() if size(page) > PAGE_BYTES}

    assert not over, f"pages over {PAGE_BYTES} bytes (split them by sub-topic, or link instead of repeating): {over}"


def test_docs__all_pages__at_most_200_kb():
    total = sum(size(page) for page in pages())

    assert total <= TOTAL_BYTES, f"docs/**/*.md hold {total} bytes, over the budget of {TOTAL_BYTES}"


def test_docs__performance_explanation__at_most_10_kb():
    assert size(PERFORMANCE) <= PERFORMANCE_BYTES, (
        f"{PERFORMANCE.relative_to(PROJECT_DIR)} is {size(PERFORMANCE)} bytes: tables of measurements go to "
        "bench/results/"
    )


def test_docs__every_page__one_kind_in_its_folder():
    misplaced = [
        str(page.relative_to(PROJECT_DIR))
        for page in pages()
        if page != MAP and page.relative_to(DOCS).parts[0] not in KINDS
    ]
    nested = [str(page.relative_to(PROJECT_DIR)) for page in pages() if len(page.relative_to(DOCS).parts) > 2]

    assert not misplaced, f"pages outside docs/index.md and {', '.join(KINDS)}: {misplaced}"
    assert not nested, f"pages nested below a kind's folder: {nested}"


def test_docs__no_page__names_a_commit():
    found = {
        str(page.relative_to(PROJECT_DIR)): words for page in pages() if (words := commit_like(page.read_text("utf-8")))
    }

    assert not found, f"commit-like words (measurements that name commits belong in bench/results/): {found}"


def test_docs__commit_like__hashes_caught_numbers_and_words_not():
    assert commit_like("measured at 5ecfd8c and 123502d") == ["5ecfd8c", "123502d"]
    assert commit_like("31536000 seconds, 0xdeadbeef, deadbeef, decaffed, 1f2") == []
