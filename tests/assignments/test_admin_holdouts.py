"""Holdouts in the staff console: kept out of the experiments' pages, and an experiment's holdouts on its page."""

from __future__ import annotations

import pytest

from assignments.models import Cohort, Experiment, ExperimentHoldout, ResourceChange
from tests.factories import AssignmentFactory
from tests.helpers.admin import edit, errors_of
from tests.helpers.assignments import assigned_store
from tests.helpers.resources import apply_resources, experiment, holdout, subject_type

USER = subject_type("user")


@pytest.fixture
def covered(db) -> dict[str, Experiment]:
    """On users: the active holdouts `h1` and `h2` (scope none), the active `checkout` covered by both, in
    that order, and the draft `pricing` covered by none."""
    apply_resources(
        USER,
        holdout("h1"),
        holdout("h2", share=0.1),
        experiment("checkout", holdouts=["h1", "h2"]),
        experiment("pricing", status="draft"),
    )
    return {experiment.key: experiment for experiment in Experiment.objects.all()}


def holdouts_of(key: str) -> list[str]:
    rows = ExperimentHoldout.objects.filter(experiment__key=key).order_by("position")
    return list(rows.values_list("holdout__key", flat=True))


def test_experiment_list__holdouts_stored_as_experiments__not_listed(staff_client, covered):
    response = staff_client.get("/admin/assignments/experiment/")

    assert sorted(row.key for row in response.context["cl"].result_list) == ["checkout", "pricing"]


def test_experiment_page__covered_experiment_saved_unchanged_or_renamed__keeps_its_holdouts_in_order(
    staff_client, covered
):
    history = ResourceChange.objects.count()

    same = edit(staff_client, covered["checkout"])
    renamed = edit(staff_client, covered["checkout"], name="Checkout")

    assert same.status_code == renamed.status_code == 302, errors_of(renamed)
    assert holdouts_of("checkout") == ["h1", "h2"]
    assert ResourceChange.objects.count() == history + 1


def test_experiment_page__holdouts_ticked_on_a_draft__cover_it_with_history_and_no_cohort(staff_client, covered):
    response = edit(staff_client, covered["pricing"], covering_holdouts=["h2", "h1"])

    assert response.status_code == 302, errors_of(response)
    assert holdouts_of("pricing") == ["h1", "h2"]
    change = ResourceChange.objects.filter(resource_id="pricing").latest("resource_version")
    assert (change.actor, change.after["spec"]["holdouts"]) == ("alice", ["h1", "h2"])
    assert Cohort.objects.filter(experiment=covered["pricing"]).count() == 1


def test_experiment_page__holdout_unticked_before_any_assignment__no_longer_covers_it(staff_client, covered):
    response = edit(staff_client, covered["checkout"], covering_holdouts="h2")

    assert response.status_code == 302, errors_of(response)
    assert holdouts_of("checkout") == ["h2"]


def test_experiment_page__with_assignments__holdouts_shown_fixed_and_kept(staff_client, covered):
    checkout = covered["checkout"]
    AssignmentFactory(experiment=checkout)

    page = staff_client.get(f"/admin/assignments/experiment/{checkout.pk}/change/")
    response = edit(staff_client, checkout, name="Checkout", covering_holdouts="h2")

    field = page.context["adminform"].form.fields["covering_holdouts"]
    assert field.disabled and field.help_text.startswith("Fixed: the experiment has assignments")
    assert response.status_code == 302, errors_of(response)
    assert holdouts_of("checkout") == ["h1", "h2"]


def test_experiment_page__holdout_of_another_subject_type__refused_on_the_field(staff_client, covered):
    apply_resources(subject_type("device"), holdout("devices", subject_type="device"))

    response = edit(staff_client, covered["pricing"], covering_holdouts="devices")

    assert response.status_code == 200
    (message,) = response.context["adminform"].form.errors["covering_holdouts"]
    assert message.startswith("holdout 'devices' is of subject type 'device', the experiment of 'user'")
    assert holdouts_of("pricing") == []


def test_subject_lookup__holdout_memberships__neither_experiments_nor_forceable(staff_client, covered):
    assigned_store("h1", "u-1", "general")
    assigned_store("checkout", "u-1", "green")

    page = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1"})

    lookup = page.context["lookup"]
    assert [a.experiment.key for a in lookup.assignments] == ["checkout"]
    assert [a.experiment.key for a in lookup.memberships] == ["h1"]
    assert [preview.experiment.key for preview in page.context["previews"]] == ["checkout"]
    forceable = page.context["force_form"].fields["experiment"].queryset
    assert sorted(forceable.values_list("key", flat=True)) == ["checkout", "pricing"]
