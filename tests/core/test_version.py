"""`--version` of the management commands: the service's own print the service's version (core/version.py),
Django's own print Django's."""

from __future__ import annotations

import django
import pytest
from django.core.management import get_commands, load_command_class

from core.version import VERSION

SERVICE_APPS = {"assignments", "idlinks", "tokens"}
SERVICE_COMMANDS = sorted(name for name, app in get_commands().items() if app in SERVICE_APPS)


def version_printed(name: str, capsys) -> str:
    command = load_command_class(get_commands()[name], name)
    with pytest.raises(SystemExit) as exit_info:
        command.create_parser("manage.py", name).parse_args(["--version"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out.strip()


def test_version__service_commands__found():
    assert {"apply_resources", "export_assignments", "export_id_links", "create_api_token"} <= set(SERVICE_COMMANDS)


@pytest.mark.parametrize("name", SERVICE_COMMANDS)
def test_version__service_command__prints_the_service_version(name, capsys):
    assert version_printed(name, capsys) == VERSION


@pytest.mark.parametrize("name", ["migrate", "createsuperuser"])
def test_version__django_command__prints_djangos_version(name, capsys):
    assert version_printed(name, capsys) == django.get_version()
