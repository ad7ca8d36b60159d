"""assignments/console/admin/resources.py: the resource pages' common ground: a resource's history on its page."""

from __future__ import annotations

from tests.helpers import resources
from tests.helpers.admin import CONFIG, text_of
from tests.helpers.resources import apply_resources


def test_resource_page__history__newest_first_with_diff(staff_client, configured):
    named_green = [resources.variant("control", 0.5, control=True), resources.variant("green", 0.5, name="Green")]
    apply_resources(
        *CONFIG[:2],
        resources.experiment("checkout", variants=named_green),
        CONFIG[3],
        resources.experiment("finished", status="ended", variants=named_green),
    )

    page = staff_client.get(f"/admin/assignments/experiment/{configured['checkout'].pk}/change/")

    text = text_of(page)
    assert text.index("version 2") < text.index("version 1")
    assert "+    name: Green" in text
