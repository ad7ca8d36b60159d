"""Configuration as code: YAML documents <-> resource specs.

This module parses and validates what can be checked without the database;
export.py renders the configuration back into documents. The write side, which also checks what needs the database
(references, lifecycle, existing assignments), is `apply.resources_apply`.
The admin builds the same documents from its forms, so both go through one reader.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from assignments import gates
from assignments.configuration import holdouts, layers, values
from assignments.configuration.document_reader import (
    SCHEMA_VERSION,
    Reader,
    ResourceIdentity,
    ResourceInvalid,
    ResourceProblem,
    Source,
    VariantSpec,
    given_text,
    kind_with_article,
    read_metadata,
)
from assignments.configuration.experiment_groups import Salted
from assignments.configuration.holdouts import HoldoutSpec
from assignments.configuration.layers import LayerSpec, Placement
from assignments.models import DEFAULT_LAB_ID, Experiment, Layer, SubjectType
from assignments.slots import Ranges

# In the order of the export, and of an apply: each kind may refer to the kinds before it.
KINDS = ("subjecttype", "lab", "layer", "holdout", "experiment")
SPLIT_SUM_TOLERANCE = 1e-6
MIN_VARIANTS = 2

TOP_FIELDS = {"schemaVersion", "kind", "metadata", "spec"}
METADATA_FIELDS = {
    "subjecttype": {"id", "name", "description", "status", "resourceVersion"},
    "lab": {"id", "name", "description", "resourceVersion"},
    "experiment": {"id", "name", "description", "status", "parentId", "resourceVersion"},
}
EXPERIMENT_SPEC_FIELDS = {
    "subjectType",
    "hypothesis",
    "salt",
    "winningVariant",
    "followLinks",
    "enrollment",
    "holdouts",
    "layer",
    "targeting",
    "coverage",
    "valueType",
    "bulkEvaluation",
    "variants",
}
VARIANT_FIELDS = {"id", "name", "description", "control", "split", "value"}
SUBJECT_TYPE_SPEC_FIELDS = {"attributes"}
ATTRIBUTE_FIELDS = {"name", "type"}
ENROLLMENT_FIELDS = {"startAt", "stopAt"}


@dataclass(frozen=True, kw_only=True)
class SubjectTypeSpec(ResourceIdentity):
    status: str
    # spec.attributes as (name, type) pairs, in configuration order.
    attributes: tuple[tuple[str, str], ...] = ()

    kind = "subjecttype"

    def attribute_documents(self) -> list[dict[str, str]]:
        return [{"name": name, "type": attribute_type} for name, attribute_type in self.attributes]


@dataclass(frozen=True, kw_only=True)
class LabSpec(ResourceIdentity):
    kind = "lab"


@dataclass(frozen=True, kw_only=True)
class ExperimentSpec(ResourceIdentity, Salted):
    status: str
    lab: str
    subject_type: str
    hypothesis: str
    salt: str | None
    winning_variant: str | None
    variants: tuple[VariantSpec, ...]
    follow_links: bool = False
    enrollment_start_at: datetime | None = None
    enrollment_stop_at: datetime | None = None
    # The conditions as the document holds them (gates.py reads them), None for no targeting.
    targeting: list[dict[str, Any]] | None = None
    coverage: float = 1.0
    # spec.layer; None for none.
    layer: Placement | None = None
    # spec.holdouts, the IDs as written; None when left out (the stored ones are kept).
    holdouts: tuple[str, ...] | None = None
    # spec.valueType, "" for none (each variant's value is then None), and spec.bulkEvaluation.
    value_type: str = ""
    bulk_evaluation: bool = True

    kind = "experiment"

    def splits(self) -> list[dict[str, Any]]:
        return [{"variant": variant.key, "split": variant.split} for variant in self.variants]

    def population(self, layer: Layer | None) -> dict[str, Any]:
        """The gates' part of the spec, as a cohort records it and the export writes it; `layer` is the stored
        layer spec.layer names, whose ID is written as stored (as the export writes it)."""
        return population_document(
            start_at=self.enrollment_start_at,
            stop_at=self.enrollment_stop_at,
            layer=None if layer is None else (layer.key, self.layer.slots),
            targeting=self.targeting,
            coverage=self.coverage,
        )


def time_text(value: datetime) -> str:
    """An instant as the export writes it: ISO 8601 in UTC, with Z.

    The database keeps the instant, not the offset it was written with, so the export writes every
    instant one way whatever offset its document gave; an apply of the export is then no change, and two
    exports compare line by line.
    """
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def population_document(
    *,
    start_at: datetime | None,
    stop_at: datetime | None,
    layer: tuple[str, Ranges] | None,
    targeting: list | None,
    coverage: float,
) -> dict[str, Any]:
    """spec.enrollment, spec.layer (the layer's ID and the slots owned), spec.targeting and spec.coverage, each
    only when it narrows who enters, in the order of the YAML."""
    document: dict[str, Any] = {}
    enrollment = {}
    if start_at is not None:
        enrollment["startAt"] = time_text(start_at)
    if stop_at is not None:
        enrollment["stopAt"] = time_text(stop_at)
    if enrollment:
        document["enrollment"] = enrollment
    if layer is not None:
        key, slots = layer
        document["layer"] = {"id": key, "slots": layers.slots_document(slots)}
    if targeting:
        document["targeting"] = [_condition_in_order(condition) for condition in targeting]
    if coverage != 1:
        document["coverage"] = coverage
    return document


def _condition_in_order(condition: dict[str, Any]) -> dict[str, Any]:
    """A condition as written, `attribute` before its operator: PostgreSQL's jsonb keeps keys in an order
    of its own (shortest first), which the export and the history would otherwise show."""
    if "anyOf" in condition:
        return {"anyOf": [_condition_in_order(inner) for inner in condition["anyOf"]]}
    operators = {key: value for key, value in condition.items() if key != "attribute"}
    return {"attribute": condition["attribute"], **operators}


ResourceSpec = SubjectTypeSpec | LabSpec | LayerSpec | HoldoutSpec | ExperimentSpec


# A boolean or a number as JSON writes it: a quoted string that is one may have been meant unquoted.
_JSON_SCALAR = re.compile(rf"true|false|{values.NUMBER_TEXT.pattern}")


def _value_refusal(value_type: str, value: Any, message: str) -> str:
    """The refusal of a variant's value, which says what it must be; and what was given instead when that is
    not of the type at all (as Reader.wrong words it), with the fix when YAML's reading caused it."""
    if value_type == Experiment.ValueType.STRING:
        mistyped = not isinstance(value, str)
        fix = "" if isinstance(value, (list, dict)) else " (quote numbers and booleans in YAML)"
    elif value_type == Experiment.ValueType.OBJECT:
        mistyped, fix = not isinstance(value, dict), ""
    else:
        mistyped, fix = True, " (leave the quotes off in YAML)" if _unquoted_fits(value_type, value) else ""
    return f"{message}, not {given_text(value)}{fix}" if mistyped else message


def _unquoted_fits(value_type: str, value: Any) -> bool:
    """Whether `value` is a string that YAML reads, without its quotes, as a value the type takes."""
    if not isinstance(value, str) or not _JSON_SCALAR.fullmatch(value):
        return False
    unquoted = yaml.safe_load(value)
    if isinstance(unquoted, str):
        # PyYAML reads 1e3 (no point) as a string.
        return False
    try:
        values.value_checked(value_type, unquoted)
    except values.ValueRefused:
        return False
    return True


def _read_value(reader: Reader, data: dict, path: str, value_type: str | None) -> Any:
    """A variant's `value`, as stored: required with a spec.valueType (`value_type`), refused without one;
    None when there is none, or it is refused, or the value type is (then nothing can check it)."""
    where = f"{path}.value"
    if value_type is None:
        return None
    if not value_type:
        if "value" in data:
            reader.error(where, "is allowed only with spec.valueType (set one, or leave the value out)")
        return None
    value = data.get("value")
    if value is None:
        reader.wrong(where, None, values.WANTED[value_type])
        return None
    try:
        return values.value_checked(value_type, value)
    except values.ValueRefused as refused:
        reader.error(where, _value_refusal(value_type, value, str(refused)))
        return None


def _read_value_type(reader: Reader, spec: dict) -> str | None:
    """spec.valueType: "" when left out, None when it is not one of the types (said so)."""
    value_type = spec.get("valueType")
    if value_type is None:
        return ""
    if not isinstance(value_type, str) or value_type not in values.VALUE_TYPES:
        reader.wrong("spec.valueType", value_type, f"one of {', '.join(values.VALUE_TYPES)} (leave it out for none)")
        return None
    return value_type


def _read_variants(reader: Reader, value: Any, value_type: str | None = "") -> tuple[VariantSpec, ...]:
    if not isinstance(value, list):
        reader.wrong("spec.variants", value, "a list of variants")
        return ()
    if len(value) < MIN_VARIANTS:
        reader.error("spec.variants", f"must have at least {MIN_VARIANTS} variants")
    variants = []
    seen: set[str] = set()
    for path, data in reader.mappings(value, "spec.variants", VARIANT_FIELDS):
        key = reader.resource_id(data, "id", path)
        control = data.get("control", False)
        if not isinstance(control, bool):
            reader.error(f"{path}.control", "must be true or false")
        split = data.get("split")
        if isinstance(split, bool) or not isinstance(split, (int, float)) or not math.isfinite(split):
            reader.wrong(f"{path}.split", split, "a number from 0 to 1")
            split = None
        elif not 0 <= split <= 1:
            reader.error(f"{path}.split", "must be between 0 and 1")
        variant_value = _read_value(reader, data, path, value_type)
        if key is not None:
            if key.lower() in seen:
                reader.error(f"{path}.id", f"duplicates variant {key!r} (IDs are compared ignoring case)")
            seen.add(key.lower())
        if key is not None and split is not None and isinstance(control, bool):
            variants.append(
                VariantSpec(
                    key=key,
                    name=reader.text(data, "name", path),
                    description=reader.text(data, "description", path),
                    is_control=control,
                    split=float(split),
                    value=variant_value,
                )
            )
    if len(variants) == len(value):
        controls = sum(variant.is_control for variant in variants)
        if controls != 1:
            reader.error("spec.variants", f"exactly one variant must have control: true, found {controls}")
        total = math.fsum(variant.split for variant in variants)
        if abs(total - 1) > SPLIT_SUM_TOLERANCE:
            reader.error("spec.variants", f"splits must sum to 1, they sum to {total:.9g}")
    return tuple(variants)


def _read_attributes(reader: Reader, value: Any) -> tuple[tuple[str, str], ...]:
    """spec.attributes of a subject type: up to 50 {name, type}, names unique (compared exactly)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        reader.error("spec.attributes", "must be a list of {name, type}")
        return ()
    if len(value) > gates.MAX_ATTRIBUTES:
        reader.error("spec.attributes", f"must have at most {gates.MAX_ATTRIBUTES} attributes, has {len(value)}")
    attributes = []
    seen: set[str] = set()
    for path, data in reader.mappings(value, "spec.attributes", ATTRIBUTE_FIELDS):
        name = data.get("name")
        if not gates.is_attribute_name(name):
            reader.wrong(f"{path}.name", name, f"a name matching {gates.ATTRIBUTE_NAME_PATTERN}")
            name = None
        elif name in seen:
            reader.error(f"{path}.name", f"duplicates attribute {name!r}")
        attribute_type = data.get("type")
        if attribute_type not in gates.ATTRIBUTE_TYPES:
            reader.wrong(f"{path}.type", attribute_type, f"one of {', '.join(gates.ATTRIBUTE_TYPES)}")
        elif name is not None:
            seen.add(name)
            attributes.append((name, attribute_type))
    return tuple(attributes)


def _read_time(reader: Reader, value: Any, path: str) -> datetime | None:
    """An ISO 8601 time with its offset (YAML may already have read an unquoted one as a timestamp)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            reader.error(path, f"must be an ISO 8601 time with an offset, such as 2026-12-01T09:00:00+01:00: {value!r}")
            return None
    if not isinstance(value, datetime):
        reader.error(path, "must be an ISO 8601 time with an offset, such as 2026-12-01T09:00:00+01:00")
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        reader.error(path, "needs an offset (Z for UTC, or such as +01:00): a time without one names no instant")
        return None
    try:
        # The export writes instants in UTC (time_text), where 0001-01-01T00:00:00+01:00 falls before year 1,
        # which a datetime cannot hold.
        value.astimezone(UTC)
    except OverflowError:
        reader.error(path, "must be an instant from year 1 to 9999 in UTC")
        return None
    return value


def _read_enrollment(reader: Reader, value: Any) -> tuple[datetime | None, datetime | None]:
    if value is None:
        return None, None
    data = reader.mapping(value, "spec.enrollment", ENROLLMENT_FIELDS)
    start = _read_time(reader, data["startAt"], "spec.enrollment.startAt") if "startAt" in data else None
    stop = _read_time(reader, data["stopAt"], "spec.enrollment.stopAt") if "stopAt" in data else None
    if start is not None and stop is not None and stop <= start:
        reader.error("spec.enrollment.stopAt", "must be after startAt (the start is inclusive, the stop exclusive)")
    return start, stop


def _read_operand(reader: Reader, operator: str, value: Any, path: str) -> bool:
    """Whether a condition's VALUE has a shape its operator can take; whether it fits the attribute's
    type is checked at apply, against the subject type's declaration (gates.targeting_problems)."""
    if operator == "exists":
        if not isinstance(value, bool):
            reader.error(path, "must be true (the attribute was sent) or false (it was not)")
            return False
        return True
    if operator in gates.LIST_OPERATORS:
        if not isinstance(value, list) or not 1 <= len(value) <= gates.MAX_LIST_ITEMS:
            reader.error(path, f"must be a list of 1 to {gates.MAX_LIST_ITEMS} strings or numbers")
            return False
        items = value
    else:
        items = [value]
    for index, item in enumerate(items):
        where = f"{path}.{index}" if operator in gates.LIST_OPERATORS else path
        problem = gates.value_problem(item)
        if problem is None and isinstance(item, bool) and operator != "equals":
            problem = "must be a string or a number"
        if problem is not None:
            reader.error(where, problem)
            return False
    return True


def _read_condition(reader: Reader, value: Any, path: str) -> dict[str, Any] | None:
    allowed = {"attribute", *gates.OPERATORS}
    data = reader.mapping(value, path, allowed)
    if not isinstance(value, dict):
        # reader.mapping said so; an empty mapping goes on, to be refused for what it lacks.
        return None
    name = data.get("attribute")
    operators = [key for key in data if key in gates.OPERATORS]
    valid = True
    if not gates.is_attribute_name(name):
        reader.wrong(f"{path}.attribute", name, f"an attribute name matching {gates.ATTRIBUTE_NAME_PATTERN}")
        valid = False
    if len(operators) != 1:
        found = ", ".join(operators) or "none"
        reader.error(path, f"needs exactly one operator of {', '.join(gates.OPERATORS)}; found {found}")
        return None
    (operator,) = operators
    if not _read_operand(reader, operator, data[operator], f"{path}.{operator}") or not valid:
        return None
    if set(data) - allowed:
        return None
    return {"attribute": name, operator: data[operator]}


def _read_targeting(reader: Reader, value: Any) -> list[dict[str, Any]] | None:
    """spec.targeting: 1 to 20 conditions that must all hold, each {attribute, OPERATOR: VALUE} or
    {anyOf: [1 to 20 such conditions]} (one level deep)."""
    if value is None:
        return None
    limit = gates.MAX_CONDITIONS
    if not isinstance(value, list) or not 1 <= len(value) <= limit:
        reader.error("spec.targeting", f"must be a list of 1 to {limit} conditions (leave it out to target everyone)")
        return None
    documents = []
    for index, item in enumerate(value):
        path = f"spec.targeting.{index}"
        if isinstance(item, dict) and "anyOf" in item:
            if set(item) != {"anyOf"}:
                reader.error(path, "an anyOf condition has no other field")
                continue
            inner = item["anyOf"]
            if not isinstance(inner, list) or not 1 <= len(inner) <= limit:
                reader.error(f"{path}.anyOf", f"must be a list of 1 to {limit} conditions")
                continue
            conditions = []
            for position, condition in enumerate(inner):
                where = f"{path}.anyOf.{position}"
                if isinstance(condition, dict) and "anyOf" in condition:
                    reader.error(where, "anyOf goes one level deep: list plain conditions in it")
                    continue
                conditions.append(_read_condition(reader, condition, where))
            if all(condition is not None for condition in conditions):
                documents.append({"anyOf": conditions})
        else:
            condition = _read_condition(reader, item, path)
            if condition is not None:
                documents.append(condition)
    return documents


def _read_coverage(reader: Reader, value: Any) -> float:
    if value is None:
        return 1.0
    if not gates.is_number(value) or not 0 <= value <= 1:
        reader.wrong("spec.coverage", value, "a number from 0 to 1 (the share of subjects that may enter)")
        return 1.0
    return float(value)


def _read_experiment(reader: Reader, document: dict) -> ExperimentSpec | None:
    metadata, identity = read_metadata(reader, document, METADATA_FIELDS["experiment"])
    status = reader.choice(metadata, "status", "metadata", Experiment.Status.values, Experiment.Status.DRAFT)
    lab = reader.resource_id(metadata, "parentId", "metadata", default=DEFAULT_LAB_ID)
    spec = reader.mapping(document.get("spec"), "spec", EXPERIMENT_SPEC_FIELDS)
    subject_type = reader.resource_id(spec, "subjectType", "spec")
    hypothesis = reader.text(spec, "hypothesis", "spec")
    salt = reader.salt(spec, "spec")
    winner = spec.get("winningVariant")
    if winner is not None and not isinstance(winner, str):
        reader.error("spec.winningVariant", "must be a string")
    follow_links = spec.get("followLinks", False)
    if not isinstance(follow_links, bool):
        reader.error("spec.followLinks", "must be true or false")
    value_type = _read_value_type(reader, spec)
    bulk_evaluation = spec.get("bulkEvaluation", True)
    if not isinstance(bulk_evaluation, bool):
        reader.error("spec.bulkEvaluation", "must be true or false")
    variants = _read_variants(reader, spec.get("variants"), value_type)
    start_at, stop_at = _read_enrollment(reader, spec.get("enrollment"))
    targeting = _read_targeting(reader, spec.get("targeting"))
    coverage = _read_coverage(reader, spec.get("coverage"))
    placement = layers.placement_read(reader, spec.get("layer"))
    listed_holdouts = (
        None if "holdouts" not in spec else reader.resource_ids(spec["holdouts"], "spec.holdouts", "holdout")
    )
    if status == Experiment.Status.WINNER_DECLARED and winner is None:
        reader.error("spec.winningVariant", "is required when status is winner_declared")
    if status != Experiment.Status.WINNER_DECLARED and winner is not None:
        reader.error("spec.winningVariant", "is allowed only when status is winner_declared")
    if isinstance(winner, str) and variants and winner.lower() not in {v.key.lower() for v in variants}:
        reader.error("spec.winningVariant", f"names no variant of this experiment: {winner!r}")
    if reader.errors:
        return None
    return ExperimentSpec(
        **identity,
        status=status,
        lab=lab,
        subject_type=subject_type,
        hypothesis=hypothesis,
        salt=salt,
        winning_variant=winner,
        variants=variants,
        follow_links=follow_links,
        enrollment_start_at=start_at,
        enrollment_stop_at=stop_at,
        targeting=targeting,
        coverage=coverage,
        layer=placement,
        holdouts=listed_holdouts,
        value_type=value_type,
        bulk_evaluation=bulk_evaluation,
    )


def _read_document(reader: Reader, document: Any) -> ResourceSpec | None:
    document = reader.mapping(document, "", TOP_FIELDS)
    if not document:
        if not reader.errors:
            reader.error("", "an empty document; it needs schemaVersion, kind and metadata")
        return None
    version = document.get("schemaVersion")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        reader.error("schemaVersion", f"must be {SCHEMA_VERSION}")
    kind = document.get("kind")
    if kind not in KINDS:
        reader.error("kind", f"must be one of {', '.join(KINDS)}")
        return None
    if kind == "experiment":
        return _read_experiment(reader, document)
    if kind == "layer":
        return layers.layer_read(reader, document)
    if kind == "holdout":
        return holdouts.holdout_read(reader, document)
    if "spec" in document and kind != "subjecttype":
        reader.error("spec", f"a {kind} has no spec")
    metadata, identity = read_metadata(reader, document, METADATA_FIELDS[kind])
    if kind == "subjecttype":
        status = reader.choice(metadata, "status", "metadata", SubjectType.Status.values, SubjectType.Status.ACTIVE)
        spec = reader.mapping(document.get("spec", {}), "spec", SUBJECT_TYPE_SPEC_FIELDS)
        attributes = _read_attributes(reader, spec.get("attributes"))
        if reader.errors:
            return None
        return SubjectTypeSpec(**identity, status=status, attributes=attributes)
    if reader.errors:
        return None
    return LabSpec(**identity)


def resources_parse(text: str, *, file: str) -> list[ResourceSpec]:
    """Every resource in one YAML text; raises ResourceInvalid listing every problem."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ResourceInvalid([ResourceProblem(file, "", f"not valid YAML: {exc}")]) from None
    specs: list[ResourceSpec] = []
    errors: list[ResourceProblem] = []
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        try:
            specs.append(resource_read(document, source=Source(file, number)))
        except ResourceInvalid as exc:
            errors.extend(exc.problems)
    if errors:
        raise ResourceInvalid(errors)
    return specs


def resource_read(document: Any, *, source: Source) -> ResourceSpec:
    """One parsed document (a YAML document, or one the admin built from a form) as a spec;
    raises ResourceInvalid listing every problem."""
    reader = Reader(source)
    spec = _read_document(reader, document)
    if reader.errors or spec is None:
        raise ResourceInvalid(reader.errors)
    return spec


def resources_check_unique(specs: list[ResourceSpec]) -> None:
    """A resource may be defined once per apply, its ID compared ignoring case; experiments and holdouts
    share their IDs."""
    first: dict[tuple[str, str], ResourceSpec] = {}
    errors = []
    for spec in specs:
        namespace = "experiment" if spec.kind == "holdout" else spec.kind
        seen = first.setdefault((namespace, spec.key.lower()), spec)
        if seen.kind != spec.kind:
            message = (
                f"{spec.kind} {spec.key!r} is already defined in {seen.source} as {kind_with_article(seen.kind)} "
                "(experiments and holdouts share IDs)"
            )
            errors.append(ResourceProblem(str(spec.source), "metadata.id", message))
        elif seen is not spec:
            message = f"{spec.kind} {spec.key!r} is already defined in {seen.source}"
            errors.append(ResourceProblem(str(spec.source), "metadata.id", message))
    if errors:
        raise ResourceInvalid(errors)
