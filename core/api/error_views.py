"""Problem+json answers for requests that never reach an API view."""

from __future__ import annotations

from core.api.problems import problem_response


def not_found(request, exception=None):
    return problem_response(status=404, code="not_found", title="Not found", detail="No such path.")


def server_error(request):
    return problem_response(
        status=500, code="internal_error", title="Internal server error", detail="An unexpected error occurred."
    )


def bad_request(request, exception=None):
    return problem_response(status=400, code="invalid_request", title="Bad request", detail="The request is malformed.")


def permission_denied(request, exception=None):
    return problem_response(
        status=403, code="permission_denied", title="Permission denied", detail="You may not access this resource."
    )
