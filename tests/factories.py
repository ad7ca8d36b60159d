"""factory-boy factories for the configuration and the data it produces."""

from __future__ import annotations

import factory
from django.utils import timezone

from assignments.models import Assignment, Cohort, Experiment, Lab, SubjectType, Variant


class SubjectTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SubjectType

    key = factory.Sequence(lambda n: f"subject-type-{n}")
    name = factory.LazyAttribute(lambda o: o.key)
    status = SubjectType.Status.ACTIVE


class LabFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Lab

    key = factory.Sequence(lambda n: f"lab-{n}")
    name = factory.LazyAttribute(lambda o: o.key)


class ExperimentFactory(factory.django.DjangoModelFactory):
    """An experiment with a control and a treatment at 50/50, and its first cohort.

    `splits` overrides the variants: [("control", 0.2), ("b", 0.8)], first one the control.
    """

    class Meta:
        model = Experiment
        skip_postgeneration_save = True

    key = factory.Sequence(lambda n: f"experiment-{n}")
    name = factory.LazyAttribute(lambda o: o.key)
    lab = factory.SubFactory(LabFactory)
    subject_type = factory.SubFactory(SubjectTypeFactory)
    status = Experiment.Status.ACTIVE
    salt = factory.LazyAttribute(lambda o: o.key.lower())

    @factory.post_generation
    def splits(self, create, extracted, **kwargs):
        splits = extracted or [("control", 0.5), ("treatment", 0.5)]
        for position, (key, split) in enumerate(splits):
            Variant.objects.create(experiment=self, key=key, position=position, is_control=position == 0, split=split)
        Cohort.objects.create(
            experiment=self, number=1, splits=[{"variant": key, "split": split} for key, split in splits]
        )


class AssignmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Assignment

    experiment = factory.SubFactory(ExperimentFactory)
    subject_id = factory.Sequence(lambda n: f"subject-{n}")
    variant = factory.LazyAttribute(lambda o: o.experiment.variants.first())
    cohort = 1
    created_at = factory.LazyFunction(timezone.now)


class IdentifierLinkFactory(factory.django.DjangoModelFactory):
    """A link between two identifiers of one subject type, already in canonical order ("a-" < "b-")."""

    class Meta:
        model = "idlinks.IdentifierLink"

    subject_type_a = factory.SubFactory(SubjectTypeFactory)
    subject_id_a = factory.Sequence(lambda n: f"a-{n}")
    subject_type_b = factory.SelfAttribute("subject_type_a")
    subject_id_b = factory.Sequence(lambda n: f"b-{n}")
    created_at = factory.LazyFunction(timezone.now)
