"""A request costs a fixed number of SQL statements whatever its batch size."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.cache import experiment_states
from tests.helpers.resources import apply_resources, experiment

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

    # Then the batch size changes nothing
    assert new_one == new_thousand
    assert existing_one == existing_thousand
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
    assert [query["sql"].split()[0] for query in captured.captured_queries] == ["SELECT"]
