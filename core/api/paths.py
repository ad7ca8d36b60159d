"""Which requests are API requests: those for the routes of views marked `sessionless` (core.api.views.JsonApiView).

Read from the URLconf Django loads, not imported, so that the middleware that asks does not pull in every
app's views.
"""

from __future__ import annotations

import functools
import re

from django.conf import settings
from django.urls import URLPattern, get_resolver


@functools.cache
def _api_path(urlconf: str) -> re.Pattern:
    """One pattern for the URLconf's API routes: one regular expression, not one per route, as it is matched
    up to four times a request."""
    routes = [
        f"(?:{route.pattern.regex.pattern})"
        for route in get_resolver(urlconf).url_patterns
        if isinstance(route, URLPattern) and getattr(getattr(route.callback, "view_class", None), "sessionless", False)
    ]
    return re.compile("|".join(routes) or "(?!)")


def is_api_path(path_info: str) -> bool:
    """Whether a request for this path (a WSGI PATH_INFO, Django's path_info) is an API request."""
    return _api_path(settings.ROOT_URLCONF).fullmatch(path_info.removeprefix("/")) is not None


def is_api_request(request) -> bool:
    return is_api_path(request.path_info)
