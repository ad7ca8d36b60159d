"""What the experiment and holdout pages share, both being experiments in the database: the lifecycle's
transitions (actions on the list, buttons on the page, one confirmation page) and the health panel."""

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

from assignments.configuration.apply import Actor, experiment_transition
from assignments.configuration.resources import ResourceInvalid
from assignments.console.admin.resources import ResourceAdmin
from assignments.console.charts import daily_chart
from assignments.console.reports import experiment_daily, experiment_report
from assignments.models import Experiment

# Target status -> (action label, past tense for messages).
TRANSITIONS = {
    Experiment.Status.ACTIVE: ("Start", "started"),
    Experiment.Status.WINNER_DECLARED: ("Declare a winner", "given a winner"),
    Experiment.Status.ENDED: ("End", "ended"),
    Experiment.Status.ARCHIVED: ("Archive", "archived"),
}


class WinnerForm(forms.Form):
    """One winner per experiment, on the confirmation page of "Declare a winner"."""

    def __init__(self, *args, experiments: list[Experiment], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for experiment in experiments:
            self.fields[f"winner-{experiment.pk}"] = forms.ChoiceField(
                label=f"Winner of {experiment.key}",
                choices=[("", "---------")] + [(v.key, v.key) for v in experiment.variants.all()],
            )


def health_context(obj: Experiment, *, counted: str) -> dict:
    """The health panel's numbers, chart and table; `counted` names what it counts: assignment, membership."""
    daily = experiment_daily(obj)
    return {
        "report": experiment_report(obj),
        "counted": counted,
        "daily": daily,
        "daily_rows": list(zip(daily.days, zip(*daily.counts.values(), strict=True), strict=True)),
        "chart": daily_chart(
            daily.days,
            daily.counts,
            title=f"New {counted}s per day (UTC) in {obj.key}",
            last_day_partial=bool(daily.days) and daily.days[-1] == timezone.now().date(),
        ),
    }


def _transition_action(status: str, verb: str):
    """The list's action that moves the selected resources to `status` ("Start the selected experiments")."""

    @admin.action(description=f"{verb} the selected %(verbose_name_plural)s", permissions=["change"])
    def action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        return self._transition(request, list(queryset.order_by("key")), status)

    return action


class LifecycleAdmin(ResourceAdmin):
    """Moves experiments (or holdouts) along their lifecycle through the configuration service: the statuses
    of `statuses` are offered, each an action on the list and a button on the page."""

    statuses: tuple[str, ...]

    def get_urls(self):
        return [
            path(
                "<path:object_id>/transition/<str:status>/",
                self.admin_site.admin_view(self.transition_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_transition",
            ),
            *super().get_urls(),
        ]

    def transitions(self, obj: Experiment) -> list[tuple[str, str]]:
        """(URL, label) of each transition still possible from the object's status."""
        name = f"admin:{self.opts.app_label}_{self.opts.model_name}_transition"
        return [
            (reverse(name, args=[obj.pk, status]), TRANSITIONS[status][0])
            for status in self.statuses
            if obj.can_move_to(status) and status != obj.status
        ]

    def transition_view(self, request: HttpRequest, object_id: str, status: str) -> HttpResponse:
        if status not in self.statuses or not self.has_change_permission(request):
            raise PermissionDenied
        # get_object answers None for an ID that is not a number too, like the admin's own views.
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        change_url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk])
        confirmation = self._transition(request, [obj], status)
        return HttpResponseRedirect(change_url) if confirmation is None else confirmation

    def _transition(self, request: HttpRequest, objects: list[Experiment], status: str) -> HttpResponse | None:
        """The confirmation page, or (once confirmed) each object moved, with a message per object.

        Returns None when done, for the caller to redirect.
        """
        label, past = TRANSITIONS[status]
        winners = WinnerForm(
            request.POST if "confirm" in request.POST else None,
            experiments=objects if status == Experiment.Status.WINNER_DECLARED else [],
        )
        if "confirm" not in request.POST or not winners.is_valid():
            return TemplateResponse(
                request,
                "admin/assignments/experiment/transition_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "title": f"{label}: are you sure?",
                    "label": label,
                    "status": status,
                    "experiments": objects,
                    "winners": winners,
                    "action": request.POST.get("action", ""),
                },
            )
        actor = Actor.staff(request.user.get_username())
        for obj in objects:
            winner = winners.cleaned_data.get(f"winner-{obj.pk}")
            try:
                result = experiment_transition(experiment=obj, status=status, actor=actor, winning_variant=winner)
            except ResourceInvalid as exc:
                reasons = "; ".join(problem.message for problem in exc.problems)
                self.message_user(request, f"{obj.key} was not {past}: {reasons}.", messages.ERROR)
                continue
            if result.outcome == "unchanged":
                self.message_user(request, f"{obj.key} is already {status}.", messages.WARNING)
            else:
                self.message_user(request, f"{obj.key} was {past}.", messages.SUCCESS)
        return None

    start = _transition_action(Experiment.Status.ACTIVE, "Start")
    declare_winner = _transition_action(Experiment.Status.WINNER_DECLARED, "Declare a winner of")
    end = _transition_action(Experiment.Status.ENDED, "End")
    archive = _transition_action(Experiment.Status.ARCHIVED, "Archive")
