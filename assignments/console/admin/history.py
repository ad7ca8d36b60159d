"""Every recorded change of the configuration, across resources."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from assignments.configuration.history import change_diff
from assignments.models import ResourceChange
from core.admin import ReadOnlyAdmin


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
