"""The answer to a staff console form that fails Django's CSRF check (settings.CSRF_FAILURE_VIEW)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A 403 page that says why, instead of Django's page, which gives the reason only with DEBUG on."""
    # The likely cause when a script signs in over plain HTTP: it keeps cookies marked Secure to itself, as
    # curl and python-requests do, while a browser sends them to http://localhost, which it counts as secure.
    secure_cookies = [
        name
        for name, secure in (
            ("CSRF_COOKIE_SECURE", settings.CSRF_COOKIE_SECURE),
            ("SESSION_COOKIE_SECURE", settings.SESSION_COOKIE_SECURE),
        )
        if secure
    ]
    return render(
        request,
        "staff/csrf_failure.html",
        {
            **admin.site.each_context(request),
            "title": "Form refused: the CSRF check failed",
            "reason": reason,
            "secure_cookies_over_http": secure_cookies if not request.is_secure() else [],
        },
        status=403,
    )
