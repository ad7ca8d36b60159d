"""The holdout pages: a holdout's fields and lifecycle, its health panel (its members are stored as an
experiment's assignments, in the variants held_out and general), the experiments it covers, its history."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import OuterRef, Subquery

from assignments.configuration.holdouts import SCOPE_ALL, STATUSES
from assignments.console.admin.lifecycle import LifecycleAdmin, health_context
from assignments.console.forms.holdouts import HoldoutForm
from assignments.console.population_text import percent_text, plural
from assignments.models import Experiment, ExperimentHoldout, Holdout, Variant


def scope_text(holdout: Experiment) -> str:
    """Which experiments the holdout joins when they are first started, in words."""
    if holdout.scope == SCOPE_ALL:
        return f"every experiment of {holdout.subject_type.key}"
    if holdout.scope is None:
        return "none: it covers the experiments that list it"
    return f"the experiments of the labs {', '.join(holdout.scope['labs'])}"


def holds_out_text(holdout: Experiment, share: float) -> str:
    """What the holdout does now, in words, by its status."""
    members = f"{percent_text(share)} of {plural(holdout.subject_type.key)}"
    if holdout.status == Experiment.Status.ACTIVE:
        return f"Holds out {members} from the experiments it covers"
    if holdout.status == Experiment.Status.DRAFT:
        return f"Will hold out {members} from the experiments it covers, once started"
    return f"Held out {members}; ended, it stops nobody now, and its members stay stored"


class StatusFilter(admin.SimpleListFilter):
    """The statuses a holdout can have, not all of an experiment's."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [(status, Experiment.Status(status).label) for status in STATUSES]

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() else queryset


@admin.register(Holdout)
class HoldoutAdmin(LifecycleAdmin):
    kind = "holdout"
    form = HoldoutForm
    statuses = (Experiment.Status.ACTIVE, Experiment.Status.ENDED)
    fields = [
        "key",
        "name",
        "description",
        "status",
        "subject_type",
        "share",
        "salt",
        "scope",
        "scope_labs",
        "resource_version",
    ]
    list_display = ["key", "name", "status", "subject_type", "share_text", "scope_line", "resource_version"]
    list_filter = [StatusFilter, "subject_type"]
    list_select_related = ["subject_type"]
    search_fields = ["key", "name"]
    actions = ["start", "end"]

    def get_queryset(self, request):
        # Its share is the split of its variant held_out, the control: read with it, for the list.
        share = Variant.objects.filter(experiment=OuterRef("pk"), is_control=True).values("split")[:1]
        queryset = super().get_queryset(request).filter(kind=Experiment.Kind.HOLDOUT)
        return queryset.select_related("subject_type").annotate(share=Subquery(share))

    @admin.display(description="Share held out", ordering="share")
    def share_text(self, obj: Holdout) -> str:
        return percent_text(obj.share)

    @admin.display(description="Joins at their first start")
    def scope_line(self, obj: Holdout) -> str:
        return scope_text(obj)

    def page_context(self, obj: Holdout) -> dict:
        """The history, the health panel's numbers and chart, the transitions still possible, and the
        experiments it covers."""
        covered = Experiment.objects.filter(
            pk__in=ExperimentHoldout.objects.filter(holdout=obj).values("experiment")
        ).select_related("lab")
        return {
            **super().page_context(obj),
            **health_context(obj, counted="membership"),
            "transitions": self.transitions(obj),
            "holds_out": holds_out_text(obj, obj.share),
            "scope": scope_text(obj),
            "covered": list(covered.order_by("key")),
        }
