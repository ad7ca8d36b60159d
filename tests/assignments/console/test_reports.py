"""assignments/console/reports.py: `manage.py experiment_report ID` (docs/how-to/data-tasks.md): counts, shares and the
SRM p-value per cohort."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from assignments.assigning import assign_subjects
from assignments.console.reports import experiment_report
from assignments.models import Assignment, Experiment, Variant
from tests.factories import ExperimentFactory
from tests.helpers import PROJECT_DIR
from tests.helpers.assignments import variant_counts_store
from tests.helpers.commands import command_output
from tests.helpers.resources import apply_resources, experiment, split_variants
from tests.helpers.server import database_url_for_tests


def report(*args: str) -> str:
    return command_output("experiment_report", *args)


def report_json(experiment_id: str) -> dict:
    return json.loads(report(experiment_id, "--format", "json"))


def checkout_button(splits: list[tuple[str, float]]) -> dict:
    """The demo's experiment `checkout-button` with these (variant ID, split) pairs, the first the control."""
    return experiment("checkout-button", variants=split_variants(splits))


def one_degree_p_value(observed: list[int], shares: list[float]) -> float:
    """The chi-square p-value for two categories by its closed form, sf(x, 1) = erfc(sqrt(x / 2))."""
    total = sum(observed)
    statistic = sum(
        (count - total * share) ** 2 / (total * share) for count, share in zip(observed, shares, strict=True)
    )
    return math.erfc(math.sqrt(statistic / 2))


def test_report__imbalanced_cohort__aligned_table_with_shares_and_p_value(checkout):
    # Given 30 and 70 subjects under a 50/50 split (scipy.stats.chisquare: p = 6.334e-05)
    variant_counts_store(checkout, {"control": 30, "Green": 70})

    # When reported
    output = report("checkout-button")

    # Then a header names the experiment, its status and total; the table lines up
    assert output == (
        "experiment Checkout-Button (active): 100 assignments\n"
        "\n"
        "cohort  variant  assignments  expected  observed  srm p-value\n"
        "     1  control           30    50.00%    30.00%     6.33e-05\n"
        "     1  Green             70    50.00%    70.00%\n"
    )


def test_report__json_format__machine_readable_with_the_same_numbers(checkout):
    variant_counts_store(checkout, {"control": 30, "Green": 70})

    body = report_json("CHECKOUT-BUTTON")

    assert body["cohorts"][0].pop("srm_p_value") == pytest.approx(6.334248366623988e-05, rel=1e-9)
    assert body["cohorts"][0].pop("chi_square") == pytest.approx(16.0)
    assert body == {
        "experiment_id": "Checkout-Button",
        "status": "active",
        "assignments": 100,
        "cohorts": [
            {
                "cohort": 1,
                "assignments": 100,
                "degrees_of_freedom": 1,
                "variants": [
                    {"variant_id": "control", "assignments": 30, "expected_share": 0.5, "observed_share": 0.3},
                    {"variant_id": "Green", "assignments": 70, "expected_share": 0.5, "observed_share": 0.7},
                ],
                "other_sources": [],
            }
        ],
    }


def test_report__splits_changed_while_active__each_cohort_tested_against_its_own_splits(demo_config):
    # Given subjects assigned at 50/50, then the splits changed to 20/80 and more subjects assigned
    assign_subjects(experiment_id="checkout-button", subject_ids=[f"first-{index}" for index in range(400)])
    apply_resources(checkout_button([("control", 0.2), ("green", 0.8)]))
    assign_subjects(experiment_id="checkout-button", subject_ids=[f"second-{index}" for index in range(300)])

    # When reported
    body = report_json("checkout-button")

    # Then each cohort counts its own subjects and is tested against the splits it was made under
    assert body["assignments"] == 700
    assert [cohort["cohort"] for cohort in body["cohorts"]] == [1, 2]
    for cohort, shares in zip(body["cohorts"], [[0.5, 0.5], [0.2, 0.8]], strict=True):
        stored = [
            Assignment.objects.filter(cohort=cohort["cohort"], variant__key=key).count() for key in ("control", "green")
        ]
        assert [line["variant_id"] for line in cohort["variants"]] == ["control", "green"]
        assert [line["assignments"] for line in cohort["variants"]] == stored
        assert [line["expected_share"] for line in cohort["variants"]] == shares
        assert [line["observed_share"] for line in cohort["variants"]] == [count / sum(stored) for count in stored]
        assert cohort["srm_p_value"] == pytest.approx(one_degree_p_value(stored, shares), rel=1e-9)
    # And a fair hash gives no sample-ratio mismatch
    assert all(cohort["srm_p_value"] > 0.001 for cohort in body["cohorts"])


def test_report__cohort_without_assignments__observed_and_p_value_not_available(demo_config):
    # Given a second cohort that nobody has been assigned in yet
    assign_subjects(experiment_id="checkout-button", subject_ids=["u1", "u2", "u3"])
    apply_resources(checkout_button([("control", 0.2), ("green", 0.8)]))

    # When reported
    lines = report("checkout-button").splitlines()
    body = report_json("checkout-button")

    # Then cohort 2 lists its variants with expected shares, and "n/a" where nothing was observed
    assert lines[-2].split() == ["2", "control", "0", "20.00%", "n/a", "n/a"]
    assert lines[-1].split() == ["2", "green", "0", "80.00%", "n/a"]
    assert body["cohorts"][1]["srm_p_value"] is None
    assert body["cohorts"][1]["chi_square"] is None
    assert [line["observed_share"] for line in body["cohorts"][1]["variants"]] == [None, None]


def test_report__subjects_in_a_zero_split_variant__p_value_zero(db):
    experiment = ExperimentFactory(key="paused", splits=[("control", 0.5), ("b", 0.5), ("off", 0.0)])
    variant_counts_store(experiment, {"control": 50, "b": 49, "off": 1})

    lines = report("paused").splitlines()
    body = report_json("paused")

    assert lines[3].split() == ["1", "control", "50", "50.00%", "50.00%", "0.0000"]
    assert lines[5].split() == ["1", "off", "1", "0.00%", "1.00%"]
    assert body["cohorts"][0]["srm_p_value"] == 0.0
    assert body["cohorts"][0]["chi_square"] is None


def test_report__zero_split_variant_unused__does_not_count_as_a_degree_of_freedom(db):
    experiment = ExperimentFactory(key="paused", splits=[("control", 0.5), ("b", 0.5), ("off", 0.0)])
    variant_counts_store(experiment, {"control": 30, "b": 70})

    cohort = report_json("paused")["cohorts"][0]

    assert cohort["degrees_of_freedom"] == 1
    assert cohort["srm_p_value"] == pytest.approx(6.334248366623988e-05, rel=1e-9)


def test_report__variant_since_removed__still_shows_in_its_cohort(demo_config):
    # Given cohort 1 with a variant `blue` at split 0, which nobody got, then removed in cohort 2
    apply_resources(checkout_button([("control", 0.5), ("green", 0.5), ("blue", 0.0)]))
    assign_subjects(experiment_id="checkout-button", subject_ids=[f"u{index}" for index in range(50)])
    apply_resources(checkout_button([("control", 0.5), ("green", 0.5)]))

    # When reported
    body = report_json("checkout-button")

    # Then cohort 2 (the apply that added blue) and cohort 3 list their own variants; blue still shows
    variants_by_cohort = {
        cohort["cohort"]: [line["variant_id"] for line in cohort["variants"]] for cohort in body["cohorts"]
    }
    assert variants_by_cohort == {1: ["control", "green"], 2: ["control", "green", "blue"], 3: ["control", "green"]}
    blue = body["cohorts"][1]["variants"][2]
    assert blue == {"variant_id": "blue", "assignments": 0, "expected_share": 0.0, "observed_share": 0.0}
    assert body["cohorts"][1]["assignments"] == 50


def test_report__variant_id_recased_in_configuration__shown_as_now_written(demo_config):
    # Given the variant `green` rewritten as `GREEN` (the same resource: IDs ignore case)
    assign_subjects(experiment_id="checkout-button", subject_ids=[f"u{index}" for index in range(20)])
    apply_resources(checkout_button([("control", 0.5), ("GREEN", 0.5)]))

    body = report_json("checkout-button")

    # Then its subjects count under the ID as configured now
    variants = body["cohorts"][-1]["variants"]
    assert [line["variant_id"] for line in variants] == ["control", "GREEN"]
    assert sum(line["assignments"] for line in variants) == 20


def test_report__assignments_to_a_variant_the_record_lacks__listed_last_as_unexpected(db):
    # Given a variant stored outside the configuration flow, absent from cohort 1's splits record
    experiment = ExperimentFactory(key="drifted")
    Variant.objects.create(experiment=experiment, key="Stray", position=2, split=0.0)
    variant_counts_store(experiment, {"control": 5, "treatment": 5, "Stray": 1})

    cohort = report_json("drifted")["cohorts"][0]

    # Then it shows after the recorded variants, expected at 0, which makes the p-value 0
    assert [line["variant_id"] for line in cohort["variants"]] == ["control", "treatment", "Stray"]
    assert cohort["variants"][2]["expected_share"] == 0.0
    assert cohort["srm_p_value"] == 0.0


def test_report__cohort_without_splits_record__expected_and_p_value_not_available(db):
    experiment = ExperimentFactory(key="unrecorded")
    variant_counts_store(experiment, {"control": 3, "treatment": 4}, cohort=2)

    lines = report("unrecorded").splitlines()

    assert lines[-2].split() == ["2", "control", "3", "n/a", "42.86%", "n/a"]
    assert lines[-1].split() == ["2", "treatment", "4", "n/a", "57.14%"]


def test_report__single_variant_cohort__p_value_one(db):
    experiment = ExperimentFactory(key="rollout", splits=[("control", 0.0), ("new", 1.0)])
    variant_counts_store(experiment, {"new": 10})

    assert report_json("rollout")["cohorts"][0]["srm_p_value"] == 1.0


def test_report__ended_experiment__status_in_header(db):
    experiment = ExperimentFactory(key="old-test", status=Experiment.Status.ENDED)
    variant_counts_store(experiment, {"control": 1, "treatment": 2})

    assert report("old-test").splitlines()[0] == "experiment old-test (ended): 3 assignments"


def test_report__unknown_experiment__command_error(db):
    stdout = io.StringIO()

    with pytest.raises(CommandError, match="no experiment has the ID 'missing'"):
        call_command("experiment_report", "missing", stdout=stdout)

    assert stdout.getvalue() == ""


def test_experiment_report__many_cohorts_and_variants__three_queries(demo_config, django_assert_num_queries):
    # Given four cohorts, three of them with three variants, and assignments in two
    apply_resources(checkout_button([("control", 0.4), ("green", 0.4), ("blue", 0.2)]))
    later_splits = [
        [("control", 0.2), ("green", 0.4), ("blue", 0.4)],
        [("control", 0.1), ("green", 0.1), ("blue", 0.8)],
    ]
    for round_number, splits in enumerate(later_splits):
        assign_subjects(experiment_id="checkout-button", subject_ids=[f"r{round_number}-{n}" for n in range(30)])
        apply_resources(checkout_button(splits))
    experiment = Experiment.objects.get(key="checkout-button")

    # Then the report costs one GROUP BY over the kept counts, one read of variants and one of cohorts
    with django_assert_num_queries(3):
        built = experiment_report(experiment)
    assert [cohort.number for cohort in built.cohorts] == [1, 2, 3, 4]
    assert built.assignments == 60


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_report_process__known_and_unknown__exit_codes_and_output_streams(checkout):
    # Given committed assignments
    variant_counts_store(checkout, {"control": 30, "Green": 70})
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), "SECRET_KEY": "report-tests"}

    def run(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "manage.py", "experiment_report", *args]
        return subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, timeout=60)

    # When the command runs as a process
    table = run("checkout-button")
    as_json = run("checkout-button", "--format", "json")
    unknown = run("nope")

    # Then the reports go to stdout with exit 0, and an unknown experiment fails on stderr only
    assert table.returncode == 0, table.stderr
    assert table.stderr == b""
    assert table.stdout.decode().splitlines()[0] == "experiment Checkout-Button (active): 100 assignments"
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["assignments"] == 100
    assert unknown.returncode == 1
    assert unknown.stdout == b""
    assert b"no experiment has the ID 'nope'" in unknown.stderr


def test_report__holdout__counts_and_expected_shares_of_held_out_and_general(holdout_members):
    body = report_json("h1")

    (cohort,) = body["cohorts"]
    assert [(line["variant_id"], line["assignments"], line["expected_share"]) for line in cohort["variants"]] == [
        ("held_out", 2, 0.05),
        ("general", 1, 0.95),
    ]
