"""Staff console for identifier links: read-only, built for a table of millions of rows."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from core.admin import EstimatedCountPaginator, ExactSearchAdmin, subject_id_html
from idlinks.models import IdentifierLink
from idlinks.selectors import identifiers_connected
from idlinks.walk import MAX_DEPTH, MAX_IDENTIFIERS


@admin.register(IdentifierLink)
class IdentifierLinkAdmin(ExactSearchAdmin):
    """Links are written only by POST /id-link; the console shows them and what each identifier resolves to."""

    list_display = ["subject_type_a", "subject_a", "subject_type_b", "subject_b", "created_at"]
    list_select_related = ["subject_type_a", "subject_type_b"]
    search_fields = ["subject_id_a", "subject_id_b"]
    exact_search_fields = ("subject_id_a", "subject_id_b")
    search_help_text = "Exact subject ID (case-sensitive), on either side of the link."
    ordering = ["-pk"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    change_list_template = "admin/assignments/lookup_link_change_list.html"
    fields = ["subject_type_a", "subject_a", "subject_type_b", "subject_b", "created_at", "connected_identifiers"]
    readonly_fields = ["subject_a", "subject_b", "connected_identifiers"]

    @admin.display(description="subject ID a", ordering="subject_id_a")
    def subject_a(self, obj: IdentifierLink):
        return subject_id_html(obj.subject_id_a)

    @admin.display(description="subject ID b", ordering="subject_id_b")
    def subject_b(self, obj: IdentifierLink):
        return subject_id_html(obj.subject_id_b)

    @admin.display(description="Connected identifiers")
    def connected_identifiers(self, obj: IdentifierLink) -> str:
        """Everything the link's identifiers resolve to, through any chain of links (both sides
        are in one component, so walking from side a finds side b and beyond)."""
        result = identifiers_connected(subject_type_pk=obj.subject_type_a_id, subject_id=obj.subject_id_a)
        items = format_html_join(
            "",
            "<li>{}: {} <small>({} link{} away)</small></li>",
            (
                (item.subject_type, subject_id_html(item.subject_id), item.distance, "" if item.distance == 1 else "s")
                for item in result.identifiers
            ),
        )
        start = format_html("<p>From {}: {}</p>", obj.subject_type_a.key, subject_id_html(obj.subject_id_a))
        note = (
            format_html(
                "<p><strong>Truncated</strong> at {} identifiers or {} links away.</p>",
                MAX_IDENTIFIERS,
                MAX_DEPTH,
            )
            if result.truncated
            else ""
        )
        return format_html("{}<ul>{}</ul>{}", start, items, note)
