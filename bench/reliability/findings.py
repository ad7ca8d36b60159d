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

from bench.report import Table, as_text, machine_text, markdown_section, number, results_files_write, results_heading


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
            lines += markdown_section(caption, table)
        if self.failures:
            lines += ["**Failed checks:**", "", *(f"- {failure}" for failure in self.failures), ""]
        else:
            lines += ["All checks passed.", ""]
        return "\n".join(lines)


def latency_text(latency: dict[str, float | None]) -> str:
    return f"p50 {number(latency['p50'], 2)} ms, p99 {number(latency['p99'], 2)} ms, max {number(latency['max'], 2)} ms"


def counts_text(counts: dict[str, int]) -> str:
    return "; ".join(f"{what}: {count:,}" for what, count in counts.items()) or "none"


def traffic_facts(result: dict[str, Any]) -> list[str]:
    """What the clients of a Traffic sent and were answered (its summary)."""
    return [
        f"{result['requests']:,} requests in {result['seconds']:.1f} s ({result['requests_per_second']:,.1f}/s), "
        f"{result['errors']:,} errors; answers: {counts_text(result['outcomes'])}",
        f"latency {latency_text(result['latency_ms'])}",
        f"requests sent again after the server closed a kept connection: {result['retried_on_closed_connection']:,}",
    ]


def failed_requests(result: dict[str, Any]) -> list[str]:
    """The failure of an experiment in which a request failed, with what the answers were."""
    if not result["errors"]:
        return []
    return [f"{result['errors']:,} requests failed: {counts_text(result['outcomes'])}"]


def several_variants(result: dict[str, Any], *, examples: str | None = None) -> list[str]:
    """The failure of an experiment that saw a subject answered with two variants, with the result's `examples`."""
    count = result["subjects_with_several_variants"]
    if not count:
        return []
    failure = f"{count:,} subjects answered with more than one variant"
    return [failure if examples is None else f"{failure}, e.g. {result[examples]}"]


def results_write(
    *, directory: Path, name: str, setup: dict[str, Any], results: dict[str, Any], findings: list[Findings]
) -> tuple[Path, Path]:
    machine = setup["machine"]
    lines = [
        *results_heading("Reliability", setup["started_at"], setup["command"]),
        f"- CPU: {machine_text(machine)}; {machine['os']}",
        f"- Python {setup['python']}, Django {setup['django']}, gunicorn {setup['gunicorn']}",
        f"- commit {setup['commit']}",
        "",
        *(section.markdown() for section in findings),
    ]
    return results_files_write(
        directory=directory, name=name, data={"setup": setup, **results}, markdown="\n".join(lines)
    )
