from __future__ import annotations

import re

from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Lower, Now
from django.utils import timezone

from core.api.fields import subject_id_isolated
from core.commitorder import TransactionOrder

RESOURCE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
resource_id_validator = RegexValidator(RESOURCE_ID_PATTERN, "must match " + RESOURCE_ID_PATTERN)
_resource_id = re.compile(RESOURCE_ID_PATTERN)


def is_resource_id(value: str) -> bool:
    """Whether value is a well-formed resource ID.

    fullmatch: the pattern's `$` alone would also accept a trailing newline. Only a
    well-formed (ASCII) ID can name a resource: looking up anything else would let
    str.lower() fold look-alikes such as the Kelvin sign into "k", and would send
    NUL bytes or lone surrogates to a database that cannot take them.
    """
    return _resource_id.fullmatch(value) is not None


DEFAULT_LAB_ID = "default"


class ResourceQuerySet(models.QuerySet):
    def get_ci(self, key: str):
        """The resource whose ID is `key` ignoring case, or None (also for a malformed ID)."""
        if not is_resource_id(key):
            return None
        return self.get_ci_all(key).first()

    def get_ci_all(self, key: str):
        """The resources whose ID is `key` ignoring case (one at most), as a queryset; `key` must be well formed."""
        return self.alias(lkey=Lower("key")).filter(lkey=key.lower())


class ResourceModel(models.Model):
    """Fields every configuration resource has.

    `key` is the resource ID exactly as written; uniqueness ignores case through a
    named constraint on LOWER(key) in each table.
    """

    key = models.CharField("ID", max_length=100, validators=[resource_id_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    resource_version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = ResourceQuerySet.as_manager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.key


class SubjectType(ResourceModel):
    class Status(models.TextChoices):
        ACTIVE = "active"
        ARCHIVED = "archived"

    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ACTIVE)
    # spec.attributes: [{"name": ..., "type": ...}] in configuration order, what targeting may name (gates.py).
    attributes = models.JSONField(default=list, db_default=[], blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(Lower("key"), name="subjecttype_key_ci_unique")]

    def attribute_types(self) -> dict[str, str]:
        return {attribute["name"]: attribute["type"] for attribute in self.attributes}


class Lab(ResourceModel):
    class Meta:
        constraints = [models.UniqueConstraint(Lower("key"), name="lab_key_ci_unique")]


class Layer(ResourceModel):
    """A set of mutually exclusive experiments of one subject type: each owns slots of it (gates.py, gate 3)."""

    subject_type = models.ForeignKey(SubjectType, on_delete=models.PROTECT, related_name="layers")
    # The slot draw's salt; unique ignoring case among every experiment's, holdout's and layer's.
    salt = models.CharField(max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(Lower("key"), name="layer_key_ci_unique")]


class Experiment(ResourceModel):
    """An experiment, or a holdout: randomised and stored alike, so that exports, reports, cohorts,
    counts and the Citus layout serve both, and their IDs share one namespace."""

    class Kind(models.TextChoices):
        EXPERIMENT = "experiment"
        # Variants held_out (split = share, first, the control: its members see the product without
        # the experiments it covers) and general; statuses draft, active and ended only.
        HOLDOUT = "holdout"

    class ValueType(models.TextChoices):
        # spec.valueType: the type of every variant's value (Variant.value); none, a variant's value is its ID.
        STRING = "string"
        BOOLEAN = "boolean"
        INTEGER = "integer"
        FLOAT = "float"
        OBJECT = "object"

    class Status(models.TextChoices):
        # Declaration order is the lifecycle order; see can_move_to.
        DRAFT = "draft"
        ACTIVE = "active"
        WINNER_DECLARED = "winner_declared"
        ENDED = "ended"
        ARCHIVED = "archived"

    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.EXPERIMENT, db_default=Kind.EXPERIMENT)
    # A holdout's lab is the default one: it belongs to no lab, its scope names labs.
    lab = models.ForeignKey(Lab, on_delete=models.PROTECT, related_name="experiments")
    subject_type = models.ForeignKey(SubjectType, on_delete=models.PROTECT, related_name="experiments")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAFT)
    hypothesis = models.TextField(blank=True, default="")
    salt = models.CharField(max_length=200)
    winning_variant = models.ForeignKey("Variant", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # spec.followLinks: a new subject takes the variant of an identifier linked to it, if one has any.
    follow_links = models.BooleanField(default=False)
    # spec.valueType, empty for none; spec.bulkEvaluation: listed by OpenFeature's bulk evaluation.
    value_type = models.CharField(max_length=10, choices=ValueType.choices, blank=True, default="", db_default="")
    bulk_evaluation = models.BooleanField(default=True, db_default=True)
    # Who enters (gates.py): spec.enrollment, spec.targeting (the conditions as the YAML holds them,
    # null for none) and spec.coverage; each change while active starts a cohort.
    enrollment_start_at = models.DateTimeField(null=True, blank=True)
    enrollment_stop_at = models.DateTimeField(null=True, blank=True)
    targeting = models.JSONField(null=True, blank=True)
    coverage = models.FloatField(default=1.0, db_default=1.0)
    # spec.layer: the layer and the half-open slot ranges [[start, end], ...] owned in it, both or neither.
    layer = models.ForeignKey(Layer, on_delete=models.PROTECT, null=True, blank=True, related_name="experiments")
    slots = models.JSONField(null=True, blank=True)
    # spec.holdouts: the holdouts covering an experiment, in the order listed.
    holdouts = models.ManyToManyField(
        "self", symmetrical=False, through="ExperimentHoldout", through_fields=("experiment", "holdout"), blank=True
    )
    # A holdout's spec.scope, the experiments it joins at their first activation: "all", {"labs": [...]}
    # or null (only those that list it).
    scope = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("key"), name="experiment_key_ci_unique"),
            models.CheckConstraint(
                condition=models.Q(layer__isnull=True, slots__isnull=True)
                | models.Q(layer__isnull=False, slots__isnull=False),
                name="experiment_layer_with_slots",
            ),
            models.CheckConstraint(
                condition=models.Q(kind="experiment") | models.Q(status__in=["draft", "active", "ended"]),
                name="experiment_holdout_status",
            ),
            models.CheckConstraint(
                condition=models.Q(coverage__gte=0, coverage__lte=1), name="experiment_coverage_0_to_1"
            ),
            models.CheckConstraint(
                condition=models.Q(enrollment_start_at__isnull=True)
                | models.Q(enrollment_stop_at__isnull=True)
                | models.Q(enrollment_stop_at__gt=models.F("enrollment_start_at")),
                name="experiment_enrollment_stop_after_start",
            ),
            models.CheckConstraint(
                condition=models.Q(status="winner_declared", winning_variant__isnull=False)
                | (~models.Q(status="winner_declared") & models.Q(winning_variant__isnull=True)),
                name="experiment_winner_iff_winner_declared",
            ),
        ]

    @classmethod
    def status_rank(cls, status: str) -> int:
        return cls.Status.values.index(status)

    def can_move_to(self, status: str) -> bool:
        """The lifecycle runs forward only; steps may be skipped."""
        return self.status_rank(status) >= self.status_rank(self.status)


class Holdout(Experiment):
    """A holdout, for the staff console: the same rows as Experiment, of kind holdout (its admin filters on
    that), so that holdouts have pages, permissions and an admin log of their own."""

    class Meta:
        proxy = True


class ExperimentHoldout(models.Model):
    """A holdout covering an experiment (spec.holdouts), at its position in the list."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="+")
    holdout = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "holdout"], name="experimentholdout_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.holdout.key} covers {self.experiment.key}"


class Variant(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="variants")
    key = models.CharField("ID", max_length=100, validators=[resource_id_validator])
    name = models.CharField(max_length=200, blank=True, default="")
    description = models.TextField(blank=True, default="")
    position = models.PositiveIntegerField()
    is_control = models.BooleanField(default=False)
    split = models.FloatField()
    # What the product does in this arm, of the experiment's value_type (configuration/values.py); null
    # without one. JSON null inside an object value is kept.
    value = models.JSONField(null=True, blank=True)

    objects = ResourceQuerySet.as_manager()

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint("experiment", Lower("key"), name="variant_experiment_key_ci_unique"),
            models.UniqueConstraint(
                fields=["experiment"], condition=models.Q(is_control=True), name="variant_one_control_per_experiment"
            ),
            models.CheckConstraint(
                condition=models.Q(split__gte=0, split__lte=1), name="variant_split_between_0_and_1"
            ),
        ]

    def __str__(self) -> str:
        return self.key


class Cohort(models.Model):
    """A numbered version of an experiment's allocation, its splits and the population rule of its gates;
    assignments record the one they were made under."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="cohorts")
    number = models.PositiveIntegerField()
    # [{"variant": "<variant id>", "split": 0.5}, ...] in configuration order: a
    # self-contained record, readable even after a variant is renamed or removed.
    splits = models.JSONField()
    # The gates' part of the experiment's spec when the cohort began, as the YAML holds it:
    # {"enrollment": {...}, "layer": {...}, "targeting": [...], "coverage": 0.2}, each only when set;
    # {} for everyone.
    population = models.JSONField(default=dict, db_default={}, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["experiment", "number"]
        constraints = [models.UniqueConstraint(fields=["experiment", "number"], name="cohort_experiment_number_unique")]

    def __str__(self) -> str:
        return f"{self.experiment.key} cohort {self.number}"


class Assignment(models.Model):
    """(experiment, subject ID) -> variant; written once, never recomputed or overwritten.

    The one exception: staff may replace a `forced` assignment (force_assignments --replace).
    """

    class Source(models.TextChoices):
        # The only randomised source, and so the only one the sample-ratio test counts.
        HASHED = "hashed"
        LINKED = "linked"
        FORCED = "forced"
        IMPORTED = "imported"

    experiment = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="+", db_index=False)
    subject_id = models.CharField(max_length=256)
    variant = models.ForeignKey(Variant, on_delete=models.PROTECT, related_name="assignments")
    cohort = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    # A database default: the hot path's INSERT names no source, and every row it writes is hashed.
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.HASHED, db_default=Source.HASHED)
    # Why staff forced it; empty for every other source.
    reason = models.TextField(blank=True, default="", db_default="")
    # The change feed's key (core/commitorder.py, assignments/data/changes.py): the transaction that stored
    # the row, and when. Database defaults, so the hot path's INSERT names neither and pays no statement for
    # them. Null on rows stored before the feed existed, and on a replaced or deleted row, whose changes
    # AssignmentChange holds from then on.
    change_xid = models.BigIntegerField(null=True, editable=False, db_default=TransactionOrder())
    recorded_at = models.DateTimeField(null=True, editable=False, db_default=Now())

    class Meta:
        constraints = [
            # Settles races between processes assigning the same new subject: the
            # loser's INSERT ... ON CONFLICT DO NOTHING skips, then it reads the winner's row.
            # Its index (experiment_id, subject_id) also serves every lookup.
            models.UniqueConstraint(fields=["experiment", "subject_id"], name="assignment_experiment_subject_unique"),
        ]
        indexes = [
            # Exports and reports page through one experiment by time.
            models.Index(fields=["experiment", "created_at"], name="assignment_experiment_created"),
            # The change feed reads rows in this order, from a cursor on.
            models.Index(
                fields=["change_xid", "id"],
                name="assignment_change_order",
                condition=models.Q(change_xid__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        # Reads both relations: querysets that show assignments select_related them.
        return f"{subject_id_isolated(self.subject_id)} in {self.experiment.key}: {self.variant.key}"


class AssignmentCount(models.Model):
    """Assignments per experiment, cohort, variant, source and UTC day: the numbers of the health panel and the report.

    Kept by database triggers on assignments_assignment (migration 0003), so every
    writer, the API, a command or a hand-written statement, keeps it exact in the
    same transaction, and reading an experiment's numbers costs a few hundred rows
    however many millions it has assigned. On PostgreSQL each backend adds its own
    `shard` row (its process ID modulo COUNT_SHARDS): concurrent requests then
    update different rows instead of queueing on one row's lock until commit.
    A delete adds negative counts, so readers always sum over shards. On Citus
    each shard of the assignments keeps its counts in the co-located shard of
    this table, `shard` naming the writer there too (docs/how-to/scale-out-citus.md).
    """

    COUNT_SHARDS = 32

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="+", db_index=False)
    cohort = models.PositiveIntegerField()
    variant = models.ForeignKey(Variant, on_delete=models.CASCADE, related_name="+", db_index=False)
    source = models.CharField(max_length=10, choices=Assignment.Source.choices)
    day = models.DateField()
    shard = models.CharField(max_length=40)
    assignments = models.BigIntegerField()

    class Meta:
        constraints = [
            # The triggers' upserts target it; it also serves every read, which filters on the experiment.
            models.UniqueConstraint(
                fields=["experiment", "cohort", "variant", "source", "day", "shard"], name="assignmentcount_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} cohort {self.cohort}: {self.assignments}"


class ResourceChange(models.Model):
    """One real change of a configuration resource, by apply_resources or in the admin.

    The documents are the resource as export_resources writes it, without its
    resourceVersion (kept in its own column); `before` is None for a creation.
    """

    class Channel(models.TextChoices):
        COMMAND = "command"
        ADMIN = "admin"

    kind = models.CharField(max_length=20)
    resource_id = models.CharField("ID", max_length=100)
    resource_version = models.PositiveIntegerField()
    changed_at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=150)
    channel = models.CharField(max_length=20, choices=Channel.choices)
    before = models.JSONField(null=True)
    after = models.JSONField()

    class Meta:
        constraints = [
            # Every change raises the version by one: two entries for one version mean a lost update.
            models.UniqueConstraint(
                "kind", Lower("resource_id"), "resource_version", name="resourcechange_kind_id_version_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.resource_id} v{self.resource_version}"


class AssignmentChange(models.Model):
    """A change of a stored assignment that the row no longer shows (assignments/data/changes.py).

    A replacement (force_assignments --replace) and a deletion (delete_assignments)
    write one row here each, in the transaction that changes the assignment, with
    the row as it became (replaced) or as it was (deleted). The same transaction
    moves the row's own `assignment.created` change here, at its place in the feed
    and as it was, so that a copy that has not read it yet still reads it before
    the change that follows. The experiment and variant are kept by ID, so that
    the record reads the same after either is renamed or removed.
    """

    class Rank(models.IntegerChoices):
        # A change's place among the changes one transaction made: (change_xid, rank, assignment_id) orders
        # the feed. Links are rank 1 (idlinks' rows).
        CREATED = 0
        REPLACED = 2
        DELETED = 3

    change_xid = models.BigIntegerField()
    rank = models.SmallIntegerField(choices=Rank.choices)
    # The assignment's row ID: unique, and its place in the feed when it was created.
    assignment_id = models.BigIntegerField()
    recorded_at = models.DateTimeField()
    experiment_key = models.CharField(max_length=100)
    subject_id = models.CharField(max_length=256)
    variant_key = models.CharField(max_length=100)
    cohort = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    source = models.CharField(max_length=10, choices=Assignment.Source.choices)

    class Meta:
        constraints = [
            # The feed's order, and each change once; the subject ID because a Citus cluster distributes the
            # table by it, beside the assignments (assignments/citus/table_layout.py).
            models.UniqueConstraint(
                fields=["change_xid", "rank", "assignment_id", "subject_id"], name="assignmentchange_order_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_rank_display()} {subject_id_isolated(self.subject_id)} in {self.experiment_key}"


class ChangeMark(models.Model):
    """The feed's horizon (core/commitorder.py) as it was at a moment: every change with a smaller
    transaction ID was stored before `observed_at`, and the last of them is at (last_xid, last_rank, last_row),
    null with none. prune_changes records one per run; the newest mark older than CHANGES_RETENTION_DAYS, or
    one it has pruned below (`pruned`) if newer, is the floor: the changes below its horizon are dropped, and a
    cursor before its last change has missed some (assignments/data/changes.py, change_retention)."""

    horizon = models.BigIntegerField()
    observed_at = models.DateTimeField(default=timezone.now, db_index=True)
    last_xid = models.BigIntegerField(null=True)
    last_rank = models.SmallIntegerField(null=True)
    last_row = models.BigIntegerField(null=True)
    pruned = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.horizon} at {self.observed_at:%Y-%m-%d %H:%M:%S}"
