import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from core.api.chunked import with_chunked_bodies
from core.edge.application import EdgeApplication

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_application = get_wsgi_application()

from config.edge import edge_routes  # noqa: E402  (once Django is set up)


def served_application():
    """The hot endpoints at the edge (core/edge), and Django's handler behind it; bodies sent chunked made
    whole first."""
    endpoints, prefixes = edge_routes()
    edge = EdgeApplication(endpoints, django_application, prefixes=prefixes)
    return with_chunked_bodies(edge, limit=lambda: settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


application = served_application()
