"""assignments/storage.py: a request costs a fixed number of SQL statements whatever its batch size (on Citus, its read
one per shard)."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.cache import experiment_states
from assignments.models import Assignment
from tests.helpers.api import request_statements
from tests.helpers.database import batch_inserts, batch_reads
from tests.helpers.resources import apply_resources, experiment, subject_type

PATH = "/experiment-assignments"


def statements(api, subject_ids: list[str], *, cold: bool) -> int:
    if cold:
        experiment_states.clear()
    with CaptureQueriesContext(connection) as captured:
        response = api.post(PATH, {"experiment_id": "checkout-button", "subject_ids": subject_ids})
    assert response.status_code == 200, response.content
    assert len(json.loads(response.content)["assignments"]) == len(subject_ids)
    return len(captured.captured_queries)


@pytest.mark.parametrize("cold", [False, True], ids=["cached-experiment", "cold-experiment"])
def test_assign__1_or_1000_subjects__same_number_of_statements(api, demo_config, cold):
    # Given the token and (unless cold) the experiment's state already looked up once
    statements(api, ["warm-up"], cold=False)
    one = ["one"]
    thousand = [f"subject-{index}" for index in range(1000)]

    # When both batches are all new, and then both asked again (all existing)
    new_one = statements(api, one, cold=cold)
    new_thousand = statements(api, thousand, cold=cold)
    existing_one = statements(api, one, cold=cold)
    existing_thousand = statements(api, thousand, cold=cold)

    # Then the batch size changes nothing but, on Citus, the read's and the insert's statements per shard
    assert new_thousand - batch_reads(1000) - batch_inserts(1000) == new_one - batch_reads(1) - batch_inserts(1)
    assert existing_thousand - batch_reads(1000) == existing_one - batch_reads(1)
    assert existing_one <= new_one


def test_assign__mixed_batch__no_more_statements_than_an_all_new_one(api, demo_config):
    statements(api, ["warm-up"], cold=False)
    all_new = statements(api, [f"a-{index}" for index in range(500)], cold=False)

    mixed = statements(api, [f"a-{index}" for index in range(250)] + [f"b-{index}" for index in range(750)], cold=False)

    assert mixed == all_new


def test_assign__winner_declared__same_statements_for_1_and_1000(api, demo_config):

    apply_resources(experiment("checkout-button", status="winner_declared", winning_variant="green"))
    statements(api, ["warm-up"], cold=False)

    assert statements(api, ["one"], cold=False) == statements(api, [str(i) for i in range(1000)], cold=False)


@pytest.mark.parametrize("batch", [1, 1000])
def test_assign__repeat_request_for_existing_subjects__one_read_and_no_write(api, demo_config, batch):
    # Given: the subjects assigned, and the token's use already recorded this minute
    subject_ids = [f"subject-{index}" for index in range(batch)]
    statements(api, subject_ids, cold=False)

    # When
    with CaptureQueriesContext(connection) as captured:
        response = api.post(PATH, {"experiment_id": "checkout-button", "subject_ids": subject_ids})

    # Then
    assert response.status_code == 200
    assert [query["sql"].split()[0] for query in captured.captured_queries] == ["SELECT"] * batch_reads(batch)


# Gates that exclude some subjects of each batch for each reason they can give, read from the cached state.
OPEN = {"startAt": "2020-01-01T00:00:00Z", "stopAt": "2999-01-01T00:00:00Z"}
TARGETING = [{"attribute": "country", "in": ["DE", "AT"]}]
GATED_USER = subject_type("user", attributes={"country": "string"})


def countries(subject_ids: list[str]) -> dict[str, dict[str, str]]:
    """Half German, a quarter French (not targeted), a quarter with no attributes (attributes_missing)."""
    return {
        subject_id: {"country": "DE"} if index % 2 else {"country": "FR"}
        for index, subject_id in enumerate(subject_ids)
        if index % 4
    }


@pytest.mark.parametrize("size", [1, 1000])
def test_assign__gates__no_statement_more_than_the_same_batch_without(api, size):
    # Given the same experiment without gates, then with a window, targeting and coverage
    apply_resources(GATED_USER, experiment("checkout-button"))
    request_statements(api, PATH, {"experiment_id": "checkout-button", "subject_ids": ["warm-up"]})
    plain = [f"plain-{index}" for index in range(size)]
    without = request_statements(
        api, PATH, {"experiment_id": "checkout-button", "subject_ids": plain, "attributes": countries(plain)}
    )
    apply_resources(GATED_USER, experiment("checkout-button", enrollment=OPEN, targeting=TARGETING, coverage=0.5))
    request_statements(api, PATH, {"experiment_id": "checkout-button", "subject_ids": ["warm-up-2"]})

    # When a batch of new subjects, some of them excluded by each gate, asks
    subject_ids = [f"gated-{index}" for index in range(size)]
    body = {"experiment_id": "checkout-button", "subject_ids": subject_ids, "attributes": countries(subject_ids)}
    with_gates = request_statements(api, PATH, body)

    # Then the gates cost no statement, and asking again (some stored, the rest excluded again) is one read
    assert with_gates <= without
    if size == 1000:
        assert with_gates == without
    assert request_statements(api, PATH, body) == batch_reads(size)


def test_assignments__gates__same_statements_as_without(api):
    # Given two experiments of one subject type, one without gates and one with all three
    apply_resources(
        GATED_USER,
        experiment("plain"),
        experiment("gated", enrollment=OPEN, targeting=TARGETING, coverage=0.999),
    )
    for key in ("plain", "gated"):
        request_statements(api, "/assignments", {"subject": {"user": "warm-up"}, "experiments": [key]})

    # When one new subject who passes every gate asks for each
    without = request_statements(
        api, "/assignments", {"subject": {"user": "u-1"}, "experiments": ["plain"], "attributes": {"country": "DE"}}
    )
    with_gates = request_statements(
        api, "/assignments", {"subject": {"user": "u-2"}, "experiments": ["gated"], "attributes": {"country": "DE"}}
    )

    # Then the gates cost no statement, for a subject they let in
    assert with_gates == without
    assert Assignment.objects.filter(experiment__key="gated", subject_id="u-2").exists()
