"""The request body parser of every API view."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class JsonParser(JSONParser):
    """DRF's JSON parser, but input nested deeper than the parser can recurse is malformed JSON (400), not a 500.

    Python's json module recurses once per level of nesting and gives up at the
    interpreter's recursion limit (about 1,000 levels), within microseconds however
    deep the input goes; no request of this API nests more than three levels.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
