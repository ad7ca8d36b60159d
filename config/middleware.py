"""Request guards that must hold before any view runs."""

from __future__ import annotations

from django.conf import settings

from config.problems import problem_response


class BodySizeLimitMiddleware:
    """Refuse bodies over DATA_UPLOAD_MAX_MEMORY_SIZE with 413 before anything reads them.

    DRF parses from the request stream, which bypasses Django's own size check on
    `request.body`, so the limit is enforced here on the declared length.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if length > limit:
            return problem_response(
                status=413,
                code="payload_too_large",
                title="Payload too large",
                detail=f"The request body is {length} bytes; the limit is {limit} bytes.",
            )
        return self.get_response(request)
