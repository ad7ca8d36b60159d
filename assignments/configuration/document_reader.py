"""The building blocks of reading a resource document: where it came from, what is wrong with it, and the
reader that collects every problem of one document instead of stopping at the first.

resources.py reads every kind of resource with them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from assignments.models import RESOURCE_ID_PATTERN, is_resource_id

SCHEMA_VERSION = 1
# Salts, like IDs, are at most this long (Experiment.salt, Layer.salt).
SALT_MAX_LENGTH = 200

# Names, descriptions and hypotheses may hold tab and line breaks (the admin's text areas send "\r\n"),
# no other control character: PostgreSQL cannot store NUL in text, and the rest are invisible or move the
# cursor wherever the text is shown. A lone surrogate (a YAML "\ud800" escape) cannot be stored at all.
_NOT_IN_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
# A salt is typed again into warehouse queries that recompute assignments: not even tab or line breaks.
_NOT_IN_SALT = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass(frozen=True)
class Source:
    """Where a document came from, for error messages."""

    file: str
    document: int

    def __str__(self) -> str:
        return f"{self.file}: document {self.document}"


def kind_with_article(kind: str) -> str:
    """A kind as a sentence names one: "an experiment", "a holdout"."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


@dataclass(frozen=True)
class VariantSpec:
    """A variant as an experiment's document gives it, or as a holdout's share makes it."""

    key: str
    name: str
    description: str
    is_control: bool
    split: float
    # Of the experiment's spec.valueType, as stored and served (values.value_checked); None without one.
    value: Any = None


@dataclass(frozen=True)
class ResourceProblem:
    """One reason a resource was refused: where (file and document, or resource), which field, and why.

    `path` is the document's dotted field path (`spec.variants.1.split`), or "" when the
    problem is the document as a whole; the admin maps it to the form field it came from.
    """

    where: str
    path: str
    message: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.where, self.path, self.message) if part)


class ResourceInvalid(Exception):
    """One or more documents are invalid; `problems` holds each, `errors` a line each."""

    def __init__(self, problems: list[ResourceProblem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems

    @property
    def errors(self) -> list[str]:
        return [str(problem) for problem in self.problems]


def _numeric_text(value: Any) -> bool:
    """A string that YAML would read as a number without its quotes."""
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def given_text(value: Any) -> str:
    """A value from a YAML document as an error names it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return str(value)


@dataclass
class Reader:
    """Reads one document, collecting every problem instead of stopping at the first."""

    source: Source
    errors: list[ResourceProblem] = field(default_factory=list)

    def error(self, path: str, message: str) -> None:
        self.errors.append(ResourceProblem(str(self.source), path, message))

    def wrong(self, path: str, value: Any, wanted: str) -> None:
        """`path` is missing or holds `value` where `wanted` ("a number from 0 to 1") belongs: the error says
        which, what was given, and the fix where YAML's reading caused it."""
        if value is None:
            self.error(path, f"is required: {wanted}")
            return
        fix = " (leave the quotes off in YAML)" if wanted.startswith("a number") and _numeric_text(value) else ""
        self.error(path, f"must be {wanted}, not {given_text(value)}{fix}")

    def mapping(self, value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.error(path, "must be a mapping")
            return {}
        for name in sorted(set(value) - allowed, key=str):
            self.error(f"{path}.{name}" if path else str(name), f"unknown field; allowed: {', '.join(sorted(allowed))}")
        return value

    def mappings(self, items: list, path: str, allowed: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each item of a list of mappings (`spec.variants`), with its path (`spec.variants.0`); an item that is
        no mapping, or has an unknown field, is said so and comes as the part of it that can be read."""
        for index, item in enumerate(items):
            item_path = f"{path}.{index}"
            yield item_path, self.mapping(item, item_path, allowed)

    def string(self, data: dict, name: str, path: str, *, default: str | None = None) -> str | None:
        value = data.get(name, default)
        if value is None:
            if default is None:
                self.error(f"{path}.{name}", "is required")
            return default
        if not isinstance(value, str):
            self.error(f"{path}.{name}", "must be a string (quote numbers and booleans in YAML)")
            return None
        return value

    def text(self, data: dict, name: str, path: str, *, default: str = "") -> str:
        """Free text (a name, a description, a hypothesis): any string without the characters of _NOT_IN_TEXT."""
        value = self.string(data, name, path, default=default)
        if value is None or not self.characters_allowed(value, f"{path}.{name}", _NOT_IN_TEXT, "tab and line breaks"):
            return default
        return value

    def characters_allowed(self, value: str, path: str, forbidden: re.Pattern, except_: str | None = None) -> bool:
        """Whether value is free of `forbidden`; if not, an error naming the first such character and where."""
        found = forbidden.search(value)
        if found is None:
            return True
        char, position = found.group(), found.start() + 1
        if "\ud800" <= char <= "\udfff":
            self.error(path, f"must be valid Unicode: a lone surrogate U+{ord(char):04X} at character {position}")
        else:
            allowed = f" other than {except_}" if except_ else ""
            why = "the database cannot store NUL" if char == "\x00" else "invisible where the text is shown"
            self.error(
                path, f"must not contain control characters{allowed}: U+{ord(char):04X} at character {position} ({why})"
            )
        return False

    def resource_id(self, data: dict, name: str, path: str, *, default: str | None = None) -> str | None:
        value = self.string(data, name, path, default=default)
        if value is not None and not is_resource_id(value):
            self.error(f"{path}.{name}", f"must match {RESOURCE_ID_PATTERN}")
            return None
        return value

    def salt(self, data: dict, path: str) -> str | None:
        """The optional `salt` of `data` (None when left out): 1 to SALT_MAX_LENGTH characters, no control character."""
        salt = data.get("salt")
        if salt is not None and (not isinstance(salt, str) or not salt or len(salt) > SALT_MAX_LENGTH):
            self.error(f"{path}.salt", f"must be a non-empty string of at most {SALT_MAX_LENGTH} characters")
        elif salt is not None:
            self.characters_allowed(salt, f"{path}.salt", _NOT_IN_SALT)
        return salt

    def resource_ids(self, value: Any, path: str, noun: str) -> tuple[str, ...] | None:
        """A list of IDs of `noun`s, each at most once ignoring case; None when it is not one (said so)."""
        if not isinstance(value, list):
            self.error(path, f"must be a list of {noun} IDs")
            return None
        seen: set[str] = set()
        valid = True
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self.error(f"{path}.{index}", "must be a string (quote numbers and booleans in YAML)")
            elif not is_resource_id(item):
                self.error(f"{path}.{index}", f"must match {RESOURCE_ID_PATTERN}")
            elif item.lower() in seen:
                self.error(f"{path}.{index}", f"duplicates {noun} {item!r} (IDs are compared ignoring case)")
            else:
                seen.add(item.lower())
                continue
            valid = False
        return tuple(value) if valid else None

    def choice(self, data: dict, name: str, path: str, choices: list[str], default: str) -> str | None:
        value = self.string(data, name, path, default=default)
        if value is not None and value not in choices:
            self.error(f"{path}.{name}", f"must be one of {', '.join(choices)}")
            return None
        return value


@dataclass(frozen=True, kw_only=True)
class ResourceIdentity:
    """What every kind's spec holds: where its document came from, its ID, name and description, and the
    metadata.resourceVersion it was read at (ignored by apply_resources, checked by the admin)."""

    source: Source
    key: str
    name: str
    description: str
    version: int | None = None

    kind: ClassVar[str]

    @property
    def where(self) -> str:
        """Where a problem the apply finds with it is, as messages name it: the file, the document, the kind
        and the ID."""
        return f"{self.source}: {self.kind} {self.key!r}"


def document_of(kind: str, resource, *, spec: dict | None = None, **metadata: Any) -> dict:
    """A stored resource as its document: its identity, then `metadata`'s fields (status, parentId), then its
    resourceVersion, in the order the export writes them; `spec` where it has one."""
    document = {
        "schemaVersion": SCHEMA_VERSION,
        "kind": kind,
        "metadata": {
            "id": resource.key,
            "name": resource.name,
            "description": resource.description,
            **metadata,
            "resourceVersion": resource.resource_version,
        },
    }
    if spec is not None:
        document["spec"] = spec
    return document


def read_metadata(reader: Reader, document: dict, allowed: set[str]) -> tuple[dict, dict[str, Any]]:
    """The document's metadata mapping, and what every kind's spec takes from it: source, key, name,
    description and version, as keyword arguments."""
    metadata = reader.mapping(document.get("metadata"), "metadata", allowed)
    key = reader.resource_id(metadata, "id", "metadata")
    name = reader.text(metadata, "name", "metadata", default=key or "") or key or ""
    if len(name) > 200:
        reader.error("metadata.name", "must be at most 200 characters")
    description = reader.text(metadata, "description", "metadata")
    version = metadata.get("resourceVersion")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        reader.error("metadata.resourceVersion", "must be a positive integer")
        version = None
    identity = {"source": reader.source, "key": key, "name": name, "description": description, "version": version}
    return metadata, identity
