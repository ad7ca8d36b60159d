"""The resource pages' common ground, and the pages of subject types and labs."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote

from assignments.configuration.apply import Actor
from assignments.configuration.history import change_diff, resource_history
from assignments.console.forms.resources import LabForm, SubjectTypeForm
from assignments.models import Lab, SubjectType

ADMIN_HISTORY_ENTRIES = 20


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
