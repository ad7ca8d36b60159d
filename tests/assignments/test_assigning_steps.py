"""The assignment answers as steps (assignments/assigning.py, core/steps.py): with the caches warm, a request's
steps are its statements alone, so a driver that can send statements only (an async one) answers it without
the sync connection; what a cold cache loads, and what only the database knows, are steps of their own."""

from __future__ import annotations

import pytest

from assignments.assigning import assign_subject, assign_subject_steps, assign_subjects, assign_subjects_steps
from assignments.errors import ExperimentNotFound
from assignments.storage import storage_vendor
from core.cache import caches_clear
from core.steps import Statement, steps_driven, steps_run

pytestmark = pytest.mark.single_node("on Citus the hot path's statements are steps of the sync connection")

STATEMENT = "statement"
FUNCTION = "function"


def single(step):
    return (yield step)


def sent(steps, kinds: list[str] | None = None) -> tuple[object, list[str]]:
    """The outcome of `steps`, each step performed as steps_run performs it, and the kind of each (also noted
    in `kinds`, for steps that raise)."""
    kinds = [] if kinds is None else kinds

    def perform(step):
        kinds.append(STATEMENT if isinstance(step, Statement) else FUNCTION)
        return steps_run(single(step))

    return steps_driven(steps, perform), kinds


def experiment_steps(*subject_ids: str):
    return assign_subjects_steps(vendor=storage_vendor(), experiment_id="checkout-button", subject_ids=subject_ids)


def subject_steps(subject_id: str):
    return assign_subject_steps(
        vendor=storage_vendor(), subject={"user": subject_id}, experiment_ids=["checkout-button"], assign=True
    )


def test_assign_subjects_steps__caches_warm__a_stored_subject_is_one_statement_a_new_one_two(demo_config):
    first = assign_subjects(experiment_id="checkout-button", subject_ids=["s-1"])

    stored, stored_kinds = sent(experiment_steps("s-1"))
    new, new_kinds = sent(experiment_steps("s-2"))

    assert stored == first
    assert stored_kinds == [STATEMENT]
    assert new_kinds == [STATEMENT, STATEMENT]
    assert new.assignments["s-2"] in {"control", "green"}


def test_assign_subject_steps__caches_warm__a_stored_subject_is_one_statement(demo_config):
    first = assign_subject(subject={"user": "s-1"}, experiment_ids=["checkout-button"], assign=True)

    again, kinds = sent(subject_steps("s-1"))

    assert again.assignments == first.assignments
    assert kinds == [STATEMENT]


def test_assign_steps__caches_cold__what_they_load_a_step_before_the_statements(demo_config):
    assign_subjects(experiment_id="checkout-button", subject_ids=["s-1"])
    caches_clear()
    _, experiment_kinds = sent(experiment_steps("s-1"))
    caches_clear()
    _, subject_kinds = sent(subject_steps("s-1"))

    # The experiment's state; then the subject types and the catalog.
    assert experiment_kinds == [FUNCTION, STATEMENT]
    assert subject_kinds == [FUNCTION, FUNCTION, STATEMENT]


def test_assign_subjects_steps__experiment_unknown__the_lookups_only_the_database_answers_are_steps(demo_config):
    assign_subjects(experiment_id="checkout-button", subject_ids=["s-1"])
    steps = assign_subjects_steps(vendor=storage_vendor(), experiment_id="nope", subject_ids=["s-1"])
    kinds: list[str] = []

    with pytest.raises(ExperimentNotFound, match="No experiment has the ID 'nope'"):
        sent(steps, kinds)
    # Its load, which finds nothing, then the holdouts of that ID, for the 404's detail.
    assert kinds == [FUNCTION, FUNCTION]
