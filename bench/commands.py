"""bench/run commands: the data commands (export, import, delete) on 100,000 and 1,000,000 rows, beside psql.

For each size: a fresh database, `manage.py migrate`, `manage.py apply_resources` of
examples/demo.yaml and three more experiments with the same variant IDs, N assignments
in checkout-button and N identifier links loaded with set-based SQL. Then each command
runs as its own process, as an operator would run it, followed by a psql process doing
the same work in SQL (the floor). Each process runs under GNU time, which reports that one
process's peak RSS and CPU time; the wall time is taken around it. The question the run
answers: does a command's peak memory grow with the number of rows? See bench/README.md.
"""

from __future__ import annotations

import argparse
import csv
import filecmp
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.cpu import CPUS, MachineCpu
from bench.database import DatabaseServer, postgres_url_argument
from bench.report import (
    Table,
    as_markdown,
    as_text,
    command_recorded,
    git_commit,
    results_files_write,
    results_heading,
    yes,
)
from devtools import PROJECT_DIR

SOURCE = "checkout-button"  # examples/demo.yaml's experiment, which the loaded assignments go to
IMPORT_TARGET = "checkout-button-import"
ATOMIC_TARGET = "checkout-button-import-atomic"
SQL_TARGET = "checkout-button-import-sql"
STAGING = "bench_import_staging"
TIME = "/usr/bin/time"
# Peak RSS growth from the smallest to the largest size beyond which a command is reported as growing:
# the same process measured twice differs by well under 1 MiB, a buffer held per row would add tens.
GROWTH_TOLERANCE_MIB = 5.0

EXPERIMENT_YAML = """\
schemaVersion: 1
kind: experiment
metadata:
  id: {key}
  name: Import target for bench/commands
  status: {status}
  parentId: growth
spec:
  subjectType: user
  variants:
    - id: control
      control: true
      split: 0.5
    - id: green
      split: 0.5
"""

# Every tenth row shares its timestamp, as a batch stored by one API request does, so the
# export's tie-break on id is exercised. Variants alternate: no command here looks at the hash.
ASSIGNMENTS = """
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at)
SELECT %(experiment)s, 'user-' || lpad(g::text, 8, '0'),
       CASE WHEN g %% 2 = 0 THEN %(control)s ELSE %(green)s END, %(cohort)s,
       %(start)s + (g / 10) * interval '1 second'
FROM generate_series(0, %(rows)s - 1) AS g
"""

# Each pair links two subject types, so ordering the types by primary key is enough to satisfy
# identifierlink_canonical_order; the caller puts the lower one on side a.
LINKS = """
INSERT INTO idlinks_identifierlink (subject_type_a_id, subject_id_a, subject_type_b_id, subject_id_b, created_at)
SELECT %(type_a)s, %(prefix_a)s || lpad(g::text, 8, '0'), %(type_b)s, %(prefix_b)s || lpad(g::text, 8, '0'),
       %(start)s + (g / 10) * interval '1 second'
FROM generate_series(0, %(rows)s - 1) AS g
"""

UTC_TEXT = """to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""

# What both exports of an experiment read, in export_assignments' order.
EXPORTED_ROWS = """
FROM assignments_assignment a
JOIN assignments_experiment e ON e.id = a.experiment_id
JOIN assignments_variant v ON v.id = a.variant_id
WHERE a.experiment_id = {experiment}
ORDER BY a.created_at, a.id
"""

# The same rows, columns, order and timestamp format as export_assignments: the files should be identical.
EXPORT_SELECT = f"""
SELECT e.key AS experiment_id, a.subject_id, v.key AS variant_id, a.cohort,
       {UTC_TEXT.format(column="a.created_at")} AS created_at, a.source{EXPORTED_ROWS}"""

# COPY's text format would escape backslashes, which the loaded IDs do not contain.
EXPORT_JSON_SELECT = f"""
SELECT json_build_object('experiment_id', e.key, 'subject_id', a.subject_id, 'variant_id', v.key,
                         'cohort', a.cohort, 'created_at', {UTC_TEXT.format(column="a.created_at")},
                         'source', a.source){EXPORTED_ROWS}"""

LINKS_SELECT = f"""
SELECT ta.key AS subject_type_a, l.subject_id_a, tb.key AS subject_type_b, l.subject_id_b,
       {UTC_TEXT.format(column="l.created_at")} AS created_at
FROM idlinks_identifierlink l
JOIN assignments_subjecttype ta ON ta.id = l.subject_type_a_id
JOIN assignments_subjecttype tb ON tb.id = l.subject_type_b_id
ORDER BY l.created_at, l.id
"""

# What import_assignments writes (source imported, the current cohort, conflicts skipped), in one statement.
STAGED_INSERT = f"""
INSERT INTO assignments_assignment (experiment_id, subject_id, variant_id, cohort, created_at, source)
SELECT v.experiment_id, s.subject_id, v.id, {{cohort}}, s.created_at, 'imported'
FROM {STAGING} s JOIN assignments_variant v ON v.experiment_id = {{experiment}} AND lower(v.key) = lower(s.variant_id)
ON CONFLICT (experiment_id, subject_id) DO NOTHING
"""


def one_line(statement: str) -> str:
    """psql reads a backslash command such as \\copy up to the end of its line."""
    return " ".join(statement.split())


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_kib: int
    cpu_seconds: float
    # Over the whole machine: the command, its PostgreSQL backend, and anything else running.
    busy_cores: float | None
    returncode: int
    stdout: str
    stderr: str

    @property
    def peak_rss_mib(self) -> float:
        return self.peak_rss_kib / 1024


def measured_run(argv: list[str], *, env: dict[str, str]) -> Measured:
    """Run argv to completion and measure that process alone, under GNU time.

    Not os.wait4 or RUSAGE_CHILDREN from this process: a child's ru_maxrss includes the
    memory of the process it was forked from, before its exec (checked: `true` spawned
    from a Python process holding 300 MiB reports 311 MiB), so this benchmark's own size
    would leak into every figure. GNU time is a 1 MiB process, and it reports the
    rusage of its one child.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile() as usage:
        machine = MachineCpu.read()
        started = time.monotonic()
        returncode = subprocess.call(
            [TIME, "--quiet", "-f", "%M %U %S", "-o", usage.name, *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            cwd=PROJECT_DIR,
        )
        seconds = time.monotonic() - started
        after = MachineCpu.read()
        peak_kib, user, system = Path(usage.name).read_text().split()[-3:]
        out.seek(0)
        err.seek(0)
        wall = (after.total - machine.total) / CPUS
        return Measured(
            seconds=seconds,
            peak_rss_kib=int(peak_kib),
            cpu_seconds=float(user) + float(system),
            busy_cores=(after.busy - machine.busy) / wall if wall > 0 else None,
            returncode=returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


class CommandFailed(Exception):
    pass


class Runner:
    """Runs manage.py commands and psql against one bench database, and records the measured steps."""

    def __init__(self, *, database_url: str, work: Path, rows: int) -> None:
        self.database_url = database_url
        self.work = work
        self.rows = rows
        self.psql = shutil.which("psql") or "psql"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DEBUG": "false",
            "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        }
        self.steps: list[dict[str, Any]] = []

    def manage_argv(self, *arguments: str | Path) -> list[str]:
        return [sys.executable, str(PROJECT_DIR / "manage.py"), *map(str, arguments)]

    def psql_argv(self, *commands: str) -> list[str]:
        argv = [self.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", self.database_url]
        for command in commands:
            argv += ["-c", command]
        return argv

    def checked(self, argv: list[str], *, expect: str | None = None) -> Measured:
        result = measured_run(argv, env=self.env)
        if result.returncode != 0 or (expect is not None and expect not in result.stdout):
            raise CommandFailed(
                f"{' '.join(argv[1:])} exited {result.returncode}, expected output {expect!r}\n"
                f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}"
            )
        return result

    def manage(self, *arguments: str | Path, expect: str | None = None) -> Measured:
        return self.checked(self.manage_argv(*arguments), expect=expect)

    def copy_out(self, select: str, path: Path, *, csv_format: bool) -> Measured:
        options = " WITH (FORMAT csv, HEADER)" if csv_format else ""
        return self.checked(self.psql_argv(f"\\copy ({one_line(select)}) TO '{path}'{options}"))

    def export(self, step: str, argv: list[str], *, output: Path, expect: str, select: str) -> None:
        """An export command, then psql's \\copy of `select` beside its file, recorded as one step. A CSV file should
        be byte-identical to psql's; psql's JSON is spaced otherwise (`{"a" : 1}`), so a JSON lines file is not
        compared."""
        service = self.checked(argv, expect=expect)
        csv_format = output.suffix == ".csv"
        copied = output.with_name(f"{output.stem}-psql{output.suffix}")
        copy = self.copy_out(select, copied, csv_format=csv_format)
        what = (
            "psql \\copy (SELECT ... ORDER BY created_at, id) TO FILE CSV HEADER"
            if csv_format
            else "psql \\copy (SELECT json_build_object(...) ...) TO FILE"
        )
        self.record(
            step=step,
            argv=argv,
            service=service,
            rows=self.rows,
            baseline=_baseline(what, ("copy", copy)),
            checks={"identical_to_psql": filecmp.cmp(output, copied, shallow=False)} if csv_format else None,
        )

    def record(
        self,
        *,
        step: str,
        argv: list[str],
        service: Measured,
        rows: int,
        baseline: dict[str, Any] | None = None,
        checks: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        entry = {
            "step": step,
            "rows": rows,
            "command": " ".join(argv[1:]).replace(str(self.work) + "/", "").replace(str(PROJECT_DIR) + "/", ""),
            **_measured_dict(service),
            "baseline": baseline,
            "checks": checks or {},
        }
        self.steps.append(entry)
        baseline_text = f", baseline {baseline['seconds']:.1f} s" if baseline else ""
        print(
            f"  {step}: {rows:,} rows in {service.seconds:.1f} s, peak RSS {service.peak_rss_mib:.1f} MiB"
            f"{baseline_text}",
            flush=True,
        )
        return entry


def _measured_dict(measured: Measured) -> dict[str, Any]:
    values = asdict(measured)
    del values["stdout"], values["stderr"], values["returncode"]
    values["peak_rss_mib"] = measured.peak_rss_mib
    return values


def _baseline(what: str, *parts: tuple[str, Measured]) -> dict[str, Any]:
    """Parts run one after the other; their times add up and the peak is the largest of them."""
    return {
        "what": what,
        "seconds": sum(measured.seconds for _, measured in parts),
        "peak_rss_mib": max(measured.peak_rss_mib for _, measured in parts),
        "parts": [{"what": name, **_measured_dict(measured)} for name, measured in parts],
    }


def experiments_yaml(path: Path, statuses: dict[str, str]) -> Path:
    path.write_text("---\n".join(EXPERIMENT_YAML.format(key=key, status=status) for key, status in statuses.items()))
    return path


def import_file_write(export_path: Path, import_path: Path) -> int:
    """The import's format (subject_id,variant_id,created_at) from an export_assignments CSV file."""
    with (
        export_path.open(encoding="utf-8", newline="") as source,
        import_path.open("w", encoding="utf-8", newline="") as target,
    ):
        reader = csv.reader(source)
        header = next(reader)
        columns = [header.index(name) for name in ("subject_id", "variant_id", "created_at")]
        writer = csv.writer(target, lineterminator="\n")
        writer.writerow(["subject_id", "variant_id", "created_at"])
        count = 0
        for row in reader:
            writer.writerow([row[column] for column in columns])
            count += 1
    return count


def data_load(database_url: str, rows: int) -> dict[str, Any]:
    """N assignments in SOURCE and N identifier links, set-based; VACUUM ANALYZE, as a settled database would be."""
    start = datetime.now(UTC) - timedelta(days=3)
    with psycopg.connect(database_url, autocommit=True) as connection:
        experiments = dict(connection.execute("SELECT lower(key), id FROM assignments_experiment").fetchall())
        source = experiments[SOURCE]
        control, green = (
            pk
            for (pk,) in connection.execute(
                "SELECT id FROM assignments_variant WHERE experiment_id = %s ORDER BY position", [source]
            ).fetchall()
        )
        (cohort,) = connection.execute(
            "SELECT max(number) FROM assignments_cohort WHERE experiment_id = %s", [source]
        ).fetchone()
        started = time.monotonic()
        connection.execute(
            ASSIGNMENTS,
            {"experiment": source, "control": control, "green": green, "cohort": cohort, "start": start, "rows": rows},
        )
        assignments_seconds = time.monotonic() - started
        types = dict(connection.execute("SELECT lower(key), id FROM assignments_subjecttype").fetchall())
        (type_a, prefix_a), (type_b, prefix_b) = sorted([(types["user"], "user-"), (types["cookie"], "ck-")])
        started = time.monotonic()
        connection.execute(
            LINKS,
            {
                "type_a": type_a,
                "prefix_a": prefix_a,
                "type_b": type_b,
                "prefix_b": prefix_b,
                "start": start,
                "rows": rows,
            },
        )
        links_seconds = time.monotonic() - started
        connection.execute(
            f"CREATE UNLOGGED TABLE {STAGING} (subject_id text, variant_id text, created_at timestamptz)"
        )
        started = time.monotonic()
        connection.execute("VACUUM ANALYZE")
        vacuum_seconds = time.monotonic() - started
        experiments = dict(connection.execute("SELECT lower(key), id FROM assignments_experiment").fetchall())
        cohorts = dict(
            connection.execute("SELECT experiment_id, max(number) FROM assignments_cohort GROUP BY 1").fetchall()
        )
    return {
        "assignments_seconds": assignments_seconds,
        "links_seconds": links_seconds,
        "vacuum_analyze_seconds": vacuum_seconds,
        "experiments": experiments,
        "cohorts": cohorts,
    }


def assignment_counts(database_url: str) -> dict[str, dict[str, int]]:
    """Per experiment: the rows stored, and the trigger-kept count (which must agree)."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        stored = dict(
            connection.execute(
                """SELECT e.key, count(a.id) FROM assignments_experiment e
                   LEFT JOIN assignments_assignment a ON a.experiment_id = e.id GROUP BY e.key"""
            ).fetchall()
        )
        counted = dict(
            connection.execute(
                """SELECT e.key, coalesce(sum(c.assignments), 0) FROM assignments_experiment e
                   LEFT JOIN assignments_assignmentcount c ON c.experiment_id = e.id GROUP BY e.key"""
            ).fetchall()
        )
    return {key: {"stored": stored[key], "counted": int(counted[key])} for key in stored}


def vacuum_analyze(database_url: str) -> float:
    """Settles the tables between phases, so that autovacuum does not start in the middle of a measurement."""
    started = time.monotonic()
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")
    return time.monotonic() - started


def size_run(*, server: DatabaseServer, database: str, rows: int, work: Path) -> dict[str, Any]:
    """Every step on a fresh database holding `rows` assignments and links."""
    work.mkdir(parents=True, exist_ok=True)
    database_url = server.recreate(database)
    runner = Runner(database_url=database_url, work=work, rows=rows)
    print(f"\n{rows:,} rows: database {database}, migrate, apply_resources, load", flush=True)
    started = time.monotonic()
    runner.manage("migrate", "--verbosity", "0")
    migrate_seconds = time.monotonic() - started
    targets = experiments_yaml(
        work / "experiments.yaml", {IMPORT_TARGET: "active", ATOMIC_TARGET: "active", SQL_TARGET: "active"}
    )
    runner.manage("apply_resources", PROJECT_DIR / "examples" / "demo.yaml", targets)
    load = data_load(database_url, rows)
    load["migrate_seconds"] = migrate_seconds
    print(
        f"  loaded in {load['assignments_seconds']:.1f} s (assignments) + {load['links_seconds']:.1f} s (links), "
        f"VACUUM ANALYZE {load['vacuum_analyze_seconds']:.1f} s",
        flush=True,
    )
    experiments, cohorts = load.pop("experiments"), load.pop("cohorts")
    checks: dict[str, Any] = {}

    # The process's own size: the same command with nothing to export.
    argv = runner.manage_argv("export_assignments", "--experiment", IMPORT_TARGET, "--output", work / "empty.csv")
    runner.record(step="export_assignments csv, 0 rows", argv=argv, service=runner.checked(argv), rows=0)

    exported, exported_jsonl, links_file = (
        work / name for name in ("assignments.csv", "assignments.jsonl", "links.csv")
    )
    # Each export: its step, the command's arguments before --output, its file, what it says when done, and
    # psql's SELECT of the same rows.
    for step, arguments, output, expect, select in (
        (
            "export_assignments csv",
            ["export_assignments", "--experiment", SOURCE, "--format", "csv"],
            exported,
            f"exported {rows} assignments",
            EXPORT_SELECT.format(experiment=experiments[SOURCE]),
        ),
        (
            "export_assignments jsonl",
            ["export_assignments", "--experiment", SOURCE, "--format", "jsonl"],
            exported_jsonl,
            f"exported {rows} assignments",
            EXPORT_JSON_SELECT.format(experiment=experiments[SOURCE]),
        ),
        ("export_id_links csv", ["export_id_links"], links_file, f"exported {rows} identifier links", LINKS_SELECT),
    ):
        runner.export(
            step, runner.manage_argv(*arguments, "--output", output), output=output, expect=expect, select=select
        )

    # import_assignments reads subject_id,variant_id[,created_at], not the export's six columns.
    refused = measured_run(
        runner.manage_argv("import_assignments", exported, "--experiment", IMPORT_TARGET), env=runner.env
    )
    checks["import_of_export_file"] = {
        "exit_code": refused.returncode,
        "message": [line.replace(f"{work}/", "") for line in refused.stderr.strip().splitlines()[:2]],
    }
    started = time.monotonic()
    import_file = work / "import.csv"
    converted = import_file_write(exported, import_file)
    checks["conversion_seconds"] = time.monotonic() - started
    assert converted == rows, f"converted {converted} rows of {rows}"

    argv = runner.manage_argv("import_assignments", import_file, "--experiment", IMPORT_TARGET)
    service = runner.checked(argv, expect=f"imported {rows}, conflicts 0")
    staged = runner.checked(
        runner.psql_argv(f"\\copy {STAGING} FROM '{import_file}' WITH (FORMAT csv, HEADER)"),
    )
    inserted = runner.checked(
        runner.psql_argv(
            one_line(STAGED_INSERT.format(experiment=experiments[SQL_TARGET], cohort=cohorts[experiments[SQL_TARGET]]))
        )
    )
    import_baseline = _baseline(
        "psql \\copy into an unlogged staging table, then one INSERT ... SELECT ... ON CONFLICT DO NOTHING",
        ("copy into staging", staged),
        ("insert into assignments", inserted),
    )
    runner.record(step="import_assignments", argv=argv, service=service, rows=rows, baseline=import_baseline)

    argv = runner.manage_argv("import_assignments", import_file, "--experiment", ATOMIC_TARGET, "--atomic")
    service = runner.checked(argv, expect=f"imported {rows}, conflicts 0")
    # Not run again: the baseline's one INSERT is a single transaction already.
    atomic_baseline = {**import_baseline, "what": "the same psql run as import_assignments' (its INSERT is atomic)"}
    runner.record(step="import_assignments --atomic", argv=argv, service=service, rows=rows, baseline=atomic_baseline)
    checks["vacuum_analyze_after_imports_seconds"] = vacuum_analyze(database_url)

    ended = experiments_yaml(work / "ended.yaml", {IMPORT_TARGET: "ended", SQL_TARGET: "ended"})
    runner.manage("apply_resources", ended, expect=f"experiment {IMPORT_TARGET}: updated")
    argv = runner.manage_argv("delete_assignments", "--experiment", IMPORT_TARGET, "--yes")
    service = runner.checked(argv, expect=f"deleted {rows} assignments")
    deleted = runner.checked(
        runner.psql_argv(f"DELETE FROM assignments_assignment WHERE experiment_id = {experiments[SQL_TARGET]}")
    )
    runner.record(
        step="delete_assignments",
        argv=argv,
        service=service,
        rows=rows,
        baseline=_baseline("psql: one DELETE ... WHERE experiment_id = ...", ("delete", deleted)),
    )

    counts = assignment_counts(database_url)
    expected = {SOURCE: rows, IMPORT_TARGET: 0, ATOMIC_TARGET: rows, SQL_TARGET: 0}
    checks["counts"] = counts
    checks["counts_as_expected"] = all(
        counts[key]["stored"] == number and counts[key]["counted"] == number for key, number in expected.items()
    )
    file_bytes = {path.name: path.stat().st_size for path in (exported, exported_jsonl, links_file, import_file)}
    return {"rows": rows, "load": load, "steps": runner.steps, "checks": checks, "file_bytes": file_bytes}


def steps_table(sizes: list[dict[str, Any]]) -> Table:
    header = [
        "command",
        "rows",
        "seconds",
        "rows/s",
        "peak RSS MiB",
        "client CPU s",
        "busy cores",
        "baseline s",
        "x baseline",
        "baseline peak RSS MiB",
    ]
    lines = []
    for size in sizes:
        for step in size["steps"]:
            baseline = step["baseline"]
            rate = step["rows"] / step["seconds"] if step["rows"] else None
            lines.append(
                [
                    step["step"],
                    f"{step['rows']:,}",
                    f"{step['seconds']:.1f}",
                    "" if rate is None else f"{rate:,.0f}",
                    f"{step['peak_rss_mib']:.1f}",
                    f"{step['cpu_seconds']:.1f}",
                    "n/a" if step["busy_cores"] is None else f"{step['busy_cores']:.2f}",
                    "" if baseline is None else f"{baseline['seconds']:.1f}",
                    "" if baseline is None else f"{step['seconds'] / baseline['seconds']:.1f}",
                    "" if baseline is None else f"{baseline['peak_rss_mib']:.1f}",
                ]
            )
    return header, lines


def memory_growth(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per command: peak RSS at the smallest and the largest size, and whether it grew."""
    smallest, largest = sizes[0], sizes[-1]
    by_step = {step["step"]: step for step in largest["steps"]}
    growth = []
    for step in smallest["steps"]:
        other = by_step.get(step["step"])
        if other is None or step["rows"] == 0:
            continue
        difference = other["peak_rss_mib"] - step["peak_rss_mib"]
        growth.append(
            {
                "step": step["step"],
                "rows": [step["rows"], other["rows"]],
                "peak_rss_mib": [step["peak_rss_mib"], other["peak_rss_mib"]],
                "growth_mib": difference,
                "grows": difference > GROWTH_TOLERANCE_MIB,
            }
        )
    return growth


def growth_table(growth: list[dict[str, Any]]) -> Table:
    header = ["command", "rows", "peak RSS MiB", "growth MiB", "grows with rows"]
    lines = [
        [
            item["step"],
            " → ".join(f"{rows:,}" for rows in item["rows"]),
            " → ".join(f"{mib:.1f}" for mib in item["peak_rss_mib"]),
            f"{item['growth_mib']:+.1f}",
            "**yes**" if item["grows"] else "no",
        ]
        for item in growth
    ]
    return header, lines


def results_markdown(results: dict[str, Any]) -> str:
    setup = results["setup"]
    lines = [
        *results_heading("Data commands benchmark", setup["started_at"], setup["command"]),
        f"Machine: {setup['cpus']} CPUs, PostgreSQL {setup['postgresql']}, Python {setup['python']}, "
        f"Django {setup['django']}, commit {setup['commit']}. Each command is one `manage.py` process "
        "(wall time including Python's and Django's start-up, peak RSS and CPU time of that process alone, "
        "from `/usr/bin/time -f %M`); `busy cores` is the whole machine over the same time (the command, its "
        "PostgreSQL backend and anything else). The baseline is psql doing the same work in SQL, measured the "
        "same way.",
        "",
        as_markdown(steps_table(results["sizes"])),
        "",
        "## Peak memory, smallest to largest size",
        "",
        f"A command grows when its peak RSS rises by more than {GROWTH_TOLERANCE_MIB:.0f} MiB.",
        "",
        as_markdown(growth_table(results["memory_growth"])),
        "",
        "## Baselines",
        "",
    ]
    seen = set()
    for step in results["sizes"][0]["steps"]:
        baseline = step["baseline"]
        if baseline and baseline["what"] not in seen:
            seen.add(baseline["what"])
            lines.append(f"- {step['step']}: {baseline['what']}")
    lines += ["", "## Set-up and checks", ""]
    for size in results["sizes"]:
        load, checks = size["load"], size["checks"]
        refused = checks["import_of_export_file"]
        lines += [
            f"{size['rows']:,} rows: migrate {load['migrate_seconds']:.1f} s, assignments loaded in "
            f"{load['assignments_seconds']:.1f} s, links in {load['links_seconds']:.1f} s, VACUUM ANALYZE "
            f"{load['vacuum_analyze_seconds']:.1f} s; files {_sizes(size['file_bytes'])}; counts as expected "
            f"(stored and trigger-kept): {yes(checks['counts_as_expected'])}; export files "
            f"byte-identical to psql's: "
            + ", ".join(
                f"{step['step']} {yes(step['checks']['identical_to_psql'])}"
                for step in size["steps"]
                if "identical_to_psql" in step["checks"]
            )
            + f"; import_assignments given export_assignments' own file: exit {refused['exit_code']}, "
            f"`{' '.join(refused['message'])}`; converting it to the import's columns took "
            f"{checks['conversion_seconds']:.1f} s.",
            "",
        ]
    lines += ["## Commands as run", ""]
    lines += [f"- `{step['command']}`" for step in results["sizes"][-1]["steps"]]
    return "\n".join(lines) + "\n"


def _sizes(file_bytes: dict[str, int]) -> str:
    return ", ".join(f"{name} {size / 1_000_000:,.0f} MB" for name, size in file_bytes.items())


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/run commands",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    postgres_url_argument(parser, "a maintenance database on the server the bench database is created on")
    parser.add_argument("--database", default="bench_commands", help="dropped and created for every size")
    parser.add_argument(
        "--sizes",
        type=lambda value: [int(item) for item in value.split(",")],
        default=[100_000, 1_000_000],
        help="rows per run, comma-separated, smallest first",
    )
    parser.add_argument("--work-dir", type=Path, default=PROJECT_DIR / "var" / "bench-commands", help="exported files")
    parser.add_argument("--results-dir", type=Path, default=PROJECT_DIR / "bench" / "results")
    parser.add_argument("--results-name", default="commands")
    parser.add_argument("--keep-database", action="store_true", help="keep the last size's database")
    parser.add_argument("--keep-files", action="store_true", help="keep the exported and imported files")
    args = parser.parse_args(argv)
    if args.sizes != sorted(args.sizes) or args.sizes[0] < 1:
        parser.error("--sizes must be positive and in increasing order")
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if shutil.which("psql") is None or not os.access(TIME, os.X_OK):
        print(f"bench/run commands needs psql (its baselines) and GNU time at {TIME} (peak RSS)", file=sys.stderr)
        return 1
    started_at = datetime.now(UTC)
    started = time.monotonic()
    server = DatabaseServer(args.postgres_url)
    postgresql = server.version()
    sizes = []
    try:
        for rows in args.sizes:
            sizes.append(size_run(server=server, database=args.database, rows=rows, work=args.work_dir))
    finally:
        if not args.keep_database:
            server.drop(args.database)
        if not args.keep_files:
            shutil.rmtree(args.work_dir, ignore_errors=True)
        server.close()
    import django

    growth = memory_growth(sizes)
    results = {
        "setup": {
            "started_at": started_at.isoformat(timespec="seconds"),
            "command": command_recorded(["bench/run commands", *argv]),
            "cpus": os.cpu_count(),
            "postgresql": postgresql,
            "python": platform.python_version(),
            "django": django.get_version(),
            "commit": git_commit(),
            "sizes": args.sizes,
            "seconds": time.monotonic() - started,
        },
        "sizes": sizes,
        "memory_growth": growth,
    }
    print("\n" + as_text(steps_table(sizes)))
    print("\nPeak memory, smallest to largest size\n" + as_text(growth_table(growth)))
    json_path, markdown_path = results_files_write(
        directory=args.results_dir, name=args.results_name, data=results, markdown=results_markdown(results)
    )
    growing = [item["step"] for item in growth if item["grows"]]
    print(f"\npeak memory grows with the row count for: {', '.join(growing) or 'no command'}")
    print(f"wrote {json_path} and {markdown_path} in {results['setup']['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
