"""POST /assignments (assignments/api.py, docs/reference/api.md): one subject, known by one identifier per subject type,
in many experiments."""

from __future__ import annotations

import json

import pytest

from assignments.models import Assignment
from tests.helpers.api import assert_problem, error_fields
from tests.helpers.assignments import assigned_store, reference_variant
from tests.helpers.resources import apply_resources, experiment, split_variants, subject_type

PATH = "/assignments"
DEMO_SPLITS = [("control", 0.5), ("green", 0.5)]
PRICING_SPLITS = [("control", 0.25), ("cheap", 0.25), ("premium", 0.5)]
EMPTY_ANSWER = {"assignments": {}, "new_assignments": [], "unassigned": {}}


@pytest.fixture
def pricing(demo_config):
    """Besides the demo: `pricing`, active, for the subject type `cookie`, split 25/25/50."""
    apply_resources(experiment("pricing", subject_type="cookie", variants=split_variants(PRICING_SPLITS)))


def stored_rows() -> set[tuple[str, str, str, int, str]]:
    """Every stored assignment as (experiment ID, subject ID, variant ID, cohort, source)."""
    return set(Assignment.objects.values_list("experiment__key", "subject_id", "variant__key", "cohort", "source"))


def post(api, body, **extra):
    return api.post(PATH, body, **extra)


def answer(response) -> dict:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


def demo_variant(subject_id: str) -> str:
    return reference_variant("checkout-button", subject_id, DEMO_SPLITS)


def pricing_variant(subject_id: str) -> str:
    return reference_variant("pricing", subject_id, PRICING_SPLITS)


def store(experiment_key: str, subject_id: str, variant_key: str, *, source: str = "forced") -> None:
    assigned_store(experiment_key, subject_id, variant_key, source=source)


def other_variant(variant: str, splits=DEMO_SPLITS) -> str:
    return next(key for key, _ in splits if key != variant)


# --- active experiments: made, stored, returned ---


def test_assignments__new_subject_in_two_experiments__hashed_stored_and_listed_new(api, pricing):
    # When a new user with a cookie is asked for in experiments of each subject type
    response = post(api, {"subject": {"user": "u-1", "cookie": "c-81"}, "experiments": ["checkout-button", "pricing"]})

    # Then each experiment is answered for the identifier of its own subject type, by the formula
    assert answer(response) == {
        "assignments": {"checkout-button": demo_variant("u-1"), "pricing": pricing_variant("c-81")},
        "new_assignments": ["checkout-button", "pricing"],
        "unassigned": {},
    }
    # And both are stored, hashed, in cohort 1, under the identifier of the experiment's subject type
    assert stored_rows() == {
        ("checkout-button", "u-1", demo_variant("u-1"), 1, "hashed"),
        ("pricing", "c-81", pricing_variant("c-81"), 1, "hashed"),
    }


def test_assignments__many_subjects_and_custom_salts__variants_equal_the_independent_formula(api, demo_config):
    # Given three active user experiments: one with the default salt, one with its own, one split 3 ways
    apply_resources(
        experiment("Salted", salt="spring-2024", variants=split_variants([("control", 0.75), ("green", 0.25)])),
        experiment("Three-Way", variants=split_variants(PRICING_SPLITS)),
    )
    expected_rows = set()

    for index in range(40):
        subject_id = f"subject-{index}"
        # When each subject is asked for in all three
        body = answer(
            post(api, {"subject": {"user": subject_id}, "experiments": ["checkout-button", "salted", "three-way"]})
        )

        # Then each variant is the formula's, with the salt configured or else the ID lower-cased
        expected = {
            "checkout-button": reference_variant("checkout-button", subject_id, DEMO_SPLITS),
            "Salted": reference_variant("spring-2024", subject_id, [("control", 0.75), ("green", 0.25)]),
            "Three-Way": reference_variant("three-way", subject_id, PRICING_SPLITS),
        }
        assert body["assignments"] == expected
        assert sorted(body["new_assignments"]) == sorted(expected)
        assert body["unassigned"] == {}
        expected_rows |= {(key, subject_id, variant, 1, "hashed") for key, variant in expected.items()}

    assert stored_rows() == expected_rows


def test_assignments__explicit_assign_true__stores_like_the_default(api, demo_config):
    response = post(api, {"subject": {"user": "u-1"}, "experiments": ["checkout-button"], "assign": True})

    assert answer(response) == {
        "assignments": {"checkout-button": demo_variant("u-1")},
        "new_assignments": ["checkout-button"],
        "unassigned": {},
    }
    assert stored_rows() == {("checkout-button", "u-1", demo_variant("u-1"), 1, "hashed")}


def test_assignments__stored_assignment__returned_as_stored_and_not_new(api, pricing):
    # Given u-1 stored in checkout-button under the variant the formula would not give it
    forced = other_variant(demo_variant("u-1"))
    store("checkout-button", "u-1", forced)

    # When u-1 is asked for in it and in an experiment where it is new
    response = post(api, {"subject": {"user": "u-1", "cookie": "c-81"}, "experiments": ["checkout-button", "pricing"]})

    # Then the stored variant is returned, and only the other experiment's assignment is new
    assert answer(response) == {
        "assignments": {"checkout-button": forced, "pricing": pricing_variant("c-81")},
        "new_assignments": ["pricing"],
        "unassigned": {},
    }
    assert stored_rows() == {
        ("checkout-button", "u-1", forced, 1, "forced"),
        ("pricing", "c-81", pricing_variant("c-81"), 1, "hashed"),
    }


def test_assignments__same_request_twice__same_assignments_and_nothing_new_the_second_time(api, pricing):
    body = {"subject": {"user": "u-1", "cookie": "c-81"}, "experiments": ["pricing", "checkout-button"]}
    first = answer(post(api, body))
    rows = stored_rows()

    second = answer(post(api, body))

    assert second == {"assignments": first["assignments"], "new_assignments": [], "unassigned": {}}
    assert stored_rows() == rows


def test_assignments__new_assignments__in_the_order_of_assignments(api, demo_config):
    # Given four active user experiments, two of which already hold u-1
    apply_resources(*(experiment(key) for key in ("exp-d", "exp-a", "exp-c", "exp-b")))
    store("exp-a", "u-1", "green")
    store("exp-c", "u-1", "control")

    body = answer(post(api, {"subject": {"user": "u-1"}, "experiments": ["exp-d", "exp-a", "exp-c", "exp-b"]}))

    # Then the new ones are exactly those not stored before, listed in the order `assignments` has them
    assert set(body["assignments"]) == {"exp-d", "exp-a", "exp-c", "exp-b"}
    assert body["new_assignments"] == [key for key in body["assignments"] if key in {"exp-d", "exp-b"}]
    assert body["assignments"]["exp-a"] == "green"
    assert body["assignments"]["exp-c"] == "control"


def test_assignments__splits_changed__stored_kept_and_new_subject_in_cohort_2(api, demo_config):
    # Given u-old assigned at 50/50 (cohort 1), then the splits changed to 0/100
    before = answer(post(api, {"subject": {"user": "u-old"}, "experiments": ["checkout-button"]}))
    apply_resources(experiment("checkout-button", variants=split_variants([("control", 0.0), ("green", 1.0)])))

    body = answer(post(api, {"subject": {"user": "u-new"}}))
    again = answer(post(api, {"subject": {"user": "u-old"}}))

    # Then the new subject follows the new splits in cohort 2; the old one keeps its variant and cohort
    assert body == {
        "assignments": {"checkout-button": "green"},
        "new_assignments": ["checkout-button"],
        "unassigned": {},
    }
    assert again == {"assignments": before["assignments"], "new_assignments": [], "unassigned": {}}
    assert stored_rows() == {
        ("checkout-button", "u-old", demo_variant("u-old"), 1, "hashed"),
        ("checkout-button", "u-new", "green", 2, "hashed"),
    }


# --- the same assignment through both endpoints ---


def test_assignments__experiment_assignments_called_first__its_stored_variant_returned_not_new(api, demo_config):
    # Given u-1 assigned through POST /experiment-assignments, then the splits changed so the formula differs
    first = json.loads(
        api.post("/experiment-assignments", {"experiment_id": "checkout-button", "subject_ids": ["u-1"]}).content
    )
    variant = first["assignments"]["u-1"]
    splits = [(key, 1.0 if key != variant else 0.0) for key, _ in DEMO_SPLITS]
    apply_resources(experiment("checkout-button", variants=split_variants(splits)))

    # When it is asked for here
    body = answer(post(api, {"subject": {"user": "u-1"}, "experiments": ["checkout-button"]}))

    # Then the stored assignment is returned, and nothing is stored again
    assert body == {"assignments": {"checkout-button": variant}, "new_assignments": [], "unassigned": {}}
    assert stored_rows() == {("checkout-button", "u-1", variant, 1, "hashed")}


def test_assignments__called_before_experiment_assignments__that_endpoint_returns_the_same_row(api, demo_config):
    # Given u-1 assigned here, then the splits changed so the formula differs
    body = answer(post(api, {"subject": {"user": "u-1"}}))
    variant = body["assignments"]["checkout-button"]
    splits = [(key, 1.0 if key != variant else 0.0) for key, _ in DEMO_SPLITS]
    apply_resources(experiment("checkout-button", variants=split_variants(splits)))

    # When POST /experiment-assignments is asked for u-1 (and a new subject)
    response = api.post("/experiment-assignments", {"experiment_id": "checkout-button", "subject_ids": ["u-1", "u-2"]})

    # Then it returns the row stored here, and stores only the new subject
    other = other_variant(variant)
    assert json.loads(response.content) == {"assignments": {"u-1": variant, "u-2": other}}
    assert stored_rows() == {
        ("checkout-button", "u-1", variant, 1, "hashed"),
        ("checkout-button", "u-2", other, 2, "hashed"),
    }


# --- IDs: case of experiment and subject type IDs, subject IDs exactly as sent ---


def test_assignments__experiment_id_in_other_case__answered_under_the_configured_id(api, demo_config):
    apply_resources(experiment("Pricing-Page"))

    body = answer(post(api, {"subject": {"user": "u-1"}, "experiments": ["pricing-PAGE", "CHECKOUT-BUTTON"]}))

    # The default salt is the configured ID lower-cased
    assert body == {
        "assignments": {
            "Pricing-Page": reference_variant("pricing-page", "u-1", DEMO_SPLITS),
            "checkout-button": demo_variant("u-1"),
        },
        "new_assignments": [key for key in body["assignments"]],
        "unassigned": {},
    }
    assert {row[0] for row in stored_rows()} == {"Pricing-Page", "checkout-button"}


def test_assignments__duplicate_experiments_differing_in_case__answered_once_and_stored_once(api, demo_config):
    response = post(
        api,
        {
            "subject": {"user": "u-1"},
            "experiments": ["checkout-button", "CHECKOUT-BUTTON", "Checkout-Button", "checkout-button"],
        },
    )

    assert answer(response) == {
        "assignments": {"checkout-button": demo_variant("u-1")},
        "new_assignments": ["checkout-button"],
        "unassigned": {},
    }
    assert Assignment.objects.count() == 1


def test_assignments__subject_type_key_in_other_case__matches_the_subject_type(api, pricing):
    response = post(api, {"subject": {"USER": "u-1", "Cookie": "c-81"}})

    assert answer(response) == {
        "assignments": {"checkout-button": demo_variant("u-1"), "pricing": pricing_variant("c-81")},
        "new_assignments": ["checkout-button", "pricing"],
        "unassigned": {},
    }
    assert {(row[0], row[1]) for row in stored_rows()} == {("checkout-button", "u-1"), ("pricing", "c-81")}


@pytest.mark.parametrize(
    "subject_id",
    [" u-1", "u-1 ", "U-1", "e\N{COMBINING ACUTE ACCENT}", "\N{GRINNING FACE}" * 256, "x" * 256],
    ids=["leading-space", "trailing-space", "upper-case", "combining-accent", "256-emoji", "256-ascii"],
)
def test_assignments__subject_id__stored_and_hashed_exactly_as_sent(api, demo_config, subject_id):
    body = answer(post(api, {"subject": {"user": subject_id}}))

    assert body["assignments"] == {"checkout-button": demo_variant(subject_id)}
    assert stored_rows() == {("checkout-button", subject_id, demo_variant(subject_id), 1, "hashed")}


# --- `experiments` left out: the running experiments of the subject's types ---


def test_assignments__experiments_left_out__running_experiments_of_its_types_ordered_ignoring_case(api, demo_config):
    # Given user experiments in every status, one of the subject's other type, and one of a type it lacks
    apply_resources(
        subject_type("device", status="active"),
        experiment("Zulu"),
        experiment("alpha", status="winner_declared", winning_variant="green"),
        experiment("Beta-Draft", status="draft"),
        experiment("beta-ended", status="ended"),
        experiment("beta-archived", status="archived"),
        experiment("Mike", subject_type="cookie"),
        experiment("device-exp", subject_type="device"),
    )

    body = answer(post(api, {"subject": {"cookie": "c-81", "user": "u-1"}}))

    # Then only the active and winner-declared ones of `user` and `cookie`, ordered by ID ignoring case
    assert body == {
        "assignments": {
            "alpha": "green",
            "checkout-button": demo_variant("u-1"),
            "Mike": reference_variant("mike", "c-81", DEMO_SPLITS),
            "Zulu": reference_variant("zulu", "u-1", DEMO_SPLITS),
        },
        "new_assignments": ["checkout-button", "Mike", "Zulu"],
        "unassigned": {},
    }
    assert list(body["assignments"]) == ["alpha", "checkout-button", "Mike", "Zulu"]
    assert stored_rows() == {
        ("checkout-button", "u-1", demo_variant("u-1"), 1, "hashed"),
        ("Mike", "c-81", reference_variant("mike", "c-81", DEMO_SPLITS), 1, "hashed"),
        ("Zulu", "u-1", reference_variant("zulu", "u-1", DEMO_SPLITS), 1, "hashed"),
    }


def test_assignments__experiments_left_out_and_none_running_for_its_types__empty_answer(api, demo_config):
    response = post(api, {"subject": {"cookie": "c-81"}})

    assert answer(response) == EMPTY_ANSWER
    assert Assignment.objects.count() == 0


def test_assignments__experiments_left_out_with_assign_false__stored_and_winners_only(api, demo_config):
    # Given u-1 stored in one active experiment, a second active one where it is new, and a winner-declared one
    apply_resources(experiment("fresh"), experiment("won", status="winner_declared", winning_variant="control"))
    store("checkout-button", "u-1", "green")

    body = answer(post(api, {"subject": {"user": "u-1"}, "assign": False}))

    assert body == {
        "assignments": {"checkout-button": "green", "won": "control"},
        "new_assignments": [],
        "unassigned": {"fresh": "not_assigned"},
    }
    assert stored_rows() == {("checkout-button", "u-1", "green", 1, "forced")}


# --- experiments without a variant: `unassigned` and its reasons ---


@pytest.mark.parametrize(
    ("other", "asked_as", "unassigned"),
    [
        (experiment("Stopped", status="draft"), "stopped", {"Stopped": "experiment_not_active"}),
        (experiment("Stopped", status="ended"), "stopped", {"Stopped": "experiment_not_active"}),
        (experiment("Stopped", status="archived"), "stopped", {"Stopped": "experiment_not_active"}),
        (
            experiment("pricing", subject_type="cookie", variants=split_variants(PRICING_SPLITS)),
            "pricing",
            {"pricing": "subject_type_missing"},
        ),
    ],
    ids=["not-running-draft", "not-running-ended", "not-running-archived", "no-identifier-of-its-subject-type"],
)
def test_assignments__asked_for_an_experiment_it_cannot_assign__unassigned_with_the_reason_and_nothing_stored(
    api, demo_config, other, asked_as, unassigned
):
    # Given besides the demo an experiment that is not running, or one that assigns cookies (the request has only a
    # user ID)
    apply_resources(other)

    response = post(api, {"subject": {"user": "u-1"}, "experiments": [asked_as, "checkout-button"]})

    assert answer(response) == {
        "assignments": {"checkout-button": demo_variant("u-1")},
        "new_assignments": ["checkout-button"],
        "unassigned": unassigned,
    }
    assert stored_rows() == {("checkout-button", "u-1", demo_variant("u-1"), 1, "hashed")}


def test_assignments__ended_experiment_with_a_stored_assignment__unassigned_experiment_not_active(api, demo_config):
    # Given u-1 assigned while checkout-button was active, then the experiment ended
    answer(post(api, {"subject": {"user": "u-1"}}))
    apply_resources(experiment("checkout-button", status="ended"))
    rows = stored_rows()

    response = post(api, {"subject": {"user": "u-1"}, "experiments": ["checkout-button"]})

    assert answer(response) == {
        "assignments": {},
        "new_assignments": [],
        "unassigned": {"checkout-button": "experiment_not_active"},
    }
    assert stored_rows() == rows


def test_assignments__subject_id_of_another_type_equal_to_a_stored_one__not_used(api, pricing):
    # Given the cookie ID "u-1" stored in pricing; the request has "u-1" only as a user
    store("pricing", "u-1", "premium")

    response = post(api, {"subject": {"user": "u-1"}, "experiments": ["pricing"]})

    assert answer(response) == {
        "assignments": {},
        "new_assignments": [],
        "unassigned": {"pricing": "subject_type_missing"},
    }


def test_assignments__assign_false__stored_returned_missing_not_assigned_and_nothing_stored(api, pricing):
    # Given u-1 stored in checkout-button, and c-81 never assigned in pricing
    store("checkout-button", "u-1", "green")
    rows = stored_rows()

    response = post(
        api,
        {"subject": {"user": "u-1", "cookie": "c-81"}, "experiments": ["checkout-button", "pricing"], "assign": False},
    )

    assert answer(response) == {
        "assignments": {"checkout-button": "green"},
        "new_assignments": [],
        "unassigned": {"pricing": "not_assigned"},
    }
    assert stored_rows() == rows


def test_assignments__winner_declared__the_winner_for_stored_and_new_subjects_and_nothing_stored(api, demo_config):
    # Given u-1 and u-2 stored in both variants, then `green` declared the winner (written in other case)
    store("checkout-button", "u-1", "control")
    store("checkout-button", "u-2", "green")
    apply_resources(experiment("checkout-button", status="winner_declared", winning_variant="GREEN"))
    rows = stored_rows()

    # Then every subject, stored or new, assigning or not, gets the winner as its variant is written
    for subject_id in ("u-1", "u-2", "u-new"):
        for assign in (True, False):
            response = post(
                api, {"subject": {"user": subject_id}, "experiments": ["checkout-button"], "assign": assign}
            )
            assert answer(response) == {
                "assignments": {"checkout-button": "green"},
                "new_assignments": [],
                "unassigned": {},
            }
    assert stored_rows() == rows


@pytest.mark.parametrize(
    ("other", "fields", "reason"),
    [
        (
            experiment("won", subject_type="cookie", status="winner_declared", winning_variant="green"),
            {},
            "subject_type_missing",
        ),
        (experiment("later", subject_type="cookie", status="draft"), {"assign": True}, "experiment_not_active"),
        (experiment("later", subject_type="cookie", status="draft"), {"assign": False}, "experiment_not_active"),
        (
            experiment("pricing", subject_type="cookie", variants=split_variants(PRICING_SPLITS)),
            {"assign": False},
            "subject_type_missing",
        ),
        (experiment("old", status="ended"), {"assign": False}, "experiment_not_active"),
    ],
    ids=[
        "winner-declared-without-identifier-of-its-type",
        "not-active-and-subject-type-missing",
        "not-active-and-subject-type-missing-assign-false",
        "assign-false-and-subject-type-missing",
        "assign-false-and-not-active",
    ],
)
def test_assignments__only_experiment_asked_for_unassignable__the_reason_that_comes_first(
    api, demo_config, other, fields, reason
):
    apply_resources(other)
    key = other["metadata"]["id"]

    response = post(api, {"subject": {"user": "u-1"}, "experiments": [key], **fields})

    assert answer(response) == {"assignments": {}, "new_assignments": [], "unassigned": {key: reason}}


def test_assignments__every_case_in_one_request__each_experiment_in_exactly_one_of_the_two(api, pricing):
    # Given: stored, new, winner, draft, ended, and of a missing type
    apply_resources(
        subject_type("device", status="active"),
        experiment("Won", status="winner_declared", winning_variant="control"),
        experiment("Draft-One", status="draft"),
        experiment("ended-one", status="ended"),
        experiment("on-device", subject_type="device"),
        experiment("fresh"),
    )
    store("checkout-button", "u-1", "green")
    named = ["checkout-button", "fresh", "won", "draft-one", "ENDED-ONE", "on-device", "pricing"]

    body = answer(post(api, {"subject": {"user": "u-1", "cookie": "c-81"}, "experiments": named}))

    assert body == {
        "assignments": {
            "checkout-button": "green",
            "fresh": reference_variant("fresh", "u-1", DEMO_SPLITS),
            "Won": "control",
            "pricing": pricing_variant("c-81"),
        },
        "new_assignments": [key for key in body["assignments"] if key in {"fresh", "pricing"}],
        "unassigned": {
            "Draft-One": "experiment_not_active",
            "ended-one": "experiment_not_active",
            "on-device": "subject_type_missing",
        },
    }
    assert set(body["assignments"]).isdisjoint(body["unassigned"])
    assert stored_rows() == {
        ("checkout-button", "u-1", "green", 1, "forced"),
        ("fresh", "u-1", reference_variant("fresh", "u-1", DEMO_SPLITS), 1, "hashed"),
        ("pricing", "c-81", pricing_variant("c-81"), 1, "hashed"),
    }


# --- experiments that do not exist ---


@pytest.mark.parametrize("assign", [True, False])
@pytest.mark.parametrize(
    "unknown",
    ["no-such-experiment", " pricing", "pricing ", "pricing_", "pric\N{KELVIN SIGN}ing", "x" * 1000],
    ids=["unknown", "leading-space", "trailing-space", "underscore", "kelvin-sign", "long"],
)
def test_assignments__one_experiment_names_none__404_and_nothing_stored_for_the_others(api, pricing, unknown, assign):
    response = post(
        api,
        {
            "subject": {"user": "u-1", "cookie": "c-81"},
            "experiments": ["checkout-button", unknown, "pricing"],
            "assign": assign,
        },
    )

    assert_problem(response, status=404, code="experiment_not_found")
    assert Assignment.objects.count() == 0


# --- `subject`: its keys name active subject types ---


@pytest.mark.parametrize(
    "key",
    ["visitor", "user ", "us_er", "us\N{KELVIN SIGN}er", "u" * 101],
    ids=["unknown", "trailing-space", "underscore", "kelvin-sign", "too-long-for-an-id"],
)
def test_assignments__subject_key_names_no_subject_type__400_unknown_subject_type_at_the_key_as_sent(
    api, demo_config, key
):
    response = post(api, {"subject": {"user": "u-1", key: "v-1"}, "experiments": ["checkout-button"]})

    body = assert_problem(response, status=400, code="unknown_subject_type")
    assert error_fields(body) == [f"subject.{key}"]
    assert Assignment.objects.count() == 0


def test_assignments__archived_subject_type__400_unknown_subject_type_and_nothing_stored(api, demo_config):
    apply_resources(subject_type("Legacy", status="archived"))

    response = post(api, {"subject": {"user": "u-1", "LEGACY": "l-1"}})

    body = assert_problem(response, status=400, code="unknown_subject_type")
    assert error_fields(body) == ["subject.LEGACY"]
    assert Assignment.objects.count() == 0


def test_assignments__two_keys_naming_one_subject_type__400_invalid_request_at_subject(api, demo_config):
    response = post(api, {"subject": {"user": "u-1", "User": "u-2"}, "experiments": ["checkout-button"]})

    body = assert_problem(response, status=400, code="invalid_request")
    assert error_fields(body) == ["subject"]
    assert Assignment.objects.count() == 0


def test_assignments__10_identifiers__accepted_and_11_rejected(api, demo_config):
    # Given eleven active subject types
    extra_types = [f"type-{index}" for index in range(9)]
    apply_resources(*(subject_type(key, status="active") for key in extra_types))
    ten = {"user": "u-1", **{key: f"{key}-id" for key in extra_types}}

    assert answer(post(api, {"subject": ten})) == {
        "assignments": {"checkout-button": demo_variant("u-1")},
        "new_assignments": ["checkout-button"],
        "unassigned": {},
    }
    Assignment.objects.all().delete()

    body = assert_problem(post(api, {"subject": {**ten, "cookie": "c-81"}}), status=400, code="invalid_request")
    assert error_fields(body) == ["subject"]
    assert Assignment.objects.count() == 0


# --- body limits: every rule, each with its field path, nothing stored ---

VALID_SUBJECT = {"user": "u-1"}
VALID_EXPERIMENTS = ["checkout-button"]


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        pytest.param([], [""], id="body-array"),
        pytest.param("subject", [""], id="body-string"),
        pytest.param(1, [""], id="body-number"),
        pytest.param(None, [""], id="body-null"),
        pytest.param({"experiments": VALID_EXPERIMENTS}, ["subject"], id="subject-missing"),
        pytest.param({"subject": None}, ["subject"], id="subject-null"),
        pytest.param({"subject": "u-1"}, ["subject"], id="subject-string"),
        pytest.param({"subject": [["user", "u-1"]]}, ["subject"], id="subject-array"),
        pytest.param({"subject": {}}, ["subject"], id="subject-0-entries"),
        pytest.param({"subject": {f"t{index}": "x" for index in range(11)}}, ["subject"], id="subject-11-entries"),
        pytest.param({"subject": {"User": ""}}, ["subject.User"], id="subject-id-empty"),
        pytest.param({"subject": {"User": "x" * 257}}, ["subject.User"], id="subject-id-257"),
        pytest.param({"subject": {"User": "\N{GRINNING FACE}" * 257}}, ["subject.User"], id="subject-id-257-emoji"),
        pytest.param({"subject": {"User": "u\x001"}}, ["subject.User"], id="subject-id-nul"),
        pytest.param({"subject": {"User": "u-1\n"}}, ["subject.User"], id="subject-id-newline"),
        pytest.param({"subject": {"User": "\tu-1"}}, ["subject.User"], id="subject-id-tab"),
        pytest.param({"subject": {"User": "u\x7f1"}}, ["subject.User"], id="subject-id-del"),
        pytest.param({"subject": {"User": "u\x851"}}, ["subject.User"], id="subject-id-c1"),
        pytest.param({"subject": {"User": 1}}, ["subject.User"], id="subject-id-number"),
        pytest.param({"subject": {"User": None}}, ["subject.User"], id="subject-id-null"),
        pytest.param({"subject": {"User": ["u-1"]}}, ["subject.User"], id="subject-id-array"),
        pytest.param({"subject": {"User": True}}, ["subject.User"], id="subject-id-boolean"),
        pytest.param({"subject": VALID_SUBJECT, "experiments": []}, ["experiments"], id="experiments-empty"),
        pytest.param({"subject": VALID_SUBJECT, "experiments": None}, ["experiments"], id="experiments-null"),
        pytest.param(
            {"subject": VALID_SUBJECT, "experiments": "checkout-button"}, ["experiments"], id="experiments-string"
        ),
        pytest.param(
            {"subject": VALID_SUBJECT, "experiments": ["checkout-button"] * 101}, ["experiments"], id="experiments-101"
        ),
        pytest.param(
            {"subject": VALID_SUBJECT, "experiments": ["checkout-button", 7]}, ["experiments.1"], id="experiment-number"
        ),
        pytest.param(
            {"subject": VALID_SUBJECT, "experiments": [None, "checkout-button", ["pricing"], {"id": "x"}, True]},
            ["experiments.0", "experiments.2", "experiments.3", "experiments.4"],
            id="experiments-several-non-strings",
        ),
        pytest.param(
            {"subject": VALID_SUBJECT, "experiments": ["checkout-button", ""]}, ["experiments.1"], id="experiment-empty"
        ),
        pytest.param({"subject": VALID_SUBJECT, "assign": "false"}, ["assign"], id="assign-string-false"),
        pytest.param({"subject": VALID_SUBJECT, "assign": "true"}, ["assign"], id="assign-string-true"),
        pytest.param({"subject": VALID_SUBJECT, "assign": 0}, ["assign"], id="assign-0"),
        pytest.param({"subject": VALID_SUBJECT, "assign": 1}, ["assign"], id="assign-1"),
        pytest.param({"subject": VALID_SUBJECT, "assign": None}, ["assign"], id="assign-null"),
        pytest.param({"subject": VALID_SUBJECT, "assign": []}, ["assign"], id="assign-array"),
    ],
)
def test_assignments__invalid_body__400_invalid_request_naming_the_field_and_nothing_stored(
    api, demo_config, body, fields
):
    # The rest of each body is valid: left alone, it would store an assignment
    if isinstance(body, dict):
        body = {"experiments": VALID_EXPERIMENTS, **body}

    response = post(api, json.dumps(body))

    problem = assert_problem(response, status=400, code="invalid_request")
    assert error_fields(problem) == fields
    assert Assignment.objects.count() == 0


def test_assignments__100_experiment_ids__accepted(api, demo_config):
    # 100 is the limit on what is sent, duplicates included; each is answered once
    response = post(api, {"subject": VALID_SUBJECT, "experiments": ["checkout-button", "CHECKOUT-BUTTON"] * 50})

    assert answer(response) == {
        "assignments": {"checkout-button": demo_variant("u-1")},
        "new_assignments": ["checkout-button"],
        "unassigned": {},
    }


# --- who may call it ---


def test_assignments__proxy_token_allowed_and_no_token_401(api, anonymous_api, demo_config):
    body = {"subject": VALID_SUBJECT, "experiments": VALID_EXPERIMENTS}

    response = post(anonymous_api, body)
    assert_problem(response, status=401, code="not_authenticated")
    assert Assignment.objects.count() == 0

    assert answer(post(api, body))["assignments"] == {"checkout-button": demo_variant("u-1")}
