"""Request bodies sent with `Transfer-Encoding: chunked` and no Content-Length.

HTTP/1.1 clients may stream a body in chunks without announcing its length
(requests and httpx do for a generator body, curl with `-H 'Transfer-Encoding:
chunked'`). The server (gunicorn) de-chunks it, but Django reads a body only up to
CONTENT_LENGTH, and takes a missing one as 0: such a request arrived empty.
This WSGI wrapper reads the de-chunked body first, at most one byte past the body
size limit, and hands Django a body of known length; a longer one keeps that
length, so BodySizeLimitMiddleware answers it 413 like any other.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_chunked_bodies(application: WsgiApp, *, limit: Callable[[], int]) -> WsgiApp:
    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not environ.get("CONTENT_LENGTH"):
            body = environ["wsgi.input"].read(limit() + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return application(environ, start_response)

    return wrapped
