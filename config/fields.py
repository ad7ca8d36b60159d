"""Strict input fields shared by the API endpoints: strings are never coerced or trimmed."""

from __future__ import annotations

import re

from django.conf import settings
from rest_framework import serializers

SUBJECT_ID_MAX_LENGTH = 256

# Unicode category Cc (C0, DEL, C1) and lone surrogates: the latter cannot be
# encoded as UTF-8, so such an ID could be neither hashed nor stored.
_forbidden_char = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def subject_id_problem(value: object) -> str | None:
    """Why a value is not a valid subject ID (1 to 256 characters, no control characters), or None."""
    if not isinstance(value, str):
        return "must be a string"
    if not value:
        return "must not be empty"
    if len(value) > SUBJECT_ID_MAX_LENGTH:
        return f"must be at most {SUBJECT_ID_MAX_LENGTH} characters"
    return character_problem(value)


def character_problem(value: str) -> str | None:
    """Why a text cannot be stored as it is (a control character, or a lone surrogate, which is
    what bytes that are not UTF-8 become on a command line), or None."""
    match = _forbidden_char.search(value)
    if match:
        if "\ud800" <= match.group() <= "\udfff":
            return "must be valid Unicode (no lone surrogates)"
        return "must not contain control characters"
    return None


class StrictField(serializers.Field):
    default_error_messages = {"required": "is required", "null": "must not be null"}

    def to_representation(self, value):
        return value


class StrictStringField(StrictField):
    """A string of 1..max_length characters, taken exactly as sent."""

    def __init__(self, *, max_length: int, **kwargs) -> None:
        self.max_length = max_length
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        if not data:
            raise serializers.ValidationError("must not be empty")
        if len(data) > self.max_length:
            raise serializers.ValidationError(f"must be at most {self.max_length} characters")
        return data


class SubjectIdField(StrictField):
    def to_internal_value(self, data):
        problem = subject_id_problem(data)
        if problem:
            raise serializers.ValidationError(problem)
        return data


class SubjectIdListField(StrictField):
    """1..ASSIGNMENT_MAX_SUBJECTS subject IDs; errors are keyed by index so they read `subject_ids.3`.

    Validated in one loop rather than a ListField of child fields: this is the hot
    path, and 1000 child-field calls cost more than its database round trips.
    """

    def to_internal_value(self, data):
        max_items = settings.ASSIGNMENT_MAX_SUBJECTS
        if not isinstance(data, list):
            raise serializers.ValidationError("must be an array of strings")
        if not data:
            raise serializers.ValidationError("must contain at least 1 item")
        if len(data) > max_items:
            raise serializers.ValidationError(f"must contain at most {max_items} items, got {len(data)}")
        errors = {}
        for index, item in enumerate(data):
            problem = subject_id_problem(item)
            if problem:
                errors[index] = [problem]
        if errors:
            raise serializers.ValidationError(errors)
        return data
