"""The service's version: info.version of /api/schema and `--version` of its management commands."""

from __future__ import annotations

VERSION = "1.0.0"
