"""Configuration as code (docs/reference/resources.md): parsing, validation and the apply's rules."""

from __future__ import annotations

import pytest

from assignments.assigning import assign_subjects
from assignments.models import Assignment, Cohort, Experiment, Lab, SubjectType, Variant
from assignments.resources import ResourceInvalid, resources_parse
from tests.helpers.resources import apply_yaml

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


def experiment(key: str = "exp") -> Experiment:
    return Experiment.objects.get(key__iexact=key)


def cohorts(key: str = "exp") -> list[tuple[int, list]]:
    return list(Cohort.objects.filter(experiment=experiment(key)).order_by("number").values_list("number", "splits"))


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
    assert (experiment().lab.key, experiment().subject_type.key) == ("growth", "device")


def test_apply__unknown_subject_type_or_lab__rejected_and_nothing_written(db):
    errors = apply_errors(USER, experiment_doc(subject_type="device", metadata_extra=", parentId: nolab"))

    assert any("spec.subjectType" in error and "device" in error for error in errors)
    assert any("metadata.parentId" in error and "nolab" in error for error in errors)
    assert not SubjectType.objects.exists()
    assert not Experiment.objects.exists()


def test_apply__no_parent__goes_to_the_default_lab(db):
    apply(USER, experiment_doc())
    assert experiment().lab.key == "default"


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
    subject_type_pk, experiment_pk = SubjectType.objects.get().pk, experiment().pk

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
    assert experiment().resource_version == 1


def test_apply__real_changes__resource_version_raised_by_one_each_time(db):
    apply(USER, experiment_doc())

    # A metadata change
    assert apply(USER, experiment_doc(metadata_extra=", name: Renamed")) == [
        "subjecttype user: unchanged",
        "experiment exp: updated",
    ]
    assert experiment().resource_version == 2
    # A change inside a variant only
    variants = variants_yaml("id: control, control: true, split: 0.5, name: Base", "id: green, split: 0.5")
    assert apply(experiment_doc(metadata_extra=", name: Renamed", variants=variants)) == ["experiment exp: updated"]
    assert experiment().resource_version == 3
    # Several changes at once, in the experiment and its variants: still one step
    variants = variants_yaml("id: control, control: true, split: 0.4", "id: green, split: 0.6, description: d")
    apply(experiment_doc(metadata_extra=", name: Again", variants=variants, spec_extra="  hypothesis: h\n"))
    assert experiment().resource_version == 4
    # The same again: nothing
    assert apply(experiment_doc(metadata_extra=", name: Again", variants=variants, spec_extra="  hypothesis: h\n")) == [
        "experiment exp: unchanged"
    ]
    assert experiment().resource_version == 4
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

    assert list(experiment().variants.filter(is_control=True).values_list("key", flat=True)) == ["green"]
    assert experiment().resource_version == 2


def test_apply__control_given_to_a_new_variant__old_one_demoted(db):
    apply(USER, experiment_doc())
    variants = variants_yaml("id: control, split: 0.5", "id: green, split: 0", "id: blue, control: true, split: 0.5")
    apply(experiment_doc(variants=variants))
    assert list(experiment().variants.values_list("key", "is_control", "position")) == [
        ("control", False, 0),
        ("green", False, 1),
        ("blue", True, 2),
    ]


def test_apply__control_removed_and_a_new_variant_made_control__accepted(db):
    apply(USER, experiment_doc())

    apply(experiment_doc(variants=variants_yaml("id: green, split: 0.5", "id: base, control: true, split: 0.5")))

    assert list(experiment().variants.values_list("key", "is_control")) == [("green", False), ("base", True)]
    assert experiment().resource_version == 2


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
        assert experiment().status == status
    assert experiment().resource_version == len(path)


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
    assert experiment().status == start
    assert experiment().resource_version == 1
    assert not Lab.objects.filter(key="side-effect").exists()


def test_apply__winner_declared_then_ended__winner_cleared(db):
    apply(USER, experiment_doc(status="winner_declared", spec_extra="  winningVariant: GREEN\n"))
    assert experiment().winning_variant.key == "green"

    apply(experiment_doc(status="ended"))

    assert experiment().winning_variant is None


def test_apply__declared_winner_without_assignments_removed_on_ending__allowed(db):
    # Given a winner declared straight from draft, so no subject was ever assigned
    variants = variants_yaml("id: control, control: true, split: 0.5", "id: green, split: 0.5", "id: blue, split: 0")
    apply(USER, experiment_doc(status="winner_declared", variants=variants, spec_extra="  winningVariant: blue\n"))

    # When the experiment ends without the winner, which has no assignments
    outcomes = apply(experiment_doc(status="ended"))

    # Then the variant is removed like any other variant without assignments
    assert outcomes == ["experiment exp: updated"]
    assert experiment().winning_variant is None
    assert list(experiment().variants.values_list("key", flat=True)) == ["control", "green"]


def test_apply__declared_winner_without_assignments_replaced_by_another__allowed(db):
    variants = variants_yaml("id: control, control: true, split: 0.5", "id: green, split: 0.5", "id: blue, split: 0")
    apply(USER, experiment_doc(status="winner_declared", variants=variants, spec_extra="  winningVariant: blue\n"))

    apply(experiment_doc(status="winner_declared", spec_extra="  winningVariant: green\n"))

    assert experiment().winning_variant.key == "green"
    assert not Variant.objects.filter(key="blue").exists()


# --- what assignments freeze ---


def test_apply__salt_change_before_any_assignment__accepted(db):
    apply(USER, experiment_doc())
    assert experiment().salt == "exp"

    apply(experiment_doc(spec_extra="  salt: new-salt\n"))

    assert experiment().salt == "new-salt"


def test_apply__salt_change_after_an_assignment__rejected(db):
    apply(USER, experiment_doc(spec_extra="  salt: first\n"))
    assign_subjects(experiment_id="exp", subject_ids=["u1"])

    # Neither a new salt nor dropping it (which means the default, "exp") is allowed
    for spec_extra in ("  salt: second\n", ""):
        errors = apply_errors(experiment_doc(spec_extra=spec_extra))
        assert any("spec.salt" in error for error in errors), errors
    assert experiment().salt == "first"


def test_apply__experiment_id_case_change_with_default_salt__salt_kept_and_accepted(db):
    apply(USER, experiment_doc(key="exp"))
    assign_subjects(experiment_id="exp", subject_ids=["u1"])

    assert apply(experiment_doc(key="Exp")) == ["experiment Exp: updated"]
    assert experiment().salt == "exp"


def test_apply__subject_type_change__accepted_before_assignments_rejected_after(db):
    device = "schemaVersion: 1\nkind: subjecttype\nmetadata: {id: device}\n"
    apply(USER, device, experiment_doc())
    apply(experiment_doc(subject_type="device"))
    assert experiment().subject_type.key == "device"

    assign_subjects(experiment_id="exp", subject_ids=["u1"])
    errors = apply_errors(experiment_doc(subject_type="user"))

    assert any("spec.subjectType" in error and "assignments" in error for error in errors), errors
    assert experiment().subject_type.key == "device"


def test_apply__variant_with_assignments_removed__rejected(db):
    apply(USER, experiment_doc(variants=variants_yaml("id: control, control: true, split: 0", "id: green, split: 1")))
    assign_subjects(experiment_id="exp", subject_ids=["u1"])
    assert Assignment.objects.get().variant.key == "green"

    errors = apply_errors(
        experiment_doc(variants=variants_yaml("id: control, control: true, split: 0.5", "id: blue, split: 0.5"))
    )

    assert any("'green' has assignments and cannot be removed" in error for error in errors), errors
    assert list(experiment().variants.values_list("key", flat=True)) == ["control", "green"]
    assert len(cohorts()) == 1


def test_apply__variant_without_assignments_removed__accepted(db):
    variants = variants_yaml("id: control, control: true, split: 1", "id: green, split: 0", "id: blue, split: 0")
    apply(USER, experiment_doc(variants=variants))
    assign_subjects(experiment_id="exp", subject_ids=["u1", "u2"])

    apply(experiment_doc(variants=variants_yaml("id: control, control: true, split: 0.5", "id: blue, split: 0.5")))

    assert list(experiment().variants.values_list("key", flat=True)) == ["control", "blue"]


def test_apply__variant_with_assignments_renamed_in_case__kept(db):
    apply(USER, experiment_doc())
    assign_subjects(experiment_id="exp", subject_ids=[f"s{index}" for index in range(20)])

    apply(experiment_doc(variants=variants_yaml("id: Control, control: true, split: 0.5", "id: GREEN, split: 0.5")))

    assert list(experiment().variants.values_list("key", flat=True)) == ["Control", "GREEN"]
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
    stored = experiment()
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
    assert experiment().resource_version == 2


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

    assert experiment().name == "exp"
    assert experiment().resource_version == 1
    assert not Lab.objects.filter(key="fresh").exists()


def test_apply__dry_run__reports_outcomes_and_changes_nothing(db):
    apply(USER, experiment_doc())
    before = (experiment().name, experiment().resource_version, cohorts())

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
    assert (experiment().name, experiment().resource_version, cohorts()) == before
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
