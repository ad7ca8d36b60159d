"""`include_values` on POST /experiment-assignments and POST /assignments: each variant's value beside the
variants (its ID when the experiment has no value type); without it the bodies are as before."""

from __future__ import annotations

import pytest

from assignments.models import Experiment
from tests.factories import ExperimentFactory, SubjectTypeFactory
from tests.helpers.api import assert_one_invalid_field

pytestmark = pytest.mark.django_db

LABELS = {"control": {"label": "Buy", "color": "#888888", "badge": None}, "green": {"label": "Buy now", "n": [1, 2]}}


def valued(key: str, value_type: str, values: dict, **fields) -> Experiment:
    experiment = ExperimentFactory(key=key, splits=[(variant, 1 / len(values)) for variant in values], **fields)
    Experiment.objects.filter(pk=experiment.pk).update(value_type=value_type)
    for variant in experiment.variants.all():
        variant.value = values[variant.key]
        variant.save(update_fields=["value"])
    return experiment


@pytest.fixture
def user():
    return SubjectTypeFactory(key="user")


def test_experiment_assignments__values_of_the_variants_answered(api, user):
    valued("checkout", "object", LABELS, subject_type=user)
    subjects = [f"u-{n}" for n in range(20)]

    body = api.post(
        "/experiment-assignments", {"experiment_id": "checkout", "subject_ids": subjects, "include_values": True}
    ).json()

    answered = set(body["assignments"].values())
    assert answered == {"control", "green"}
    assert body["values"] == {variant: LABELS[variant] for variant in answered}


def test_experiment_assignments__a_float_value_keeps_its_point_and_no_type_serves_the_id(api, user):
    valued("price", "float", {"control": 1.0, "green": 2.5}, subject_type=user)
    ExperimentFactory(key="plain", subject_type=user, splits=[("control", 1.0)])

    priced = api.post(
        "/experiment-assignments", {"experiment_id": "price", "subject_ids": ["u-1"], "include_values": True}
    )
    plain = api.post(
        "/experiment-assignments", {"experiment_id": "plain", "subject_ids": ["u-1"], "include_values": True}
    )

    variant = priced.json()["assignments"]["u-1"]
    assert f'"{variant}":{"1.0" if variant == "control" else "2.5"}' in priced.text
    assert plain.json() == {"assignments": {"u-1": "control"}, "values": {"control": "control"}}


def test_experiment_assignments__without_include_values_the_body_is_as_before(api, user):
    valued("checkout", "object", LABELS, subject_type=user)

    for body in ({}, {"include_values": False}):
        answer = api.post("/experiment-assignments", {"experiment_id": "checkout", "subject_ids": ["u-1"], **body})
        assert list(answer.json()) == ["assignments"]


def test_experiment_assignments__a_declared_winner_serves_its_value(api, user):
    experiment = valued("banner", "string", {"control": "Hello", "green": "Welcome"}, subject_type=user)
    Experiment.objects.filter(pk=experiment.pk).update(
        status=Experiment.Status.WINNER_DECLARED, winning_variant=experiment.variants.get(key="green")
    )

    body = api.post(
        "/experiment-assignments", {"experiment_id": "banner", "subject_ids": ["u-1"], "include_values": True}
    ).json()

    assert body == {"assignments": {"u-1": "green"}, "values": {"green": "Welcome"}}


def test_assignments__values_by_experiment_for_those_answered_only(api, user):
    valued("limit", "integer", {"control": 10, "green": 20}, subject_type=user)
    valued("dark-mode", "boolean", {"control": False, "green": True}, subject_type=user)
    ExperimentFactory(key="drafted", subject_type=user, status=Experiment.Status.DRAFT)

    body = api.post(
        "/assignments",
        {"subject": {"user": "u-7"}, "experiments": ["limit", "dark-mode", "drafted"], "include_values": True},
    ).json()

    assert body["unassigned"] == {"drafted": "experiment_not_active"}
    expected = {"limit": {"control": 10, "green": 20}, "dark-mode": {"control": False, "green": True}}
    assert body["values"] == {key: expected[key][variant] for key, variant in body["assignments"].items()}


def test_assignments__read_only_answers_values_too(api, user):
    valued("limit", "integer", {"control": 10, "green": 20}, subject_type=user)
    api.post("/assignments", {"subject": {"user": "u-7"}, "experiments": ["limit"]})

    body = api.post("/assignments", {"subject": {"user": "u-7"}, "assign": False, "include_values": True}).json()

    assert set(body["values"]) == {"limit"} and body["values"]["limit"] in (10, 20)


@pytest.mark.parametrize("sent", [None, "true", 1, []])
@pytest.mark.parametrize("path", ["/experiment-assignments", "/assignments"])
def test_include_values__anything_but_a_boolean_is_refused(api, user, path, sent):
    ExperimentFactory(key="checkout", subject_type=user)
    body = (
        {"experiment_id": "checkout", "subject_ids": ["u-1"]}
        if path == "/experiment-assignments"
        else {"subject": {"user": "u-1"}}
    )
    message = "must not be null" if sent is None else "must be true or false"

    assert_one_invalid_field(api.post(path, {**body, "include_values": sent}), "include_values", message)
