"""assignments/console/admin/lifecycle.py: the lifecycle's transitions (list actions, the page's buttons and
their confirmation), the experiment page's health panel, and the counts it reads."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.console.reports import experiment_report
from assignments.models import Assignment, Experiment, ResourceChange, Variant
from tests.factories import ExperimentFactory
from tests.helpers.admin import assign, messages_of, text_of

# Lifecycle actions


def test_list_action_start__confirmed__experiment_active_with_history(staff_client, configured):
    draft = ExperimentFactory(key="new-one", status=Experiment.Status.DRAFT)
    data = {"action": "start", "_selected_action": [draft.pk]}

    # When staff pick "start": a confirmation page first, nothing changed yet
    confirmation = staff_client.post("/admin/assignments/experiment/", data)
    assert confirmation.status_code == 200
    assert 'value="Yes, start"' in confirmation.content.decode()
    assert Experiment.objects.get(pk=draft.pk).status == "draft"

    # When they confirm
    done = staff_client.post("/admin/assignments/experiment/", {**data, "confirm": "yes"}, follow=True)

    # Then it is active, recorded as their change, and they are told
    assert Experiment.objects.get(pk=draft.pk).status == "active"
    assert "new-one was started." in messages_of(done)
    change = ResourceChange.objects.get(kind="experiment", resource_id="new-one")
    assert (change.actor, change.channel, change.after["metadata"]["status"]) == ("alice", "admin", "active")


def test_list_action_start__ended_experiment__refused_with_reason_and_nothing_changed(staff_client, configured):
    finished = configured["finished"]
    history = ResourceChange.objects.count()

    done = staff_client.post(
        "/admin/assignments/experiment/",
        {"action": "start", "_selected_action": [finished.pk], "confirm": "yes"},
        follow=True,
    )

    assert "finished was not started: cannot go back from ended to active." in messages_of(done)
    assert Experiment.objects.get(pk=finished.pk).status == "ended"
    assert ResourceChange.objects.count() == history


def test_list_action_end__several__each_reported(staff_client, configured):
    done = staff_client.post(
        "/admin/assignments/experiment/",
        {
            "action": "end",
            "_selected_action": [configured["checkout"].pk, configured["finished"].pk],
            "confirm": "yes",
        },
        follow=True,
    )

    assert messages_of(done) == ["checkout was ended.", "finished is already ended."]
    assert Experiment.objects.get(key="checkout").status == "ended"


def test_page_declare_winner__variant_picked__winner_declared_and_served(staff_client, configured, api):
    checkout = configured["checkout"]
    url = f"/admin/assignments/experiment/{checkout.pk}/transition/winner_declared/"

    # The page offers the transition, and its confirmation asks for the winner
    page = staff_client.get(f"/admin/assignments/experiment/{checkout.pk}/change/")
    assert url in page.content.decode()
    confirmation = staff_client.get(url)
    assert f'name="winner-{checkout.pk}"' in confirmation.content.decode()

    # Confirming without a winner is asked again, changing nothing
    assert staff_client.post(url, {"confirm": "yes"}).status_code == 200
    assert Experiment.objects.get(pk=checkout.pk).status == "active"

    # With a winner, it is declared and the API serves it to everyone
    done = staff_client.post(url, {"confirm": "yes", f"winner-{checkout.pk}": "green"}, follow=True)
    checkout.refresh_from_db()
    assert (checkout.status, checkout.winning_variant.key) == ("winner_declared", "green")
    assert "checkout was given a winner." in messages_of(done)
    response = api.post("/experiment-assignments", {"experiment_id": "checkout", "subject_ids": ["anyone"]})
    assert response.json() == {"assignments": {"anyone": "green"}}


def test_page_transition__archive_then_back__refused_with_message(staff_client, configured):
    finished = configured["finished"]
    base = f"/admin/assignments/experiment/{finished.pk}/transition"

    staff_client.post(f"{base}/archived/", {"confirm": "yes"})
    refused = staff_client.post(f"{base}/ended/", {"confirm": "yes"}, follow=True)

    assert Experiment.objects.get(pk=finished.pk).status == "archived"
    assert messages_of(refused)[-1] == "finished was not ended: cannot go back from archived to ended."


def test_page_transition__unknown_status__forbidden(staff_client, configured):
    response = staff_client.post(f"/admin/assignments/experiment/{configured['checkout'].pk}/transition/draft/")

    assert response.status_code == 403


@pytest.mark.parametrize("object_id", ["not-a-number", "999999"])
def test_page_transition__no_such_experiment__redirected_with_the_admins_own_does_not_exist_message(
    staff_client, configured, object_id
):
    # Given the answer of the admin's own change page for that ID
    expected = staff_client.get(f"/admin/assignments/experiment/{object_id}/change/", follow=True)

    refused = staff_client.post(
        f"/admin/assignments/experiment/{object_id}/transition/ended/", {"confirm": "yes"}, follow=True
    )

    # Then the transition answers alike: back to the admin's index, saying so, and nothing moved
    assert refused.redirect_chain == expected.redirect_chain == [("/admin/", 302)]
    assert messages_of(refused) == messages_of(expected)
    assert object_id in messages_of(refused)[0] and "Perhaps it was deleted?" in messages_of(refused)[0]
    assert not Experiment.objects.filter(status="ended").exclude(key="finished").exists()


# Experiment health


def test_experiment_page__health__counts_shares_p_value_and_chart(staff_client, configured):
    # Given a balanced split over three days
    checkout = configured["checkout"]
    for days_ago in range(3):
        assign(checkout, "control", 50, days_ago=days_ago)
        assign(checkout, "green", 50, days_ago=days_ago)

    page = staff_client.get(f"/admin/assignments/experiment/{checkout.pk}/change/")

    # Then the panel shows experiment_report's numbers, no mismatch, and a chart with a line per variant
    text = text_of(page)
    report = experiment_report(checkout)
    assert report.assignments == 300
    assert "Health: 300 assignments" in text
    assert f"p = {report.cohorts[0].p_value_text}" in text
    assert text.count("50.00%") == 4  # expected and observed, as percentages like the command's
    assert "today, so far" in page.content.decode()
    assert "no mismatch" in text and 'class="srm-ok"' in page.content.decode()
    svg = re.search(r"<svg[^>]*role=\"img\".*?</svg>", page.content.decode(), re.S).group(0)
    assert svg.count("<polyline") == 2
    assert "control, " in svg and "green, " in svg
    assert 'stroke-dasharray="8 4"' in svg  # told apart by pattern, not colour alone


def test_experiment_page__skewed_split__mismatch_flagged(staff_client, configured):
    checkout = configured["checkout"]
    assign(checkout, "control", 700)
    assign(checkout, "green", 300)

    page = staff_client.get(f"/admin/assignments/experiment/{checkout.pk}/change/")

    assert 'class="srm-alert"' in page.content.decode()
    assert "mismatch: the observed split is unlikely" in text_of(page)


def test_experiment_page__queries__do_not_grow_with_assignments(staff_client, configured):
    checkout = configured["checkout"]
    url = f"/admin/assignments/experiment/{checkout.pk}/change/"
    assign(checkout, "control", 10)
    with CaptureQueriesContext(connection) as few:
        staff_client.get(url)
    for days_ago in range(1, 30):
        assign(checkout, "green", 40, days_ago=days_ago)
    with CaptureQueriesContext(connection) as many:
        staff_client.get(url)

    assert len(many) == len(few)
    assert not any('FROM "assignments_assignment"' in query["sql"] for query in many.captured_queries)


def test_counts__insert_delete_update__match_the_assignments(configured):
    # The triggers keep assignments_assignmentcount equal to counting the rows
    checkout = configured["checkout"]
    assign(checkout, "control", 30, days_ago=1)
    assign(checkout, "green", 20)
    Assignment.objects.filter(subject_id__startswith="s-control-1-1").delete()
    green = Variant.objects.get(experiment=checkout, key="green")
    Assignment.objects.filter(subject_id__in=["s-control-1-2", "s-control-1-3"]).update(variant=green)

    report = experiment_report(checkout)

    counted = {
        variant: Assignment.objects.filter(experiment=checkout, variant__key=variant).count()
        for variant in ("control", "green")
    }
    assert {line.variant_id: line.assignments for line in report.cohorts[0].variants} == counted
    assert counted == {"control": 30 - 11 - 2, "green": 22}
