"""GET /metrics (core/observability/exposition.py) and what moves its counters (core/observability/metrics.py,
assignments/metrics.py, tokens/metrics.py), in one process.
tests/e2e/test_metrics.py scrapes a real gunicorn, whose workers' counts are added up."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from assignments.models import Assignment, Experiment
from assignments.selectors import subject_types_active_steps
from core.healthz import database_probe, probe_connection
from core.observability.metrics import REGISTRY
from idlinks.services import Identifier, id_link_create
from tests.helpers import resources
from tests.helpers.api import ApiClient
from tests.helpers.database import database_unreachable, lock_waits_query
from tests.helpers.observability import Samples, sample, samples
from tests.helpers.resources import apply_resources
from tests.helpers.server import wait_until

FOLLOWING = resources.experiment(
    "banner",
    subject_type="cookie",
    follow_links=True,
    variants=[resources.variant("control", 0.5, control=True), resources.variant("short", 0.5)],
)
HELP_NAMES = {
    "http_requests_total",
    "http_request_duration_seconds",
    "assignments_created_total",
    "assignment_conflicts_lost_total",
    "assignment_link_walks_bounded_total",
    "database_unavailable_total",
    "api_token_cache_lookups_total",
    "healthz_checks_total",
    "healthz_database_up",
}


@pytest.fixture(autouse=True)
def _probe_connection_closed():
    """/healthz keeps a connection of its own open: closed, so the test database can be dropped."""
    yield
    probe_connection.close()
    database_probe.forget()


def scrape(token: str) -> Samples:
    response = ApiClient(None).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return samples(response.content.decode())


def assign(api, experiment_id: str, subject_ids: list[str]):
    response = api.post("/experiment-assignments", {"experiment_id": experiment_id, "subject_ids": subject_ids})
    assert response.status_code == 200, response.content
    return response.json()["assignments"]


def test_metrics__admin_token__every_metric_in_prometheus_text(admin_token):
    response = ApiClient(None).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {admin_token}")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    assert {line.split()[2] for line in text.splitlines() if line.startswith("# HELP")} >= HELP_NAMES
    # Only the service's own: no process or garbage-collector metrics, which gunicorn's workers could not add up
    assert "python_gc" not in text and "process_cpu" not in text


def test_metrics__openmetrics_asked__openmetrics_answered(admin_token):
    response = ApiClient(None).get(
        "/metrics", HTTP_AUTHORIZATION=f"Bearer {admin_token}", HTTP_ACCEPT="application/openmetrics-text"
    )

    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


@pytest.mark.parametrize("path", ["/metrics", "/metrics/"])
def test_metrics__no_token__401_problem(anonymous_api, path):
    response = anonymous_api.get(path)

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert b"http_requests" not in response.content


def test_metrics__proxy_token__403_problem_names_the_role_needed(api):
    response = api.get("/metrics")

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert response.json()["detail"] == "This endpoint needs a token of role admin."


def test_metrics__post__405_problem(admin_token):
    response = ApiClient(None).post("/metrics", HTTP_AUTHORIZATION=f"Bearer {admin_token}")

    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_requests__counted_by_endpoint_method_status_and_timed(api, admin_token, demo_config):
    before = scrape(admin_token)

    # When three assignments succeed, one is refused and /healthz is asked once
    for number in range(3):
        assign(api, "checkout-button", [f"r-{number}"])
    api.post("/experiment-assignments", {"experiment_id": "nope", "subject_ids": ["r-9"]})
    ApiClient(None).get("/healthz")
    after = scrape(admin_token)

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    ok = {"endpoint": "experiment-assignments", "method": "POST", "status": "200"}
    assert moved("http_requests_total", **ok) == 3
    assert moved("http_requests_total", **{**ok, "status": "404"}) == 1
    assert moved("http_requests_total", endpoint="healthz", method="GET", status="200") == 1
    # The scrape before this one is counted by the time of the next
    assert moved("http_requests_total", endpoint="metrics", method="GET", status="200") == 1
    assert moved("http_request_duration_seconds_count", endpoint="experiment-assignments") == 4
    assert moved("http_request_duration_seconds_sum", endpoint="experiment-assignments") > 0
    assert moved("http_request_duration_seconds_bucket", endpoint="experiment-assignments", le="+Inf") == 4


def test_assignments_created__by_experiment_and_source__stored_ones_not_again(api, admin_token, demo_config):
    # Given a cookie experiment that follows links, and c-2 linked through a user to c-1
    apply_resources(FOLLOWING)
    before = scrape(admin_token)
    assign(api, "checkout-button", ["n-1", "n-2", "n-1"])
    assign(api, "checkout-button", ["n-1", "n-2", "n-3"])
    assign(api, "banner", ["c-1"])
    id_link_create(
        first=Identifier("cookie", "c-1"),
        second=Identifier("user", "u-1"),
        subject_types_active=subject_types_active_steps,
    )
    id_link_create(
        first=Identifier("user", "u-1"),
        second=Identifier("cookie", "c-2"),
        subject_types_active=subject_types_active_steps,
    )
    assign(api, "banner", ["c-2", "c-3"])
    api.post("/assignments", {"subject": {"user": "u-5"}, "experiments": ["checkout-button"]})
    after = scrape(admin_token)

    def moved(**labels: str) -> float:
        return sample(after, "assignments_created_total", **labels) - sample(
            before, "assignments_created_total", **labels
        )

    # Then each stored assignment is counted once, by the experiment's ID and how it was made
    assert moved(experiment="checkout-button", source="hashed") == 4
    assert moved(experiment="banner", source="hashed") == 2
    assert moved(experiment="banner", source="linked") == 1
    assert Assignment.objects.filter(source="linked").count() == 1


def test_api_token_cache__first_use_a_miss_then_hits(api, admin_token, demo_config):
    before = scrape(admin_token)
    for _ in range(3):
        assign(api, "checkout-button", ["t-1"])
    after = scrape(admin_token)

    def moved(result: str) -> float:
        return sample(after, "api_token_cache_lookups_total", result=result) - sample(
            before, "api_token_cache_lookups_total", result=result
        )

    # The proxy token's first use is read from the database; the admin token's scrape after is a hit
    assert moved("miss") == 1
    assert moved("hit") == 3


def test_healthz__checks_counted_and_the_result_a_gauge(db, admin_token):
    before = scrape(admin_token)
    ApiClient(None).get("/healthz")
    ApiClient(None).head("/healthz")
    after = scrape(admin_token)

    assert sample(after, "healthz_checks_total", result="ok") - sample(before, "healthz_checks_total", result="ok") == 2
    assert sample(after, "healthz_database_up") == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_database_unavailable__each_503_counted_as_unreachable(api, admin_token, demo_config):
    before = scrape(admin_token)
    with database_unreachable():
        connection.close()
        responses = [
            api.post("/experiment-assignments", {"experiment_id": "checkout-button", "subject_ids": ["d-1"]})
            for _ in range(2)
        ]
        healthz = ApiClient(None).get("/healthz")
    after = scrape(admin_token)

    assert [response.status_code for response in responses] == [503, 503]
    assert healthz.status_code == 503
    unreachable = {"reason": "unreachable"}
    assert (
        sample(after, "database_unavailable_total", **unreachable)
        - sample(before, "database_unavailable_total", **unreachable)
        == 2
    )
    assert sample(after, "healthz_checks_total", result="unavailable") >= 1
    assert sample(after, "healthz_database_up") == 0


def blocked_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(lock_waits_query())
        return cursor.fetchone()[0] > 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_conflicts_lost__a_concurrent_request_stored_first__counted_and_its_rows_answered(api, admin_token):
    # Given an experiment, and another session that has inserted two of the subjects and not committed yet
    apply_resources(resources.subject_type("user"), resources.lab("race"), resources.experiment("race-exp", lab="race"))
    experiment = Experiment.objects.get(key="race-exp")
    variant = experiment.variants.get(key="green")
    before = scrape(admin_token)
    inserted, release, failures = threading.Event(), threading.Event(), []

    def winner() -> None:
        try:
            with transaction.atomic():
                for subject_id in ("w-1", "w-2"):
                    Assignment.objects.create(experiment=experiment, subject_id=subject_id, variant=variant, cohort=1)
                inserted.set()
                release.wait(30)
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=winner)
    thread.start()
    assert inserted.wait(30)
    answers = {}

    def loser() -> None:
        answers.update(assign(api, "race-exp", ["w-1", "w-2", "w-3"]))
        connection.close()

    # When a request for those two and a third one waits on the winner's rows, and the winner commits
    request = threading.Thread(target=loser)
    request.start()
    try:
        wait_until(blocked_on_a_lock, timeout=15)
    finally:
        release.set()
        thread.join(30)
        request.join(30)

    # Then the two are counted as lost, the third as created, and the answer is the winner's variant
    after = scrape(admin_token)
    assert failures == []
    assert answers["w-1"] == answers["w-2"] == "green"
    lost = sample(after, "assignment_conflicts_lost_total", experiment="race-exp")
    assert lost - sample(before, "assignment_conflicts_lost_total", experiment="race-exp") == 2
    created = sample(after, "assignments_created_total", experiment="race-exp", source="hashed")
    assert created - sample(before, "assignments_created_total", experiment="race-exp", source="hashed") == 1


def test_labels__no_subject_id_token_or_path__unknown_paths_and_methods_grouped(api, proxy_token, admin_token):
    # Given requests that name subject IDs, odd paths and an odd method
    api.post("/experiment-assignments", {"experiment_id": "secret-exp-name", "subject_ids": ["subject-xyz"]})
    ApiClient(None).get("/wp-admin/secret-path")
    ApiClient(None).generic("BREW", "/healthz")
    response = ApiClient(None).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {admin_token}")
    text = response.content.decode()

    # Then none of what a client chose is a label: the experiment that does not exist neither
    for chosen in ("subject-xyz", "secret-path", "wp-admin", "BREW", "secret-exp-name", proxy_token, admin_token):
        assert chosen not in text
    found = samples(text)
    assert sample(found, "http_requests_total", endpoint="unmatched", method="GET", status="404") >= 1
    assert sample(found, "http_requests_total", endpoint="healthz", method="other", status="405") >= 1


def test_metrics_disabled__404_and_nothing_counted(api, admin_token, demo_config, settings):
    # Given METRICS_ENABLED off (read per request; the request middleware is left out when the handler loads)
    settings.METRICS_ENABLED = False
    labels = {"endpoint": "experiment-assignments", "method": "POST", "status": "200"}
    created = {"experiment": "checkout-button", "source": "hashed"}
    requests_before = REGISTRY.get_sample_value("http_requests_total", labels) or 0
    created_before = REGISTRY.get_sample_value("assignments_created_total", created) or 0

    assign(api, "checkout-button", ["off-1"])
    response = ApiClient(None).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {admin_token}")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert (REGISTRY.get_sample_value("http_requests_total", labels) or 0) == requests_before
    assert (REGISTRY.get_sample_value("assignments_created_total", created) or 0) == created_before
