"""assignments/configuration/values.py and the variant values of an experiment's document
(docs/reference/resources.md): spec.valueType, spec.bulkEvaluation and each variant's `value`, as resources.py
reads them, the apply stores them (a change is configuration: history and resourceVersion, no cohort), the export
writes them back and the history shows them."""

from __future__ import annotations

import pytest
import yaml

from assignments.configuration.apply import Actor, experiment_transition
from assignments.configuration.resources import ResourceInvalid, resources_parse
from assignments.models import Assignment, Cohort, Experiment, ResourceChange, Variant
from assignments.selectors import value_as_typed
from tests.factories import AssignmentFactory
from tests.helpers.resources import (
    apply_resources,
    apply_yaml,
    export_text,
    holdout,
    resource_history,
    subject_type,
)
from tests.helpers.resources import experiment as experiment_document

BOUNDS = "from -2^53 to 2^53 (-9007199254740992 to 9007199254740992)"
USER = "schemaVersion: 1\nkind: subjecttype\nmetadata: {id: user}\n"


# The YAML text is these tests' subject (numbers, quotes, nulls), so it is written out.
def valued_yaml(values: tuple[str | None, str | None], *, spec: str = "", key: str = "exp") -> str:
    """The subject type `user` and the active experiment `key` with variants control and green, 50/50, whose
    `value:` are `values` as written in YAML (None: no value); `spec` adds lines to its spec."""
    rows = [
        f"    - id: {variant}\n      split: 0.5\n" + ("      control: true\n" if variant == "control" else "")
        for variant in ("control", "green")
    ]
    rows = [row + ("" if value is None else f"      value: {value}\n") for row, value in zip(rows, values, strict=True)]
    return f"""{USER}---
schemaVersion: 1
kind: experiment
metadata: {{id: {key}, status: active}}
spec:
  subjectType: user
{spec}  variants:
{"".join(rows)}"""


def typed(value_type: str, values: tuple[str | None, str | None], *, extra: str = "", key: str = "exp") -> str:
    """valued_yaml() with `valueType: value_type`, and `extra` spec lines."""
    return valued_yaml(values, spec=f"  valueType: {value_type}\n{extra}", key=key)


def a_value(value_type: str) -> str:
    """A value of the type, as YAML writes it."""
    return {"string": "a", "boolean": "true", "integer": "1", "float": "1.5", "object": "{}"}[value_type]


def parse_errors(text: str) -> list[str]:
    with pytest.raises(ResourceInvalid) as caught:
        resources_parse(text, file="v.yaml")
    return caught.value.errors


def stored_values(key: str = "exp") -> list:
    return [variant.value for variant in Variant.objects.filter(experiment__key=key).order_by("position")]


def exp() -> Experiment:
    return Experiment.objects.get(key="exp")


def outcome(text: str) -> str:
    """What the apply of `text` did to the experiment: created, updated or unchanged."""
    return {result.kind: result.outcome for result in apply_yaml(text)}["experiment"]


def history(key: str = "exp") -> list[ResourceChange]:
    return list(ResourceChange.objects.filter(kind="experiment", resource_id=key).order_by("resource_version"))


# --- reading: every type taken, and stored as it is served ---

ACCEPTED = [
    ("string", ('"Buy now"', "''"), ["Buy now", ""]),
    ("string", ("'0.5'", "'true'"), ["0.5", "true"]),
    ("boolean", ("true", "false"), [True, False]),
    ("integer", ("2.0", "-9007199254740992"), [2, -(2**53)]),
    ("float", ("1", "-0.25"), [1.0, -0.25]),
    ("float", ("1.0e+20", "1.0e-7"), [1e20, 1e-7]),
    (
        "object",
        ("{label: Buy, color: '#888888'}", "{label: Buy now, style: {border: null, sizes: [1, 2.5]}, enabled: true}"),
        [
            {"label": "Buy", "color": "#888888"},
            {"label": "Buy now", "style": {"border": None, "sizes": [1, 2.5]}, "enabled": True},
        ],
    ),
    (
        "object",
        ("{}", "{a: {b: {c: {d: {e: {f: {g: {h: {i: {j: 1}}}}}}}}}}"),
        [{}, {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": {"j": 1}}}}}}}}}}],
    ),
]


@pytest.mark.parametrize(("value_type", "written", "expected"), ACCEPTED)
def test_read__every_value_type__taken_as_stored_and_served(db, value_type, written, expected):
    (_, spec) = resources_parse(typed(value_type, written), file="v.yaml")

    assert spec.value_type == value_type
    assert [variant.value for variant in spec.variants] == expected
    # 2.0 is the integer 2, and 1 the float 1.0: of the type, not only equal
    assert [type(variant.value) for variant in spec.variants] == [type(value) for value in expected]

    apply_yaml(typed(value_type, written))

    assert (exp().value_type, exp().bulk_evaluation) == (value_type, True)
    assert stored_values() == expected
    # As served: PostgreSQL's jsonb gives the float 1e20 back as the integer it equals
    served = [value_as_typed(value_type, value) for value in stored_values()]
    assert [type(value) for value in served] == [type(value) for value in expected]


def test_read__no_value_type__no_values_and_bulk_evaluation_by_default(db):
    (_, spec) = resources_parse(valued_yaml((None, None)), file="v.yaml")
    apply_yaml(valued_yaml((None, None)))

    assert (spec.value_type, spec.bulk_evaluation, [v.value for v in spec.variants]) == ("", True, [None, None])
    assert (exp().value_type, exp().bulk_evaluation, stored_values()) == ("", True, [None, None])


def test_read__bulk_evaluation_false__read_and_stored(db):
    apply_yaml(valued_yaml((None, None), spec="  bulkEvaluation: false\n"))

    assert exp().bulk_evaluation is False


# --- refusals: each names its field ---

REFUSED = [
    ("integer", "2.5", f"must be an integer {BOUNDS}, not 2.5"),
    ("integer", "9007199254740993", f"must be an integer {BOUNDS}, not 9007199254740993"),
    ("integer", "'1'", f"must be an integer {BOUNDS}, not the string '1' (leave the quotes off in YAML)"),
    ("integer", "'2.5'", f"must be an integer {BOUNDS}, not the string '2.5'"),
    ("integer", "true", f"must be an integer {BOUNDS}, not true"),
    ("float", ".inf", "must be a finite number, not inf"),
    ("float", ".nan", "must be a finite number, not nan"),
    ("float", "'1.5'", "must be a finite number, not the string '1.5' (leave the quotes off in YAML)"),
    ("float", "'ten'", "must be a finite number, not the string 'ten'"),
    ("float", "[1]", "must be a finite number, not a list"),
    ("boolean", "'true'", "must be true or false, not the string 'true' (leave the quotes off in YAML)"),
    ("boolean", "'yes'", "must be true or false, not the string 'yes'"),
    ("boolean", "1", "must be true or false, not 1"),
    ("string", "12", "must be a string of at most 1000 characters, not 12 (quote numbers and booleans in YAML)"),
    ("string", "false", "must be a string of at most 1000 characters, not false (quote numbers and booleans in YAML)"),
    ("string", "{a: b}", "must be a string of at most 1000 characters, not a mapping"),
    ("string", "'" + "x" * 1001 + "'", "must be a string of at most 1000 characters"),
    ("string", '"a\\x07b"', "must not contain control characters"),
    ("string", '"tab\\there"', "must not contain control characters"),
    ("object", "[a, b]", "must be an object (a mapping), not a list"),
    ("object", "'{\"a\": 1}'", "must be an object (a mapping), not the string '{\"a\": 1}'"),
    ("object", "{1: one}", "must have strings as keys, not 1"),
    ("object", "{label: Buy, on: true}", "must have strings as keys, not true (quote it in YAML)"),
    ("object", "{a: .nan}", "must hold finite numbers only"),
    ("object", "{a: 2026-12-01}", "must hold JSON values only, not date"),
    ("object", '{a: "\\x1b[2J"}', "must not contain control characters in its strings"),
    ("object", '{"\\0": 1}', "must not contain control characters in its strings"),
    ("object", '{a: ["\\ud800"]}', "must be valid Unicode (no lone surrogates) in its strings"),
    ("object", "{a: [[[[[[[[[[1]]]]]]]]]]}", "must be nested at most 10 deep"),
    ("object", "{a: '" + "x" * 16 * 1024 + "'}", "must take at most 16 KiB as compact JSON"),
]


@pytest.mark.parametrize(("value_type", "written", "message"), REFUSED)
def test_read__value_not_of_its_type__refused_on_its_field(value_type, written, message):
    errors = parse_errors(typed(value_type, (a_value(value_type), written)))

    assert [error for error in errors if "spec.variants.1.value" in error] == [
        f"v.yaml: document 2: spec.variants.1.value: {message}"
    ], errors


def test_read__object_at_the_limits__taken():
    # 10 deep counting the object itself, and 16 KiB exactly as compact UTF-8 JSON (é takes 2 bytes)
    deepest = "{a: [[[[[[[[[1]]]]]]]]]}"
    padding = 16 * 1024 - len('{"a":""}')
    largest = "{a: '" + "é" * (padding // 2) + "x" * (padding % 2) + "'}"

    (_, spec) = resources_parse(typed("object", (deepest, largest)), file="v.yaml")

    assert spec.variants[0].value == {"a": [[[[[[[[[1]]]]]]]]]}
    assert len(spec.variants[1].value["a"].encode()) == padding


def test_read__string_of_1000_characters__taken():
    (_, spec) = resources_parse(typed("string", ("'" + "é" * 1000 + "'", "''")), file="v.yaml")

    assert spec.variants[0].value == "é" * 1000


@pytest.mark.parametrize("written", ["1", "null", "{a: 1}", "''"])
def test_read__value_without_value_type__refused_on_the_value(written):
    errors = parse_errors(valued_yaml((None, written)))

    assert errors == [
        "v.yaml: document 2: spec.variants.1.value: is allowed only with spec.valueType "
        "(set one, or leave the value out)"
    ]


@pytest.mark.parametrize(
    ("value_type", "wanted"),
    [
        ("string", "a string of at most 1000 characters"),
        ("boolean", "true or false"),
        ("integer", f"an integer {BOUNDS}"),
        ("float", "a finite number"),
        ("object", "an object (a mapping)"),
    ],
)
@pytest.mark.parametrize("written", [None, "null"])
def test_read__value_type_and_a_variant_without_value__refused_as_required(value_type, wanted, written):
    errors = parse_errors(typed(value_type, (a_value(value_type), written)))

    assert errors == [f"v.yaml: document 2: spec.variants.1.value: is required: {wanted}"]


@pytest.mark.parametrize(
    ("written", "given"),
    [("int", "the string 'int'"), ("Integer", "the string 'Integer'"), ("''", "the string ''"), ("1", "1")],
)
def test_read__value_type_not_a_type__refused_on_it_and_the_values_not_judged(written, given):
    errors = parse_errors(typed(written, ("1", "2")))

    assert errors == [
        "v.yaml: document 2: spec.valueType: must be one of string, boolean, integer, float, object "
        f"(leave it out for none), not {given}"
    ]


@pytest.mark.parametrize("written", ["'false'", "0", "null", "[true]"])
def test_read__bulk_evaluation_not_a_boolean__refused_on_it(written):
    errors = parse_errors(valued_yaml((None, None), spec=f"  bulkEvaluation: {written}\n"))

    assert errors == ["v.yaml: document 2: spec.bulkEvaluation: must be true or false"]


def test_read__every_problem_of_the_values__listed_at_once():
    errors = parse_errors(typed("integer", ("'1'", None), extra="  bulkEvaluation: 'no'\n"))

    assert errors == [
        "v.yaml: document 2: spec.bulkEvaluation: must be true or false",
        f"v.yaml: document 2: spec.variants.0.value: must be an integer {BOUNDS}, not the string '1' "
        "(leave the quotes off in YAML)",
        f"v.yaml: document 2: spec.variants.1.value: is required: an integer {BOUNDS}",
    ]


# --- the apply: a value is configuration ---


def test_apply__value_changed_while_active_with_assignments__updated_in_history_no_cohort_no_move(db):
    # Given an active experiment with values, and a subject assigned to green
    apply_yaml(typed("object", ("{label: Buy}", "{label: Buy now}")))
    assigned = AssignmentFactory(experiment=exp(), variant=Variant.objects.get(key="green"), subject_id="u-1")

    # When green's value changes
    result = outcome(typed("object", ("{label: Buy}", "{label: Buy now, color: '#00aa00'}")))

    # Then it is a change, recorded, that starts no cohort and moves no one
    assert result == "updated"
    assert exp().resource_version == 2
    assert stored_values() == [{"label": "Buy"}, {"label": "Buy now", "color": "#00aa00"}]
    assert list(Cohort.objects.filter(experiment=exp()).values_list("number", flat=True)) == [1]
    assert list(Assignment.objects.values_list("subject_id", "variant__key", "cohort")) == [("u-1", "green", 1)]
    assert Assignment.objects.get().pk == assigned.pk
    _, second = history()
    assert second.resource_version == 2
    assert [v["value"] for v in second.before["spec"]["variants"]] == [{"label": "Buy"}, {"label": "Buy now"}]
    assert [v["value"] for v in second.after["spec"]["variants"]] == [
        {"label": "Buy"},
        {"label": "Buy now", "color": "#00aa00"},
    ]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (typed("integer", ("1", "2")), typed("float", ("1", "2"))),
        (typed("integer", ("1", "2")), typed("integer", ("1", "3"))),
        (typed("object", ("{a: 1}", "{}")), typed("object", ("{a: 1.0}", "{}"))),
        (typed("string", ("a", "b")), typed("string", ("a", "b"), extra="  bulkEvaluation: false\n")),
        (valued_yaml((None, None)), typed("boolean", ("false", "true"))),
        (typed("boolean", ("false", "true")), valued_yaml((None, None))),
    ],
    ids=["integer to float", "a value", "1 to 1.0 in an object", "bulkEvaluation", "a type added", "removed"],
)
def test_apply__value_type_value_or_bulk_evaluation_changed__one_version_no_cohort(db, before, after):
    apply_yaml(before)
    AssignmentFactory(experiment=exp(), variant=Variant.objects.get(key="green"))
    cohorts = list(Cohort.objects.filter(experiment=exp()).values_list("number", "splits", "population"))

    assert outcome(after) == "updated"
    assert outcome(after) == "unchanged"

    assert [change.resource_version for change in history()] == [1, 2]
    assert list(Cohort.objects.filter(experiment=exp()).values_list("number", "splits", "population")) == cohorts
    expected = [variant.value for variant in resources_parse(after, file="v.yaml")[1].variants]
    # Stored of the type: the integers become floats, the object's 1 its 1.0
    assert [(type(value), value) for value in stored_values()] == [(type(value), value) for value in expected]


@pytest.mark.parametrize(("value_type", "written", "expected"), ACCEPTED)
def test_apply__same_document_again__unchanged_and_no_history(db, value_type, written, expected):
    apply_yaml(typed(value_type, written, extra="  bulkEvaluation: false\n"))

    assert outcome(typed(value_type, written, extra="  bulkEvaluation: false\n")) == "unchanged"
    assert len(history()) == 1


def test_apply__integer_value_written_2_0_then_2__unchanged(db):
    apply_yaml(typed("integer", ("2.0", "3")))

    assert outcome(typed("integer", ("2", "3.0"))) == "unchanged"


def test_apply__lifecycle_transition__keeps_the_values(db):
    apply_yaml(typed("float", ("1", "2.5"), extra="  bulkEvaluation: false\n"))

    result = experiment_transition(experiment=exp(), status="ended", actor=Actor.staff("alice"))

    assert result.outcome == "updated"
    assert (exp().status, exp().value_type, exp().bulk_evaluation) == ("ended", "float", False)
    assert stored_values() == [1.0, 2.5]
    assert history()[-1].after["spec"]["valueType"] == "float"


def test_apply__refused_value__nothing_written(db):
    apply_yaml(typed("integer", ("1", "2")))

    with pytest.raises(ResourceInvalid):
        apply_yaml(typed("integer", ("1", "2.5")))

    assert (stored_values(), exp().resource_version, len(history())) == ([1, 2], 1, 1)


# --- the export and the history ---


@pytest.mark.parametrize(("value_type", "written", "expected"), ACCEPTED)
def test_export__every_value_type__written_as_stored_and_applied_again_unchanged(db, value_type, written, expected):
    apply_yaml(typed(value_type, written))

    exported = export_text("--kind", "experiment")
    (document,) = yaml.safe_load_all(exported)

    assert document["spec"]["valueType"] == value_type
    assert "bulkEvaluation" not in document["spec"]
    values = [variant["value"] for variant in document["spec"]["variants"]]
    assert values == expected
    assert [type(value) for value in values] == [type(value) for value in expected]
    assert list(document["spec"])[-2:] == ["valueType", "variants"]
    assert list(document["spec"]["variants"][0]) == ["id", "control", "split", "value"]
    assert outcome(USER + "---\n" + exported) == "unchanged"
    assert export_text("--kind", "experiment") == exported


def test_export__float_1_0_and_object_with_null__written_so_yaml_reads_them_back_the_same(db):
    apply_yaml(typed("float", ("1", "1.0e+20"), key="price"))
    apply_yaml(typed("object", ("{label: Buy, icon: null}", "{a: {b: [null, 1.0, 1]}}"), key="button"))

    exported = export_text("--kind", "experiment")

    assert "    value: 1.0\n" in exported and "    value: 1.0e+20\n" in exported
    assert "      icon: null\n" in exported
    documents = {document["metadata"]["id"]: document for document in yaml.safe_load_all(exported)}
    price = [variant["value"] for variant in documents["price"]["spec"]["variants"]]
    button = [variant["value"] for variant in documents["button"]["spec"]["variants"]]
    assert [(type(value), value) for value in price] == [(float, 1.0), (float, 1e20)]
    assert button == [{"label": "Buy", "icon": None}, {"a": {"b": [None, 1.0, 1]}}]
    assert [type(item) for item in button[1]["a"]["b"]] == [type(None), float, int]


def test_export__bulk_evaluation_false__written_and_applied_again_unchanged(db):
    apply_yaml(valued_yaml((None, None), spec="  bulkEvaluation: false\n"))

    exported = export_text("--kind", "experiment")

    (document,) = yaml.safe_load_all(exported)
    assert document["spec"]["bulkEvaluation"] is False
    assert "valueType" not in document["spec"]
    assert all("value" not in variant for variant in document["spec"]["variants"])
    assert outcome(USER + "---\n" + exported) == "unchanged"


def test_export__document_without_the_fields__exported_without_them(db):
    apply_yaml(valued_yaml((None, None)))

    (document,) = yaml.safe_load_all(export_text("--kind", "experiment"))

    assert not {"valueType", "bulkEvaluation"} & set(document["spec"])
    assert all("value" not in variant for variant in document["spec"]["variants"])


def test_history__value_changed__the_diff_shows_it(db):
    apply_yaml(typed("object", ("{label: Buy}", "{label: Buy now}")))
    apply_yaml(typed("object", ("{label: Buy}", "{label: Buy it}"), extra="  bulkEvaluation: false\n"))

    versions, lines = resource_history("experiment", "exp")

    assert versions == ["2", "1"]
    assert "-      label: Buy now" in lines and "+      label: Buy it" in lines
    assert "+  bulkEvaluation: false" in lines
    assert "+  valueType: object" in lines  # in the creation's diff, every line is added


# --- holdouts have no values ---


@pytest.mark.parametrize(
    ("field", "value"), [("valueType", "string"), ("bulkEvaluation", False), ("value", 1), ("variants", [])]
)
def test_holdout__value_fields__refused_as_unknown(field, value):
    document = holdout("h1")
    document["spec"][field] = value

    with pytest.raises(ResourceInvalid) as caught:
        resources_parse(yaml.safe_dump(document), file="h.yaml")

    assert caught.value.errors == [
        f"h.yaml: document 1: spec.{field}: unknown field; allowed: salt, scope, share, subjectType"
    ]


def test_holdout__exported_without_values_and_its_variants_have_none(db):
    valued = experiment_document("exp", holdouts=["h1"])
    valued["spec"]["valueType"] = "integer"
    for position, variant in enumerate(valued["spec"]["variants"]):
        variant["value"] = position
    apply_resources(subject_type("user"), holdout("h1"), valued)

    documents = {d["metadata"]["id"]: d for d in yaml.safe_load_all(export_text())}

    assert set(documents["h1"]["spec"]) == {"subjectType", "share", "salt"}
    assert list(Variant.objects.filter(experiment__key="h1").values_list("value", flat=True)) == [None, None]
    assert stored_values() == [0, 1]
