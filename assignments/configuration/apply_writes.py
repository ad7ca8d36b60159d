"""The writes every kind's apply shares (apply.py, holdouts.py, layers.py): compare, update, variants, cohorts."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from django.db.models import F, Max
from django.utils import timezone

from assignments.configuration.document_reader import VariantSpec
from assignments.models import DEFAULT_LAB_ID, Cohort, Experiment, Lab, Variant


def same(stored: Any, given: Any) -> bool:
    """Equality of stored and given values, JSON documents included, that tells true from 1 and false from
    0 as JSON and the gates do (Python's == does not): a condition's `equals: 1` that replaces `equals: true`,
    its attribute retyped from boolean to number, is a change. 1 and 1.0 stay the same number."""
    if isinstance(stored, bool) or isinstance(given, bool):
        return type(stored) is type(given) and stored == given
    if isinstance(stored, dict) and isinstance(given, dict):
        return stored.keys() == given.keys() and all(same(stored[key], given[key]) for key in stored)
    if isinstance(stored, (list, tuple)) and isinstance(given, (list, tuple)):
        return type(stored) is type(given) and len(stored) == len(given) and all(map(same, stored, given))
    return stored == given


def value_same(stored: Any, given: Any) -> bool:
    """Whether a variant's stored value is the one given, as the API serves it: same() that also tells 1 from
    1.0 (an integer value from a float one, at any depth of an object), but for the float that PostgreSQL's
    jsonb gives back as a whole number (1e16 and above, which it writes without a point)."""
    if isinstance(stored, bool) or isinstance(given, bool):
        return same(stored, given)
    if isinstance(stored, int) and isinstance(given, float):
        return abs(given) >= 2**53 and float(stored) == given
    if isinstance(stored, float) and isinstance(given, int):
        return False
    if isinstance(stored, dict) and isinstance(given, dict):
        return stored.keys() == given.keys() and all(value_same(stored[key], given[key]) for key in stored)
    if isinstance(stored, list) and isinstance(given, list):
        return len(stored) == len(given) and all(map(value_same, stored, given))
    return same(stored, given)


def model_update(instance, values: dict[str, Any]) -> bool:
    """Set changed fields and bump resource_version; False when nothing changed."""
    changed = [name for name, value in values.items() if not same(getattr(instance, name), value)]
    if not changed:
        return False
    for name in changed:
        setattr(instance, name, values[name])
    instance.resource_version += 1
    instance.updated_at = timezone.now()
    instance.save(update_fields=[*changed, "resource_version", "updated_at"])
    return True


def resource_version_raise(experiment: Experiment) -> None:
    """Raise the version of an experiment or holdout whose change is in other rows (its variants, its holdouts)."""
    now = timezone.now()
    Experiment.objects.filter(pk=experiment.pk).update(resource_version=F("resource_version") + 1, updated_at=now)


def lab_get_ci(key: str) -> Lab | None:
    """The lab `key` (ignoring case), or None. `default` exists out of the box (migration 0002); a flushed
    database gets it back here."""
    lab = Lab.objects.get_ci(key)
    if lab is None and key.lower() == DEFAULT_LAB_ID:
        lab = Lab.objects.create(key=DEFAULT_LAB_ID, name=DEFAULT_LAB_ID)
    return lab


def variants_write(experiment: Experiment, variants: Sequence[VariantSpec]) -> tuple[bool, list[int]]:
    """Create and update the experiment's variants as given; returns whether anything changed and the
    primary keys of the stored variants left out, for the caller to delete once the
    experiment no longer names one of them as its winner (Experiment.winning_variant protects it)."""
    stored = {variant.key.lower(): variant for variant in experiment.variants.all()}
    wanted = {variant.key.lower() for variant in variants}
    removed = [variant.pk for key, variant in stored.items() if key not in wanted]
    changed = bool(removed)
    # variant_one_control_per_experiment is checked per row, and a dropped control is still
    # stored until the end: clear the old control first.
    stored_control = next((key for key, variant in stored.items() if variant.is_control), None)
    control_moves = stored_control != next(v.key.lower() for v in variants if v.is_control)
    if control_moves:
        Variant.objects.filter(experiment=experiment, is_control=True).update(is_control=False)
        for variant in stored.values():
            variant.is_control = False
    for position, variant_spec in enumerate(variants):
        values = {
            "key": variant_spec.key,
            "name": variant_spec.name,
            "description": variant_spec.description,
            "position": position,
            "is_control": variant_spec.is_control,
            "split": variant_spec.split,
            "value": variant_spec.value,
        }
        variant = stored.get(variant_spec.key.lower())
        if variant is None:
            Variant.objects.create(experiment=experiment, **values)
            changed = True
            continue
        updates = [
            name
            for name, value in values.items()
            if not (value_same if name == "value" else operator.eq)(getattr(variant, name), value)
        ]
        if updates:
            for name in updates:
                setattr(variant, name, values[name])
            variant.save(update_fields=updates)
            changed = True
    return changed or control_moves, removed


def cohort_change(
    experiment: Experiment, *, running: bool, splits: list[dict[str, Any]], population: dict[str, Any]
) -> None:
    """Record a change of an experiment's allocation, its splits or its population rule.

    A cohort has one population rule and one set of splits: a change of either while the experiment is
    `running` (active or later before this change) starts the next cohort; a draft has never assigned
    anyone, so its first cohort is simply corrected.
    """
    cohorts = Cohort.objects.filter(experiment=experiment)
    if running:
        number = (cohorts.aggregate(Max("number"))["number__max"] or 0) + 1
        Cohort.objects.create(experiment=experiment, number=number, splits=splits, population=population)
    else:
        cohorts.filter(number=1).update(splits=splits, population=population)
