"""Resource documents for set-up, built as dicts and applied through the real parser and apply path, and the
cohorts an apply stored and the history it recorded, read back.

A test whose subject is the YAML text itself (syntax, comments, quoting, messages naming a document or a
line) writes that text inline instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError

from assignments.configuration.apply import Actor, resources_apply
from assignments.configuration.resources import resources_parse
from assignments.models import Cohort
from tests.helpers.commands import command_output
from tests.helpers.database import all_table_text


def _without_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def subject_type(
    key: str, *, name: str | None = None, status: str | None = None, attributes: dict[str, str] | None = None
) -> dict:
    """A subject type document; `attributes` maps each declared attribute's name to its type."""
    metadata = _without_none({"id": key, "name": name, "status": status})
    document = {"schemaVersion": 1, "kind": "subjecttype", "metadata": metadata}
    if attributes is not None:
        document["spec"] = {"attributes": [{"name": name, "type": kind} for name, kind in attributes.items()]}
    return document


def lab(key: str, *, name: str | None = None) -> dict:
    return {"schemaVersion": 1, "kind": "lab", "metadata": _without_none({"id": key, "name": name})}


def layer(key: str, *, subject_type: str = "user", salt: str | None = None, name: str | None = None) -> dict:
    """A layer document, on `user` unless told otherwise."""
    spec = _without_none({"subjectType": subject_type, "salt": salt})
    return {"schemaVersion": 1, "kind": "layer", "metadata": _without_none({"id": key, "name": name}), "spec": spec}


def holdout(
    key: str,
    *,
    subject_type: str = "user",
    status: str | None = "active",
    share: float = 0.05,
    salt: str | None = None,
    scope: str | dict | None = None,
    name: str | None = None,
) -> dict:
    """A holdout document; active, on `user`, holding out 5 % unless told otherwise. `scope` as the YAML
    writes it: "all" or {"labs": [...]}."""
    return {
        "schemaVersion": 1,
        "kind": "holdout",
        "metadata": _without_none({"id": key, "name": name, "status": status}),
        "spec": _without_none({"subjectType": subject_type, "share": share, "salt": salt, "scope": scope}),
    }


def in_layer(key: str, *slots: list[int]) -> dict:
    """An experiment's spec.layer: the layer `key` and the slot ranges [start, end] given."""
    return {"id": key, "slots": list(slots)}


def variant(key: str, split: float, *, control: bool = False, name: str | None = None) -> dict:
    return _without_none({"id": key, "name": name, "control": True if control else None, "split": split})


def control_and_green() -> list[dict]:
    """The two variants most tests need: `control` (the control) and `green`, 50/50."""
    return [variant("control", 0.5, control=True), variant("green", 0.5)]


def split_variants(splits: list[tuple[str, float]]) -> list[dict]:
    """Variants from (ID, split) pairs, the first of them the control."""
    return [variant(key, split, control=index == 0) for index, (key, split) in enumerate(splits)]


def experiment(
    key: str,
    *,
    subject_type: str = "user",
    status: str | None = "active",
    lab: str | None = None,
    name: str | None = None,
    salt: str | None = None,
    hypothesis: str | None = None,
    winning_variant: str | None = None,
    follow_links: bool | None = None,
    variants: list[dict] | None = None,
    enrollment: dict[str, str] | None = None,
    holdouts: list[str] | None = None,
    layer: dict | None = None,
    targeting: list[dict] | None = None,
    coverage: float | None = None,
) -> dict:
    """An experiment document; active, on `user`, with control_and_green() unless told otherwise.

    `enrollment`, `holdouts`, `layer` (see in_layer), `targeting` and `coverage` are the gates' spec fields
    as the YAML writes them; None leaves a field out.
    """
    return {
        "schemaVersion": 1,
        "kind": "experiment",
        "metadata": _without_none({"id": key, "name": name, "status": status, "parentId": lab}),
        "spec": _without_none(
            {
                "subjectType": subject_type,
                "hypothesis": hypothesis,
                "salt": salt,
                "winningVariant": winning_variant,
                "followLinks": follow_links,
                "enrollment": enrollment,
                "holdouts": holdouts,
                "layer": layer,
                "targeting": targeting,
                "coverage": coverage,
                "variants": control_and_green() if variants is None else variants,
            }
        ),
    }


def yaml_documents(*documents: dict) -> str:
    """The documents as one YAML stream, the form apply_resources and the export read and write."""
    return yaml.safe_dump_all(documents, sort_keys=False)


def apply_yaml(text: str, *, dry_run: bool = False):
    return resources_apply(specs=resources_parse(text, file="test.yaml"), actor=Actor.command(), dry_run=dry_run)


def apply_resources(*documents: dict, dry_run: bool = False):
    """Apply the documents as `manage.py apply_resources` would, through the YAML parser."""
    return apply_yaml(yaml_documents(*documents), dry_run=dry_run)


def apply_file(tmp_path: Path, *documents: dict) -> tuple[str, list[str]]:
    """`manage.py apply_resources` of one file holding the documents: the file's path and the lines printed."""
    path = tmp_path / "resources.yaml"
    path.write_text(yaml_documents(*documents), encoding="utf-8")
    return str(path), command_output("apply_resources", str(path)).splitlines()


def export_text(*args: str) -> str:
    """What `manage.py export_resources` prints with these arguments."""
    return command_output("export_resources", *args)


def database_rows() -> list[str]:
    # Sorted: the rows are compared, not the order a table scan happens to return them in.
    return sorted(all_table_text().splitlines())


def cohort_rules(key: str = "checkout") -> list[tuple[int, list, dict]]:
    """The cohorts an apply stored for the experiment `key`: (number, splits, population) each, in order."""
    cohorts = Cohort.objects.filter(experiment__key=key).order_by("number")
    return list(cohorts.values_list("number", "splits", "population"))


def resource_history(kind: str, key: str) -> tuple[list[str], list[str]]:
    """What `manage.py resource_history KIND ID` prints: the versions it lists, in its order, and all its lines."""
    lines = command_output("resource_history", kind, key).splitlines()
    return [line.split()[1] for line in lines if line.startswith("version ")], lines


def refusal(tmp_path: Path, *documents: dict) -> tuple[str, list[str]]:
    """apply_file of the documents, refused: the file's path and the error's lines; the database as it was."""
    before = database_rows()
    with pytest.raises(CommandError) as caught:
        apply_file(tmp_path, *documents)
    assert database_rows() == before, "a refused apply changed the database"
    lines = str(caught.value).splitlines()
    assert lines[0] == "resources not applied:"
    return str(tmp_path / "resources.yaml"), lines[1:]


# The demo configuration: subject types `user` and `cookie`, the active experiment `checkout-button` (50/50).
DEMO_RESOURCES = (subject_type("user"), subject_type("cookie"), experiment("checkout-button"))
DEMO_YAML = yaml_documents(*DEMO_RESOURCES)
# The link-walk tests' configuration: the active experiment `banner` (50/50) on cookies, following links.
BANNER_FOLLOWING_LINKS = (
    subject_type("user"),
    subject_type("cookie"),
    experiment("banner", subject_type="cookie", follow_links=True),
)
