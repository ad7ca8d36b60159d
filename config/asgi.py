from concurrent.futures import ThreadPoolExecutor

from a2wsgi import WSGIMiddleware
from django.conf import settings

from config.wsgi import application as wsgi_application
from core.edge.asgi import EdgeAsgiApplication
from core.edge.pool import PoolDriver

# The endpoints' function steps (a cache's miss) run in these threads, on Django's connection.
STEP_THREADS = 2
# /healthz waits for its probe in threads of its own: the others may all wait for a database that hangs.
PROBE_THREADS = 2


def served_application():
    """The hot endpoints at the edge (core/edge), on the event loop and a database pool of DATABASE_POOL_SIZE
    connections; every other request to the WSGI application, in DATABASE_POOL_SIZE threads."""
    # The URLconf's views, once config.wsgi has set Django up.
    from config.edge import edge_routes

    endpoints, prefixes = edge_routes()
    return EdgeAsgiApplication(
        endpoints,
        WSGIMiddleware(wsgi_application, workers=settings.DATABASE_POOL_SIZE),
        prefixes=prefixes,
        driver=PoolDriver(size=settings.DATABASE_POOL_SIZE),
        threads=ThreadPoolExecutor(max_workers=STEP_THREADS, thread_name_prefix="edge-steps"),
        probe_threads=ThreadPoolExecutor(max_workers=PROBE_THREADS, thread_name_prefix="healthz"),
    )


application = served_application()
