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


def subject_id_isolated(subject_id: str) -> str:
    """The subject ID between U+2068 and U+2069 (first strong isolate, pop directional isolate), the plain
    text's <bdi>, for a title made of it: a bidirectional override inside it then reorders nothing after it."""
    return f"\u2068{subject_id}\u2069"


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


class StrictBooleanField(StrictField):
    """JSON true or false only: "false", 0 or null are refused, never coerced."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            raise serializers.ValidationError("must be true or false")
        return data


class IdentifierMapField(StrictField):
    """A subject known by one identifier per subject type: {"<subject type ID>": "<subject ID>", ...}.

    1..max_entries entries; errors are keyed by the subject type as sent, so they read
    `subject.user`. Two keys naming one type (IDs compare ignoring case) are refused here;
    whether each names an active subject type is the service's to say.
    """

    def __init__(self, *, max_entries: int, **kwargs) -> None:
        self.max_entries = max_entries
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an object of subject type IDs to subject IDs")
        if not data:
            raise serializers.ValidationError("must contain at least 1 entry")
        if len(data) > self.max_entries:
            raise serializers.ValidationError(f"must contain at most {self.max_entries} entries, got {len(data)}")
        errors = {}
        for key, value in data.items():
            problem = subject_id_problem(value)
            if problem:
                errors[key] = [problem]
        if errors:
            raise serializers.ValidationError(errors)
        seen: dict[str, str] = {}
        for key in data:
            first = seen.setdefault(key.lower(), key)
            if first != key:
                raise serializers.ValidationError(
                    f"{first!r} and {key!r} name the same subject type (IDs compare ignoring case)"
                )
        return data


class StringListField(StrictField):
    """1..max_items non-empty strings of at most max_length characters; errors are keyed by index."""

    def __init__(self, *, max_items: int, max_length: int, **kwargs) -> None:
        self.max_items = max_items
        self.max_length = max_length
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, list):
            raise serializers.ValidationError("must be an array of strings")
        if not data:
            raise serializers.ValidationError("must contain at least 1 item")
        if len(data) > self.max_items:
            raise serializers.ValidationError(f"must contain at most {self.max_items} items, got {len(data)}")
        errors = {}
        for index, item in enumerate(data):
            if not isinstance(item, str):
                errors[index] = ["must be a string"]
            elif not item:
                errors[index] = ["must not be empty"]
            elif len(item) > self.max_length:
                errors[index] = [f"must be at most {self.max_length} characters"]
        if errors:
            raise serializers.ValidationError(errors)
        return data
