"""What a reliability experiment found, printed and written: its figures, its tables and the checks that failed.

Each experiment (race.py, outage.py, soak.py) returns its figures as
JSON-ready data and draws a Findings from them; the benchmark (__init__.py)
prints those as the experiments end and writes them all to
bench/results/<name>.md beside the data in <name>.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report import Table, as_markdown, as_text, results_files_write


@dataclass
class Findings:
    title: str
    facts: list[str] = field(default_factory=list)
    tables: list[tuple[str, Table]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [self.title, "=" * len(self.title), *self.facts]
        for caption, table in self.tables:
            lines += ["", caption, as_text(table)]
        verdict = [f"FAILED: {failure}" for failure in self.failures] or ["all checks passed"]
        lines += ["", *verdict]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", *(f"- {fact}" for fact in self.facts), ""]
        for caption, table in self.tables:
            lines += [f"{caption}", "", as_markdown(table), ""]
        if self.failures:
            lines += ["**Failed checks:**", "", *(f"- {failure}" for failure in self.failures), ""]
        else:
            lines += ["All checks passed.", ""]
        return "\n".join(lines)


def number(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def latency_text(latency: dict[str, float | None]) -> str:
    return f"p50 {number(latency['p50'], 2)} ms, p99 {number(latency['p99'], 2)} ms, max {number(latency['max'], 2)} ms"


def counts_text(counts: dict[str, int]) -> str:
    return "; ".join(f"{what}: {count:,}" for what, count in counts.items()) or "none"


def results_write(
    *, directory: Path, name: str, setup: dict[str, Any], results: dict[str, Any], findings: list[Findings]
) -> tuple[Path, Path]:
    machine = setup["machine"]
    lines = [
        f"# Reliability: {setup['started_at']}",
        "",
        f"Command: `{setup['command']}`",
        "",
        f"- CPU: {machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB RAM; {machine['os']}",
        f"- Python {setup['python']}, Django {setup['django']}, gunicorn {setup['gunicorn']}",
        f"- commit {setup['commit']}",
        "",
        *(section.markdown() for section in findings),
    ]
    return results_files_write(
        directory=directory, name=name, data={"setup": setup, **results}, markdown="\n".join(lines)
    )
