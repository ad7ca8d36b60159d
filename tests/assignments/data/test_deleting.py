"""assignments/data/deleting.py: `manage.py delete_assignments --experiment ID --yes`: clean-up of a finished
experiment's assignments."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from assignments.console.reports import experiment_report
from assignments.data.deleting import DeleteRefused, assignments_delete
from assignments.models import Assignment, AssignmentCount, Experiment
from tests.factories import ExperimentFactory
from tests.helpers.assignments import assignments_bulk_store
from tests.helpers.commands import command_output
from tests.helpers.processes import (
    CLOSED_STDOUT_MESSAGE,
    run_manage,
    run_manage_reader_leaves,
    run_manage_stderr_on_terminal,
)

SOURCES = ["hashed", "linked", "forced", "imported"]


def experiment(key: str, status: str) -> Experiment:
    return ExperimentFactory(key=key, status=status, splits=[("control", 0.5), ("green", 0.5)])


def store(experiment: Experiment, count: int, *, cohort: int = 1, prefix: str = "s") -> None:
    """count assignments of the experiment, cycling through its variants and the four sources."""
    assignments_bulk_store(experiment, count, prefix=prefix, cohort=cohort, sources=SOURCES)


def delete(*args: str) -> str:
    return command_output("delete_assignments", *args)


def counted(experiment: Experiment) -> int:
    return AssignmentCount.objects.filter(experiment=experiment).aggregate(total=Sum("assignments"))["total"] or 0


@pytest.fixture
def ended(db) -> Experiment:
    return experiment("Old-Checkout", Experiment.Status.ENDED)


@pytest.fixture
def active(db) -> Experiment:
    return experiment("live", Experiment.Status.ACTIVE)


@pytest.mark.parametrize("status", [Experiment.Status.ENDED, Experiment.Status.ARCHIVED])
def test_delete__ended_or_archived_with_yes__every_assignment_of_it_deleted_others_kept(db, active, status):
    # Given an experiment that stopped, with assignments of every source in two cohorts, and a live one
    finished = experiment("Old-Checkout", status)
    store(finished, 12)
    store(finished, 5, cohort=2, prefix="second-")
    store(active, 7)

    # When its assignments are deleted (ID in another case)
    stdout = delete("--experiment", "old-checkout", "--yes")

    # Then all of them are gone, with a summary naming the experiment as configured; the live one keeps its own
    assert stdout == "deleted 17 assignments of Old-Checkout\n"
    assert Assignment.objects.filter(experiment=finished).count() == 0
    assert Assignment.objects.filter(experiment=active).count() == 7


def test_delete__kept_counts__go_to_zero_and_the_report_shows_no_assignments(ended, active):
    store(ended, 20)
    store(active, 6)
    assert counted(ended) == 20

    delete("--experiment", "Old-Checkout", "--yes")

    assert counted(ended) == 0
    report = experiment_report(ended)
    assert report.assignments == 0
    assert all(cohort.assignments == 0 and not cohort.other_sources for cohort in report.cohorts)
    assert all(line.assignments == 0 for cohort in report.cohorts for line in cohort.variants)
    assert counted(active) == 6


def test_delete__no_assignments__deletes_zero(ended):
    assert delete("--experiment", "Old-Checkout", "--yes") == "deleted 0 assignments of Old-Checkout\n"


@pytest.mark.parametrize(
    "status", [Experiment.Status.DRAFT, Experiment.Status.ACTIVE, Experiment.Status.WINNER_DECLARED]
)
def test_delete__experiment_not_ended__refused_and_nothing_deleted(db, status):
    running = experiment("running", Experiment.Status.ACTIVE)
    winner = running.variants.get(key="green") if status == Experiment.Status.WINNER_DECLARED else None
    Experiment.objects.filter(pk=running.pk).update(status=status, winning_variant=winner)
    store(running, 5)
    stdout = io.StringIO()

    with pytest.raises(CommandError, match=f"nothing deleted: experiment 'running' is {status}"):
        call_command("delete_assignments", "--experiment", "running", "--yes", stdout=stdout)

    assert stdout.getvalue() == ""
    assert Assignment.objects.filter(experiment=running).count() == 5
    assert counted(running) == 5


def test_delete__without_yes__nothing_deleted_and_the_error_says_how_many_it_would(ended):
    store(ended, 9)
    stdout = io.StringIO()

    with pytest.raises(CommandError, match=r"9 assignments of Old-Checkout.*--yes"):
        call_command("delete_assignments", "--experiment", "Old-Checkout", stdout=stdout)

    assert stdout.getvalue() == ""
    assert Assignment.objects.filter(experiment=ended).count() == 9


def test_delete__unknown_experiment__command_error(db):
    with pytest.raises(CommandError, match="no experiment has the ID 'missing'"):
        delete("--experiment", "missing", "--yes")


def test_delete_service__more_rows_than_a_batch__deleted_batch_by_batch(ended, active):
    # Given 10 assignments of the ended experiment, and some of another one
    store(ended, 10)
    store(active, 4)
    batches: list[int] = []

    # When deleted 3 at a time
    deleted = assignments_delete(experiment=ended, batch_size=3, on_batch=batches.append)

    # Then every one is deleted, in batches of at most 3, and no other experiment's
    assert deleted == 10
    assert batches[:4] == [3, 3, 3, 1]
    assert sum(batches) == 10
    assert Assignment.objects.filter(experiment=ended).count() == 0
    assert Assignment.objects.filter(experiment=active).count() == 4
    assert counted(ended) == 0


def test_delete_service__exact_multiple_of_the_batch__all_deleted(ended):
    store(ended, 9)

    assert assignments_delete(experiment=ended, batch_size=3) == 9
    assert Assignment.objects.filter(experiment=ended).count() == 0


def test_delete_service__active_experiment__refused_before_any_batch(active):
    store(active, 4)
    batches: list[int] = []

    with pytest.raises(DeleteRefused):
        assignments_delete(experiment=active, batch_size=1, on_batch=batches.append)

    assert batches == []
    assert Assignment.objects.filter(experiment=active).count() == 4


# As a process


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_delete_process__success_and_refusals__exit_codes_and_streams(ended, active):
    store(ended, 25)
    store(active, 3)

    without_yes = run_manage("delete_assignments", "--experiment", "old-checkout")
    not_ended = run_manage("delete_assignments", "--experiment", "live", "--yes")
    unknown = run_manage("delete_assignments", "--experiment", "nope", "--yes")
    assert Assignment.objects.filter(experiment=ended).count() == 25
    deleted = run_manage("delete_assignments", "--experiment", "old-checkout", "--yes")

    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == b"deleted 25 assignments of Old-Checkout\n"
    assert deleted.stderr == b""  # no progress bar: stderr is a pipe
    for refused in (without_yes, not_ended, unknown):
        assert refused.returncode == 1
        assert refused.stdout == b""
        assert refused.stderr.strip()
        assert b"Traceback" not in refused.stderr
    assert b"--yes" in without_yes.stderr
    assert b"is active" in not_ended.stderr
    assert Assignment.objects.filter(experiment=ended).count() == 0
    assert Assignment.objects.filter(experiment=active).count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_delete_process__stderr_a_terminal__progress_bar_drawn_there(ended):
    store(ended, 25)

    result = run_manage_stderr_on_terminal("delete_assignments", "--experiment", "old-checkout", "--yes")

    assert result.returncode == 0
    assert result.stdout == b"deleted 25 assignments of Old-Checkout\n"
    assert b"deleting" in result.terminal


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_delete_process__reader_closes_stdout_at_once__exit_1_short_message(ended):
    store(ended, 2)

    result = run_manage_reader_leaves("delete_assignments", "--experiment", "old-checkout", "--yes", lines=0)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == CLOSED_STDOUT_MESSAGE
