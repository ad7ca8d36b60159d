"""The staff console's pages: lifecycle actions, experiment health, subject lookup, the big lists."""

from __future__ import annotations

import csv
import html
import io
import os
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assignments.models import Assignment, Experiment, ResourceChange, SubjectType, Variant
from assignments.reports import experiment_report
from tests.factories import AssignmentFactory, ExperimentFactory, IdentifierLinkFactory
from tests.helpers import resources
from tests.helpers.admin import messages_of, text_of, words_of
from tests.helpers.assignments import reference_variant
from tests.helpers.resources import apply_resources

CONFIG = (
    resources.subject_type("user"),
    resources.subject_type("cookie"),
    resources.experiment("checkout"),
    resources.experiment(
        "banner",
        subject_type="cookie",
        variants=[resources.variant("control", 0.5, control=True), resources.variant("wide", 0.5)],
    ),
    resources.experiment("finished", status="ended"),
)


@pytest.fixture
def configured(db) -> dict[str, Experiment]:
    apply_resources(*CONFIG)
    return {experiment.key: experiment for experiment in Experiment.objects.all()}


def variant(experiment: Experiment, key: str = "green") -> Variant:
    return Variant.objects.get(experiment=experiment, key=key)


def assign(experiment: Experiment, variant_key: str, count: int, *, days_ago: int = 0, prefix: str = "s") -> None:
    variant = Variant.objects.get(experiment=experiment, key=variant_key)
    created = timezone.now() - timedelta(days=days_ago)
    Assignment.objects.bulk_create(
        Assignment(
            experiment=experiment,
            subject_id=f"{prefix}-{variant_key}-{days_ago}-{n}",
            variant=variant,
            cohort=1,
            created_at=created,
        )
        for n in range(count)
    )


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


def test_cohorts__splits_shown_as_text_not_json(staff_client, configured):
    page = staff_client.get(f"/admin/assignments/experiment/{configured['checkout'].pk}/change/")

    assert "control&nbsp;<strong>0.5</strong> · green&nbsp;<strong>0.5</strong>" in page.content.decode()
    assert '{"variant"' not in html.unescape(page.content.decode())


def test_resource_page__history__newest_first_with_diff(staff_client, configured):
    named_green = [resources.variant("control", 0.5, control=True), resources.variant("green", 0.5, name="Green")]
    apply_resources(
        *CONFIG[:2],
        resources.experiment("checkout", variants=named_green),
        CONFIG[3],
        resources.experiment("finished", status="ended", variants=named_green),
    )

    page = staff_client.get(f"/admin/assignments/experiment/{configured['checkout'].pk}/change/")

    text = text_of(page)
    assert text.index("version 2") < text.index("version 1")
    assert "+    name: Green" in text


# Subject lookup


def test_subject_lookup__assignments_and_linked_identifiers_with_theirs(staff_client, configured):
    # Given user u-1 in checkout, linked to cookie c-1 (in banner) and, through it, to cookie c-2
    user, cookie = SubjectType.objects.get(key="user"), SubjectType.objects.get(key="cookie")
    a = AssignmentFactory(experiment=configured["checkout"], subject_id="u-1", variant=variant(configured["checkout"]))
    b = AssignmentFactory(experiment=configured["banner"], subject_id="c-1")
    AssignmentFactory(experiment=configured["checkout"], subject_id="U-1")  # another subject: IDs are case-sensitive
    IdentifierLinkFactory(subject_type_a=user, subject_id_a="u-1", subject_type_b=cookie, subject_id_b="c-1")
    IdentifierLinkFactory(subject_type_a=cookie, subject_id_a="c-1", subject_type_b=cookie, subject_id_b="c-2")

    # When staff look up u-1
    page = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1"})

    # Then they see its assignment and its connected identifiers with theirs, each linking to its record
    lookup = page.context["lookup"]
    assert [x.pk for x in lookup.assignments] == [a.pk]
    assert [(x.identifier.subject_id, x.identifier.distance) for x in lookup.linked] == [("c-1", 1), ("c-2", 2)]
    assert [x.pk for x in lookup.linked[0].assignments] == [b.pk]
    content = page.content.decode()
    assert f"/admin/assignments/assignment/{a.pk}/change/" in content
    assert f"/admin/assignments/assignment/{b.pk}/change/" in content
    assert "/admin/idlinks/identifierlink/?q=c-2" in content

    # And with depth 1, only the direct link
    near = staff_client.get(
        "/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1", "depth": "1"}
    )
    assert [x.identifier.subject_id for x in near.context["lookup"].linked] == ["c-1"]


def test_subject_id_with_override_and_line_separator__answered_and_exported_exactly_isolated_on_the_pages(
    api, staff_client, configured
):
    # Given a subject ID holding a right-to-left override and a line separator (no control characters)
    subject = "u\u202e-1\u2028x"

    # When the API assigns it
    response = api.post("/experiment-assignments", {"experiment_id": "checkout", "subject_ids": [subject]})

    # Then it is accepted and answered exactly, and exported exactly
    assert response.status_code == 200
    assert list(response.json()["assignments"]) == [subject]
    exported = io.StringIO()
    call_command("export_assignments", "--experiment", "checkout", stdout=exported)
    assert [row[1] for row in csv.reader(io.StringIO(exported.getvalue(), newline=""))] == ["subject_id", subject]

    # And every page shows it in a <bdi> (besides the lookup form's own input), the page title isolated
    lookup = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": subject})
    listing = staff_client.get("/admin/assignments/assignment/")
    assignment = Assignment.objects.get(subject_id=subject)
    page = staff_client.get(f"/admin/assignments/assignment/{assignment.pk}/change/")
    isolated = f"<bdi>{subject}</bdi>"
    assert f"user: {isolated}</h2>" in lookup.content.decode()
    assert lookup.content.decode().count(subject) == 1 + lookup.content.decode().count(f'value="{subject}"')
    assert listing.content.decode().count(subject) == listing.content.decode().count(isolated) == 1
    assert isolated in page.content.decode()
    assert f"\u2068{subject}\u2069 in checkout: " in page.content.decode()


def test_subject_lookup__bad_depth__form_error(staff_client, configured):
    page = staff_client.get(
        "/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1", "depth": "9"}
    )

    assert page.context["lookup"] is None
    assert "depth" in page.context["form"].errors


def test_subject_lookup__unknown_subject_type__form_error(staff_client, configured):
    page = staff_client.get(
        "/admin/assignments/assignment/lookup/", {"subject_type": "no-such-type", "subject_id": "u-1"}
    )

    assert page.context["lookup"] is None
    assert "subject_type" in page.context["form"].errors


def test_lists__link_to_subject_lookup(staff_client, configured):
    for path in ("/admin/assignments/assignment/", "/admin/idlinks/identifierlink/"):
        assert "/admin/assignments/assignment/lookup/" in staff_client.get(path).content.decode()


# The assignment list


def test_assignment_search__exact_subject_id__finds_only_that_subject(staff_client, configured):
    experiment = configured["checkout"]
    AssignmentFactory(experiment=experiment, subject_id="User-1")
    AssignmentFactory(experiment=experiment, subject_id="user-1")
    AssignmentFactory(experiment=experiment, subject_id="User-10")

    response = staff_client.get("/admin/assignments/assignment/", {"q": "User-1"})

    assert [row.subject_id for row in response.context["cl"].result_list] == ["User-1"]


# On Citus committed between steps, as pages and writes are in production: there one
# transaction cannot both write reference tables on the coordinator and then EXPLAIN the
# shards through other connections. Only there: SQLite's in-memory test database then fails to flush.
@pytest.mark.django_db(transaction=os.environ.get("TEST_CITUS") == "1")
def test_assignment_list__queries__same_for_few_and_many_rows(staff_client, configured):
    assign(configured["checkout"], "control", 3)
    assign(configured["banner"], "wide", 80)
    with CaptureQueriesContext(connection) as few:
        staff_client.get(f"/admin/assignments/assignment/?experiment__id__exact={configured['checkout'].pk}")
    with CaptureQueriesContext(connection) as many:
        staff_client.get(f"/admin/assignments/assignment/?experiment__id__exact={configured['banner'].pk}")

    assert len(many) == len(few)


def test_assignment_page__title_names_experiment_and_variant(staff_client, configured):
    assignment = AssignmentFactory(
        experiment=configured["checkout"], subject_id="u-9", variant=variant(configured["checkout"])
    )

    page = staff_client.get(f"/admin/assignments/assignment/{assignment.pk}/change/")

    # The subject ID isolated (U+2068 ... U+2069), so that no character in it can reorder the rest
    assert "\u2068u-9\u2069 in checkout: green" in text_of(page)


def test_assignments__cannot_be_added_or_deleted_in_the_admin(staff_client, configured):
    assignment = AssignmentFactory(experiment=configured["checkout"])

    assert staff_client.get("/admin/assignments/assignment/add/").status_code == 403
    assert staff_client.post(f"/admin/assignments/assignment/{assignment.pk}/delete/").status_code == 403
    assert Assignment.objects.count() == 1


def test_history_list__every_change_with_its_diff(staff_client, configured):
    apply_resources(*CONFIG[:3], {**CONFIG[3], "metadata": {"id": "banner", "status": "ended"}}, CONFIG[4])
    change = ResourceChange.objects.get(resource_id="banner", resource_version=2)

    listing = staff_client.get("/admin/assignments/resourcechange/", {"q": "banner"})
    page = staff_client.get(f"/admin/assignments/resourcechange/{change.pk}/change/")

    assert [row.resource_version for row in listing.context["cl"].result_list] == [2, 1]
    assert "-  status: active\n+  status: ended" in text_of(page)


def test_assignment_list__filtered_by_experiment__newest_first_by_time(staff_client, configured):
    checkout = configured["checkout"]
    assign(checkout, "control", 2, days_ago=3, prefix="old")
    assign(checkout, "green", 2, days_ago=0, prefix="new")
    assign(configured["banner"], "wide", 2, days_ago=1)

    response = staff_client.get("/admin/assignments/assignment/", {"experiment__id__exact": checkout.pk})

    rows = response.context["cl"].result_list
    assert [row.subject_id.split("-")[0] for row in rows] == ["new", "new", "old", "old"]
    assert str(response.context["cl"].result_list.query).endswith(
        'ORDER BY "assignments_assignment"."created_at" DESC, "assignments_assignment"."id" DESC'
    )


def test_experiment_page__staff_without_view_permission__forbidden_before_the_panel_reads_anything(client, configured):
    # Given a staff user with no permission on experiments, and one who may view them
    outsider = User.objects.create_user("outsider", password="pw", is_staff=True)
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_experiment"))
    url = f"/admin/assignments/experiment/{configured['checkout'].pk}/change/"
    assign(configured["checkout"], "control", 3)

    client.force_login(outsider)
    with CaptureQueriesContext(connection) as refused_queries:
        refused = client.get(url)
    client.force_login(viewer)
    with CaptureQueriesContext(connection) as shown_queries:
        shown = client.get(url)

    # Then the outsider gets 403 and neither the counts nor the history were read; the viewer sees the panel
    def read(queries, table: str) -> bool:
        return any(f'FROM "{table}"' in query["sql"] for query in queries.captured_queries)

    assert refused.status_code == 403
    assert not read(refused_queries, "assignments_assignmentcount")
    assert not read(refused_queries, "assignments_resourcechange")
    assert shown.status_code == 200 and "Health: 3 assignments" in text_of(shown)
    assert read(shown_queries, "assignments_assignmentcount")


def test_experiment_page__staff_who_may_only_view__sees_it_and_cannot_change_it(client, configured):
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_experiment", "view_assignment"]))
    client.force_login(viewer)
    checkout = configured["checkout"]

    page = client.get(f"/admin/assignments/experiment/{checkout.pk}/change/")
    refused = client.post(f"/admin/assignments/experiment/{checkout.pk}/transition/ended/", {"confirm": "yes"})
    lookup = client.post("/admin/assignments/assignment/lookup/?subject_type=user&subject_id=u-1", {})

    assert page.status_code == 200 and "Health: 0 assignments" in text_of(page)
    assert refused.status_code == 403 and lookup.status_code == 403
    assert Experiment.objects.get(pk=checkout.pk).status == "active"


# Who enters: the population rule in words, trying a subject, the gates in the subject lookup

USER_WITH_ATTRIBUTES = resources.subject_type(
    "user", attributes={"country": "string", "plan": "string", "seats": "number"}
)
IN_DE = [{"attribute": "country", "in": ["DE", "AT"]}]


@pytest.fixture
def gated(db) -> Experiment:
    """`user` with attributes, and the active `gated`: country in DE or AT, 100 % coverage, variants control/green."""
    apply_resources(USER_WITH_ATTRIBUTES, resources.experiment("gated", targeting=IN_DE))
    return Experiment.objects.get(key="gated")


def try_subject(client, experiment: Experiment, subject_id: str, attributes: str = ""):
    return client.post(
        f"/admin/assignments/experiment/{experiment.pk}/try/", {"subject_id": subject_id, "attributes": attributes}
    )


def test_experiment_page__population_rule__in_words_at_the_top_and_for_each_cohort(staff_client, gated):
    # Given the active experiment's gates changed once (cohort 2)
    window = {"startAt": "2026-12-01T09:00:00+01:00", "stopAt": "2027-01-15T00:00:00+01:00"}
    apply_resources(
        USER_WITH_ATTRIBUTES, resources.experiment("gated", targeting=IN_DE, coverage=0.2, enrollment=window)
    )

    page = staff_client.get(f"/admin/assignments/experiment/{gated.pk}/change/")

    # Then the page opens with the current rule, and each cohort states its own
    now = "20 % of users with country in [DE, AT], between 2026-12-01 08:00 UTC and 2027-01-14 23:00 UTC"
    content = html.unescape(page.content.decode())
    assert f"<strong>Who may enter now:</strong> {now}." in content
    cohorts = re.findall(r'<td class="field-population_line">\s*<p>(.*?)</p>', content)
    assert cohorts == ["every user with country in [DE, AT]", now]


def test_try_a_subject__targeted__its_variant_said_and_nothing_stored(staff_client, gated):
    page = staff_client.get(f"/admin/assignments/experiment/{gated.pk}/change/")
    assert f'method="post" action="/admin/assignments/experiment/{gated.pk}/try/"' in page.content.decode()

    response = try_subject(staff_client, gated, "u-1", "country=DE")

    preview = response.context["preview"]
    expected = reference_variant("gated", "u-1", [("control", 0.5), ("green", 0.5)])
    assert (preview.answer, preview.reason) == (expected, None)
    assert f"Enters with {expected} (source hashed, cohort 1)" in text_of(response)
    assert not Assignment.objects.exists()


@pytest.mark.parametrize(
    ("attributes", "reason", "words"),
    [
        ("", "attributes_missing", "the targeting needs attributes that were not sent"),
        ("country=FR\nseats=3", "not_targeted", "the attributes sent do not meet the targeting"),
        ('{"country": "CH"}', "not_targeted", "the attributes sent do not meet the targeting"),
    ],
)
def test_try_a_subject__not_targeted__reason_code_and_words_and_the_control(
    staff_client, gated, attributes, reason, words
):
    response = try_subject(staff_client, gated, "u-1", attributes)

    text = words_of(response)
    assert f"{reason} · Excluded ({reason}): {words}. The API answers the control, control; nothing is stored." in text
    assert not Assignment.objects.exists()


def test_try_a_subject__stored_assignment__shown_whatever_the_attributes(staff_client, gated):
    stored = AssignmentFactory(experiment=gated, subject_id="u-1", variant=variant(gated))

    response = try_subject(staff_client, gated, "u-1", "country=FR")

    assert response.context["preview"].answer == "green"
    assert "Its stored assignment, green, is the answer" in text_of(response)
    assert f"/admin/assignments/assignment/{stored.pk}/change/" in response.content.decode()


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ("seats=ten", "line 1: seats: is a number attribute: 'ten' is not a number"),
        ("country", "line 1: write name=value"),
        ("plan=pro\nplan=team", "line 2: plan is given twice"),
        ('{"seats": "12"}', "seats: must be a number, as the subject type declares"),
        ('{"country": ["DE"]}', "country: must be a string, a finite number or a boolean"),
        ('{"country": "DE"', "not a valid JSON object"),
        ("2fast=yes", "2fast: names must match"),
    ],
)
def test_try_a_subject__attributes_malformed__form_error_and_no_decision(staff_client, gated, attributes, message):
    response = try_subject(staff_client, gated, "u-1", attributes)

    assert response.context["preview"] is None
    assert any(message in error for error in response.context["try_form"].errors["attributes"])


def test_try_a_subject__typed_by_the_declarations__numbers_and_strings_as_declared(staff_client, db):
    apply_resources(
        USER_WITH_ATTRIBUTES,
        resources.experiment(
            "gated", targeting=[{"attribute": "seats", "gte": 10}, {"attribute": "plan", "equals": "10"}]
        ),
    )
    gated = Experiment.objects.get(key="gated")

    response = try_subject(staff_client, gated, "u-1", " seats = 12 \nplan=10")

    assert response.context["preview"].reason is None


def test_try_a_subject__staff_who_may_only_view__may_try_and_anonymous_may_not(client, gated):
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_experiment"))

    anonymous = try_subject(client, gated, "u-1")
    client.force_login(viewer)
    viewed = try_subject(client, gated, "u-1", "country=AT")

    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    assert viewed.status_code == 200 and viewed.context["preview"].reason is None


def test_subject_lookup__running_experiments__stored_decided_or_depending_on_attributes(staff_client, db):
    # Given experiments of every kind on user, and u-1 stored in one of them
    past = "2026-01-01T00:00:00Z"
    apply_resources(
        USER_WITH_ATTRIBUTES,
        resources.experiment("a-stored", coverage=0.0),
        resources.experiment("b-closed", enrollment={"stopAt": past}, targeting=IN_DE),
        resources.experiment("c-targeted", targeting=[*IN_DE, {"attribute": "plan", "exists": True}]),
        resources.experiment("d-nobody", coverage=0.0),
        resources.experiment("e-winner", status="winner_declared", winning_variant="green"),
        resources.experiment("f-ended", status="ended"),
        resources.experiment("g-draft", status="draft"),
    )
    stored = Experiment.objects.get(key="a-stored")
    AssignmentFactory(experiment=stored, subject_id="u-1", variant=variant(stored))

    # When staff look up u-1
    page = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": "u-1"})

    # Then each running experiment says what it would answer, and why
    previews = page.context["previews"]
    assert [(p.experiment.key, p.answer, p.reason, p.depends_on) for p in previews] == [
        ("a-stored", "green", None, ()),
        ("b-closed", "control", "enrollment_closed", ()),
        ("c-targeted", None, None, ("country", "plan")),
        ("d-nobody", "control", "outside_coverage", ()),
        ("e-winner", "green", None, ()),
    ]
    text = text_of(page)
    assert "depends on attributes: country, plan" in text
    assert "its enrollment window has closed: it closed at 2026-01-01 00:00 UTC" in text
    assert not Assignment.objects.exclude(experiment=stored).exists()
