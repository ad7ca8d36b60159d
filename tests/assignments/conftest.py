"""Fixtures of the assignments app's tests."""

from __future__ import annotations

import pytest

from assignments.models import Experiment
from tests.factories import ExperimentFactory


@pytest.fixture
def checkout(db) -> Experiment:
    """`Checkout-Button`, made by the factory (no apply, no history), variants `control` and `Green` at 50/50."""
    return ExperimentFactory(key="Checkout-Button", splits=[("control", 0.5), ("Green", 0.5)])
