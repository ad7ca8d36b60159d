"""The base of every JSON endpoint, and what it does on every request kept to what it must do."""

from __future__ import annotations

from typing import Any

from django.db import connection
from rest_framework import exceptions, serializers
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from core.api.renderers import JsonRenderer
from core.steps import steps_run

JSON_MEDIA_TYPE = "application/json"


def json_required(content_type: str | None) -> None:
    """Raise 415 unless the Content-Type (its parameters aside) is application/json."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        raise exceptions.UnsupportedMediaType(media_type or "none")


class RequestBody:
    """A request serializer built once per process and run on every request's data.

    Building a DRF serializer deep-copies its declared fields, which cost more than
    the validation itself and than the hot path's SQL. The fields it builds once
    are stateless, so one instance validates every request, from every thread;
    the errors are the ones `is_valid(raise_exception=True)` raises.
    """

    def __init__(self, serializer_class: type[serializers.Serializer]) -> None:
        self._serializer = serializer_class()
        # The fields are bound on first use: now, at import, before gunicorn forks its workers.
        self._serializer.fields  # noqa: B018

    def validate(self, data: Any) -> dict[str, Any]:
        try:
            return self._serializer.run_validation(data)
        except ValidationError as exc:
            detail = exc.detail
            if isinstance(detail, list) and len(detail) == 1 and getattr(detail[0], "code", None) == "null":
                # A `null` body, worded as Serializer.errors words it.
                detail = {api_settings.NON_FIELD_ERRORS_KEY: [ErrorDetail("No data provided", code="null")]}
            raise ValidationError(detail) from None


class JsonApiView(APIView):
    """An APIView that takes only `application/json` bodies and always answers JSON.

    DRF alone would read a body without a Content-Type as empty data and answer
    with field errors; the API calls that an unsupported media type. There is
    one renderer, so the content negotiation DRF runs per request (parsing the
    Accept header against every renderer) is replaced by that fixed answer.
    """

    renderer_classes = [JsonRenderer]
    renderer = JsonRenderer()
    # Reads no session, Django user or message: the staff console's middleware passes its routes by
    # (core.middleware.staffonly).
    sessionless = True

    # What a POST answers, as steps (core/steps.py): `answer_steps(data, vendor=...) -> Steps[dict]` for the
    # data `body` validated, its statements in the form `vendor` takes ("postgresql", "citus" or "sqlite").
    # The edge (core/edge) serves the hot endpoints' views from these, on Django's connection or on the event
    # loop's; DRF every other view's and the schema.
    answer_steps = None
    body: RequestBody

    @staticmethod
    def vendor() -> str:
        """The form of the statements that answer_steps sends on Django's connection; an app whose tables
        take another form on Citus answers "citus" there."""
        return connection.vendor

    def answer(self, data: dict[str, Any], **arguments: Any) -> dict[str, Any]:
        """answer_steps sent on Django's connection."""
        return steps_run(self.answer_steps(data, vendor=self.vendor(), **arguments))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # DRF builds these for every request. They keep no state of a request, so each
        # endpoint builds them once: on the hot path their construction showed in profiles.
        cls.parsers = [parser() for parser in cls.parser_classes]
        cls.parser = cls.parsers[0]
        cls.authenticators = [authentication() for authentication in cls.authentication_classes]
        cls.permissions = [permission() for permission in cls.permission_classes]
        cls.allow = ", ".join(method.upper() for method in cls.http_method_names if hasattr(cls, method))

    def answered(self, request) -> Response:
        """The response to a POST: `answer` for the validated body."""
        return Response(self.answer(self.body.validate(request.data)))

    def get_parsers(self):
        return self.parsers

    def get_authenticators(self):
        return self.authenticators

    def get_permissions(self):
        return self.permissions

    @property
    def default_response_headers(self):
        return {"Allow": self.allow}

    def perform_content_negotiation(self, request, force=False):
        return self.renderer, JSON_MEDIA_TYPE

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        # A method the view lacks is answered 405 by dispatch, whatever the body's type.
        if request.method in ("POST", "PUT", "PATCH") and hasattr(self, request.method.lower()):
            json_required(request.content_type)
