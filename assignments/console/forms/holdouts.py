"""The holdout's form."""

from __future__ import annotations

from typing import Any

from django import forms

from assignments.configuration import holdouts
from assignments.console.forms.resources import ResourceForm, declared_fields_only
from assignments.models import Experiment, Holdout, Lab, SubjectType

SCOPE_NONE, SCOPE_LABS = "", "labs"


class HoldoutForm(ResourceForm):
    """A holdout's fields; its scope is a choice (none, all, the labs ticked) rather than YAML, since it has
    only those three shapes."""

    kind = "holdout"
    field_paths = {
        **ResourceForm.field_paths,
        "metadata.status": "status",
        "spec.subjectType": "subject_type",
        "spec.share": "share",
        "spec.salt": "salt",
        "spec.scope": "scope",
        "spec.scope.labs": "scope_labs",
    }
    # The labs the stored scope names, as written: they may differ in case from the labs' IDs.
    stored_labs: tuple[str, ...] = ()

    status = forms.ChoiceField(
        choices=[(status, Experiment.Status(status).label) for status in holdouts.STATUSES],
        initial=Experiment.Status.DRAFT,
        help_text="Forward only: draft, active, ended. Only an active holdout holds anyone out; an ended one "
        "stops nobody, and its members stay stored.",
    )
    subject_type = forms.ModelChoiceField(SubjectType.objects.order_by("key"), to_field_name="key")
    share = forms.FloatField(
        help_text=f"The share of subjects held out, more than 0 and at most {holdouts.MAX_SHARE} (0.05 is 5 %). "
        "Fixed, like the salt and the subject type, once the holdout has been active: they drew its members.",
    )
    salt = forms.CharField(
        max_length=200, required=False, help_text="Defaults to the ID in lower case; unique among every salt."
    )
    scope = forms.ChoiceField(
        choices=[
            (SCOPE_NONE, "None: only the experiments that list it"),
            (holdouts.SCOPE_ALL, "All experiments of its subject type"),
            (SCOPE_LABS, "The experiments of the labs ticked below"),
        ],
        required=False,
        widget=forms.RadioSelect,
        help_text="The experiments it joins when they are first started, while it is active. A change decides "
        "only for experiments started afterwards.",
    )
    scope_labs = forms.ModelMultipleChoiceField(
        Lab.objects.order_by("key"),
        to_field_name="key",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Scope's labs",
    )

    Meta = declared_fields_only(Holdout)

    def initial_from(self, document: dict) -> dict:
        metadata, spec = document["metadata"], document["spec"]
        scope = spec.get("scope")
        self.stored_labs = tuple(scope["labs"]) if isinstance(scope, dict) else ()
        named = {lab.lower() for lab in self.stored_labs}
        return {
            **super().initial_from(document),
            "status": metadata["status"],
            "subject_type": spec["subjectType"],
            "share": spec["share"],
            "salt": spec["salt"],
            "scope": SCOPE_LABS if isinstance(scope, dict) else scope or SCOPE_NONE,
            "scope_labs": [
                key for key in Lab.objects.order_by("key").values_list("key", flat=True) if key.lower() in named
            ],
        }

    def clean(self) -> dict:
        cleaned = self.cleaned_data
        if cleaned.get("scope_labs") and cleaned.get("scope") != SCOPE_LABS:
            self.add_error("scope_labs", "count only for a scope of the labs ticked: pick that scope, or untick them")
        return super().clean()

    def scope_lab_keys(self, chosen: list[Lab]) -> list[str]:
        """The labs ticked: those the scope names first, as written and in their order (saving the page
        unchanged is then no change), then the others by ID."""
        keys = {lab.key.lower(): lab.key for lab in chosen}
        kept = [lab for lab in self.stored_labs if lab.lower() in keys]
        added = {lab.lower() for lab in kept}
        return kept + sorted((key for lower, key in keys.items() if lower not in added), key=str.lower)

    def document(self) -> dict:
        data = self.cleaned_data
        document = super().document()
        document["metadata"]["status"] = data["status"]
        spec: dict[str, Any] = {"subjectType": data["subject_type"].key, "share": data["share"]}
        if data["salt"]:
            spec["salt"] = data["salt"]
        if data["scope"] == holdouts.SCOPE_ALL:
            spec["scope"] = holdouts.SCOPE_ALL
        elif data["scope"] == SCOPE_LABS:
            spec["scope"] = {"labs": self.scope_lab_keys(data["scope_labs"])}
        return {**document, "spec": spec}
