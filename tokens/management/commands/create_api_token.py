from __future__ import annotations

from django.core.management.base import CommandError
from django.utils import timezone

from core.commands import ServiceCommand
from tokens.errors import ApiTokenError
from tokens.models import ApiToken, Role
from tokens.services import api_token_create, api_token_replace, expiry_in_days
from tokens.timestamps import timestamp


class Command(ServiceCommand):
    help = "Create an API token and print it alone on the last line; it is never shown again."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--name", required=True, help="unique among live tokens: letters, digits, '.', '_', '-'")
        parser.add_argument("--role", choices=Role.values, default=Role.PROXY, help="default: proxy")
        parser.add_argument("--expires-in-days", type=int, metavar="N", help="default: never expires")
        parser.add_argument(
            "--replace", action="store_true", help="revoke the live token of that name, if any, in the same transaction"
        )

    def handle(self, *args, name: str, role: str, expires_in_days: int | None, replace: bool, **options) -> None:
        try:
            api_token, token, replaced = self.create(
                name=name, role=role, expires_in_days=expires_in_days, replace=replace
            )
        except ApiTokenError as exc:
            raise CommandError(str(exc)) from None
        expires = timestamp(api_token.expires_at, empty="never")
        replaced_note = f", replacing the one created {timestamp(replaced.created_at)}" if replaced else ""
        self.stdout.write(
            f"created token {api_token.name!r} (role {api_token.role}, expires {expires}){replaced_note}; "
            "it is shown only now:"
        )
        self.stdout.write(token)

    def create(
        self, *, name: str, role: str, expires_in_days: int | None, replace: bool
    ) -> tuple[ApiToken, str, ApiToken | None]:
        expires_at = expiry_in_days(expires_in_days, now=timezone.now())
        if replace:
            return api_token_replace(name=name, role=role, expires_at=expires_at)
        api_token, token = api_token_create(name=name, role=role, expires_at=expires_at)
        return api_token, token, None
