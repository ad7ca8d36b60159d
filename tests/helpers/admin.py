"""The staff console's pages as staff read and submit them, through the test client."""

from __future__ import annotations

import html
import re

from tests.helpers.browser import form_fields


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
