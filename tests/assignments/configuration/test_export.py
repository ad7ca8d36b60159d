"""assignments/configuration/export.py: `manage.py export_resources`: YAML that apply_resources accepts unchanged
(docs/reference/resources.md)."""

from __future__ import annotations

import pytest
import yaml

from assignments.configuration.resources import resources_parse
from assignments.models import Experiment
from tests.factories import LabFactory
from tests.helpers import resources
from tests.helpers.commands import command_output
from tests.helpers.processes import run_manage_piped_to_head
from tests.helpers.resources import apply_resources, apply_yaml, experiment, export_text, subject_type

# Written out, not built: the export must round-trip this very text. Values chosen to trip a careless
# YAML writer: strings that look like numbers, booleans or null; a colon; several lines; non-ASCII; IDs in
# mixed case; every kind and status; non-dyadic splits; a custom salt; a declared winner.
TRICKY = """
schemaVersion: 1
kind: subjecttype
metadata: {id: User, name: "123", description: "yes", status: active}
---
schemaVersion: 1
kind: subjecttype
metadata: {id: legacy-cookie, name: "null", status: archived}
---
schemaVersion: 1
kind: lab
metadata: {id: Growth.Team, name: "Croissance équipe ☕ 成長", description: "line one\\nline two: with colon"}
---
schemaVersion: 1
kind: experiment
metadata: {id: Checkout-Button, name: "true", status: active, parentId: growth.team, description: "- dash"}
spec:
  subjectType: user
  hypothesis: "A green button: more checkouts"
  salt: "0123"
  variants:
    - {id: Control, control: true, split: 0.1, name: "Base", description: "0.5"}
    - {id: green, split: 0.2}
    - {id: blue_1, split: 0.7}
---
schemaVersion: 1
kind: experiment
metadata: {id: pricing, status: winner_declared}
spec:
  subjectType: USER
  winningVariant: CHEAP
  followLinks: true
  variants:
    - {id: control, control: true, split: 0.333333}
    - {id: cheap, split: 0.333333}
    - {id: dear, split: 0.333334}
---
schemaVersion: 1
kind: experiment
metadata: {id: draft-one}
spec:
  subjectType: legacy-cookie
  variants:
    - {id: a, control: true, split: 1}
    - {id: b, split: 0}
"""


def apply_lines(path) -> list[str]:
    return command_output("apply_resources", str(path)).splitlines()


def round_trip(tmp_path, text: str) -> tuple[list[str], str]:
    """Apply the text through the command, export it and apply the export again: what that second apply printed,
    line by line, and the export."""
    source = tmp_path / "config.yaml"
    source.write_text(text, encoding="utf-8")
    apply_lines(source)
    exported = tmp_path / "export.yaml"
    exported.write_text(export_text(), encoding="utf-8")
    return apply_lines(exported), exported.read_text(encoding="utf-8")


def test_export__round_trip__applying_the_export_reports_only_unchanged(db, tmp_path):
    # Given the tricky configuration, applied through the command
    # When it is exported and the export applied again
    lines, exported = round_trip(tmp_path, TRICKY)

    # Then every resource, the default lab included, is unchanged, and a second export is identical
    assert lines
    assert all(line.endswith(": unchanged") for line in lines), lines
    assert sorted(lines) == sorted(
        [
            "subjecttype User: unchanged",
            "subjecttype legacy-cookie: unchanged",
            "lab default: unchanged",
            "lab Growth.Team: unchanged",
            "experiment Checkout-Button: unchanged",
            "experiment pricing: unchanged",
            "experiment draft-one: unchanged",
        ]
    )
    assert export_text() == exported


def test_export__values__as_stored_and_as_written(db):
    apply_yaml(TRICKY)

    documents = {(d["kind"], d["metadata"]["id"]): d for d in yaml.safe_load_all(export_text())}

    user = documents[("subjecttype", "User")]
    assert user["metadata"] == {
        "id": "User",
        "name": "123",
        "description": "yes",
        "status": "active",
        "resourceVersion": 1,
    }
    assert documents[("lab", "Growth.Team")]["metadata"]["name"] == "Croissance équipe ☕ 成長"
    checkout = documents[("experiment", "Checkout-Button")]
    assert checkout["schemaVersion"] == 1
    assert checkout["metadata"]["name"] == "true"
    assert checkout["metadata"]["parentId"] == "Growth.Team"
    assert checkout["spec"]["subjectType"] == "User"
    assert checkout["spec"]["salt"] == "0123"
    assert checkout["spec"]["variants"] == [
        {"id": "Control", "name": "Base", "description": "0.5", "control": True, "split": 0.1},
        {"id": "green", "control": False, "split": 0.2},
        {"id": "blue_1", "control": False, "split": 0.7},
    ]
    pricing = documents[("experiment", "pricing")]
    assert pricing["spec"]["winningVariant"] == "cheap"
    assert pricing["spec"]["salt"] == "pricing"
    assert (pricing["spec"]["followLinks"], checkout["spec"]["followLinks"]) == (True, False)
    assert "winningVariant" not in documents[("experiment", "draft-one")]["spec"]


def test_export__after_changes__carries_the_current_resource_version(db):
    apply_yaml(TRICKY)
    apply_yaml(TRICKY.replace('name: "true"', 'name: "false"'))

    documents = {d["metadata"]["id"]: d for d in yaml.safe_load_all(export_text("--kind", "experiment"))}

    assert documents["Checkout-Button"]["metadata"]["resourceVersion"] == 2
    assert documents["pricing"]["metadata"]["resourceVersion"] == 1


def test_export__kind_filter__only_that_kind_and_still_parseable(db):
    apply_yaml(TRICKY)

    for kind, expected in [
        ("subjecttype", {"User", "legacy-cookie"}),
        ("lab", {"default", "Growth.Team"}),
        ("experiment", {"Checkout-Button", "pricing", "draft-one"}),
    ]:
        specs = resources_parse(export_text("--kind", kind), file="export.yaml")
        assert {spec.kind for spec in specs} == {kind}
        assert {spec.key for spec in specs} == expected


def test_export__fresh_installation__only_the_default_lab(db):
    (lab,) = resources_parse(export_text(), file="export.yaml")
    assert (lab.kind, lab.key) == ("lab", "default")


def test_export__reapplied_after_assignments__unchanged_and_nothing_frozen_trips(db, tmp_path):
    # Salt, subject type and variants are frozen by assignments; the export must not look like a change to them.
    from assignments.assigning import assign_subjects

    apply_yaml(TRICKY)
    assign_subjects(experiment_id="checkout-button", subject_ids=[f"s{index}" for index in range(100)])
    exported = tmp_path / "export.yaml"
    exported.write_text(export_text(), encoding="utf-8")

    assert all(line.endswith(": unchanged") for line in apply_lines(exported))
    assert Experiment.objects.get(key="Checkout-Button").cohorts.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_export_process__piped_to_a_reader_that_leaves_at_once__stops_quietly_exit_0():
    # Given a configuration to export
    LabFactory.create_batch(50)

    # When the reader goes away before the first line: `export_resources | head -n 0`, under pipefail
    result = run_manage_piped_to_head("export_resources", lines=0)

    # Then the command stops there as `git log | head` does: its own exit status 0, nothing on stderr
    assert (result.returncode, result.stderr, result.stdout) == (0, b"", b"")


def test_export__targeting__each_condition_written_attribute_first_as_in_the_yaml(db):
    # Given conditions whose operator names are shorter than "attribute", which jsonb would put first
    apply_resources(
        resources.subject_type("user", attributes={"country": "string", "seats": "number"}),
        resources.experiment(
            "exp",
            targeting=[
                {"attribute": "country", "in": ["DE"]},
                {"anyOf": [{"attribute": "seats", "gt": 9}, {"attribute": "country", "equals": "AT"}]},
            ],
        ),
    )

    text = export_text("--kind", "experiment")

    assert "  - attribute: country\n    in:\n    - DE\n" in text
    assert "    - attribute: seats\n      gt: 9\n    - attribute: country\n      equals: AT\n" in text


# Written out, not built: a subject type's attributes and an experiment's gates as a person writes them. The
# enrollment times carry an offset other than UTC, quoted and as an unquoted YAML timestamp (which YAML reads as
# a time, not a string); strings that YAML would read as booleans or numbers when unquoted; every operator of
# the targeting table on the types it allows, and an anyOf.
GATES = """
schemaVersion: 1
kind: subjecttype
metadata: {id: user}
spec:
  attributes:
    - {name: country, type: string}
    - {name: plan, type: string}
    - {name: seats, type: number}
    - {name: beta, type: boolean}
    - {name: appVersion, type: version}
---
schemaVersion: 1
kind: experiment
metadata: {id: checkout, status: active}
spec:
  subjectType: user
  enrollment: {startAt: "2026-12-01T09:00:00+01:00", stopAt: 2027-01-15T00:00:00+01:00}
  targeting:
    - {attribute: country, in: [DE, AT, CH]}
    - {attribute: country, notIn: ["NO", "yes"]}
    - {attribute: seats, in: [1, 2.5]}
    - {attribute: seats, notIn: [0]}
    - {attribute: plan, equals: "1.0"}
    - {attribute: seats, equals: 3}
    - {attribute: beta, equals: true}
    - {attribute: appVersion, equals: "2.10"}
    - {attribute: seats, gt: 1}
    - {attribute: seats, gte: 1.5}
    - {attribute: seats, lt: 100}
    - {attribute: seats, lte: 99}
    - {attribute: appVersion, gt: "2"}
    - {attribute: appVersion, gte: "2.3"}
    - {attribute: appVersion, lt: 3.0.0.1}
    - {attribute: appVersion, lte: "2.10.1"}
    - {attribute: plan, exists: true}
    - {attribute: beta, exists: false}
    - anyOf:
        - {attribute: plan, equals: pro}
        - {attribute: seats, gte: 10}
  coverage: 0.2
  variants:
    - {id: control, control: true, split: 0.5}
    - {id: green, split: 0.5}
---
schemaVersion: 1
kind: experiment
metadata: {id: closed-nobody}
spec:
  subjectType: user
  enrollment: {stopAt: "2026-12-01T08:00:00Z"}
  coverage: 0
  variants:
    - {id: control, control: true, split: 0.5}
    - {id: green, split: 0.5}
"""


def test_export__gates__round_trip_unchanged_and_byte_identical(db, tmp_path):
    # Given subject type attributes and every gate, applied through the command
    # When it is exported and the export applied again
    lines, exported = round_trip(tmp_path, GATES)

    # Then nothing changed (no new cohort either), and the export again is the same bytes
    assert sorted(lines) == [
        "experiment checkout: unchanged",
        "experiment closed-nobody: unchanged",
        "lab default: unchanged",
        "subjecttype user: unchanged",
    ]
    assert export_text() == exported
    assert Experiment.objects.get(key="checkout").cohorts.count() == 1


def test_export__gates__documents_shaped_as_written_times_in_utc(db):
    apply_yaml(GATES)

    text = export_text()
    documents = {(d["kind"], d["metadata"]["id"]): d for d in yaml.safe_load_all(text)}

    # The attributes in their order, each {name, type}
    assert documents[("subjecttype", "user")]["spec"] == {
        "attributes": [
            {"name": "country", "type": "string"},
            {"name": "plan", "type": "string"},
            {"name": "seats", "type": "number"},
            {"name": "beta", "type": "boolean"},
            {"name": "appVersion", "type": "version"},
        ]
    }
    checkout = documents[("experiment", "checkout")]["spec"]
    # The gates between followLinks and the variants, in the order of the configuration reference
    assert list(checkout) == [
        "subjectType",
        "hypothesis",
        "salt",
        "followLinks",
        "enrollment",
        "targeting",
        "coverage",
        "variants",
    ]
    # The instants in UTC with Z, whatever offset they were written with
    assert checkout["enrollment"] == {"startAt": "2026-12-01T08:00:00Z", "stopAt": "2027-01-14T23:00:00Z"}
    assert "  enrollment:\n    startAt: '2026-12-01T08:00:00Z'\n    stopAt: '2027-01-14T23:00:00Z'\n" in text
    # Every condition as written, its keys in the order written (the attribute, then its operator), its
    # values of their own type: "NO", "1.0" and "2.10" strings, 2.5 a number
    written = list(yaml.safe_load_all(GATES))[1]["spec"]["targeting"]
    assert checkout["targeting"] == written
    assert [list(condition) for condition in checkout["targeting"]] == [list(condition) for condition in written]
    assert [list(condition) for condition in checkout["targeting"][-1]["anyOf"]] == [
        ["attribute", "equals"],
        ["attribute", "gte"],
    ]
    assert "  - attribute: country\n    notIn:\n    - 'NO'\n    - 'yes'\n" in text
    assert checkout["coverage"] == 0.2
    closed = documents[("experiment", "closed-nobody")]["spec"]
    assert (closed["enrollment"], closed["coverage"]) == ({"stopAt": "2026-12-01T08:00:00Z"}, 0.0)


# The export of a subject type and an experiment that use no gate, exactly as the builds before the gates wrote it.
PLAIN_EXPORT = """\
---
schemaVersion: 1
kind: subjecttype
metadata:
  id: user
  name: user
  description: ''
  status: active
  resourceVersion: 1
---
schemaVersion: 1
kind: lab
metadata:
  id: default
  name: default
  description: ''
  resourceVersion: 1
---
schemaVersion: 1
kind: experiment
metadata:
  id: checkout
  name: checkout
  description: ''
  status: active
  parentId: default
  resourceVersion: 1
spec:
  subjectType: user
  hypothesis: ''
  salt: checkout
  followLinks: false
  variants:
  - id: control
    control: true
    split: 0.5
  - id: green
    control: false
    split: 0.5
"""


def test_export__no_gates__the_same_bytes_as_before_gates_existed(db):
    apply_resources(subject_type("user"), experiment("checkout"))

    assert export_text() == PLAIN_EXPORT
