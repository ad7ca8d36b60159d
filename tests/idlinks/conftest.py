"""Fixtures of the identifier-link tests."""

from __future__ import annotations

import pytest

from assignments.models import SubjectType
from tests.factories import SubjectTypeFactory


@pytest.fixture
def subject_types(db) -> dict[str, SubjectType]:
    """Active `user`, `Cookie` (capitalised as configured) and `device`, created in that order; archived `legacy`."""
    return {
        "user": SubjectTypeFactory(key="user"),
        "cookie": SubjectTypeFactory(key="Cookie"),
        "device": SubjectTypeFactory(key="device"),
        "legacy": SubjectTypeFactory(key="legacy", status=SubjectType.Status.ARCHIVED),
    }
