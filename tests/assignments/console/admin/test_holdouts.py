"""assignments/console/admin/holdouts.py: holdouts in the staff console: their own pages, kept out of the experiments',
and an experiment's holdouts on its page."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.configuration.export import resource_document
from assignments.console.reports import experiment_report
from assignments.models import Assignment, Cohort, Experiment, ExperimentHoldout, Holdout, ResourceChange
from tests.factories import AssignmentFactory
from tests.helpers.admin import assert_field_error, edit, errors_of, inline_text, messages_of, table_rows, words_of
from tests.helpers.assignments import assigned_store, reference_variant
from tests.helpers.browser import form_fields
from tests.helpers.resources import apply_resources, experiment, holdout, lab, subject_type

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


def test_experiment_page__covered__the_rule_names_its_holdouts_with_links(staff_client, covered):
    apply_resources(USER, holdout("h2", share=0.1, status="ended"))

    page = staff_client.get(f"/admin/assignments/experiment/{covered['checkout'].pk}/change/")

    assert "Who may enter now: every user, but for the held_out members of h1 (active), h2 (ended: holds out " in (
        words_of(page)
    )
    assert f'href="/admin/assignments/holdout/{covered["h1"].pk}/change/"' in page.content.decode()


# The holdouts' pages


def holdout_url(holdout: Experiment, page: str = "change") -> str:
    return f"/admin/assignments/holdout/{holdout.pk}/{page}/"


def test_holdout_list__holdouts_only_with_their_share_and_scope(staff_client, covered):
    apply_resources(lab("growth"), holdout("h3", share=0.25, scope={"labs": ["growth"]}, status="draft"))

    response = staff_client.get("/admin/assignments/holdout/")

    assert sorted(row.key for row in response.context["cl"].result_list) == ["h1", "h2", "h3"]
    text = words_of(response)
    assert "h3 h3 Draft user 25 % the experiments of the labs growth" in text
    assert "h1 h1 Active user 5 % none: it covers the experiments that list it" in text


def test_holdout_page__members_health_chart_covered_experiments_and_history(staff_client, covered):
    # Given memberships stored by requests over two days
    h1 = covered["h1"]
    for subject_id in ("u1", "u2", "u3"):
        assigned_store("h1", subject_id, "general")
    assigned_store("h1", "u4", "held_out")

    page = staff_client.get(holdout_url(h1))

    # Then the page shows the health panel of its two variants, the experiments it covers, and its history
    text = words_of(page)
    report = experiment_report(h1)
    assert "Health: 4 memberships" in text
    assert f"p = {report.cohorts[0].p_value_text}" in text
    assert "held_out 1 5.00% 25.00%" in text and "general 3 95.00% 75.00%" in text
    assert "<title>New memberships per day (UTC) in h1</title>" in page.content.decode()
    assert "Covers 1 experiment Holds out 5 % of users from the experiments it covers" in text
    assert f'href="/admin/assignments/experiment/{covered["checkout"].pk}/change/"' in page.content.decode()
    assert "History (newest first) version 1" in text and "+ share: 0.05" in text


def test_holdout_page__queries__do_not_grow_with_the_experiments_it_covers(staff_client, covered):
    with CaptureQueriesContext(connection) as one:
        staff_client.get(holdout_url(covered["h1"]))
    apply_resources(USER, *(experiment(f"e-{n}", holdouts=["h1"]) for n in range(5)))
    with CaptureQueriesContext(connection) as six:
        page = staff_client.get(holdout_url(covered["h1"]))

    assert len(page.context["covered"]) == 6
    assert len(six) == len(one)


def test_holdout_add__through_the_service__created_with_its_variants_cohort_and_history(staff_client, covered):
    apply_resources(lab("growth"), lab("checkout"))
    page = staff_client.get("/admin/assignments/holdout/add/")
    data = form_fields(page.content.decode(), form_id="holdout_form")
    data.update(
        {"key": "H-2027", "subject_type": "user", "share": "0.1", "scope": "labs", "scope_labs": ["growth", "checkout"]}
    )

    response = staff_client.post("/admin/assignments/holdout/add/", data)

    assert response.status_code == 302, errors_of(response)
    created = Experiment.objects.get(key="H-2027")
    assert (created.kind, created.status, created.salt, created.scope) == (
        "holdout",
        "draft",
        "h-2027",
        {"labs": ["checkout", "growth"]},
    )
    assert [(v.key, v.split, v.is_control) for v in created.variants.all()] == [
        ("held_out", 0.1, True),
        ("general", 0.9, False),
    ]
    change = ResourceChange.objects.get(kind="holdout", resource_id="H-2027")
    assert (change.before, change.actor, change.channel) == (None, "alice", "admin")


def test_holdout_edit__saved_unchanged__no_change_even_for_a_scope_written_in_another_case(staff_client, db):
    apply_resources(USER, lab("growth"), lab("checkout"), holdout("h1", scope={"labs": ["Growth", "checkout"]}))
    h1 = Holdout.objects.get(key="h1")
    history = ResourceChange.objects.count()

    page = staff_client.get(holdout_url(h1))
    response = edit(staff_client, h1)

    assert page.context["adminform"].form.initial["scope_labs"] == ["checkout", "growth"]
    assert response.status_code == 302, errors_of(response)
    assert (Experiment.objects.get(pk=h1.pk).resource_version, ResourceChange.objects.count()) == (1, history)


def test_holdout_edit__scope_and_name__saved_with_history_by_staff(staff_client, covered):
    apply_resources(lab("growth"))
    h1 = Holdout.objects.get(key="h1")

    response = edit(staff_client, h1, name="Second half", scope="labs", scope_labs="growth")

    assert response.status_code == 302, errors_of(response)
    h1.refresh_from_db()
    assert (h1.name, h1.scope, h1.resource_version) == ("Second half", {"labs": ["growth"]}, 2)
    change = ResourceChange.objects.filter(kind="holdout", resource_id="h1").latest("resource_version")
    assert (change.actor, change.channel, change.after["spec"]["scope"]) == ("alice", "admin", {"labs": ["growth"]})


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"share": "0.2"}, "share", "cannot change once the holdout has been active: its members were drawn with it"),
        ({"share": "0.6"}, "share", "must be a number more than 0 and at most 0.5"),
        ({"salt": "other"}, "salt", "cannot change once the holdout has been active"),
        ({"status": "draft"}, "status", "cannot go back from active to draft"),
        ({"scope": "labs"}, "scope_labs", "must list at least one lab"),
        ({"scope_labs": "default"}, "scope_labs", "count only for a scope of the labs ticked"),
        ({"salt": "Checkout"}, "salt", "salt 'Checkout' is the salt of experiment 'checkout' already"),
    ],
)
def test_holdout_edit__rule_broken__error_on_the_field_and_nothing_changed(
    staff_client, covered, changes, field, message
):
    h1 = Holdout.objects.get(key="h1")
    before = (resource_document(Experiment.objects.get(pk=h1.pk)), ResourceChange.objects.count())

    response = edit(staff_client, h1, **changes)

    assert_field_error(response, field, message)
    assert (resource_document(Experiment.objects.get(pk=h1.pk)), ResourceChange.objects.count()) == before


def test_holdout_transitions__start_then_end__confirmed_through_the_service_with_history(staff_client, covered):
    apply_resources(USER, holdout("h3", status="draft"))
    h3 = Experiment.objects.get(key="h3")

    page = staff_client.get(holdout_url(h3))
    started = staff_client.post(holdout_url(h3, "transition/active"), {"confirm": "yes"}, follow=True)
    ended = staff_client.post(
        "/admin/assignments/holdout/", {"action": "end", "_selected_action": [h3.pk], "confirm": "yes"}, follow=True
    )

    assert [label for _, label in page.context["transitions"]] == ["Start", "End"]
    assert messages_of(started) == ["h3 was started."] and messages_of(ended) == ["h3 was ended."]
    statuses = ResourceChange.objects.filter(kind="holdout", resource_id="h3").order_by("resource_version")
    assert [(c.channel, c.after["metadata"]["status"]) for c in statuses] == [
        ("command", "draft"),
        ("admin", "active"),
        ("admin", "ended"),
    ]
    assert {c.actor for c in statuses if c.channel == "admin"} == {"alice"}
    assert Experiment.objects.get(pk=h3.pk).status == "ended"


def test_holdout_transitions__winner_or_archive__not_offered(staff_client, covered):
    h1 = covered["h1"]

    winner = staff_client.post(holdout_url(h1, "transition/winner_declared"), {"confirm": "yes"})
    archive = staff_client.post(holdout_url(h1, "transition/archived"), {"confirm": "yes"})
    listing = staff_client.get("/admin/assignments/holdout/")

    assert winner.status_code == archive.status_code == 403
    assert [name for name, _ in listing.context["action_form"].fields["action"].choices][1:] == ["start", "end"]
    assert Experiment.objects.get(pk=h1.pk).status == "active"


def test_holdout__cannot_be_deleted_nor_opened_as_an_experiment(staff_client, covered):
    h1 = covered["h1"]

    deleted = staff_client.post(holdout_url(h1, "delete"), {"post": "yes"})
    as_experiment = staff_client.get(f"/admin/assignments/experiment/{h1.pk}/change/", follow=True)

    assert deleted.status_code == 403
    assert as_experiment.redirect_chain == [("/admin/", 302)]
    assert Experiment.objects.filter(pk=h1.pk).exists()


# A subject's memberships: the lookup and "try a subject"


def test_subject_lookup__holdouts_of_its_type__stored_or_by_the_formula_marked_not_stored(staff_client, covered):
    assigned_store("h1", "u-1", "held_out")
    formula = reference_variant("h2", "u-1", [("held_out", 0.1), ("general", 0.9)])

    page = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1"})

    assert table_rows(page, "holdout-memberships") == [
        ["h1", "active", f"held_out (stored {page.context['lookup'].memberships[0].created_at:%Y-%m-%d %H:%M:%S} UTC)"],
        [
            "h2",
            "active",
            f"{formula} (not stored: the holdout's formula, stored by the first request that reaches an "
            "experiment it covers)",
        ],
    ]
    (checkout,) = page.context["previews"]
    assert (checkout.answer, checkout.reason) == ("control", "held_out")
    assert "Excluded (held_out): it is a held_out member of h1." in checkout.summary


def test_subject_lookup__queries__do_not_grow_with_the_holdouts(staff_client, covered):
    asked = {"subject_type": "user", "subject_id": "u-1"}
    with CaptureQueriesContext(connection) as two:
        staff_client.get("/admin/assignments/assignment/lookup/", asked)
    apply_resources(
        USER, *(holdout(f"more-{n}") for n in range(3)), experiment("tour", holdouts=[f"more-{n}" for n in range(3)])
    )
    with CaptureQueriesContext(connection) as five:
        page = staff_client.get("/admin/assignments/assignment/lookup/", asked)

    assert len(page.context["memberships"]) == 5
    assert len(five) == len(two)


def test_try_a_subject__covered__its_memberships_and_whether_they_hold_it_out(staff_client, covered):
    checkout = covered["checkout"]
    h1_splits = [("held_out", 0.05), ("general", 0.95)]
    subject_id = next(f"u-{n}" for n in range(100) if reference_variant("h1", f"u-{n}", h1_splits) == "general")

    response = staff_client.post(f"/admin/assignments/experiment/{checkout.pk}/try/", {"subject_id": subject_id})

    preview = response.context["preview"]
    assert [(m.holdout, m.stored) for m in preview.memberships] == [("h1", None), ("h2", None)]
    assert "Holdouts covering it: h1: general (not stored: the holdout's formula); h2:" in inline_text(
        response.content.decode()
    )
    assert f'href="/admin/assignments/holdout/{covered["h1"].pk}/change/"' in response.content.decode()
    assert not Assignment.objects.exists()
