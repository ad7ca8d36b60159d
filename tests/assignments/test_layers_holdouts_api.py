"""Gates 2 and 3 on both assignment endpoints: holdouts and layers."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from assignments.models import Assignment
from idlinks.services import Identifier, id_link_create
from tests.helpers.assignments import reference_slot, reference_variant
from tests.helpers.database import batch_reads
from tests.helpers.resources import apply_resources, experiment, holdout, in_layer, layer, subject_type

USER = subject_type("user", attributes={"country": "string"})
COOKIE = subject_type("cookie")
SPLITS = [("control", 0.5), ("green", 0.5)]


def held_out(holdout_salt: str, subject_id: str, share: float) -> bool:
    return reference_variant(holdout_salt, subject_id, [("held_out", share), ("general", 1 - share)]) == "held_out"


def stored(key: str) -> dict[str, str]:
    return dict(Assignment.objects.filter(experiment__key=key).values_list("subject_id", "variant__key"))


def stored_sources(key: str) -> set[str]:
    return set(Assignment.objects.filter(experiment__key=key).values_list("source", flat=True))


def batch(api, key: str, subject_ids: list[str]) -> dict:
    response = api.post("/experiment-assignments", {"experiment_id": key, "subject_ids": subject_ids})
    assert response.status_code == 200, response.content
    return json.loads(response.content)


def one(api, subject: dict, **fields) -> dict:
    response = api.post("/assignments", {"subject": subject, **fields})
    assert response.status_code == 200, response.content
    return json.loads(response.content)


SUBJECTS = [f"s-{index}" for index in range(400)]


def test_layer__two_experiments__each_subject_enters_only_the_one_owning_its_slot(api):
    # Given two experiments splitting the layer between them
    apply_resources(
        USER,
        layer("checkout-flow"),
        experiment("left", layer=in_layer("checkout-flow", [0, 5000])),
        experiment("right", layer=in_layer("checkout-flow", [5000, 10000])),
    )

    # When the same subjects ask both
    left, right = batch(api, "left", SUBJECTS), batch(api, "right", SUBJECTS)

    # Then each is stored in exactly the one owning its slot, and excluded from the other with the control
    for subject_id in SUBJECTS:
        owner, other = (left, right) if reference_slot("checkout-flow", subject_id) < 5000 else (right, left)
        assert subject_id not in owner.get("excluded", {})
        assert other["excluded"][subject_id] == "layer_excluded"
        assert other["assignments"][subject_id] == "control"
    assert set(stored("left")).isdisjoint(stored("right"))
    assert set(stored("left")) | set(stored("right")) == set(SUBJECTS)
    assert stored("left") == {s: reference_variant("left", s, SPLITS) for s in stored("left")}


def test_layer__explicit_salt__slots_drawn_with_it(api):
    apply_resources(
        USER, layer("checkout-flow", salt="flow-2026"), experiment("left", layer=in_layer("checkout-flow", [0, 3000]))
    )

    body = batch(api, "left", SUBJECTS)

    entered = {s for s in SUBJECTS if reference_slot("flow-2026", s) < 3000}
    assert set(stored("left")) == entered
    assert set(body["excluded"]) == set(SUBJECTS) - entered


def test_layer__salt_changed_before_any_assignment__next_request_uses_the_new_salt(api):
    # Given a cached state of the experiment, drawn with the layer's first salt
    apply_resources(
        USER, layer("checkout-flow", salt="first"), experiment("left", layer=in_layer("checkout-flow", [0, 5000]))
    )
    batch(api, "left", ["warm-up"])
    Assignment.objects.all().delete()

    # When the layer's salt changes (nothing stored in its experiments), then subjects ask
    apply_resources(
        USER, layer("checkout-flow", salt="second"), experiment("left", layer=in_layer("checkout-flow", [0, 5000]))
    )
    body = batch(api, "left", SUBJECTS)

    # Then the new salt decides
    assert set(body.get("excluded", {})) == {s for s in SUBJECTS if reference_slot("second", s) >= 5000}


def test_layer__comes_before_following_links__a_linked_identifier_outside_the_slots_is_not_carried_over(api):
    # Given an experiment following links that owns half a layer, and cookie c-in assigned in it
    apply_resources(
        USER,
        COOKIE,
        layer("checkout-flow", subject_type="cookie"),
        experiment("banner", subject_type="cookie", follow_links=True, layer=in_layer("checkout-flow", [0, 5000])),
    )
    inside = next(f"c-{i}" for i in range(100) if reference_slot("checkout-flow", f"c-{i}") < 5000)
    outside = next(f"c-{i}" for i in range(100) if reference_slot("checkout-flow", f"c-{i}") >= 5000)
    batch(api, "banner", [inside])
    for cookie in (inside, outside):
        id_link_create(first=Identifier("user", "u-1"), second=Identifier("cookie", cookie))

    # When the linked cookie whose slot the experiment does not own asks
    body = batch(api, "banner", [outside])

    # Then the layer keeps it out: it is not carried over
    assert body["excluded"] == {outside: "layer_excluded"}
    assert list(stored("banner")) == [inside]


def test_layer__winner_declared__everyone_gets_the_winner(api):
    apply_resources(
        USER,
        layer("checkout-flow"),
        experiment("left", status="winner_declared", winning_variant="green", layer=in_layer("checkout-flow", [0, 10])),
    )

    body = batch(api, "left", SUBJECTS)

    assert body == {"assignments": dict.fromkeys(SUBJECTS, "green")}


def test_holdout__held_out_members_get_the_control__memberships_stored_in_the_holdout(api):
    # Given an experiment covered by a holdout of share 0.3
    apply_resources(USER, holdout("h-2026", share=0.3), experiment("pricing", holdouts=["h-2026"]))

    # When new subjects ask
    body = batch(api, "pricing", SUBJECTS)

    # Then the held_out members get the control and nothing in the experiment; every subject's membership
    # is stored in the holdout, hashed with the holdout's salt
    out = {s for s in SUBJECTS if held_out("h-2026", s, 0.3)}
    assert 80 < len(out) < 160
    assert body["excluded"] == dict.fromkeys(sorted(out, key=SUBJECTS.index), "held_out")
    assert all(body["assignments"][s] == "control" for s in out)
    assert stored("pricing") == {s: reference_variant("pricing", s, SPLITS) for s in SUBJECTS if s not in out}
    assert stored("h-2026") == {s: "held_out" if s in out else "general" for s in SUBJECTS}
    assert stored_sources("h-2026") == {"hashed"}


def test_holdout__two_holdouts__every_membership_made_and_either_holds_out(api):
    apply_resources(
        USER, holdout("h-a", share=0.2), holdout("h-b", share=0.2), experiment("pricing", holdouts=["h-a", "h-b"])
    )

    body = batch(api, "pricing", SUBJECTS)

    out = {s for s in SUBJECTS if held_out("h-a", s, 0.2) or held_out("h-b", s, 0.2)}
    assert set(body["excluded"]) == out
    assert set(stored("h-a")) == set(stored("h-b")) == set(SUBJECTS)


def test_holdout__memberships_stored__read_again_and_never_made_twice(api):
    # Given memberships made through one experiment
    apply_resources(
        USER,
        holdout("h-2026", share=0.3),
        experiment("pricing", holdouts=["h-2026"]),
        experiment("onboarding", holdouts=["h-2026"]),
    )
    batch(api, "pricing", SUBJECTS)
    memberships = list(Assignment.objects.filter(experiment__key="h-2026").values_list("subject_id", "created_at"))

    # When the same subjects ask another experiment the holdout covers
    body = batch(api, "onboarding", SUBJECTS)

    # Then the stored memberships decide, unchanged
    assert set(body["excluded"]) == {s for s in SUBJECTS if held_out("h-2026", s, 0.3)}
    after = list(Assignment.objects.filter(experiment__key="h-2026").values_list("subject_id", "created_at"))
    assert sorted(after) == sorted(memberships)


def test_holdout__ended__stops_nothing_and_makes_no_membership(api):
    apply_resources(USER, holdout("h-2026", share=0.5, status="ended"), experiment("pricing", holdouts=["h-2026"]))

    body = batch(api, "pricing", SUBJECTS)

    assert set(body) == {"assignments"}
    assert set(stored("pricing")) == set(SUBJECTS)
    assert stored("h-2026") == {}


def test_holdout__enrollment_not_started__no_membership_made(api):
    experiment_document = experiment("pricing", enrollment={"startAt": "2999-01-01T00:00:00Z"}, holdouts=["h-2026"])
    apply_resources(USER, holdout("h-2026"), experiment_document)

    body = batch(api, "pricing", SUBJECTS[:10])

    assert body["excluded"] == dict.fromkeys(SUBJECTS[:10], "enrollment_not_started")
    assert stored("h-2026") == {}


def test_holdout__winner_declared__never_reaches_held_out_members(api):
    document = experiment("pricing", status="winner_declared", winning_variant="green", holdouts=["h-2026"])
    apply_resources(USER, holdout("h-2026", share=0.3), document)

    body = batch(api, "pricing", SUBJECTS)

    out = {s for s in SUBJECTS if held_out("h-2026", s, 0.3)}
    assert body["assignments"] == {s: "control" if s in out else "green" for s in SUBJECTS}
    assert set(body["excluded"]) == out
    assert stored("pricing") == {}
    assert set(stored("h-2026")) == set(SUBJECTS)


def test_holdout__post_assignments__held_out_in_unassigned_and_membership_stored(api):
    apply_resources(USER, holdout("h-2026", share=0.3), experiment("pricing", holdouts=["h-2026"]), experiment("plain"))
    out = next(s for s in SUBJECTS if held_out("h-2026", s, 0.3))

    body = one(api, {"user": out}, experiments=["pricing", "plain"])

    assert body["unassigned"] == {"pricing": "held_out"}
    assert body["new_assignments"] == ["plain"]
    assert stored("h-2026") == {out: "held_out"}


def test_holdout__post_assignments_assign_false__winner_judged_by_the_formula_and_nothing_stored(api):
    document = experiment("pricing", status="winner_declared", winning_variant="green", holdouts=["h-2026"])
    apply_resources(USER, holdout("h-2026", share=0.3), document)
    out = next(s for s in SUBJECTS if held_out("h-2026", s, 0.3))
    general = next(s for s in SUBJECTS if not held_out("h-2026", s, 0.3))

    assert one(api, {"user": out}, assign=False)["unassigned"] == {"pricing": "held_out"}
    assert one(api, {"user": general}, assign=False)["assignments"] == {"pricing": "green"}
    assert stored("h-2026") == {}


@pytest.mark.parametrize("path", ["/experiment-assignments", "/assignments"])
def test_holdout__asked_on_an_assignment_endpoint__404_experiment_not_found(api, path):
    apply_resources(USER, holdout("h-2026"))
    body = (
        {"experiment_id": "h-2026", "subject_ids": ["u-1"]}
        if path == "/experiment-assignments"
        else {"subject": {"user": "u-1"}, "experiments": ["H-2026"]}
    )

    response = api.post(path, body)

    assert response.status_code == 404
    assert json.loads(response.content)["code"] == "experiment_not_found"
    assert stored("h-2026") == {}


def test_holdout__post_assignments_without_experiments__holdouts_not_listed(api):
    apply_resources(USER, holdout("h-2026", share=0.01), experiment("pricing", holdouts=["h-2026"]))

    body = one(api, {"user": "u-general"})

    assert set(body["assignments"]) | set(body.get("unassigned", {})) == {"pricing"}


def statements(api, path: str, body: dict) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = api.post(path, body)
    assert response.status_code == 200, response.content
    return len(captured.captured_queries)


@pytest.mark.parametrize("size", [1, 1000])
def test_holdouts__zero_or_three__same_statements_for_new_subjects(api, size):
    # Given an experiment without holdouts and one with three, in one layer, both cached
    apply_resources(
        USER,
        layer("checkout-flow"),
        holdout("h-1", share=0.1),
        holdout("h-2", share=0.1),
        holdout("h-3", share=0.1),
        experiment("plain"),
        experiment("covered", holdouts=["h-1", "h-2", "h-3"], layer=in_layer("checkout-flow", [0, 9000])),
    )
    for key in ("plain", "covered"):
        batch(api, key, ["warm-up"])

    # When a batch of new subjects asks each
    without = statements(
        api, "/experiment-assignments", {"experiment_id": "plain", "subject_ids": [f"p-{i}" for i in range(size)]}
    )
    subject_ids = [f"c-{i}" for i in range(size)]
    with_holdouts = statements(api, "/experiment-assignments", {"experiment_id": "covered", "subject_ids": subject_ids})

    # Then the holdouts cost no statement, and asking again (memberships stored) is one read
    assert with_holdouts == without
    assert statements(
        api, "/experiment-assignments", {"experiment_id": "covered", "subject_ids": subject_ids}
    ) == batch_reads(size)
    assert len(stored("h-3")) == size + 1


def test_holdouts__post_assignments_many_experiments__same_statements_as_without(api):
    apply_resources(
        USER,
        holdout("h-1", share=0.01),
        holdout("h-2", share=0.01),
        holdout("h-3", share=0.01),
        experiment("plain-1"),
        experiment("plain-2"),
        experiment("covered-1", holdouts=["h-1", "h-2", "h-3"]),
        experiment("covered-2", holdouts=["h-1", "h-3"]),
    )
    one(api, {"user": "warm-up"})

    without = statements(api, "/assignments", {"subject": {"user": "u-1"}, "experiments": ["plain-1", "plain-2"]})
    with_holdouts = statements(
        api, "/assignments", {"subject": {"user": "u-2"}, "experiments": ["covered-1", "covered-2"]}
    )

    assert with_holdouts == without
    assert set(stored("h-1")) == {"warm-up", "u-2"}


def test_stored_assignments__holdout_ended_winner_elsewhere_slots_grown__returned_unchanged(api):
    # Given subjects assigned in an experiment covered by a holdout, in a layer
    documents = [USER, layer("checkout-flow"), holdout("h-2026", share=0.2)]
    apply_resources(*documents, experiment("pricing", holdouts=["h-2026"], layer=in_layer("checkout-flow", [0, 5000])))
    batch(api, "pricing", SUBJECTS)
    before = stored("pricing")

    # When the holdout ends and the slots grow, and the same subjects ask again
    apply_resources(
        USER,
        layer("checkout-flow"),
        holdout("h-2026", share=0.2, status="ended"),
        experiment("pricing", holdouts=["h-2026"], layer=in_layer("checkout-flow", [0, 8000])),
    )
    body = batch(api, "pricing", list(before))

    # Then every stored assignment comes back as stored
    assert body == {"assignments": before}
    assert stored("pricing") == before


def test_holdout__ended_while_the_experiment_is_cached__next_request_no_longer_holds_out(api):
    # Given the experiment's state cached with an active holdout holding out everyone new
    apply_resources(USER, holdout("h-2026", share=0.5), experiment("pricing", holdouts=["h-2026"]))
    out = [s for s in SUBJECTS if held_out("h-2026", s, 0.5)]
    assert set(batch(api, "pricing", out[:5])["excluded"]) == set(out[:5])

    # When the holdout alone changes (the experiment's own version does not move)
    apply_resources(USER, holdout("h-2026", share=0.5, status="ended"), experiment("pricing", holdouts=["h-2026"]))
    body = batch(api, "pricing", out[5:10])

    # Then the next request sees it: nobody is held out, and the new subjects are stored
    assert set(body) == {"assignments"}
    assert set(stored("pricing")) == set(out[5:10])
