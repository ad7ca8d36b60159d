"""The response body renderer of every API view."""

from __future__ import annotations

import orjson
from rest_framework.renderers import BaseRenderer


class JsonRenderer(BaseRenderer):
    """Compact UTF-8 JSON, as DRF's JSONRenderer writes it with UNICODE_JSON and COMPACT_JSON,
    but rendered by orjson: the answer to 1,000 subjects costs a fraction of the json module's time."""

    media_type = "application/json"
    format = "json"
    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data)
