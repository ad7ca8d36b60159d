"""An OpenFeature Remote Evaluation Protocol (OFREP) path at the edge: what the protocol adds to a JSON
endpoint's answers, in one place (docs/reference/api.md, "OpenFeature remote evaluation").

- Errors: the problem+json body gains OFREP's members, `errorCode` (the view's, else
  PARSE_ERROR for a body that is not JSON and GENERAL for the failures every endpoint
  shares: 401, 403, 405, 413, 415, 429, 500, 503), `errorDetails` (the detail) and,
  on a path naming a flag, `key` as requested. A bad token is answered before an
  oversized body (JsonEndpoint's late body limit).
- Bulk answers: a strong ETag of the body, `Cache-Control: private, no-cache`, and
  304 for an `If-None-Match` that matches it (RFC 9110: a list, `*`, weak comparison).
- CORS, for the origins of OFREP_CORS_ALLOWED_ORIGINS only: a preflight is answered
  204 without a token, and every answer to such an origin names it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.utils.cache import patch_vary_headers
from django.utils.http import parse_etags

from core.api.problems import PROBLEM_CONTENT_TYPE
from core.api.views import JsonApiView
from core.edge.json_endpoint import JsonEndpoint
from core.edge.middleware import django_chain
from core.steps import Steps

GENERAL = "GENERAL"
PARSE_ERROR = "PARSE_ERROR"
BULK_CACHE_CONTROL = "private, no-cache"
CORS_ALLOWED_HEADERS = "Authorization, Authentication, X-API-Key, Content-Type, If-None-Match"
# How long a browser may keep a preflight's answer: a change of the allowed origins reaches browsers that late.
CORS_MAX_AGE_SECONDS = "600"


def body_etag(content: bytes) -> str:
    """A strong validator of the body: equal bodies, equal tags."""
    return f'"{hashlib.sha256(content).hexdigest()[:32]}"'


def if_none_match_matches(header: str, etag: str) -> bool:
    """Whether `If-None-Match` matches the current tag, as RFC 9110 (13.1.2) compares: weakly."""
    tags = parse_etags(header)
    return tags == ["*"] or any(tag.removeprefix("W/") == etag for tag in tags)


class OfrepEndpoint:
    """One OFREP path: the view's JsonEndpoint, and the protocol's errors, validators and CORS around it."""

    body_limited = False

    def __init__(
        self,
        view_class: type[JsonApiView],
        *,
        name: str,
        arguments: Callable[[HttpRequest], dict[str, str]] | None = None,
        etag: bool = False,
    ) -> None:
        """`arguments` as JsonEndpoint's, its `key` the flag named by the path; `etag`: a bulk answer's
        validator and 304."""
        self.name = name
        self.json = JsonEndpoint(view_class, name=name, arguments=arguments, body_limited=False)
        self.vendor = self.json.vendor
        self.arguments = arguments
        self.etag = etag
        self.chain = django_chain(self.dispatch)

    def respond(self, request: HttpRequest, *, vendor: str | None) -> Steps[HttpResponse]:
        """The answer through Django's middleware (django_chain), then OFREP's members and CORS added to
        every answer, the middleware's own refusals (a host not allowed, a failure) included."""
        response = yield from self.chain(request, vendor=vendor)
        # Every error here is a problem (core/api/error_views.py answers Django's own); the check keeps a body
        # that is not JSON from failing the answer.
        if response.status_code >= 400 and response.get("Content-Type") == PROBLEM_CONTENT_TYPE:
            self._problem_members(request, response)
        if self._allowed_origin(request):
            response["Access-Control-Allow-Origin"] = request.META["HTTP_ORIGIN"]
            response["Access-Control-Expose-Headers"] = "ETag"
            patch_vary_headers(response, ["Origin"])
        return response

    def dispatch(self, request: HttpRequest, *, vendor: str | None) -> Steps[HttpResponse]:
        """The answer before Django's middleware has its turn: a preflight's, or the view's with its validator."""
        if (
            request.method == "OPTIONS"
            and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in request.META
            and self._allowed_origin(request)
        ):
            response = HttpResponse(status=204)
            # No content, so no type of it.
            del response["Content-Type"]
            response["Access-Control-Allow-Methods"] = "POST"
            response["Access-Control-Allow-Headers"] = CORS_ALLOWED_HEADERS
            response["Access-Control-Max-Age"] = CORS_MAX_AGE_SECONDS
            return response
        response = yield from self.json.dispatch(request, vendor=vendor)
        if self.etag and response.status_code == 200:
            response = self._validated(request, response)
        return response

    @staticmethod
    def _allowed_origin(request: HttpRequest) -> bool:
        origin = request.META.get("HTTP_ORIGIN")
        return origin is not None and origin.lower() in settings.OFREP_CORS_ALLOWED_ORIGINS

    def _problem_members(self, request: HttpRequest, response: HttpResponse) -> None:
        body = json.loads(response.content)
        body.setdefault("errorCode", PARSE_ERROR if body.get("code") == "malformed_json" else GENERAL)
        body["errorDetails"] = body["detail"]
        if self.arguments is not None:
            body["key"] = self.arguments(request)["key"]
        response.content = json.dumps(body, ensure_ascii=False)
        # Set by CommonMiddleware for the body before.
        if response.has_header("Content-Length"):
            response["Content-Length"] = str(len(response.content))

    def _validated(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        etag = body_etag(response.content)
        header = request.META.get("HTTP_IF_NONE_MATCH")
        if header is not None and if_none_match_matches(header, etag):
            # RFC 9110 (8.6) allows a 304 only the Content-Length of the 200 it stands for; CommonMiddleware
            # would set that of its empty body.
            response = HttpResponseNotModified(headers={"Content-Length": str(len(response.content))})
        response["ETag"] = etag
        response["Cache-Control"] = BULK_CACHE_CONTROL
        return response
