"""The answer to a sign-in that django-axes refuses (settings.AXES_LOCKOUT_CALLABLE)."""

from __future__ import annotations

from axes.helpers import get_client_username, get_cool_off
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def lockout_response(request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None):
    """The staff console's own page, 429 with Retry-After, instead of axes' bare line of text."""
    cool_off_seconds = int(get_cool_off(request).total_seconds())
    response = render(
        request,
        "staff/locked_out.html",
        {
            **admin.site.each_context(request),
            "title": "Too many failed sign-ins",
            "username": get_client_username(request, credentials) or "",
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "cool_off_minutes": cool_off_seconds // 60,
        },
        status=429,
    )
    response["Retry-After"] = str(cool_off_seconds)
    return response
