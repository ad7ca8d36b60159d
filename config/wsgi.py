import os
from importlib import import_module

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from core.api.chunked import with_chunked_bodies
from core.database import request_timeouts_apply

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Before any connection exists: the web server's connections, and only theirs, are bounded.
request_timeouts_apply()
django_application = get_wsgi_application()
# Django imports the URLconf, and with it every view, admin and serializer module, on the
# first request. Done here instead: gunicorn preloads this module in its master (deploy/
# gunicorn.conf.py), so no worker's first requests wait for the imports.
import_module(settings.ROOT_URLCONF)

application = with_chunked_bodies(django_application, limit=lambda: settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
