from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import CommandError
from django.utils import timezone

from core.commands import ServiceCommand
from tokens.errors import ApiTokenError
from tokens.models import ApiToken, Role
from tokens.selectors import api_token_find
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
        parser.add_argument(
            "--keep-in",
            type=Path,
            metavar="FILE",
            help="print the token kept in FILE again while it is active with this name and role; otherwise create "
            "one and keep it there, readable by its owner only (mode 0600)",
        )

    def handle(
        self,
        *args,
        name: str,
        role: str,
        expires_in_days: int | None,
        replace: bool,
        keep_in: Path | None,
        **options,
    ) -> None:
        if keep_in is not None:
            kept = self.kept(keep_in, name=name, role=role)
            if kept is not None:
                api_token, token = kept
                expires = timestamp(api_token.expires_at, empty="never")
                self.stdout.write(
                    f"kept token {api_token.name!r} (role {api_token.role}, expires {expires}), created "
                    f"{timestamp(api_token.created_at)}, from {keep_in}:"
                )
                self.stdout.write(token)
                return
        try:
            api_token, token, replaced = self.create(
                name=name, role=role, expires_in_days=expires_in_days, replace=replace
            )
        except ApiTokenError as exc:
            raise CommandError(str(exc)) from None
        if keep_in is not None:
            self.keep(keep_in, token)
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

    def kept(self, path: Path, *, name: str, role: str) -> tuple[ApiToken, str] | None:
        """The token kept in path and its clear value, if it is still active under this name and role."""
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
        api_token = api_token_find(token=token)
        if api_token is None or (api_token.name, api_token.role) != (name, role):
            return None
        if api_token.state(now=timezone.now()) != "active":
            return None
        return api_token, token

    def keep(self, path: Path, token: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            # A file that existed keeps its mode through O_CREAT: the secret is its owner's alone either way.
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(token + "\n")
        except OSError as exc:
            raise CommandError(f"cannot keep the token in {path}: {exc.strerror or exc}") from None
