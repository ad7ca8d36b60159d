"""The staff console's middleware, passed by on API requests."""

from __future__ import annotations

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware

from core.api.paths import is_api_request


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
