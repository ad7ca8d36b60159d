"""The clear token is stored nowhere: every table's text is searched for it after real use."""

from __future__ import annotations

import json
import re

from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from tests.helpers.database import all_table_text

TOKEN_IN_PAGE = re.compile(r"[0-9a-f]{12}\.[A-Za-z0-9_-]{43}")


def test_tokens__created_by_command_and_admin_and_used__secret_in_no_table(demo_config, capsys):
    # Given a token made by the command and one made in the admin
    call_command("create_api_token", "--name", "from-command", "--role", "admin")
    from_command = capsys.readouterr().out.splitlines()[-1]
    staff = Client()
    staff.force_login(User.objects.create_superuser("staff", "staff@example.com", password=None))
    added = staff.post("/admin/tokens/apitoken/add/", {"name": "from-admin", "role": "proxy"})
    from_admin = TOKEN_IN_PAGE.findall(added.content.decode())[0]

    # And both used (last_used_at written), one through each header, then one revoked
    for token, header in ((from_command, "HTTP_AUTHORIZATION"), (from_admin, "HTTP_AUTHENTICATION")):
        response = Client().post(
            "/experiment-assignments",
            json.dumps({"experiment_id": "checkout-button", "subject_ids": ["u1"]}),
            content_type="application/json",
            **{header: f"Bearer {token}"},
        )
        assert response.status_code == 200
    call_command("revoke_api_token", "--name", "from-admin")

    # Then no table holds either token, or the secret part of either
    text = all_table_text()
    assert "from-command" in text and "from-admin" in text
    for token in (from_command, from_admin):
        assert token not in text
        assert token.partition(".")[2] not in text
