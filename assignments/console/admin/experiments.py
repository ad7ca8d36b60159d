"""The experiment pages: the form and its variants, the cohorts, the lifecycle, the health panel and
"try a subject"."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html_join

from assignments.configuration.export import experiment_population
from assignments.configuration.holdouts import holdouts_stored
from assignments.console.admin.lifecycle import TRANSITIONS, LifecycleAdmin, health_context
from assignments.console.forms.experiments import ExperimentForm, TrySubjectForm, VariantForm, VariantFormSet
from assignments.console.forms.experiments import value_text as variant_value_text
from assignments.console.population_text import population_text
from assignments.console.previews import subject_preview
from assignments.models import Cohort, Experiment, Variant


class VariantInline(admin.TabularInline):
    model = Variant
    form = VariantForm
    formset = VariantFormSet
    fields = ["key", "name", "description", "is_control", "split", "value_text", "remove"]
    extra = 1
    can_delete = False
    verbose_name_plural = "Variants (in configuration order; new ones go last)"

    def get_formset(self, request, obj=None, **kwargs):
        return super().get_formset(request, obj, **{**kwargs, "fields": []})

    def get_queryset(self, request):
        # Each row's value is read as its experiment's value type says.
        return super().get_queryset(request).select_related("experiment")

    @admin.display(description="Value")
    def value_text(self, obj: Variant) -> str:
        """The value as staff who may only view read it: as its field shows it to those who may change it."""
        return variant_value_text(obj.experiment.value_type, obj.value)


def splits_line(splits: list[dict]):
    return format_html_join(" · ", "{}&nbsp;<strong>{}</strong>", ((s["variant"], f"{s['split']:.4g}") for s in splits))


class CohortInline(admin.TabularInline):
    model = Cohort
    fields = ["number", "splits_line", "population_line", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "Cohorts (each change of the splits or of who enters, while active or later, starts the next)"

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("experiment__subject_type")

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="Splits")
    def splits_line(self, obj: Cohort):
        return splits_line(obj.splits)

    @admin.display(description="Who enters")
    def population_line(self, obj: Cohort) -> str:
        return population_text(obj.population, subject_type=obj.experiment.subject_type.key)


@admin.register(Experiment)
class ExperimentAdmin(LifecycleAdmin):
    kind = "experiment"
    statuses = tuple(TRANSITIONS)
    form = ExperimentForm
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "key",
                    "name",
                    "description",
                    "status",
                    "lab",
                    "subject_type",
                    "hypothesis",
                    "resource_version",
                ]
            },
        ),
        ("Assignment", {"fields": ["salt", "winning_variant", "follow_links"]}),
        (
            "Values",
            {
                "fields": ["value_type", "bulk_evaluation"],
                "description": "What the product does in each variant: every variant has a value of the value "
                "type, typed in its row below.",
            },
        ),
        (
            "Who enters",
            {
                "fields": [
                    "enrollment_start_at",
                    "enrollment_stop_at",
                    "covering_holdouts",
                    "layer",
                    "slots",
                    "targeting",
                    "coverage",
                    "confirm_coverage",
                ],
                "description": "The gates a subject without a stored assignment passes, in this order: the "
                "enrollment window, the holdouts, the layer's slots, the targeting, then the coverage (skipped "
                "when a linked identifier's variant is carried over). A stored assignment is always answered. "
                "A change while the experiment is active or later starts the next cohort (but for the holdouts: "
                "their memberships are stored).",
            },
        ),
    ]
    list_display = ["key", "name", "status", "lab", "subject_type", "layer", "resource_version", "updated_at"]
    list_filter = ["status", "lab", "subject_type", "layer"]
    list_select_related = ["lab", "subject_type", "layer"]
    search_fields = ["key", "name"]
    inlines = [VariantInline, CohortInline]
    actions = ["start", "declare_winner", "end", "archive"]

    def get_queryset(self, request):
        # Holdouts are stored as experiments, and have pages of their own. The layer: every page shows the
        # experiment's population rule, which names it.
        queryset = super().get_queryset(request).filter(kind=Experiment.Kind.EXPERIMENT)
        return queryset.select_related("lab", "subject_type", "layer")

    def get_urls(self):
        return [
            path(
                "<path:object_id>/try/",
                self.admin_site.admin_view(self.try_view),
                name="assignments_experiment_try",
            ),
            *super().get_urls(),
        ]

    def get_fieldsets(self, request, obj=None):
        if self.has_change_permission(request, obj):
            return self.fieldsets
        # A confirmation that only a save can ask for: nothing for staff who may only view.
        return [
            (name, {**options, "fields": [f for f in options["fields"] if f != "confirm_coverage"]})
            for name, options in self.fieldsets
        ]

    def page_context(self, obj: Experiment) -> dict:
        """The history, the population rule and the holdouts covering it, the health panel's numbers and
        chart, the transitions still possible and the "try a subject" form."""
        return {
            **super().page_context(obj),
            **health_context(obj, counted="assignment"),
            "population": population_text(experiment_population(obj), subject_type=obj.subject_type.key),
            "covering": holdouts_stored(obj),
            "try_form": TrySubjectForm(declared=obj.subject_type.attribute_types()),
            "try_url": reverse("admin:assignments_experiment_try", args=[obj.pk]),
            "transitions": self.transitions(obj),
        }

    def try_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """What the API would answer a subject now, storing nothing. A POST, so that the attributes typed
        stay out of URLs, browser history and access logs."""
        experiment = self.get_object(request, unquote(object_id))
        if experiment is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_or_change_permission(request, experiment):
            raise PermissionDenied
        form = TrySubjectForm(
            request.POST if request.method == "POST" else None,
            declared=experiment.subject_type.attribute_types(),
        )
        preview = None
        if form.is_valid():
            preview = subject_preview(
                experiment=experiment,
                subject_id=form.cleaned_data["subject_id"],
                attributes=form.cleaned_data["attributes"],
            )
        return TemplateResponse(
            request,
            "admin/assignments/experiment/try_subject.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": f"Try a subject in {experiment.key}",
                "experiment": experiment,
                "population": population_text(
                    experiment_population(experiment), subject_type=experiment.subject_type.key
                ),
                "try_form": form,
                "try_url": request.path,
                "preview": preview,
            },
        )
