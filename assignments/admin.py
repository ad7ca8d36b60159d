"""Staff console: edit the configuration, run the lifecycle, watch each experiment, look up any subject.

Every edit goes through configuring.resources_apply (see forms.py), the service
apply_resources uses, so the same rules hold and every change lands in the
resource's history. Assignments are immutable and the table grows without
bound: its lists are counted by estimate and searched by exact subject ID only,
always through the unique index on (experiment, subject_id).
"""

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
from django.utils.html import format_html, format_html_join

from assignments.charts import daily_chart
from assignments.configuring import Actor, experiment_transition
from assignments.forcing import FORCEABLE_STATUSES, REASON_MAX_LENGTH, ForceRefused, assignments_force
from assignments.forms import (
    ExperimentForm,
    LabForm,
    SubjectTypeForm,
    TrySubjectForm,
    VariantForm,
    VariantFormSet,
)
from assignments.history import change_diff, resource_history
from assignments.linking import MAX_DEPTH
from assignments.models import Assignment, Cohort, Experiment, Lab, ResourceChange, SubjectType, Variant
from assignments.populations import population_text
from assignments.previews import subject_preview, subject_previews
from assignments.reports import experiment_daily, experiment_report
from assignments.resources import ResourceInvalid, experiment_population
from assignments.selectors import RUNNING_STATUSES
from assignments.subjects import subject_lookup
from core.admin import EstimatedCountPaginator, ExactSearchAdmin, ReadOnlyAdmin, subject_id_html

ADMIN_HISTORY_ENTRIES = 20

# Target status -> (action label, past tense for messages).
TRANSITIONS = {
    Experiment.Status.ACTIVE: ("Start", "started"),
    Experiment.Status.WINNER_DECLARED: ("Declare a winner", "given a winner"),
    Experiment.Status.ENDED: ("End", "ended"),
    Experiment.Status.ARCHIVED: ("Archive", "archived"),
}


class ResourceAdmin(admin.ModelAdmin):
    """Resources are added and changed through their ResourceForm; never deleted (no YAML can delete either)."""

    change_form_template = "admin/assignments/resource_change_form.html"
    kind: str

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_form(self, request, obj=None, change=False, **kwargs):
        # fields=[]: the form's declared fields only, never written into the model by Django.
        form = super().get_form(request, obj, change, **{**kwargs, "fields": []})
        form.actor = Actor.staff(request.user.get_username())
        return form

    def save_model(self, request, obj, form, change) -> None:
        """The form's clean already applied the change; load what it stored, for the log and the redirect."""
        obj.pk = type(obj).objects.get_ci(form.cleaned_data["key"]).pk
        obj.refresh_from_db()

    def save_related(self, request, form, formsets, change) -> None:
        """Variants were applied with the experiment, by the same service call."""

    def construct_change_message(self, request, form, formsets, add=False):
        result = form.result
        return f"{result.outcome} through the configuration service" if result else ""

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, unquote(object_id))
        # The page's extras (the experiment's health panel reads the counts) only for whom Django will
        # show the page: it checks the permission itself, but only after they are computed.
        shown = obj is not None and self.has_view_or_change_permission(request, obj)
        context = {**(extra_context or {}), **(self.page_context(obj) if shown else {})}
        return super().change_view(request, object_id, form_url, extra_context=context)

    def page_context(self, obj) -> dict:
        """What the resource's page shows beyond its form: its history, newest first."""
        changes = resource_history(kind=self.kind, resource_id=obj.key, limit=ADMIN_HISTORY_ENTRIES)
        return {"history": [(change, change_diff(change)) for change in changes]}


@admin.register(SubjectType)
class SubjectTypeAdmin(ResourceAdmin):
    kind = "subjecttype"
    form = SubjectTypeForm
    fields = ["key", "name", "description", "status", "resource_version"]
    list_display = ["key", "name", "status", "resource_version", "updated_at"]
    list_filter = ["status"]
    search_fields = ["key", "name"]


@admin.register(Lab)
class LabAdmin(ResourceAdmin):
    kind = "lab"
    form = LabForm
    fields = ["key", "name", "description", "resource_version"]
    list_display = ["key", "name", "resource_version", "updated_at"]
    search_fields = ["key", "name"]


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
                "fields": ["enrollment_start_at", "enrollment_stop_at", "targeting", "coverage", "confirm_coverage"],
                "description": "The gates a subject without a stored assignment passes, in this order: the "
                "enrollment window, the targeting, then the coverage (skipped when a linked identifier's variant "
                "is carried over). A stored assignment is always answered. A change while the experiment is "
                "active or later starts the next cohort.",
            },
        ),
    ]
    list_display = ["key", "name", "status", "lab", "subject_type", "resource_version", "updated_at"]
    list_filter = ["status", "lab", "subject_type"]
    list_select_related = ["lab", "subject_type"]
    search_fields = ["key", "name"]
    inlines = [VariantInline, CohortInline]
    actions = ["start", "declare_winner", "end", "archive"]

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


class SubjectLookupForm(forms.Form):
    subject_type = forms.ModelChoiceField(SubjectType.objects.order_by("key"), to_field_name="key")
    subject_id = forms.CharField(label="Subject ID", max_length=256, strip=False, help_text="Exact, case-sensitive.")
    depth = forms.IntegerField(
        min_value=1,
        max_value=MAX_DEPTH,
        initial=2,
        required=False,
        help_text="How many links away to follow the identifier links.",
    )


class ForceForm(forms.Form):
    """A QA override of the looked-up subject's assignment in one experiment of its subject type."""

    experiment = forms.ModelChoiceField(Experiment.objects.none(), to_field_name="key")
    variant = forms.CharField(max_length=100, help_text="The variant's ID.")
    reason = forms.CharField(max_length=REASON_MAX_LENGTH, required=False, help_text="Kept with the assignment.")
    replace = forms.BooleanField(required=False, help_text="Replace an assignment that is already forced.")

    def __init__(self, *args, subject_type: SubjectType, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["experiment"].queryset = Experiment.objects.filter(
            subject_type=subject_type, status__in=FORCEABLE_STATUSES
        ).order_by("key")


@admin.register(Assignment)
class AssignmentAdmin(ExactSearchAdmin):
    list_display = ["subject", "experiment", "variant", "cohort", "created_at"]
    fields = ["experiment", "subject", "variant", "cohort", "created_at", "source", "reason"]
    readonly_fields = ["subject"]
    list_select_related = ["experiment", "variant"]
    list_filter = ["experiment"]
    raw_id_fields = ["experiment", "variant"]
    search_fields = ["subject_id"]
    exact_search_fields = ("subject_id",)
    search_help_text = "Exact subject ID (case-sensitive)."
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    change_list_template = "admin/assignments/lookup_link_change_list.html"

    @admin.display(description="subject ID", ordering="subject_id")
    def subject(self, obj: Assignment):
        return subject_id_html(obj.subject_id)

    def get_ordering(self, request):
        """Newest first, in an order an index serves without sorting the table.

        Filtered by experiment: by time, through assignment_experiment_created (newest
        entries of that experiment first, however small it is beside the others). A
        primary-key order would walk the whole table backwards past other experiments'
        rows to find them (1.4 s with 10 million rows of another experiment). Unfiltered:
        by primary key, which is the order of insertion.
        """
        if "experiment__id__exact" in request.GET:
            return ["-created_at", "-id"]
        return ["-id"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("experiment", "variant")

    def get_search_results(self, request, queryset, search_term):
        queryset, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term:
            # No index leads with subject_id: naming every experiment lets the unique index on
            # (experiment, subject_id) answer with one probe per experiment instead of a table scan.
            queryset = queryset.filter(experiment__in=list(Experiment.objects.values_list("pk", flat=True)))
        return queryset, duplicates

    def get_urls(self):
        return [
            path("lookup/", self.admin_site.admin_view(self.lookup_view), name="assignments_subject_lookup"),
            *super().get_urls(),
        ]

    def lookup_view(self, request: HttpRequest) -> HttpResponse:
        """The subject's page; a POST forces an assignment of it (QA), through force_assignments' service."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = SubjectLookupForm(request.GET if "subject_id" in request.GET else None)
        lookup = force_form = previews = None
        if form.is_valid():
            subject_type, subject_id = form.cleaned_data["subject_type"], form.cleaned_data["subject_id"]
            may_force = request.user.has_perm("assignments.change_assignment")
            if may_force:
                force_form = ForceForm(request.POST or None, subject_type=subject_type)
            if request.method == "POST":
                if not may_force:
                    raise PermissionDenied
                if force_form.is_valid() and self._force(request, subject_id, force_form):
                    return HttpResponseRedirect(request.get_full_path())
            lookup = subject_lookup(
                subject_type=subject_type, subject_id=subject_id, depth=form.cleaned_data["depth"] or 2
            )
            running = Experiment.objects.filter(subject_type=subject_type, status__in=RUNNING_STATUSES)
            previews = subject_previews(
                experiments=list(running.select_related("subject_type").order_by("key")),
                subject_id=subject_id,
                stored=lookup.assignments,
                attributes=None,
            )
        return TemplateResponse(
            request,
            "admin/assignments/subject_lookup.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Subject lookup",
                "form": form,
                "lookup": lookup,
                "previews": previews,
                "force_form": force_form,
            },
        )

    def _force(self, request: HttpRequest, subject_id: str, form: ForceForm) -> bool:
        """Force the subject's assignment and say what happened; False (with the reason on the form) if refused."""
        data = form.cleaned_data
        try:
            result = assignments_force(
                experiment=data["experiment"],
                variant_id=data["variant"],
                subject_ids=[subject_id],
                reason=data["reason"],
                replace=data["replace"],
            )
        except ForceRefused as exc:
            form.add_error(None, str(exc))
            return False
        experiment, subject = data["experiment"].key, subject_id_html(subject_id)
        if result.forced:
            self.message_user(
                request,
                format_html("{} is forced to {} in {}.", subject, data["variant"], experiment),
                messages.SUCCESS,
            )
        for kept in result.kept:
            self.message_user(
                request,
                format_html(
                    "{} kept its {} assignment to {} in {}{}",
                    subject,
                    kept.source,
                    kept.variant_id,
                    experiment,
                    ": tick 'replace' to change a forced one." if kept.source == Assignment.Source.FORCED else ".",
                ),
                messages.WARNING,
            )
        return True


@admin.register(ResourceChange)
class ResourceChangeAdmin(ReadOnlyAdmin):
    """Every recorded change of the configuration, across resources: who changed what, and when."""

    list_display = ["changed_at", "kind", "resource_id", "resource_version", "actor", "channel"]
    list_filter = ["kind", "channel"]
    search_fields = ["resource_id", "actor"]
    ordering = ["-changed_at", "-pk"]
    fields = ["kind", "resource_id", "resource_version", "changed_at", "actor", "channel", "diff"]
    readonly_fields = ["diff"]

    @admin.display(description="Change")
    def diff(self, obj: ResourceChange):
        return format_html("<pre>{}</pre>", change_diff(obj))
