from __future__ import annotations

from django.utils import timezone

from core.commands import DataOutputCommand
from tokens.selectors import api_token_list
from tokens.timestamps import timestamp

COLUMNS = ["name", "role", "state", "created", "expires", "last used", "revoked"]


class Command(DataOutputCommand):
    help = "List API tokens: name, role, state, created, expires, last used, revoked. Never the secret."

    def handle(self, *args, **options) -> None:
        rows = self.rows()
        if not rows:
            self.stdout.write("no API tokens")
            return
        widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
        for row in [COLUMNS, *rows]:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())

    def rows(self) -> list[list[str]]:
        now = timezone.now()
        return [
            [
                api_token.name,
                api_token.role,
                api_token.state(now=now),
                timestamp(api_token.created_at),
                timestamp(api_token.expires_at, empty="never"),
                timestamp(api_token.last_used_at),
                timestamp(api_token.revoked_at),
            ]
            for api_token in api_token_list()
        ]
