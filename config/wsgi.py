import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from core.api.chunked import with_chunked_bodies
from core.edge.application import EdgeApplication

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_application = get_wsgi_application()

# Imported once Django is set up. Importing the URLconf here, rather than on Django's first request, also
# imports every view, admin and serializer module: gunicorn preloads this module in its master
# (deploy/gunicorn.conf.py), so no worker's first requests wait for the imports.
from config.urls import API_VIEWS, EDGE_ROUTES, OFREP_BULK, OFREP_FLAG_PREFIX, OFREP_VIEWS  # noqa: E402
from core.edge.json_endpoint import JsonEndpoint  # noqa: E402
from core.edge.ofrep import OfrepEndpoint  # noqa: E402
from core.healthz import HealthzEndpoint  # noqa: E402


def ofrep_flag_key(request) -> dict[str, str]:
    """The single evaluation's flag: the path below OFREP_FLAG_PREFIX, without its trailing slash."""
    return {"key": request.path_info.removeprefix(f"/{OFREP_FLAG_PREFIX}").removesuffix("/")}


def served_application():
    """The hot endpoints at the edge (core/edge), each path with and without its trailing slash as the
    URLconf's routes answer, and Django's handler behind it; bodies sent chunked made whole first."""
    endpoints = {
        "healthz": HealthzEndpoint(),
        **{route: JsonEndpoint(API_VIEWS[route], name=route) for route in EDGE_ROUTES},
        OFREP_BULK: OfrepEndpoint(OFREP_VIEWS["ofrep-evaluate-flags"], name="ofrep-evaluate-flags", etag=True),
    }
    flag = OfrepEndpoint(OFREP_VIEWS["ofrep-evaluate-flag"], name="ofrep-evaluate-flag", arguments=ofrep_flag_key)
    edge = EdgeApplication(
        {f"/{route}{slash}": endpoint for route, endpoint in endpoints.items() for slash in ("", "/")},
        django_application,
        prefixes={f"/{OFREP_FLAG_PREFIX}": flag},
    )
    return with_chunked_bodies(edge, limit=lambda: settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


application = served_application()
