"""The load worker of the HTTP targets (the service and the minimal app): one scenario's requests over HTTP/1.1.

http.client keeps the connection open when the server lets it, as the proxy in
front of a deployment does (deploy/gunicorn.conf.py's gthread workers keep it
alive); a server that answers `Connection: close` gets a new loopback connection
per request. The assignment, link and OpenFeature requests carry the proxy token, /healthz none.
POST /assignments asks for one user in the scenario's experiments, by name; an OpenFeature evaluation
(OFREP) for one user as `context.targetingKey`, of the experiment in its path or, in bulk, of every
experiment of subject type user listed for it.
Bodies are written and answers read with orjson, as the service reads and writes
them: the clients share the cores with the servers, and a batch with attributes
would cost the standard library's json a millisecond of them per request.
"""

from __future__ import annotations

import http.client
from typing import Any

import orjson

from assignments.gates import covered_variant
from bench.baseline import Experiment
from bench.exclusions import excluded_expected, exclusions_problem
from bench.scenarios import (
    ASSIGN,
    HEALTHZ,
    LINK,
    OFREP,
    OFREP_BULK,
    SUBJECT,
    Scenario,
    SubjectIds,
    attributes_sent,
)


class UnexpectedAnswer(Exception):
    pass


def request_body(scenario: Scenario, ids: list[str]) -> bytes | None:
    """The JSON body of the scenario's request for these subject IDs; None for a GET."""
    if scenario.kind == ASSIGN:
        body: dict[str, Any] = {"experiment_id": scenario.experiment_id, "subject_ids": ids}
        if scenario.attributes:
            body["attributes"] = attributes_sent(scenario, ids)
        return orjson.dumps(body)
    if scenario.kind == SUBJECT:
        body = {"subject": {"user": ids[0]}, "experiments": list(scenario.experiments), "assign": True}
        if scenario.attributes:
            body["attributes"] = scenario.attributes[0]
        return orjson.dumps(body)
    if scenario.kind == LINK:
        identifiers = [{"subject_type": "user", "subject_id": ids[0]}, {"subject_type": "cookie", "subject_id": ids[0]}]
        return orjson.dumps({"identifiers": identifiers})
    if scenario.kind == OFREP:
        # The experiment's subject type is the subject's: checkout-button's is user.
        return orjson.dumps({"context": {"targetingKey": ids[0]}})
    if scenario.kind == OFREP_BULK:
        return orjson.dumps({"context": {"targetingKey": ids[0], "subjectType": "user"}})
    return None


def hashed_variant(experiment: Experiment, subject_id: str) -> str | None:
    """The variant ID the formula gives the subject in an experiment whose gates let it in (None: outside its
    coverage): what a new subject is stored with, and what bench/seed.py stored for the seeded ones."""
    variant_pk = covered_variant(experiment.gates, experiment.allocation, salt=experiment.salt, subject_id=subject_id)
    return None if variant_pk is None else experiment.variant_keys[variant_pk]


def evaluation_problem(experiment: Experiment, subject_id: str, evaluation: Any) -> str | None:
    """What is wrong with an OpenFeature evaluation of an experiment without gates for a subject (new or stored
    by the formula): it must be its split's variant, with the stored row's source and cohort."""
    variant = hashed_variant(experiment, subject_id)
    expected = {
        "key": experiment.key,
        "value": variant,
        "variant": variant,
        "reason": "SPLIT",
        "metadata": {"experimentStatus": "active", "source": "hashed", "cohort": experiment.cohort},
    }
    return None if evaluation == expected else f"{subject_id} in {experiment.key}: {evaluation!r}, not {expected!r}"


class HttpWorker:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        token: str,
        scenario: Scenario,
        subject_ids: SubjectIds,
        experiments: list[Experiment],
    ) -> None:
        """`experiments`: the configuration of the experiments the scenario asks, which its answers are checked
        against (the ones its gates keep out)."""
        self.connection = http.client.HTTPConnection(host, port, timeout=60)
        self.scenario = scenario
        self.subject_ids = subject_ids
        self.experiments = experiments
        self.path = scenario.path
        self.headers = (
            {} if scenario.kind == HEALTHZ else {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        )

    def prepare(self) -> tuple[list[str], bytes | None]:
        ids = self.subject_ids.next_batch()
        return ids, request_body(self.scenario, ids)

    def send(self, request: tuple[list[str], bytes | None]) -> tuple[int, bytes, str | None]:
        body = request[1]
        self.connection.request("GET" if body is None else "POST", self.path, body=body, headers=self.headers)
        response = self.connection.getresponse()
        return response.status, response.read(), response.getheader("ETag")

    def check(self, request: tuple[list[str], bytes | None], answer: tuple[int, bytes, str | None]) -> int:
        """Raises unless the answer is 200 with the body the scenario's request should get; returns its subjects."""
        status, body, etag = answer
        if status != 200:
            raise UnexpectedAnswer(f"HTTP {status}: {body[:300]!r}")
        content: Any = orjson.loads(body)
        if self.scenario.kind == ASSIGN:
            (experiment,) = self.experiments
            expected = set(request[0])
            if content["assignments"].keys() != expected:
                raise UnexpectedAnswer(f"{len(content['assignments'])} assignments for {len(expected)} subjects")
            # Every subject is new: the gates keep out those they should, and those get the control.
            excluded = content.get("excluded", {})
            problem = exclusions_problem(
                experiment=experiment, ids=request[0], profiles=self.scenario.attributes, excluded=excluded
            )
            if problem:
                raise UnexpectedAnswer(problem)
            if any(content["assignments"][subject_id] != experiment.control_key for subject_id in excluded):
                raise UnexpectedAnswer("an excluded subject without the control")
        elif self.scenario.kind == SUBJECT:
            # A new user: every experiment named is assigned by this request, but those whose gates keep it out.
            # A stored one (seeded by the formula): every experiment named answers, none newly.
            excluded = {
                experiment.key: reason
                for experiment in self.experiments
                for reason in self._excluded(experiment, request[0]).values()
            }
            expected = {experiment.key for experiment in self.experiments} - excluded.keys()
            if (
                content["assignments"].keys() != expected
                or set(content["new_assignments"]) != (expected if self.scenario.new else set())
                or content["unassigned"] != excluded
            ):
                raise UnexpectedAnswer(f"for {len(self.experiments)} experiments: {body[:300]!r}")
            if not self.scenario.attributes:
                (subject_id,) = request[0]
                wrong = {
                    experiment.key: content["assignments"][experiment.key]
                    for experiment in self.experiments
                    if content["assignments"][experiment.key] != hashed_variant(experiment, subject_id)
                }
                if wrong:
                    raise UnexpectedAnswer(f"{subject_id}: variants not the formula's: {wrong}")
        elif self.scenario.kind == OFREP:
            ((subject_id,), (experiment,)) = request[0], self.experiments
            problem = evaluation_problem(experiment, subject_id, content)
            if problem:
                raise UnexpectedAnswer(problem)
        elif self.scenario.kind == OFREP_BULK:
            (subject_id,) = request[0]
            flags = content["flags"]
            if [flag["key"] for flag in flags] != [experiment.key for experiment in self.experiments]:
                raise UnexpectedAnswer(f"flags {[flag['key'] for flag in flags]}, not {self.scenario.experiments}")
            for experiment, flag in zip(self.experiments, flags, strict=True):
                problem = evaluation_problem(experiment, subject_id, flag)
                if problem:
                    raise UnexpectedAnswer(problem)
            if not etag:
                raise UnexpectedAnswer("a bulk evaluation without an ETag")
        elif self.scenario.kind == HEALTHZ and content["status"] != "ok":
            raise UnexpectedAnswer(f"health {body[:300]!r}")
        elif self.scenario.kind == LINK and content != {"success": True}:
            raise UnexpectedAnswer(f"link answered {body[:300]!r}")
        return len(request[0])

    def _excluded(self, experiment: Experiment, ids: list[str]) -> dict[str, str]:
        return excluded_expected(experiment=experiment, ids=ids, profiles=self.scenario.attributes)

    def close(self) -> None:
        self.connection.close()
