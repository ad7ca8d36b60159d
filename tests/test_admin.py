import pytest
from django.contrib.auth.models import User

from assignments.models import Experiment
from tests.factories import AssignmentFactory, ExperimentFactory


@pytest.fixture
def staff_client(client, db):
    user = User.objects.create_superuser("staff", "staff@example.com", "pw")
    client.force_login(user)
    return client


def test_admin_experiment_pages__with_assignments__render_counts_per_variant(staff_client):
    # Given an experiment with two assignments to its control
    experiment = ExperimentFactory(key="checkout")
    AssignmentFactory.create_batch(2, experiment=experiment)

    # When staff open the list and the experiment
    listing = staff_client.get("/admin/assignments/experiment/")
    detail = staff_client.get(f"/admin/assignments/experiment/{experiment.pk}/change/")

    # Then both render, and the detail shows the assignments per variant
    assert listing.status_code == 200
    assert b"checkout" in listing.content
    assert detail.status_code == 200
    assert b"control: 2, treatment: 0" in detail.content


def test_admin_assignment_search__exact_subject_id__finds_only_that_subject(staff_client):
    experiment = ExperimentFactory()
    AssignmentFactory(experiment=experiment, subject_id="User-1")
    AssignmentFactory(experiment=experiment, subject_id="user-1")
    AssignmentFactory(experiment=experiment, subject_id="User-10")

    response = staff_client.get("/admin/assignments/assignment/", {"q": "User-1"})

    assert response.status_code == 200
    rows = response.context["cl"].result_list
    assert [row.subject_id for row in rows] == ["User-1"]


@pytest.mark.parametrize(
    "path",
    ["/admin/assignments/experiment/add/", "/admin/assignments/assignment/add/", "/admin/assignments/lab/add/"],
)
def test_admin_configuration__add_page__is_forbidden_because_config_is_code(staff_client, path):
    assert staff_client.get(path).status_code == 403


def test_admin_experiment_change__post__changes_nothing(staff_client):
    experiment = ExperimentFactory(key="stays", status=Experiment.Status.ACTIVE)

    response = staff_client.post(f"/admin/assignments/experiment/{experiment.pk}/change/", {"status": "ended"})

    assert response.status_code == 403
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.ACTIVE
