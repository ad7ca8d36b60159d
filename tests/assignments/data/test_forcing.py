"""assignments/data/forcing.py: QA overrides: `manage.py force_assignments` and the force form of the admin's subject
lookup, one service."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command

from assignments.console.reports import experiment_report
from assignments.models import Assignment, Experiment
from tests.factories import AssignmentFactory
from tests.helpers import PROJECT_DIR
from tests.helpers.admin import messages_of
from tests.helpers.commands import command_output
from tests.helpers.processes import CLOSED_STDOUT_MESSAGE, manage_env, run_manage, run_manage_reader_leaves
from tests.helpers.resources import apply_resources, experiment, subject_type, variant

CONFIG = (
    subject_type("user"),
    subject_type("cookie"),
    experiment("Checkout", variants=[variant("control", 0.5, control=True), variant("Green", 0.5)]),
    experiment("finished", status="ended"),
    experiment("shelved", status="archived"),
)

SPLIT_CHANGE = experiment("Checkout", variants=[variant("control", 0.2, control=True), variant("Green", 0.8)])

LOOKUP = "/admin/assignments/assignment/lookup/"
LOOKUP_U1 = f"{LOOKUP}?subject_type=user&subject_id=u1"
# More subjects than chance would put in one variant (2**-20 at 50/50), so a forced variant shows.
QA_SUBJECTS = [f"qa-{index}" for index in range(20)]


@pytest.fixture
def configured(db) -> dict[str, Experiment]:
    apply_resources(*CONFIG)
    return {experiment.key: experiment for experiment in Experiment.objects.all()}


@pytest.fixture
def checkout(configured) -> Experiment:
    return configured["Checkout"]


def force(*args: str) -> str:
    return command_output("force_assignments", *args)


def stored(experiment: Experiment) -> dict[str, tuple[str, str, str, int]]:
    """subject ID -> (variant ID, source, reason, cohort)."""
    return {
        subject_id: (variant, source, reason, cohort)
        for subject_id, variant, source, reason, cohort in Assignment.objects.filter(experiment=experiment)
        .values_list("subject_id", "variant__key", "source", "reason", "cohort")
        .order_by("subject_id")
    }


def store(experiment: Experiment, subject_id: str, variant_key: str, source: str, reason: str = "") -> Assignment:
    return AssignmentFactory(
        experiment=experiment,
        subject_id=subject_id,
        variant=experiment.variants.get(key=variant_key),
        source=source,
        reason=reason,
    )


# The command


def test_force__subjects_without_assignment__stored_as_forced_with_the_reason(checkout):
    stdout = force("--experiment", "checkout", "--variant", "green", "--reason", "QA-123 checkout flow", "u1", "u2")

    assert stdout == "forced 2, kept 0\n"
    assert stored(checkout) == {
        "u1": ("Green", "forced", "QA-123 checkout flow", 1),
        "u2": ("Green", "forced", "QA-123 checkout flow", 1),
    }


def test_force__without_reason__stored_with_an_empty_one(checkout):
    force("--experiment", "Checkout", "--variant", "control", "u1")

    assert stored(checkout) == {"u1": ("control", "forced", "", 1)}


def test_force__same_subject_twice__forced_once(checkout):
    assert force("--experiment", "Checkout", "--variant", "control", "u1", "u1") == "forced 1, kept 0\n"
    assert Assignment.objects.count() == 1


def test_force__after_a_split_change__stored_in_the_current_cohort(checkout):
    apply_resources(SPLIT_CHANGE)

    force("--experiment", "Checkout", "--variant", "green", "u1")

    assert stored(checkout)["u1"][3] == 2


@pytest.mark.parametrize("source", ["hashed", "linked", "imported"])
def test_force__subject_with_an_assignment_of_another_source__kept_and_reported(checkout, source):
    # Given u1 stored with control, by the API, a link or an import
    store(checkout, "u1", "control", source)

    # When u1 and a new subject are forced to Green
    stdout = force("--experiment", "Checkout", "--variant", "Green", "u1", "u2")

    # Then u1 keeps its assignment, and the output says so, the counts last
    assert stdout == f"kept u1: control, {source}\nforced 1, kept 1\n"
    assert stored(checkout) == {"u1": ("control", source, "", 1), "u2": ("Green", "forced", "", 1)}


def test_force__subject_already_forced_without_replace__kept(checkout):
    store(checkout, "u1", "control", "forced", reason="first")

    stdout = force("--experiment", "Checkout", "--variant", "Green", "--reason", "second", "u1")

    assert stdout.splitlines()[0].startswith("kept u1: control, forced")
    assert stdout.splitlines()[-1] == "forced 0, kept 1"
    assert stored(checkout) == {"u1": ("control", "forced", "first", 1)}


def test_force__replace__re_forces_forced_subjects_only(checkout):
    # Given a forced, a hashed and an imported subject, and one without an assignment
    store(checkout, "forced-one", "control", "forced", reason="old reason")
    store(checkout, "hashed-one", "control", "hashed")
    store(checkout, "imported-one", "control", "imported")

    # When all are forced to Green with --replace
    stdout = force(
        "--experiment", "Checkout", "--variant", "Green", "--reason", "new reason", "--replace",
        "forced-one", "hashed-one", "imported-one", "new-one",
    )  # fmt: skip

    # Then only the forced one is replaced, and the new one forced; --replace never touches another source
    assert stored(checkout) == {
        "forced-one": ("Green", "forced", "new reason", 1),
        "hashed-one": ("control", "hashed", "", 1),
        "imported-one": ("control", "imported", "", 1),
        "new-one": ("Green", "forced", "new reason", 1),
    }
    assert stdout == "kept hashed-one: control, hashed\nkept imported-one: control, imported\nforced 2, kept 2\n"


def test_force__replace__counts_move_to_the_new_variant(checkout):
    store(checkout, "u1", "control", "forced")

    force("--experiment", "Checkout", "--variant", "Green", "--replace", "u1")

    [cohort] = experiment_report(checkout).cohorts
    assert [(line.variant_id, line.source, line.assignments) for line in cohort.other_sources] == [
        ("Green", "forced", 1)
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--experiment", "missing", "--variant", "green"], "no experiment has the ID 'missing'", id="exp"),
        pytest.param(
            ["--experiment", "Checkout", "--variant", "purple"], "has no variant 'purple'", id="unknown-variant"
        ),
        pytest.param(["--experiment", "finished", "--variant", "green"], "'finished' is ended", id="ended-experiment"),
        pytest.param(
            ["--experiment", "shelved", "--variant", "green"], "'shelved' is archived", id="archived-experiment"
        ),
    ],
)
def test_force__refused__command_error_and_nothing_stored(configured, args, message):
    stdout = io.StringIO()

    with pytest.raises(CommandError, match=message):
        call_command("force_assignments", *args, "u1", "u2", stdout=stdout)

    assert stdout.getvalue() == ""
    assert Assignment.objects.count() == 0


@pytest.mark.parametrize(
    ("subject_id", "problem"),
    [("", "must not be empty"), ("u\x00", "must not contain control characters"), ("x" * 257, "at most 256")],
    ids=["empty", "control-character", "too-long"],
)
def test_force__invalid_subject_id_among_valid_ones__refused_and_nothing_stored(checkout, subject_id, problem):
    with pytest.raises(CommandError, match=problem):
        force("--experiment", "Checkout", "--variant", "green", "valid-1", subject_id, "valid-2")

    assert Assignment.objects.count() == 0


def test_force__reason_not_valid_unicode__refused_and_nothing_stored(checkout):
    # What Python makes of the byte 0xFF in a command-line argument
    with pytest.raises(CommandError, match="reason"):
        force("--experiment", "Checkout", "--variant", "green", "--reason", "QA \udcff", "u1")

    assert Assignment.objects.count() == 0


def test_force__holdout__refused_and_nothing_stored(holdout_members):
    stdout = io.StringIO()

    with pytest.raises(CommandError) as caught:
        call_command("force_assignments", "--experiment", "H1", "--variant", "held_out", "u9", stdout=stdout)

    assert str(caught.value) == "nothing forced: 'h1' is a holdout: its members are drawn, never forced"
    assert stdout.getvalue() == ""
    assert Assignment.objects.filter(experiment=holdout_members).count() == 3


# What a forced assignment does elsewhere


def test_force__then_the_api__answers_the_forced_variant(checkout, api):
    # Given subjects forced to Green, and one of them with a stored hashed assignment to control
    store(checkout, QA_SUBJECTS[0], "control", "hashed")
    force("--experiment", "Checkout", "--variant", "green", *QA_SUBJECTS)

    # When the API is asked for them
    response = api.post("/experiment-assignments", {"experiment_id": "Checkout", "subject_ids": QA_SUBJECTS})

    # Then it answers the stored assignments: the forced variant, and the hashed one that was kept
    assert response.status_code == 200, response.content
    assert response.json()["assignments"] == {
        subject_id: "control" if subject_id == QA_SUBJECTS[0] else "Green" for subject_id in QA_SUBJECTS
    }
    assert Assignment.objects.filter(experiment=checkout).count() == len(QA_SUBJECTS)


def test_force__replaced_after_the_api_answered__api_answers_the_new_variant(checkout, api):
    force("--experiment", "Checkout", "--variant", "control", *QA_SUBJECTS)
    first = api.post("/experiment-assignments", {"experiment_id": "Checkout", "subject_ids": QA_SUBJECTS})

    force("--experiment", "Checkout", "--variant", "Green", "--replace", *QA_SUBJECTS)
    second = api.post("/experiment-assignments", {"experiment_id": "Checkout", "subject_ids": QA_SUBJECTS})

    assert set(first.json()["assignments"].values()) == {"control"}
    assert set(second.json()["assignments"].values()) == {"Green"}


def test_force__then_the_report__counted_on_its_own_line_not_in_the_sample_ratio_test(checkout):
    # Given 10 and 10 hashed assignments (a perfect 50/50), and 30 subjects forced to Green
    for index in range(10):
        store(checkout, f"c{index}", "control", "hashed")
        store(checkout, f"g{index}", "Green", "hashed")
    force("--experiment", "Checkout", "--variant", "green", *[f"qa-{index}" for index in range(30)])

    # When reported
    stdout = io.StringIO()
    call_command("experiment_report", "checkout", stdout=stdout)

    # Then the shares and the test see the 20 hashed ones only (30 more Green would be a mismatch)
    assert stdout.getvalue() == (
        "experiment Checkout (active): 50 assignments\n"
        "\n"
        "cohort  variant         assignments  expected  observed  srm p-value\n"
        "     1  control                  10    50.00%    50.00%       1.0000\n"
        "     1  Green                    10    50.00%    50.00%\n"
        "     1  Green (forced)           30\n"
    )


# As a process


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_force_process__success_and_refusals__exit_codes_and_streams(checkout):
    store(checkout, "hashed-one", "control", "hashed")

    forced = run_manage("force_assignments", "--experiment", "checkout", "--variant", "green", "hashed-one", "u1")
    ended = run_manage("force_assignments", "--experiment", "finished", "--variant", "green", "u2")
    bad_variant = run_manage("force_assignments", "--experiment", "checkout", "--variant", "nope", "u3")
    no_subject = run_manage("force_assignments", "--experiment", "checkout", "--variant", "green")

    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == b"kept hashed-one: control, hashed\nforced 1, kept 1\n"
    assert forced.stderr == b""
    for refused, code in [(ended, 1), (bad_variant, 1), (no_subject, 2)]:
        assert refused.returncode == code
        assert refused.stdout == b""
        assert refused.stderr.strip()
        assert b"Traceback" not in refused.stderr
    assert b"is ended" in ended.stderr
    assert b"no variant 'nope'" in bad_variant.stderr
    assert sorted(Assignment.objects.values_list("subject_id", flat=True)) == ["hashed-one", "u1"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_force_process__holdout__exit_1_message_nothing_stored(holdout_members):
    result = run_manage("force_assignments", "--experiment", "h1", "--variant", "general", "u2", "u9")

    assert (result.returncode, result.stdout) == (1, b"")
    assert result.stderr == b"CommandError: nothing forced: 'h1' is a holdout: its members are drawn, never forced\n"
    assert Assignment.objects.filter(experiment=holdout_members).count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_force_process__reason_with_non_utf8_bytes__exit_1_message_no_traceback(checkout):
    result = subprocess.run(
        [sys.executable, "manage.py", "force_assignments", "--experiment", "checkout", "--variant", "green",
         "--reason", b"QA \xff", "u1"],
        cwd=PROJECT_DIR, env=manage_env(), capture_output=True, timeout=120,
    )  # fmt: skip

    assert b"Traceback" not in result.stderr
    assert result.returncode == 1
    assert b"reason" in result.stderr
    assert Assignment.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_force_process__reader_closes_stdout_at_once__exit_1_short_message(checkout):
    result = run_manage_reader_leaves(
        "force_assignments", "--experiment", "checkout", "--variant", "green", "u1", lines=0
    )

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == CLOSED_STDOUT_MESSAGE


# The admin's subject lookup


@pytest.fixture
def viewer_client(client, db):
    """Staff who may view assignments but not change them."""
    user = User.objects.create_user("bob", "bob@example.com", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="assignments", codename="view_assignment"))
    client.force_login(user)
    return client


def test_admin_force__subject_without_assignment__forced_then_redirected_with_a_message(staff_client, checkout):
    # When staff force u1 from its lookup page
    response = staff_client.post(
        LOOKUP_U1, {"experiment": "Checkout", "variant": "Green", "reason": "QA-7 admin", "replace": ""}
    )

    # Then it is stored like the command stores it, and the page comes back with a message
    assert response.status_code == 302
    assert response["Location"] == LOOKUP_U1
    assert stored(checkout) == {"u1": ("Green", "forced", "QA-7 admin", 1)}
    page = staff_client.get(response["Location"])
    assert any("u1" in message and "forced" in message for message in messages_of(page))


def test_admin_force__hashed_assignment__kept_with_a_warning_even_with_replace(staff_client, checkout):
    store(checkout, "u1", "control", "hashed")

    response = staff_client.post(
        LOOKUP_U1, {"experiment": "Checkout", "variant": "Green", "reason": "try", "replace": "on"}, follow=True
    )

    assert response.redirect_chain == [(LOOKUP_U1, 302)]
    assert stored(checkout) == {"u1": ("control", "hashed", "", 1)}
    [message] = messages_of(response)
    assert "kept" in message and "hashed" in message


def test_admin_force__replace_a_forced_assignment__replaced(staff_client, checkout):
    store(checkout, "u1", "control", "forced", reason="first")

    staff_client.post(LOOKUP_U1, {"experiment": "Checkout", "variant": "Green", "reason": "second", "replace": "on"})

    assert stored(checkout) == {"u1": ("Green", "forced", "second", 1)}


def test_admin_force__forced_assignment_without_replace__kept(staff_client, checkout):
    store(checkout, "u1", "control", "forced", reason="first")

    staff_client.post(LOOKUP_U1, {"experiment": "Checkout", "variant": "Green", "reason": "second"})

    assert stored(checkout) == {"u1": ("control", "forced", "first", 1)}


@pytest.mark.parametrize("experiment", ["finished", "shelved"])
def test_admin_force__ended_or_archived_experiment__form_error_and_nothing_stored(staff_client, configured, experiment):
    response = staff_client.post(LOOKUP_U1, {"experiment": experiment, "variant": "green", "reason": ""})

    assert response.status_code == 200
    assert response.context["force_form"].errors
    assert Assignment.objects.count() == 0


def test_admin_force__form__each_forceable_experiments_variants_offered_as_choices_under_it(staff_client, checkout):
    # The ended and the archived experiment cannot be forced: neither they nor their variants are offered
    form = staff_client.get(LOOKUP_U1).context["force_form"]

    assert [experiment.key for experiment in form.fields["experiment"].queryset] == ["Checkout"]
    assert form.fields["variant"].choices == [("Checkout", [("control", "control"), ("Green", "Green")])]


def test_admin_force__variant_not_offered__form_error_naming_it_and_nothing_stored(staff_client, checkout):
    response = staff_client.post(LOOKUP_U1, {"experiment": "Checkout", "variant": "purple", "reason": ""})

    assert response.status_code == 200
    assert response.context["force_form"].errors["variant"] == [
        "Select a valid choice. purple is not one of the available choices."
    ]
    assert Assignment.objects.count() == 0


def test_admin_force__staff_without_change_permission__403_and_nothing_stored(viewer_client, checkout):
    # Given staff who can see the lookup page
    assert viewer_client.get(LOOKUP_U1).status_code == 200

    response = viewer_client.post(LOOKUP_U1, {"experiment": "Checkout", "variant": "green", "reason": ""})

    assert response.status_code == 403
    assert Assignment.objects.count() == 0


def test_admin_force__then_the_api__answers_the_forced_variant(staff_client, checkout, api):
    for subject_id in QA_SUBJECTS:
        staff_client.post(
            f"{LOOKUP}?subject_type=user&subject_id={subject_id}",
            {"experiment": "Checkout", "variant": "control", "reason": "QA"},
        )

    response = api.post("/experiment-assignments", {"experiment_id": "checkout", "subject_ids": QA_SUBJECTS})

    assert response.json()["assignments"] == dict.fromkeys(QA_SUBJECTS, "control")
