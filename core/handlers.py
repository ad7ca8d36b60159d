"""Two Django WSGI handlers behind one application: API requests through settings.API_MIDDLEWARE, every
other request through settings.MIDDLEWARE.

The API's routes (core.api.paths.is_api_request) pass by the staff
console's middleware, CSRF (their views are exempt), static files and the health
check: settings.py says why each does nothing for them. Passing them by still
cost a call, a check or a cookie read each, a tenth of a small request's time in
the service's own process (bench/run framework). One handler per chain keeps the
choice to one look at the path, before either handler starts.
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
    """Django's WSGI handler, with settings.API_MIDDLEWARE as its middleware."""

    def load_middleware(self, is_async: bool = False) -> None:
        with _middleware(settings.API_MIDDLEWARE):
            super().load_middleware(is_async)


class SplitApplication:
    """The WSGI application: API paths to an ApiHandler, everything else to Django's own handler."""

    def __init__(self) -> None:
        self.pages = WSGIHandler()
        self.api = ApiHandler()

    def __call__(self, environ: dict[str, Any], start_response) -> Iterable[bytes]:
        handler = self.api if is_api_path(environ.get("PATH_INFO", "")) else self.pages
        return handler(environ, start_response)
