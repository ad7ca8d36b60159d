"""What a browser would submit: the fields of a rendered HTML form, with their current values."""

from __future__ import annotations

from html.parser import HTMLParser


class _FormParser(HTMLParser):
    def __init__(self, form_id: str | None) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = form_id is None
        self.data: dict[str, str | list[str]] = {}
        self._select: str | None = None
        self._multiple = False
        self._textarea: str | None = None

    def _add(self, name: str, value: str) -> None:
        """A field's value; a name ticked or selected more than once (a list of checkboxes, a multiple
        select) holds the list of its values, as a browser sends each."""
        if name not in self.data:
            self.data[name] = value
            return
        values = self.data[name]
        self.data[name] = [*values, value] if isinstance(values, list) else [values, value]

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "form" and self.form_id is not None:
            self.inside = attributes.get("id") == self.form_id
        if not self.inside:
            return
        name = attributes.get("name")
        if "disabled" in attributes:
            return
        if tag == "input" and name and attributes.get("type") not in ("submit", "button", "image"):
            if attributes.get("type") in ("checkbox", "radio") and "checked" not in attributes:
                return
            value = attributes.get("value", "on" if attributes.get("type") == "checkbox" else "")
            if attributes.get("type") == "checkbox":
                self._add(name, value)
            else:
                self.data[name] = value
        elif tag == "select" and name:
            self._select = name
            self._multiple = "multiple" in attributes
            if not self._multiple:
                self.data.setdefault(name, "")
        elif tag == "option" and self._select and "selected" in attributes:
            if self._multiple:
                self._add(self._select, attributes.get("value", ""))
            else:
                self.data[self._select] = attributes.get("value", "")
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = ""

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None
        elif tag == "form" and self.form_id is not None:
            self.inside = False


def form_fields(html: str, *, form_id: str | None = None) -> dict[str, str | list[str]]:
    """The named fields of the form `form_id` (or of every form) as a browser would post them unchanged.

    Disabled fields are left out, as browsers do; a textarea's content loses the newline
    HTML puts after its opening tag; a name with several values ticked or selected holds their list.
    """
    parser = _FormParser(form_id)
    parser.feed(html)
    return {
        name: value.removeprefix("\n") if isinstance(value, str) else value
        for name, value in parser.data.items()
        if "__prefix__" not in name
    }
