"""The edge's endpoints by path (core/edge), for both server interfaces: config.wsgi and config.asgi.

Imported once Django is set up. Importing the URLconf here, rather than on Django's first request, also
imports every view, admin and serializer module: gunicorn preloads the application in its master
(deploy/gunicorn.conf.py), so no worker's first requests wait for the imports.
"""

from __future__ import annotations

from config.urls import API_VIEWS, EDGE_ROUTES, OFREP_BULK, OFREP_FLAG_PREFIX, OFREP_VIEWS
from core.edge.answer import Endpoint
from core.edge.json_endpoint import JsonEndpoint
from core.edge.ofrep import OfrepEndpoint
from core.healthz import HealthzEndpoint


def ofrep_flag_key(request) -> dict[str, str]:
    """The single evaluation's flag: the path below OFREP_FLAG_PREFIX, without its trailing slash."""
    return {"key": request.path_info.removeprefix(f"/{OFREP_FLAG_PREFIX}").removesuffix("/")}


def edge_routes() -> tuple[dict[str, Endpoint], dict[str, Endpoint]]:
    """The hot endpoints by path, each path with and without its trailing slash as the URLconf's routes
    answer them; and the endpoints of the paths below a prefix."""
    endpoints = {
        "healthz": HealthzEndpoint(),
        **{route: JsonEndpoint(API_VIEWS[route], name=route) for route in EDGE_ROUTES},
        OFREP_BULK: OfrepEndpoint(OFREP_VIEWS["ofrep-evaluate-flags"], name="ofrep-evaluate-flags", etag=True),
    }
    flag = OfrepEndpoint(OFREP_VIEWS["ofrep-evaluate-flag"], name="ofrep-evaluate-flag", arguments=ofrep_flag_key)
    paths = {f"/{route}{slash}": endpoint for route, endpoint in endpoints.items() for slash in ("", "/")}
    return paths, {f"/{OFREP_FLAG_PREFIX}": flag}
