"""Layers in the staff console: an experiment's layer and slots on its page."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.models import Cohort, Experiment, ResourceChange
from assignments.resources import resource_document
from tests.factories import AssignmentFactory
from tests.helpers.admin import edit, errors_of
from tests.helpers.resources import apply_resources, experiment, in_layer, layer, subject_type

USER = subject_type("user")


def stored(key: str) -> tuple:
    """The experiment's document, its cohorts and the number of history entries."""
    experiment = Experiment.objects.get(key=key)
    return (
        resource_document(experiment),
        list(Cohort.objects.filter(experiment=experiment).values_list("number", "population")),
        ResourceChange.objects.count(),
    )


@pytest.fixture
def checkout_flow(db) -> dict[str, Experiment]:
    """Layer `checkout-flow` on users: the active `button` owns [0, 2500], the active `copy` [2500, 5000]."""
    apply_resources(
        USER,
        layer("checkout-flow"),
        experiment("button", layer=in_layer("checkout-flow", [0, 2500])),
        experiment("copy", layer=in_layer("checkout-flow", [2500, 5000])),
    )
    return {experiment.key: experiment for experiment in Experiment.objects.all()}


def test_experiment_page__in_a_layer__saved_unchanged_or_renamed__keeps_its_layer_and_slots(
    staff_client, checkout_flow
):
    button = checkout_flow["button"]
    unchanged = stored("button")

    # When staff save its page as it is, then with a new name
    same = edit(staff_client, button)
    renamed = edit(staff_client, button, name="Button colour")

    # Then the first changes nothing, and the second only the name: layer and slots stay
    assert same.status_code == renamed.status_code == 302, errors_of(renamed)
    document = resource_document(Experiment.objects.get(key="button"))
    assert document["spec"]["layer"] == {"id": "checkout-flow", "slots": [[0, 2500]]}
    assert document["metadata"]["name"] == "Button colour"
    assert Cohort.objects.filter(experiment=button).count() == 1
    assert ResourceChange.objects.count() == unchanged[2] + 1


def test_experiment_page__slots_grown_while_active__next_cohort_with_history_by_staff(staff_client, checkout_flow):
    button = checkout_flow["button"]
    AssignmentFactory(experiment=button)

    response = edit(staff_client, button, slots="[[0, 2500], [5000, 6000]]")

    assert response.status_code == 302, errors_of(response)
    cohorts = list(Cohort.objects.filter(experiment=button).values_list("number", "population"))
    assert cohorts[-1] == (2, {"layer": {"id": "checkout-flow", "slots": [[0, 2500], [5000, 6000]]}})
    change = ResourceChange.objects.filter(kind="experiment", resource_id="button").latest("resource_version")
    assert (change.actor, change.channel) == ("alice", "admin")
    assert change.after["spec"]["layer"]["slots"] == [[0, 2500], [5000, 6000]]


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"slots": "[[2000, 3000]]"},
            "slots",
            "overlaps active experiment 'copy' on the slots [2500, 3000] of layer 'checkout-flow'",
        ),
        ({"slots": "[[0, 2500"}, "slots", "not valid YAML: "),
        ({"slots": "[[0, 10001]]"}, "slots", "range 1: needs 0 <= start < end <= 10000, got [0, 10001]"),
        ({"slots": "[[0, 100], [50, 60]]"}, "slots", "ranges [0, 100] and [50, 60] overlap"),
        ({"slots": "[[0, 2500], [7, x]]"}, "slots", "range 2: must be a list of two integers [start, end]"),
        ({"slots": ""}, "slots", "must be a non-empty list of [start, end] ranges"),
        ({"layer": ""}, "layer", "pick the layer these slots are in, or clear the slots"),
    ],
)
def test_experiment_page__slots_invalid__error_on_the_field_and_nothing_changed(
    staff_client, checkout_flow, changes, field, message
):
    before = stored("button")

    response = edit(staff_client, checkout_flow["button"], **changes)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(message in error for error in errors.get(field, [])), errors
    assert stored("button") == before


def test_experiment_page__with_assignments__layer_shown_fixed_and_shrinking_slots_refused(staff_client, checkout_flow):
    button = checkout_flow["button"]
    AssignmentFactory(experiment=button)
    before = stored("button")

    page = staff_client.get(f"/admin/assignments/experiment/{button.pk}/change/")
    shrunk = edit(staff_client, button, slots="[[0, 1000]]")

    field = page.context["adminform"].form.fields["layer"]
    assert field.disabled and field.help_text.startswith("Fixed: the experiment has assignments")
    assert "may only grow once the experiment has assignments" in shrunk.context["adminform"].form.errors["slots"][0]
    assert stored("button") == before


def test_experiment_page__draft_joins_a_layer__saved_as_yaml_would(staff_client, checkout_flow):
    apply_resources(USER, experiment("banner", status="draft"))
    banner = Experiment.objects.get(key="banner")

    response = edit(staff_client, banner, layer="checkout-flow", slots="[[5000, 10000]]")

    assert response.status_code == 302, errors_of(response)
    banner.refresh_from_db()
    assert (banner.layer.key, banner.slots) == ("checkout-flow", [[5000, 10000]])
    assert list(Cohort.objects.filter(experiment=banner).values_list("number", flat=True)) == [1]


def test_subject_lookup__experiments_in_layers__queries_do_not_grow_with_them(staff_client, checkout_flow):
    url = "/admin/assignments/assignment/lookup/"
    asked = {"subject_type": "user", "subject_id": "u-1"}
    with CaptureQueriesContext(connection) as two:
        two_page = staff_client.get(url, asked)
    apply_resources(
        USER,
        layer("onboarding"),
        *(experiment(f"tour-{n}", layer=in_layer("onboarding", [n * 1000, n * 1000 + 1000])) for n in range(4)),
    )
    with CaptureQueriesContext(connection) as six:
        six_page = staff_client.get(url, asked)

    assert len(six_page.context["previews"]) == 6 and len(two_page.context["previews"]) == 2
    assert len(six) == len(two)


def test_experiment_page__in_a_layer__the_rule_names_its_slots(staff_client, checkout_flow):
    page = staff_client.get(f"/admin/assignments/experiment/{checkout_flow['copy'].pk}/change/")

    assert "Who may enter now:</strong> every user in slots 2500 to 4999 of layer checkout-flow." in (
        page.content.decode()
    )
