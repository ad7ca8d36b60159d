"""OpenFeature remote evaluation (assignments/ofrep.py, core/edge/ofrep.py, docs/reference/api.md): an experiment
evaluated as a flag, single and bulk, with OFREP's reasons, metadata, errors, ETag and CORS; the same assignment as
POST /assignments stores. The real SDKs' tests are tests/e2e/test_ofrep_python.py and test_ofrep_javascript.py."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.models import Assignment
from config.wsgi import application
from tests.helpers.api import ApiClient, assert_problem, wsgi_environ
from tests.helpers.assignments import assigned_store, reference_variant
from tests.helpers.resources import apply_resources, experiment, lab, subject_type, variant
from tokens.models import Role
from tokens.services import api_token_create

FLAG = "/ofrep/v1/evaluate/flags/"
BULK = "/ofrep/v1/evaluate/flags"
ORIGIN = "https://app.example.com"

VALUES = {
    "checkout-button": ("object", {"label": "Buy", "color": "#888888"}, {"label": "Buy now", "color": "#00aa00"}),
    "label": ("string", "Buy", "Buy now"),
    "dark-mode": ("boolean", False, True),
    "max-items": ("integer", 10, 20),
    "price": ("float", 1, 2.5),
}


def valued(key: str, value_type: str, control, green, **fields) -> dict:
    document = experiment(
        key,
        variants=[
            {**variant("control", 0.5, control=True), "value": control},
            {**variant("green", 0.5), "value": green},
        ],
        **fields,
    )
    document["spec"]["valueType"] = value_type
    return document


def unlisted(document: dict) -> dict:
    document["spec"]["bulkEvaluation"] = False
    return document


CONFIG = (
    subject_type("user", attributes={"country": "string", "seats": "number"}),
    subject_type("cookie"),
    lab("flags"),
    *(valued(key, *values, lab="flags") for key, values in VALUES.items()),
    experiment("plain", lab="flags"),
    unlisted(experiment("unlisted", lab="flags")),
    experiment("Rollout", lab="flags", status="winner_declared", winning_variant="green"),
    valued("upcoming", "string", "Soon", "Later", lab="flags", status="draft"),
    experiment("narrow", lab="flags", coverage=0),
    experiment("germany", lab="flags", targeting=[{"attribute": "country", "equals": "DE"}]),
    experiment("cookie-exp", lab="flags", subject_type="cookie"),
)
# The experiments a user's bulk evaluation lists: running, listed, of subject type user, in ID order ignoring case.
USER_BULK = ["checkout-button", "dark-mode", "germany", "label", "max-items", "narrow", "plain", "price", "Rollout"]


@pytest.fixture
def flags(db):
    apply_resources(*CONFIG)


@pytest.fixture
def client_token(db) -> str:
    return api_token_create(name="app", role=Role.CLIENT)[1]


@pytest.fixture
def ofrep(client_token) -> ApiClient:
    return ApiClient(client_token)


def evaluate(ofrep: ApiClient, key: str, context: dict, **extra):
    return ofrep.post(FLAG + key, {"context": context}, **extra)


def evaluated(response) -> dict:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()


def stored(experiment_key: str, subject_id: str) -> tuple[str, int, str] | None:
    return (
        Assignment.objects.filter(experiment__key=experiment_key, subject_id=subject_id)
        .values_list("variant__key", "cohort", "source")
        .first()
    )


def assert_ofrep_problem(response, *, status: int, code: str, error_code: str, key: str | None) -> dict:
    body = assert_problem(response, status=status, code=code)
    assert body["errorCode"] == error_code
    assert body["errorDetails"] == body["detail"]
    if key is None:
        assert "key" not in body
    else:
        assert body["key"] == key
    return body


# --- single evaluation: the stored variant, its value, reason and metadata ---


@pytest.mark.parametrize("key", VALUES)
def test_flag__each_value_type__the_stored_variants_value_split_and_the_rows_metadata(flags, ofrep, key):
    answer = evaluated(evaluate(ofrep, key, {"targetingKey": "u-1"}))

    variant_key, cohort, source = stored(key, "u-1")
    value_type, control, green = VALUES[key]
    value = {"control": control, "green": green}[variant_key]
    assert answer == {
        "key": key,
        "value": float(value) if value_type == "float" else value,
        "variant": variant_key,
        "reason": "SPLIT",
        "metadata": {"experimentStatus": "active", "source": source, "cohort": cohort},
    }
    assert (source, cohort) == ("hashed", 1)
    assert variant_key == reference_variant(key, "u-1", [("control", 0.5), ("green", 0.5)])


def test_flag__float_value_one__written_with_a_decimal_point(flags, ofrep):
    subject_id = next(
        f"f-{n}"
        for n in range(100)
        if reference_variant("price", f"f-{n}", [("control", 0.5), ("green", 0.5)]) == "control"
    )

    response = evaluate(ofrep, "price", {"targetingKey": subject_id})

    assert b'"value":1.0,' in response.content


def test_flag__no_value_type__the_variants_id_as_value(flags, ofrep):
    answer = evaluated(evaluate(ofrep, "PLAIN", {"targetingKey": "u-1"}))

    assert answer["key"] == "plain"
    assert answer["value"] == answer["variant"] == stored("plain", "u-1")[0]


@pytest.mark.parametrize("first", ["ofrep", "assignments"])
def test_flag__and_post_assignments__one_stored_assignment_whichever_asks_first(flags, ofrep, proxy_token, first):
    api = ApiClient(proxy_token)

    def by_ofrep():
        return evaluated(evaluate(ofrep, "label", {"targetingKey": "both"}))["variant"]

    def by_assignments():
        response = api.post("/assignments", {"subject": {"user": "both"}, "experiments": ["label"]})
        return response.json()["assignments"]["label"]

    answers = [by_ofrep(), by_assignments()] if first == "ofrep" else [by_assignments(), by_ofrep()]

    assert answers == [stored("label", "both")[0]] * 2
    assert Assignment.objects.filter(subject_id="both").count() == 1


@pytest.mark.parametrize(
    ("source", "reason"), [("forced", "TARGETING_MATCH"), ("imported", "SPLIT"), ("linked", "SPLIT")]
)
def test_flag__stored_row_of_each_source__its_reason_and_source(flags, ofrep, source, reason):
    assigned_store("label", "kept", "green", source=source)

    answer = evaluated(evaluate(ofrep, "label", {"targetingKey": "kept"}))

    assert (answer["variant"], answer["value"], answer["reason"]) == ("green", "Buy now", reason)
    assert answer["metadata"] == {"experimentStatus": "active", "source": source, "cohort": 1}


def test_flag__winner_declared__static_winner_nothing_stored(flags, ofrep):
    answer = evaluated(evaluate(ofrep, "rollout", {"targetingKey": "u-1"}))

    assert answer == {
        "key": "Rollout",
        "value": "green",
        "variant": "green",
        "reason": "STATIC",
        "metadata": {"experimentStatus": "winner_declared"},
    }
    assert stored("Rollout", "u-1") is None


@pytest.mark.parametrize(
    ("key", "status", "control"),
    [("upcoming", "draft", "Soon"), ("label", "ended", "Buy"), ("label", "archived", "Buy")],
)
def test_flag__not_running__disabled_with_the_controls_value_never_409(flags, ofrep, key, status, control):
    if key == "label":
        apply_resources(valued("label", "string", "Buy", "Buy now", lab="flags", status=status))

    answer = evaluated(evaluate(ofrep, key, {"targetingKey": "late"}))

    assert answer == {
        "key": key,
        "value": control,
        "variant": "control",
        "reason": "DISABLED",
        "metadata": {"experimentStatus": status},
    }
    assert stored(key, "late") is None


@pytest.mark.parametrize(
    ("key", "context", "excluded"),
    [
        ("narrow", {}, "outside_coverage"),
        ("germany", {"country": "FR"}, "not_targeted"),
        ("germany", {}, "attributes_missing"),
    ],
)
def test_flag__kept_out_by_a_gate__default_control_with_the_reason_nothing_stored(flags, ofrep, key, context, excluded):
    answer = evaluated(evaluate(ofrep, key, {"targetingKey": "out", **context}))

    assert answer == {
        "key": key,
        "value": "control",
        "variant": "control",
        "reason": "DEFAULT",
        "metadata": {"experimentStatus": "active", "excludedReason": excluded},
    }
    assert stored(key, "out") is None


def test_flag__attributes_from_the_context__targeting_lets_the_subject_in(flags, ofrep):
    answer = evaluated(evaluate(ofrep, "germany", {"targetingKey": "de", "country": "DE", "seats": 3}))

    assert answer["reason"] == "SPLIT"
    assert stored("germany", "de") is not None


def test_flag__context_entries_no_attribute_can_be__ignored(flags, ofrep):
    body = (
        '{"context": {"targetingKey": "odd", "country": "DE", "subjectType": "cookie", "nested": {"a": 1},'
        ' "list": [1], "nothing": null, "huge": 1e400}}'
    )

    answer = evaluated(ofrep.post(FLAG + "germany", body))

    assert answer["reason"] == "SPLIT"


# --- single evaluation: errors, in their order ---


def test_flag__unknown_key__404_flag_not_found_with_the_key_as_asked(flags, ofrep):
    response = evaluate(ofrep, "No-Such", {"targetingKey": "u-1"})

    assert_ofrep_problem(response, status=404, code="experiment_not_found", error_code="FLAG_NOT_FOUND", key="No-Such")


def test_flag__a_holdouts_id__404_flag_not_found(db, ofrep):
    apply_resources(
        subject_type("user"),
        {
            "schemaVersion": 1,
            "kind": "holdout",
            "metadata": {"id": "h1", "status": "active"},
            "spec": {"subjectType": "user", "share": 0.1},
        },
    )

    body = assert_ofrep_problem(
        evaluate(ofrep, "h1", {"targetingKey": "u-1"}),
        status=404,
        code="experiment_not_found",
        error_code="FLAG_NOT_FOUND",
        key="h1",
    )
    assert "is a holdout" in body["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("not json", None),
        ("[]", ""),
        ("null", ""),
        ("{}", "context"),
        ('{"context": "u-1"}', "context"),
        ('{"context": null}', "context"),
    ],
)
def test_flag__body_not_json_or_without_a_context_object__400_parse_error(flags, ofrep, body, field):
    response = ofrep.post(FLAG + "label", body)

    problem = assert_ofrep_problem(
        response,
        status=400,
        code="malformed_json" if field is None else "invalid_request",
        error_code="PARSE_ERROR",
        key="label",
    )
    if field is not None:
        assert [error["field"] for error in problem["errors"]] == [field]
        assert problem["detail"] == (f"{field}: " if field else "") + problem["errors"][0]["message"]


@pytest.mark.parametrize("context", [{}, {"targetingKey": None}, {"targetingKey": 5}, {"targetingKey": ""}])
def test_flag__targeting_key_missing_not_a_string_or_empty__400_targeting_key_missing(flags, ofrep, context):
    problem = assert_ofrep_problem(
        evaluate(ofrep, "label", context),
        status=400,
        code="invalid_request",
        error_code="TARGETING_KEY_MISSING",
        key="label",
    )
    assert [error["field"] for error in problem["errors"]] == ["context.targetingKey"]


@pytest.mark.parametrize(
    ("context", "field"),
    [
        ({"targetingKey": "x" * 257}, "context.targetingKey"),
        ({"targetingKey": "a\nb"}, "context.targetingKey"),
        ({"targetingKey": "u-1", "country": 49}, "context.country"),
        ({"targetingKey": "u-1", "seats": "many"}, "context.seats"),
        ({"targetingKey": "u-1", "bad name": "x"}, "context.bad name"),
        ({"targetingKey": "u-1", "note": "x" * 257}, "context.note"),
        ({"targetingKey": "u-1", **{f"a{n}": n for n in range(51)}}, "context"),
    ],
)
def test_flag__context_not_valid__400_invalid_context_naming_the_field_nothing_stored(flags, ofrep, context, field):
    problem = assert_ofrep_problem(
        evaluate(ofrep, "label", context), status=400, code="invalid_request", error_code="INVALID_CONTEXT", key="label"
    )

    assert [error["field"] for error in problem["errors"]] == [field]
    assert not Assignment.objects.exists()


def test_flag__fifty_attributes_besides_the_ignored_entries__200(flags, ofrep):
    context = {"targetingKey": "u-1", "subjectType": "user", "deep": {}, **{f"a{n}": n for n in range(50)}}

    assert evaluate(ofrep, "label", context).status_code == 200


def test_flag__subject_type_archived__400_invalid_context_unknown_subject_type(flags, ofrep):
    apply_resources(subject_type("user", status="archived", attributes={"country": "string", "seats": "number"}))

    problem = assert_ofrep_problem(
        evaluate(ofrep, "label", {"targetingKey": "u-1"}),
        status=400,
        code="unknown_subject_type",
        error_code="INVALID_CONTEXT",
        key="label",
    )
    assert problem["errors"] == [{"field": "context.targetingKey", "message": "subject type 'user' is archived"}]


@pytest.mark.parametrize(
    ("key", "body", "error_code"),
    [
        ("no-such", "not json", "PARSE_ERROR"),
        ("no-such", '{"context": {"country": 1}}', "FLAG_NOT_FOUND"),
        ("label", '{"context": {"country": 1}}', "TARGETING_KEY_MISSING"),
    ],
)
def test_flag__several_faults__the_first_in_ofreps_order(flags, ofrep, key, body, error_code):
    response = ofrep.post(FLAG + key, body)

    assert response.json()["errorCode"] == error_code


def test_flag__no_token_and_a_body_too_large__401_first(flags, anonymous_api):
    response = anonymous_api.post(FLAG + "label", "x", CONTENT_LENGTH=str(2 * 1024 * 1024))

    assert_ofrep_problem(response, status=401, code="not_authenticated", error_code="GENERAL", key="label")
    assert response["WWW-Authenticate"] == "Bearer"


def test_flag__body_too_large__413_general(flags, ofrep):
    response = ofrep.post(FLAG + "label", "x", CONTENT_LENGTH=str(2 * 1024 * 1024))

    assert_ofrep_problem(response, status=413, code="payload_too_large", error_code="GENERAL", key="label")


def test_flag__not_json_content_type__415_general(flags, ofrep):
    response = ofrep.post(FLAG + "label", '{"context": {"targetingKey": "u"}}', content_type="text/plain")

    assert_ofrep_problem(response, status=415, code="unsupported_media_type", error_code="GENERAL", key="label")


def test_flag__get__405_general(flags, ofrep):
    response = ofrep.get(FLAG + "label")

    assert_ofrep_problem(response, status=405, code="method_not_allowed", error_code="GENERAL", key="label")


# --- tokens ---


@pytest.mark.parametrize("role", Role.values)
def test_flag__every_role__200(flags, role):
    token = api_token_create(name=f"as-{role}", role=role)[1]

    assert evaluate(ApiClient(token), "label", {"targetingKey": "u-1"}).status_code == 200


def test_flag__token_in_x_api_key__200(flags, client_token, anonymous_api):
    response = evaluate(anonymous_api, "label", {"targetingKey": "u-1"}, HTTP_X_API_KEY=client_token)

    assert response.status_code == 200


@pytest.mark.parametrize("header", ["", "  ", "nope.nope"])
def test_flag__x_api_key_empty_or_unknown__401(flags, anonymous_api, header):
    response = evaluate(anonymous_api, "label", {"targetingKey": "u-1"}, HTTP_X_API_KEY=header)

    assert_ofrep_problem(response, status=401, code="not_authenticated", error_code="GENERAL", key="label")


def test_x_api_key__on_post_assignments__not_read(flags, client_token, proxy_token, anonymous_api):
    response = anonymous_api.post(
        "/assignments", {"subject": {"user": "u-1"}}, HTTP_X_API_KEY=api_token_create(name="p2", role=Role.PROXY)[1]
    )

    assert_problem(response, status=401, code="not_authenticated")


def test_flag__revoked_client_token__401(flags, client_token, ofrep):
    from tokens.services import api_token_revoke

    api_token_revoke(name="app")

    assert evaluate(ApiClient(client_token), "label", {"targetingKey": "u-1"}).status_code == 401


# --- bulk evaluation ---


def bulk(ofrep: ApiClient, context: dict, path: str = BULK, **extra):
    return ofrep.post(path, {"context": context}, **extra)


def test_bulk__every_running_listed_experiment_of_the_type_in_id_order__each_as_its_single_evaluation(flags, ofrep):
    response = bulk(ofrep, {"targetingKey": "b-1", "subjectType": "USER", "country": "DE"})

    flags = evaluated(response)["flags"]
    assert [flag["key"] for flag in flags] == USER_BULK
    singles = [evaluated(evaluate(ofrep, key, {"targetingKey": "b-1", "country": "DE"})) for key in USER_BULK]
    assert flags == singles
    assert {key for (key,) in Assignment.objects.filter(subject_id="b-1").values_list("experiment__key")} == set(
        USER_BULK
    ) - {"Rollout", "narrow"}


def test_bulk__with_and_without_a_trailing_slash__the_same_answer(flags, ofrep):
    context = {"targetingKey": "b-1", "subjectType": "user"}

    assert bulk(ofrep, context).content == bulk(ofrep, context, path=BULK + "/").content


def test_bulk__etag_of_the_body_and_private_no_cache(flags, ofrep):
    context = {"targetingKey": "b-1", "subjectType": "user"}
    first, again = bulk(ofrep, context), bulk(ofrep, context)
    other = bulk(ofrep, {"targetingKey": "b-2", "subjectType": "user"})

    assert first["Cache-Control"] == "private, no-cache"
    assert first["ETag"].startswith('"') and first["ETag"].endswith('"')
    assert first["ETag"] == again["ETag"]
    assert (other.content == first.content) == (other["ETag"] == first["ETag"])


@pytest.mark.parametrize("if_none_match", ["{tag}", "W/{tag}", '"other", {tag}', "*", ' "a" ,W/{tag} '])
def test_bulk__if_none_match_matching__304_no_body_same_validators(flags, ofrep, if_none_match):
    context = {"targetingKey": "b-1", "subjectType": "user"}
    first = bulk(ofrep, context)
    tag = first["ETag"]

    response = bulk(ofrep, context, HTTP_IF_NONE_MATCH=if_none_match.format(tag=tag))

    assert response.status_code == 304
    assert response.content == b""
    assert response["Content-Length"] == str(len(first.content))
    assert response["ETag"] == tag
    assert response["Cache-Control"] == "private, no-cache"


@pytest.mark.parametrize("if_none_match", ['"other"', 'W/"other"', "garbage"])
def test_bulk__if_none_match_not_matching__200(flags, ofrep, if_none_match):
    response = bulk(ofrep, {"targetingKey": "b-1", "subjectType": "user"}, HTTP_IF_NONE_MATCH=if_none_match)

    assert response.status_code == 200


def test_bulk__304__the_evaluations_still_stored(flags, ofrep):
    response = bulk(ofrep, {"targetingKey": "new-one", "subjectType": "user"}, HTTP_IF_NONE_MATCH="*")

    assert response.status_code == 304
    assert stored("label", "new-one") is not None


def test_bulk__an_experiment_changes__a_new_etag(flags, ofrep):
    context = {"targetingKey": "b-1", "subjectType": "user"}
    tag = bulk(ofrep, context)["ETag"]
    apply_resources(experiment("Rollout", lab="flags", status="winner_declared", winning_variant="control"))

    response = bulk(ofrep, context, HTTP_IF_NONE_MATCH=tag)

    assert response.status_code == 200
    assert response["ETag"] != tag


def test_bulk__unlisted_experiment__still_evaluated_singly(flags, ofrep):
    assert "unlisted" not in [
        flag["key"] for flag in evaluated(bulk(ofrep, {"targetingKey": "b", "subjectType": "user"}))["flags"]
    ]

    assert evaluated(evaluate(ofrep, "unlisted", {"targetingKey": "b"}))["reason"] == "SPLIT"


@pytest.mark.parametrize(
    ("context", "code", "error_code", "field"),
    [
        ({"subjectType": "user"}, "invalid_request", "TARGETING_KEY_MISSING", "context.targetingKey"),
        ({}, "invalid_request", "TARGETING_KEY_MISSING", "context.targetingKey"),
        ({"targetingKey": "u"}, "invalid_request", "INVALID_CONTEXT", "context.subjectType"),
        ({"targetingKey": "u", "subjectType": 3}, "invalid_request", "INVALID_CONTEXT", "context.subjectType"),
        (
            {"targetingKey": "u", "subjectType": "visitor"},
            "unknown_subject_type",
            "INVALID_CONTEXT",
            "context.subjectType",
        ),
        ({"targetingKey": "a\tb", "subjectType": "user"}, "invalid_request", "INVALID_CONTEXT", "context.targetingKey"),
        (
            {"targetingKey": "u", "subjectType": "user", "country": 1},
            "invalid_request",
            "INVALID_CONTEXT",
            "context.country",
        ),
    ],
)
def test_bulk__context_not_valid__400_without_a_key(flags, ofrep, context, code, error_code, field):
    problem = assert_ofrep_problem(bulk(ofrep, context), status=400, code=code, error_code=error_code, key=None)

    assert [error["field"] for error in problem["errors"]] == [field]


def test_bulk__archived_subject_type__400_invalid_context(flags, ofrep):
    apply_resources(subject_type("cookie", status="archived"))

    assert_ofrep_problem(
        bulk(ofrep, {"targetingKey": "c", "subjectType": "cookie"}),
        status=400,
        code="unknown_subject_type",
        error_code="INVALID_CONTEXT",
        key=None,
    )


def test_bulk__a_type_without_running_experiments__no_flags(flags, ofrep):
    apply_resources(subject_type("device"))

    assert evaluated(bulk(ofrep, {"targetingKey": "d", "subjectType": "device"})) == {"flags": []}


# --- CORS ---


@pytest.fixture
def cors(settings):
    settings.OFREP_CORS_ALLOWED_ORIGINS = frozenset({ORIGIN})


def preflight(api: ApiClient, path: str, origin: str):
    return api.options(
        path,
        HTTP_ORIGIN=origin,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="authorization, content-type",
    )


@pytest.mark.parametrize("path", [FLAG + "label", BULK, BULK + "/"])
def test_cors__preflight_from_an_allowed_origin__204_without_a_token(flags, cors, anonymous_api, path):
    response = preflight(anonymous_api, path, ORIGIN)

    assert response.status_code == 204
    assert not response.has_header("Content-Type")
    assert response["Access-Control-Allow-Origin"] == ORIGIN
    assert response["Access-Control-Allow-Methods"] == "POST"
    assert response["Access-Control-Allow-Headers"] == (
        "Authorization, Authentication, X-API-Key, Content-Type, If-None-Match"
    )
    assert response["Access-Control-Expose-Headers"] == "ETag"
    assert response["Vary"] == "Origin"


def test_cors__preflight_from_another_origin__no_cors_headers(flags, cors, anonymous_api):
    response = preflight(anonymous_api, BULK, "https://evil.example.com")

    assert response.status_code == 401
    assert not any(name.startswith("Access-Control-") for name in response.headers)


@pytest.mark.parametrize("token", ["valid", "unknown"])
def test_cors__answers_to_an_allowed_origin__name_it_errors_included(flags, cors, client_token, token):
    api = ApiClient(client_token if token == "valid" else "unknown.token")

    response = bulk(api, {"targetingKey": "u", "subjectType": "user"}, HTTP_ORIGIN=ORIGIN)

    assert response.status_code == (200 if token == "valid" else 401)
    assert response["Access-Control-Allow-Origin"] == ORIGIN
    assert response["Access-Control-Expose-Headers"] == "ETag"
    assert "Origin" in response["Vary"]


def test_cors__other_paths__no_cors_headers_even_for_an_allowed_origin(flags, cors, proxy_token):
    response = ApiClient(proxy_token).post("/assignments", {"subject": {"user": "u"}}, HTTP_ORIGIN=ORIGIN)

    assert response.status_code == 200
    assert not any(name.startswith("Access-Control-") for name in response.headers)


def test_cors__no_origin_allowed_by_default__no_cors_headers(flags, ofrep):
    response = bulk(ofrep, {"targetingKey": "u", "subjectType": "user"}, HTTP_ORIGIN=ORIGIN)

    assert not any(name.startswith("Access-Control-") for name in response.headers)


# --- statements: what POST /assignments costs, and a fixed number for bulk ---


def statements(request) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = request()
    assert response.status_code == 200, response.content
    return len(captured.captured_queries)


@pytest.mark.single_node("Citus's hot path sends other statements (tests/assignments/test_storage_citus.py)")
@pytest.mark.parametrize("subject_id", ["new", "stored"])
def test_flag__statements__those_of_post_assignments_for_one_subject_and_experiment(
    flags, ofrep, proxy_token, subject_id
):
    api = ApiClient(proxy_token)
    evaluate(ofrep, "label", {"targetingKey": "warm"})
    api.post("/assignments", {"subject": {"user": "warm"}, "experiments": ["label"]})
    if subject_id == "stored":
        assigned_store("label", "s-ofrep", "green")
        assigned_store("label", "s-api", "green")

    by_ofrep = statements(lambda: evaluate(ofrep, "label", {"targetingKey": f"{subject_id}-ofrep"}))
    by_api = statements(
        lambda: api.post("/assignments", {"subject": {"user": f"{subject_id}-api"}, "experiments": ["label"]})
    )

    assert by_ofrep == by_api


@pytest.mark.single_node("Citus's hot path sends other statements (tests/assignments/test_storage_citus.py)")
def test_bulk__statements__the_same_for_one_experiment_or_twelve(db, ofrep):
    apply_resources(subject_type("user"), subject_type("one"), experiment("solo", subject_type="one"))
    apply_resources(*(experiment(f"many-{n}") for n in range(12)))
    bulk(ofrep, {"targetingKey": "warm", "subjectType": "one"})
    bulk(ofrep, {"targetingKey": "warm", "subjectType": "user"})

    one = statements(lambda: bulk(ofrep, {"targetingKey": "x", "subjectType": "one"}))
    twelve = statements(lambda: bulk(ofrep, {"targetingKey": "x", "subjectType": "user"}))

    assert one == twelve


# --- raced from both sides ---

RACERS = 8


def served_post(path: str, body: dict, token: str) -> dict:
    """One request to the served application, outside any test transaction (its connection its own)."""
    raw = json.dumps(body).encode()
    environ = wsgi_environ(
        "POST", path, raw, content_type="application/json", HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    status: list[str] = []
    answer = application(environ, lambda line, headers, exc_info=None: status.append(line))
    try:
        content = b"".join(answer)
    finally:
        answer.close()
    assert status[0].startswith("200"), content
    return json.loads(content)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_flag_and_post_assignments__racing_for_the_same_new_subjects__one_row_each_every_answer_it():
    apply_resources(subject_type("user"), lab("race"), experiment("raced", lab="race"))
    token = api_token_create(name="racer", role=Role.PROXY)[1]
    subject_ids = [f"r-{n}" for n in range(40)]
    barrier = threading.Barrier(RACERS)
    answers: list[dict[str, str]] = [{} for _ in range(RACERS)]
    failures: list[BaseException] = []

    def race(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            for subject_id in subject_ids if index % 2 else reversed(subject_ids):
                if index % 2:
                    flag = served_post(FLAG + "raced", {"context": {"targetingKey": subject_id}}, token)
                    answers[index][subject_id] = flag["variant"]
                else:
                    body = {"subject": {"user": subject_id}, "experiments": ["raced"]}
                    answers[index][subject_id] = served_post("/assignments", body, token)["assignments"]["raced"]
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(index,)) for index in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not failures, failures
    rows = dict(Assignment.objects.filter(subject_id__in=subject_ids).values_list("subject_id", "variant__key"))
    assert len(rows) == len(subject_ids)
    assert Assignment.objects.filter(subject_id__in=subject_ids).count() == len(subject_ids)
    assert all(answer == rows for answer in answers)
