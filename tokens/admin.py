"""Staff console for API tokens: create (the token is shown once), list, revoke.

Every write goes through tokens.services. A token's secret is never stored, so
it cannot be displayed later; the digest and prefix are shown read-only. Tokens
are revoked, never edited or deleted, so the table stays a record of who had access.
Admin-role tokens need a permission of their own to be created or revoked.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from tokens.errors import ApiTokenError
from tokens.models import ADMIN_ROLE_PERMISSION, ApiToken, Role
from tokens.selectors import api_token_live
from tokens.services import api_token_create, api_token_validate, api_tokens_revoke

ADMIN_ROLE_CODENAME, ADMIN_ROLE_PERMISSION_NAME = ADMIN_ROLE_PERMISSION


def may_manage_admin_role(user) -> bool:
    return user.has_perm(f"tokens.{ADMIN_ROLE_CODENAME}")


class ApiTokenAddForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["name", "role", "expires_at"]
        help_texts = {"expires_at": "Optional; empty means the token never expires."}

    def clean(self):
        cleaned = super().clean()
        name, role = cleaned.get("name"), cleaned.get("role")
        if name and role:
            try:
                api_token_validate(name=name, role=role, expires_at=cleaned.get("expires_at"), now=timezone.now())
            except ApiTokenError as exc:
                raise forms.ValidationError(str(exc)) from None
            if api_token_live(name=name) is not None:
                self.add_error("name", f"A token named {name!r} exists already; revoke it first or pick another name.")
        return cleaned


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "role", "state", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["role", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "=prefix"]
    ordering = ["-created_at"]
    show_full_result_count = False
    actions = ["revoke_selected"]
    readonly_fields = [
        "name",
        "role",
        "prefix",
        "secret_hash",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]

    @admin.display(description="state")
    def state(self, obj: ApiToken) -> str:
        return obj.state(now=timezone.now())

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else []

    def get_fields(self, request, obj=None):
        return ApiTokenAddForm.Meta.fields if obj is None else self.readonly_fields

    def has_change_permission(self, request, obj=None) -> bool:
        # A token is never edited: the change page is a read-only view.
        return False

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("tokens.change_apitoken")

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def formfield_for_choice_field(self, db_field, request, **kwargs):
        if db_field.name == "role" and not may_manage_admin_role(request.user):
            kwargs["choices"] = [(value, label) for value, label in Role.choices if value != Role.ADMIN]
            kwargs["error_messages"] = {
                "invalid_choice": f"%(value)s is not a role you may give: the admin role needs the permission "
                f"“{ADMIN_ROLE_PERMISSION_NAME}”."
            }
        return super().formfield_for_choice_field(db_field, request, **kwargs)

    def save_model(self, request, obj: ApiToken, form, change: bool) -> None:
        created, token = api_token_create(name=obj.name, role=obj.role, expires_at=obj.expires_at)
        obj.pk, obj.prefix, obj.secret_hash, obj.created_at = (
            created.pk,
            created.prefix,
            created.secret_hash,
            created.created_at,
        )
        # Only for response_add, on this request's own copy of the row.
        obj.token_shown_once = token

    def response_add(self, request, obj, post_url_continue=None):
        # The token is shown on this answer and nowhere else: a message would carry it in the
        # messages cookie (signed, not encrypted), readable by whatever sees the cookie jar.
        response = TemplateResponse(
            request,
            "admin/tokens/apitoken/created.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"Token {obj.name!r} created",
                "api_token": obj,
                "token": obj.token_shown_once,
            },
        )
        add_never_cache_headers(response)
        return response

    @admin.action(description="Revoke the selected tokens (at once; cannot be undone)", permissions=["revoke"])
    def revoke_selected(self, request, queryset) -> None:
        if not may_manage_admin_role(request.user) and queryset.filter(role=Role.ADMIN).exists():
            self.message_user(
                request,
                "Nothing revoked: revoking an admin-role token needs the permission "
                f"“{ADMIN_ROLE_PERMISSION_NAME}”. Select only proxy tokens, or ask someone who has it.",
                level=messages.ERROR,
            )
            return
        revoked = api_tokens_revoke(tokens=queryset)
        self.message_user(request, f"Revoked {revoked} token(s).", level=messages.SUCCESS)
