"""The base of every JSON endpoint."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.views import APIView

JSON_MEDIA_TYPE = "application/json"


class JsonApiView(APIView):
    """An APIView that takes only `application/json` bodies.

    DRF alone would read a body without a Content-Type as empty data and answer
    with field errors; the contract calls that an unsupported media type.
    """

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        # A method the view lacks is answered 405 by dispatch, whatever the body's type.
        if request.method in ("POST", "PUT", "PATCH") and hasattr(self, request.method.lower()):
            media_type = (request.content_type or "").split(";")[0].strip().lower()
            if media_type != JSON_MEDIA_TYPE:
                raise exceptions.UnsupportedMediaType(media_type or "none")
