"""The floor of any Python HTTP service: the service's answers from plain WSGI, no framework.

bench/run hot-path serves it with the service's own gunicorn command and config
file (`gunicorn -c deploy/gunicorn.conf.py bench.minimal_app:application`), so the
gap between the two is what Django, DRF and the service's own checks cost.
It sends the service's statements (assignments/storage.py's fetch with its head
row, link walk and insert, through bench/baseline.py's pairs_store; an
identifier link's INSERT ... ON CONFLICT DO NOTHING) on one psycopg connection
per thread, autocommit, with psycopg's default binding: parameters bound by the
server and each statement prepared from its fifth run, as any plain psycopg
program gets (and as the raw-SQL baseline does). It checks the token by
comparing it with BENCH_TOKEN, validates little, reads the experiments and the
subject types once per process and ignores resource versions (the fetch's head
row). Attributes go to assignments/gates.py's gates through pairs_store, as in the
service: a subject they keep out gets the control and is listed with its reason. Their
values are not checked against the types the subject type declares, which the service
does. /healthz touches no database.

The OpenFeature evaluations (OFREP) are POST /assignments for one subject, answered in
OpenFeature's shape, with the same statements as that route: POST
/ofrep/v1/evaluate/flags/{key} for `context.targetingKey` in that experiment (its subject
type's identifier), and POST /ofrep/v1/evaluate/flags for every active experiment of
`context.subjectType` whose bulkEvaluation is true, in ID order, with the body's ETag (no
304: If-None-Match is not read). The other context entries are the attributes. Each flag
is {key, value, variant, reason, metadata}: the value is the variant's ID (the bench's
experiments have no valueType), the stored row's source and cohort, read by the fetch,
in the metadata. A winner-declared experiment is answered as not active (the bench
configures none).

The routes are written once, as bench/baseline.py's steps (generators that yield
each statement and get its rows back): this module's WSGI `application` sends them
on its thread's connection, bench/minimal_asgi.py's ASGI one on a connection of its
async pool, so both apps answer alike with the same statements.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading

import psycopg

from bench.baseline import (
    Attributes,
    Excluded,
    Experiment,
    Provenance,
    Steps,
    Stored,
    assignments_distributed,
    experiments_steps,
    link_steps,
    pairs_fetch_steps,
    pairs_store_steps,
    steps_run,
    subject_types_steps,
)

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


def _catalog() -> Steps[dict[str, Experiment]]:
    if not _experiments:
        _experiments.update((yield from experiments_steps()))
    return _experiments


def _types() -> Steps[dict[str, int]]:
    if not _subject_types:
        _subject_types.update((yield from subject_types_steps()))
    return _subject_types


def _attributes(value: object) -> dict:
    if not isinstance(value, dict) or not all(isinstance(item, dict) for item in value.values()):
        raise Invalid("attributes must map each subject to an object")
    return value


# Each route: the answer's steps for a request's body (bench/baseline.py's), with `distributed` the answer of
# assignments_distributed for the connection that sends them.


def assign(body: dict, *, distributed: bool) -> Steps[dict]:
    experiment_id, subject_ids = body.get("experiment_id"), body.get("subject_ids")
    if not isinstance(experiment_id, str) or not isinstance(subject_ids, list) or not subject_ids:
        raise Invalid("experiment_id must be a string and subject_ids a non-empty list")
    if not all(isinstance(subject_id, str) for subject_id in subject_ids):
        raise Invalid("subject_ids must be strings")
    attributes = _attributes(body.get("attributes", {}))
    experiment = (yield from _catalog()).get(experiment_id.lower())
    if experiment is None:
        raise LookupError(f"no experiment {experiment_id!r}")
    distinct = list(dict.fromkeys(subject_ids))
    stored, _, excluded = yield from pairs_store_steps(
        [experiment],
        {experiment.pk: distinct},
        experiment_pk=experiment.pk,
        attributes=attributes,
        distributed=distributed,
    )
    if not excluded:
        return {
            "assignments": {
                subject_id: experiment.variant_keys[stored[(experiment.pk, subject_id)]] for subject_id in distinct
            }
        }
    answer: dict = {"assignments": {}, "excluded": {}}
    for subject_id in distinct:
        reason = excluded.get((experiment.pk, subject_id))
        if reason is None:
            answer["assignments"][subject_id] = experiment.variant_keys[stored[(experiment.pk, subject_id)]]
        else:
            answer["assignments"][subject_id] = experiment.control_key
            answer["excluded"][subject_id] = reason
    return answer


def _subject_settled(
    identifiers: dict[int, str],
    experiments: list[Experiment],
    attributes: Attributes,
    *,
    store: bool,
    distributed: bool,
    provenance: Provenance | None = None,
) -> Steps[tuple[Stored, set[tuple[int, str]], Excluded]]:
    """One subject (an identifier per subject type pk) in these experiments: the stored variants (the active
    experiments of its types only), storing the missing ones when `store`, the pairs stored and those the gates
    kept out; each stored pair's cohort and source into `provenance` when given."""
    assignable = [e for e in experiments if e.status == "active" and e.subject_type_pk in identifiers]
    subjects = {e.pk: [identifiers[e.subject_type_pk]] for e in assignable}
    if not store:
        fetched = yield from pairs_fetch_steps(subjects, distributed=distributed, provenance=provenance)
        return fetched, set(), {}
    # One subject: each of its identifiers has the request's attributes.
    sent = dict.fromkeys(identifiers.values(), attributes)
    return (
        yield from pairs_store_steps(
            assignable, subjects, attributes=sent, distributed=distributed, provenance=provenance
        )
    )


def _identifiers(subject: dict[str, str]) -> Steps[dict[int, str]]:
    types = yield from _types()
    try:
        return {types[type_id.lower()]: subject_id for type_id, subject_id in subject.items()}
    except KeyError:
        raise Invalid("a key of subject names no active subject type") from None


def assign_subject(body: dict, *, distributed: bool) -> Steps[dict]:
    """One subject in the experiments named (or every active one of its types), active experiments only."""
    subject, named, store = body.get("subject"), body.get("experiments"), body.get("assign", True)
    if not isinstance(subject, dict) or not subject or not all(isinstance(v, str) for v in subject.values()):
        raise Invalid("subject must map subject type IDs to subject IDs")
    attributes = body.get("attributes", {})
    if not isinstance(attributes, dict):
        raise Invalid("attributes must be an object")
    catalog = yield from _catalog()
    identifiers = yield from _identifiers(subject)
    if named is None:
        experiments = sorted(
            (
                e
                for e in catalog.values()
                if e.kind == "experiment" and e.subject_type_pk in identifiers and e.status == "active"
            ),
            key=lambda e: e.key.lower(),
        )
    else:
        if not isinstance(named, list) or not all(isinstance(key, str) for key in named):
            raise Invalid("experiments must be a list of strings")
        unknown = [key for key in named if key.lower() not in catalog]
        if unknown:
            raise LookupError(f"no experiment {', '.join(map(repr, unknown))}")
        experiments = list({catalog[key.lower()].pk: catalog[key.lower()] for key in named}.values())
    stored, created, excluded = yield from _subject_settled(
        identifiers, experiments, attributes, store=store is True, distributed=distributed
    )
    answer: dict = {"assignments": {}, "new_assignments": [], "unassigned": {}}
    for experiment in experiments:
        subject_id = identifiers.get(experiment.subject_type_pk)
        variant_pk = stored.get((experiment.pk, subject_id))
        if experiment.status != "active":
            answer["unassigned"][experiment.key] = "experiment_not_active"
        elif subject_id is None:
            answer["unassigned"][experiment.key] = "subject_type_missing"
        elif variant_pk is None:
            answer["unassigned"][experiment.key] = excluded.get((experiment.pk, subject_id), "not_assigned")
        else:
            answer["assignments"][experiment.key] = experiment.variant_keys[variant_pk]
            if (experiment.pk, subject_id) in created:
                answer["new_assignments"].append(experiment.key)
    return answer


def link(body: dict, *, distributed: bool) -> Steps[dict]:
    identifiers = body.get("identifiers")
    if not isinstance(identifiers, list) or len(identifiers) != 2:
        raise Invalid("identifiers must be a list of 2")
    types = yield from _types()
    try:
        nodes = sorted((types[item["subject_type"].lower()], item["subject_id"]) for item in identifiers)
    except (AttributeError, KeyError, TypeError):
        raise Invalid("each identifier needs an active subject_type and a subject_id") from None
    if nodes[0] == nodes[1] or not all(isinstance(subject_id, str) for _, subject_id in nodes):
        raise Invalid("two different string subject IDs are needed")
    yield from link_steps(nodes)
    return {"success": True}


# OpenFeature's context entries that are not attributes.
TARGETING_KEY, SUBJECT_TYPE = "targetingKey", "subjectType"


def _context(body: dict) -> tuple[str, dict[str, object]]:
    """The subject ID (`context.targetingKey`) and attributes (the other entries of an attribute's type)."""
    context = body.get("context")
    if not isinstance(context, dict):
        raise Invalid("context must be an object")
    subject_id = context.get(TARGETING_KEY)
    if not isinstance(subject_id, str) or not subject_id:
        raise Invalid("context.targetingKey must be a non-empty string")
    attributes = {
        name: value
        for name, value in context.items()
        if name not in (TARGETING_KEY, SUBJECT_TYPE) and isinstance(value, (str, bool, int, float))
    }
    return subject_id, attributes


def _evaluation(
    experiment: Experiment, subject_id: str | None, stored: Stored, excluded: Excluded, provenance: Provenance
) -> dict:
    """One experiment as an OpenFeature flag: the stored variant, else the control with the reason."""
    metadata: dict = {"experimentStatus": experiment.status}
    variant_pk = stored.get((experiment.pk, subject_id))
    if experiment.status != "active":
        variant, reason = experiment.control_key, "DISABLED"
    elif variant_pk is None:
        variant, reason = experiment.control_key, "DEFAULT"
        metadata["excludedReason"] = excluded.get((experiment.pk, subject_id), "not_assigned")
    else:
        cohort, source = provenance[(experiment.pk, subject_id)]
        variant = experiment.variant_keys[variant_pk]
        reason = "TARGETING_MATCH" if source == "forced" else "SPLIT"
        metadata["source"], metadata["cohort"] = source, cohort
    return {"key": experiment.key, "value": variant, "variant": variant, "reason": reason, "metadata": metadata}


def ofrep_flag(body: dict, *, key: str, distributed: bool) -> Steps[dict]:
    """POST /ofrep/v1/evaluate/flags/{key}: POST /assignments for the subject in that one experiment."""
    experiment = (yield from _catalog()).get(key.lower())
    if experiment is None or experiment.kind != "experiment":
        raise LookupError(f"no experiment {key!r}")
    subject_id, attributes = _context(body)
    identifiers = {experiment.subject_type_pk: subject_id}
    provenance: Provenance = {}
    stored, _, excluded = yield from _subject_settled(
        identifiers, [experiment], attributes, store=True, distributed=distributed, provenance=provenance
    )
    return _evaluation(experiment, subject_id, stored, excluded, provenance)


def ofrep_flags(body: dict, *, distributed: bool) -> Steps[dict]:
    """POST /ofrep/v1/evaluate/flags: POST /assignments for the subject in every active experiment of its subject
    type listed for bulk evaluation."""
    subject_id, attributes = _context(body)
    subject_type = body["context"].get(SUBJECT_TYPE)
    if not isinstance(subject_type, str):
        raise Invalid("context.subjectType must be a string")
    catalog = yield from _catalog()
    identifiers = yield from _identifiers({subject_type: subject_id})
    listed = [e for e in catalog.values() if e.kind == "experiment" and e.bulk_evaluation and e.status == "active"]
    experiments = sorted((e for e in listed if e.subject_type_pk in identifiers), key=lambda e: e.key.lower())
    provenance: Provenance = {}
    stored, _, excluded = yield from _subject_settled(
        identifiers, experiments, attributes, store=True, distributed=distributed, provenance=provenance
    )
    return {"flags": [_evaluation(e, subject_id, stored, excluded, provenance) for e in experiments]}


OFREP_FLAGS = "/ofrep/v1/evaluate/flags"
OFREP_FLAG_PREFIX = OFREP_FLAGS + "/"
ROUTES = {
    "/experiment-assignments": assign,
    "/assignments": assign_subject,
    "/id-link": link,
    OFREP_FLAGS: ofrep_flags,
}


def _route(path: str):
    """The route answering a path, the single evaluation's key bound; None for no route."""
    route = ROUTES.get(path)
    if route is None and path.startswith(OFREP_FLAG_PREFIX) and len(path) > len(OFREP_FLAG_PREFIX):
        key = path[len(OFREP_FLAG_PREFIX) :].removesuffix("/")

        def route(body: dict, *, distributed: bool) -> Steps[dict]:
            return ofrep_flag(body, key=key, distributed=distributed)

    return route


def answer_without_body(method: str, path: str, authorization: str | None) -> tuple[str, dict] | None:
    """The answer of a request that needs no body read (/healthz, an unknown route, a wrong token); None for
    the others, which answer_steps answers."""
    if path == "/healthz" and method == "GET":
        return "200 OK", {"status": "ok"}
    if _route(path) is None or method != "POST":
        return "404 Not Found", {"code": "not_found"}
    if authorization != AUTHORIZATION:
        return "401 Unauthorized", {"code": "not_authenticated"}
    return None


def answer_steps(path: str, read_body, *, distributed: bool) -> Steps[tuple[str, dict]]:
    """The status and the body of the answer to a request of a route, read_body() giving its body."""
    try:
        body = json.loads(read_body())
        if not isinstance(body, dict):
            raise Invalid("the body must be a JSON object")
        return "200 OK", (yield from _route(path)(body, distributed=distributed))
    except LookupError as error:
        return "404 Not Found", {"code": "experiment_not_found", "detail": str(error)}
    except ValueError as error:
        return "400 Bad Request", {"code": "invalid_request", "detail": str(error)}


def encoded(body: dict) -> bytes:
    return json.dumps(body).encode()


def answer_headers(path: str, status: str, content: bytes) -> list[tuple[str, str]]:
    """The headers beyond Content-Type and Content-Length: a bulk evaluation's ETag (a strong tag of the body,
    as the service's) and Cache-Control."""
    if path != OFREP_FLAGS or not status.startswith("200"):
        return []
    return [("ETag", f'"{hashlib.sha256(content).hexdigest()[:32]}"'), ("Cache-Control", "private, no-cache")]


def _answer(environ) -> tuple[str, dict]:
    path = environ["PATH_INFO"]
    answer = answer_without_body(environ["REQUEST_METHOD"], path, environ.get("HTTP_AUTHORIZATION"))
    if answer is not None:
        return answer
    connection = _connection()

    def read_body() -> bytes:
        return environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))

    return steps_run(connection, answer_steps(path, read_body, distributed=assignments_distributed(connection)))


def application(environ, start_response):
    status, body = _answer(environ)
    content = encoded(body)
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(content)))]
    start_response(status, headers + answer_headers(environ["PATH_INFO"], status, content))
    return [content]
