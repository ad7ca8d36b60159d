"""POST /ofrep/v1/evaluate/flags/{key} (the Python provider never calls the bulk endpoint) through the official
Python SDK, openfeature-sdk with openfeature-provider-ofrep, on a running server: each value type served as that
type, every reason with its metadata, the assignment POST /assignments answers whichever of the two comes first,
errors as the SDK reports them and the tokens it may send; and examples/openfeature/python_client.py run as a
reader runs it."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from openfeature import api
from openfeature.client import OpenFeatureClient
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.flag_evaluation import FlagEvaluationDetails

from assignments.models import Assignment
from tests.helpers import PROJECT_DIR
from tests.helpers.commands import command_output
from tests.helpers.ofrep import Flag
from tests.helpers.resources import apply_resources, subject_type
from tests.helpers.server import database_url_for_tests, gunicorn, wait_until
from tokens.services import api_token_create, api_token_revoke

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET_KEY = "e2e-ofrep-python-not-secret"
EXAMPLE = PROJECT_DIR / "examples" / "openfeature" / "python_client.py"
# Between them enough subjects for both variants of every 50/50 flag below to be served (asserted, not hoped for).
SDK_FIRST = [f"sdk-{number}" for number in range(10)]
API_FIRST = [f"api-{number}" for number in range(10)]


class SdkFlag(Flag):
    """A flag as the Python SDK reads it: `read_as` is the client's method for its type."""

    def evaluate(self, client: OpenFeatureClient, context: EvaluationContext) -> FlagEvaluationDetails:
        return getattr(client, self.read_as)(self.key, self.default, context)


CHECKOUT = SdkFlag("checkout-button", None, ("control", "green"), "get_string_details", "fallback")
LABEL = SdkFlag("button-label", "string", ("Buy", "Buy now"), "get_string_details", "fallback")
# The provider refuses a float flag's `1` (an int in Python): 1.0 must come back written as a float.
DISCOUNT = SdkFlag("discount", "float", (1.0, 2.5), "get_float_details", -1.0)
FLAGS = (
    CHECKOUT,
    LABEL,
    SdkFlag("one-click", "boolean", (False, True), "get_boolean_details", False),
    SdkFlag("max-items", "integer", (3, 5), "get_integer_details", -1),
    DISCOUNT,
    SdkFlag(
        "button-style",
        "object",
        ({"label": "Buy", "color": "#888888"}, {"label": "Buy now", "color": "#00aa00", "badge": None}),
        "get_object_details",
        {},
    ),
)
WINNER = SdkFlag("headline", "string", ("Welcome", "Hello"), "get_string_details", "fallback")
DRAFT = SdkFlag("draft-discount", "float", (1.0, 2.5), "get_float_details", -1.0)
ENDED = SdkFlag("ended-items", "integer", (3, 5), "get_integer_details", -1)
NOBODY = SdkFlag("nobody", "string", ("Buy", "Buy now"), "get_string_details", "fallback")
GERMANY = SdkFlag("germany", "string", ("Kaufen", "Jetzt kaufen"), "get_string_details", "fallback")
RESOURCES = (
    subject_type("user", attributes={"country": "string"}),
    *(flag.document() for flag in FLAGS),
    WINNER.document(status="winner_declared", winning_variant="green"),
    DRAFT.document(status="draft"),
    ENDED.document(status="ended"),
    NOBODY.document(coverage=0.0),
    GERMANY.document(targeting=[{"attribute": "country", "in": ["DE"]}]),
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Service:
    url: str
    proxy_token: str

    def assigned(self, key: str, subject_id: str) -> tuple[str, Any]:
        """POST /assignments for the user `subject_id` in the experiment `key`: its variant and value."""
        response = httpx.post(
            f"{self.url}/assignments",
            json={"subject": {"user": subject_id}, "experiments": [key], "include_values": True},
            headers=bearer(self.proxy_token),
        )
        assert response.status_code == 200, response.text
        body = response.json()
        return body["assignments"][key], body["values"][key]


@pytest.fixture
def service() -> Iterator[Service]:
    """gunicorn with two workers on the test database, RESOURCES applied; a proxy token to call it with."""
    apply_resources(*RESOURCES)
    _, token = api_token_create(name="backend")
    env = {"DATABASE_URL": database_url_for_tests(), "SECRET_KEY": SECRET_KEY}
    with gunicorn(env=env, workers=2) as (url, _):
        wait_until(lambda: httpx.get(f"{url}/healthz").status_code == 200, timeout=15)
        yield Service(url, token)


@pytest.fixture
def sdk(service) -> Iterator[Callable[..., OpenFeatureClient]]:
    """A maker of OpenFeature clients on the service, each with its own OFREP provider sending the headers
    given (the proxy token's by default)."""
    domains = (f"ofrep-{number}" for number in itertools.count())

    def client(headers: dict[str, str] | None = None) -> OpenFeatureClient:
        sent = bearer(service.proxy_token) if headers is None else headers
        domain = next(domains)
        api.set_provider_and_wait(OFREPProvider(service.url, headers_factory=lambda: sent), domain)
        return api.get_client(domain)

    yield client
    api.clear_providers()


def user(subject_id: str | None, **attributes: Any) -> EvaluationContext:
    return EvaluationContext(targeting_key=subject_id, attributes=attributes)


def answered(details: FlagEvaluationDetails) -> dict:
    """What the SDK answered, the value's type included: 1 == 1.0 in Python, not as a float flag's value."""
    return {
        "value": details.value,
        "type": type(details.value).__name__,
        "variant": details.variant,
        "reason": details.reason,
        "metadata": dict(details.flag_metadata),
        "error": (details.error_code, details.error_message),
    }


def evaluated(flag: Flag, variant: str, reason: str, metadata: dict) -> dict:
    value = flag.value_of(variant)
    return {
        "value": value,
        "type": type(value).__name__,
        "variant": variant,
        "reason": reason,
        "metadata": metadata,
        "error": (None, None),
    }


def failed(details: FlagEvaluationDetails) -> tuple:
    """A failed evaluation as the SDK reports it: the error's code, and the default value the app passed."""
    return details.error_code, details.value, details.reason, details.variant


def stored(flag: Flag, subject_id: str, *, answer: object) -> Assignment:
    """The assignment behind `answer` (what the SDK or the example answered, shown when there is none)."""
    row = Assignment.objects.select_related("variant").filter(experiment__key=flag.key, subject_id=subject_id).first()
    assert row is not None, f"no assignment stored for {subject_id} in {flag.key}; answered: {answer}"
    return row


def row_metadata(row: Assignment) -> dict:
    return {"experimentStatus": "active", "source": row.source, "cohort": row.cohort}


def test_ofrep_python__every_value_type_either_order__the_stored_variant_as_its_type_same_as_the_api(service, sdk):
    client = sdk()
    for flag in FLAGS:
        served = set()
        # When the SDK evaluates first, and POST /assignments then asks for the same subject
        for subject_id in SDK_FIRST:
            details = flag.evaluate(client, user(subject_id))
            row = stored(flag, subject_id, answer=answered(details))

            # Then the SDK got the variant it stored, split by the formula, and the API answers the same
            assert answered(details) == evaluated(flag, row.variant.key, "SPLIT", row_metadata(row)), flag.key
            assert row.source == "hashed"
            assert service.assigned(flag.key, subject_id) == (row.variant.key, flag.value_of(row.variant.key))
            served.add(details.variant)

        # When POST /assignments comes first, then the SDK
        for subject_id in API_FIRST:
            variant, value = service.assigned(flag.key, subject_id)
            details = flag.evaluate(client, user(subject_id))

            # Then the SDK gets the variant the API stored
            row = stored(flag, subject_id, answer=(variant, value))
            assert (row.variant.key, flag.value_of(row.variant.key)) == (variant, value)
            assert answered(details) == evaluated(flag, variant, "SPLIT", row_metadata(row)), flag.key
            served.add(details.variant)

        assert served == {"control", "green"}, flag.key


def test_ofrep_python__forced_assignment__targeting_match_with_the_forced_variant(service, sdk):
    command_output("force_assignments", "--experiment", LABEL.key, "--variant", "green", "qa-1")

    details = LABEL.evaluate(sdk(), user("qa-1"))

    row = stored(LABEL, "qa-1", answer=answered(details))
    assert row.source == "forced"
    assert answered(details) == evaluated(LABEL, "green", "TARGETING_MATCH", row_metadata(row))
    assert service.assigned(LABEL.key, "qa-1") == ("green", "Buy now")


def test_ofrep_python__winner_not_running_or_gated__static_disabled_default_with_their_values(sdk):
    client = sdk()

    # A winner: every subject gets it
    assert answered(WINNER.evaluate(client, user("u1"))) == evaluated(
        WINNER, "green", "STATIC", {"experimentStatus": "winner_declared"}
    )
    # Not running: the control's value, here 1.0 as a float
    assert answered(DRAFT.evaluate(client, user("u1"))) == evaluated(
        DRAFT, "control", "DISABLED", {"experimentStatus": "draft"}
    )
    assert answered(ENDED.evaluate(client, user("u1"))) == evaluated(
        ENDED, "control", "DISABLED", {"experimentStatus": "ended"}
    )
    # Kept out by a gate: the control, and why in the metadata
    assert answered(NOBODY.evaluate(client, user("u1"))) == evaluated(
        NOBODY, "control", "DEFAULT", {"experimentStatus": "active", "excludedReason": "outside_coverage"}
    )
    # The context's other entries are the subject's attributes, which targeting reads
    assert answered(GERMANY.evaluate(client, user("u1", country="FR"))) == evaluated(
        GERMANY, "control", "DEFAULT", {"experimentStatus": "active", "excludedReason": "not_targeted"}
    )
    assert answered(GERMANY.evaluate(client, user("u1"))) == evaluated(
        GERMANY, "control", "DEFAULT", {"experimentStatus": "active", "excludedReason": "attributes_missing"}
    )
    targeted = GERMANY.evaluate(client, user("u1", country="DE"))
    row = stored(GERMANY, "u1", answer=answered(targeted))
    assert answered(targeted) == evaluated(GERMANY, row.variant.key, "SPLIT", row_metadata(row))
    assert not Assignment.objects.exclude(experiment__key=GERMANY.key).exists()


def test_ofrep_python__unknown_flag_or_bad_context__the_error_code_and_the_default_value(service, sdk):
    client = sdk()
    unknown = SdkFlag("no-such-flag", "float", (1.0, 2.5), "get_float_details", -1.0)

    # An unknown flag: FLAG_NOT_FOUND, with the service's errorDetails (any 404 is FLAG_NOT_FOUND to the provider)
    details = unknown.evaluate(client, user("u1"))
    answer = httpx.post(
        f"{service.url}/ofrep/v1/evaluate/flags/{unknown.key}",
        json={"context": {"targetingKey": "u1"}},
        headers=bearer(service.proxy_token),
    )
    assert (answer.status_code, answer.json().get("errorCode")) == (404, "FLAG_NOT_FOUND"), answer.text
    assert failed(details) == ("FLAG_NOT_FOUND", -1.0, "ERROR", None)
    assert details.error_message == answer.json().get("errorDetails")

    # No targeting key (the provider leaves out an empty one)
    assert failed(LABEL.evaluate(client, user(None))) == ("TARGETING_KEY_MISSING", "fallback", "ERROR", None)
    assert failed(LABEL.evaluate(client, user(""))) == ("TARGETING_KEY_MISSING", "fallback", "ERROR", None)
    # A targeting key that is no subject ID, a declared attribute of the wrong type
    assert failed(LABEL.evaluate(client, user("u" * 257))) == ("INVALID_CONTEXT", "fallback", "ERROR", None)
    assert failed(GERMANY.evaluate(client, user("u1", country=49))) == ("INVALID_CONTEXT", "fallback", "ERROR", None)
    assert not Assignment.objects.exists()


def test_ofrep_python__tokens__client_as_x_api_key_and_proxy_as_bearer_evaluate_revoked_refused(service, sdk):
    client_token = command_output("create_api_token", "--name", "app", "--role", "client").splitlines()[-1]
    _, revoked = api_token_create(name="leaked")
    api_token_revoke(name="leaked")

    by_client = LABEL.evaluate(sdk({"X-API-Key": client_token}), user("u1"))
    row = stored(LABEL, "u1", answer=answered(by_client))
    assert answered(by_client) == evaluated(LABEL, row.variant.key, "SPLIT", row_metadata(row))
    by_proxy = LABEL.evaluate(sdk(bearer(service.proxy_token)), user("u1"))
    assert answered(by_proxy) == answered(by_client)

    # The provider reports a 401 as GENERAL "unauthorized", whatever the body says
    refused = LABEL.evaluate(sdk(bearer(revoked)), user("u2"))
    assert (*failed(refused), refused.error_message) == ("GENERAL", "fallback", "ERROR", None, "unauthorized")
    assert not Assignment.objects.filter(subject_id="u2").exists()


def run_example(service: Service, token: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        env={**os.environ, "SERVICE_URL": service.url, "TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_ofrep_python__example__prints_the_details_of_its_subject_or_u1_and_exits_1_on_an_error(service):
    client_token = command_output("create_api_token", "--name", "app", "--role", "client").splitlines()[-1]

    for args, subject_id in ((("u2",), "u2"), ((), "u1")):
        done = run_example(service, client_token, *args)
        assert done.returncode == 0, done.stderr
        row = stored(CHECKOUT, subject_id, answer=done.stdout)
        assert json.loads(done.stdout) == {
            "value": row.variant.key,
            "variant": row.variant.key,
            "reason": "SPLIT",
            "flag_metadata": row_metadata(row),
        }
        assert service.assigned(CHECKOUT.key, subject_id) == (row.variant.key, row.variant.key)
    # The README's first answer: u1 control, u2 green
    assert sorted(Assignment.objects.values_list("subject_id", "variant__key")) == [("u1", "control"), ("u2", "green")]

    refused = run_example(service, "not-a-token")
    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", "GENERAL: unauthorized\n")
