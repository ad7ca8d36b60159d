"""The layer's form."""

from __future__ import annotations

from django import forms

from assignments.console.forms.resources import ResourceForm, declared_fields_only
from assignments.models import Layer, SubjectType


class LayerForm(ResourceForm):
    kind = "layer"
    field_paths = {**ResourceForm.field_paths, "spec.subjectType": "subject_type", "spec.salt": "salt"}

    subject_type = forms.ModelChoiceField(
        SubjectType.objects.order_by("key"),
        to_field_name="key",
        help_text="The subject type of the layer's experiments: it changes only with theirs, in one YAML apply.",
    )
    salt = forms.CharField(
        max_length=200,
        required=False,
        help_text="Draws each subject's slot. Defaults to the ID in lower case; unique among every salt; fixed "
        "once an experiment of the layer has assignments.",
    )

    Meta = declared_fields_only(Layer)

    def initial_from(self, document: dict) -> dict:
        spec = document["spec"]
        return {**super().initial_from(document), "subject_type": spec["subjectType"], "salt": spec["salt"]}

    def document(self) -> dict:
        data = self.cleaned_data
        spec = {"subjectType": data["subject_type"].key}
        if data["salt"]:
            spec["salt"] = data["salt"]
        return {**super().document(), "spec": spec}
