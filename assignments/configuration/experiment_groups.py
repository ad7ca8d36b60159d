"""What holdouts and layers share: each groups experiments of one subject type under a salt of its own, and
refuses the same things the same way.

A holdout covers experiments (gate 2) and a layer holds them (gate 3); both draw
each subject with their own salt, and both require their experiments to be of their
subject type, checked after the whole apply (a change may move experiments and their
group together).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from django.db.models import QuerySet
from django.db.models.functions import Lower

from assignments.configuration.document_reader import ResourceProblem
from assignments.models import Experiment, Layer, SubjectType


class Salted:
    """A spec (experiment, holdout, layer) whose salt, left out, is its ID in lower case."""

    @property
    def effective_salt(self) -> str:
        return self.salt if self.salt is not None else self.key.lower()


def subject_type_problems(name: str, where: str) -> tuple[SubjectType | None, list[ResourceProblem]]:
    """The subject type a document names (ignoring case), or the problem that there is none."""
    subject_type = SubjectType.objects.get_ci(name)
    if subject_type is None:
        return None, [ResourceProblem(where, "spec.subjectType", f"no subject type {name!r}")]
    return subject_type, []


def group_values(spec, subject_type: SubjectType) -> dict[str, object]:
    """The stored fields a holdout and a layer take alike from their documents."""
    return {
        "key": spec.key,
        "name": spec.name,
        "description": spec.description,
        "subject_type_id": subject_type.pk,
        "salt": spec.effective_salt,
    }


def members_problems(
    spec,
    group: Experiment | Layer,
    members: QuerySet[Experiment],
    applied: Collection[str],
    message: Callable[[str, str], str],
) -> list[ResourceProblem]:
    """After the apply: the group's `members` whose subject type is no longer the group's, each refused with
    `message(experiment ID, its subject type's ID)`. Those whose documents were in the apply (`applied`: their
    IDs in lower case) were checked against it already."""
    others = (
        members.exclude(subject_type=group.subject_type_id)
        .alias(lkey=Lower("key"))
        .exclude(lkey__in=applied)
        .order_by("key")
        .values_list("key", "subject_type__key")
    )
    where = spec.where
    return [ResourceProblem(where, "spec.subjectType", message(key, subject_type)) for key, subject_type in others]
