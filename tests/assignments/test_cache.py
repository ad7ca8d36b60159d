"""assignments/cache.py: the per-process experiment catalog, which never answers from a stale state, and
POST /assignments at a fixed number of statements however many experiments."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.cache import experiment_catalog
from assignments.models import Assignment
from tests.helpers.resources import apply_resources, experiment, split_variants

PATH = "/assignments"
ALL_GREEN = split_variants([("control", 0.0), ("green", 1.0)])


@pytest.fixture
def fifty_experiments(demo_config):
    apply_resources(*(experiment(f"exp-{number:02d}") for number in range(50)))


def statements(api, body: dict) -> tuple[int, dict]:
    with CaptureQueriesContext(connection) as captured:
        response = api.post(PATH, body)
    assert response.status_code == 200, response.content
    return len(captured.captured_queries), json.loads(response.content)


@pytest.mark.parametrize("cold", [False, True], ids=["cached-catalog", "cold-catalog"])
def test_subject_assignments__1_or_50_experiments__same_number_of_statements(api, fifty_experiments, cold):
    # Given the token's use recorded and (unless cold) the catalog cached
    statements(api, {"subject": {"user": "warm-up"}, "experiments": ["exp-00"]})
    names = [f"exp-{number:02d}" for number in range(50)]
    counts = {}
    for case, experiments, subject in (
        ("new-1", names[:1], "a"),
        ("new-50", names, "b"),
        ("stored-1", names[:1], "a"),
        ("stored-50", names, "b"),
    ):
        if cold:
            experiment_catalog.clear()
        counts[case], body = statements(api, {"subject": {"user": subject}, "experiments": experiments})
        assert len(body["assignments"]) == len(experiments)

    # Then the number of experiments changes nothing: new ones cost a read and an insert, stored ones a read
    assert counts["new-1"] == counts["new-50"]
    assert counts["stored-1"] == counts["stored-50"]
    assert counts["new-1"] == counts["stored-1"] + 1
    if not cold:
        assert counts["stored-1"] == 1


def test_subject_assignments__all_experiments_left_out__same_statements_as_named(api, fifty_experiments):
    statements(api, {"subject": {"user": "warm-up"}})

    everything, body = statements(api, {"subject": {"user": "c"}})
    named, _ = statements(api, {"subject": {"user": "d"}, "experiments": ["exp-07"]})

    assert len(body["assignments"]) == 51
    assert everything == named


def test_subject_assignments__assign_false__one_read_and_no_write(api, fifty_experiments):
    statements(api, {"subject": {"user": "warm-up"}})

    count, body = statements(api, {"subject": {"user": "e"}, "assign": False})

    assert count == 1
    assert len(body["unassigned"]) == 51
    assert not Assignment.objects.filter(subject_id="e").exists()


def test_subject_assignments__experiment_created_by_another_process__seen_by_the_next_request(
    api, demo_config, monkeypatch
):
    # Given this process has the catalog cached, and applies that do not clear it (as in another process)
    statements(api, {"subject": {"user": "u-1"}})
    monkeypatch.setattr(experiment_catalog, "clear", lambda: None)

    # When an experiment is created elsewhere
    apply_resources(experiment("exp-00"))

    # Then the next request, named or not, answers it
    _, named = statements(api, {"subject": {"user": "u-1"}, "experiments": ["exp-00"]})
    _, everything = statements(api, {"subject": {"user": "u-2"}})
    assert list(named["assignments"]) == ["exp-00"]
    assert list(everything["assignments"]) == ["checkout-button", "exp-00"]


def test_subject_assignments__changes_applied_by_another_process__honoured_by_the_next_request(
    api, demo_config, monkeypatch
):
    # Given a cached catalog, and applies that do not clear it
    apply_resources(experiment("exp-00"))
    statements(api, {"subject": {"user": "u-1"}})
    monkeypatch.setattr(experiment_catalog, "clear", lambda: None)

    # When the splits change elsewhere, a new subject follows them, in cohort 2
    apply_resources(experiment("exp-00", variants=ALL_GREEN))
    _, body = statements(api, {"subject": {"user": "n-1"}, "experiments": ["exp-00"]})
    assert body["assignments"] == {"exp-00": "green"}
    assert Assignment.objects.get(subject_id="n-1").cohort == 2

    # And when the experiment ends elsewhere, it is not active for the next request, which stores nothing
    apply_resources(experiment("exp-00", status="ended", variants=ALL_GREEN))
    _, body = statements(api, {"subject": {"user": "n-2"}, "experiments": ["exp-00"]})
    assert body == {"assignments": {}, "new_assignments": [], "unassigned": {"exp-00": "experiment_not_active"}}
    assert not Assignment.objects.filter(subject_id="n-2").exists()
