"""POST /experiment-assignments (assignments/api.py, docs/reference/api.md), through Django's full request
stack: the answers, every validation rule, and the transport rules, every error problem+json."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from django.test import Client, override_settings

from assignments.cache import experiment_states
from assignments.models import Assignment, Experiment
from tests.helpers.api import assert_one_invalid_field, assert_problem, error_fields
from tests.helpers.assignments import reference_variant
from tests.helpers.resources import apply_resources, experiment, split_variants

PATH = "/experiment-assignments"
DEMO_SPLITS = [("control", 0.5), ("green", 0.5)]


ALL_GREEN = [("control", 0.0), ("green", 1.0)]


def stored(experiment_key: str = "checkout-button") -> dict[str, tuple[str, int]]:
    rows = Assignment.objects.filter(experiment__key=experiment_key).values_list("subject_id", "variant__key", "cohort")
    return {subject_id: (variant, cohort) for subject_id, variant, cohort in rows}


def assign(api, subject_ids, experiment_id="checkout-button", **extra):
    return api.post(PATH, {"experiment_id": experiment_id, "subject_ids": subject_ids}, **extra)


def test_assign__new_subjects__answered_by_the_formula_and_stored_in_cohort_1(api, demo_config):
    # When two new subjects are asked for
    response = assign(api, ["u1", "u2"])

    # Then the answer has the single key `assignments` with the pinned variants of the assignment formula
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {"assignments": {"u1": "control", "u2": "green"}}
    # And both are stored, in cohort 1
    assert stored() == {"u1": ("control", 1), "u2": ("green", 1)}


def test_assign__many_new_subjects__variants_equal_the_independent_formula(api, demo_config):
    subject_ids = [f"subject-{index}" for index in range(1000)]

    assignments = json.loads(assign(api, subject_ids).content)["assignments"]

    expected = {subject_id: reference_variant("checkout-button", subject_id, DEMO_SPLITS) for subject_id in subject_ids}
    assert assignments == expected
    assert {subject_id: variant for subject_id, (variant, _) in stored().items()} == expected


def test_assign__existing_assignment__returned_as_stored_not_recomputed(api, demo_config):
    # Given u1 stored under the variant the formula would not give it
    experiment = Experiment.objects.get(key="checkout-button")
    assert reference_variant("checkout-button", "u1", DEMO_SPLITS) == "control"
    Assignment.objects.create(
        experiment=experiment, subject_id="u1", variant=experiment.variants.get(key="green"), cohort=1
    )

    # When it is asked for again, along with a new subject
    response = assign(api, ["u1", "u2"])

    # Then the stored variant is returned and nothing is overwritten
    assert json.loads(response.content)["assignments"] == {"u1": "green", "u2": "green"}
    assert stored()["u1"] == ("green", 1)
    assert Assignment.objects.count() == 2


def test_assign__same_subjects_again__same_answer_and_no_new_rows(api, demo_config):
    subject_ids = [f"s{index}" for index in range(50)]
    first = json.loads(assign(api, subject_ids).content)
    second = json.loads(assign(api, list(reversed(subject_ids))).content)
    assert first == second
    assert Assignment.objects.count() == 50


def test_assign__duplicate_subject_ids__answered_once_and_stored_once(api, demo_config):
    response = assign(api, ["u1", "u2", "u1", "u1", "u2"])

    assert response.status_code == 200
    assert json.loads(response.content) == {"assignments": {"u1": "control", "u2": "green"}}
    assert Assignment.objects.count() == 2


def test_assign__ids_differing_in_spaces_case_and_unicode_form__kept_exactly_as_sent(api, demo_config):
    # Given IDs that a trimming, case-folding or normalising server would merge
    subject_ids = [
        "u1",
        " u1",
        "u1 ",
        " u1 ",
        "U1",
        "\N{LATIN SMALL LETTER E WITH ACUTE}",
        "e\N{COMBINING ACUTE ACCENT}",
        "\N{GRINNING FACE}",
        "\N{FAMILY}\N{VARIATION SELECTOR-16}",
        "\u00a0u1",
        "\u200bu1",
        "x" * 256,
        "\N{GRINNING FACE}" * 256,
    ]

    response = assign(api, subject_ids)

    # Then each one is its own key, exactly as sent, and its own stored row
    assert response.status_code == 200, response.content
    assignments = json.loads(response.content.decode("utf-8"))["assignments"]
    assert list(assignments) == subject_ids
    assert set(stored()) == set(subject_ids)
    expected = {subject_id: reference_variant("checkout-button", subject_id, DEMO_SPLITS) for subject_id in subject_ids}
    assert assignments == expected


def test_assign__response_keys__in_the_order_first_sent(api, demo_config):
    subject_ids = ["zeta", "alpha", "mu", "alpha", "beta"]
    assignments = json.loads(assign(api, subject_ids).content)["assignments"]
    assert list(assignments) == ["zeta", "alpha", "mu", "beta"]


def test_assign__experiment_id_in_other_case__matches_the_experiment(api, demo_config):
    first = json.loads(assign(api, ["u1", "u2"], experiment_id="CHECKOUT-BUTTON").content)
    second = json.loads(assign(api, ["u1", "u2", "u3"], experiment_id="Checkout-Button").content)

    assert first == {"assignments": {"u1": "control", "u2": "green"}}
    assert second["assignments"]["u1"] == "control"
    assert set(stored()) == {"u1", "u2", "u3"}


def test_assign__variant_ids__returned_exactly_as_written_in_the_configuration(api, demo_config):
    apply_resources(experiment("checkout-button", variants=split_variants([("Control-A", 0.0), ("Green.B", 1.0)])))

    assignments = json.loads(assign(api, ["u1"]).content)["assignments"]

    assert assignments == {"u1": "Green.B"}


@pytest.mark.parametrize(
    "experiment_id",
    [
        "no-such-experiment",
        " checkout-button",
        "checkout-button ",
        "checkout-button\n",
        "checkout_button",
        "chec\N{KELVIN SIGN}out-button",
        "x" * 1000,
    ],
    ids=["unknown", "leading-space", "trailing-space", "trailing-newline", "underscore", "kelvin-sign", "long"],
)
def test_assign__unknown_experiment__404_experiment_not_found(api, demo_config, experiment_id):
    # Experiment IDs are matched ignoring ASCII case only: never trimmed, never folded from look-alikes.
    response = assign(api, ["u1"], experiment_id=experiment_id)

    body = assert_problem(response, status=404, code="experiment_not_found")
    assert repr(experiment_id)[:20] in body["detail"]
    assert Assignment.objects.count() == 0


def test_assign__experiment_created_by_another_process_after_a_404__found_next_time(api, demo_config, monkeypatch):
    monkeypatch.setattr(experiment_states, "clear", lambda: None)
    assert_problem(assign(api, ["u1"], experiment_id="late"), status=404, code="experiment_not_found")

    apply_resources(experiment("late"))

    assert assign(api, ["u1"], experiment_id="late").status_code == 200


@pytest.mark.parametrize("status", ["draft", "ended", "archived"])
def test_assign__experiment_not_active__409_with_its_status_and_nothing_stored(api, demo_config, status):
    # Given an experiment that has stored assignments, then left (or never reached) `active`
    apply_resources(experiment("other", status="draft"))
    if status != "draft":
        apply_resources(experiment("other"))
        assign(api, ["u1"], experiment_id="other")
        apply_resources(experiment("other", status=status))
    before = Assignment.objects.count()

    response = assign(api, ["u1", "u2"], experiment_id="OTHER")

    body = assert_problem(response, status=409, code="experiment_not_active")
    assert body["experiment_status"] == status
    assert body["detail"] == (
        f"Experiment 'other' is {status}: subjects are assigned while it is active, and given its winning variant "
        "once a winner is declared."
    )
    assert Assignment.objects.count() == before


def test_assign__winner_declared__everyone_gets_the_winner_and_nothing_is_stored(api, demo_config):
    # Given u1 (control) and u2 (green) stored while active, then `control` declared the winner
    assign(api, ["u1", "u2"])
    apply_resources(experiment("checkout-button", status="winner_declared", winning_variant="control"))
    before = stored()

    response = assign(api, ["u1", "u2", "new-1", "new-2", "new-1"])

    # Then every distinct subject, stored or new, gets the winner, and no row is written
    assert response.status_code == 200
    assert json.loads(response.content) == {
        "assignments": {"u1": "control", "u2": "control", "new-1": "control", "new-2": "control"}
    }
    assert stored() == before


def test_assign__winner_declared_winner_id_case__answered_as_written_on_the_variant(api, demo_config):
    apply_resources(experiment("checkout-button", status="winner_declared", winning_variant="GREEN"))
    assert json.loads(assign(api, ["u1"]).content) == {"assignments": {"u1": "green"}}
    assert Assignment.objects.count() == 0


def test_assign__splits_changed__old_assignments_kept_and_new_subjects_in_cohort_2(api, demo_config):
    # Given 200 subjects assigned at 50/50 (cohort 1)
    old_subjects = [f"old-{index}" for index in range(200)]
    before = json.loads(assign(api, old_subjects).content)["assignments"]
    assert set(before.values()) == {"control", "green"}

    # When the splits change to 0/100
    apply_resources(experiment("checkout-button", variants=split_variants(ALL_GREEN)))
    new_subjects = [f"new-{index}" for index in range(200)]
    after = json.loads(assign(api, old_subjects + new_subjects).content)["assignments"]

    # Then the old subjects keep their variant and cohort 1; the new ones all get green, cohort 2
    assert {subject_id: after[subject_id] for subject_id in old_subjects} == before
    assert {after[subject_id] for subject_id in new_subjects} == {"green"}
    rows = stored()
    assert {rows[subject_id] for subject_id in new_subjects} == {("green", 2)}
    assert {subject_id: rows[subject_id] for subject_id in old_subjects} == {
        subject_id: (variant, 1) for subject_id, variant in before.items()
    }


def test_assign__third_cohort__new_subjects_follow_its_splits(api, demo_config):
    apply_resources(experiment("checkout-button", variants=split_variants(ALL_GREEN)))
    apply_resources(experiment("checkout-button", variants=split_variants([("control", 1.0), ("green", 0.0)])))

    response = assign(api, ["a", "b", "c"])

    assert json.loads(response.content) == {"assignments": {"a": "control", "b": "control", "c": "control"}}
    assert set(stored().values()) == {("control", 3)}


def test_assign__changes_applied_by_another_process__honoured_by_the_next_request(api, demo_config, monkeypatch):
    # Given this process has the experiment's state cached
    assign(api, ["u1"])
    # And applies that do not clear this process's cache, as when another process runs them
    monkeypatch.setattr(experiment_states, "clear", lambda: None)

    # When the splits change elsewhere, new subjects follow the new splits, in cohort 2
    apply_resources(experiment("checkout-button", variants=split_variants(ALL_GREEN)))
    assert json.loads(assign(api, ["u1", "n1", "n2"]).content)["assignments"] == {
        "u1": "control",
        "n1": "green",
        "n2": "green",
    }
    assert stored()["n1"] == ("green", 2)

    # And when the experiment ends elsewhere, the next request is refused and stores nothing
    apply_resources(experiment("checkout-button", status="ended", variants=split_variants(ALL_GREEN)))
    body = assert_problem(assign(api, ["n3"]), status=409, code="experiment_not_active")
    assert body["experiment_status"] == "ended"
    assert "n3" not in stored()


def test_assign__admin_token__allowed(admin_token, demo_config):
    from tests.helpers.api import ApiClient

    response = assign(ApiClient(admin_token), ["u1"])
    assert response.status_code == 200


def test_assign__no_token__401_problem_and_nothing_stored(anonymous_api, demo_config):
    response = assign(anonymous_api, ["u1"])
    assert_problem(response, status=401, code="not_authenticated")
    assert response["WWW-Authenticate"] == "Bearer"
    assert Assignment.objects.count() == 0


# --- validation: every rule, each with its `errors` field, nothing stored ---


def test_assign__257_character_id__rejected_and_256_accepted(api, demo_config):
    response = assign(api, ["ok", "x" * 257])

    body = assert_problem(response, status=400, code="invalid_request")
    assert body["errors"] == [{"field": "subject_ids.1", "message": "must be at most 256 characters"}]
    assert Assignment.objects.count() == 0
    assert assign(api, ["x" * 256]).status_code == 200


def test_assign__length_counted_in_characters_not_bytes__256_emoji_accepted_257_rejected(api, demo_config):
    emoji = "\N{GRINNING FACE}"
    assert assign(api, [emoji * 256]).status_code == 200
    body = assert_problem(assign(api, [emoji * 257]), status=400, code="invalid_request")
    assert error_fields(body) == ["subject_ids.0"]


def test_assign__1001_subjects__rejected_and_1000_accepted(api, demo_config):
    body = assert_problem(assign(api, [f"s{index}" for index in range(1001)]), status=400, code="invalid_request")
    assert error_fields(body) == ["subject_ids"]
    assert "1000" in body["errors"][0]["message"]
    assert Assignment.objects.count() == 0

    response = assign(api, [f"s{index}" for index in range(1000)])
    assert response.status_code == 200
    assert Assignment.objects.count() == 1000


def test_assign__1001_items_all_duplicates__still_rejected_by_count(api, demo_config):
    # The cap is on what the client sends, not on what is left after de-duplication.
    assert_problem(assign(api, ["same"] * 1001), status=400, code="invalid_request")


@override_settings(ASSIGNMENT_MAX_SUBJECTS=3)
def test_assign__max_subjects_setting__honoured(api, demo_config):
    body = assert_problem(assign(api, ["a", "b", "c", "d"]), status=400, code="invalid_request")
    assert body["errors"] == [{"field": "subject_ids", "message": "must contain at most 3 items, got 4"}]
    assert assign(api, ["a", "b", "c"]).status_code == 200


def test_assign__non_string_items__rejected_never_coerced_with_each_index_named(api, demo_config):
    # Given numbers, booleans, null, objects and arrays among valid IDs
    subject_ids = ["ok", 1, 1.5, True, None, {"id": "u1"}, ["u1"], "fine", 0]

    response = assign(api, subject_ids)

    # Then each bad item is named by its index, and not even the valid ones are stored
    body = assert_problem(response, status=400, code="invalid_request")
    assert error_fields(body) == [f"subject_ids.{index}" for index in (1, 2, 3, 4, 5, 6, 8)]
    assert {error["message"] for error in body["errors"]} == {"must be a string"}
    assert "subject_ids.1: must be a string" in body["detail"]
    assert Assignment.objects.count() == 0


@pytest.mark.parametrize(
    "bad",
    ["", "a\x00b", "a\nb", "\tu1", "u1\r", "a\x1fb", "a\x7fb", "a\x85b", "a\x9fb"],
    ids=["empty", "nul", "newline", "tab", "carriage-return", "unit-separator", "del", "nel-c1", "apc-c1"],
)
def test_assign__empty_or_control_character_id__rejected(api, demo_config, bad):
    body = assert_problem(assign(api, ["ok", bad]), status=400, code="invalid_request")
    assert error_fields(body) == ["subject_ids.1"]
    assert Assignment.objects.count() == 0


def test_assign__lone_surrogate_id__rejected(api, demo_config):
    # JSON may carry "\ud800" escapes that are no Unicode text; they can be neither hashed nor stored.
    raw = '{"experiment_id": "checkout-button", "subject_ids": ["ok", "a\\ud800b"]}'
    body = assert_problem(api.post(PATH, raw), status=400, code="invalid_request")
    assert error_fields(body) == ["subject_ids.1"]


def test_assign__escaped_surrogate_pair__is_the_emoji_it_encodes(api, demo_config):
    raw = '{"experiment_id": "checkout-button", "subject_ids": ["\\ud83d\\ude00"]}'
    response = api.post(PATH, raw)
    assert json.loads(response.content) == {"assignments": {"\N{GRINNING FACE}": "control"}}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"experiment_id": "checkout-button"}, "subject_ids", "is required"),
        ({"experiment_id": "checkout-button", "subject_ids": []}, "subject_ids", "must contain at least 1 item"),
        ({"experiment_id": "checkout-button", "subject_ids": None}, "subject_ids", "must not be null"),
        ({"experiment_id": "checkout-button", "subject_ids": "u1"}, "subject_ids", "must be an array of strings"),
        (
            {"experiment_id": "checkout-button", "subject_ids": {"0": "u1"}},
            "subject_ids",
            "must be an array of strings",
        ),
        ({"subject_ids": ["u1"]}, "experiment_id", "is required"),
        ({"experiment_id": None, "subject_ids": ["u1"]}, "experiment_id", "must not be null"),
        ({"experiment_id": 12, "subject_ids": ["u1"]}, "experiment_id", "must be a string"),
        ({"experiment_id": ["checkout-button"], "subject_ids": ["u1"]}, "experiment_id", "must be a string"),
        ({"experiment_id": "", "subject_ids": ["u1"]}, "experiment_id", "must not be empty"),
    ],
)
def test_assign__missing_or_mistyped_field__400_naming_the_field(api, demo_config, body, field, message):
    response = api.post(PATH, body)

    assert_one_invalid_field(response, field, message)
    assert Assignment.objects.count() == 0


def test_assign__both_fields_wrong__both_listed(api, demo_config):
    body = assert_problem(api.post(PATH, {"experiment_id": 1, "subject_ids": [2]}), status=400, code="invalid_request")
    assert sorted(error_fields(body)) == ["experiment_id", "subject_ids.0"]


@pytest.mark.parametrize("body", [[], ["checkout-button", ["u1"]], "checkout-button", 1, None])
def test_assign__json_body_not_an_object__400_invalid_request(api, demo_config, body):
    assert_problem(api.post(PATH, json.dumps(body)), status=400, code="invalid_request")


# --- the transport rules: every error is problem+json ---


VALID = {"experiment_id": "checkout-button", "subject_ids": ["u1"]}
MIB = 1024 * 1024


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.mark.parametrize("path", ["/experiment-assignments", "/experiment-assignments/"])
def test_path__with_or_without_trailing_slash__answered_directly_never_redirected(api, demo_config, path):
    response = api.post(path, VALID)
    assert response.status_code == 200
    assert json.loads(response.content) == {"assignments": {"u1": "control"}}


@pytest.mark.parametrize("content_type", ["application/json", "application/octet-stream"])
@pytest.mark.parametrize("path", ["/experiment-assignments", "/experiment-assignments/"])
@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_wrong_method__405_problem_naming_post(api, demo_config, path, method, content_type):
    # Whatever the body's type: a method the endpoint lacks is a 405, not a 415.
    response = api.generic(method, path, json.dumps(VALID), content_type=content_type)

    assert_problem(response, status=405, code="method_not_allowed")
    assert "POST" in response["Allow"]


@pytest.mark.parametrize(
    "path",
    ["/", "/nope", "/experiment-assignment", "/experiment-assignments//", "/experiment-assignments/x", "/api/nope/"],
)
@pytest.mark.parametrize("method", ["get", "post"])
def test_unknown_path__404_not_found_problem(api, demo_config, path, method):
    response = getattr(api, method)(path)
    assert_problem(response, status=404, code="not_found")


def test_unknown_path__without_token__still_404_problem(anonymous_api):
    assert_problem(anonymous_api.get("/nope"), status=404, code="not_found")


@pytest.mark.parametrize(
    "raw",
    [b'{"experiment_id": "checkout-button", ', b"{'experiment_id': 'x'}", b"not json", b'{"a": NaN}', b"\xff\xfe{}"],
    ids=["truncated", "single-quotes", "text", "nan", "not-utf8"],
)
def test_malformed_json__400_malformed_json(api, demo_config, raw):
    response = api.post(PATH, raw)
    assert_problem(response, status=400, code="malformed_json")
    assert Assignment.objects.count() == 0


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml", ""],
)
def test_wrong_content_type__415_unsupported_media_type(api, demo_config, content_type):
    response = api.post(PATH, json.dumps(VALID), content_type=content_type)
    assert_problem(response, status=415, code="unsupported_media_type")
    assert Assignment.objects.count() == 0


def test_json_with_charset_parameter__accepted(api, demo_config):
    response = api.post(PATH, json.dumps(VALID), content_type="application/json; charset=utf-8")
    assert response.status_code == 200


def test_body_over_1_mib__413_payload_too_large(api, demo_config):
    body = json.dumps(VALID).encode()
    oversized = body + b" " * (MIB + 1 - len(body))
    assert len(oversized) == MIB + 1

    response = api.post(PATH, oversized)

    assert_problem(response, status=413, code="payload_too_large")
    assert Assignment.objects.count() == 0


def test_body_of_exactly_1_mib__accepted(api, demo_config):
    body = json.dumps(VALID).encode()
    response = api.post(PATH, body + b" " * (MIB - len(body)))
    assert response.status_code == 200


def test_body_over_1_mib_on_unknown_path__413_problem(api, demo_config):
    assert_problem(api.post("/nope", b" " * (MIB + 1)), status=413, code="payload_too_large")


def test_validation_error__problem_lists_errors_with_fields_and_a_summary(api, demo_config):
    response = api.post(PATH, {"experiment_id": "checkout-button", "subject_ids": ["a", 3, "b", None]})

    body = assert_problem(response, status=400, code="invalid_request")
    assert body["errors"] == [
        {"field": "subject_ids.1", "message": "must be a string"},
        {"field": "subject_ids.3", "message": "must be a string"},
    ]
    assert body["detail"] == "subject_ids.1: must be a string; subject_ids.3: must be a string"


def test_unexpected_failure__500_internal_error_problem_without_internals(proxy_token, demo_config, monkeypatch):
    # Given a fault no handler knows (raised where the service would run)
    def broken(**kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr("assignments.api.assign_subjects_steps", broken)
    client = Client(raise_request_exception=False)

    response = client.post(PATH, json.dumps(VALID), content_type="application/json", **bearer(proxy_token))

    body = assert_problem(response, status=500, code="internal_error")
    assert b"secret internal detail" not in response.content
    assert b"Traceback" not in response.content
    assert set(body) == {"type", "title", "status", "code", "detail", "request_id"}


def test_database_error__503_database_unavailable_with_retry_after(proxy_token, demo_config, monkeypatch):
    def unreachable(**kwargs):
        raise OperationalError("connection refused at 10.0.0.5")

    monkeypatch.setattr("assignments.api.assign_subjects_steps", unreachable)

    response = Client().post(PATH, json.dumps(VALID), content_type="application/json", **bearer(proxy_token))

    assert_problem(response, status=503, code="database_unavailable")
    assert int(response["Retry-After"]) > 0
    assert b"10.0.0.5" not in response.content
