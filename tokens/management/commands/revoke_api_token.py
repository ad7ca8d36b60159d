from __future__ import annotations

from django.core.management.base import CommandError

from core.commands import ServiceCommand
from tokens.errors import ApiTokenError
from tokens.models import ApiToken
from tokens.services import api_token_revoke
from tokens.timestamps import timestamp


class Command(ServiceCommand):
    help = "Revoke an API token at once (other server processes stop accepting it within API_TOKEN_CACHE_SECONDS)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--name", required=True)

    def handle(self, *args, name: str, **options) -> None:
        try:
            api_token, changed = self.revoke(name=name)
        except ApiTokenError as exc:
            raise CommandError(str(exc)) from None
        if changed:
            self.stdout.write(f"revoked token {api_token.name!r}")
        else:
            self.stdout.write(f"token {api_token.name!r} was already revoked at {timestamp(api_token.revoked_at)}")

    def revoke(self, *, name: str) -> tuple[ApiToken, bool]:
        return api_token_revoke(name=name)
