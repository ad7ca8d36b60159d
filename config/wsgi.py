import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from config.chunked import with_chunked_bodies

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = with_chunked_bodies(get_wsgi_application(), limit=lambda: settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
