"""The floor of any Python HTTP service: the service's answers from plain WSGI, no framework.

bench/run serves it with the service's own gunicorn command and config file
(`gunicorn -c deploy/gunicorn.conf.py bench.minimal_app:application`), so the
gap between the two is what Django, DRF and the service's own checks cost.
It sends the service's statements (assignments/storage.py's, an identifier
link's INSERT ... ON CONFLICT DO NOTHING) on one psycopg connection per thread,
autocommit, with psycopg's default binding: parameters bound by the server and
each statement prepared from its fifth run, as any plain psycopg program gets
(and as the raw-SQL baseline does). It checks the token by comparing it with
BENCH_TOKEN, validates little, reads the experiment and the subject types once
per process and ignores the experiment's resource_version. /healthz touches no
database.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime

import psycopg

from assignments.storage import POSTGRES_FETCH, POSTGRES_INSERT
from bench.baseline import Experiment, experiment_read, link_store, subject_types_read

AUTHORIZATION = f"Bearer {os.environ['BENCH_TOKEN']}"
_local = threading.local()
_experiments: dict[str, Experiment] = {}
_subject_types: dict[str, int] = {}


class Invalid(ValueError):
    pass


def _connection() -> psycopg.Connection:
    if not hasattr(_local, "connection"):
        _local.connection = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
    return _local.connection


def _fetch(connection: psycopg.Connection, experiment: Experiment, subject_ids: list[str]) -> dict[str, int]:
    rows = connection.execute(POSTGRES_FETCH, [experiment.pk, json.dumps(subject_ids), experiment.pk])
    return {subject_id: variant for subject_id, variant, _ in rows if subject_id is not None}


def assign(body: dict) -> dict:
    experiment_id, subject_ids = body.get("experiment_id"), body.get("subject_ids")
    if not isinstance(experiment_id, str) or not isinstance(subject_ids, list) or not subject_ids:
        raise Invalid("experiment_id must be a string and subject_ids a non-empty list")
    if not all(isinstance(subject_id, str) for subject_id in subject_ids):
        raise Invalid("subject_ids must be strings")
    connection = _connection()
    if experiment_id.lower() not in _experiments:
        _experiments[experiment_id.lower()] = experiment_read(connection, experiment_id=experiment_id)
    experiment = _experiments[experiment_id.lower()]
    distinct = list(dict.fromkeys(subject_ids))
    stored = _fetch(connection, experiment, distinct)
    missing = sorted(subject_id for subject_id in distinct if subject_id not in stored)
    if missing:
        rows = [[subject_id, experiment.allocation.variant_for(experiment.salt, subject_id)] for subject_id in missing]
        params = [experiment.pk, experiment.cohort, datetime.now(UTC), json.dumps(rows)]
        inserted = dict(connection.execute(POSTGRES_INSERT, params).fetchall())
        stored.update(inserted)
        lost = [subject_id for subject_id in missing if subject_id not in inserted]
        if lost:
            stored.update(_fetch(connection, experiment, lost))
    return {"assignments": {subject_id: experiment.variant_keys[stored[subject_id]] for subject_id in distinct}}


def link(body: dict) -> dict:
    identifiers = body.get("identifiers")
    if not isinstance(identifiers, list) or len(identifiers) != 2:
        raise Invalid("identifiers must be a list of 2")
    connection = _connection()
    if not _subject_types:
        _subject_types.update(subject_types_read(connection))
    try:
        nodes = sorted((_subject_types[item["subject_type"].lower()], item["subject_id"]) for item in identifiers)
    except (AttributeError, KeyError, TypeError):
        raise Invalid("each identifier needs an active subject_type and a subject_id") from None
    if nodes[0] == nodes[1] or not all(isinstance(subject_id, str) for _, subject_id in nodes):
        raise Invalid("two different string subject IDs are needed")
    link_store(connection, nodes)
    return {"success": True}


ROUTES = {"/experiment-assignments": assign, "/id-link": link}


def _answer(environ) -> tuple[str, dict]:
    method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
    if path == "/healthz" and method == "GET":
        return "200 OK", {"status": "ok"}
    if path not in ROUTES or method != "POST":
        return "404 Not Found", {"code": "not_found"}
    if environ.get("HTTP_AUTHORIZATION") != AUTHORIZATION:
        return "401 Unauthorized", {"code": "not_authenticated"}
    try:
        body = json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
        if not isinstance(body, dict):
            raise Invalid("the body must be a JSON object")
        return "200 OK", ROUTES[path](body)
    except LookupError as error:
        return "404 Not Found", {"code": "experiment_not_found", "detail": str(error)}
    except ValueError as error:
        return "400 Bad Request", {"code": "invalid_request", "detail": str(error)}


def application(environ, start_response):
    status, body = _answer(environ)
    content = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(content)))])
    return [content]
