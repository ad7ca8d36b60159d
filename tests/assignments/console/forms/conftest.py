"""Fixtures of the resource forms' tests."""

from __future__ import annotations

import pytest

from assignments.models import Experiment
from tests.helpers.admin import ATTRIBUTES, GATED, apply_experiment
from tests.helpers.resources import apply_resources, experiment, subject_type


@pytest.fixture
def checkout(db) -> Experiment:
    apply_experiment("checkout")
    return Experiment.objects.get(key="checkout")


@pytest.fixture
def gated(db) -> Experiment:
    """The active experiment `gated` on `user` (which declares ATTRIBUTES), with every gate of GATED."""
    apply_resources(subject_type("user", attributes=ATTRIBUTES), experiment("gated", **GATED))
    return Experiment.objects.get(key="gated")
