"""assignments/console/admin/experiments.py: the experiment pages: the cohorts, who may see and change them,
the population rule in words and "try a subject"."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.models import Assignment, Experiment
from tests.factories import AssignmentFactory
from tests.helpers import resources
from tests.helpers.admin import IN_DE, USER_WITH_ATTRIBUTES, assign, text_of, variant, words_of
from tests.helpers.assignments import reference_variant
from tests.helpers.resources import apply_resources


def test_cohorts__splits_shown_as_text_not_json(staff_client, configured):
    page = staff_client.get(f"/admin/assignments/experiment/{configured['checkout'].pk}/change/")

    assert "control&nbsp;<strong>0.5</strong> · green&nbsp;<strong>0.5</strong>" in page.content.decode()
    assert '{"variant"' not in html.unescape(page.content.decode())


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


# Who enters: the population rule in words, trying a subject


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


# Variant values


def valued_experiment(key: str, value_type: str, values: list) -> Experiment:
    document = resources.experiment(key)
    document["spec"]["valueType"] = value_type
    for variant_document, value in zip(document["spec"]["variants"], values, strict=True):
        variant_document["value"] = value
    apply_resources(resources.subject_type("user"), document)
    return Experiment.objects.get(key=key)


def test_experiment_page__staff_who_may_only_view__see_each_value_objects_as_compact_json(client, db):
    button = valued_experiment("button", "object", [{"label": "Buy"}, {"style": {"color": "#00aa00", "dark": None}}])
    price = valued_experiment("price", "float", [1, 2.5])
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_experiment", "view_variant"]))
    client.force_login(viewer)

    def values_shown(experiment: Experiment) -> list[str]:
        content = html.unescape(client.get(f"/admin/assignments/experiment/{experiment.pk}/change/").content.decode())
        return [" ".join(cell.split()) for cell in re.findall(r'<td class="field-value_text">\s*<p>(.*?)</p>', content)]

    # Compact JSON, the keys in the database's order (PostgreSQL's jsonb sorts them shortest first)
    style = json.dumps(variant(button).value["style"], separators=(",", ":"))
    assert values_shown(button) == ['{"label":"Buy"}', f'{{"style":{style}}}']
    assert sorted(variant(button).value["style"]) == ["color", "dark"]
    assert values_shown(price) == ["1.0", "2.5"]


def test_experiment_page__value_changed__value_type_shown_and_the_history_diff_shows_the_value(staff_client, db):
    button = valued_experiment("button", "string", ["Buy", "Buy now"])
    valued_experiment("button", "string", ["Buy", "Buy it"])

    page = staff_client.get(f"/admin/assignments/experiment/{button.pk}/change/")

    content = html.unescape(page.content.decode())
    assert '<option value="string" selected>String</option>' in content
    assert "-    value: Buy now\n+    value: Buy it" in content
