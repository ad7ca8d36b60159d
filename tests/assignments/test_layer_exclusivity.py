"""Layers keep their experiments mutually exclusive through every kind of change, and stored assignments never move.

A hypothesis state machine runs random sequences of requests and changes on one layer: activating a draft,
growing slots, ending an experiment (which frees its slots for another), linking identifiers (with an
experiment that follows links), importing and forcing assignments. After every step no subject holds a
`hashed` or `linked` assignment in two active experiments of the layer, and every answer for a stored
assignment is what was stored.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from assignments.assigning import assign_subject, assign_subjects
from assignments.forcing import assignments_force
from assignments.importing import assignments_import
from assignments.models import Assignment, Experiment
from assignments.resources import ResourceInvalid
from core.cache import caches_clear
from idlinks.services import Identifier, id_link_create
from tests.helpers.resources import apply_resources, experiment, in_layer, layer, subject_type

USERS = [f"u-{number}" for number in range(40)]
COOKIES = [f"c-{number}" for number in range(10)]
# The experiments of the layer, as the machine last applied them: ID -> (status, slot ranges).
START = {
    "alpha": ("active", [[0, 3000]]),
    "beta": ("active", [[3000, 6000]]),
    "gamma": ("draft", [[2000, 7000]]),
}
# Free slots the machine may grow an experiment into; some overlap others' ranges, and are then refused.
GROWTH = [[6000, 7000], [7000, 8500], [8500, 10000], [2500, 3500], [9000, 9500]]

TWO_ACTIVE_IN_ONE_LAYER = """
SELECT a.subject_id, count(*)
FROM assignments_assignment a JOIN assignments_experiment e ON e.id = a.experiment_id
WHERE e.layer_id IS NOT NULL AND e.status = 'active' AND a.source IN ('hashed', 'linked')
GROUP BY e.layer_id, a.subject_id
HAVING count(*) > 1
"""


class LayerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Each run starts from an empty database and empty caches, and is rolled back at its end.
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        caches_clear()
        self.experiments = dict(START)
        # (experiment ID, subject ID) -> the variant first answered from a stored assignment.
        self.stored: dict[tuple[str, str], str] = {}

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self.atomic.__exit__(None, None, None)
        caches_clear()

    def documents(self) -> list[dict]:
        return [
            subject_type("user"),
            subject_type("cookie"),
            layer("flow"),
            *(
                experiment(
                    key,
                    status=status,
                    winning_variant="green" if status == "winner_declared" else None,
                    layer=in_layer("flow", *slots),
                    follow_links=key == "beta" or None,
                )
                for key, (status, slots) in self.experiments.items()
            ),
        ]

    def apply(self, key: str, status: str, slots: list[list[int]]) -> None:
        before = self.experiments[key]
        self.experiments[key] = (status, slots)
        try:
            apply_resources(*self.documents())
        except ResourceInvalid:
            self.experiments[key] = before

    @initialize()
    def configure(self) -> None:
        apply_resources(*self.documents())

    def remember(self, key: str, answers: dict[str, str]) -> None:
        """Checks each stored assignment's answer against the one first seen, and remembers new ones."""
        experiment_pk = Experiment.objects.get(key=key).pk
        stored = dict(
            Assignment.objects.filter(experiment=experiment_pk, subject_id__in=answers).values_list(
                "subject_id", "variant__key"
            )
        )
        for subject_id, variant in stored.items():
            if self.experiments[key][0] == "active":
                assert answers[subject_id] == variant
            assert self.stored.setdefault((key, subject_id), variant) == variant

    @rule(key=st.sampled_from(sorted(START)), subject_ids=st.lists(st.sampled_from(USERS), min_size=1, max_size=8))
    def ask_batch(self, key: str, subject_ids: list[str]) -> None:
        if self.experiments[key][0] not in ("active", "winner_declared"):
            return
        self.remember(key, assign_subjects(experiment_id=key, subject_ids=subject_ids).assignments)

    @rule(subject_id=st.sampled_from(USERS))
    def ask_subject(self, subject_id: str) -> None:
        answer = assign_subject(subject={"user": subject_id}, experiment_ids=sorted(START), assign=True)
        for key, variant in answer.assignments.items():
            self.remember(key, {subject_id: variant})

    @rule(key=st.sampled_from(sorted(START)))
    def activate(self, key: str) -> None:
        status, slots = self.experiments[key]
        if status == "draft":
            self.apply(key, "active", slots)

    @rule(key=st.sampled_from(sorted(START)), extra=st.sampled_from(GROWTH))
    def grow(self, key: str, extra: list[int]) -> None:
        status, slots = self.experiments[key]
        if extra not in slots and not any(start < extra[1] and extra[0] < end for start, end in slots):
            self.apply(key, status, [*slots, extra])

    @rule(key=st.sampled_from(sorted(START)), status=st.sampled_from(["winner_declared", "ended"]))
    def end(self, key: str, status: str) -> None:
        # Either frees the experiment's slots for another.
        current, slots = self.experiments[key]
        if Experiment.status_rank(status) > Experiment.status_rank(current) >= Experiment.status_rank("active"):
            self.apply(key, status, slots)

    @rule(first=st.sampled_from(USERS), cookie=st.sampled_from(COOKIES), second=st.sampled_from(USERS))
    def link(self, first: str, cookie: str, second: str) -> None:
        # Two users linked through one cookie: beta, which follows links, may carry an assignment across.
        id_link_create(first=Identifier("user", first), second=Identifier("cookie", cookie))
        id_link_create(first=Identifier("cookie", cookie), second=Identifier("user", second))

    @rule(key=st.sampled_from(sorted(START)), subject_id=st.sampled_from(USERS))
    def import_one(self, key: str, subject_id: str) -> None:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "import.csv"
            path.write_text(f"subject_id,variant_id\n{subject_id},green\n", encoding="utf-8")
            assignments_import(path=path, experiment=Experiment.objects.get(key=key), atomic=True)

    @rule(key=st.sampled_from(sorted(START)), subject_id=st.sampled_from(USERS))
    def force_one(self, key: str, subject_id: str) -> None:
        if self.experiments[key][0] in ("draft", "active"):
            assignments_force(
                experiment=Experiment.objects.get(key=key),
                variant_id="control",
                subject_ids=[subject_id],
                reason="QA",
                replace=False,
            )

    @invariant()
    def exclusive(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(TWO_ACTIVE_IN_ONE_LAYER)
            assert cursor.fetchall() == []


@pytest.mark.django_db(transaction=True)
def test_layer__any_sequence_of_changes__no_subject_randomised_into_two_active_experiments_of_it():
    run_state_machine_as_test(
        LayerMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
