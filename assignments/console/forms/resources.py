"""The resource forms' common ground (ResourceForm), and the forms of subject types and labs."""

from __future__ import annotations

from django import forms
from django.contrib.admin.widgets import AdminTextareaWidget

from assignments import gates
from assignments.configuration.apply import ADMIN_SOURCE, Actor, ApplyResult, resources_apply
from assignments.configuration.export import resource_document
from assignments.configuration.resources import SCHEMA_VERSION, ResourceInvalid, ResourceProblem, resource_read
from assignments.models import Lab, SubjectType

# Document paths of a variant's fields -> VariantForm fields.
VARIANT_FIELDS = {
    "id": "key",
    "name": "name",
    "description": "description",
    "control": "is_control",
    "split": "split",
    "value": "value_text",
}
NOT_SAVED = "Nothing was saved: correct the errors shown on this page."


def declared_fields_only(model) -> type:
    """A ModelForm's Meta for `model` that excludes every model field: the form holds its declared fields
    only, and the service, not the form, writes the model (the module's docstring says why)."""
    return type("Meta", (), {"model": model, "fields": [], "exclude": [f.name for f in model._meta.concrete_fields]})


def id_field() -> forms.CharField:
    return forms.CharField(
        label="ID", max_length=100, help_text="Letters, digits, '.', '_' and '-'; unique ignoring case."
    )


class ResourceForm(forms.ModelForm):
    """Base of the three resource forms; subclasses map their fields to and from the document."""

    kind: str
    # Document path -> form field, for routing a ResourceProblem to where staff typed the value.
    field_paths: dict[str, str] = {"metadata.id": "key", "metadata.name": "name", "metadata.description": "description"}
    # Set by the ModelAdmin on the form class it builds for each request (ResourceAdmin.get_form).
    actor: Actor

    key = id_field()
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the ID.")
    description = forms.CharField(required=False, widget=AdminTextareaWidget(attrs={"rows": 3}))
    # The version the page was opened at: a save over someone else's later change is refused.
    resource_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        fields: list[str] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.creating = self.instance.pk is None
        self.result: ApplyResult | None = None
        if not self.creating:
            # The ID names the resource in the service; renaming would create another one.
            self.fields["key"].disabled = True
            self.initial.update(self.initial_from(resource_document(self.instance)))

    def validate_unique(self) -> None:
        """IDs are unique ignoring case: the service checks that, with the other rules."""

    def initial_from(self, document: dict) -> dict:
        metadata = document["metadata"]
        return {
            "key": metadata["id"],
            "name": metadata["name"],
            "description": metadata["description"],
            "resource_version": metadata["resourceVersion"],
        }

    def metadata(self) -> dict:
        data = self.cleaned_data
        metadata = {"id": data["key"], "name": data["name"] or data["key"], "description": data["description"]}
        if data["resource_version"] is not None:
            metadata["resourceVersion"] = data["resource_version"]
        return metadata

    def document(self) -> dict:
        return {"schemaVersion": SCHEMA_VERSION, "kind": self.kind, "metadata": self.metadata()}

    # Subject types and labs apply in clean(); an experiment waits for its variants (VariantFormSet).
    applies_in_clean = True

    def clean(self) -> dict:
        cleaned = super().clean()
        if not self.errors and self.applies_in_clean:
            self.apply(self.document())
        return cleaned

    def apply(self, document: dict, *, variant_forms: list[forms.Form] = ()) -> list[str]:
        """Apply the document; on refusal, put each problem on its field and return the ones
        that belong to the variants as a whole."""
        try:
            spec = resource_read(document, source=ADMIN_SOURCE)
            self.result = resources_apply(
                specs=[spec], actor=self.actor, create_only=self.creating, check_versions=True
            )[0]
        except ResourceInvalid as exc:
            return self.route(exc.problems, variant_forms)
        return []

    def route(self, problems: list[ResourceProblem], variant_forms: list[forms.Form]) -> list[str]:
        whole_variants = []
        for problem in problems:
            head, _, rest = problem.path.partition("spec.variants.")
            if not head and rest and variant_forms:
                index, _, name = rest.partition(".")
                variant_forms[int(index)].add_error(VARIANT_FIELDS.get(name), problem.message)
            elif problem.path == "spec.variants":
                whole_variants.append(problem.message)
            else:
                self.add_error(self.field_paths.get(problem.path), problem.message)
        return whole_variants


class AttributeForm(forms.Form):
    """One declared attribute: a row of the subject type's page."""

    name = forms.CharField(required=False)
    type = forms.ChoiceField(choices=[("", "---------"), *((t, t) for t in gates.ATTRIBUTE_TYPES)], required=False)
    remove = forms.BooleanField(required=False)

    def clean(self) -> dict:
        cleaned = super().clean()
        name, attribute_type = cleaned.get("name"), cleaned.get("type")
        if name and not attribute_type:
            self.add_error("type", "pick the attribute's type")
        elif attribute_type and not name:
            self.add_error("name", "is required (or set the type back to --------- to leave the row out)")
        return cleaned

    def kept(self) -> bool:
        """Whether the row declares an attribute: filled in and not ticked for removal."""
        return bool(self.cleaned_data.get("name")) and not self.cleaned_data.get("remove")


AttributeFormSet = forms.formset_factory(AttributeForm, extra=3)
ATTRIBUTE_ROWS_WRONG = "Nothing was saved: correct the declared attributes below."


class SubjectTypeForm(ResourceForm):
    kind = "subjecttype"
    field_paths = {**ResourceForm.field_paths, "metadata.status": "status"}

    status = forms.ChoiceField(choices=SubjectType.Status.choices, initial=SubjectType.Status.ACTIVE)

    Meta = declared_fields_only(SubjectType)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Rendered by the change form's template below the fields (resource_change_form.html).
        self.attribute_rows = AttributeFormSet(
            self.data if self.is_bound else None,
            prefix="attributes",
            initial=[] if self.creating else self.instance.attributes,
        )

    def initial_from(self, document: dict) -> dict:
        return {**super().initial_from(document), "status": document["metadata"]["status"]}

    def metadata(self) -> dict:
        return {**super().metadata(), "status": self.cleaned_data["status"]}

    def kept_rows(self) -> list[AttributeForm]:
        return [row for row in self.attribute_rows.forms if row.kept()]

    def clean(self) -> dict:
        if not self.attribute_rows.is_valid():
            self.add_error(None, ATTRIBUTE_ROWS_WRONG)
        return super().clean()

    def document(self) -> dict:
        document = super().document()
        attributes = [{"name": row.cleaned_data["name"], "type": row.cleaned_data["type"]} for row in self.kept_rows()]
        if attributes:
            document["spec"] = {"attributes": attributes}
        return document

    def route(self, problems: list[ResourceProblem], variant_forms: list[forms.Form]) -> list[str]:
        rows, others = self.kept_rows(), []
        for problem in problems:
            head, _, rest = problem.path.partition("spec.attributes.")
            if head or not rest:
                others.append(problem)
                continue
            index, _, name = rest.partition(".")
            rows[int(index)].add_error(name if name in ("name", "type") else None, problem.message)
        if len(others) < len(problems):
            self.add_error(None, ATTRIBUTE_ROWS_WRONG)
        return super().route(others, variant_forms)


class LabForm(ResourceForm):
    kind = "lab"

    Meta = declared_fields_only(Lab)
