"""The experiment's form, its variants, and its page's "try a subject"."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml
from django import forms
from django.contrib.admin.widgets import AdminTextareaWidget
from django.core.exceptions import ValidationError
from django.forms.models import BaseInlineFormSet
from django.utils.html import format_html, format_html_join

from assignments import gates
from assignments.configuration.layers import ranges_text
from assignments.configuration.resources import ResourceProblem
from assignments.configuration.values import NUMBER_TEXT
from assignments.console.forms.resources import NOT_SAVED, ResourceForm, declared_fields_only, id_field
from assignments.console.population_text import percent_text
from assignments.console.reports import experiment_assignments_total
from assignments.models import Experiment, Lab, Layer, SubjectType, Variant
from assignments.selectors import value_as_typed
from core.api.fields import subject_id_problem

TARGETING_EXAMPLE = """- {attribute: country, in: [DE, AT]}
- anyOf:
    - {attribute: plan, equals: pro}
    - {attribute: seats, gte: 10}"""
OPERATOR_HELP = (
    ("equals", "every type"),
    ("in, notIn", "string, number; a list of 1 to 100 values"),
    ("gt, gte, lt, lte", "number, version"),
    ("exists", "every type; true (was sent) or false (was not)"),
)


def targeting_yaml(targeting: list[dict]) -> str:
    """spec.targeting as the field shows it: one condition a line, an anyOf's conditions under it."""
    lines = []
    for clause in targeting:
        if "anyOf" in clause:
            lines.append("- anyOf:")
            lines += [f"    - {_flow(condition)}" for condition in clause["anyOf"]]
        else:
            lines.append(f"- {_flow(clause)}")
    return "\n".join(lines)


def _flow(condition: dict) -> str:
    # The attribute first, as written: PostgreSQL's jsonb keeps keys in an order of its own.
    ordered = {"attribute": condition["attribute"], **condition}
    return yaml.safe_dump(ordered, default_flow_style=True, sort_keys=False, allow_unicode=True, width=math.inf)[:-1]


def targeting_help(subject_type: SubjectType | None):
    """The targeting field's help: the attributes the subject type declares, and the operators."""
    if subject_type is None:
        attributes = "those its subject type declares (on the subject type's page)"
    elif subject_type.attributes:
        attributes = format_html_join(", ", "{} ({})", ((a["name"], a["type"]) for a in subject_type.attributes))
    else:
        attributes = format_html("none yet: declare them on subject type {} first", subject_type.key)
    operators = format_html_join("; ", "<code>{}</code>: {}", OPERATOR_HELP)
    return format_html(
        "Conditions that must all hold, as the YAML of <code>spec.targeting</code>; "
        "<code>anyOf</code> holds when one of its conditions does. Blank: everyone. "
        "Attributes: {}. Operators: {}. Quote versions and values YAML would read otherwise "
        "(<code>'2.3'</code>, <code>'NO'</code>, <code>'yes'</code>).",
        attributes,
        operators,
    )


def targeting_where(path: str) -> str:
    """A targeting problem's place in words: spec.targeting.1.anyOf.0.in.2 -> "condition 2, its anyOf
    condition 1, in item 3"."""
    parts = path.split(".")[2:]
    words = []
    if parts:
        words.append(f"condition {int(parts.pop(0)) + 1}")
    if parts[:1] == ["anyOf"]:
        parts.pop(0)
        words.append(f"its anyOf condition {int(parts.pop(0)) + 1}" if parts else "anyOf")
    if parts:
        field_name = parts.pop(0)
        words.append(f"{field_name} item {int(parts[0]) + 1}" if parts else field_name)
    return ", ".join(words)


def instant_field(label: str, meaning: str) -> forms.CharField:
    """An optional instant, typed as the export writes it: ISO 8601 with an offset, shown in UTC."""
    return forms.CharField(
        label=label,
        required=False,
        help_text=f"ISO 8601 with an offset, such as 2026-12-01T09:00:00+01:00 (Z for UTC); shown in UTC. {meaning}",
    )


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
        "spec.enrollment": "enrollment_start_at",
        "spec.enrollment.startAt": "enrollment_start_at",
        "spec.enrollment.stopAt": "enrollment_stop_at",
        "spec.holdouts": "covering_holdouts",
        "spec.layer": "layer",
        "spec.layer.id": "layer",
        "spec.layer.slots": "slots",
        "spec.coverage": "coverage",
        "spec.valueType": "value_type",
        "spec.bulkEvaluation": "bulk_evaluation",
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
    enrollment_start_at = instant_field("Enrollment start", "Subjects enter from this instant on. Blank: no start.")
    enrollment_stop_at = instant_field(
        "Enrollment stop",
        "From this instant on no new subject enters (stored ones are still answered). Blank: no stop.",
    )
    # Not named holdouts: the admin's checks would take it for the model's many-to-many field, which it
    # cannot show because that has a through model.
    covering_holdouts = forms.ModelMultipleChoiceField(
        Experiment.objects.filter(kind=Experiment.Kind.HOLDOUT).select_related("subject_type").order_by("key"),
        to_field_name="key",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Holdouts",
    )
    layer = forms.ModelChoiceField(
        Layer.objects.select_related("subject_type").order_by("key"), to_field_name="key", required=False
    )
    slots = forms.CharField(
        label="Layer slots",
        required=False,
        widget=forms.TextInput(attrs={"style": "font-family: monospace", "placeholder": "[[0, 2500]]"}),
        help_text="The slots it owns in the layer, as half-open ranges [start, end] of 0 to 10000, as in YAML: "
        "[[0, 2500], [5000, 6000]] owns slots 0 to 2499 and 5000 to 5999. They may not overlap an active "
        "experiment's of the layer; once the experiment has assignments they may only grow.",
    )
    targeting = forms.CharField(
        required=False,
        strip=False,
        widget=AdminTextareaWidget(
            attrs={"rows": 6, "style": "font-family: monospace", "placeholder": TARGETING_EXAMPLE}
        ),
    )
    coverage = forms.FloatField(initial=1.0)
    value_type = forms.ChoiceField(
        label="Value type",
        choices=[("", "(none)"), *Experiment.ValueType.choices],
        required=False,
        help_text="The type of every variant's value (the Value of each variant below). A change of it or of a "
        "value starts no cohort and moves no one.",
    )
    bulk_evaluation = forms.BooleanField(
        label="Bulk evaluation", required=False, initial=True, help_text="Listed by OpenFeature bulk evaluation."
    )
    # Asked for, and then shown, only when a save would lower the coverage of a running experiment.
    confirm_coverage = forms.BooleanField(label="Yes, lower the coverage", required=False, widget=forms.HiddenInput)

    Meta = declared_fields_only(Experiment)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The variants' formset is built around this same instance, and finds the form through it.
        self.instance.editing_form = self
        if self.creating:
            self.fields["lab"].initial = Lab.objects.get_ci("default")
        coverage = 1.0 if self.creating else self.instance.coverage
        self.fields["coverage"].help_text = (
            "The share of subjects that may enter, from 0 to 1 (0.2 is 20 %), drawn independently of the "
            f"variant: now {coverage:g}, that is {percent_text(coverage)}. Raising it only adds subjects."
        )
        declared = None if self.creating else self.instance.subject_type
        self.fields["targeting"].help_text = targeting_help(declared)
        self.fields["covering_holdouts"].label_from_instance = lambda h: f"{h.key} ({h.subject_type.key}, {h.status})"
        self.fields["layer"].label_from_instance = lambda layer: f"{layer.key} ({layer.subject_type.key})"
        # From the counts (kept exact by triggers), so that the page reads nothing from the assignments table
        # however big it is; the service asks the table itself when it applies.
        self._gates_help(not self.creating and experiment_assignments_total(self.instance) > 0)

    def _gates_help(self, assigned: bool) -> None:
        """The holdouts' and the layer's help; both are shown but not offered once the experiment has
        assignments: they decided who entered it."""
        covering, layer = self.fields["covering_holdouts"], self.fields["layer"]
        covering.help_text = (
            "Holdouts of the experiment's subject type: a subject held out by an active one does not enter. "
            "When the experiment is first started, the active holdouts whose scope takes in its lab are added."
        )
        layer.help_text = "The layer whose slots the experiment owns: a subject enters only if it owns its slot."
        if assigned:
            covering.disabled = layer.disabled = True
            covering.help_text = "Fixed: the experiment has assignments, and these holdouts decided who entered it."
            layer.help_text = "Fixed: the experiment has assignments, which were made from the slots it owns."

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
            "enrollment_start_at": spec.get("enrollment", {}).get("startAt", ""),
            "enrollment_stop_at": spec.get("enrollment", {}).get("stopAt", ""),
            "covering_holdouts": spec.get("holdouts", []),
            "layer": spec["layer"]["id"] if "layer" in spec else None,
            "slots": ranges_text(spec["layer"]["slots"]) if "layer" in spec else "",
            "targeting": targeting_yaml(spec["targeting"]) if spec.get("targeting") else "",
            "coverage": spec.get("coverage", 1.0),
            "value_type": spec.get("valueType", ""),
            "bulk_evaluation": spec.get("bulkEvaluation", True),
        }

    def _yaml_field(self, name: str) -> Any:
        """The field's text as YAML reads it (the service checks the value), or None when it is blank."""
        text = self.cleaned_data[name]
        if not text.strip():
            return None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValidationError(f"not valid YAML: {exc}") from None

    def clean_slots(self) -> Any:
        """The ranges, or None for none."""
        return self._yaml_field("slots")

    def clean_targeting(self) -> Any:
        """The conditions, or None for no targeting."""
        return self._yaml_field("targeting")

    def clean(self) -> dict:
        cleaned = super().clean()
        if cleaned.get("slots") is not None and cleaned.get("layer") is None and "layer" not in self.errors:
            self.add_error("layer", "pick the layer these slots are in, or clear the slots")
        coverage = cleaned.get("coverage")
        if coverage is not None and self.coverage_lowered(coverage) and not cleaned.get("confirm_coverage"):
            self.fields["confirm_coverage"].widget = forms.CheckboxInput()
            old = self.instance.coverage
            self.add_error(
                "coverage",
                f"Lowering the coverage from {percent_text(old)} to {percent_text(coverage)} while the experiment "
                f"is {self.instance.status} starts a new cohort that lets in fewer subjects: those the old "
                "coverage would have let in and that have not been assigned yet no longer enter (stored "
                "assignments stay). Tick \u201cYes, lower the coverage\u201d and save again to do it.",
            )
        return cleaned

    def coverage_lowered(self, coverage: float) -> bool:
        """Whether the save lowers the coverage of an experiment that is active or later (a draft has
        assigned nobody: its first cohort is simply corrected)."""
        if self.creating:
            return False
        running = Experiment.status_rank(self.instance.status) >= Experiment.status_rank(Experiment.Status.ACTIVE)
        return running and coverage < self.instance.coverage

    def route(self, problems: list[ResourceProblem], variant_forms: list[forms.Form]) -> list[str]:
        others = []
        for problem in problems:
            if problem.path == "spec.targeting" or problem.path.startswith("spec.targeting."):
                where = targeting_where(problem.path)
                self.add_error("targeting", f"{where}: {problem.message}" if where else problem.message)
            elif problem.path.startswith("spec.layer.slots."):
                index = int(problem.path.split(".")[3])
                self.add_error("slots", f"range {index + 1}: {problem.message}")
            elif problem.path.startswith("spec.holdouts."):
                self.add_error("covering_holdouts", problem.message)
            else:
                others.append(problem)
        return super().route(others, variant_forms)

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
        enrollment = {}
        if data["enrollment_start_at"]:
            enrollment["startAt"] = data["enrollment_start_at"]
        if data["enrollment_stop_at"]:
            enrollment["stopAt"] = data["enrollment_stop_at"]
        if enrollment:
            spec["enrollment"] = enrollment
        if not self.fields["covering_holdouts"].disabled:
            spec["holdouts"] = self.holdout_keys(data["covering_holdouts"])
        if data["layer"] is not None:
            spec["layer"] = {"id": data["layer"].key, "slots": data["slots"]}
        if data["targeting"] is not None:
            spec["targeting"] = data["targeting"]
        spec["coverage"] = data["coverage"]
        if data["value_type"]:
            spec["valueType"] = data["value_type"]
        spec["bulkEvaluation"] = data["bulk_evaluation"]
        document["spec"] = {**spec, "variants": variants}
        return document

    def holdout_keys(self, chosen: list[Experiment]) -> list[str]:
        """The IDs of the holdouts ticked, those the experiment has first in their order (the order in which
        memberships are checked), then the others by ID."""
        keys = {holdout.key for holdout in chosen}
        kept = [key for key in self.initial.get("covering_holdouts", []) if key in keys]
        return kept + sorted(keys.difference(kept), key=str.lower)


_NO_VALUE = object()


def value_text(value_type: str, value: Any) -> str:
    """A variant's value as its field shows it: a string as it is, any other as JSON (an object compact)."""
    if value is None:
        return ""
    if value_type == Experiment.ValueType.STRING and isinstance(value, str):
        return value
    return json.dumps(value_as_typed(value_type, value), ensure_ascii=False, separators=(",", ":"))


def typed_value(value_type: str, text: str) -> Any:
    """A variant's value from its field's text, as its experiment's `value_type` reads it: a string as typed
    (blank: the empty string), true or false, a number as JSON writes it, an object as JSON; for the other
    types blank is _NO_VALUE, which the service refuses as required. Any other text is given as a string,
    which the service refuses saying what the value must be (so the page words it as the YAML's refusal).
    Raises ValidationError for an object that is not valid JSON."""
    if value_type == Experiment.ValueType.STRING:
        return text
    stripped = text.strip()
    if not stripped:
        return _NO_VALUE
    if value_type == Experiment.ValueType.OBJECT:
        try:
            # The text as typed, so that the error's line and column are where staff look.
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValidationError(f"not valid JSON: {exc}") from None
    if value_type == Experiment.ValueType.BOOLEAN and stripped in ("true", "false"):
        return stripped == "true"
    if value_type in (Experiment.ValueType.INTEGER, Experiment.ValueType.FLOAT) and NUMBER_TEXT.fullmatch(stripped):
        return json.loads(stripped)
    return text


class VariantForm(forms.ModelForm):
    key = id_field()
    name = forms.CharField(max_length=200, required=False)
    description = forms.CharField(required=False)
    is_control = forms.BooleanField(label="Control", required=False)
    split = forms.FloatField(help_text="Share of new subjects, 0 to 1.")
    # Not named value: a page for staff who may only view shows it through VariantInline.value_text.
    value_text = forms.CharField(
        label="Value",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 1, "cols": 32, "style": "font-family: monospace"}),
        help_text="Of the value type: a string as typed (blank: empty), true or false, a number, or an object as "
        'JSON ({"label": "Buy"}).',
    )
    # Not the formset's DELETE: the admin checks that by collecting every protected
    # assignment in memory, millions of rows; the service asks the database whether one exists.
    remove = forms.BooleanField(required=False, help_text="Only a variant without assignments can be removed.")

    Meta = declared_fields_only(Variant)

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
                value_text=value_text(variant.experiment.value_type, variant.value),
            )

    def validate_unique(self) -> None:
        """Variant IDs are unique ignoring case within the experiment: the document reader checks that."""

    def variant_document(self, value_type: str) -> dict:
        """The variant's document, its value read as `value_type` reads it; raises ValidationError for a value
        that cannot be read."""
        data = self.cleaned_data
        document = {"id": data["key"]}
        if data["name"]:
            document["name"] = data["name"]
        if data["description"]:
            document["description"] = data["description"]
        document = {**document, "control": data["is_control"], "split": data["split"]}
        value = typed_value(value_type, data["value_text"])
        return document if value is _NO_VALUE else {**document, "value": value}


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
        documents = []
        for form in kept:
            try:
                documents.append(form.variant_document(parent.cleaned_data["value_type"]))
            except ValidationError as error:
                form.add_error("value_text", error)
        if len(documents) < len(kept):
            raise ValidationError([NOT_SAVED])
        whole_variants = parent.apply(parent.experiment_document(documents), variant_forms=kept)
        if parent.result is None:
            # An invalid formset is what stops the admin from saving, whichever form the errors are on.
            raise ValidationError(whole_variants or [NOT_SAVED])


class TrySubjectForm(forms.Form):
    """A subject to preview in one experiment: its ID and the attributes a request would send."""

    subject_id = forms.CharField(label="Subject ID", max_length=256, strip=False, help_text="Exact, case-sensitive.")
    attributes = forms.CharField(
        required=False,
        strip=False,
        widget=AdminTextareaWidget(attrs={"rows": 4, "style": "font-family: monospace", "placeholder": "country=DE"}),
        help_text="One name=value a line, typed as the subject type declares the name (a number, true or "
        "false, a version or a string: country=DE, seats=12, beta=true), or a JSON object "
        '({"country": "DE", "seats": 12}). Blank: none sent. They are not stored or logged.',
    )

    def __init__(self, *args, declared: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.declared = declared

    def clean_subject_id(self) -> str:
        subject_id = self.cleaned_data["subject_id"]
        problem = subject_id_problem(subject_id)
        if problem is not None:
            raise ValidationError(problem)
        return subject_id

    def clean_attributes(self) -> dict[str, object]:
        """The attributes as a request's attribute object, checked as the API checks one."""
        text = self.cleaned_data["attributes"]
        attributes = self._json(text) if text.lstrip().startswith("{") else self._lines(text)
        if len(attributes) > gates.MAX_ATTRIBUTES:
            raise ValidationError(f"at most {gates.MAX_ATTRIBUTES} attributes, not {len(attributes)}")
        problems = [
            f"{name}: {problem}"
            for name, value in attributes.items()
            if (problem := gates.value_problem(value) or _name_problem(name)) is not None
        ]
        problems += [f"{name}: {why}" for name, why in gates.attribute_problems(attributes, self.declared).items()]
        if problems:
            raise ValidationError(problems)
        return attributes

    @staticmethod
    def _json(text: str) -> dict[str, object]:
        try:
            attributes = json.loads(text)
        except ValueError as exc:
            raise ValidationError(f"not a valid JSON object: {exc}") from None
        if not isinstance(attributes, dict):
            raise ValidationError("must be a JSON object of name: value")
        return attributes

    def _lines(self, text: str) -> dict[str, object]:
        attributes: dict[str, object] = {}
        problems = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            name, equals, value = line.partition("=")
            name = name.strip()
            if not equals:
                problems.append(f"line {number}: write name=value")
            elif name in attributes:
                problems.append(f"line {number}: {name} is given twice")
            else:
                try:
                    attributes[name] = typed_text(value.strip(), self.declared.get(name, gates.STRING))
                except ValueError as exc:
                    problems.append(f"line {number}: {name}: {exc}")
        if problems:
            raise ValidationError(problems)
        return attributes


def _name_problem(name: str) -> str | None:
    return None if gates.is_attribute_name(name) else f"names must match {gates.ATTRIBUTE_NAME_PATTERN}"


_integer = re.compile(r"-?[0-9]+")


def typed_text(value: str, attribute_type: str) -> object:
    """A value typed as text, as the declared type reads it: a number, a boolean, or the text itself.
    Raises ValueError for a number or boolean that is not one."""
    if attribute_type == gates.NUMBER:
        if _integer.fullmatch(value):
            return int(value)
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"is a number attribute: {value!r} is not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"is a number attribute: {value!r} is not a finite number")
        return number
    if attribute_type == gates.BOOLEAN:
        if value not in ("true", "false"):
            raise ValueError(f"is a boolean attribute: write true or false, not {value!r}")
        return value == "true"
    return value
