"""assignments/console/forms/experiments.py: staff edit experiments in the admin, their variants and gates, through
the apply service, with its rules, into the history; and what every resource form shares
(assignments/console/forms/resources.py's ResourceForm), as the experiment's form shows it."""

from __future__ import annotations

import html
import io
import json

import pytest
import yaml
from django.core.management import call_command

from assignments.configuration.export import resource_document
from assignments.models import Cohort, Experiment, ResourceChange, SubjectType, Variant
from tests.factories import AssignmentFactory
from tests.helpers.admin import ATTRIBUTES, GATED, apply_experiment, assert_field_error, change_url, edit, errors_of
from tests.helpers.browser import form_fields
from tests.helpers.resources import apply_resources, experiment, split_variants, subject_type


def stored(experiment: Experiment) -> tuple:
    experiment = Experiment.objects.get(pk=experiment.pk)
    return (
        resource_document(experiment),
        list(Cohort.objects.filter(experiment=experiment).values_list("number", "splits")),
        ResourceChange.objects.count(),
    )


def test_admin_edit__split_change_while_active__new_cohort_and_history_entry_by_staff(staff_client, checkout):
    # When staff move the split to 30/70 in the admin
    response = edit(staff_client, checkout, variants__0__split="0.3", variants__1__split="0.7")

    # Then it is saved, as the next cohort, with a history entry naming them
    assert response.status_code == 302, errors_of(response)
    checkout.refresh_from_db()
    assert checkout.resource_version == 2
    assert list(Cohort.objects.filter(experiment=checkout).values_list("number", flat=True)) == [1, 2]
    change = ResourceChange.objects.filter(kind="experiment").latest("resource_version")
    assert (change.actor, change.channel, change.resource_version) == ("alice", "admin", 2)
    assert change.before["spec"]["variants"][0]["split"] == 0.5
    assert change.after["spec"]["variants"][0]["split"] == 0.3


def test_admin_edit__follow_links_ticked__saved_with_history_by_staff(staff_client, checkout):
    # When staff tick "Follow identifier links"
    response = edit(staff_client, checkout, follow_links="on")

    # Then the experiment follows links from now on, and the history says who switched it
    assert response.status_code == 302, errors_of(response)
    checkout.refresh_from_db()
    assert (checkout.follow_links, checkout.resource_version) == (True, 2)
    change = ResourceChange.objects.filter(kind="experiment").latest("resource_version")
    assert (change.actor, change.before["spec"]["followLinks"], change.after["spec"]["followLinks"]) == (
        "alice",
        False,
        True,
    )
    # And unticking it switches it back
    assert edit(staff_client, checkout, follow_links=None).status_code == 302
    checkout.refresh_from_db()
    assert (checkout.follow_links, checkout.resource_version) == (False, 3)


def test_admin_edit__same_change_as_yaml__identical_stored_results(staff_client, db):
    # Given two identical experiments
    apply_experiment("by-admin")
    apply_experiment("by-yaml")
    by_admin, by_yaml = Experiment.objects.get(key="by-admin"), Experiment.objects.get(key="by-yaml")

    # When one gets a third variant and a new name in the admin, the other the same change in YAML
    response = edit(
        staff_client,
        by_admin,
        name="Button colour",
        variants__0__split="0.4",
        variants__1__split="0.3",
        variants__2__key="blue",
        variants__2__split="0.3",
    )
    assert response.status_code == 302, errors_of(response)
    apply_experiment(
        "by-yaml",
        name="Button colour",
        variants=split_variants([("control", 0.4), ("green", 0.3), ("blue", 0.3)]),
    )

    # Then both store the same document, cohorts and versions (but for their IDs)
    def comparable(experiment: Experiment) -> tuple:
        document, cohorts, _ = stored(experiment)
        document["metadata"].pop("id")
        document["spec"].pop("salt")
        return document, cohorts

    assert comparable(by_admin) == comparable(by_yaml)
    assert [v.key for v in Variant.objects.filter(experiment=by_admin)] == ["control", "green", "blue"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"variants__0__split": "0.6"}, "splits must sum to 1, they sum to 1.1"),
        ({"variants__0__split": "1.5", "variants__1__split": "-0.5"}, "must be between 0 and 1"),
        ({"variants__1__is_control": "on"}, "exactly one variant must have control: true, found 2"),
        ({"variants__0__is_control": None}, "exactly one variant must have control: true, found 0"),
        ({"status": "draft"}, "cannot go back from active to draft"),
        ({"winning_variant": "green"}, "is allowed only when status is winner_declared"),
        ({"status": "winner_declared"}, "is required when status is winner_declared"),
        ({"status": "winner_declared", "winning_variant": "purple"}, "names no variant of this experiment"),
        ({"variants__1__key": "CONTROL"}, "duplicates variant"),
        ({"variants__1__key": "bad id!"}, "must match"),
        ({"salt": "other-salt"}, "cannot change once the experiment has assignments"),
        ({"subject_type": "device"}, "cannot change once the experiment has assignments"),
        (
            {"variants__1__remove": "on", "variants__2__key": "blue", "variants__2__split": "0.5"},
            "'green' has assignments and cannot be removed",
        ),
    ],
)
def test_admin_edit__rule_broken__error_shown_and_nothing_changed(staff_client, checkout, changes, message):
    # Given an active experiment with an assignment to each variant
    for variant in Variant.objects.filter(experiment=checkout):
        AssignmentFactory(experiment=checkout, variant=variant)
    before = stored(checkout)

    # When staff submit an edit that breaks a rule
    response = edit(staff_client, checkout, **changes)

    # Then the form comes back with the rule's message, and nothing changed
    assert response.status_code == 200
    assert message in html.unescape(response.content.decode()), errors_of(response)
    assert stored(checkout) == before


def test_admin_edit__broken_rule__error_is_on_the_field(staff_client, checkout):
    backwards = edit(staff_client, checkout, status="draft")
    response = edit(staff_client, checkout, variants__1__split="2", variants__0__split="-1")

    assert backwards.context["adminform"].form.errors["status"] == ["cannot go back from active to draft"]
    variant_forms = response.context["inline_admin_formsets"][0].formset.forms
    assert variant_forms[0].errors["split"] == ["must be between 0 and 1"]
    assert variant_forms[1].errors["split"] == ["must be between 0 and 1"]


def test_admin_edit__control_characters_in_free_text__error_on_each_field_and_nothing_changed(staff_client, checkout):
    before = stored(checkout)

    response = edit(
        staff_client, checkout, description="clear\x1b[2J", hypothesis="bell\x07", variants__1__name="a\x85b"
    )

    # Then the service's rule is on each field (a NUL is refused by Django's own form field first)
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["description"] == [
        "must not contain control characters other than tab and line breaks: U+001B at character 6 "
        "(invisible where the text is shown)"
    ]
    assert "U+0007 at character 5" in form.errors["hypothesis"][0]
    assert "U+0085 at character 2" in response.context["inline_admin_formsets"][0].formset.forms[1].errors["name"][0]
    assert stored(checkout) == before


def test_admin_edit__line_breaks_typed_in_a_text_area__saved_exactly(staff_client, checkout):
    response = edit(staff_client, checkout, description="one\r\ntwo\tcolumns")

    assert response.status_code == 302, errors_of(response)
    assert Experiment.objects.get(pk=checkout.pk).description == "one\r\ntwo\tcolumns"


def test_admin_edit__unchanged_submit__no_history_entry(staff_client, checkout):
    before = stored(checkout)

    response = edit(staff_client, checkout)

    assert response.status_code == 302
    assert stored(checkout) == before


def test_admin_add__experiment_with_variants__created_with_cohort_1_and_history(staff_client, checkout):
    page = staff_client.get("/admin/assignments/experiment/add/")
    data = form_fields(page.content.decode(), form_id="experiment_form")
    data.update(
        {
            "key": "Pricing",
            "status": "active",
            "subject_type": "user",
            "variants-0-key": "control",
            "variants-0-is_control": "on",
            "variants-0-split": "0.5",
            "variants-TOTAL_FORMS": "2",
            "variants-1-key": "cheaper",
            "variants-1-split": "0.5",
        }
    )

    response = staff_client.post("/admin/assignments/experiment/add/", data)

    assert response.status_code == 302, errors_of(response)
    pricing = Experiment.objects.get(key="Pricing")
    assert (pricing.name, pricing.salt, pricing.lab.key, pricing.status) == ("Pricing", "pricing", "default", "active")
    assert Cohort.objects.get(experiment=pricing).splits == [
        {"variant": "control", "split": 0.5},
        {"variant": "cheaper", "split": 0.5},
    ]
    change = ResourceChange.objects.get(kind="experiment", resource_id="Pricing")
    assert (change.before, change.actor, change.resource_version) == (None, "alice", 1)


def test_admin_add__id_taken_ignoring_case__error_on_id_and_nothing_changed(staff_client, checkout):
    before = stored(checkout)
    page = staff_client.get("/admin/assignments/subjecttype/add/")
    data = {**form_fields(page.content.decode(), form_id="subjecttype_form"), "key": "USER", "name": "Users"}

    response = staff_client.post("/admin/assignments/subjecttype/add/", data)

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["key"] == ["a subjecttype 'user' exists (IDs ignore case)"]
    assert SubjectType.objects.get(key="user").name == "user"
    assert stored(checkout) == before


def test_admin_change_page__id_cannot_be_renamed(staff_client, checkout):
    response = edit(staff_client, checkout, key="renamed", name="New name")

    assert response.status_code == 302
    assert list(Experiment.objects.values_list("key", "name")) == [("checkout", "New name")]


def test_export_after_admin_edits__applies_with_only_unchanged(staff_client, checkout, tmp_path):
    # Given edits of every kind in the admin
    edit(staff_client, checkout, variants__0__split="0.25", variants__1__split="0.75", hypothesis="Line one\nline two")
    edit(staff_client, SubjectType.objects.get(key="device"), description="Phones and tablets")

    # When the configuration is exported and applied again
    exported = io.StringIO()
    call_command("export_resources", stdout=exported)
    path = tmp_path / "export.yaml"
    path.write_text(exported.getvalue(), encoding="utf-8")
    applied = io.StringIO()
    call_command("apply_resources", str(path), stdout=applied)

    # Then every resource is unchanged
    lines = applied.getvalue().splitlines()
    assert lines and all(line.endswith(": unchanged") for line in lines), lines
    assert len(list(yaml.safe_load_all(exported.getvalue()))) == len(lines)


def test_admin__delete__not_offered_for_configuration(staff_client, checkout):
    response = staff_client.get(f"/admin/assignments/experiment/{checkout.pk}/delete/")

    assert response.status_code == 403


def test_admin_edit__page_opened_before_another_change__refused_and_that_change_kept(staff_client, checkout):
    # Given staff opened the page, and the experiment then changed in YAML
    page = staff_client.get(change_url(checkout))
    data = form_fields(page.content.decode(), form_id="experiment_form")
    apply_experiment("checkout", hypothesis="Green sells much more")
    before = stored(checkout)

    # When they save their edit of the page they opened
    response = staff_client.post(change_url(checkout), {**data, "name": "Mine"})

    # Then it is refused, naming why, and the other change stands
    assert response.status_code == 200
    assert "changed by someone else since version 1 was read (now version 2)" in html.unescape(
        response.content.decode()
    )
    assert stored(checkout) == before
    assert Experiment.objects.get(pk=checkout.pk).hypothesis == "Green sells much more"


# --- the gates: enrollment window, targeting, coverage ---


def test_admin_edit__gated_experiment_saved_unchanged__keeps_its_gates_with_no_cohort_or_history(staff_client, gated):
    before = stored(gated)

    response = edit(staff_client, gated)

    assert response.status_code == 302, errors_of(response)
    assert stored(gated) == before
    assert resource_document(Experiment.objects.get(pk=gated.pk))["spec"]["coverage"] == 0.2


def cohorts_of(experiment: Experiment) -> list[tuple[int, dict]]:
    return list(Cohort.objects.filter(experiment=experiment).values_list("number", "population"))


def test_admin_edit__gated_experiment_page__gates_shown_as_yaml_and_utc_times(staff_client, gated):
    fields = form_fields(staff_client.get(change_url(gated)).content.decode(), form_id="experiment_form")

    assert (fields["enrollment_start_at"], fields["enrollment_stop_at"]) == (
        "2026-12-01T08:00:00Z",
        "2027-01-14T23:00:00Z",
    )
    assert fields["targeting"] == (
        "- {attribute: country, in: [DE, AT]}\n"
        "- anyOf:\n"
        "    - {attribute: plan, equals: pro}\n"
        "    - {attribute: seats, gte: 10}"
    )
    assert fields["coverage"] == "0.2"


def test_admin_edit__gates_changed_while_active__next_cohort_with_its_population_and_history(staff_client, gated):
    # When staff move the window, add a version condition and raise the coverage
    response = edit(
        staff_client,
        gated,
        enrollment_start_at="2026-12-02T00:00:00+01:00",
        enrollment_stop_at="",
        targeting="- {attribute: appVersion, gte: '2.3'}\n- {attribute: plan, exists: false}",
        coverage="0.5",
    )

    # Then the experiment has them, as cohort 2, recorded as their change
    assert response.status_code == 302, errors_of(response)
    population = {
        "enrollment": {"startAt": "2026-12-01T23:00:00Z"},
        "targeting": [{"attribute": "appVersion", "gte": "2.3"}, {"attribute": "plan", "exists": False}],
        "coverage": 0.5,
    }
    assert cohorts_of(gated) == [
        (1, {**GATED, "enrollment": {"startAt": "2026-12-01T08:00:00Z", "stopAt": "2027-01-14T23:00:00Z"}}),
        (2, population),
    ]
    change = ResourceChange.objects.filter(kind="experiment").latest("resource_version")
    assert (change.actor, change.resource_version, change.after["spec"]["coverage"]) == ("alice", 2, 0.5)


def test_admin_edit__targeting_cleared__everyone_targeted_as_in_yaml(staff_client, gated):
    response = edit(staff_client, gated, targeting="")

    assert response.status_code == 302, errors_of(response)
    gated.refresh_from_db()
    assert gated.targeting is None
    assert "targeting" not in cohorts_of(gated)[-1][1]


def test_admin_edit__same_gates_as_yaml__identical_stored_results(staff_client, gated):
    apply_resources(subject_type("user", attributes=ATTRIBUTES), experiment("by-yaml", **GATED))
    by_yaml = Experiment.objects.get(key="by-yaml")

    edit(staff_client, gated, targeting="- {attribute: plan, in: [pro, team]}", coverage="0.3")
    apply_resources(
        subject_type("user", attributes=ATTRIBUTES),
        experiment(
            "by-yaml", **{**GATED, "targeting": [{"attribute": "plan", "in": ["pro", "team"]}], "coverage": 0.3}
        ),
    )

    def comparable(experiment: Experiment) -> tuple:
        document = resource_document(Experiment.objects.get(pk=experiment.pk))
        for metadata in ("id", "name"):
            document["metadata"].pop(metadata)
        document["spec"].pop("salt")
        return document, cohorts_of(experiment)

    assert comparable(gated) == comparable(by_yaml)


def test_admin_edit__coverage_lowered_while_active__refused_until_confirmed_then_next_cohort(staff_client, gated):
    before = stored(gated)

    # When staff lower the coverage from 20 % to 10 % of the active experiment
    asked = edit(staff_client, gated, coverage="0.1")

    # Then nothing is saved yet: the coverage field says what it does, beside a box to confirm it
    assert asked.status_code == 200
    (message,) = asked.context["adminform"].form.errors["coverage"]
    assert message.startswith(
        "Lowering the coverage from 20 % to 10 % while the experiment is active starts a new cohort"
    )
    assert "Yes, lower the coverage" in message
    assert 'type="checkbox" name="confirm_coverage"' in asked.content.decode()
    assert stored(gated) == before

    # When they tick it and save the page again
    fields = form_fields(asked.content.decode(), form_id="experiment_form")
    confirmed = staff_client.post(change_url(gated), {**fields, "confirm_coverage": "on"})

    # Then it is saved, as the next cohort
    assert confirmed.status_code == 302, errors_of(confirmed)
    assert [(number, population["coverage"]) for number, population in cohorts_of(gated)] == [(1, 0.2), (2, 0.1)]


@pytest.mark.parametrize(("status", "coverage"), [("draft", "0.1"), ("active", "0.9")])
def test_admin_edit__coverage_lowered_on_a_draft_or_raised__saved_without_confirmation(staff_client, status, coverage):
    apply_resources(subject_type("user", attributes=ATTRIBUTES), experiment("gated", status=status, **GATED))
    gated = Experiment.objects.get(key="gated")

    response = edit(staff_client, gated, coverage=coverage)

    assert response.status_code == 302, errors_of(response)
    assert Experiment.objects.get(pk=gated.pk).coverage == float(coverage)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"targeting": "- {attribute: country, in: [DE"}, "targeting", "not valid YAML: "),
        ({"targeting": "attribute: country"}, "targeting", "must be a list of 1 to 20 conditions"),
        (
            {"targeting": "- {attribute: city, equals: Paris}"},
            "targeting",
            "condition 1, attribute: names no attribute the subject type declares: 'city'",
        ),
        (
            {"targeting": "- {attribute: country, in: [DE]}\n- anyOf:\n    - {attribute: plan, gt: pro}"},
            "targeting",
            "condition 2, its anyOf condition 1, gt: cannot be used with string attribute 'plan'",
        ),
        (
            {"targeting": "- {attribute: seats, in: [1, ten]}"},
            "targeting",
            "condition 1, in item 2: must be a number: 'seats' is a number attribute",
        ),
        (
            {"targeting": "- {attribute: appVersion, gte: 2.3}"},
            "targeting",
            "condition 1, gte: must be a version",
        ),
        ({"enrollment_start_at": "2026-12-01T09:00:00"}, "enrollment_start_at", "needs an offset"),
        ({"enrollment_start_at": "tomorrow"}, "enrollment_start_at", "must be an ISO 8601 time with an offset"),
        ({"enrollment_stop_at": "2026-11-01T00:00:00Z"}, "enrollment_stop_at", "must be after startAt"),
        ({"coverage": "1.5"}, "coverage", "must be a number from 0 to 1"),
        ({"coverage": "20%"}, "coverage", "Enter a number."),
    ],
)
def test_admin_edit__gate_invalid__error_on_its_field_and_nothing_changed(staff_client, gated, changes, field, message):
    before = stored(gated)

    response = edit(staff_client, gated, **changes)

    assert_field_error(response, field, message)
    assert stored(gated) == before


# --- variant values: the value type, bulk evaluation and each variant's value ---

INTEGER_BOUNDS = "an integer from -2^53 to 2^53 (-9007199254740992 to 9007199254740992)"


@pytest.fixture
def valued(db) -> Experiment:
    """The active experiment `valued`: its values objects, control's with a nested null."""
    document = experiment("valued")
    document["spec"]["valueType"] = "object"
    document["spec"]["variants"][0]["value"] = {"label": "Buy", "icon": None}
    document["spec"]["variants"][1]["value"] = {"label": "Buy now", "style": {"color": "#00aa00"}}
    apply_resources(subject_type("user"), document)
    return Experiment.objects.get(key="valued")


def values_of(experiment: Experiment) -> list:
    return list(Variant.objects.filter(experiment=experiment).order_by("position").values_list("value", flat=True))


def variant_errors(response) -> list[dict]:
    return [form.errors for form in response.context["inline_admin_formsets"][0].formset.forms]


def test_admin_edit__object_value_as_json__saved_with_history_and_no_cohort(staff_client, valued):
    # Given a subject assigned to green
    AssignmentFactory(experiment=valued, variant=Variant.objects.get(experiment=valued, key="green"))

    # When staff change green's value, typed as JSON
    response = edit(staff_client, valued, variants__1__value_text='{"label": "Buy now", "style": null, "n": [1, 2.5]}')

    # Then it is stored as an object, in one history entry by them, and no cohort starts
    assert response.status_code == 302, errors_of(response)
    assert values_of(valued) == [{"label": "Buy", "icon": None}, {"label": "Buy now", "style": None, "n": [1, 2.5]}]
    change = ResourceChange.objects.filter(kind="experiment").latest("resource_version")
    assert (change.actor, change.resource_version) == ("alice", 2)
    assert change.after["spec"]["variants"][1]["value"] == {"label": "Buy now", "style": None, "n": [1, 2.5]}
    assert list(Cohort.objects.filter(experiment=valued).values_list("number", flat=True)) == [1]


def test_admin_edit__valued_experiment_saved_unchanged__no_history(staff_client, valued):
    before = stored(valued)

    response = edit(staff_client, valued)

    assert response.status_code == 302, errors_of(response)
    assert stored(valued) == before


@pytest.mark.parametrize(
    ("value_type", "texts", "expected"),
    [
        ("string", ["Buy", " Buy now "], ["Buy", " Buy now "]),
        ("string", ["", "42"], ["", "42"]),
        ("boolean", ["false", " true"], [False, True]),
        ("integer", ["42", "2.0"], [42, 2]),
        ("float", ["1", "2.5e-3"], [1.0, 0.0025]),
        ("object", ["{}", '{"a": {"b": null}}'], [{}, {"a": {"b": None}}]),
    ],
)
def test_admin_edit__value_type_chosen_and_values_typed__stored_of_the_type_as_in_yaml(
    staff_client, checkout, value_type, texts, expected
):
    # When staff give the experiment a value type and type each variant's value
    response = edit(
        staff_client,
        checkout,
        value_type=value_type,
        variants__0__value_text=texts[0],
        variants__1__value_text=texts[1],
    )

    # Then the values are stored of the type (2.0 the integer 2, 1 the float 1.0), as the same YAML would be
    assert response.status_code == 302, errors_of(response)
    checkout.refresh_from_db()
    assert (checkout.value_type, checkout.resource_version) == (value_type, 2)
    assert [(type(value), value) for value in values_of(checkout)] == [(type(value), value) for value in expected]
    document = experiment("checkout", hypothesis="Green sells more")
    document["spec"]["valueType"] = value_type
    for variant, value in zip(document["spec"]["variants"], expected, strict=True):
        variant["value"] = value
    assert [str(result) for result in apply_resources(subject_type("user"), document)][1] == (
        "experiment checkout: unchanged"
    )


def test_admin_edit__bulk_evaluation_unticked__saved_and_ticked_by_default_on_a_new_experiment(staff_client, checkout):
    def ticked(url: str) -> bool:
        fields = form_fields(staff_client.get(url).content.decode(), form_id="experiment_form")
        return fields.get("bulk_evaluation") == "on"

    assert ticked("/admin/assignments/experiment/add/") and ticked(change_url(checkout))

    response = edit(staff_client, checkout, bulk_evaluation=None)

    assert response.status_code == 302, errors_of(response)
    checkout.refresh_from_db()
    assert (checkout.bulk_evaluation, checkout.resource_version) == (False, 2)
    change = ResourceChange.objects.filter(kind="experiment").latest("resource_version")
    assert change.after["spec"]["bulkEvaluation"] is False and "bulkEvaluation" not in change.before["spec"]


def test_admin_edit__object_value_not_json__error_on_the_value_and_nothing_changed(staff_client, valued):
    before = stored(valued)

    response = edit(staff_client, valued, variants__1__value_text='{"label": ')

    assert response.status_code == 200
    assert variant_errors(response)[1]["value_text"] == ["not valid JSON: Expecting value: line 1 column 11 (char 10)"]
    assert "Nothing was saved" in html.unescape(response.content.decode())
    assert stored(valued) == before


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"value_type": "integer", "variants__1__value_text": "2.5"}, f"must be {INTEGER_BOUNDS}, not 2.5"),
        (
            {"value_type": "integer", "variants__1__value_text": "ten"},
            f"must be {INTEGER_BOUNDS}, not the string 'ten'",
        ),
        ({"value_type": "integer", "variants__1__value_text": ""}, f"is required: {INTEGER_BOUNDS}"),
        ({"value_type": "float", "variants__1__value_text": "1e999"}, "must be a finite number, not inf"),
        ({"value_type": "boolean", "variants__1__value_text": "yes"}, "must be true or false, not the string 'yes'"),
        (
            {"value_type": "string", "variants__1__value_text": "x" * 1001},
            "must be a string of at most 1000 characters",
        ),
        ({"value_type": "string", "variants__1__value_text": "a\tb"}, "must not contain control characters"),
        ({"variants__1__value_text": "[1, 2]"}, "must be an object (a mapping), not a list"),
        ({"variants__1__value_text": '{"a": NaN}'}, "must hold finite numbers only"),
        ({"variants__1__value_text": '{"a": [[[[[[[[[[1]]]]]]]]]]}'}, "must be nested at most 10 deep"),
        (
            {"value_type": "", "variants__1__value_text": "1"},
            "is allowed only with spec.valueType (set one, or leave the value out)",
        ),
    ],
)
def test_admin_edit__value_refused__the_yaml_words_on_the_value_and_nothing_changed(
    staff_client, valued, changes, message
):
    before = stored(valued)
    if changes.get("value_type") is not None:
        changes.setdefault("variants__0__value_text", "1" if changes["value_type"] else "")

    response = edit(staff_client, valued, **changes)

    assert response.status_code == 200
    assert variant_errors(response)[1]["value_text"] == [message], errors_of(response)
    assert stored(valued) == before


def test_admin_edit__value_type_not_offered__refused_on_the_field(staff_client, valued):
    response = edit(staff_client, valued, value_type="int")

    assert_field_error(response, "value_type", "Select a valid choice.")


def test_admin_page__values_shown_in_their_fields__objects_as_compact_json(staff_client, valued):
    fields = form_fields(staff_client.get(change_url(valued)).content.decode(), form_id="experiment_form")

    assert (fields["value_type"], fields["bulk_evaluation"]) == ("object", "on")
    # Compact JSON, the keys in the database's order (PostgreSQL's jsonb sorts them shortest first)
    assert [fields["variants-0-value_text"], fields["variants-1-value_text"]] == [
        json.dumps(value, ensure_ascii=False, separators=(",", ":")) for value in values_of(valued)
    ]
    assert yaml.safe_load(fields["variants-1-value_text"]) == {"label": "Buy now", "style": {"color": "#00aa00"}}
    assert " " not in fields["variants-0-value_text"].replace("Buy now", "")
