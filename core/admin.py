"""Admin pieces shared by the apps' staff consoles, built for tables of millions of rows."""

from __future__ import annotations

import json

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Q
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString


def subject_id_html(subject_id: str) -> SafeString:
    """A subject ID on a page, in a <bdi>: a bidirectional override or a line separator in it (accepted,
    docs/reference/api.md) then cannot reorder the text around it."""
    return format_html("<bdi>{}</bdi>", subject_id)


# Below this many rows an exact count is cheap and the planner's estimate may be stale.
ESTIMATE_ABOVE_ROWS = 10_000


class ReadOnlyAdmin(admin.ModelAdmin):
    """Data written only by the API or by apply_resources: shown, never edited here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class EstimatedCountPaginator(Paginator):
    """Counts a big list by the PostgreSQL planner's estimate instead of COUNT(*).

    COUNT(*) over millions of rows takes seconds on every changelist page, filtered
    (one experiment's assignments) or not; the estimate only sizes the page links.
    A list the planner expects to be small is counted exactly.
    """

    @cached_property
    def count(self) -> int:
        if connection.vendor == "postgresql" and hasattr(self.object_list, "explain"):
            plan = json.loads(self.object_list.explain(format="json"))[0]["Plan"]
            estimate = _distributed_rows(plan) or int(plan["Plan Rows"])
            if estimate > ESTIMATE_ABOVE_ROWS:
                return estimate
        return super().count


def _distributed_rows(plan: dict) -> int | None:
    """On Citus, the shards' estimate: the coordinator's own is a constant (100,000), whatever the table.

    EXPLAIN shows one shard's plan; shards hold about equal shares of a table
    distributed by hash, so that shard's estimate times the number of shards.
    """
    job = plan.get("Distributed Query", {}).get("Job")
    if job is not None:
        remote = job["Tasks"][0]["Remote Plan"][0][0]["Plan"]
        return int(remote["Plan Rows"]) * int(job["Task Count"])
    return next((rows for child in plan.get("Plans", ()) if (rows := _distributed_rows(child)) is not None), None)


class ExactSearchAdmin(ReadOnlyAdmin):
    """Searches `exact_search_fields` for the term exactly as typed, case-sensitive like every subject ID.

    Django's own search lowercases (iexact, icontains): a scan that cannot use the
    indexes and can also match another subject whose ID differs only in case.
    """

    exact_search_fields: tuple[str, ...] = ()

    def get_search_results(self, request, queryset, search_term):
        if not search_term:
            return queryset, False
        condition = Q()
        for name in self.exact_search_fields:
            condition |= Q(**{name: search_term})
        return queryset.filter(condition), False
