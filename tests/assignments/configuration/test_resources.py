"""assignments/configuration/resources.py: configuration as code (docs/reference/resources.md), parsing,
validation and the apply's rules; and who enters an experiment as configuration: a subject type's attributes and
an experiment's enrollment window, targeting and coverage, what apply_resources refuses and accepts, the
cohorts and history their changes make."""

from __future__ import annotations

import datetime as dt
import io
import math

import pytest
from django.core.management import call_command

from assignments.assigning import assign_subjects
from assignments.configuration.resources import ResourceInvalid, resources_parse
from assignments.models import Assignment, Cohort, Experiment, Lab, ResourceChange, SubjectType, Variant
from tests.helpers.processes import run_manage
from tests.helpers.resources import (
    apply_file,
    apply_resources,
    apply_yaml,
    cohort_rules,
    database_rows,
    experiment,
    lab,
    refusal,
    split_variants,
    subject_type,
    variant,
    yaml_documents,
)

# The parser's own tests: the YAML text is their subject (syntax, quoting, the document and field an error
# names), so it is written out here rather than built with tests.helpers.resources.
USER = """
schemaVersion: 1
kind: subjecttype
metadata: {id: user}
"""


def variants_yaml(*items: str) -> str:
    """The `variants` list of an experiment document, one flow mapping per item."""
    return "\n".join(f"    - {{{item}}}" for item in items)


def experiment_doc(
    *,
    key: str = "exp",
    status: str = "active",
    variants: str = variants_yaml("id: control, control: true, split: 0.5", "id: green, split: 0.5"),
    spec_extra: str = "",
    metadata_extra: str = "",
    subject_type: str = "user",
) -> str:
    return f"""
schemaVersion: 1
kind: experiment
metadata: {{id: {key}, status: {status}{metadata_extra}}}
spec:
  subjectType: {subject_type}
{spec_extra}  variants:
{variants}
"""


def apply(*documents: str, dry_run: bool = False) -> list[str]:
    return [str(result) for result in apply_yaml("\n---\n".join(documents), dry_run=dry_run)]


def apply_errors(*documents: str) -> list[str]:
    with pytest.raises(ResourceInvalid) as caught:
        apply_yaml("\n---\n".join(documents))
    return caught.value.errors


def parse_errors(text: str) -> list[str]:
    with pytest.raises(ResourceInvalid) as caught:
        resources_parse(text, file="bad.yaml")
    return caught.value.errors


def stored_experiment(key: str = "exp") -> Experiment:
    return Experiment.objects.get(key__iexact=key)


def cohorts(key: str = "exp") -> list[tuple[int, list]]:
    return list(
        Cohort.objects.filter(experiment=stored_experiment(key)).order_by("number").values_list("number", "splits")
    )


# --- parsing: each rule, with file, document and field in the message ---


def test_parse__full_example__every_field_read():
    text = """
schemaVersion: 1
kind: subjecttype
metadata:
  id: user
  name: Logged-in user
  description: People with an account
  status: active
---
schemaVersion: 1
kind: lab
metadata: {id: growth, name: Growth team}
---
schemaVersion: 1
kind: experiment
metadata:
  id: checkout-button
  name: Checkout button colour
  status: winner_declared
  parentId: growth
spec:
  subjectType: user
  hypothesis: A green button raises checkout rate
  salt: my-salt
  winningVariant: green
  followLinks: true
  variants:
    - id: control
      control: true
      split: 0.5
    - id: green
      name: Green
      description: The green one
      split: 0.5
"""
    subject_type, lab, exp = resources_parse(text, file="f.yaml")

    assert (subject_type.key, subject_type.name, subject_type.description, subject_type.status) == (
        "user",
        "Logged-in user",
        "People with an account",
        "active",
    )
    assert (lab.key, lab.name, lab.description) == ("growth", "Growth team", "")
    assert (exp.key, exp.name, exp.status, exp.lab, exp.subject_type) == (
        "checkout-button",
        "Checkout button colour",
        "winner_declared",
        "growth",
        "user",
    )
    assert (exp.hypothesis, exp.salt, exp.winning_variant, exp.follow_links) == (
        "A green button raises checkout rate",
        "my-salt",
        "green",
        True,
    )
    assert [(v.key, v.name, v.description, v.is_control, v.split) for v in exp.variants] == [
        ("control", "", "", True, 0.5),
        ("green", "Green", "The green one", False, 0.5),
    ]


def test_parse__optional_fields_omitted__documented_defaults():
    (exp,) = resources_parse(experiment_doc(key="Checkout-Button", status="draft"), file="f.yaml")
    (plain,) = resources_parse(
        "schemaVersion: 1\nkind: experiment\nmetadata: {id: e2}\nspec:\n  subjectType: user\n"
        "  variants: [{id: a, control: true, split: 0.5}, {id: b, split: 0.5}]",
        file="f.yaml",
    )

    assert exp.name == "Checkout-Button"
    assert exp.effective_salt == "checkout-button"
    assert exp.follow_links is False
    assert plain.status == "draft"
    assert plain.lab == "default"
    (subject_type,) = resources_parse("schemaVersion: 1\nkind: subjecttype\nmetadata: {id: device}", file="f.yaml")
    assert (subject_type.name, subject_type.status) == ("device", "active")


BAD_EXPERIMENTS = [
    # (what the spec says, the YAML variants/extras, the field the error must name)
    ("one variant", {"variants": variants_yaml("id: a, control: true, split: 1")}, "spec.variants"),
    (
        "duplicate variant IDs ignoring case",
        {"variants": variants_yaml("id: a, control: true, split: 0.5", "id: A, split: 0.5")},
        "spec.variants.1.id",
    ),
    ("no control", {"variants": variants_yaml("id: a, split: 0.5", "id: b, split: 0.5")}, "spec.variants"),
    (
        "two controls",
        {"variants": variants_yaml("id: a, control: true, split: 0.5", "id: b, control: true, split: 0.5")},
        "spec.variants",
    ),
    (
        "splits sum to 0.9",
        {"variants": variants_yaml("id: a, control: true, split: 0.4", "id: b, split: 0.5")},
        "spec.variants",
    ),
    (
        "splits sum to 1 + 2e-6",
        {"variants": variants_yaml("id: a, control: true, split: 0.500002", "id: b, split: 0.5")},
        "spec.variants",
    ),
    (
        "split above 1",
        {"variants": variants_yaml("id: a, control: true, split: 1.5", "id: b, split: -0.5")},
        "spec.variants.0.split",
    ),
    (
        "negative split",
        {"variants": variants_yaml("id: a, control: true, split: 1.5", "id: b, split: -0.5")},
        "spec.variants.1.split",
    ),
    (
        "split as a string",
        {"variants": variants_yaml("id: a, control: true, split: '0.5'", "id: b, split: 0.5")},
        "spec.variants.0.split",
    ),
    (
        "split as a boolean",
        {"variants": variants_yaml("id: a, control: true, split: true", "id: b, split: 0")},
        "spec.variants.0.split",
    ),
    (
        "split missing",
        {"variants": variants_yaml("id: a, control: true", "id: b, split: 1")},
        "spec.variants.0.split",
    ),
    (
        "split not finite",
        {"variants": variants_yaml("id: a, control: true, split: .nan", "id: b, split: 1")},
        "spec.variants.0.split",
    ),
    (
        "control not a boolean",
        {"variants": variants_yaml("id: a, control: 'yes', split: 0.5", "id: b, split: 0.5")},
        "spec.variants.0.control",
    ),
    (
        "variant ID missing",
        {"variants": variants_yaml("control: true, split: 0.5", "id: b, split: 0.5")},
        "spec.variants.0.id",
    ),
    (
        "variant ID with a space",
        {"variants": variants_yaml("id: 'a b', control: true, split: 0.5", "id: b, split: 0.5")},
        "spec.variants.0.id",
    ),
    (
        "unknown variant field",
        {"variants": variants_yaml("id: a, control: true, split: 0.5, weight: 1", "id: b, split: 0.5")},
        "spec.variants.0.weight",
    ),
    ("unknown spec field", {"spec_extra": "  owner: me\n"}, "spec.owner"),
    ("unknown metadata field", {"metadata_extra": ", labels: x"}, "metadata.labels"),
    ("bad status", {"status": "running"}, "metadata.status"),
    ("winner without winner_declared", {"spec_extra": "  winningVariant: a\n"}, "spec.winningVariant"),
    ("winner_declared without winner", {"status": "winner_declared"}, "spec.winningVariant"),
    (
        "winner names no variant",
        {"status": "winner_declared", "spec_extra": "  winningVariant: blue\n"},
        "spec.winningVariant",
    ),
    ("empty salt", {"spec_extra": "  salt: ''\n"}, "spec.salt"),
    ("salt not a string", {"spec_extra": "  salt: 12\n"}, "spec.salt"),
    ("followLinks as a string", {"spec_extra": "  followLinks: 'true'\n"}, "spec.followLinks"),
    ("followLinks as a number", {"spec_extra": "  followLinks: 1\n"}, "spec.followLinks"),
    ("subject type not an ID", {"subject_type": "'-user'"}, "spec.subjectType"),
    ("parent not an ID", {"metadata_extra": ", parentId: 'a/b'"}, "metadata.parentId"),
    ("resourceVersion zero", {"metadata_extra": ", resourceVersion: 0"}, "metadata.resourceVersion"),
    ("experiment ID of 101 characters", {"key": "e" * 101}, "metadata.id"),
    ("experiment ID starting with a dot", {"key": "'.exp'"}, "metadata.id"),
    ("experiment ID as a number", {"key": "123"}, "metadata.id"),
    ("experiment ID with a trailing newline", {"key": '"exp\\n"'}, "metadata.id"),
    (
        "variant ID with a trailing newline",
        {"variants": variants_yaml('id: "a\\n", control: true, split: 1', "id: b, split: 0")},
        "spec.variants.0.id",
    ),
    ("subject type with a trailing newline", {"subject_type": '"user\\n"'}, "spec.subjectType"),
]


@pytest.mark.parametrize(("rule", "changes", "field"), BAD_EXPERIMENTS, ids=[case[0] for case in BAD_EXPERIMENTS])
def test_parse__experiment_breaking_a_rule__error_names_file_document_and_field(rule, changes, field):
    # Given the broken experiment as the second document of a file
    changes = dict(changes)
    if "variants" not in changes:
        changes["variants"] = variants_yaml("id: a, control: true, split: 0.5", "id: b, split: 0.5")
    text = USER + "---" + experiment_doc(**changes)

    errors = parse_errors(text)

    assert any(error.startswith(f"bad.yaml: document 2: {field}: ") for error in errors), errors


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("schemaVersion: 2\nkind: lab\nmetadata: {id: x}", "schemaVersion"),
        ("kind: lab\nmetadata: {id: x}", "schemaVersion"),
        ("schemaVersion: 1\nkind: team\nmetadata: {id: x}", "kind"),
        ("schemaVersion: 1\nkind: lab\nmetadata: {id: x}\nextra: 1", "extra"),
        ("schemaVersion: 1\nkind: lab\nmetadata: {id: x}\nspec: {}", "spec"),
        ("schemaVersion: 1\nkind: lab\nmetadata: {id: x, status: active}", "metadata.status"),
        ("schemaVersion: 1\nkind: lab", "metadata"),
        ("schemaVersion: 1\nkind: lab\nmetadata: {name: x}", "metadata.id"),
        ("schemaVersion: 1\nkind: lab\nmetadata: {id: x, name: 5}", "metadata.name"),
        ("schemaVersion: 1\nkind: subjecttype\nmetadata: {id: x, status: retired}", "metadata.status"),
        ("schemaVersion: 1\nkind: subjecttype\nmetadata: {id: x, owner: me}", "metadata.owner"),
        ("schemaVersion: 1\nkind: subjecttype\nmetadata: {id: 'x y'}", "metadata.id"),
        ("schemaVersion: 1\nkind: subjecttype\nmetadata: {id: true}", "metadata.id"),
    ],
)
def test_parse__plain_resource_breaking_a_rule__error_names_document_and_field(text, field):
    errors = parse_errors(USER + "---\n" + text)
    assert any(error.startswith(f"bad.yaml: document 2: {field}: ") for error in errors), errors


# YAML double-quoted escapes: NUL, the terminal's escape, a C1 control, a lone surrogate.
UNSTORABLE = [
    ("\\0", "U+0000 at character 2 (the database cannot store NUL)"),
    ("\\e[2J", "U+001B at character 2 (invisible where the text is shown)"),
    ("\\x85", "U+0085 at character 2 (invisible where the text is shown)"),
    ("\\uD800", "must be valid Unicode: a lone surrogate U+D800 at character 2"),
]
FREE_TEXT_FIELDS = [
    ("metadata.name", {"metadata_extra": ', name: "a%sb"'}),
    ("metadata.description", {"metadata_extra": ', description: "a%sb"'}),
    ("spec.hypothesis", {"spec_extra": '  hypothesis: "a%sb"\n'}),
    (
        "spec.variants.1.name",
        {"variants": variants_yaml("id: a, control: true, split: 0.5", 'id: b, split: 0.5, name: "a%sb"')},
    ),
    (
        "spec.variants.0.description",
        {"variants": variants_yaml('id: a, control: true, split: 0.5, description: "a%sb"', "id: b, split: 0.5")},
    ),
]


@pytest.mark.parametrize(("escape", "why"), UNSTORABLE, ids=["nul", "escape", "c1", "surrogate"])
@pytest.mark.parametrize(("field", "changes"), FREE_TEXT_FIELDS, ids=[case[0] for case in FREE_TEXT_FIELDS])
def test_parse__control_character_in_free_text__error_names_document_field_character_and_why(
    field, changes, escape, why
):
    changes = {name: value % escape for name, value in changes.items()}

    errors = parse_errors(USER + "---" + experiment_doc(**changes))

    assert len(errors) == 1 and errors[0].startswith(f"bad.yaml: document 2: {field}: "), errors
    assert errors[0].endswith(why)
    if "surrogate" not in why:
        assert "must not contain control characters other than tab and line breaks" in errors[0]


@pytest.mark.parametrize("kind", ["lab", "subjecttype"])
def test_parse__nul_in_a_plain_resource__error_names_document_and_field(kind):
    errors = parse_errors(USER + f'---\nschemaVersion: 1\nkind: {kind}\nmetadata: {{id: x, description: "\\0"}}')

    assert errors == [
        "bad.yaml: document 2: metadata.description: must not contain control characters other than tab "
        "and line breaks: U+0000 at character 1 (the database cannot store NUL)"
    ]


def test_parse__tab_and_line_breaks_in_free_text__kept_exactly():
    text = experiment_doc(
        metadata_extra=', name: "a\\tb", description: "one\\r\\ntwo\\nthree"',
        spec_extra='  hypothesis: "x\\ty"\n',
    )

    (spec,) = resources_parse(text, file="good.yaml")

    assert (spec.name, spec.description, spec.hypothesis) == ("a\tb", "one\r\ntwo\nthree", "x\ty")


@pytest.mark.parametrize("escape", ["\\0", "\\t", "\\n", "\\x7f"])
def test_parse__control_character_in_salt__refused_even_tab_and_line_breaks(escape):
    errors = parse_errors(USER + "---" + experiment_doc(spec_extra=f'  salt: "s{escape}"\n'))

    assert len(errors) == 1 and errors[0].startswith("bad.yaml: document 2: spec.salt: must not contain control"), (
        errors
    )


def test_parse__several_problems__all_reported_at_once():
    text = "schemaVersion: 1\nkind: lab\nmetadata: {id: x, colour: red}\n---\nschemaVersion: 1\nkind: lab\nmetadata: {}"
    errors = parse_errors(text)
    assert any("document 1: metadata.colour" in error for error in errors)
    assert any("document 2: metadata.id" in error for error in errors)


def test_parse__not_yaml__error_names_the_file():
    assert parse_errors("a: [unclosed")[0].startswith("bad.yaml: not valid YAML")


def test_parse__splits_summing_to_one_within_1e_6__accepted():
    variants = variants_yaml("id: a, control: true, split: 0.5", "id: b, split: 0.4999995")
    (spec,) = resources_parse(experiment_doc(variants=variants), file="f.yaml")
    assert [v.split for v in spec.variants] == [0.5, 0.4999995]


def test_parse__integer_splits_and_100_character_ids__accepted():
    variants = variants_yaml("id: a, control: true, split: 0", "id: " + "B" * 100 + ", split: 1")
    (spec,) = resources_parse(experiment_doc(key="x" * 100, variants=variants), file="f.yaml")
    assert spec.key == "x" * 100
    assert [v.split for v in spec.variants] == [0.0, 1.0]


# --- apply: references, uniqueness, outcomes and resourceVersion ---


def test_apply__experiment_before_its_subject_type_and_lab_in_one_file__references_resolved(db):
    lab = "schemaVersion: 1\nkind: lab\nmetadata: {id: growth}\n"
    exp = experiment_doc(metadata_extra=", parentId: GROWTH", subject_type="Device")
    device = "schemaVersion: 1\nkind: subjecttype\nmetadata: {id: device}\n"

    outcomes = apply(exp, lab, device)

    # Then the results are listed in document order, and the references are matched ignoring case
    assert outcomes == ["experiment exp: created", "lab growth: created", "subjecttype device: created"]
    assert (stored_experiment().lab.key, stored_experiment().subject_type.key) == ("growth", "device")


def test_apply__unknown_subject_type_or_lab__rejected_and_nothing_written(db):
    errors = apply_errors(USER, experiment_doc(subject_type="device", metadata_extra=", parentId: nolab"))

    assert any("spec.subjectType" in error and "device" in error for error in errors)
    assert any("metadata.parentId" in error and "nolab" in error for error in errors)
    assert not SubjectType.objects.exists()
    assert not Experiment.objects.exists()


def test_apply__no_parent__goes_to_the_default_lab(db):
    apply(USER, experiment_doc())
    assert stored_experiment().lab.key == "default"


@pytest.mark.parametrize("kind", ["subjecttype", "lab"])
def test_apply__same_id_twice_differing_only_in_case__rejected(db, kind):
    documents = [f"schemaVersion: 1\nkind: {kind}\nmetadata: {{id: {key}}}\n" for key in ("team", "Team")]
    errors = apply_errors(*documents)
    assert any("document 2" in error and "already defined" in error and "document 1" in error for error in errors)
    assert not SubjectType.objects.filter(key__iexact="team").exists()
    assert not Lab.objects.filter(key__iexact="team").exists()


def test_apply__two_experiments_differing_only_in_case__rejected(db):
    errors = apply_errors(USER, experiment_doc(key="exp"), experiment_doc(key="EXP"))
    assert any("already defined" in error for error in errors)
    assert not Experiment.objects.exists()


def test_apply__same_id_for_different_kinds__allowed(db):
    outcomes = apply(
        "schemaVersion: 1\nkind: subjecttype\nmetadata: {id: team}\n",
        "schemaVersion: 1\nkind: lab\nmetadata: {id: team}\n",
    )
    assert outcomes == ["subjecttype team: created", "lab team: created"]


def test_apply__existing_id_in_other_case__same_resource_renamed_not_duplicated(db):
    apply(USER, experiment_doc())
    subject_type_pk, experiment_pk = SubjectType.objects.get().pk, stored_experiment().pk

    outcomes = apply(USER.replace("id: user", "id: User"), experiment_doc(key="EXP", subject_type="USER"))

    assert outcomes == ["subjecttype User: updated", "experiment EXP: updated"]
    assert list(SubjectType.objects.values_list("pk", "key")) == [(subject_type_pk, "User")]
    assert list(Experiment.objects.values_list("pk", "key")) == [(experiment_pk, "EXP")]


def test_apply__same_documents_again__unchanged_and_versions_kept(db):
    documents = (USER, "schemaVersion: 1\nkind: lab\nmetadata: {id: growth}\n", experiment_doc())
    assert apply(*documents) == ["subjecttype user: created", "lab growth: created", "experiment exp: created"]

    assert apply(*documents) == ["subjecttype user: unchanged", "lab growth: unchanged", "experiment exp: unchanged"]

    assert SubjectType.objects.get().resource_version == 1
    assert Lab.objects.get(key="growth").resource_version == 1
    assert stored_experiment().resource_version == 1


def test_apply__real_changes__resource_version_raised_by_one_each_time(db):
    apply(USER, experiment_doc())

    # A metadata change
    assert apply(USER, experiment_doc(metadata_extra=", name: Renamed")) == [
        "subjecttype user: unchanged",
        "experiment exp: updated",
    ]
    assert stored_experiment().resource_version == 2
    # A change inside a variant only
    variants = variants_yaml("id: control, control: true, split: 0.5, name: Base", "id: green, split: 0.5")
    assert apply(experiment_doc(metadata_extra=", name: Renamed", variants=variants)) == ["experiment exp: updated"]
    assert stored_experiment().resource_version == 3
    # Several changes at once, in the experiment and its variants: still one step
    variants = variants_yaml("id: control, control: true, split: 0.4", "id: green, split: 0.6, description: d")
    apply(experiment_doc(metadata_extra=", name: Again", variants=variants, spec_extra="  hypothesis: h\n"))
    assert stored_experiment().resource_version == 4
    # The same again: nothing
    assert apply(experiment_doc(metadata_extra=", name: Again", variants=variants, spec_extra="  hypothesis: h\n")) == [
        "experiment exp: unchanged"
    ]
    assert stored_experiment().resource_version == 4
    # A subject type's status
    assert apply(USER.replace("{id: user}", "{id: user, status: archived}")) == ["subjecttype user: updated"]
    assert SubjectType.objects.get().resource_version == 2
    assert SubjectType.objects.get().status == "archived"


def test_apply__resource_version_in_the_document__ignored_not_copied(db):
    apply(USER)
    assert apply(USER.replace("{id: user}", "{id: user, resourceVersion: 7}")) == ["subjecttype user: unchanged"]
    assert SubjectType.objects.get().resource_version == 1


def test_apply__control_moved_to_another_variant__one_control_stored(db):
    apply(USER, experiment_doc())
    variants = variants_yaml("id: control, split: 0.5", "id: green, control: true, split: 0.5")

    assert apply(experiment_doc(variants=variants)) == ["experiment exp: updated"]

    assert list(stored_experiment().variants.filter(is_control=True).values_list("key", flat=True)) == ["green"]
    assert stored_experiment().resource_version == 2


def test_apply__control_given_to_a_new_variant__old_one_demoted(db):
    apply(USER, experiment_doc())
    variants = variants_yaml("id: control, split: 0.5", "id: green, split: 0", "id: blue, control: true, split: 0.5")
    apply(experiment_doc(variants=variants))
    assert list(stored_experiment().variants.values_list("key", "is_control", "position")) == [
        ("control", False, 0),
        ("green", False, 1),
        ("blue", True, 2),
    ]


def test_apply__control_removed_and_a_new_variant_made_control__accepted(db):
    apply(USER, experiment_doc())

    apply(experiment_doc(variants=variants_yaml("id: green, split: 0.5", "id: base, control: true, split: 0.5")))

    assert list(stored_experiment().variants.values_list("key", "is_control")) == [("green", False), ("base", True)]
    assert stored_experiment().resource_version == 2


# --- lifecycle ---


@pytest.mark.parametrize(
    "path",
    [
        ["draft", "active", "winner_declared", "ended", "archived"],
        ["draft", "archived"],
        ["draft", "ended"],
        ["active", "ended"],
        ["draft", "winner_declared"],
        ["winner_declared", "archived"],
    ],
    ids="->".join,
)
def test_apply__lifecycle_forward_with_or_without_skipping__accepted(db, path):
    apply(USER)
    for status in path:
        winner = "  winningVariant: green\n" if status == "winner_declared" else ""
        apply(experiment_doc(status=status, spec_extra=winner))
        assert stored_experiment().status == status
    assert stored_experiment().resource_version == len(path)


@pytest.mark.parametrize(
    ("start", "back"),
    [
        ("active", "draft"),
        ("winner_declared", "active"),
        ("ended", "active"),
        ("ended", "winner_declared"),
        ("archived", "ended"),
        ("archived", "draft"),
    ],
)
def test_apply__lifecycle_backwards__rejected_and_nothing_changed(db, start, back):
    def doc(status):
        return experiment_doc(
            status=status, spec_extra="  winningVariant: green\n" if status == "winner_declared" else ""
        )

    apply(USER, doc(start))

    errors = apply_errors(doc(back), "schemaVersion: 1\nkind: lab\nmetadata: {id: side-effect}\n")

    assert any("metadata.status" in error and f"from {start} to {back}" in error for error in errors), errors
    assert stored_experiment().status == start
    assert stored_experiment().resource_version == 1
    assert not Lab.objects.filter(key="side-effect").exists()


def test_apply__winner_declared_then_ended__winner_cleared(db):
    apply(USER, experiment_doc(status="winner_declared", spec_extra="  winningVariant: GREEN\n"))
    assert stored_experiment().winning_variant.key == "green"

    apply(experiment_doc(status="ended"))

    assert stored_experiment().winning_variant is None


def test_apply__declared_winner_without_assignments_removed_on_ending__allowed(db):
    # Given a winner declared straight from draft, so no subject was ever assigned
    variants = variants_yaml("id: control, control: true, split: 0.5", "id: green, split: 0.5", "id: blue, split: 0")
    apply(USER, experiment_doc(status="winner_declared", variants=variants, spec_extra="  winningVariant: blue\n"))

    # When the experiment ends without the winner, which has no assignments
    outcomes = apply(experiment_doc(status="ended"))

    # Then the variant is removed like any other variant without assignments
    assert outcomes == ["experiment exp: updated"]
    assert stored_experiment().winning_variant is None
    assert list(stored_experiment().variants.values_list("key", flat=True)) == ["control", "green"]


def test_apply__declared_winner_without_assignments_replaced_by_another__allowed(db):
    variants = variants_yaml("id: control, control: true, split: 0.5", "id: green, split: 0.5", "id: blue, split: 0")
    apply(USER, experiment_doc(status="winner_declared", variants=variants, spec_extra="  winningVariant: blue\n"))

    apply(experiment_doc(status="winner_declared", spec_extra="  winningVariant: green\n"))

    assert stored_experiment().winning_variant.key == "green"
    assert not Variant.objects.filter(key="blue").exists()


# --- what assignments freeze ---


def test_apply__salt_change_before_any_assignment__accepted(db):
    apply(USER, experiment_doc())
    assert stored_experiment().salt == "exp"

    apply(experiment_doc(spec_extra="  salt: new-salt\n"))

    assert stored_experiment().salt == "new-salt"


def test_apply__salt_change_after_an_assignment__rejected(db):
    apply(USER, experiment_doc(spec_extra="  salt: first\n"))
    assign_subjects(experiment_id="exp", subject_ids=["u1"])

    # Neither a new salt nor dropping it (which means the default, "exp") is allowed
    for spec_extra in ("  salt: second\n", ""):
        errors = apply_errors(experiment_doc(spec_extra=spec_extra))
        assert any("spec.salt" in error for error in errors), errors
    assert stored_experiment().salt == "first"


def test_apply__experiment_id_case_change_with_default_salt__salt_kept_and_accepted(db):
    apply(USER, experiment_doc(key="exp"))
    assign_subjects(experiment_id="exp", subject_ids=["u1"])

    assert apply(experiment_doc(key="Exp")) == ["experiment Exp: updated"]
    assert stored_experiment().salt == "exp"


def test_apply__subject_type_change__accepted_before_assignments_rejected_after(db):
    device = "schemaVersion: 1\nkind: subjecttype\nmetadata: {id: device}\n"
    apply(USER, device, experiment_doc())
    apply(experiment_doc(subject_type="device"))
    assert stored_experiment().subject_type.key == "device"

    assign_subjects(experiment_id="exp", subject_ids=["u1"])
    errors = apply_errors(experiment_doc(subject_type="user"))

    assert any("spec.subjectType" in error and "assignments" in error for error in errors), errors
    assert stored_experiment().subject_type.key == "device"


def test_apply__variant_with_assignments_removed__rejected(db):
    apply(USER, experiment_doc(variants=variants_yaml("id: control, control: true, split: 0", "id: green, split: 1")))
    assign_subjects(experiment_id="exp", subject_ids=["u1"])
    assert Assignment.objects.get().variant.key == "green"

    errors = apply_errors(
        experiment_doc(variants=variants_yaml("id: control, control: true, split: 0.5", "id: blue, split: 0.5"))
    )

    assert any("'green' has assignments and cannot be removed" in error for error in errors), errors
    assert list(stored_experiment().variants.values_list("key", flat=True)) == ["control", "green"]
    assert len(cohorts()) == 1


def test_apply__variant_without_assignments_removed__accepted(db):
    variants = variants_yaml("id: control, control: true, split: 1", "id: green, split: 0", "id: blue, split: 0")
    apply(USER, experiment_doc(variants=variants))
    assign_subjects(experiment_id="exp", subject_ids=["u1", "u2"])

    apply(experiment_doc(variants=variants_yaml("id: control, control: true, split: 0.5", "id: blue, split: 0.5")))

    assert list(stored_experiment().variants.values_list("key", flat=True)) == ["control", "blue"]


def test_apply__variant_with_assignments_renamed_in_case__kept(db):
    apply(USER, experiment_doc())
    assign_subjects(experiment_id="exp", subject_ids=[f"s{index}" for index in range(20)])

    apply(experiment_doc(variants=variants_yaml("id: Control, control: true, split: 0.5", "id: GREEN, split: 0.5")))

    assert list(stored_experiment().variants.values_list("key", flat=True)) == ["Control", "GREEN"]
    assert len(cohorts()) == 1


# --- cohorts ---


def test_apply__split_change_of_an_active_experiment__starts_the_next_cohort(db):
    apply(USER, experiment_doc())
    assert cohorts() == [(1, [{"variant": "control", "split": 0.5}, {"variant": "green", "split": 0.5}])]

    apply(experiment_doc(variants=variants_yaml("id: control, control: true, split: 0.2", "id: green, split: 0.8")))
    apply(experiment_doc(variants=variants_yaml("id: control, control: true, split: 0.2", "id: green, split: 0.8")))

    assert cohorts() == [
        (1, [{"variant": "control", "split": 0.5}, {"variant": "green", "split": 0.5}]),
        (2, [{"variant": "control", "split": 0.2}, {"variant": "green", "split": 0.8}]),
    ]


def test_apply__change_other_than_splits__no_new_cohort(db):
    apply(USER, experiment_doc())
    apply(experiment_doc(metadata_extra=", name: Other", spec_extra="  hypothesis: h\n"))
    apply(
        experiment_doc(
            variants=variants_yaml("id: control, control: true, split: 0.5, name: n", "id: green, split: 0.5")
        )
    )
    assert [number for number, _ in cohorts()] == [1]


def test_apply__follow_links_switched_after_assignments__version_raised_history_kept_no_new_cohort(db):
    # Given an experiment with an assignment
    from assignments.assigning import assign_subjects
    from assignments.models import ResourceChange

    apply(USER, experiment_doc())
    assign_subjects(experiment_id="exp", subject_ids=["u-1"])

    # When it starts following links (a change for new subjects only)
    assert apply(experiment_doc(spec_extra="  followLinks: true\n")) == ["experiment exp: updated"]

    # Then the option is stored, the version raised and the change recorded; the splits are the same cohort
    stored = stored_experiment()
    assert (stored.follow_links, stored.resource_version) == (True, 2)
    change = ResourceChange.objects.get(kind="experiment", resource_version=2)
    assert (change.before["spec"]["followLinks"], change.after["spec"]["followLinks"]) == (False, True)
    assert [number for number, _ in cohorts()] == [1]
    assert apply(experiment_doc(spec_extra="  followLinks: true\n")) == ["experiment exp: unchanged"]


def test_apply__variant_added_or_reordered_while_active__new_cohort_each_time(db):
    apply(USER, experiment_doc())
    variants = variants_yaml("id: control, control: true, split: 0.5", "id: green, split: 0.5", "id: blue, split: 0")
    apply(experiment_doc(variants=variants))
    apply(experiment_doc(variants=variants_yaml("id: green, split: 0.5", "id: control, control: true, split: 0.5")))
    assert [number for number, _ in cohorts()] == [1, 2, 3]
    assert cohorts()[2][1] == [{"variant": "green", "split": 0.5}, {"variant": "control", "split": 0.5}]


@pytest.mark.parametrize("status", ["ended", "archived"])
def test_apply__split_change_after_active__also_starts_the_next_cohort(db, status):
    apply(USER, experiment_doc())
    apply(experiment_doc(status=status))
    apply(
        experiment_doc(
            status=status, variants=variants_yaml("id: control, control: true, split: 0.1", "id: green, split: 0.9")
        )
    )
    assert [number for number, _ in cohorts()] == [1, 2]


def test_apply__split_change_of_a_draft__corrects_cohort_1(db):
    apply(USER, experiment_doc(status="draft"))

    apply(
        experiment_doc(
            status="draft", variants=variants_yaml("id: control, control: true, split: 0.3", "id: green, split: 0.7")
        )
    )

    assert cohorts() == [(1, [{"variant": "control", "split": 0.3}, {"variant": "green", "split": 0.7}])]
    assert stored_experiment().resource_version == 2


def test_apply__draft_activated_with_new_splits__cohort_1_holds_the_new_splits(db):
    apply(USER, experiment_doc(status="draft"))
    apply(experiment_doc(variants=variants_yaml("id: control, control: true, split: 0.3", "id: green, split: 0.7")))

    assert cohorts() == [(1, [{"variant": "control", "split": 0.3}, {"variant": "green", "split": 0.7}])]
    assert assign_subjects(experiment_id="exp", subject_ids=["u1"]).assignments == {"u1": "green"}
    assert Assignment.objects.get().cohort == 1


# --- all or nothing, dry run ---


def test_apply__one_bad_resource__nothing_of_the_others_written(db):
    apply(USER, experiment_doc())
    good_change = experiment_doc(metadata_extra=", name: Changed")
    new_lab = "schemaVersion: 1\nkind: lab\nmetadata: {id: fresh}\n"
    bad = experiment_doc(key="other", subject_type="nobody")

    apply_errors(good_change, new_lab, bad)

    assert stored_experiment().name == "exp"
    assert stored_experiment().resource_version == 1
    assert not Lab.objects.filter(key="fresh").exists()


def test_apply__dry_run__reports_outcomes_and_changes_nothing(db):
    apply(USER, experiment_doc())
    before = (stored_experiment().name, stored_experiment().resource_version, cohorts())

    outcomes = apply(
        USER,
        experiment_doc(
            metadata_extra=", name: Changed",
            variants=variants_yaml("id: control, control: true, split: 1", "id: green, split: 0"),
        ),
        "schemaVersion: 1\nkind: lab\nmetadata: {id: fresh}\n",
        dry_run=True,
    )

    assert outcomes == ["subjecttype user: unchanged", "experiment exp: updated", "lab fresh: created"]
    assert (stored_experiment().name, stored_experiment().resource_version, cohorts()) == before
    assert not Lab.objects.filter(key="fresh").exists()


def test_apply__dry_run_of_a_bad_change__reports_the_same_errors(db):
    apply(USER, experiment_doc())
    with pytest.raises(ResourceInvalid) as caught:
        apply_yaml(experiment_doc(status="draft"), dry_run=True)
    assert any("metadata.status" in error for error in caught.value.errors)


def test_apply__default_lab_missing_after_a_flush__experiment_without_parent_recreates_it(db):
    # Given a database whose `default` lab is gone (as after `manage.py flush`)
    Lab.objects.filter(key="default").delete()

    # When an experiment without parentId is applied
    results = apply_yaml(
        """
schemaVersion: 1
kind: subjecttype
metadata: {id: user}
---
schemaVersion: 1
kind: experiment
metadata: {id: lonely}
spec:
  subjectType: user
  variants: [{id: a, control: true, split: 0.5}, {id: b, split: 0.5}]
"""
    )

    # Then it lands in a recreated `default` lab
    assert [str(result) for result in results] == ["subjecttype user: created", "experiment lonely: created"]
    assert Experiment.objects.get(key="lonely").lab.key == "default"


# --- who enters: a subject type's attributes, an experiment's enrollment window, targeting and coverage ---


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
        "split-quoted",
        {"variants": [variant("control", "0.5", control=True), variant("green", 0.5)]},
        "spec.variants.0.split: must be a number from 0 to 1, not the string '0.5' (leave the quotes off in YAML)",
    ),
    (
        "variants-one-mapping",
        {"variants": {"id": "control", "split": 1}},
        "spec.variants: must be a list of variants, not a mapping",
    ),
    (
        "version-unquoted",
        {"targeting": [{"attribute": "appVersion", "gte": 2.1}]},
        "experiment 'promo': spec.targeting.0.gte: must be a version (1 to 4 dot-separated non-negative "
        "integers, such as 2.10.1): "
        "'appVersion' is a version attribute; quote it ('2.1'): unquoted, YAML reads 2.10 as the number 2.1",
    ),
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
        "spec.targeting.0.attribute: must be an attribute name matching ^[A-Za-z_][A-Za-z0-9_.-]{0,63}$, "
        "not the string '1country'",
    ),
    (
        "attribute-missing",
        {"targeting": [{"equals": "DE"}]},
        "spec.targeting.0.attribute: is required: an attribute name matching",
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
        "spec.attributes.0.name: must be a name matching ^[A-Za-z_][A-Za-z0-9_.-]{0,63}$, "
        "not the string 'country code'",
    ),
    (
        "unknown-type",
        [{"name": "born", "type": "date"}],
        "spec.attributes.0.type: must be one of string, number, boolean, version, not the string 'date'",
    ),
    ("missing-type", [{"name": "born"}], "spec.attributes.0.type: is required: one of"),
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
