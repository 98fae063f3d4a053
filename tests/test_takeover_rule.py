"""The takeover rule (``app.runs.takeover``): when an owner whose liveness lock is missing counts
as dead, with a fake clock. The scheduler's side is in ``test_fencing``; real processes on Postgres
in ``test_failover``."""

from __future__ import annotations

from app.runs.takeover import CONFIRM_S, TakeoverRule
from storage.base import InstanceLook

T0 = 1_700_000_000.0
GRACE = 12.0


def look(session: int | None, live: set[str], missing: tuple[str, ...] = ()) -> InstanceLook:
    return InstanceLook(session, frozenset(live), missing)


def test_an_owner_seen_alive_under_our_lock_is_dead_at_the_confirming_look() -> None:
    rule = TakeoverRule(GRACE)
    assert rule.dead(look(1, {"A", "B"}), T0) == {}
    assert rule.dead(look(1, {"A"}, ("B",)), T0 + 1) == {}  # first seen missing
    assert rule.confirming
    assert rule.dead(look(1, {"A"}, ("B",)), T0 + 1 + CONFIRM_S / 2) == {}
    dead = rule.dead(look(1, {"A"}, ("B",)), T0 + 1 + CONFIRM_S)
    assert list(dead) == ["B"] and "while ours held" in dead["B"]
    assert not rule.confirming


def test_an_owner_back_before_the_confirming_look_is_not_dead() -> None:
    rule = TakeoverRule(GRACE)
    rule.dead(look(1, {"A", "B"}), T0)
    assert rule.dead(look(1, {"A"}, ("B",)), T0 + 1) == {}
    assert rule.dead(look(1, {"A", "B"}), T0 + 2) == {}  # B took its lock again
    assert not rule.confirming
    assert rule.dead(look(1, {"A"}, ("B",)), T0 + 3) == {}  # missing anew: confirmed from here
    assert list(rule.dead(look(1, {"A"}, ("B",)), T0 + 3 + CONFIRM_S)) == ["B"]


def test_a_database_restart_caught_while_it_ends_the_sessions_judges_nobody() -> None:
    """B's lock ended first, ours a moment later: the next look shows ours missing (nobody is
    judged) and then a new lock of ours, under which B was never seen: the grace applies."""
    rule = TakeoverRule(GRACE)
    rule.dead(look(1, {"A", "B"}), T0)
    assert rule.dead(look(1, {"A"}, ("B",)), T0 + 1) == {}
    assert rule.dead(look(None, set(), ("B",)), T0 + 1 + CONFIRM_S) == {}
    assert rule.dead(look(2, {"A"}, ("B",)), T0 + 2) == {}  # we re-registered; B not yet
    assert rule.dead(look(2, {"A"}, ("B",)), T0 + 2 + GRACE - 0.1) == {}
    dead = rule.dead(look(2, {"A"}, ("B",)), T0 + 2 + GRACE)
    assert list(dead) == ["B"] and "12 s" in dead["B"]


def test_after_our_own_lock_is_taken_anew_nobody_seen_before_counts() -> None:
    """Our lock changed between two looks (the database restarted between them): B, seen alive
    under the old lock and missing under the new one, waits out the grace from our new lock on."""
    rule = TakeoverRule(GRACE)
    rule.dead(look(1, {"A", "B"}), T0)
    assert rule.dead(look(2, {"A"}, ("B",)), T0 + 1) == {}
    assert rule.dead(look(2, {"A"}, ("B",)), T0 + 1 + CONFIRM_S) == {}
    assert rule.dead(look(2, {"A", "B"}), T0 + 3) == {}  # B re-registered: alive
    assert rule.dead(look(2, {"A"}, ("B",)), T0 + 4) == {}  # now seen under our lock: confirmed soon
    assert list(rule.dead(look(2, {"A"}, ("B",)), T0 + 4 + CONFIRM_S)) == ["B"]


def test_a_look_without_our_own_lock_restarts_the_grace() -> None:
    rule = TakeoverRule(GRACE)
    assert rule.dead(look(1, {"A"}, ("B",)), T0) == {}
    assert rule.dead(look(None, set(), ("B",)), T0 + 10) == {}
    assert rule.dead(look(2, {"A"}, ("B",)), T0 + 11) == {}
    assert rule.dead(look(2, {"A"}, ("B",)), T0 + 11 + GRACE - 1) == {}
    assert list(rule.dead(look(2, {"A"}, ("B",)), T0 + 11 + GRACE)) == ["B"]


def test_without_a_grace_a_missing_owner_is_dead_at_once() -> None:
    """SQLite: a file lock ends only with its process."""
    assert list(TakeoverRule(0.0).dead(look(0, {"A"}, ("B",)), T0)) == ["B"]
    assert list(TakeoverRule(0.0).dead(look(None, set(), ("B",)), T0)) == ["B"]
