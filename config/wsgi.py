import os
from importlib import import_module

import django
from django.conf import settings

from core.api.chunked import with_chunked_bodies
from core.database import request_timeouts_apply
from core.wsgi_handlers import SplitApplication

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Before any connection exists: the web server's connections, and only theirs, are bounded.
request_timeouts_apply()
# As django.core.wsgi.get_wsgi_application does, with the API's handler beside Django's (core/wsgi_handlers.py).
django.setup(set_prefix=False)
django_application = SplitApplication()
# Django imports the URLconf, and with it every view, admin and serializer module, on the
# first request. Done here instead: gunicorn preloads this module in its master (deploy/
# gunicorn.conf.py), so no worker's first requests wait for the imports.
import_module(settings.ROOT_URLCONF)

application = with_chunked_bodies(django_application, limit=lambda: settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
