"""assignments/models.py: assignment sources (hashed, linked, forced, imported) in the API, experiment_report and
export_assignments."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from assignments.assigning import assign_subjects
from assignments.models import Assignment
from tests.factories import AssignmentFactory
from tests.helpers.assignments import variant_counts_store
from tests.helpers.commands import command_output
from tests.helpers.processes import run_manage, run_manage_reader_leaves

T0 = dt.datetime(2026, 11, 1, 10, 0, 0, tzinfo=dt.UTC)


def report(*args: str) -> str:
    return command_output("experiment_report", *args)


def report_json() -> dict:
    """checkout-button's report as JSON."""
    return json.loads(report("checkout-button", "--format", "json"))


def export(*args: str) -> str:
    return command_output("export_assignments", *args)


# Where sources come from


def test_api_assignments__stored_with_source_hashed_and_no_reason(demo_config, api):
    response = api.post("/experiment-assignments", {"experiment_id": "checkout-button", "subject_ids": ["u1", "u2"]})

    assert response.status_code == 200
    assert list(Assignment.objects.order_by("subject_id").values_list("subject_id", "source", "reason")) == [
        ("u1", "hashed", ""),
        ("u2", "hashed", ""),
    ]


def test_assign_subjects__counted_as_hashed_in_the_report(demo_config):
    assign_subjects(experiment_id="checkout-button", subject_ids=[f"u{index}" for index in range(40)])

    body = report_json()

    [cohort] = body["cohorts"]
    assert cohort["assignments"] == 40
    assert sum(line["assignments"] for line in cohort["variants"]) == 40
    assert cohort["other_sources"] == []


# experiment_report


def test_report__mixed_sources__hashed_in_shares_and_test_others_on_lines_of_their_own(checkout):
    # Given a perfect 50/50 of hashed assignments, and others that would skew it if counted
    variant_counts_store(checkout, {"control": 50, "Green": 50})
    variant_counts_store(checkout, {"Green": 30}, source="forced")
    variant_counts_store(checkout, {"control": 10}, source="imported")
    variant_counts_store(checkout, {"Green": 5}, source="linked")

    # When reported as a table
    output = report("checkout-button")

    # Then shares and p-value are those of the hashed 100; the 45 others are listed apart, without shares
    assert output == (
        "experiment Checkout-Button (active): 145 assignments\n"
        "\n"
        "cohort  variant             assignments  expected  observed  srm p-value\n"
        "     1  control                      50    50.00%    50.00%       1.0000\n"
        "     1  Green                        50    50.00%    50.00%\n"
        "     1  Green (forced)               30\n"
        "     1  control (imported)           10\n"
        "     1  Green (linked)                5\n"
    )


def test_report__mixed_sources_json__other_sources_apart_and_test_on_hashed_only(checkout):
    variant_counts_store(checkout, {"control": 50, "Green": 50})
    variant_counts_store(checkout, {"Green": 40}, source="forced")
    variant_counts_store(checkout, {"control": 3}, source="imported")

    body = report_json()

    [cohort] = body["cohorts"]
    assert body["assignments"] == 143
    assert cohort["assignments"] == 100
    assert cohort["srm_p_value"] == 1.0
    assert cohort["chi_square"] == 0.0
    assert cohort["variants"] == [
        {"variant_id": "control", "assignments": 50, "expected_share": 0.5, "observed_share": 0.5},
        {"variant_id": "Green", "assignments": 50, "expected_share": 0.5, "observed_share": 0.5},
    ]
    assert cohort["other_sources"] == [
        {"variant_id": "Green", "source": "forced", "assignments": 40},
        {"variant_id": "control", "source": "imported", "assignments": 3},
    ]


def test_report__skewed_hashed_with_balancing_forced__mismatch_still_flagged(checkout):
    # Given hashed assignments at 70/30 (a mismatch), and forced ones that would balance the totals at 100/100
    variant_counts_store(checkout, {"control": 70, "Green": 30})
    variant_counts_store(checkout, {"Green": 70, "control": 30}, source="forced")

    body = report_json()

    [cohort] = body["cohorts"]
    assert cohort["chi_square"] == pytest.approx(16.0)
    assert cohort["srm_p_value"] < 0.001
    assert [line["observed_share"] for line in cohort["variants"]] == [0.7, 0.3]


def test_report__cohort_with_only_forced_assignments__no_shares_no_test(checkout):
    variant_counts_store(checkout, {"Green": 4}, source="forced")

    body = report_json()

    [cohort] = body["cohorts"]
    assert cohort["assignments"] == 0
    assert cohort["srm_p_value"] is None
    assert [line["observed_share"] for line in cohort["variants"]] == [None, None]
    assert cohort["other_sources"] == [{"variant_id": "Green", "source": "forced", "assignments": 4}]
    assert body["assignments"] == 4


def test_report__other_sources_by_cohort__each_under_its_own_cohort(checkout):
    variant_counts_store(checkout, {"control": 2}, source="imported", cohort=1)
    variant_counts_store(checkout, {"Green": 3}, source="forced", cohort=2)

    body = report_json()

    assert {cohort["cohort"]: cohort["other_sources"] for cohort in body["cohorts"]} == {
        1: [{"variant_id": "control", "source": "imported", "assignments": 2}],
        2: [{"variant_id": "Green", "source": "forced", "assignments": 3}],
    }


def test_experiment_page__other_sources__shown_apart_from_the_test(client, checkout):
    client.force_login(User.objects.create_superuser("alice", "alice@example.com", password=None))
    variant_counts_store(checkout, {"control": 10, "Green": 10})
    variant_counts_store(checkout, {"Green": 7}, source="forced")

    page = client.get(f"/admin/assignments/experiment/{checkout.pk}/change/").content.decode()

    assert page.count('class="other-source"') == 1
    assert "Green (forced)" in page


# export_assignments


def test_export__every_source__last_column_of_csv(checkout):
    control = checkout.variants.get(key="control")
    for index, source in enumerate(["hashed", "linked", "forced", "imported"]):
        AssignmentFactory(
            experiment=checkout,
            subject_id=f"u{index}",
            variant=control,
            source=source,
            created_at=T0 + dt.timedelta(seconds=index),
        )

    rows = list(csv.reader(io.StringIO(export("--experiment", "checkout-button"), newline="")))

    assert rows[0][-1] == "source"
    assert [(row[1], row[-1]) for row in rows[1:]] == [
        ("u0", "hashed"),
        ("u1", "linked"),
        ("u2", "forced"),
        ("u3", "imported"),
    ]


def test_export__forced_assignment__jsonl_ends_with_its_source(checkout):
    AssignmentFactory(
        experiment=checkout, subject_id="qa", variant=checkout.variants.get(key="Green"), source="forced", created_at=T0
    )

    assert export("--experiment", "checkout-button", "--format", "jsonl") == (
        '{"experiment_id": "Checkout-Button", "subject_id": "qa", "variant_id": "Green", "cohort": 1, '
        '"created_at": "2026-11-01T10:00:00.000000Z", "source": "forced"}\n'
    )


def test_export__after_import_and_force__each_row_with_the_source_that_wrote_it(demo_config, tmp_path):
    # Given an assignment by the API, one imported and one forced, a second apart
    assign_subjects(experiment_id="checkout-button", subject_ids=["by-api"])
    path = tmp_path / "backfill.csv"
    path.write_text("subject_id,variant_id,created_at\nby-import,green,2030-01-01T00:00:00Z\n")
    call_command("import_assignments", str(path), "--experiment", "checkout-button", stdout=io.StringIO())
    call_command(
        "force_assignments", "--experiment", "checkout-button", "--variant", "control", "by-force",
        stdout=io.StringIO(),
    )  # fmt: skip

    # When exported
    rows = list(csv.reader(io.StringIO(export("--experiment", "checkout-button"), newline="")))

    # Then every row carries its source (the import, dated 2030, sorts last)
    assert [(row[1], row[-1]) for row in rows[1:]] == [
        ("by-api", "hashed"),
        ("by-force", "forced"),
        ("by-import", "imported"),
    ]


# experiment_report as a process


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_report_process__mixed_sources__exit_0_table_on_stdout_nothing_on_stderr(checkout):
    variant_counts_store(checkout, {"control": 2, "Green": 2})
    variant_counts_store(checkout, {"Green": 3}, source="forced")

    result = run_manage("experiment_report", "checkout-button")
    missing = run_manage("experiment_report", "missing")

    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    assert result.stdout.decode().splitlines()[-1].split() == ["1", "Green", "(forced)", "3"]
    assert missing.returncode == 1
    assert missing.stdout == b""
    assert b"no experiment has the ID 'missing'" in missing.stderr
    assert b"Traceback" not in missing.stderr


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_report_process__reader_closes_stdout_at_once__stops_quietly_exit_0(checkout):
    variant_counts_store(checkout, {"Green": 3}, source="forced")

    result = run_manage_reader_leaves("experiment_report", "checkout-button", lines=0)

    assert (result.returncode, result.stderr) == (0, "")
