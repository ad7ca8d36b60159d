"""assignments/console/admin/layers.py: layers in the staff console: the layer's page with its slots, and an
experiment's layer and slots on its page."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.configuration.export import resource_document
from assignments.models import Cohort, Experiment, Layer, ResourceChange
from tests.factories import AssignmentFactory
from tests.helpers.admin import assert_field_error, edit, errors_of, inline_text, table_rows, text_of, words_of
from tests.helpers.assignments import reference_slot
from tests.helpers.browser import form_fields
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

    assert_field_error(response, field, message)
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


# The layer's page


def layer_url(key: str, page: str = "change") -> str:
    return f"/admin/assignments/layer/{Layer.objects.get(key=key).pk}/{page}/"


def test_layer_page__slots__bar_legend_and_table_of_owners_now_and_before(staff_client, checkout_flow):
    # Given the layer's experiments: button [0, 2500] and copy [2500, 5000] active, an ended one that owned
    # [4000, 7000], and a draft that wants [6000, 7000]
    apply_resources(
        USER,
        experiment("old-copy", status="ended", layer=in_layer("checkout-flow", [4000, 7000])),
        experiment("next", status="draft", layer=in_layer("checkout-flow", [4500, 5500])),
    )

    page = staff_client.get(layer_url("checkout-flow"))

    # Then the page says how many slots are owned, draws them, and lists the same facts as a table
    text = words_of(page)
    assert "Slots: 5,000 of 10,000 owned by 2 active experiments, 5,000 free" in text
    svg = re.search(r'<svg[^>]*role="img".*?</svg>', page.content.decode(), re.S).group(0)
    assert "<title>The 10,000 slots of layer checkout-flow</title>" in svg
    assert "button (active): slots 0 to 2499, 25 %" in svg
    assert "old-copy (ended): slots 4000 to 6999, 30 %" in svg
    assert 'stroke-dasharray="4 3"' in svg  # the draft, told apart by its outline, not colour alone
    rows = table_rows(page, "slot-runs")
    assert rows == [
        ["0 to 2499", "25 %", "button (active)", "none"],
        ["2500 to 3999", "15 %", "copy (active)", "none"],
        ["4000 to 4999", "10 %", "copy (active)", "old-copy (ended)"],
        ["5000 to 6999", "20 %", "free", "old-copy (ended)"],
        ["7000 to 9999", "30 %", "free", "none"],
    ]
    assert table_rows(page, "slot-drafts") == [
        ["next", "4500 to 5499", "refused while active experiment copy owns slots 4500 to 4999"]
    ]
    # And each owner links to its page, where its slots are edited
    copy = checkout_flow["copy"]
    assert f'href="/admin/assignments/experiment/{copy.pk}/change/"' in page.content.decode()


def test_layer_page__queries__do_not_grow_with_its_experiments(staff_client, checkout_flow):
    with CaptureQueriesContext(connection) as two:
        staff_client.get(layer_url("checkout-flow"))
    apply_resources(
        USER,
        *(experiment(f"tour-{n}", layer=in_layer("checkout-flow", [5000 + n * 100, 5100 + n * 100])) for n in range(6)),
    )
    with CaptureQueriesContext(connection) as eight:
        staff_client.get(layer_url("checkout-flow"))

    assert len(eight) == len(two)


def test_layer_add__through_the_service__created_with_history_by_staff(staff_client, db):
    apply_resources(USER)
    page = staff_client.get("/admin/assignments/layer/add/")
    data = {**form_fields(page.content.decode(), form_id="layer_form"), "key": "Checkout", "subject_type": "user"}

    response = staff_client.post("/admin/assignments/layer/add/", data)

    assert response.status_code == 302, errors_of(response)
    created = Layer.objects.get(key="Checkout")
    assert (created.name, created.salt, created.subject_type.key) == ("Checkout", "checkout", "user")
    change = ResourceChange.objects.get(kind="layer", resource_id="Checkout")
    assert (change.before, change.actor, change.channel, change.resource_version) == (None, "alice", "admin", 1)


def test_layer_edit__name_and_salt__saved_with_history_and_its_page_shows_it(staff_client, checkout_flow):
    flow = Layer.objects.get(key="checkout-flow")

    response = edit(staff_client, flow, name="Checkout flow", salt="checkout-flow-2026")

    assert response.status_code == 302, errors_of(response)
    flow.refresh_from_db()
    assert (flow.name, flow.salt, flow.resource_version) == ("Checkout flow", "checkout-flow-2026", 2)
    page = staff_client.get(layer_url("checkout-flow"))
    assert "+  salt: checkout-flow-2026" in text_of(page)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"salt": "Button"}, "salt", "salt 'Button' is the salt of experiment 'button' already"),
        ({"subject_type": "device"}, "subject_type", "experiment 'button' of the layer is of subject type 'user'"),
        ({"salt": "x\ty"}, "salt", "must not contain control characters"),
    ],
)
def test_layer_edit__rule_broken__error_on_the_field_and_nothing_changed(
    staff_client, checkout_flow, changes, field, message
):
    apply_resources(subject_type("device"))
    flow = Layer.objects.get(key="checkout-flow")
    before = (resource_document(flow), ResourceChange.objects.count())

    response = edit(staff_client, flow, **changes)

    assert_field_error(response, field, message)
    assert (resource_document(Layer.objects.get(pk=flow.pk)), ResourceChange.objects.count()) == before


def test_layer_edit__salt_once_the_layer_drew_slots__refused(staff_client, checkout_flow):
    AssignmentFactory(experiment=checkout_flow["button"])

    response = edit(staff_client, Layer.objects.get(key="checkout-flow"), salt="another")

    assert (
        "cannot change once an experiment of the layer has assignments"
        in (response.context["adminform"].form.errors["salt"][0])
    )


def test_layer__cannot_be_deleted_in_the_admin(staff_client, checkout_flow):
    flow = Layer.objects.get(key="checkout-flow")

    page = staff_client.get(layer_url("checkout-flow", "delete"))
    listing = staff_client.post(
        "/admin/assignments/layer/", {"action": "delete_selected", "_selected_action": [flow.pk]}
    )

    assert page.status_code == 403
    assert listing.status_code in (200, 302)
    assert Layer.objects.filter(pk=flow.pk).exists()


# A subject's slots: the lookup and "try a subject"


def test_subject_lookup__layers_of_its_type__its_slot_and_who_owns_it_now(staff_client, checkout_flow):
    apply_resources(USER, layer("empty"))
    subject_id = next(f"u-{n}" for n in range(100) if 2500 <= reference_slot("checkout-flow", f"u-{n}") < 5000)

    page = staff_client.get("/admin/assignments/assignment/lookup/", {"subject_type": "user", "subject_id": subject_id})

    assert table_rows(page, "layer-slots") == [
        ["checkout-flow", str(reference_slot("checkout-flow", subject_id)), "copy (active)"],
        ["empty", str(reference_slot("empty", subject_id)), "no active experiment: free"],
    ]
    previews = {preview.experiment.key: preview for preview in page.context["previews"]}
    assert (previews["copy"].reason, previews["button"].reason) == (None, "layer_excluded")
    assert "active experiment copy owns it" in previews["button"].summary


def test_try_a_subject__in_a_layer__its_slot_and_the_gate_as_the_api_answers(staff_client, checkout_flow, api):
    button = checkout_flow["button"]
    subject_id = next(f"u-{n}" for n in range(100) if reference_slot("checkout-flow", f"u-{n}") >= 5000)

    response = staff_client.post(f"/admin/assignments/experiment/{button.pk}/try/", {"subject_id": subject_id})

    preview = response.context["preview"]
    slot = reference_slot("checkout-flow", subject_id)
    assert (preview.answer, preview.reason, preview.slot.slot) == ("control", "layer_excluded", slot)
    assert f"Its slot of layer checkout-flow: {slot}, owned by no active experiment." in inline_text(
        response.content.decode()
    )
    answered = api.post("/experiment-assignments", {"experiment_id": "button", "subject_ids": [subject_id]})
    assert answered.json()["excluded"] == {subject_id: "layer_excluded"}


def test_experiment_list__filtered_by_layer__its_experiments_with_their_layer(staff_client, checkout_flow):
    apply_resources(USER, experiment("elsewhere"))
    flow = Layer.objects.get(key="checkout-flow")

    everyone = staff_client.get("/admin/assignments/experiment/")
    in_flow = staff_client.get("/admin/assignments/experiment/", {"layer__id__exact": flow.pk})

    assert sorted(row.key for row in everyone.context["cl"].result_list) == ["button", "copy", "elsewhere"]
    assert sorted(row.key for row in in_flow.context["cl"].result_list) == ["button", "copy"]
    assert re.findall(r'<td class="field-layer[^"]*">([^<]*)</td>', in_flow.content.decode()) == ["checkout-flow"] * 2
