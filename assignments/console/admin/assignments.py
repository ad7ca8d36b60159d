"""The assignment list, and the subject lookup with its QA override."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.html import format_html

from assignments.console.previews import holdout_memberships, layer_slots, subject_previews
from assignments.console.subject_lookup import subject_lookup
from assignments.data.forcing import FORCEABLE_STATUSES, REASON_MAX_LENGTH, ForceRefused, assignments_force
from assignments.models import Assignment, Experiment, SubjectType, Variant
from assignments.selectors import RUNNING_STATUSES
from core.admin import EstimatedCountPaginator, ExactSearchAdmin, subject_id_html
from idlinks.walk import MAX_DEPTH


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
    variant = forms.ChoiceField(help_text="One of the chosen experiment's variants, listed under each experiment.")
    reason = forms.CharField(max_length=REASON_MAX_LENGTH, required=False, help_text="Kept with the assignment.")
    replace = forms.BooleanField(required=False, help_text="Replace an assignment that is already forced.")

    def __init__(self, *args, subject_type: SubjectType, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Not holdouts: their members are drawn, never chosen (assignments_force refuses them too).
        experiments = Experiment.objects.filter(
            kind=Experiment.Kind.EXPERIMENT, subject_type=subject_type, status__in=FORCEABLE_STATUSES
        ).order_by("key")
        self.fields["experiment"].queryset = experiments
        # Grouped by experiment; assignments_force refuses a variant that is not the chosen experiment's.
        self.fields["variant"].choices = [
            (experiment.key, [(variant.key, variant.key) for variant in experiment.variants.all()])
            for experiment in experiments.prefetch_related(Prefetch("variants", Variant.objects.order_by("position")))
        ]


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
        """The subject's page: what is stored about it and what the running experiments, its holdouts and its
        layers make of it now; a POST forces an assignment of it (QA), through force_assignments' service."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = SubjectLookupForm(request.GET if "subject_id" in request.GET else None)
        lookup = force_form = previews = memberships = slots = None
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
            running = Experiment.objects.filter(
                kind=Experiment.Kind.EXPERIMENT, subject_type=subject_type, status__in=RUNNING_STATUSES
            )
            previews = subject_previews(
                # The layer: each preview states the experiment's population rule, which names it.
                experiments=list(running.select_related("subject_type", "layer").order_by("key")),
                subject_id=subject_id,
                stored=lookup.assignments + lookup.memberships,
                attributes=None,
            )
            memberships = holdout_memberships(
                subject_type=subject_type, subject_id=subject_id, stored=lookup.memberships
            )
            slots = layer_slots(subject_type=subject_type, subject_id=subject_id)
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
                "memberships": memberships,
                "slots": slots,
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
