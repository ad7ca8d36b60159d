"""Staff console for the configuration and its assignments.

The configuration is code (apply_resources), so its resources are read-only here:
an edit in the admin would bypass the validation, lifecycle and cohort rules of
services.resources_apply, and the next apply would silently undo it.
Assignments are immutable by contract and the table grows without bound, so its
big lists are counted by estimate and searched only by exact, case-sensitive subject ID (as
subject IDs are compared everywhere); filtered by experiment, that lookup is
answered by the unique index on (experiment, subject_id).
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count

from assignments.models import Assignment, Cohort, Experiment, Lab, SubjectType, Variant
from config.admin import EstimatedCountPaginator, ExactSearchAdmin, ReadOnlyAdmin


@admin.register(SubjectType)
class SubjectTypeAdmin(ReadOnlyAdmin):
    list_display = ["key", "name", "status", "resource_version", "updated_at"]
    list_filter = ["status"]
    search_fields = ["key", "name"]


@admin.register(Lab)
class LabAdmin(ReadOnlyAdmin):
    list_display = ["key", "name", "resource_version", "updated_at"]
    search_fields = ["key", "name"]


class VariantInline(admin.TabularInline):
    model = Variant
    fields = ["position", "key", "name", "is_control", "split"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class CohortInline(admin.TabularInline):
    model = Cohort
    fields = ["number", "splits", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Experiment)
class ExperimentAdmin(ReadOnlyAdmin):
    list_display = ["key", "name", "status", "lab", "subject_type", "resource_version", "updated_at"]
    list_filter = ["status", "lab", "subject_type"]
    list_select_related = ["lab", "subject_type"]
    search_fields = ["key", "name"]
    inlines = [VariantInline, CohortInline]
    readonly_fields = ["assignments_per_variant"]

    @admin.display(description="Assignments per variant")
    def assignments_per_variant(self, obj: Experiment) -> str:
        # Explicit order: Meta.ordering does not apply to a GROUP BY query.
        counts = obj.variants.annotate(total=Count("assignments")).order_by("position").values_list("key", "total")
        return ", ".join(f"{key}: {total}" for key, total in counts) or "none"


@admin.register(Assignment)
class AssignmentAdmin(ExactSearchAdmin):
    list_display = ["subject_id", "experiment", "variant", "cohort", "created_at"]
    list_select_related = ["experiment", "variant"]
    list_filter = ["experiment"]
    raw_id_fields = ["experiment", "variant"]
    search_fields = ["subject_id"]
    exact_search_fields = ("subject_id",)
    search_help_text = "Exact subject ID (case-sensitive); pick an experiment first on big tables."
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    ordering = ["-id"]
