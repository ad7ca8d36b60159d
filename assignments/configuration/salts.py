"""Salts are unique ignoring case across every experiment, holdout and layer, whatever its status.

Two draws under one salt are the same numbers for every subject: experiments, holdouts and layers that
shared one would split, hold out or exclude the same subjects together, and their effects could not be
told apart.
"""

from __future__ import annotations

from django.db.models.functions import Lower

from assignments.configuration.document_reader import ResourceProblem
from assignments.models import Experiment, Layer


def salt_problems(*, salt: str, own: Experiment | Layer | None, where: str) -> list[ResourceProblem]:
    """Why the resource `own` (None for a new one), read at `where`, may not take `salt`, naming the resource
    that has it; [] when it may.

    Checked where a salt is set, not over the whole database, so a database that already holds a shared salt
    keeps working until someone sets one; a resource's own salt, rewritten in another case, is no collision.
    """
    if own is not None and own.salt == salt:
        return []
    experiments = Experiment.objects.alias(lsalt=Lower("salt")).filter(lsalt=salt.lower())
    layers = Layer.objects.alias(lsalt=Lower("salt")).filter(lsalt=salt.lower())
    if isinstance(own, Experiment):
        experiments = experiments.exclude(pk=own.pk)
    elif isinstance(own, Layer):
        layers = layers.exclude(pk=own.pk)
    experiment = experiments.order_by("key").first()
    layer = layers.order_by("key").first()
    if experiment is not None:
        other = f"{experiment.kind} {experiment.key!r}"
    elif layer is not None:
        other = f"layer {layer.key!r}"
    else:
        return []
    message = (
        f"salt {salt!r} is the salt of {other} already (salts are unique ignoring case: a shared salt correlates "
        "the experiments' draws); set another spec.salt"
    )
    return [ResourceProblem(where, "spec.salt", message)]
