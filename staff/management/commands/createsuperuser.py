"""Django's createsuperuser, but with --noinput a password from the environment must meet the password rules.

Django checks AUTH_PASSWORD_VALIDATORS only at the prompt (where it asks before letting a weak
password through); from DJANGO_SUPERUSER_PASSWORD it takes anything, `1` included, and scripts
are where a weak default password lives longest.
"""

from __future__ import annotations

import os

from django.contrib.auth.management.commands import createsuperuser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError


class Command(createsuperuser.Command):
    help = createsuperuser.Command.help + " With --noinput, DJANGO_SUPERUSER_PASSWORD must meet the password rules."

    def handle(self, *args, **options) -> None:
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        if not options["interactive"] and password is not None:
            self.validate(password=password, options=options)
        super().handle(*args, **options)

    def validate(self, *, password: str, options: dict) -> None:
        # The account as it will be, so that a password like the username or the email is refused too.
        fields = [self.UserModel.USERNAME_FIELD, *self.UserModel.REQUIRED_FIELDS]
        values = {
            field: options.get(field) or os.environ.get(f"DJANGO_SUPERUSER_{field.upper()}", "") for field in fields
        }
        try:
            validate_password(password, self.UserModel(**values))
        except ValidationError as exc:
            raise CommandError("DJANGO_SUPERUSER_PASSWORD is refused: " + " ".join(exc.messages)) from None
