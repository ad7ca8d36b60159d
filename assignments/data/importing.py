"""Backfill of assignments from another system (import_assignments): validate the whole file, then write.

The file is read twice, as a stream: once to check every line (so nothing is
written from a file with an error anywhere), once to insert in batches. Memory
stays constant whatever the file's size: only the experiment's variants are held.
Existing assignments are never overwritten: a subject that already has one (or
appears twice in the file) is counted as a conflict.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from assignments.models import Assignment, Experiment, Variant
from assignments.selectors import experiment_cohort_current
from assignments.storage import assignments_insert_rows
from core.api.fields import subject_id_problem
from core.exports import since_parse

HEADERS = (["subject_id", "variant_id"], ["subject_id", "variant_id", "created_at"])
BATCH_SIZE = 5000
# The first errors are shown; past this many the rest are only counted.
MAX_ERRORS_SHOWN = 50
_UNDECODABLE = re.compile("[\udc80-\udcff]")


class ImportInvalid(Exception):
    """The file has errors; nothing was written. `errors` holds one line each, naming the file's line."""

    def __init__(self, errors: list[str], total: int) -> None:
        more = [f"... and {total - len(errors)} more"] if total > len(errors) else []
        super().__init__("\n".join([*errors, *more]))
        self.errors = errors
        self.total = total


class ImportRefused(Exception):
    """Nothing was imported, and the file was not read: the message says why."""


@dataclass(frozen=True)
class ImportResult:
    imported: int
    conflicts: int


@dataclass(frozen=True)
class _Row:
    subject_id: str
    variant_pk: int
    created_at: dt.datetime | None


def _rows(path: Path, variants: dict[str, int], errors: list[str] | None) -> Iterator[_Row | None]:
    """Each data line as a row, or None for a line with an error (then described in `errors`).

    Bytes that are not UTF-8 are kept as lone surrogates (surrogateescape), so that they are reported
    on their exact line, as such, before anything else about it.
    """

    def error(line: int, message: str) -> None:
        if errors is not None:
            errors.append(f"line {line}: {message}")

    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        try:
            header = next(reader, None)
            if header is None:
                error(1, "the file is empty; it needs the header subject_id,variant_id[,created_at]")
            elif header not in HEADERS:
                error(1, f"the header must be {' or '.join(','.join(h) for h in HEADERS)}")
            if header not in HEADERS:
                yield None
                return
            for fields in reader:
                # An empty line (often the last one, from an editor or `echo`) holds no row.
                if not fields:
                    continue
                undecodable = _undecodable_problem(fields, header)
                if undecodable:
                    error(reader.line_num, undecodable)
                    yield None
                else:
                    yield _row(reader.line_num, fields, len(header), variants, errors)
        except csv.Error as exc:
            error(reader.line_num, f"not valid CSV: {exc}")
            yield None


def _undecodable_problem(fields: list[str], header: list[str]) -> str | None:
    """The first byte that is not UTF-8 (surrogateescape made it U+DC80..U+DCFF) and its column, or None."""
    for position, value in enumerate(fields):
        match = _UNDECODABLE.search(value)
        if match:
            column = header[position] if position < len(header) else f"field {position + 1}"
            byte = ord(match.group()) - 0xDC00
            return f"not UTF-8: byte 0x{byte:02x} in {column}; save the file as UTF-8"
    return None


def _row(line: int, fields: list[str], width: int, variants: dict[str, int], errors: list[str] | None) -> _Row | None:
    problems = []
    if len(fields) != width:
        problems.append(f"expected {width} fields, found {len(fields)}")
        fields = (fields + [""] * width)[:width]
    subject_problem = subject_id_problem(fields[0])
    if subject_problem:
        problems.append(f"subject_id {subject_problem}")
    variant_pk = variants.get(fields[1].lower())
    if variant_pk is None:
        problems.append(f"variant_id {fields[1]!r} is not a variant of this experiment")
    created_at = None
    if width == 3 and fields[2]:
        try:
            created_at = since_parse(fields[2])
        except ValueError as exc:
            problems.append(f"created_at: {exc}")
    if problems:
        if errors is not None:
            errors.append(f"line {line}: {'; '.join(problems)}")
        return None
    return _Row(subject_id=fields[0], variant_pk=variant_pk, created_at=created_at)


def import_validate(*, path: Path, experiment: Experiment) -> int:
    """Check every line; returns the number of data lines, or raises ImportInvalid listing the errors."""
    variants = _variant_pks(experiment)
    errors: list[str] = []
    count = 0
    for row in _rows(path, variants, errors):
        if row is not None:
            count += 1
    if errors:
        raise ImportInvalid(errors[:MAX_ERRORS_SHOWN], len(errors))
    return count


def assignments_import(
    *,
    path: Path,
    experiment: Experiment,
    atomic: bool,
    batch_size: int = BATCH_SIZE,
    on_validated: Callable[[int], None] = lambda rows: None,
    on_batch: Callable[[int], None] = lambda rows: None,
) -> ImportResult:
    """Validate the file, then insert its rows with source `imported` in the experiment's current cohort.

    `on_validated` hears the number of rows once the whole file has been checked,
    `on_batch` the size of each batch written (both for a progress bar).

    Each batch commits on its own unless `atomic`, so a run that stops half way has
    written whole batches and can simply be run again: what it wrote comes back as
    conflicts. With `atomic` the whole file is one transaction. A row without
    created_at gets the time of the import.
    """
    if experiment.kind == Experiment.Kind.HOLDOUT:
        # A holdout measures what the experiments it covers did: members from elsewhere would bias it.
        raise ImportRefused(f"{experiment.key!r} is a holdout: its members are drawn, never imported")
    on_validated(import_validate(path=path, experiment=experiment))
    variants = _variant_pks(experiment)
    cohort = experiment_cohort_current(experiment_pk=experiment.pk)
    now = timezone.now()
    imported = conflicts = 0

    def write(batch: list[_Row]) -> None:
        nonlocal imported, conflicts
        with transaction.atomic():
            # Sorted by subject ID, as the API sorts its inserts, so that an import and a request that
            # meet on the same new subjects lock them in the same order and cannot deadlock. The sort
            # is stable: of a subject listed twice, the first line still wins.
            inserted = assignments_insert_rows(
                experiment_pk=experiment.pk,
                cohort=cohort,
                rows=[
                    (row.subject_id, row.variant_pk, row.created_at or now)
                    for row in sorted(batch, key=lambda row: row.subject_id)
                ],
                source=Assignment.Source.IMPORTED,
            )
        imported += len(inserted)
        conflicts += len(batch) - len(inserted)
        on_batch(len(batch))

    with transaction.atomic() if atomic else contextlib.nullcontext():
        batch: list[_Row] = []
        for row in _rows(path, variants, None):
            batch.append(row)
            if len(batch) == batch_size:
                write(batch)
                batch = []
        if batch:
            write(batch)
    return ImportResult(imported=imported, conflicts=conflicts)


def _variant_pks(experiment: Experiment) -> dict[str, int]:
    return {key.lower(): pk for pk, key in Variant.objects.filter(experiment=experiment).values_list("pk", "key")}
