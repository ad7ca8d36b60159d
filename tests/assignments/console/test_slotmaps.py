"""assignments/console/slotmaps.py: a layer's slots as the staff console maps them: owners now, free runs, owners
before, drafts in the way."""

from __future__ import annotations

from assignments.console.slotmaps import Owner, slot_map


def owner(pk: int, key: str, status: str, *ranges: tuple[int, int]) -> Owner:
    return Owner(pk=pk, key=key, status=status, ranges=tuple(ranges))


def runs(mapped) -> list[tuple[int, int, str | None, list[str]]]:
    return [(s.start, s.end, s.owner.key if s.owner else None, [o.key for o in s.before]) for s in mapped.segments]


def test_slot_map__active_done_and_free__each_run_once_with_its_owner_now_and_before():
    # Given two active experiments, one ended that owned slots now partly taken, and a draft
    button = owner(1, "button", "active", (0, 2500))
    copy = owner(2, "copy", "active", (2500, 4000), (9000, 10000))
    old = owner(3, "old", "ended", (2000, 6000))
    plan = owner(4, "plan", "draft", (5000, 9500))

    # When the layer's slots are mapped
    mapped = slot_map([plan, old, copy, button])

    # Then every slot is in one run, with its owner now and the experiments done that owned it
    assert runs(mapped) == [
        (0, 2000, "button", []),
        (2000, 2500, "button", ["old"]),
        (2500, 4000, "copy", ["old"]),
        (4000, 6000, None, ["old"]),
        (6000, 9000, None, []),
        (9000, 10000, "copy", []),
    ]
    assert (mapped.owned, mapped.free) == (5000, 5000)
    assert [o.key for o in mapped.owners] == ["button", "copy", "old", "plan"]
    # And the draft is told which active slots stop it from starting
    ((draft, clashes),) = mapped.draft_lines
    assert (draft.key, [(c.active.key, c.start, c.end) for c in clashes]) == ("plan", [("copy", 9000, 9500)])


def test_slot_map__no_experiment__one_free_run():
    mapped = slot_map([])

    assert runs(mapped) == [(0, 10000, None, [])]
    assert (mapped.free, mapped.draft_lines) == (10000, [])


def test_slot_map__winner_declared_and_archived__count_as_done():
    mapped = slot_map([owner(1, "a", "winner_declared", (0, 10)), owner(2, "b", "archived", (5, 20))])

    assert runs(mapped) == [
        (0, 5, None, ["a"]),
        (5, 10, None, ["a", "b"]),
        (10, 20, None, ["b"]),
        (20, 10000, None, []),
    ]
