"""assignments/console/forms/resources.py: the forms of subject types and labs in the admin: names, statuses and
declared attributes, through the apply service, with its rules, into the history."""

from __future__ import annotations

import html

import pytest

from assignments.models import Lab, ResourceChange, SubjectType
from tests.helpers.admin import ATTRIBUTES, edit, errors_of
from tests.helpers.browser import form_fields
from tests.helpers.resources import apply_resources, subject_type


def test_admin_edit__subject_type_and_lab__saved_with_history(staff_client, checkout):
    user = SubjectType.objects.get(key="user")
    lab = Lab.objects.get(key="default")

    assert edit(staff_client, user, name="Logged-in user", status="archived").status_code == 302
    assert edit(staff_client, lab, description="Everything else").status_code == 302

    user.refresh_from_db()
    assert (user.name, user.status, user.resource_version) == ("Logged-in user", "archived", 2)
    assert Lab.objects.get(key="default").description == "Everything else"
    assert ResourceChange.objects.filter(channel="admin").count() == 2


def test_admin_edit__subject_type_with_attributes_saved_unchanged__keeps_them_with_no_history(staff_client, gated):
    user = SubjectType.objects.get(key="user")
    history = ResourceChange.objects.count()

    response = edit(staff_client, user)

    assert response.status_code == 302, errors_of(response)
    assert SubjectType.objects.get(pk=user.pk).attribute_types() == ATTRIBUTES
    assert ResourceChange.objects.count() == history


def attribute_rows(response) -> list:
    return response.context["adminform"].form.attribute_rows.forms


def test_admin_edit__attribute_rows__added_retyped_and_removed_with_history(staff_client, db):
    apply_resources(subject_type("user", attributes={"country": "string", "plan": "string"}))
    user = SubjectType.objects.get(key="user")

    # When staff retype plan, remove country and fill in a blank row
    response = edit(
        staff_client,
        user,
        attributes__0__remove="on",
        attributes__1__type="number",
        attributes__2__name="appVersion",
        attributes__2__type="version",
    )

    # Then the subject type declares exactly that, recorded as their change
    assert response.status_code == 302, errors_of(response)
    user.refresh_from_db()
    assert user.attributes == [{"name": "plan", "type": "number"}, {"name": "appVersion", "type": "version"}]
    change = ResourceChange.objects.filter(kind="subjecttype").latest("resource_version")
    assert (change.actor, change.resource_version) == ("alice", 2)
    assert change.before["spec"]["attributes"][0] == {"name": "country", "type": "string"}


@pytest.mark.parametrize(
    ("changes", "row", "field", "message"),
    [
        ({"attributes__4__name": "seats"}, 4, "type", "pick the attribute's type"),
        ({"attributes__4__type": "number"}, 4, "name", "is required"),
        ({"attributes__4__name": "2fast", "attributes__4__type": "string"}, 4, "name", "must be a name matching"),
        ({"attributes__4__name": "plan", "attributes__4__type": "string"}, 4, "name", "duplicates attribute 'plan'"),
    ],
)
def test_admin_edit__attribute_row_invalid__error_on_that_row_and_nothing_changed(
    staff_client, gated, changes, row, field, message
):
    user = SubjectType.objects.get(key="user")
    before = (SubjectType.objects.get(pk=user.pk).attributes, ResourceChange.objects.count())

    response = edit(staff_client, user, **changes)

    assert response.status_code == 200
    assert any(message in error for error in attribute_rows(response)[row].errors[field])
    assert "Nothing was saved: correct the declared attributes below." in html.unescape(response.content.decode())
    assert (SubjectType.objects.get(pk=user.pk).attributes, ResourceChange.objects.count()) == before


@pytest.mark.parametrize("change", [{"attributes__2__remove": "on"}, {"attributes__2__type": "string"}])
def test_admin_edit__targeted_attribute_removed_or_retyped__refused_naming_the_experiment(staff_client, gated, change):
    user = SubjectType.objects.get(key="user")
    before = SubjectType.objects.get(pk=user.pk).attributes

    response = edit(staff_client, user, **change)

    assert response.status_code == 200
    assert "experiment 'gated' targets it" in response.context["adminform"].form.non_field_errors()[0]
    assert SubjectType.objects.get(pk=user.pk).attributes == before


def test_admin_add__subject_type_with_attributes__created_with_them(staff_client, db):
    page = staff_client.get("/admin/assignments/subjecttype/add/")
    data = form_fields(page.content.decode(), form_id="subjecttype_form")
    data.update({"key": "account", "attributes-0-name": "seats", "attributes-0-type": "number"})

    response = staff_client.post("/admin/assignments/subjecttype/add/", data)

    assert response.status_code == 302, errors_of(response)
    assert SubjectType.objects.get(key="account").attributes == [{"name": "seats", "type": "number"}]
