"""assignments/console/admin/history.py: every recorded change of the configuration, across resources."""

from __future__ import annotations

from assignments.models import ResourceChange
from tests.helpers.admin import CONFIG, text_of
from tests.helpers.resources import apply_resources


def test_history_list__every_change_with_its_diff(staff_client, configured):
    apply_resources(*CONFIG[:3], {**CONFIG[3], "metadata": {"id": "banner", "status": "ended"}}, CONFIG[4])
    change = ResourceChange.objects.get(resource_id="banner", resource_version=2)

    listing = staff_client.get("/admin/assignments/resourcechange/", {"q": "banner"})
    page = staff_client.get(f"/admin/assignments/resourcechange/{change.pk}/change/")

    assert [row.resource_version for row in listing.context["cl"].result_list] == [2, 1]
    assert "-  status: active\n+  status: ended" in text_of(page)
