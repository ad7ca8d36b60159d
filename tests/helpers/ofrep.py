"""Experiments as OpenFeature flags, for the end-to-end tests of the real SDKs (tests/e2e/test_ofrep_*.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.helpers.resources import experiment


@dataclass(frozen=True)
class Flag:
    """An experiment read as a flag: the values of its variants `control` and `green` (their IDs without a
    valueType), the type an SDK reads it as (its getter) and the default value the app passes."""

    key: str
    value_type: str | None
    values: tuple[Any, Any]
    read_as: str
    default: Any

    def document(self, *, bulk_evaluation: bool | None = None, **fields: Any) -> dict:
        """The experiment's document (tests.helpers.resources.experiment's `fields`), with its values."""
        document = experiment(self.key, **fields)
        if bulk_evaluation is not None:
            document["spec"]["bulkEvaluation"] = bulk_evaluation
        if self.value_type is not None:
            document["spec"]["valueType"] = self.value_type
            for variant, value in zip(document["spec"]["variants"], self.values, strict=True):
                variant["value"] = value
        return document

    def value_of(self, variant: str) -> Any:
        return self.values[["control", "green"].index(variant)]
