"""The staff console's pages as staff read and submit them, through the test client, and the configuration and
assignments its page tests set up."""

from __future__ import annotations

import html
import re
from datetime import timedelta

from django.utils import timezone

from assignments.models import Assignment, Experiment, Variant
from tests.helpers import resources
from tests.helpers.browser import form_fields

CONFIG = (
    resources.subject_type("user"),
    resources.subject_type("cookie"),
    resources.experiment("checkout"),
    resources.experiment(
        "banner",
        subject_type="cookie",
        variants=[resources.variant("control", 0.5, control=True), resources.variant("wide", 0.5)],
    ),
    resources.experiment("finished", status="ended"),
)
USER_WITH_ATTRIBUTES = resources.subject_type(
    "user", attributes={"country": "string", "plan": "string", "seats": "number"}
)
IN_DE = [{"attribute": "country", "in": ["DE", "AT"]}]

# The form tests' gated experiment: every gate, on a `user` that declares ATTRIBUTES.
GATED = {
    "enrollment": {"startAt": "2026-12-01T09:00:00+01:00", "stopAt": "2027-01-15T00:00:00+01:00"},
    "targeting": [
        {"attribute": "country", "in": ["DE", "AT"]},
        {"anyOf": [{"attribute": "plan", "equals": "pro"}, {"attribute": "seats", "gte": 10}]},
    ],
    "coverage": 0.2,
}
ATTRIBUTES = {"country": "string", "plan": "string", "seats": "number", "appVersion": "version"}


def change_url(obj) -> str:
    return f"/admin/assignments/{obj._meta.model_name}/{obj.pk}/change/"


def edit(client, obj, **changes: str | list[str] | None):
    """Open the change page as a browser would, change some fields (`variants__0__split` names
    `variants-0-split`; None leaves a field out, as an unticked box), and submit."""
    page = client.get(change_url(obj))
    assert page.status_code == 200
    data = form_fields(page.content.decode(), form_id=f"{obj._meta.model_name}_form")
    for name, value in changes.items():
        name = name.replace("__", "-")
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return client.post(change_url(obj), data)


def assert_field_error(response, field: str, message: str) -> None:
    """The page came back unsaved (200) with `message` in one of the errors on `field`."""
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(message in error for error in errors.get(field, [])), errors


def errors_of(response) -> list:
    """The form errors of a re-rendered admin page, for assertion messages."""
    context = response.context
    formsets = [inline.formset for inline in context["inline_admin_formsets"]]
    return [
        context["adminform"].form.errors,
        *(formset.non_form_errors() for formset in formsets),
        *(form.errors for formset in formsets for form in formset.forms),
    ]


def text_of(response) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode()))


def words_of(response) -> str:
    """The page's text with every run of white space made one space."""
    return " ".join(text_of(response).split())


def inline_text(fragment: str) -> str:
    """HTML that reads as one sentence (a cell, a paragraph) as text: tags dropped, white space made one space."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def table_rows(response, table_id: str) -> list[list[str]]:
    """The text of each cell of the body of the table `table_id`, row by row."""
    table = re.search(rf'<table id="{table_id}".*?<tbody>(.*?)</tbody>', response.content.decode(), re.S).group(1)
    return [
        [inline_text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
    ]


def variant(experiment: Experiment, key: str = "green") -> Variant:
    return Variant.objects.get(experiment=experiment, key=key)


def assign(experiment: Experiment, variant_key: str, count: int, *, days_ago: int = 0, prefix: str = "s") -> None:
    variant = Variant.objects.get(experiment=experiment, key=variant_key)
    created = timezone.now() - timedelta(days=days_ago)
    Assignment.objects.bulk_create(
        Assignment(
            experiment=experiment,
            subject_id=f"{prefix}-{variant_key}-{days_ago}-{n}",
            variant=variant,
            cohort=1,
            created_at=created,
        )
        for n in range(count)
    )


def apply_experiment(key: str, **fields) -> None:
    """Subject types `user` and `device`, and the experiment: active, on `user`, 50/50, "Green sells more"."""
    fields.setdefault("hypothesis", "Green sells more")
    resources.apply_resources(
        resources.subject_type("user"), resources.subject_type("device"), resources.experiment(key, **fields)
    )
