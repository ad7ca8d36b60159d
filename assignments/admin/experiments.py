"""The experiment pages: the form and its variants, the cohorts, the lifecycle, the health panel and
"try a subject"."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html_join

from assignments.admin.resources import ResourceAdmin
from assignments.charts import daily_chart
from assignments.configuring import Actor, experiment_transition
from assignments.forms import ExperimentForm, TrySubjectForm, VariantForm, VariantFormSet
from assignments.models import Cohort, Experiment, Variant
from assignments.populations import population_text
from assignments.previews import subject_preview
from assignments.reports import experiment_daily, experiment_report
from assignments.resources import ResourceInvalid, experiment_population

# Target status -> (action label, past tense for messages).
TRANSITIONS = {
    Experiment.Status.ACTIVE: ("Start", "started"),
    Experiment.Status.WINNER_DECLARED: ("Declare a winner", "given a winner"),
    Experiment.Status.ENDED: ("End", "ended"),
    Experiment.Status.ARCHIVED: ("Archive", "archived"),
}


class VariantInline(admin.TabularInline):
    model = Variant
    form = VariantForm
    formset = VariantFormSet
    fields = ["key", "name", "description", "is_control", "split", "remove"]
    extra = 1
    can_delete = False
    verbose_name_plural = "Variants (in configuration order; new ones go last)"

    def get_formset(self, request, obj=None, **kwargs):
        return super().get_formset(request, obj, **{**kwargs, "fields": []})


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


class WinnerForm(forms.Form):
    """One winner per experiment, on the confirmation page of "Declare a winner"."""

    def __init__(self, *args, experiments: list[Experiment], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for experiment in experiments:
            self.fields[f"winner-{experiment.pk}"] = forms.ChoiceField(
                label=f"Winner of {experiment.key}",
                choices=[("", "---------")] + [(v.key, v.key) for v in experiment.variants.all()],
            )


@admin.register(Experiment)
class ExperimentAdmin(ResourceAdmin):
    kind = "experiment"
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
    list_display = ["key", "name", "status", "lab", "subject_type", "resource_version", "updated_at"]
    list_filter = ["status", "lab", "subject_type"]
    list_select_related = ["lab", "subject_type"]
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
                "<path:object_id>/transition/<str:status>/",
                self.admin_site.admin_view(self.transition_view),
                name="assignments_experiment_transition",
            ),
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
        """The history, the population rule, the health panel's numbers and chart, the transitions still
        possible and the "try a subject" form."""
        daily = experiment_daily(obj)
        return {
            **super().page_context(obj),
            "population": population_text(experiment_population(obj), subject_type=obj.subject_type.key),
            "try_form": TrySubjectForm(declared=obj.subject_type.attribute_types()),
            "try_url": reverse("admin:assignments_experiment_try", args=[obj.pk]),
            "report": experiment_report(obj),
            "daily": daily,
            "daily_rows": list(zip(daily.days, zip(*daily.counts.values(), strict=True), strict=True)),
            "chart": daily_chart(
                daily.days,
                daily.counts,
                title=f"New assignments per day (UTC) in {obj.key}",
                last_day_partial=bool(daily.days) and daily.days[-1] == timezone.now().date(),
            ),
            "transitions": [
                (reverse("admin:assignments_experiment_transition", args=[obj.pk, status]), label)
                for status, (label, _) in TRANSITIONS.items()
                if obj.can_move_to(status) and status != obj.status
            ],
        }

    def transition_view(self, request: HttpRequest, object_id: str, status: str) -> HttpResponse:
        if status not in TRANSITIONS or not self.has_change_permission(request):
            raise PermissionDenied
        # get_object answers None for an ID that is not a number too, like the admin's own views.
        experiment = self.get_object(request, unquote(object_id))
        if experiment is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_change_permission(request, experiment):
            raise PermissionDenied
        change_url = reverse("admin:assignments_experiment_change", args=[experiment.pk])
        confirmation = self._transition(request, [experiment], status)
        return HttpResponseRedirect(change_url) if confirmation is None else confirmation

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

    def _transition(self, request: HttpRequest, experiments: list[Experiment], status: str) -> HttpResponse | None:
        """The confirmation page, or (once confirmed) each experiment moved, with a message per experiment.

        Returns None when done, for the caller to redirect.
        """
        label, past = TRANSITIONS[status]
        winners = WinnerForm(
            request.POST if "confirm" in request.POST else None,
            experiments=experiments if status == Experiment.Status.WINNER_DECLARED else [],
        )
        if "confirm" not in request.POST or not winners.is_valid():
            return TemplateResponse(
                request,
                "admin/assignments/experiment/transition_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": self.model._meta,
                    "title": f"{label}: are you sure?",
                    "label": label,
                    "status": status,
                    "experiments": experiments,
                    "winners": winners,
                    "action": request.POST.get("action", ""),
                },
            )
        actor = Actor.staff(request.user.get_username())
        for experiment in experiments:
            winner = winners.cleaned_data.get(f"winner-{experiment.pk}")
            try:
                result = experiment_transition(
                    experiment=experiment, status=status, actor=actor, winning_variant=winner
                )
            except ResourceInvalid as exc:
                reasons = "; ".join(problem.message for problem in exc.problems)
                self.message_user(request, f"{experiment.key} was not {past}: {reasons}.", messages.ERROR)
                continue
            if result.outcome == "unchanged":
                self.message_user(request, f"{experiment.key} is already {status}.", messages.WARNING)
            else:
                self.message_user(request, f"{experiment.key} was {past}.", messages.SUCCESS)
        return None

    def _action(self, request: HttpRequest, queryset: QuerySet, status: str) -> HttpResponse | None:
        return self._transition(request, list(queryset.order_by("key")), status)

    @admin.action(description="Start the selected experiments", permissions=["change"])
    def start(self, request, queryset):
        return self._action(request, queryset, Experiment.Status.ACTIVE)

    @admin.action(description="Declare a winner of the selected experiments", permissions=["change"])
    def declare_winner(self, request, queryset):
        return self._action(request, queryset, Experiment.Status.WINNER_DECLARED)

    @admin.action(description="End the selected experiments", permissions=["change"])
    def end(self, request, queryset):
        return self._action(request, queryset, Experiment.Status.ENDED)

    @admin.action(description="Archive the selected experiments", permissions=["change"])
    def archive(self, request, queryset):
        return self._action(request, queryset, Experiment.Status.ARCHIVED)
