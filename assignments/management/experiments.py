"""What the commands that work on one experiment share: the experiment named on the command line."""

from __future__ import annotations

from django.core.management.base import CommandError

from assignments.models import Experiment
from assignments.selectors import experiment_get_ci


def experiment_argument(parser, *, flag: str = "--experiment") -> None:
    """The experiment's ID, as an option (`--experiment ID`) or, with flag=None, as the first argument."""
    if flag is None:
        parser.add_argument("experiment", metavar="ID", help="experiment ID (any case)")
    else:
        parser.add_argument(flag, dest="experiment", required=True, metavar="ID", help="experiment ID (any case)")


def experiment_named(experiment_id: str) -> Experiment:
    """The experiment the command line names; CommandError (exit 1, one line) if none has that ID."""
    found = experiment_get_ci(experiment_id=experiment_id)
    if found is None:
        raise CommandError(f"no experiment has the ID {experiment_id!r}")
    return found
