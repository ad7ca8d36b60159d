"""Two Django WSGI handlers behind one application: API requests through settings.API_MIDDLEWARE, every
other request through settings.MIDDLEWARE.

The API's routes (core.api.paths.is_api_request) pass by the staff
console's middleware, CSRF (their views are exempt), static files and the health
check: settings.py says why each does nothing for them. Passing them by still
cost a call, a check or a cookie read each, 3 to 4 % of a small request's CPU in
the service's own process (bench/results/history.md). One handler per chain
keeps the choice to one look at the path, before either handler starts, and
gives the API's the fast path in front of its chain.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from core.api.paths import is_api_path


@contextlib.contextmanager
def _middleware(entries: list[str]) -> Iterator[None]:
    # BaseHandler.load_middleware reads settings.MIDDLEWARE and nothing else. It runs once, at start-up,
    # before any request: no other thread sees the swap.
    complete = settings.MIDDLEWARE
    settings.MIDDLEWARE = entries
    try:
        yield
    finally:
        settings.MIDDLEWARE = complete


class ApiHandler(WSGIHandler):
    """Django's WSGI handler, with settings.API_MIDDLEWARE as its middleware, behind the fast path of a valid
    request (core/api/fastpath.py) while that does what the chain does."""

    def __init__(self) -> None:
        super().__init__()
        # Imported once Django is set up (config.wsgi imports this module before): it imports DRF, whose
        # settings import the authentication classes and with them an app's models.
        from core.api.fastpath import FastPath

        self.fast_path = FastPath() if FastPath.applies() else None

    def load_middleware(self, is_async: bool = False) -> None:
        with _middleware(settings.API_MIDDLEWARE):
            super().load_middleware(is_async)

    def __call__(self, environ: dict[str, Any], start_response) -> Iterable[bytes]:
        response = None if self.fast_path is None else self.fast_path.respond(environ, type(self))
        if response is None:
            return super().__call__(environ, start_response)
        # As WSGIHandler.__call__ hands Django's response to the server.
        start_response(
            f"{response.status_code} {response.reason_phrase}",
            [*response.items(), *(("Set-Cookie", cookie.output(header="")) for cookie in response.cookies.values())],
        )
        return response


class SplitApplication:
    """The WSGI application: API paths to an ApiHandler, everything else to Django's own handler."""

    def __init__(self) -> None:
        self.pages = WSGIHandler()
        self.api = ApiHandler()

    def __call__(self, environ: dict[str, Any], start_response) -> Iterable[bytes]:
        handler = self.api if is_api_path(environ.get("PATH_INFO", "")) else self.pages
        return handler(environ, start_response)
