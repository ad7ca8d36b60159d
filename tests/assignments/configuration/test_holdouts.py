"""assignments/configuration/holdouts.py: holdouts as configuration (docs/reference/resources.md#kind-holdout): the
`holdout` documents and the experiments' `spec.holdouts`; what apply_resources refuses and accepts, the binding by
scope, what activity and assignments freeze, the export and the history; and the data commands on a holdout."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command

from assignments.models import Cohort, Experiment, ExperimentHoldout, Lab, ResourceChange
from tests.helpers.assignments import assigned_store
from tests.helpers.resources import (
    apply_file,
    apply_resources,
    apply_yaml,
    experiment,
    export_text,
    holdout,
    in_layer,
    lab,
    layer,
    refusal,
    resource_history,
    subject_type,
)

SPLITS = [{"variant": "control", "split": 0.5}, {"variant": "green", "split": 0.5}]


def covering(key: str) -> list[str]:
    """The IDs of the holdouts covering the experiment, in order."""
    rows = ExperimentHoldout.objects.filter(experiment__key=key).order_by("position")
    return list(rows.values_list("holdout__key", flat=True))


@pytest.fixture
def users(db):
    """The subject types `user` and `device`, and the lab `growth`."""
    apply_resources(subject_type("user"), subject_type("device"), lab("growth"))


# --- every mistake refused, naming the file, the document, the field and why; nothing applied ---

HOLDOUT_MISTAKES = [
    # (id, the holdout document, what the error says after "document 1: ")
    (
        "no-share",
        {**holdout("h"), "spec": {"subjectType": "user"}},
        "spec.share: is required: a number more than 0 and at most 0.5 (0.1 holds out 10 %)",
    ),
    (
        "share-0",
        holdout("h", share=0),
        "spec.share: must be a number more than 0 and at most 0.5 (0.1 holds out 10 %), not 0",
    ),
    (
        "share-above-half",
        holdout("h", share=0.51),
        "spec.share: must be a number more than 0 and at most 0.5 (0.1 holds out 10 %), not 0.51",
    ),
    (
        "share-percent",
        holdout("h", share=10),
        "spec.share: must be a number more than 0 and at most 0.5 (0.1 holds out 10 %), not 10",
    ),
    (
        "share-a-string",
        holdout("h", share="0.1"),
        "spec.share: must be a number more than 0 and at most 0.5 (0.1 holds out 10 %), not the string '0.1' "
        "(leave the quotes off in YAML)",
    ),
    (
        "share-true",
        holdout("h", share=True),
        "spec.share: must be a number more than 0 and at most 0.5 (0.1 holds out 10 %), not true",
    ),
    ("no-subject-type", {**holdout("h"), "spec": {"share": 0.1}}, "spec.subjectType: is required"),
    (
        "winner-declared",
        holdout("h", status="winner_declared"),
        "metadata.status: must be one of draft, active, ended",
    ),
    ("archived", holdout("h", status="archived"), "metadata.status: must be one of draft, active, ended"),
    (
        "parent",
        {**holdout("h"), "metadata": {"id": "h", "parentId": "growth"}},
        "metadata.parentId: unknown field; allowed: description, id, name, resourceVersion, status",
    ),
    (
        "variants",
        {**holdout("h"), "spec": {"subjectType": "user", "share": 0.1, "variants": []}},
        "spec.variants: unknown field; allowed: salt, scope, share, subjectType",
    ),
    ("scope-some", holdout("h", scope="some"), "spec.scope: must be all or {labs: [lab IDs]} (leave it out for none)"),
    ("scope-ALL", holdout("h", scope="ALL"), "spec.scope: must be all or {labs: [lab IDs]}"),
    ("scope-labs-empty", holdout("h", scope={"labs": []}), "spec.scope.labs: must list at least one lab"),
    ("scope-labs-a-string", holdout("h", scope={"labs": "growth"}), "spec.scope.labs: must be a list of lab IDs"),
    ("scope-no-labs", holdout("h", scope={}), "spec.scope.labs: must be a list of lab IDs"),
    ("scope-teams", holdout("h", scope={"teams": ["a"]}), "spec.scope.teams: unknown field; allowed: labs"),
    (
        "scope-lab-twice",
        holdout("h", scope={"labs": ["growth", "Growth"]}),
        "spec.scope.labs.1: duplicates lab 'Growth' (IDs are compared ignoring case)",
    ),
    ("scope-lab-a-number", holdout("h", scope={"labs": [7]}), "spec.scope.labs.0: must be a string"),
    ("scope-unknown-lab", holdout("h", scope={"labs": ["growth", "sales"]}), "holdout 'h': spec.scope.labs.1: no lab"),
    ("unknown-subject-type", holdout("h", subject_type="robot"), "holdout 'h': spec.subjectType: no subject type"),
]


@pytest.mark.parametrize(
    ("document", "expected"), [c[1:] for c in HOLDOUT_MISTAKES], ids=[c[0] for c in HOLDOUT_MISTAKES]
)
def test_apply_resources__holdout_mistake__refused_naming_file_document_field_and_why(
    users, tmp_path, document, expected
):
    path, errors = refusal(tmp_path, document)

    assert any(line.startswith(f"{path}: document 1: {expected}") for line in errors), errors


HOLDOUTS_MISTAKES = [
    # (id, the experiment's spec.holdouts, what the error says after "document 1: ")
    ("not-a-list", "h1", "spec.holdouts: must be a list of holdout IDs"),
    ("twice", ["h1", "H1"], "spec.holdouts.1: duplicates holdout 'H1' (IDs are compared ignoring case)"),
    ("bad-id", ["h 1"], "spec.holdouts.0: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"),
    ("unknown", ["h1", "h9"], "experiment 'promo': spec.holdouts.1: no holdout 'h9'"),
    ("an-experiment", ["other"], "experiment 'promo': spec.holdouts.0: no holdout 'other' ('other' is an experiment)"),
    (
        "another-subject-type",
        ["devices"],
        "experiment 'promo': spec.holdouts.0: holdout 'devices' is of subject type 'device', the experiment of "
        "'user': a holdout covers experiments of its subject type only",
    ),
]


@pytest.mark.parametrize(
    ("listed", "expected"), [c[1:] for c in HOLDOUTS_MISTAKES], ids=[c[0] for c in HOLDOUTS_MISTAKES]
)
def test_apply_resources__experiment_holdouts_mistake__refused_naming_file_document_field_and_why(
    users, tmp_path, listed, expected
):
    apply_resources(holdout("h1"), holdout("devices", subject_type="device"), experiment("other"))

    path, errors = refusal(tmp_path, experiment("promo", holdouts=listed))

    assert any(line.startswith(f"{path}: document 1: {expected}") for line in errors), errors


# --- one namespace with the experiments ---


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (experiment("checkout"), holdout("CHECKOUT"), "holdout 'CHECKOUT': metadata.id: 'checkout' is an experiment"),
        (holdout("h1"), experiment("H1"), "experiment 'H1': metadata.id: 'h1' is a holdout"),
    ],
    ids=["holdout-named-as-an-experiment", "experiment-named-as-a-holdout"],
)
def test_apply_resources__holdout_and_experiment_with_one_id__refused(users, tmp_path, first, second, expected):
    apply_resources(first)

    path, errors = refusal(tmp_path, second)

    assert errors == [f"{path}: document 1: {expected} (experiments and holdouts share IDs, ignoring case)"]


def test_apply_resources__holdout_and_experiment_with_one_id_in_one_apply__refused_naming_the_first(users, tmp_path):
    path, errors = refusal(tmp_path, experiment("checkout"), holdout("Checkout"))

    assert errors == [
        f"{path}: document 2: metadata.id: holdout 'Checkout' is already defined in {path}: document 1 as an "
        "experiment (experiments and holdouts share IDs)"
    ]


# --- the holdout as stored ---


def test_apply__new_holdout__stored_as_an_experiment_of_kind_holdout_with_its_two_variants(users):
    (result,) = apply_resources(holdout("H2-2026", share=0.05, scope="all"))

    stored = Experiment.objects.get(key="H2-2026")
    assert result.outcome == "created"
    assert (stored.kind, stored.status, stored.salt, stored.scope, stored.lab.key) == (
        "holdout",
        "active",
        "h2-2026",
        "all",
        "default",
    )
    assert list(stored.variants.values_list("key", "position", "is_control", "split")) == [
        ("held_out", 0, True, 0.05),
        ("general", 1, False, 0.95),
    ]
    assert list(Cohort.objects.filter(experiment=stored).values_list("number", "splits", "population")) == [
        (1, [{"variant": "held_out", "split": 0.05}, {"variant": "general", "split": 0.95}], {})
    ]


def test_apply__holdout_without_status__a_draft(users):
    document = holdout("h1", status=None)

    apply_resources(document)

    assert Experiment.objects.get(key="h1").status == "draft"


def test_apply__share_of_a_draft_holdout_changed__cohort_1_corrected(users):
    apply_resources(holdout("h1", status="draft", share=0.05))

    (result,) = apply_resources(holdout("h1", status="draft", share=0.1))

    assert result.outcome == "updated"
    assert list(Cohort.objects.filter(experiment__key="h1").values_list("number", "splits")) == [
        (1, [{"variant": "held_out", "split": 0.1}, {"variant": "general", "split": 0.9}])
    ]
    assert Experiment.objects.get(key="h1").resource_version == 2


def test_apply__draft_holdout_activated_with_another_share__accepted_in_cohort_1(users):
    apply_resources(holdout("h1", status="draft", share=0.05))

    apply_resources(holdout("h1", share=0.2))

    assert Cohort.objects.get(experiment__key="h1").splits[0] == {"variant": "held_out", "split": 0.2}


@pytest.mark.parametrize("status", ["active", "ended"])
@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"share": 0.1}, "spec.share"),
        ({"salt": "other"}, "spec.salt"),
        ({"subject_type": "device"}, "spec.subjectType"),
    ],
    ids=["share", "salt", "subject-type"],
)
def test_apply_resources__share_salt_or_subject_type_of_a_holdout_that_has_been_active__refused(
    users, tmp_path, status, change, path
):
    apply_resources(holdout("h1", status=status, share=0.05))

    file, errors = refusal(tmp_path, holdout("h1", status=status, **{"share": 0.05, **change}))

    why = "share 0.05" if path == "spec.share" else None
    expected = f"{file}: document 1: holdout 'h1': {path}: cannot change once the holdout has been active: its "
    assert errors == [expected + "members were drawn with it" + (f" ({why})" if why else "")]


def test_apply_resources__holdout_status_backwards__refused(users, tmp_path):
    apply_resources(holdout("h1", status="ended"))

    path, errors = refusal(tmp_path, holdout("h1", status="active"))

    assert errors == [f"{path}: document 1: holdout 'h1': metadata.status: cannot go back from ended to active"]


@pytest.mark.parametrize(("start", "end"), [("draft", "active"), ("active", "ended"), ("draft", "ended")])
def test_apply__holdout_status_forward__updated_no_cohort_for_it_or_the_experiments_it_covers(users, start, end):
    apply_resources(holdout("h1", status=start), experiment("promo", holdouts=["h1"]))

    (result,) = apply_resources(holdout("h1", status=end))

    assert result.outcome == "updated"
    assert Cohort.objects.filter(experiment__key="h1").count() == 1
    assert Cohort.objects.filter(experiment__key="promo").count() == 1


def test_apply__holdout_scope_changed_while_active__accepted(users):
    apply_resources(holdout("h1", scope="all"))

    (result,) = apply_resources(holdout("h1", scope={"labs": ["growth"]}))

    assert (result.outcome, Experiment.objects.get(key="h1").scope) == ("updated", {"labs": ["growth"]})


def test_apply_resources__holdout_retyped_while_a_draft_it_covers_is_of_the_old_type__refused_naming_it(
    users, tmp_path
):
    apply_resources(holdout("h1", status="draft"), experiment("promo", status="draft", holdouts=["h1"]))

    path, errors = refusal(tmp_path, holdout("h1", status="draft", subject_type="device"))

    assert errors == [
        f"{path}: document 1: holdout 'h1': spec.subjectType: it covers experiment 'promo', of subject type 'user': "
        "a holdout covers experiments of its subject type only; change that experiment's spec.holdouts first, or in "
        "the same apply"
    ]


def test_apply_resources__experiment_retyped_keeping_holdouts_of_the_old_type__refused(users, tmp_path):
    apply_resources(holdout("h1"), experiment("promo", status="draft", holdouts=["h1"]))

    path, errors = refusal(tmp_path, experiment("promo", status="draft", subject_type="device"))

    assert errors == [
        f"{path}: document 1: experiment 'promo': spec.subjectType: holdout 'h1' is of subject type 'user', the "
        "experiment of 'device': a holdout covers experiments of its subject type only; list the holdouts to keep"
    ]


# --- salts: unique ignoring case across experiments, holdouts and layers ---


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (
            experiment("checkout"),
            holdout("h1", salt="Checkout"),
            "document 2: holdout 'h1': spec.salt: salt 'Checkout' is the salt of experiment 'checkout' already",
        ),
        (
            holdout("h1"),
            experiment("promo", salt="H1"),
            "document 2: experiment 'promo': spec.salt: salt 'H1' is the salt of holdout 'h1' already",
        ),
        (
            layer("flow"),
            holdout("h1", salt="FLOW"),
            "document 2: holdout 'h1': spec.salt: salt 'FLOW' is the salt of layer 'flow' already",
        ),
        (
            holdout("h1", salt="shared"),
            layer("flow", salt="Shared"),
            "document 2: layer 'flow': spec.salt: salt 'Shared' is the salt of holdout 'h1' already",
        ),
    ],
    ids=["holdout-of-an-experiment", "experiment-of-a-holdout", "holdout-of-a-layer", "layer-of-a-holdout"],
)
def test_apply_resources__holdout_salt_shared_with_another_resource__refused_naming_both(
    users, tmp_path, first, second, expected
):
    apply_resources(first)

    path, errors = refusal(tmp_path, first, second)

    assert errors == [
        f"{path}: {expected} (salts are unique ignoring case: a shared salt correlates the experiments' draws); "
        "set another spec.salt"
    ]


# --- the experiments' spec.holdouts ---


def test_apply__experiment_listing_holdouts__stored_in_the_order_listed(users):
    apply_resources(holdout("a"), holdout("b", status="draft"), holdout("c", status="ended"))

    apply_resources(experiment("promo", holdouts=["C", "a", "b"]))

    assert covering("promo") == ["c", "a", "b"]


def test_apply__holdouts_left_out__kept(users):
    apply_resources(holdout("a"), experiment("promo", status="draft", holdouts=["a"]))

    (result,) = apply_resources(experiment("promo", status="draft"))

    assert result.outcome == "unchanged"
    assert covering("promo") == ["a"]


def test_apply__holdouts_listed_anew_before_assignments__replaced_version_raised_no_cohort(users):
    apply_resources(holdout("a"), holdout("b"), experiment("promo", holdouts=["a"]))

    (result,) = apply_resources(experiment("promo", holdouts=["b", "a"]))

    assert result.outcome == "updated"
    assert covering("promo") == ["b", "a"]
    assert Experiment.objects.get(key="promo").resource_version == 2
    assert Cohort.objects.filter(experiment__key="promo").count() == 1


def test_apply__holdouts_listed_empty_before_assignments__removed(users):
    apply_resources(holdout("a"), experiment("promo", holdouts=["a"]))

    (result,) = apply_resources(experiment("promo", holdouts=[]))

    assert (result.outcome, covering("promo")) == ("updated", [])


@pytest.mark.parametrize(
    ("listed", "accepted"),
    [
        (None, True),
        (["a", "b"], True),
        (["A", "B"], True),
        (["b", "a"], False),
        (["a"], False),
        (["a", "b", "c"], False),
        ([], False),
    ],
    ids=["left-out", "the-same", "the-same-in-another-case", "reordered", "one-less", "one-more", "none"],
)
def test_apply__holdouts_of_an_experiment_with_assignments__left_out_or_exactly_the_same_else_refused(
    users, tmp_path, listed, accepted
):
    # Given `promo`, covered by `a` and `b`, with an assignment
    apply_resources(holdout("a"), holdout("b"), holdout("c"), experiment("promo", holdouts=["a", "b"]))
    assigned_store("promo", "u1", "green")

    # When its document leaves spec.holdouts out or lists holdouts
    document = experiment("promo", holdouts=listed)
    if accepted:
        _, lines = apply_file(tmp_path, document)
        assert lines == ["experiment promo: unchanged"]
    else:
        path, errors = refusal(tmp_path, document)
        assert errors == [
            f"{path}: document 1: experiment 'promo': spec.holdouts: fixed once the experiment has assignments: "
            "leave spec.holdouts out, or list exactly [a, b] in this order"
        ]
    assert covering("promo") == ["a", "b"]


# --- binding by scope at the first activation ---


@pytest.mark.parametrize(
    ("scope", "experiment_lab", "bound"),
    [
        ("all", None, True),
        ("all", "growth", True),
        ({"labs": ["growth"]}, "growth", True),
        ({"labs": ["GROWTH"]}, "Growth", True),
        ({"labs": ["default", "growth"]}, None, True),
        ({"labs": ["growth"]}, None, False),
        (None, "growth", False),
    ],
    ids=["all", "all-in-a-lab", "its-lab", "its-lab-in-another-case", "default-lab", "another-lab", "no-scope"],
)
def test_apply__experiment_created_active__bound_to_the_active_holdouts_whose_scope_takes_it_in(
    users, scope, experiment_lab, bound
):
    apply_resources(holdout("h1", scope=scope))

    apply_resources(experiment("promo", lab=experiment_lab))

    assert covering("promo") == (["h1"] if bound else [])


@pytest.mark.parametrize("status", ["draft", "ended"])
def test_apply__holdout_in_scope_but_not_active__not_bound(users, status):
    apply_resources(holdout("h1", status=status, scope="all"))

    apply_resources(experiment("promo"))

    assert covering("promo") == []


def test_apply__holdout_in_scope_of_another_subject_type__not_bound(users):
    apply_resources(holdout("h1", subject_type="device", scope="all"))

    apply_resources(experiment("promo"))

    assert covering("promo") == []


def test_apply__holdout_and_experiment_created_in_one_apply__bound_whatever_the_order_of_the_documents(users):
    results = apply_resources(experiment("promo"), holdout("h1", scope="all"))

    assert [str(result) for result in results] == ["experiment promo: created", "holdout h1: created"]
    assert covering("promo") == ["h1"]


def test_apply__draft_experiment__not_bound_until_activated_then_bound(users):
    apply_resources(holdout("h1", scope="all"), experiment("promo", status="draft"))
    assert covering("promo") == []

    apply_resources(experiment("promo"))

    assert covering("promo") == ["h1"]


def test_apply__active_experiment__not_bound_to_a_holdout_made_after_its_first_activation(users):
    # Given `promo`, active before `h1` existed
    apply_resources(experiment("promo"))

    # When `h1` is created with scope all, and `promo` applied again (and then moved on in its lifecycle)
    apply_resources(holdout("h1", scope="all"))
    apply_resources(experiment("promo", coverage=0.5))
    apply_resources(experiment("promo", status="winner_declared", winning_variant="green"))

    # Then `promo` stays uncovered: only the first activation binds
    assert covering("promo") == []


def test_apply__experiment_from_draft_straight_past_active__not_bound(users):
    apply_resources(holdout("h1", scope="all"), experiment("promo", status="draft"))

    apply_resources(experiment("promo", status="winner_declared", winning_variant="green"))

    assert covering("promo") == []


def test_apply__bound_holdouts__after_the_listed_ones_by_id_without_duplicates(users):
    apply_resources(
        holdout("zeta", scope="all"),
        holdout("Alpha", scope={"labs": ["growth"]}),
        holdout("listed", scope="all"),
        holdout("mine"),
    )

    apply_resources(experiment("promo", lab="growth", holdouts=["mine", "listed"]))

    assert covering("promo") == ["mine", "listed", "Alpha", "zeta"]


def test_apply__binding__recorded_in_the_experiments_history(users):
    apply_resources(holdout("h1", scope="all"), experiment("promo", status="draft"))

    apply_resources(experiment("promo"))

    change = ResourceChange.objects.get(kind="experiment", resource_id="promo", resource_version=2)
    assert "holdouts" not in change.before["spec"]
    assert change.after["spec"]["holdouts"] == ["h1"]
    assert change.after["metadata"]["status"] == "active"


def test_apply__binding_then_the_same_file_again__unchanged(users):
    # The document that left spec.holdouts out keeps what the binding added.
    documents = (holdout("h1", scope="all"), experiment("promo"))
    apply_resources(*documents)

    results = apply_resources(*documents)

    assert {result.outcome for result in results} == {"unchanged"}
    assert covering("promo") == ["h1"]


# --- export, round trip and history ---

CONFIGURATION = (
    subject_type("user"),
    lab("growth"),
    layer("flow"),
    holdout("H2-2026", name="Second half", scope="all"),
    holdout("growth-q4", status=None, share=0.1, salt="growth-q4-holdout", scope={"labs": ["Growth"]}),
    experiment(
        "checkout-button",
        lab="growth",
        enrollment={"startAt": "2026-12-01T09:00:00+01:00"},
        holdouts=["growth-q4"],
        layer=in_layer("flow", [0, 2500]),
        coverage=0.5,
    ),
    experiment("plain", status="draft"),
)


def test_export__holdouts__written_after_the_layers_resolved_in_the_experiments_and_applied_again_unchanged(
    db, tmp_path
):
    # Given holdouts, and an experiment listing one and bound to the other
    apply_resources(*CONFIGURATION)

    # When exported
    exported = export_text()

    # Then the holdouts come after the layers and before the experiments, shaped as the YAML writes them
    documents = list(yaml.safe_load_all(exported))
    assert [document["kind"] for document in documents] == [
        "subjecttype",
        "lab",
        "lab",
        "layer",
        "holdout",
        "holdout",
        "experiment",
        "experiment",
    ]
    assert documents[4:6] == [
        {
            "schemaVersion": 1,
            "kind": "holdout",
            "metadata": {
                "id": "H2-2026",
                "name": "Second half",
                "description": "",
                "status": "active",
                "resourceVersion": 1,
            },
            "spec": {"subjectType": "user", "share": 0.05, "salt": "h2-2026", "scope": "all"},
        },
        {
            "schemaVersion": 1,
            "kind": "holdout",
            "metadata": {
                "id": "growth-q4",
                "name": "growth-q4",
                "description": "",
                "status": "draft",
                "resourceVersion": 1,
            },
            "spec": {
                "subjectType": "user",
                "share": 0.1,
                "salt": "growth-q4-holdout",
                "scope": {"labs": ["Growth"]},
            },
        },
    ]
    # And the experiment's holdouts as resolved (the listed one, then the bound one), in the order of the YAML;
    # an experiment without holdouts or layer has neither field
    spec = documents[6]["spec"]
    assert list(spec)[4:] == ["enrollment", "holdouts", "layer", "coverage", "variants"]
    assert spec["holdouts"] == ["growth-q4", "H2-2026"]
    assert "holdouts" not in documents[7]["spec"] and "layer" not in documents[7]["spec"]
    # And applying the export changes nothing, and exports the same text again
    (tmp_path / "export.yaml").write_text(exported, encoding="utf-8")
    out = io.StringIO()
    call_command("apply_resources", str(tmp_path / "export.yaml"), stdout=out)
    assert out.getvalue().splitlines() == [
        "subjecttype user: unchanged",
        "lab default: unchanged",
        "lab growth: unchanged",
        "layer flow: unchanged",
        "holdout H2-2026: unchanged",
        "holdout growth-q4: unchanged",
        "experiment checkout-button: unchanged",
        "experiment plain: unchanged",
    ]
    assert export_text() == exported


@pytest.mark.parametrize(
    ("kind", "ids"), [("holdout", ["H2-2026", "growth-q4"]), ("experiment", ["checkout-button", "plain"])]
)
def test_export__kind_holdout_or_experiment__only_that_kind(db, kind, ids):
    apply_resources(*CONFIGURATION)

    documents = list(yaml.safe_load_all(export_text("--kind", kind)))

    assert [(document["kind"], document["metadata"]["id"]) for document in documents] == [(kind, key) for key in ids]


def test_export__holdout_of_a_flushed_database__applies_and_recreates_the_default_lab(db):
    apply_resources(subject_type("user"), holdout("h1"))
    exported = export_text()
    Lab.objects.filter(key="default").update(key="gone")
    Experiment.objects.update(lab=Lab.objects.get(key="gone"))

    results = apply_yaml(exported)

    assert Lab.objects.filter(key="default").exists()
    assert [result.outcome for result in results if result.kind == "holdout"] == ["unchanged"]


def test_resource_history__holdout__newest_first_with_a_diff(users):
    apply_resources(holdout("h1", status="draft"))
    apply_resources(holdout("h1", status="active"))

    versions, lines = resource_history("holdout", "H1")

    assert versions == ["2", "1"]
    assert "-  status: draft" in lines and "+  status: active" in lines
    change = ResourceChange.objects.get(kind="holdout", resource_id="h1", resource_version=1)
    assert change.after == {
        "schemaVersion": 1,
        "kind": "holdout",
        "metadata": {"id": "h1", "name": "h1", "description": "", "status": "draft"},
        "spec": {"subjectType": "user", "share": 0.05, "salt": "h1"},
    }
