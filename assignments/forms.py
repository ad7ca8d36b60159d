"""The admin's forms for configuration resources: a form is a resource document, applied by the one service.

A form holds declared fields only (Meta.exclude names every model field), so Django
never writes them into the model instance or validates the model itself. Instead the cleaned
data becomes the same document a YAML file holds, which goes through
resources.resource_read and configuring.resources_apply, exactly as
apply_resources does; each ResourceProblem comes back as an error on the field
its path names. The apply runs inside the admin's own transaction (changeform_view
is atomic), so a save is one transaction from validation to history entry.
"""

from __future__ import annotations

from django import forms
from django.contrib.admin.widgets import AdminTextareaWidget
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet

from assignments.configuring import ADMIN_SOURCE, Actor, ApplyResult, resources_apply
from assignments.models import Experiment, Lab, SubjectType, Variant
from assignments.resources import (
    SCHEMA_VERSION,
    ResourceInvalid,
    ResourceProblem,
    experiment_population,
    resource_document,
    resource_read,
)

# Document paths of a variant's fields -> VariantForm fields.
VARIANT_FIELDS = {"id": "key", "name": "name", "description": "description", "control": "is_control", "split": "split"}
NOT_SAVED = "Nothing was saved: correct the errors shown on this page."


def _model_fields(model) -> list[str]:
    return [field.name for field in model._meta.concrete_fields]


def _id_field() -> forms.CharField:
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

    key = _id_field()
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


class SubjectTypeForm(ResourceForm):
    kind = "subjecttype"
    field_paths = {**ResourceForm.field_paths, "metadata.status": "status"}

    status = forms.ChoiceField(choices=SubjectType.Status.choices, initial=SubjectType.Status.ACTIVE)

    class Meta:
        model = SubjectType
        fields: list[str] = []
        exclude = _model_fields(SubjectType)  # noqa: DJ006 - every model field: the service writes, not the form

    def initial_from(self, document: dict) -> dict:
        return {**super().initial_from(document), "status": document["metadata"]["status"]}

    def metadata(self) -> dict:
        return {**super().metadata(), "status": self.cleaned_data["status"]}

    def document(self) -> dict:
        document = super().document()
        if not self.creating and self.instance.attributes:
            # The form does not edit the declared attributes: a save keeps the stored ones.
            document["spec"] = {"attributes": self.instance.attributes}
        return document


class LabForm(ResourceForm):
    kind = "lab"

    class Meta:
        model = Lab
        fields: list[str] = []
        exclude = _model_fields(Lab)  # noqa: DJ006 - every model field: the service writes, not the form


class ExperimentForm(ResourceForm):
    """The experiment's own fields; its variants come from VariantFormSet, which applies both together."""

    kind = "experiment"
    field_paths = {
        **ResourceForm.field_paths,
        "metadata.status": "status",
        "metadata.parentId": "lab",
        "spec.subjectType": "subject_type",
        "spec.hypothesis": "hypothesis",
        "spec.salt": "salt",
        "spec.winningVariant": "winning_variant",
        "spec.followLinks": "follow_links",
    }
    applies_in_clean = False

    status = forms.ChoiceField(
        choices=Experiment.Status.choices,
        initial=Experiment.Status.DRAFT,
        help_text="Forward only: draft, active, winner declared, ended, archived (steps may be skipped).",
    )
    lab = forms.ModelChoiceField(Lab.objects.order_by("key"), to_field_name="key")
    subject_type = forms.ModelChoiceField(SubjectType.objects.order_by("key"), to_field_name="key")
    hypothesis = forms.CharField(required=False, widget=AdminTextareaWidget(attrs={"rows": 2}))
    salt = forms.CharField(
        max_length=200,
        required=False,
        help_text="Defaults to the ID in lower case; fixed once the experiment has assignments.",
    )
    winning_variant = forms.CharField(
        label="Winning variant",
        max_length=100,
        required=False,
        help_text="The variant's ID: required exactly when the status is winner declared.",
    )
    follow_links = forms.BooleanField(
        label="Follow identifier links",
        required=False,
        help_text="A new subject takes the variant of the earliest assigned identifier linked to it "
        "(at most 4 links away) instead of a hashed one. Applies to new assignments only.",
    )

    class Meta:
        model = Experiment
        fields: list[str] = []
        exclude = _model_fields(Experiment)  # noqa: DJ006 - every model field: the service writes, not the form

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The variants' formset is built around this same instance, and finds the form through it.
        self.instance.editing_form = self
        if self.creating:
            self.fields["lab"].initial = Lab.objects.get_ci("default")

    def initial_from(self, document: dict) -> dict:
        metadata, spec = document["metadata"], document["spec"]
        return {
            **super().initial_from(document),
            "status": metadata["status"],
            "lab": metadata["parentId"],
            "subject_type": spec["subjectType"],
            "hypothesis": spec["hypothesis"],
            "salt": spec["salt"],
            "winning_variant": spec.get("winningVariant", ""),
            "follow_links": spec["followLinks"],
        }

    def experiment_document(self, variants: list[dict]) -> dict:
        data = self.cleaned_data
        document = self.document()
        document["metadata"].update(status=data["status"], parentId=data["lab"].key)
        spec = {"subjectType": data["subject_type"].key, "hypothesis": data["hypothesis"]}
        if data["salt"]:
            spec["salt"] = data["salt"]
        if data["winning_variant"]:
            spec["winningVariant"] = data["winning_variant"]
        spec["followLinks"] = data["follow_links"]
        if not self.creating:
            # The form does not edit the gates: a save keeps the stored ones.
            spec.update(experiment_population(self.instance))
        document["spec"] = {**spec, "variants": variants}
        return document


class VariantForm(forms.ModelForm):
    key = _id_field()
    name = forms.CharField(max_length=200, required=False)
    description = forms.CharField(required=False)
    is_control = forms.BooleanField(label="Control", required=False)
    split = forms.FloatField(help_text="Share of new subjects, 0 to 1.")
    # Not the formset's DELETE: the admin checks that by collecting every protected
    # assignment in memory, millions of rows; the service asks the database whether one exists.
    remove = forms.BooleanField(required=False, help_text="Only a variant without assignments can be removed.")

    class Meta:
        model = Variant
        fields: list[str] = []
        exclude = _model_fields(Variant)  # noqa: DJ006 - every model field: the service writes, not the form

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            variant = self.instance
            self.initial.update(
                key=variant.key,
                name=variant.name,
                description=variant.description,
                is_control=variant.is_control,
                split=variant.split,
            )

    def validate_unique(self) -> None:
        """Variant IDs are unique ignoring case within the experiment: the document reader checks that."""

    def variant_document(self) -> dict:
        data = self.cleaned_data
        document = {"id": data["key"]}
        if data["name"]:
            document["name"] = data["name"]
        if data["description"]:
            document["description"] = data["description"]
        return {**document, "control": data["is_control"], "split": data["split"]}


class VariantFormSet(BaseInlineFormSet):
    """Applies the experiment with its variants once the experiment form and every variant row are valid."""

    def kept_forms(self) -> list[VariantForm]:
        """The rows that make the variants, in order: stored ones not marked for removal and filled-in new ones."""
        return [
            form
            for form in self.forms
            if not form.cleaned_data.get("remove") and (form.instance.pk is not None or form.has_changed())
        ]

    def clean(self) -> None:
        super().clean()
        parent: ExperimentForm = self.instance.editing_form
        if any(self.errors) or not parent.is_valid():
            return
        kept = self.kept_forms()
        whole_variants = parent.apply(
            parent.experiment_document([form.variant_document() for form in kept]), variant_forms=kept
        )
        if parent.result is None:
            # An invalid formset is what stops the admin from saving, whichever form the errors are on.
            raise ValidationError(whole_variants or [NOT_SAVED])
