"""Who enters an experiment, as configuration (docs/reference/resources.md): a subject type's attributes and
an experiment's enrollment window, targeting and coverage; what apply_resources refuses and accepts, the
cohorts and history their changes make."""

from __future__ import annotations

import datetime as dt
import io
import math

import pytest
from django.core.management import call_command

from assignments.models import Cohort, Experiment, ResourceChange, SubjectType
from assignments.resources import ResourceInvalid
from tests.helpers.processes import run_manage
from tests.helpers.resources import (
    apply_file,
    apply_resources,
    apply_yaml,
    database_rows,
    experiment,
    lab,
    refusal,
    split_variants,
    subject_type,
    yaml_documents,
)

# One attribute of each type, as the subject type `user` declares them in these tests.
ATTRIBUTES = {"country": "string", "seats": "number", "beta": "boolean", "appVersion": "version"}
# The operator table of targeting, written out here so that the code's own table is what is tested.
OPERATOR_TYPES = {
    "equals": {"string", "number", "boolean", "version"},
    "in": {"string", "number"},
    "notIn": {"string", "number"},
    "gt": {"number", "version"},
    "gte": {"number", "version"},
    "lt": {"number", "version"},
    "lte": {"number", "version"},
    "exists": {"string", "number", "boolean", "version"},
}
ATTRIBUTE_OF_TYPE = {attribute_type: name for name, attribute_type in ATTRIBUTES.items()}
# A value of each type, and a list of them for in/notIn. A boolean is written as a string where its operator
# takes no boolean: the shape of the value is checked first (see the test of boolean values), and here the
# operator's type is the subject.
VALUE_OF_TYPE = {"string": "DE", "number": 10, "boolean": True, "version": "2.3"}
LIST_OF_TYPE = {"string": ["DE", "AT"], "number": [1, 2.5], "boolean": ["true"], "version": ["2.3"]}


def user(attributes: dict[str, str] | None = None) -> dict:
    return subject_type("user", attributes=ATTRIBUTES if attributes is None else attributes)


def condition(attribute_type: str, operator: str) -> dict:
    """A condition on the attribute of that type, with a value of that type its operator can take."""
    if operator == "exists":
        value = True
    elif operator in ("in", "notIn"):
        value = LIST_OF_TYPE[attribute_type]
    elif attribute_type == "boolean" and operator != "equals":
        value = "true"
    else:
        value = VALUE_OF_TYPE[attribute_type]
    return {"attribute": ATTRIBUTE_OF_TYPE[attribute_type], operator: value}


TARGETED_ANY_OF = {"anyOf": [{"attribute": "seats", "gte": 10}, {"attribute": "beta", "equals": True}]}
TARGETED = [{"attribute": "country", "in": ["DE", "AT"]}, TARGETED_ANY_OF]


@pytest.fixture
def targeted(db):
    """The subject type `user` with ATTRIBUTES, and the active experiment `targeted` that targets country and,
    through an anyOf, seats and beta."""
    apply_resources(user(), experiment("targeted", targeting=TARGETED))


# --- every mistake refused, naming the file, the document, the field and why; nothing applied ---

EXPERIMENT_MISTAKES = [
    # (id, the experiment's gate fields, what the error says after "document 2: ")
    (
        "targeting-not-a-list",
        {"targeting": {"attribute": "country", "equals": "DE"}},
        "spec.targeting: must be a list of 1 to 20 conditions",
    ),
    ("targeting-empty", {"targeting": []}, "spec.targeting: must be a list of 1 to 20 conditions"),
    (
        "targeting-21-conditions",
        {"targeting": [{"attribute": "seats", "gte": n} for n in range(21)]},
        "spec.targeting: must be a list of 1 to 20 conditions",
    ),
    (
        "two-operators",
        {"targeting": [{"attribute": "seats", "gte": 1, "lt": 5}]},
        "spec.targeting.0: needs exactly one operator of equals, in, notIn, gt, gte, lt, lte, exists; found gte, lt",
    ),
    (
        "no-operator",
        {"targeting": [{"attribute": "seats"}]},
        "spec.targeting.0: needs exactly one operator of equals, in, notIn, gt, gte, lt, lte, exists; found none",
    ),
    (
        "unknown-operator",
        {"targeting": [{"attribute": "country", "contains": "D"}]},
        "spec.targeting.0.contains: unknown field",
    ),
    (
        "unknown-field",
        {"targeting": [{"attribute": "country", "equals": "DE", "note": "x"}]},
        "spec.targeting.0.note: unknown field",
    ),
    ("empty-condition", {"targeting": [{}]}, "spec.targeting.0: needs exactly one operator"),
    (
        "attribute-name-not-matching",
        {"targeting": [{"attribute": "1country", "equals": "DE"}]},
        "spec.targeting.0.attribute: is required and must match ^[A-Za-z_][A-Za-z0-9_.-]{0,63}$",
    ),
    (
        "attribute-missing",
        {"targeting": [{"equals": "DE"}]},
        "spec.targeting.0.attribute: is required and must match",
    ),
    (
        "anyOf-nested",
        {"targeting": [{"anyOf": [{"anyOf": [{"attribute": "country", "equals": "DE"}]}]}]},
        "spec.targeting.0.anyOf.0: anyOf goes one level deep",
    ),
    ("anyOf-empty", {"targeting": [{"anyOf": []}]}, "spec.targeting.0.anyOf: must be a list of 1 to 20 conditions"),
    (
        "anyOf-not-a-list",
        {"targeting": [{"anyOf": {"attribute": "country", "equals": "DE"}}]},
        "spec.targeting.0.anyOf: must be a list of 1 to 20 conditions",
    ),
    (
        "anyOf-empty-condition",
        {"targeting": [{"anyOf": [{"attribute": "country", "equals": "DE"}, {}]}]},
        "spec.targeting.0.anyOf.1: needs exactly one operator",
    ),
    (
        "anyOf-extra-key",
        {"targeting": [{"anyOf": [{"attribute": "country", "equals": "DE"}], "attribute": "seats"}]},
        "spec.targeting.0: an anyOf condition has no other field",
    ),
    (
        "in-empty",
        {"targeting": [{"attribute": "country", "in": []}]},
        "spec.targeting.0.in: must be a list of 1 to 100",
    ),
    (
        "in-101-items",
        {"targeting": [{"attribute": "seats", "in": list(range(101))}]},
        "spec.targeting.0.in: must be a list of 1 to 100",
    ),
    (
        "in-not-a-list",
        {"targeting": [{"attribute": "country", "in": "DE"}]},
        "spec.targeting.0.in: must be a list of 1 to 100",
    ),
    (
        "exists-yes",
        {"targeting": [{"attribute": "country", "exists": "yes"}]},
        "spec.targeting.0.exists: must be true (the attribute was sent) or false (it was not)",
    ),
    (
        "gt-ten-on-a-number",
        {"targeting": [{"attribute": "seats", "gt": "ten"}]},
        "experiment 'promo': spec.targeting.0.gt: must be a number: 'seats' is a number attribute",
    ),
    (
        "gt-on-a-string",
        {"targeting": [{"attribute": "country", "gt": "DE"}]},
        "experiment 'promo': spec.targeting.0.gt: cannot be used with string attribute 'country'; "
        "its operators: equals, in, notIn, exists",
    ),
    (
        "in-on-a-version",
        {"targeting": [{"attribute": "appVersion", "in": ["2.3"]}]},
        "experiment 'promo': spec.targeting.0.in: cannot be used with version attribute 'appVersion'",
    ),
    (
        "in-on-a-boolean",
        {"targeting": [{"attribute": "beta", "in": ["yes"]}]},
        "experiment 'promo': spec.targeting.0.in: cannot be used with boolean attribute 'beta'",
    ),
    (
        "equals-3-on-a-string",
        {"targeting": [{"attribute": "country", "equals": 3}]},
        "experiment 'promo': spec.targeting.0.equals: must be a string: 'country' is a string attribute",
    ),
    (
        "equals-2.x-on-a-version",
        {"targeting": [{"attribute": "appVersion", "equals": "2.x"}]},
        "experiment 'promo': spec.targeting.0.equals: must be a version",
    ),
    (
        "in-item-of-another-type",
        {"targeting": [{"attribute": "seats", "in": [1, "2"]}]},
        "experiment 'promo': spec.targeting.0.in.1: must be a number",
    ),
    (
        "undeclared-attribute",
        {"targeting": [{"attribute": "plan", "equals": "pro"}]},
        "experiment 'promo': spec.targeting.0.attribute: names no attribute the subject type declares: 'plan' "
        "(declared: country, seats, beta, appVersion)",
    ),
    (
        "attribute-in-another-case",
        {"targeting": [{"attribute": "Country", "equals": "DE"}]},
        "experiment 'promo': spec.targeting.0.attribute: names no attribute the subject type declares: 'Country'",
    ),
    (
        "undeclared-attribute-in-anyOf",
        {"targeting": [{"anyOf": [{"attribute": "country", "equals": "DE"}, {"attribute": "plan", "equals": "pro"}]}]},
        "experiment 'promo': spec.targeting.0.anyOf.1.attribute: names no attribute the subject type declares",
    ),
    ("coverage-below-0", {"coverage": -0.1}, "spec.coverage: must be a number from 0 to 1"),
    ("coverage-above-1", {"coverage": 1.1}, "spec.coverage: must be a number from 0 to 1"),
    ("coverage-a-string", {"coverage": "0.5"}, "spec.coverage: must be a number from 0 to 1"),
    ("coverage-true", {"coverage": True}, "spec.coverage: must be a number from 0 to 1"),
    ("coverage-nan", {"coverage": math.nan}, "spec.coverage: must be a number from 0 to 1"),
    (
        "enrollment-unknown-field",
        {"enrollment": {"startAt": "2026-12-01T09:00:00Z", "endAt": "2027-01-01T00:00:00Z"}},
        "spec.enrollment.endAt: unknown field; allowed: startAt, stopAt",
    ),
    ("enrollment-not-a-mapping", {"enrollment": "2026-12-01T09:00:00Z"}, "spec.enrollment: must be a mapping"),
    (
        "time-without-offset",
        {"enrollment": {"startAt": "2026-12-01T09:00:00"}},
        "spec.enrollment.startAt: needs an offset (Z for UTC, or such as +01:00)",
    ),
    (
        "date-only",
        {"enrollment": {"stopAt": "2026-12-01"}},
        "spec.enrollment.stopAt: needs an offset (Z for UTC, or such as +01:00)",
    ),
    (
        "date-only-unquoted",
        {"enrollment": {"stopAt": dt.date(2026, 12, 1)}},
        "spec.enrollment.stopAt: must be an ISO 8601 time with an offset",
    ),
    (
        "unparseable-time",
        {"enrollment": {"startAt": "next monday"}},
        "spec.enrollment.startAt: must be an ISO 8601 time with an offset, such as 2026-12-01T09:00:00+01:00: "
        "'next monday'",
    ),
    (
        "time-before-year-1-in-utc",
        {"enrollment": {"startAt": "0001-01-01T00:00:00+01:00"}},
        "spec.enrollment.startAt: must be an instant from year 1 to 9999 in UTC",
    ),
    (
        "time-after-year-9999-in-utc",
        {"enrollment": {"stopAt": "9999-12-31T23:30:00-01:00"}},
        "spec.enrollment.stopAt: must be an instant from year 1 to 9999 in UTC",
    ),
    (
        "stop-equal-to-start",
        {"enrollment": {"startAt": "2026-12-01T09:00:00+01:00", "stopAt": "2026-12-01T08:00:00Z"}},
        "spec.enrollment.stopAt: must be after startAt",
    ),
    (
        "stop-before-start",
        {"enrollment": {"startAt": "2026-12-01T09:00:00Z", "stopAt": "2026-11-30T09:00:00Z"}},
        "spec.enrollment.stopAt: must be after startAt",
    ),
]


@pytest.mark.parametrize(
    ("gates", "expected"), [c[1:] for c in EXPERIMENT_MISTAKES], ids=[c[0] for c in EXPERIMENT_MISTAKES]
)
def test_apply_resources__experiment_gate_mistake__refused_naming_file_document_field_and_why(
    targeted, tmp_path, gates, expected
):
    # Given a configuration in place, and a file of the same subject type, a new experiment with one
    # mistake in its gates and a new lab
    documents = (user(), experiment("promo", **gates), lab("growth"))

    # When it is applied, then it is refused with the mistake's file, document, field and why, and the
    # database is as it was
    path, errors = refusal(tmp_path, *documents)

    assert any(line.startswith(f"{path}: document 2: {expected}") for line in errors), errors


def _attributes(value: object) -> dict:
    document = subject_type("device")
    document["spec"] = {"attributes": value}
    return document


SUBJECT_TYPE_MISTAKES = [
    ("not-a-list", {"country": "string"}, "spec.attributes: must be a list of {name, type}"),
    (
        "51-attributes",
        [{"name": f"a{n}", "type": "string"} for n in range(51)],
        "spec.attributes: must have at most 50 attributes, has 51",
    ),
    (
        "duplicate-name",
        [{"name": "country", "type": "string"}, {"name": "country", "type": "number"}],
        "spec.attributes.1.name: duplicates attribute 'country'",
    ),
    (
        "bad-name",
        [{"name": "country code", "type": "string"}],
        "spec.attributes.0.name: is required and must match ^[A-Za-z_][A-Za-z0-9_.-]{0,63}$",
    ),
    (
        "unknown-type",
        [{"name": "born", "type": "date"}],
        "spec.attributes.0.type: is required and must be one of string, number, boolean, version",
    ),
    ("missing-type", [{"name": "born"}], "spec.attributes.0.type: is required and must be one of"),
    (
        "extra-field",
        [{"name": "born", "type": "string", "required": True}],
        "spec.attributes.0.required: unknown field; allowed: name, type",
    ),
    ("not-a-mapping", ["country"], "spec.attributes.0: must be a mapping"),
]


@pytest.mark.parametrize(
    ("attributes", "expected"), [c[1:] for c in SUBJECT_TYPE_MISTAKES], ids=[c[0] for c in SUBJECT_TYPE_MISTAKES]
)
def test_apply_resources__subject_type_attributes_mistake__refused_naming_file_document_field_and_why(
    targeted, tmp_path, attributes, expected
):
    path, errors = refusal(tmp_path, _attributes(attributes), lab("growth"))

    assert any(line.startswith(f"{path}: document 1: {expected}") for line in errors), errors


@pytest.mark.parametrize(
    ("attributes", "why"),
    [
        (
            {"seats": "number", "beta": "boolean", "appVersion": "version"},
            "(spec.targeting.0.attribute: names no attribute the subject type declares: 'country'",
        ),
        (
            {"country": "number", "seats": "number", "beta": "boolean", "appVersion": "version"},
            "(spec.targeting.0.in.0: must be a number: 'country' is a number attribute)",
        ),
        (
            {"country": "string", "seats": "version", "beta": "boolean", "appVersion": "version"},
            "(spec.targeting.1.anyOf.0.gte: must be a version",
        ),
        (
            {"country": "string", "seats": "number", "beta": "string", "appVersion": "version"},
            "(spec.targeting.1.anyOf.1.equals: must be a string: 'beta' is a string attribute)",
        ),
    ],
    ids=["removed", "retyped", "retyped-in-anyOf", "retyped-boolean"],
)
def test_apply_resources__subject_type_drops_or_retypes_a_targeted_attribute__refused_naming_the_experiment(
    targeted, tmp_path, attributes, why
):
    path, errors = refusal(tmp_path, user(attributes))

    expected = f"{path}: document 1: subjecttype 'user': spec.attributes: experiment 'targeted' targets it {why}"
    assert any(line.startswith(expected) for line in errors), errors
    assert all(line.endswith("change that experiment's targeting first") for line in errors), errors


@pytest.mark.parametrize("status", ["draft", "active", "winner_declared", "ended", "archived"])
@pytest.mark.parametrize(
    ("kept", "new_type"),
    [({"attribute": "tier", "equals": "2.3"}, "version"), ({"attribute": "tier", "exists": True}, "number")],
    ids=["equals-string-to-version", "exists-string-to-number"],
)
@pytest.mark.parametrize("experiment_in_the_apply", [False, True], ids=["alone", "with-the-experiment"])
def test_apply_resources__attribute_retyped_under_conditions_still_valid__refused_naming_the_experiment(
    db, tmp_path, status, kept, new_type, experiment_in_the_apply
):
    # Given an experiment whose condition on `tier`, a string, would hold as well for the new type: the same
    # document would then select other subjects (a string "2.3" is no version 2.3.0) without a new cohort
    winner = "green" if status == "winner_declared" else None
    targeted = experiment("checkout", status=status, winning_variant=winner, targeting=[kept])
    apply_resources(subject_type("user", attributes={"tier": "string"}), targeted)

    # When `tier` is retyped, the experiment left as it is or applied again unchanged
    documents = [subject_type("user", attributes={"tier": new_type})] + ([targeted] if experiment_in_the_apply else [])
    path, errors = refusal(tmp_path, *documents)

    # Then the apply is refused, naming the experiment and what to do
    assert errors == [
        f"{path}: document 1: subjecttype 'user': spec.attributes: retypes 'tier', which experiment 'checkout' "
        "targets: its conditions would select other subjects without a new cohort; change that experiment's "
        "targeting first, or in the same apply"
    ]


def test_apply_resources__attribute_retyped_that_only_another_subject_types_experiment_targets__accepted(db):
    apply_resources(
        subject_type("user", attributes={"tier": "string"}),
        subject_type("device", attributes={"tier": "string"}),
        experiment("checkout", subject_type="device", targeting=[{"attribute": "tier", "exists": True}]),
    )

    (result,) = apply_resources(subject_type("user", attributes={"tier": "number"}))

    assert result.outcome == "updated"


def test_apply_resources__attribute_dropped_with_the_targeting_that_named_it__accepted(targeted, tmp_path):
    # Given `targeted`, active, targeting country, seats and beta; when one apply drops all but beta from the
    # subject type and the targeting from the experiment
    _, lines = apply_file(tmp_path, user({"beta": "boolean"}), experiment("targeted"))

    # Then both are updated; the change of targeting while active starts cohort 2, for everyone
    assert lines == ["subjecttype user: updated", "experiment targeted: updated"]
    assert SubjectType.objects.get(key="user").attribute_types() == {"beta": "boolean"}
    assert Experiment.objects.get(key="targeted").targeting is None
    assert list(Cohort.objects.filter(experiment__key="targeted").values_list("number", "population")) == [
        (1, {"targeting": TARGETED}),
        (2, {}),
    ]


def test_apply_resources__attribute_retyped_with_the_targeting_that_named_it__accepted(targeted, tmp_path):
    retyped = {**ATTRIBUTES, "country": "number"}
    targeting = [{"attribute": "country", "in": [49, 43]}, TARGETED_ANY_OF]

    _, lines = apply_file(tmp_path, user(retyped), experiment("targeted", targeting=targeting))

    assert lines == ["subjecttype user: updated", "experiment targeted: updated"]
    assert Experiment.objects.get(key="targeted").targeting == targeting


def test_apply_resources__attribute_no_experiment_targets_removed__accepted(targeted, tmp_path):
    _, lines = apply_file(tmp_path, user({"country": "string", "seats": "number", "beta": "boolean"}))

    assert lines == ["subjecttype user: updated"]


def test_apply_resources__two_experiments_given_one_salt_in_one_apply__refused_naming_both(targeted, tmp_path):
    documents = (user(), experiment("first", salt="Shared"), experiment("second", salt="sHARED"))

    path, errors = refusal(tmp_path, *documents)

    assert errors == [
        f"{path}: document 3: experiment 'second': spec.salt: salt 'sHARED' is the salt of experiment 'first' "
        "already (salts are unique ignoring case: a shared salt correlates the experiments' draws); set another "
        "spec.salt"
    ]


def test_apply_resources__salt_of_an_experiment_applied_before__refused_naming_both(targeted, tmp_path):
    apply_resources(experiment("first", salt="Shared"))

    path, errors = refusal(tmp_path, experiment("second", salt="SHARED"))

    assert errors[0].startswith(
        f"{path}: document 1: experiment 'second': spec.salt: salt 'SHARED' is the salt of experiment 'first' already"
    )


def test_apply_resources__explicit_salt_equal_to_another_experiments_default__refused_naming_both(targeted, tmp_path):
    # Given `Promo`, whose salt is its ID in lower case
    apply_resources(experiment("Promo"))

    path, errors = refusal(tmp_path, experiment("other", salt="PROMO"))

    assert errors[0].startswith(
        f"{path}: document 1: experiment 'other': spec.salt: salt 'PROMO' is the salt of experiment 'Promo' already"
    )


def test_apply_resources__default_salt_equal_to_another_experiments_explicit_salt__refused_naming_both(
    targeted, tmp_path
):
    apply_resources(experiment("other", salt="Promo"))

    path, errors = refusal(tmp_path, experiment("PROMO"))

    assert errors[0].startswith(
        f"{path}: document 1: experiment 'PROMO': spec.salt: salt 'promo' is the salt of experiment 'other' already"
    )


def test_apply_resources__existing_salt_rewritten_in_another_case__accepted(targeted, tmp_path):
    # Its own salt is no other experiment's: a salt compared with itself is no collision.
    _, lines = apply_file(tmp_path, experiment("targeted", salt="TARGETED", targeting=TARGETED))

    assert lines == ["experiment targeted: updated"]
    assert Experiment.objects.get(key="targeted").salt == "TARGETED"


PROCESS_MISTAKES = {
    # Found as the documents are read: the apply never starts.
    "read": (
        [
            user(),
            experiment(
                "promo",
                enrollment={"startAt": "2026-12-01T09:00:00"},
                targeting=[{"attribute": "seats", "gte": 1, "lt": 5}],
                coverage=1.5,
            ),
            lab("growth"),
        ],
        [
            "document 2: spec.enrollment.startAt: needs an offset",
            "document 2: spec.targeting.0: needs exactly one operator",
            "document 2: spec.coverage: must be a number from 0 to 1",
        ],
    ),
    # Found by the apply, against the database: every document is read, and all of it rolled back.
    "apply": (
        [
            user({**ATTRIBUTES, "country": "number"}),
            experiment("promo", targeting=[{"attribute": "seats", "gt": "ten"}]),
            experiment("other", salt="TARGETED"),
            lab("growth"),
        ],
        [
            "document 1: subjecttype 'user': spec.attributes: experiment 'targeted' targets it",
            "document 2: experiment 'promo': spec.targeting.0.gt: must be a number",
            "document 3: experiment 'other': spec.salt: salt 'TARGETED' is the salt of experiment 'targeted' already",
        ],
    ),
}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stage", list(PROCESS_MISTAKES))
def test_apply_resources_process__gate_mistakes__exit_1_each_named_on_stderr_nothing_applied(tmp_path, stage):
    # Given a configuration committed for another process to see, and a file with mistakes in it
    apply_resources(user(), experiment("targeted", targeting=[{"attribute": "country", "equals": "DE"}]))
    before = database_rows()
    documents, expected = PROCESS_MISTAKES[stage]
    path = tmp_path / "gates.yaml"
    path.write_text(yaml_documents(*documents), encoding="utf-8")

    result = run_manage("apply_resources", str(path))

    # Then the command fails with each mistake on stderr, prints nothing on stdout, and changed nothing
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert result.stdout == b""
    assert stderr.startswith("CommandError: resources not applied:\n"), stderr
    for line in expected:
        assert f"\n{path}: {line}" in stderr
    assert database_rows() == before


# --- every operator the table allows is accepted, on the types it allows ---


@pytest.mark.parametrize("attribute_type", ["string", "number", "boolean", "version"])
@pytest.mark.parametrize("operator", list(OPERATOR_TYPES))
def test_apply__operator_on_attribute_type__accepted_exactly_where_the_table_allows(
    db, operator, attribute_type, tmp_path
):
    apply_resources(user())
    targeting = [condition(attribute_type, operator)]

    if attribute_type in OPERATOR_TYPES[operator]:
        _, lines = apply_file(tmp_path, experiment("promo", targeting=targeting))
        assert lines == ["experiment promo: created"]
        assert Experiment.objects.get(key="promo").targeting == targeting
        assert Cohort.objects.get(experiment__key="promo").population == {"targeting": targeting}
    else:
        path, errors = refusal(tmp_path, experiment("promo", targeting=targeting))
        name = ATTRIBUTE_OF_TYPE[attribute_type]
        expected = f"{path}: document 1: experiment 'promo': spec.targeting.0.{operator}: cannot be used with "
        assert errors[0].startswith(f"{expected}{attribute_type} attribute {name!r}"), errors


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("attribute_type", ["string", "number", "boolean", "version"])
def test_apply__exists_true_or_false_on_each_type__accepted(db, attribute_type, value):
    targeting = [{"attribute": ATTRIBUTE_OF_TYPE[attribute_type], "exists": value}]

    apply_resources(user(), experiment("promo", targeting=targeting))

    assert Experiment.objects.get(key="promo").targeting == targeting


@pytest.mark.parametrize("value", [False, "", 0])
def test_apply__equals_a_falsy_value__accepted_and_kept(db, value):
    name = {bool: "beta", str: "country", int: "seats"}[type(value)]
    targeting = [{"attribute": name, "equals": value}]

    apply_resources(user(), experiment("promo", targeting=targeting))

    assert Experiment.objects.get(key="promo").targeting == targeting


@pytest.mark.parametrize("version", ["2", "2.3", "2.10.1", "1.2.3.4", "0", "010.0"])
@pytest.mark.parametrize("operator", ["equals", "gt", "gte", "lt", "lte"])
def test_apply__version_of_one_to_four_numbers__accepted(db, operator, version):
    targeting = [{"attribute": "appVersion", operator: version}]

    apply_resources(user(), experiment("promo", targeting=targeting))

    assert Experiment.objects.get(key="promo").targeting == targeting


@pytest.mark.parametrize("version", ["1.2.3.4.5", "2.", ".2", "v2", "-1", "2..3", " 2", "2.3-beta", "٢"])
def test_apply__version_not_of_one_to_four_numbers__refused(db, version):
    apply_resources(user())

    with pytest.raises(ResourceInvalid, match=r"spec.targeting.0.gte: must be a version"):
        apply_resources(experiment("promo", targeting=[{"attribute": "appVersion", "gte": version}]))

    assert not Experiment.objects.filter(key="promo").exists()


def test_apply__every_operator_and_an_any_of__accepted_and_stored_as_written(db):
    targeting = [
        {"attribute": "country", "in": ["DE", "AT", "CH"]},
        {"attribute": "country", "notIn": ["NO"]},
        {"attribute": "seats", "in": [1, 2.5]},
        {"attribute": "seats", "notIn": [0]},
        {"attribute": "seats", "gt": 0},
        {"attribute": "seats", "gte": 1},
        {"attribute": "seats", "lt": 1000},
        {"attribute": "seats", "lte": 999.5},
        {"attribute": "appVersion", "gt": "1"},
        {"attribute": "appVersion", "gte": "2.3"},
        {"attribute": "appVersion", "lt": "10.0.0.1"},
        {"attribute": "appVersion", "lte": "9.9"},
        {"attribute": "beta", "exists": True},
        {"anyOf": [{"attribute": "country", "equals": "DE"}, {"attribute": "seats", "gte": 10}]},
    ]

    apply_resources(user(), experiment("promo", targeting=targeting, coverage=0.2))

    stored = Experiment.objects.get(key="promo")
    assert (stored.targeting, stored.coverage) == (targeting, 0.2)


@pytest.mark.parametrize("coverage", [0, 0.0, 1e-9, 0.5, 1, 1.0])
def test_apply__coverage_from_0_to_1__accepted(db, coverage):
    apply_resources(user(), experiment("promo", coverage=coverage))

    assert Experiment.objects.get(key="promo").coverage == coverage


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2026-12-01T09:00:00+01:00", dt.datetime(2026, 12, 1, 8, tzinfo=dt.UTC)),
        ("2026-12-01T08:00:00Z", dt.datetime(2026, 12, 1, 8, tzinfo=dt.UTC)),
        ("2026-12-01T08:00:00.250-05:30", dt.datetime(2026, 12, 1, 13, 30, 0, 250000, tzinfo=dt.UTC)),
        ("0001-01-01T01:00:00+01:00", dt.datetime(1, 1, 1, tzinfo=dt.UTC)),
        ("9999-12-31T23:59:59.999999Z", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)),
    ],
    ids=["plus-one-hour", "z", "fraction-and-minus-five-thirty", "first-instant", "last-instant"],
)
def test_apply__enrollment_time_with_an_offset__stored_as_that_instant(db, text, instant):
    apply_resources(user(), experiment("promo", enrollment={"startAt": text}))

    stored = Experiment.objects.get(key="promo")
    assert (stored.enrollment_start_at, stored.enrollment_stop_at) == (instant, None)
    # And the same document again is no change
    assert [result.outcome for result in apply_resources(experiment("promo", enrollment={"startAt": text}))] == [
        "unchanged"
    ]


@pytest.mark.parametrize("operator", ["in", "notIn", "gt", "lte"])
def test_apply__boolean_value_for_an_operator_other_than_equals_or_exists__refused_as_read(db, tmp_path, operator):
    # No attribute type takes a boolean with these operators, so the reader refuses it before any type is known.
    value = [True] if operator in ("in", "notIn") else True
    where = f"spec.targeting.0.{operator}.0" if operator in ("in", "notIn") else f"spec.targeting.0.{operator}"
    apply_resources(user())

    path, errors = refusal(tmp_path, experiment("promo", targeting=[{"attribute": "beta", operator: value}]))

    assert errors == [f"{path}: document 1: {where}: must be a string or a number"]


# --- cohorts: each change of a gate is a new population rule ---

BASE_GATES = {
    "enrollment": {"startAt": "2026-12-01T09:00:00+01:00"},
    "targeting": [{"attribute": "country", "in": ["DE"]}],
    "coverage": 0.5,
}
# BASE_GATES as a cohort records them: the instants in UTC.
BASE_POPULATION = {
    "enrollment": {"startAt": "2026-12-01T08:00:00Z"},
    "targeting": [{"attribute": "country", "in": ["DE"]}],
    "coverage": 0.5,
}
GATE_CHANGES = [
    # (id, the gate fields changed, the population rule they make)
    ("coverage", {"coverage": 0.8}, {**BASE_POPULATION, "coverage": 0.8}),
    ("coverage-left-out", {"coverage": None}, {key: BASE_POPULATION[key] for key in ("enrollment", "targeting")}),
    (
        "targeting",
        {"targeting": [{"attribute": "country", "in": ["DE", "AT"]}]},
        {**BASE_POPULATION, "targeting": [{"attribute": "country", "in": ["DE", "AT"]}]},
    ),
    ("targeting-left-out", {"targeting": None}, {key: BASE_POPULATION[key] for key in ("enrollment", "coverage")}),
    (
        "enrollment-stop-added",
        {"enrollment": {"startAt": "2026-12-01T09:00:00+01:00", "stopAt": "2027-01-15T00:00:00+01:00"}},
        {**BASE_POPULATION, "enrollment": {"startAt": "2026-12-01T08:00:00Z", "stopAt": "2027-01-14T23:00:00Z"}},
    ),
    (
        "enrollment-start-moved-a-second",
        {"enrollment": {"startAt": "2026-12-01T09:00:01+01:00"}},
        {**BASE_POPULATION, "enrollment": {"startAt": "2026-12-01T08:00:01Z"}},
    ),
    ("enrollment-left-out", {"enrollment": None}, {key: BASE_POPULATION[key] for key in ("targeting", "coverage")}),
]
SPLITS = [{"variant": "control", "split": 0.5}, {"variant": "green", "split": 0.5}]


def gated(status: str = "active", **changes) -> dict:
    winner = "green" if status == "winner_declared" else None
    return experiment("checkout", status=status, winning_variant=winner, **{**BASE_GATES, **changes})


def cohort_rules(key: str = "checkout") -> list[tuple[int, list, dict]]:
    cohorts = Cohort.objects.filter(experiment__key=key).order_by("number")
    return list(cohorts.values_list("number", "splits", "population"))


def versions(key: str = "checkout") -> list[int]:
    changes = ResourceChange.objects.filter(resource_id=key).order_by("resource_version")
    return list(changes.values_list("resource_version", flat=True))


@pytest.mark.parametrize("status", ["active", "winner_declared", "ended", "archived"])
@pytest.mark.parametrize(("change", "population"), [c[1:] for c in GATE_CHANGES], ids=[c[0] for c in GATE_CHANGES])
def test_apply__gate_change_while_active_or_later__starts_the_next_cohort_with_the_new_rule(
    db, status, change, population
):
    # Given an experiment with every gate, in a status that has assigned (or assigns) subjects
    apply_resources(user(), gated(status))

    # When one gate changes
    (outcome,) = apply_resources(gated(status, **change))

    # Then cohort 2 begins with the new rule (the splits as they were), cohort 1 keeps the old one,
    # and the change is in the history
    assert outcome.outcome == "updated"
    assert cohort_rules() == [(1, SPLITS, BASE_POPULATION), (2, SPLITS, population)]
    assert versions() == [1, 2]


@pytest.mark.parametrize(("change", "population"), [c[1:] for c in GATE_CHANGES], ids=[c[0] for c in GATE_CHANGES])
def test_apply__gate_change_of_a_draft__corrects_cohort_1_and_is_recorded(db, change, population):
    apply_resources(user(), gated("draft"))

    apply_resources(gated("draft", **change))

    assert cohort_rules() == [(1, SPLITS, population)]
    assert versions() == [1, 2]


def test_apply__draft_activated_with_new_gates__cohort_1_holds_them(db):
    apply_resources(user(), gated("draft"))

    apply_resources(gated("active", coverage=0.8))

    assert cohort_rules() == [(1, SPLITS, {**BASE_POPULATION, "coverage": 0.8})]


def test_apply__same_gates_again__unchanged_no_cohort_no_history(db):
    apply_resources(user(), gated())

    results = apply_resources(user(), gated())

    assert [result.outcome for result in results] == ["unchanged", "unchanged"]
    assert cohort_rules() == [(1, SPLITS, BASE_POPULATION)]
    assert versions() == [1]


def test_apply__same_instant_written_with_another_offset__unchanged(db):
    apply_resources(user(), gated())

    (result,) = apply_resources(gated(enrollment={"startAt": "2026-12-01T03:00:00-05:00"}))

    assert result.outcome == "unchanged"
    assert (len(cohort_rules()), versions()) == (1, [1])


def test_apply__gates_and_splits_changed_at_once_while_active__one_new_cohort_with_both(db):
    apply_resources(user(), gated())
    changed = gated(coverage=0.8)
    changed["spec"]["variants"] = split_variants([("control", 0.9), ("green", 0.1)])

    apply_resources(changed)

    assert cohort_rules()[1:] == [
        (
            2,
            [{"variant": "control", "split": 0.9}, {"variant": "green", "split": 0.1}],
            {**BASE_POPULATION, "coverage": 0.8},
        )
    ]


def test_apply__change_other_than_gates_or_splits_while_active__no_new_cohort(db):
    apply_resources(user(), gated())

    apply_resources(gated(name="Checkout, renamed"))

    assert len(cohort_rules()) == 1
    assert versions() == [1, 2]


@pytest.mark.parametrize(
    ("before", "after"),
    [(("boolean", True), ("number", 1)), (("number", 0), ("boolean", False)), (("boolean", False), ("number", 0))],
    ids=["true-to-1", "0-to-false", "false-to-0"],
)
def test_apply__attribute_retyped_and_its_equals_value_retyped_alike__a_change_that_starts_a_cohort(db, before, after):
    # Given `tier` targeted with `equals: true` (Python holds true == 1, JSON and the gates do not)
    (old_type, old_value), (new_type, new_value) = before, after
    apply_resources(
        subject_type("user", attributes={"tier": old_type}),
        experiment("checkout", targeting=[{"attribute": "tier", "equals": old_value}]),
    )

    # When one apply retypes `tier` and writes its value in the new type
    results = apply_resources(
        subject_type("user", attributes={"tier": new_type}),
        experiment("checkout", targeting=[{"attribute": "tier", "equals": new_value}]),
    )

    # Then the experiment changed: its targeting is stored in the new type, in a new cohort, and the export
    # applies again as no change
    assert [result.outcome for result in results] == ["updated", "updated"]
    ((stored,),) = [Experiment.objects.get(key="checkout").targeting]
    assert type(stored["equals"]) is type(new_value)
    (_, _, population) = cohort_rules()[-1]
    assert type(population["targeting"][0]["equals"]) is type(new_value)
    assert len(cohort_rules()) == 2
    out = io.StringIO()
    call_command("export_resources", stdout=out)
    assert {result.outcome for result in apply_yaml(out.getvalue())} == {"unchanged"}
