"""The load worker of the HTTP targets (the service and the minimal app): one scenario's requests over HTTP/1.1.

http.client keeps the connection open when the server lets it, as the proxy in
front of a deployment does (deploy/gunicorn.conf.py's gthread workers keep it
alive); a server that answers `Connection: close` gets a new loopback connection
per request. The assignment and link requests carry the proxy token, /healthz none.
POST /assignments asks for one user in the scenario's experiments, by name.
Bodies are written and answers read with orjson, as the service reads and writes
them: the clients share the cores with the servers, and a batch with attributes
would cost the standard library's json a millisecond of them per request.
"""

from __future__ import annotations

import http.client
from typing import Any

import orjson

from bench.baseline import Experiment
from bench.exclusions import excluded_expected, exclusions_problem
from bench.scenarios import ASSIGN, HEALTHZ, LINK, SUBJECT, Scenario, SubjectIds, attributes_sent

PATHS = {ASSIGN: "/experiment-assignments", SUBJECT: "/assignments", LINK: "/id-link", HEALTHZ: "/healthz"}


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
    return None


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
        self.path = PATHS[scenario.kind]
        self.headers = (
            {} if scenario.kind == HEALTHZ else {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        )

    def prepare(self) -> tuple[list[str], bytes | None]:
        ids = self.subject_ids.next_batch()
        return ids, request_body(self.scenario, ids)

    def send(self, request: tuple[list[str], bytes | None]) -> tuple[int, bytes]:
        body = request[1]
        self.connection.request("GET" if body is None else "POST", self.path, body=body, headers=self.headers)
        response = self.connection.getresponse()
        return response.status, response.read()

    def check(self, request: tuple[list[str], bytes | None], answer: tuple[int, bytes]) -> int:
        """Raises unless the answer is 200 with the body the scenario's request should get; returns its subjects."""
        status, body = answer
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
            excluded = {
                experiment.key: reason
                for experiment in self.experiments
                for reason in self._excluded(experiment, request[0]).values()
            }
            expected = {experiment.key for experiment in self.experiments} - excluded.keys()
            if (
                content["assignments"].keys() != expected
                or set(content["new_assignments"]) != expected
                or content["unassigned"] != excluded
            ):
                raise UnexpectedAnswer(f"for {len(self.experiments)} experiments: {body[:300]!r}")
        elif self.scenario.kind == HEALTHZ and content["status"] != "ok":
            raise UnexpectedAnswer(f"health {body[:300]!r}")
        elif self.scenario.kind == LINK and content != {"success": True}:
            raise UnexpectedAnswer(f"link answered {body[:300]!r}")
        return len(request[0])

    def _excluded(self, experiment: Experiment, ids: list[str]) -> dict[str, str]:
        return excluded_expected(experiment=experiment, ids=ids, profiles=self.scenario.attributes)

    def close(self) -> None:
        self.connection.close()
