"""The draws recomputed outside the service: the SQL recipes page's sections and fenced blocks, subject IDs that a
careless translation gets wrong, splits to draw, and Pearson's chi-square against independence."""

from __future__ import annotations

import math
import re

from tests.helpers import PROJECT_DIR

DOC = PROJECT_DIR / "docs" / "reference" / "sql-recipes.md"
# A fenced block: its language (empty for plain text) and its text.
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)

SPLITS = [("control", 0.15), ("b", 0.6), ("c", 0.25)]
# Far beyond chance at every test below, yet no deterministic data set can stumble on it by bad luck.
ALPHA = 1e-4


def doc_section(section: str) -> str:
    """The text of DOC from the heading `section` to the next heading of its level."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    return text[start : end if end != -1 else len(text)]


def odd_subject_ids() -> list[str]:
    """Subject IDs that a careless SQL translation gets wrong: non-ASCII (composed and decomposed, outside the
    Basic Multilingual Plane, right to left), 256 characters long, quotes, colons, backslashes, spaces."""
    shapes = [
        "ü-{}",
        "e\N{COMBINING ACUTE ACCENT}-{}",
        "\N{GRINNING FACE}{}",
        "\N{MAN}\N{ZERO WIDTH JOINER}\N{WOMAN}\N{ZERO WIDTH JOINER}\N{GIRL}{}",
        "日本語-{}",
        "\N{HEBREW LETTER ALEF}\N{HEBREW LETTER BET}-{}",
        " {} ",
        'it\'s "{}"',
        "a:b:{}",
        "back\\slash\\{}",
        "50%_{};--",
        "\N{GRINNING FACE}" * 200 + "{}",
    ]
    longest = [str(number).ljust(256, "z") for number in range(160)]
    return [shape.format(number) for shape in shapes for number in range(160)] + longest


def independence_chi_square(table: list[list[int]]) -> tuple[float, int]:
    """Pearson's chi-square statistic of a contingency table against independence of rows and columns,
    and its degrees of freedom."""
    total = sum(map(sum, table))
    row_sums = [sum(row) for row in table]
    column_sums = [sum(column) for column in zip(*table, strict=True)]
    statistic = math.fsum(
        (table[i][j] - row_sums[i] * column_sums[j] / total) ** 2 / (row_sums[i] * column_sums[j] / total)
        for i in range(len(table))
        for j in range(len(column_sums))
    )
    return statistic, (len(table) - 1) * (len(column_sums) - 1)
