"""Concurrent requests for the same new subjects, through both endpoints: one stored row each, every
answer equal to it."""

from __future__ import annotations

import json
import random
import threading

import pytest
from django.db import connection
from django.db.models import Count
from django.test import Client

from assignments.models import Assignment, Experiment
from assignments.reports import experiment_report
from idlinks.services import Identifier, id_link_create
from tests.helpers.assignments import reference_variant
from tests.helpers.resources import apply_resources, experiment, lab, subject_type, variant
from tokens.models import Role
from tokens.services import api_token_create

THREADS = 8
SUBJECTS = 500
# A deadlock needs two inserts to overlap in time, which one burst of threads does not
# always achieve; several bursts make a batch insert in an unsorted order fail reliably.
ROUNDS = 5

# Its own lab: a transactional test empties the tables afterwards, so it cannot count on
# the `default` lab that the migrations create.
CONFIG = (
    subject_type("user"),
    lab("race"),
    experiment(
        "race-exp", lab="race", variants=[variant("control", 0.3, control=True), variant("b", 0.3), variant("c", 0.4)]
    ),
)
SPLITS = [("control", 0.3), ("b", 0.3), ("c", 0.4)]


def at_once(token: str, requests: list[tuple[str, dict]]) -> list[dict]:
    """Each (path, body) posted from its own thread, all released at once; the answers' `assignments`,
    in the order of the requests."""
    barrier = threading.Barrier(len(requests))
    answers: list[dict | None] = [None] * len(requests)
    failures: list[BaseException] = []

    def ask(index: int, path: str, body: dict) -> None:
        try:
            client = Client()
            barrier.wait(timeout=30)
            response = client.post(
                path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
            )
            assert response.status_code == 200, response.content
            answers[index] = json.loads(response.content)["assignments"]
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(index, *request)) for index, request in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a request hung"
    assert not failures, failures
    return answers


def race(token: str, subject_ids: list[str]) -> list[dict]:
    """THREADS requests for subject_ids, each in its own order, released at once; their answers."""
    orders = [random.Random(number).sample(subject_ids, len(subject_ids)) for number in range(THREADS)]
    return at_once(
        token, [("/experiment-assignments", {"experiment_id": "race-exp", "subject_ids": order}) for order in orders]
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_assign__8_threads_racing_for_the_same_500_new_subjects__one_row_each_and_all_answers_agree():
    # Given committed configuration and token
    apply_resources(*CONFIG)
    token = api_token_create(name="race", role=Role.PROXY)[1]

    for round_number in range(ROUNDS):
        # When 8 requests ask at once for the same 500 subjects nobody has asked for yet
        subject_ids = [f"racer-{round_number}-{index}" for index in range(SUBJECTS)]
        answers = race(token, subject_ids)

        # Then nobody failed, exactly one row per subject exists, and every answer is the stored row
        rows = list(
            Assignment.objects.filter(subject_id__in=subject_ids).values_list("subject_id", "variant__key", "cohort")
        )
        assert len(rows) == SUBJECTS
        stored = {subject_id: variant for subject_id, variant, _ in rows}
        assert {cohort for _, _, cohort in rows} == {1}
        for answer in answers:
            assert answer == stored
        assert stored == {subject_id: reference_variant("race-exp", subject_id, SPLITS) for subject_id in subject_ids}
    assert Assignment.objects.count() == ROUNDS * SUBJECTS
    # And the counts the triggers kept through the races (one shard per backend) equal the rows
    report = experiment_report(Experiment.objects.get(key="race-exp"))
    counted = dict(Assignment.objects.values_list("variant__key").annotate(total=Count("*")))
    assert {line.variant_id: line.assignments for line in report.cohorts[0].variants} == counted


BOTH_ENDPOINTS_THREADS = 16
BOTH_ENDPOINTS_CONFIG = (
    subject_type("user"),
    subject_type("device"),
    lab("race"),
    experiment("race-a", lab="race", variants=[variant("control", 0.5, control=True), variant("b", 0.5)]),
    experiment(
        "race-b", lab="race", variants=[variant("control", 0.2, control=True), variant("b", 0.3), variant("c", 0.5)]
    ),
    experiment(
        "race-linked",
        lab="race",
        follow_links=True,
        variants=[variant("control", 0.5, control=True), variant("b", 0.5)],
    ),
)
RACED_EXPERIMENTS = ["race-a", "race-b", "race-linked"]


def race_both_endpoints(token: str, subject_id: str) -> list[dict[str, str]]:
    """16 requests for one new subject, released at once: even threads ask POST /assignments for the
    three experiments, odd ones POST /experiment-assignments for one of them each; the answers as
    {experiment: variant}."""
    requests = []
    for number in range(BOTH_ENDPOINTS_THREADS):
        if number % 2 == 0:
            body = {"subject": {"user": subject_id}, "experiments": RACED_EXPERIMENTS[number % 3 :]}
            requests.append(("/assignments", body))
        else:
            body = {"experiment_id": RACED_EXPERIMENTS[number % 3], "subject_ids": [subject_id]}
            requests.append(("/experiment-assignments", body))
    # /experiment-assignments answers by subject: as {experiment: variant} every answer compares alike.
    return [
        answer if path == "/assignments" else {body["experiment_id"]: answer[subject_id]}
        for (path, body), answer in zip(requests, at_once(token, requests), strict=True)
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_both_endpoints__16_threads_racing_for_one_new_subject_in_3_experiments__one_row_each_everywhere():
    # Given committed configuration and token
    apply_resources(*BOTH_ENDPOINTS_CONFIG)
    token = api_token_create(name="race", role=Role.PROXY)[1]
    linked_variant = {}
    for round_number in range(ROUNDS):
        # And, for race-linked, an assigned user linked to the new one through a device
        subject_id, origin = f"racer-{round_number}", f"origin-{round_number}"
        Client().post(
            "/experiment-assignments",
            json.dumps({"experiment_id": "race-linked", "subject_ids": [origin]}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        id_link_create(first=Identifier("user", origin), second=Identifier("device", f"d-{round_number}"))
        id_link_create(first=Identifier("device", f"d-{round_number}"), second=Identifier("user", subject_id))
        linked_variant[subject_id] = Assignment.objects.get(subject_id=origin).variant.key

        # When 16 requests ask at once for the new user through both endpoints
        answers = race_both_endpoints(token, subject_id)

        # Then exactly one row per experiment exists, and every answer is the stored row
        rows = Assignment.objects.filter(subject_id=subject_id).values_list("experiment__key", "variant__key", "source")
        stored = {experiment: variant for experiment, variant, _ in rows}
        assert len(rows) == 3
        for answer in answers:
            assert answer == {experiment: stored[experiment] for experiment in answer}
        # And race-linked carried the linked user's variant over, the others hashed
        assert stored["race-linked"] == linked_variant[subject_id]
        assert {experiment: source for experiment, _, source in rows} == {
            "race-a": "hashed",
            "race-b": "hashed",
            "race-linked": "linked",
        }
        assert stored["race-a"] == reference_variant("race-a", subject_id, [("control", 0.5), ("b", 0.5)])
