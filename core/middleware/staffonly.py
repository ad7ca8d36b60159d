"""The staff console's middleware, passed by on API requests."""

from __future__ import annotations

import functools
import re

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.urls import URLPattern, get_resolver


@functools.cache
def _api_path(urlconf: str) -> re.Pattern:
    """One pattern for the URLconf's routes to views marked `sessionless` (core.api.views.JsonApiView): the API's.

    Read from the URLconf Django loads, not imported, so that no middleware pulls in every app's views; one
    regular expression, not one per route, as it is matched up to four times a request.
    """
    routes = [
        f"(?:{route.pattern.regex.pattern})"
        for route in get_resolver(urlconf).url_patterns
        if isinstance(route, URLPattern) and getattr(getattr(route.callback, "view_class", None), "sessionless", False)
    ]
    return re.compile("|".join(routes) or "(?!)")


def is_api_request(request) -> bool:
    return _api_path(settings.ROOT_URLCONF).fullmatch(request.path_info.removeprefix("/")) is not None


def staff_only(middleware_class: type) -> type:
    """`middleware_class` as it is for the staff console and the pages, passed by on API requests.

    On the hot path each of these is work per request (a session store, a lazy
    user, a message store) that an API request never uses.
    """

    class StaffOnly(middleware_class):
        def __call__(self, request):
            if is_api_request(request):
                return self.get_response(request)
            return super().__call__(request)

    StaffOnly.__name__ = StaffOnly.__qualname__ = f"StaffOnly{middleware_class.__name__}"
    StaffOnly.__doc__ = f"{middleware_class.__name__}, not run on API requests (core.middleware.staffonly.staff_only)."
    return StaffOnly


StaffOnlySessionMiddleware = staff_only(SessionMiddleware)
StaffOnlyAuthenticationMiddleware = staff_only(AuthenticationMiddleware)
StaffOnlyMessageMiddleware = staff_only(MessageMiddleware)
