"""Fixtures of the staff console's page tests."""

from __future__ import annotations

import pytest

from assignments.models import Experiment
from tests.helpers.admin import CONFIG
from tests.helpers.resources import apply_resources


@pytest.fixture
def configured(db) -> dict[str, Experiment]:
    apply_resources(*CONFIG)
    return {experiment.key: experiment for experiment in Experiment.objects.all()}
