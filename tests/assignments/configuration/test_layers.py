"""assignments/configuration/layers.py: layers as configuration (docs/reference/resources.md#kind-layer): the
`layer` documents and the experiments' `spec.layer`; what apply_resources refuses and accepts, slots that never
overlap between active experiments, what assignments freeze, the cohorts, the export and the history.

Layers keep their experiments mutually exclusive through every kind of change, and stored assignments never move:
a hypothesis state machine runs random sequences of requests and changes on one layer: activating a draft,
growing slots, ending an experiment (which frees its slots for another), linking identifiers (with an
experiment that follows links), importing and forcing assignments. After every step no subject holds a
`hashed` or `linked` assignment in two active experiments of the layer, and every answer for a stored
assignment is what was stored.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from assignments.assigning import assign_subject, assign_subjects
from assignments.configuration.resources import ResourceInvalid
from assignments.data.forcing import assignments_force
from assignments.data.importing import assignments_import
from assignments.models import Assignment, Experiment, Layer, ResourceChange
from core.cache import caches_clear
from tests.helpers.assignments import assigned_store
from tests.helpers.idlinks import link
from tests.helpers.resources import (
    apply_file,
    apply_resources,
    apply_yaml,
    cohort_rules,
    experiment,
    export_text,
    in_layer,
    layer,
    refusal,
    resource_history,
    subject_type,
)

SPLITS = [{"variant": "control", "split": 0.5}, {"variant": "green", "split": 0.5}]


@pytest.fixture
def flow(db):
    """The subject types `user` and `device`, and the layer `flow` on users."""
    apply_resources(subject_type("user"), subject_type("device"), layer("flow"))


# --- every mistake refused, naming the file, the document, the field and why; nothing applied ---

LAYER_MISTAKES = [
    # (id, the layer document, what the error says after "document 1: ")
    ("no-spec", {"schemaVersion": 1, "kind": "layer", "metadata": {"id": "x"}}, "spec: must be a mapping"),
    ("no-subject-type", {**layer("x"), "spec": {}}, "spec.subjectType: is required"),
    ("unknown-spec-field", {**layer("x"), "spec": {"subjectType": "user", "slots": 100}}, "spec.slots: unknown field"),
    (
        "status",
        {**layer("x"), "metadata": {"id": "x", "status": "active"}},
        "metadata.status: unknown field; allowed: description, id, name, resourceVersion",
    ),
    ("empty-salt", layer("x", salt=""), "spec.salt: must be a non-empty string of at most 200 characters"),
    ("salt-with-a-tab", layer("x", salt="a\tb"), "spec.salt: must not contain control characters"),
    ("bad-id", layer("x y"), "metadata.id: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"),
]


@pytest.mark.parametrize(("document", "expected"), [c[1:] for c in LAYER_MISTAKES], ids=[c[0] for c in LAYER_MISTAKES])
def test_apply_resources__layer_mistake__refused_naming_file_document_field_and_why(flow, tmp_path, document, expected):
    path, errors = refusal(tmp_path, document)

    assert any(line.startswith(f"{path}: document 1: {expected}") for line in errors), errors


PLACEMENT_MISTAKES = [
    # (id, the experiment's spec.layer, what the error says after "document 1: ")
    ("not-a-mapping", "flow", "spec.layer: must be a mapping {id, slots}"),
    ("no-id", {"slots": [[0, 100]]}, "spec.layer.id: is required"),
    ("no-slots", {"id": "flow"}, "spec.layer.slots: must be a non-empty list of [start, end] ranges"),
    ("empty-slots", in_layer("flow"), "spec.layer.slots: must be a non-empty list of [start, end] ranges"),
    ("unknown-field", {**in_layer("flow", [0, 100]), "share": 0.1}, "spec.layer.share: unknown field"),
    ("range-not-a-pair", in_layer("flow", [0, 100], [5]), "spec.layer.slots.1: must be a list of two integers"),
    ("range-of-floats", in_layer("flow", [0.5, 100]), "spec.layer.slots.0: must be a list of two integers"),
    ("empty-range", in_layer("flow", [100, 100]), "spec.layer.slots.0: needs 0 <= start < end <= 10000, got"),
    ("reversed-range", in_layer("flow", [200, 100]), "spec.layer.slots.0: needs 0 <= start < end <= 10000"),
    ("past-10000", in_layer("flow", [9000, 10001]), "spec.layer.slots.0: needs 0 <= start < end <= 10000"),
    (
        "own-ranges-overlap",
        in_layer("flow", [0, 100], [50, 150]),
        "spec.layer.slots: ranges [0, 100] and [50, 150] overlap",
    ),
    ("unknown-layer", in_layer("flows", [0, 100]), "experiment 'promo': spec.layer.id: no layer 'flows'"),
]


@pytest.mark.parametrize(
    ("placement", "expected"), [c[1:] for c in PLACEMENT_MISTAKES], ids=[c[0] for c in PLACEMENT_MISTAKES]
)
def test_apply_resources__experiment_layer_mistake__refused_naming_file_document_field_and_why(
    flow, tmp_path, placement, expected
):
    path, errors = refusal(tmp_path, experiment("promo", layer=placement))

    assert any(line.startswith(f"{path}: document 1: {expected}") for line in errors), errors


def test_apply_resources__layer_of_an_unknown_subject_type__refused(db, tmp_path):
    path, errors = refusal(tmp_path, layer("flow", subject_type="robot"))

    assert errors == [f"{path}: document 1: layer 'flow': spec.subjectType: no subject type 'robot'"]


def test_apply_resources__experiment_in_a_layer_of_another_subject_type__refused_naming_both_types(flow, tmp_path):
    document = experiment("promo", subject_type="device", layer=in_layer("flow", [0, 100]))

    path, errors = refusal(tmp_path, document)

    assert errors == [
        f"{path}: document 1: experiment 'promo': spec.layer.id: layer 'flow' is of subject type 'user', the "
        "experiment of 'device': a layer's experiments share its subject type"
    ]


def test_apply_resources__layer_retyped_while_an_experiment_of_the_old_type_is_in_it__refused_naming_it(flow, tmp_path):
    apply_resources(experiment("promo", status="draft", layer=in_layer("flow", [0, 100])))

    path, errors = refusal(tmp_path, layer("flow", subject_type="device"))

    assert errors == [
        f"{path}: document 1: layer 'flow': spec.subjectType: experiment 'promo' of the layer is of subject type "
        "'user': a layer's experiments share its subject type; move them to it first, or in the same apply"
    ]


def test_apply_resources__layer_retyped_with_its_experiments_in_the_same_apply__accepted(flow, tmp_path):
    apply_resources(experiment("promo", status="draft", layer=in_layer("flow", [0, 100])))

    _, lines = apply_file(
        tmp_path,
        experiment("promo", status="draft", subject_type="device", layer=in_layer("flow", [0, 100])),
        layer("flow", subject_type="device"),
    )

    assert lines == ["experiment promo: updated", "layer flow: updated"]
    assert Layer.objects.get(key="flow").subject_type.key == "device"


# --- salts: unique ignoring case across experiments, holdouts and layers ---


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (
            experiment("checkout"),
            layer("checkout"),
            "document 2: layer 'checkout': spec.salt: salt 'checkout' is the salt of experiment 'checkout' already",
        ),
        (
            layer("flow", salt="Shared"),
            experiment("promo", salt="sHARED"),
            "document 2: experiment 'promo': spec.salt: salt 'sHARED' is the salt of layer 'flow' already",
        ),
        (
            layer("flow", salt="Shared"),
            layer("other", salt="SHARED"),
            "document 2: layer 'other': spec.salt: salt 'SHARED' is the salt of layer 'flow' already",
        ),
    ],
    ids=["layer-default-salt-of-an-experiment", "experiment-salt-of-a-layer", "two-layers"],
)
def test_apply_resources__layer_salt_shared_with_another_resource__refused_naming_both(
    db, tmp_path, first, second, expected
):
    # Given the first resource applied before; when the second is applied with its salt (ignoring case)
    apply_resources(subject_type("user"), first)

    path, errors = refusal(tmp_path, first, second)

    # Then it is refused, naming both, and what to do
    assert errors == [
        f"{path}: {expected} (salts are unique ignoring case: a shared salt correlates the experiments' draws); "
        "set another spec.salt"
    ]


def test_apply_resources__layer_sharing_an_experiments_id_with_its_own_salt__accepted(db):
    results = apply_resources(subject_type("user"), experiment("checkout"), layer("checkout", salt="checkout-layer"))

    assert [result.outcome for result in results] == ["created", "created", "created"]
    assert Layer.objects.get(key="checkout").salt == "checkout-layer"


def test_apply__layer_salt_left_out__the_id_in_lower_case(db):
    apply_resources(subject_type("user"), layer("Checkout-Flow"))

    assert Layer.objects.get(key="Checkout-Flow").salt == "checkout-flow"


def test_apply__layer_salt_change_before_any_assignment__accepted(flow):
    apply_resources(experiment("promo", layer=in_layer("flow", [0, 100])))

    (result,) = apply_resources(layer("flow", salt="flow-2"))

    assert (result.outcome, Layer.objects.get(key="flow").salt) == ("updated", "flow-2")


def test_apply_resources__layer_salt_change_once_an_experiment_of_it_has_assignments__refused(flow, tmp_path):
    apply_resources(experiment("promo", layer=in_layer("flow", [0, 100])))
    assigned_store("promo", "u1", "green")

    path, errors = refusal(tmp_path, layer("flow", salt="flow-2"))

    assert errors == [
        f"{path}: document 1: layer 'flow': spec.salt: cannot change once an experiment of the layer has "
        "assignments (it drew their slots)"
    ]


# --- slots never overlap between a layer's active experiments ---


def test_apply_resources__active_experiments_overlapping__refused_naming_the_other_and_the_range(flow, tmp_path):
    # Given `first`, active, owning slots 0 to 2499 of `flow`
    apply_resources(experiment("first", layer=in_layer("flow", [0, 2500])))

    # When `second`, active, claims 2000 to 2999
    path, errors = refusal(tmp_path, experiment("second", layer=in_layer("flow", [6000, 7000], [2000, 3000])))

    # Then it is refused, naming `first` and the slots both would own
    assert errors == [
        f"{path}: document 1: experiment 'second': spec.layer.slots: overlaps active experiment 'first' on the "
        "slots [2000, 2500] of layer 'flow': the slots of a layer's active experiments never overlap"
    ]


def test_apply_resources__two_new_active_experiments_overlapping_in_one_apply__refused_once_at_the_later(
    flow, tmp_path
):
    documents = (
        experiment("first", layer=in_layer("flow", [0, 2500])),
        experiment("second", layer=in_layer("flow", [2499, 5000])),
    )

    path, errors = refusal(tmp_path, *documents)

    assert errors == [
        f"{path}: document 2: experiment 'second': spec.layer.slots: overlaps active experiment 'first' on the "
        "slots [2499, 2500] of layer 'flow': the slots of a layer's active experiments never overlap"
    ]


def test_apply__adjacent_ranges_of_two_active_experiments__accepted(flow):
    results = apply_resources(
        experiment("first", layer=in_layer("flow", [0, 5000])),
        experiment("second", layer=in_layer("flow", [5000, 10000])),
    )

    assert [result.outcome for result in results] == ["created", "created"]


def test_apply__active_experiments_of_different_layers_on_the_same_slots__accepted(flow):
    apply_resources(layer("other"), experiment("first", layer=in_layer("flow", [0, 5000])))

    (result,) = apply_resources(experiment("second", layer=in_layer("other", [0, 5000])))

    assert result.outcome == "created"


def test_apply__draft_overlapping_an_active_experiment__accepted_and_its_activation_refused(flow, tmp_path):
    # Given `first`, active; when a draft claims the same slots, it is accepted
    apply_resources(experiment("first", layer=in_layer("flow", [0, 2500])))
    (result,) = apply_resources(experiment("second", status="draft", layer=in_layer("flow", [0, 2500])))
    assert result.outcome == "created"

    # When the draft is activated, then that is refused, naming `first`
    path, errors = refusal(tmp_path, experiment("second", layer=in_layer("flow", [0, 2500])))

    assert errors == [
        f"{path}: document 1: experiment 'second': spec.layer.slots: overlaps active experiment 'first' on the "
        "slots [0, 2500] of layer 'flow': the slots of a layer's active experiments never overlap"
    ]


@pytest.mark.parametrize("status", ["winner_declared", "ended", "archived"])
def test_apply__experiment_past_active__its_slots_free_for_another(flow, status):
    winner = "green" if status == "winner_declared" else None
    apply_resources(experiment("first", layer=in_layer("flow", [0, 2500])))
    apply_resources(experiment("first", status=status, winning_variant=winner, layer=in_layer("flow", [0, 2500])))

    (result,) = apply_resources(experiment("second", layer=in_layer("flow", [0, 2500])))

    assert result.outcome == "created"


@pytest.mark.parametrize("order", ["ended-first", "taken-first"])
def test_apply__one_experiment_ended_and_its_slots_given_to_another_in_one_apply__accepted(flow, tmp_path, order):
    # Given `first` active on slots 0 to 4999, and `second` a draft
    apply_resources(
        experiment("first", layer=in_layer("flow", [0, 5000])),
        experiment("second", status="draft", layer=in_layer("flow", [5000, 6000])),
    )
    ended = experiment("first", status="ended", layer=in_layer("flow", [0, 5000]))
    taken = experiment("second", layer=in_layer("flow", [0, 6000]))

    # When one apply ends `first` and activates `second` on its slots, in either order
    _, lines = apply_file(tmp_path, *((ended, taken) if order == "ended-first" else (taken, ended)))

    # Then both are applied: the state after the whole apply is what counts
    assert sorted(lines) == ["experiment first: updated", "experiment second: updated"]
    assert Experiment.objects.get(key="second").slots == [[0, 6000]]


def test_apply__slots_moved_between_two_active_experiments_in_one_apply__accepted(flow, tmp_path):
    apply_resources(
        experiment("first", layer=in_layer("flow", [0, 5000])),
        experiment("second", layer=in_layer("flow", [5000, 10000])),
    )

    _, lines = apply_file(
        tmp_path,
        experiment("second", layer=in_layer("flow", [4000, 10000])),
        experiment("first", layer=in_layer("flow", [0, 4000])),
    )

    assert lines == ["experiment second: updated", "experiment first: updated"]


def test_apply_resources__overlap_with_a_document_refused_for_another_reason__only_that_reason(flow, tmp_path):
    # Given `first` on 0 to 4999; when one apply gives `second` those slots and means to move `first` away, but
    # the document of `first` is refused (no lab `nowhere`)
    apply_resources(experiment("first", layer=in_layer("flow", [0, 5000])))
    moved = experiment("first", lab="nowhere", layer=in_layer("flow", [5000, 10000]))

    path, errors = refusal(tmp_path, experiment("second", layer=in_layer("flow", [0, 5000])), moved)

    # Then the refusal says what is wrong with `first`, not what `first` left as it was would overlap
    assert errors == [f"{path}: document 2: experiment 'first': metadata.parentId: no lab 'nowhere'"]


def test_apply_resources__overlap_beside_a_refused_layer_of_the_same_id__both_reported(flow, tmp_path):
    # A layer's ID is no experiment's: its refusal hides nothing about the experiment named alike.
    apply_resources(experiment("first", layer=in_layer("flow", [0, 5000])))

    path, errors = refusal(
        tmp_path, layer("second", subject_type="robot"), experiment("second", layer=in_layer("flow", [0, 100]))
    )

    assert errors == [
        f"{path}: document 1: layer 'second': spec.subjectType: no subject type 'robot'",
        f"{path}: document 2: experiment 'second': spec.layer.slots: overlaps active experiment 'first' on the "
        "slots [0, 100] of layer 'flow': the slots of a layer's active experiments never overlap",
    ]


# --- what assignments freeze ---

FROZEN = [
    # (id, the experiment's new spec.layer, the path and message)
    (
        "layer-removed",
        None,
        "spec.layer: cannot be removed once the experiment has assignments (it owns the slots [[0, 2500]] of layer "
        "'flow')",
    ),
    (
        "layer-changed",
        in_layer("other", [0, 2500]),
        "spec.layer.id: cannot change once the experiment has assignments (it owns the slots [[0, 2500]] of layer "
        "'flow')",
    ),
    (
        "slots-shrunk",
        in_layer("flow", [0, 2000]),
        "spec.layer.slots: may only grow once the experiment has assignments: [[0, 2000]] does not own every slot "
        "of [[0, 2500]]",
    ),
    (
        "slots-moved",
        in_layer("flow", [100, 2600]),
        "spec.layer.slots: may only grow once the experiment has assignments: [[100, 2600]] does not own every "
        "slot of [[0, 2500]]",
    ),
]


@pytest.mark.parametrize(("placement", "expected"), [c[1:] for c in FROZEN], ids=[c[0] for c in FROZEN])
def test_apply_resources__layer_of_an_experiment_with_assignments_changed__refused(flow, tmp_path, placement, expected):
    # Given `promo` in `flow`, with an assignment
    apply_resources(layer("other"), experiment("promo", layer=in_layer("flow", [0, 2500])))
    assigned_store("promo", "u1", "green")

    path, errors = refusal(tmp_path, experiment("promo", layer=placement))

    assert errors == [f"{path}: document 1: experiment 'promo': {expected}"]


def test_apply_resources__experiment_with_assignments_put_in_a_layer__refused(flow, tmp_path):
    apply_resources(experiment("promo"))
    assigned_store("promo", "u1", "green")

    path, errors = refusal(tmp_path, experiment("promo", layer=in_layer("flow", [0, 2500])))

    assert errors == [
        f"{path}: document 1: experiment 'promo': spec.layer: cannot be added once the experiment has assignments: "
        "its subjects were assigned from every slot, and would share the layer's slots with its other experiments"
    ]


def test_apply__slots_of_an_experiment_with_assignments_grown__accepted_in_a_new_cohort(flow):
    apply_resources(experiment("promo", layer=in_layer("flow", [0, 2500])))
    assigned_store("promo", "u1", "green")

    (result,) = apply_resources(experiment("promo", layer=in_layer("flow", [0, 2500], [5000, 6000])))

    assert result.outcome == "updated"
    assert cohort_rules("promo") == [
        (1, SPLITS, {"layer": {"id": "flow", "slots": [[0, 2500]]}}),
        (2, SPLITS, {"layer": {"id": "flow", "slots": [[0, 2500], [5000, 6000]]}}),
    ]


@pytest.mark.parametrize(
    "placement", [None, in_layer("other", [0, 100]), in_layer("flow", [9000, 9100])], ids=["removed", "moved", "shrunk"]
)
def test_apply__layer_of_an_active_experiment_without_assignments_changed__accepted(flow, placement):
    apply_resources(layer("other"), experiment("promo", layer=in_layer("flow", [0, 2500])))

    (result,) = apply_resources(experiment("promo", layer=placement))

    assert result.outcome == "updated"
    stored = Experiment.objects.get(key="promo")
    expected = None if placement is None else (placement["id"], placement["slots"])
    assert (None if stored.layer is None else (stored.layer.key, stored.slots)) == expected


# --- cohorts ---


@pytest.mark.parametrize("status", ["active", "winner_declared", "ended", "archived"])
def test_apply__slots_changed_while_active_or_later__starts_the_next_cohort_with_the_layer_in_its_rule(flow, status):
    winner = "green" if status == "winner_declared" else None
    apply_resources(experiment("promo", status=status, winning_variant=winner, layer=in_layer("flow", [0, 2500])))

    apply_resources(experiment("promo", status=status, winning_variant=winner, layer=in_layer("flow", [0, 5000])))

    assert cohort_rules("promo") == [
        (1, SPLITS, {"layer": {"id": "flow", "slots": [[0, 2500]]}}),
        (2, SPLITS, {"layer": {"id": "flow", "slots": [[0, 5000]]}}),
    ]


def test_apply__layer_added_to_an_active_experiment__starts_the_next_cohort(flow):
    apply_resources(experiment("promo"))

    apply_resources(experiment("promo", layer=in_layer("flow", [0, 2500])))

    assert cohort_rules("promo") == [(1, SPLITS, {}), (2, SPLITS, {"layer": {"id": "flow", "slots": [[0, 2500]]}})]


def test_apply__slots_of_a_draft_changed__cohort_1_corrected(flow):
    apply_resources(experiment("promo", status="draft", layer=in_layer("flow", [0, 2500])))

    apply_resources(experiment("promo", status="draft", layer=in_layer("flow", [0, 5000])))

    assert cohort_rules("promo") == [(1, SPLITS, {"layer": {"id": "flow", "slots": [[0, 5000]]}})]


def test_export__every_gate__written_in_the_order_of_the_yaml(db):
    # The cohort's copy is jsonb, whose keys PostgreSQL orders its own way: the export is what people read.
    apply_resources(
        subject_type("user", attributes={"country": "string"}),
        layer("flow"),
        experiment(
            "promo",
            coverage=0.5,
            targeting=[{"attribute": "country", "equals": "DE"}],
            layer=in_layer("flow", [0, 2500]),
            enrollment={"startAt": "2026-12-01T08:00:00Z"},
        ),
    )

    (document,) = yaml.safe_load_all(export_text("--kind", "experiment"))

    assert list(document["spec"])[4:] == ["enrollment", "layer", "targeting", "coverage", "variants"]


def test_apply__same_ranges_in_another_order__unchanged_no_cohort(flow):
    apply_resources(experiment("promo", layer=in_layer("flow", [5000, 6000], [0, 2500])))

    (result,) = apply_resources(experiment("promo", layer=in_layer("flow", [0, 2500], [5000, 6000])))

    assert result.outcome == "unchanged"
    assert Experiment.objects.get(key="promo").slots == [[0, 2500], [5000, 6000]]
    assert len(cohort_rules("promo")) == 1


def test_apply__layer_named_in_another_case__stored_as_the_layer_no_change(flow):
    apply_resources(experiment("promo", layer=in_layer("flow", [0, 2500])))

    (result,) = apply_resources(experiment("promo", layer=in_layer("FLOW", [0, 2500])))

    assert result.outcome == "unchanged"
    assert cohort_rules("promo") == [(1, SPLITS, {"layer": {"id": "flow", "slots": [[0, 2500]]}})]


# --- export, round trip and history ---

CONFIGURATION = """
schemaVersion: 1
kind: subjecttype
metadata: {id: user}
---
schemaVersion: 1
kind: layer
metadata: {id: Checkout-Flow, name: Checkout flow, description: "The steps: cart, pay"}
spec: {subjectType: USER, salt: checkout-flow-layer}
---
schemaVersion: 1
kind: layer
metadata: {id: onboarding}
spec: {subjectType: user}
---
schemaVersion: 1
kind: experiment
metadata: {id: checkout-button, status: active}
spec:
  subjectType: user
  layer: {id: checkout-flow, slots: [[5000, 7500], [0, 2500]]}
  coverage: 0.5
  variants:
    - {id: control, control: true, split: 0.5}
    - {id: green, split: 0.5}
"""


def test_export__layers__written_before_the_experiments_and_applied_again_unchanged(db, tmp_path):
    # Given layers and an experiment in one of them
    apply_yaml(CONFIGURATION)

    # When exported
    exported = export_text()

    # Then the layers come after the labs and before the experiments, shaped as the YAML writes them
    documents = list(yaml.safe_load_all(exported))
    assert [document["kind"] for document in documents] == ["subjecttype", "lab", "layer", "layer", "experiment"]
    assert documents[2] == {
        "schemaVersion": 1,
        "kind": "layer",
        "metadata": {
            "id": "Checkout-Flow",
            "name": "Checkout flow",
            "description": "The steps: cart, pay",
            "resourceVersion": 1,
        },
        "spec": {"subjectType": "user", "salt": "checkout-flow-layer"},
    }
    assert list(documents[4]["spec"]) == [
        "subjectType",
        "hypothesis",
        "salt",
        "followLinks",
        "layer",
        "coverage",
        "variants",
    ]
    assert documents[4]["spec"]["layer"] == {"id": "Checkout-Flow", "slots": [[0, 2500], [5000, 7500]]}
    # And applying the export changes nothing, and exports the same text again
    (tmp_path / "export.yaml").write_text(exported, encoding="utf-8")
    out = io.StringIO()
    call_command("apply_resources", str(tmp_path / "export.yaml"), stdout=out)
    assert all(line.endswith(": unchanged") for line in out.getvalue().splitlines())
    assert export_text() == exported


def test_export__kind_layer__only_the_layers(db):
    apply_yaml(CONFIGURATION)

    documents = list(yaml.safe_load_all(export_text("--kind", "layer")))

    assert [(document["kind"], document["metadata"]["id"]) for document in documents] == [
        ("layer", "Checkout-Flow"),
        ("layer", "onboarding"),
    ]


def test_apply__layer_created_and_changed__history_with_its_documents(flow):
    apply_resources(layer("flow", name="Checkout flow"))

    changes = ResourceChange.objects.filter(kind="layer", resource_id="flow").order_by("resource_version")
    assert [(change.resource_version, change.before is None) for change in changes] == [(1, True), (2, False)]
    assert changes[1].after == {
        "schemaVersion": 1,
        "kind": "layer",
        "metadata": {"id": "flow", "name": "Checkout flow", "description": ""},
        "spec": {"subjectType": "user", "salt": "flow"},
    }
    assert Layer.objects.get(key="flow").resource_version == 2


def test_resource_history__layer__newest_first_with_a_diff(flow):
    apply_resources(layer("flow", salt="flow-2"))

    versions, lines = resource_history("layer", "FLOW")

    assert versions == ["2", "1"]
    assert "-  salt: flow" in lines and "+  salt: flow-2" in lines


def test_resource_history__layer_unknown__fails(flow):
    with pytest.raises(CommandError, match="no recorded changes of layer 'nothing'"):
        call_command("resource_history", "layer", "nothing", stdout=io.StringIO())


def test_apply__layer_dry_run__reported_and_nothing_written(flow):
    (result,) = apply_resources(layer("other"), dry_run=True)

    assert result.outcome == "created"
    assert not Layer.objects.filter(key="other").exists()


# --- exclusivity through every kind of change: a hypothesis state machine ---


USERS = [f"u-{number}" for number in range(40)]
COOKIES = [f"c-{number}" for number in range(10)]
# The experiments of the layer, as the machine last applied them: ID -> (status, slot ranges).
START = {
    "alpha": ("active", [[0, 3000]]),
    "beta": ("active", [[3000, 6000]]),
    "gamma": ("draft", [[2000, 7000]]),
}
# Free slots the machine may grow an experiment into; some overlap others' ranges, and are then refused.
GROWTH = [[6000, 7000], [7000, 8500], [8500, 10000], [2500, 3500], [9000, 9500]]

TWO_ACTIVE_IN_ONE_LAYER = """
SELECT a.subject_id, count(*)
FROM assignments_assignment a JOIN assignments_experiment e ON e.id = a.experiment_id
WHERE e.layer_id IS NOT NULL AND e.status = 'active' AND a.source IN ('hashed', 'linked')
GROUP BY e.layer_id, a.subject_id
HAVING count(*) > 1
"""


class LayerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Each run starts from an empty database and empty caches, and is rolled back at its end.
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        caches_clear()
        self.experiments = dict(START)
        # (experiment ID, subject ID) -> the variant first answered from a stored assignment.
        self.stored: dict[tuple[str, str], str] = {}

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self.atomic.__exit__(None, None, None)
        caches_clear()

    def documents(self) -> list[dict]:
        return [
            subject_type("user"),
            subject_type("cookie"),
            layer("flow"),
            *(
                experiment(
                    key,
                    status=status,
                    winning_variant="green" if status == "winner_declared" else None,
                    layer=in_layer("flow", *slots),
                    follow_links=key == "beta" or None,
                )
                for key, (status, slots) in self.experiments.items()
            ),
        ]

    def apply(self, key: str, status: str, slots: list[list[int]]) -> None:
        before = self.experiments[key]
        self.experiments[key] = (status, slots)
        try:
            apply_resources(*self.documents())
        except ResourceInvalid:
            self.experiments[key] = before

    @initialize()
    def configure(self) -> None:
        apply_resources(*self.documents())

    def remember(self, key: str, answers: dict[str, str]) -> None:
        """Checks each stored assignment's answer against the one first seen, and remembers new ones."""
        experiment_pk = Experiment.objects.get(key=key).pk
        stored = dict(
            Assignment.objects.filter(experiment=experiment_pk, subject_id__in=answers).values_list(
                "subject_id", "variant__key"
            )
        )
        for subject_id, variant in stored.items():
            if self.experiments[key][0] == "active":
                assert answers[subject_id] == variant
            assert self.stored.setdefault((key, subject_id), variant) == variant

    @rule(key=st.sampled_from(sorted(START)), subject_ids=st.lists(st.sampled_from(USERS), min_size=1, max_size=8))
    def ask_batch(self, key: str, subject_ids: list[str]) -> None:
        if self.experiments[key][0] not in ("active", "winner_declared"):
            return
        self.remember(key, assign_subjects(experiment_id=key, subject_ids=subject_ids).assignments)

    @rule(subject_id=st.sampled_from(USERS))
    def ask_subject(self, subject_id: str) -> None:
        answer = assign_subject(subject={"user": subject_id}, experiment_ids=sorted(START), assign=True)
        for key, variant in answer.assignments.items():
            self.remember(key, {subject_id: variant})

    @rule(key=st.sampled_from(sorted(START)))
    def activate(self, key: str) -> None:
        status, slots = self.experiments[key]
        if status == "draft":
            self.apply(key, "active", slots)

    @rule(key=st.sampled_from(sorted(START)), extra=st.sampled_from(GROWTH))
    def grow(self, key: str, extra: list[int]) -> None:
        status, slots = self.experiments[key]
        if extra not in slots and not any(start < extra[1] and extra[0] < end for start, end in slots):
            self.apply(key, status, [*slots, extra])

    @rule(key=st.sampled_from(sorted(START)), status=st.sampled_from(["winner_declared", "ended"]))
    def end(self, key: str, status: str) -> None:
        # Either frees the experiment's slots for another.
        current, slots = self.experiments[key]
        if Experiment.status_rank(status) > Experiment.status_rank(current) >= Experiment.status_rank("active"):
            self.apply(key, status, slots)

    @rule(first=st.sampled_from(USERS), cookie=st.sampled_from(COOKIES), second=st.sampled_from(USERS))
    def link(self, first: str, cookie: str, second: str) -> None:
        # Two users linked through one cookie: beta, which follows links, may carry an assignment across.
        link(("user", first), ("cookie", cookie))
        link(("cookie", cookie), ("user", second))

    @rule(key=st.sampled_from(sorted(START)), subject_id=st.sampled_from(USERS))
    def import_one(self, key: str, subject_id: str) -> None:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "import.csv"
            path.write_text(f"subject_id,variant_id\n{subject_id},green\n", encoding="utf-8")
            assignments_import(path=path, experiment=Experiment.objects.get(key=key), atomic=True)

    @rule(key=st.sampled_from(sorted(START)), subject_id=st.sampled_from(USERS))
    def force_one(self, key: str, subject_id: str) -> None:
        if self.experiments[key][0] in ("draft", "active"):
            assignments_force(
                experiment=Experiment.objects.get(key=key),
                variant_id="control",
                subject_ids=[subject_id],
                reason="QA",
                replace=False,
            )

    @invariant()
    def exclusive(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(TWO_ACTIVE_IN_ONE_LAYER)
            assert cursor.fetchall() == []


@pytest.mark.django_db(transaction=True)
def test_layer__any_sequence_of_changes__no_subject_randomised_into_two_active_experiments_of_it():
    run_state_machine_as_test(
        LayerMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
