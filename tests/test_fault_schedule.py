"""The randomized fault schedule (``tests/support/fault_schedule.py``) over a few fixed seeds.

Each seed runs the workload (conversations with replies, streams, edits, reactions, files, asks and
approvals with clicks, follow-ups) against real server processes — two instances on Postgres, one on
SQLite — while its schedule injects faults; then each property of the checker
(``tests/support/chaos_checks.py``) is a test of its own, so a failure names what broke. A seed is run
once per test session and its outcome shared by its checks. Every run prints its seed and schedule;
``python -m tests.support.fault_schedule --seed N --store …`` replays one, ``--seeds 50`` runs many.

The bugs the schedule found are each pinned by a directed plan (one conversation, one fault at a
known moment: deterministic, where a seed's outcome depends on which call a fault meets); a bug
still open is marked ``xfail(strict=True)`` naming it, so its test fails once it is fixed and the
mark must go. The checker's properties are shown able to fail on made-up states (no process needed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos_checks import CHECKS, Outcome, StoreState, check, runs_of
from tests.support.chaos_workload import Conversation
from tests.support.fault_schedule import Chaos, Fault, Plan, plan, run_plan, run_seed
from tests.support.postgres import base_url
from threadbound_emulator import FakeSlack

#: The seeds CI runs, per store (a few minutes in all): seeds that ran clean when they were chosen.
#: Other seeds meet the open bugs pinned below (see ``docs/development.md`` to run many).
CI_SEEDS = {"sqlite": (7,), "postgres": (1,)}
#: Checks that fail on a CI seed because of a known, open bug: ``(store, seed, check) → reason``.
KNOWN: dict[tuple[str, int, str], str] = {}
#: Seconds a directed plan's conversation may take (its answers come within a few).
DIRECTED_WITHIN = 20.0
#: Seconds every write of the journal fails from the start of a directed plan: long enough to cover
#: the answer's entry (and the apology's) however slow the machine, short enough that a run resumed
#: after a back-off answers within ``DIRECTED_WITHIN``.
EFFECTS_DOWN = 8.0

_outcomes: dict[tuple[str, int], Outcome] = {}


def _rows() -> list[Any]:
    rows = []
    for store, seeds in CI_SEEDS.items():
        for seed in seeds:
            for name in CHECKS:
                reason = KNOWN.get((store, seed, name))
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                rows.append(pytest.param(store, seed, name, marks=marks, id=f"{store}-seed{seed}-{name}"))
    return rows


async def _outcome(store: str, seed: int, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The seed's outcome, run once per test session: under pytest-xdist the first worker to ask
    runs it and the others read what it wrote."""
    if store == "postgres":
        base_url()  # skips without TEST_DATABASE_URL
    if (store, seed) in _outcomes:
        return _outcomes[store, seed]
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    if not run:
        _outcomes[store, seed] = await run_seed(seed, store, tmp_path_factory.mktemp(f"chaos-{store}-{seed}"))
        return _outcomes[store, seed]
    shared = tmp_path_factory.getbasetemp().parent / f"chaos-{run}-{store}-{seed}.json"
    with shared.with_suffix(".lock").open("w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        if shared.exists():
            outcome = Outcome(**json.loads(shared.read_text()))
        else:
            outcome = await run_seed(seed, store, tmp_path_factory.mktemp(f"chaos-{store}-{seed}"))
            shared.write_text(json.dumps(dataclasses.asdict(outcome)))
    _outcomes[store, seed] = outcome
    return outcome


@pytest.mark.process
@pytest.mark.timeout(600)  # the first check of a seed runs it (under a minute when it runs clean)
@pytest.mark.parametrize(("store", "seed", "name"), _rows())
async def test_the_fault_schedule_holds(
    store: str, seed: int, name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Once every fault of the seed's schedule is healed, the check finds nothing."""
    outcome = await _outcome(store, seed, tmp_path_factory)
    assert not outcome.checks[name], (
        f"seed {seed} on {store}: {name}\n{plan(seed, store).describe()}\n"
        + "\n".join(outcome.notes)
        + "\n"
        + outcome.report()
    )


def test_a_seed_replays_its_schedule() -> None:
    """The same seed gives the same schedule; other seeds give others, with every kind of fault."""
    assert plan(7, "postgres") == plan(7, "postgres")
    assert plan(7, "postgres") != plan(8, "postgres")
    kinds = {f.kind for seed in range(1, 30) for f in plan(seed, "postgres").faults}
    assert kinds == {
        "slack.late",
        "slack.5xx",
        "slack.drop",
        "slack.429",
        "kill",
        "stop",
        "db.pause",
        "db.fail",
        "pg.terminate",
    }
    assert "pg.terminate" not in {f.kind for seed in range(1, 30) for f in plan(seed, "sqlite").faults}
    every = {c.kind for c in plan(3, "sqlite").conversations}
    assert every == {"reply", "plain", "steps", "ask", "approval", "follow_up"}


async def test_each_check_can_fail(tmp_path: Path) -> None:
    """A thread and a store that break each property make each check report it."""
    reply = Conversation("c1", "reply", 0.0)
    ask = Conversation("c2", "ask", 0.0)
    follow = Conversation("c3", "follow_up", 0.0)
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        roots = [slack.add_message("C1", c.mention, user="U1") for c in (reply, ask, follow)]
        for _ in range(2):  # the answer twice
            slack.add_message("C1", reply.answer("first"), user="UBOT", thread_ts=roots[0], bot_id="BBOT")
        slack.add_message("C1", "working on it (c1)", user="UBOT", thread_ts=roots[0], bot_id="BBOT")
        slack.add_message("C1", "Sorry, I ran into a problem", user="UBOT", thread_ts=roots[1], bot_id="BBOT")
        slack.add_message("C1", "ANSWER c3 first: the thr", user="UBOT", thread_ts=roots[2], bot_id="BBOT")
        log = tmp_path / "a-1.log"
        started = [("r1", "10:00:00.000"), ("r2", "10:00:01.000")]
        log.write_text(
            "\n".join(
                json.dumps({"time": f"2026-01-01T{at}Z", "message": "run started", "task": "t1", "run": run})
                for run, at in started
            )
            + "\n"
            + json.dumps(
                {"time": "2026-01-01T10:00:02.000Z", "message": "run finished", "task": "t1", "run": "r1"}
            )
        )
        state = StoreState(
            tasks={roots[0]: "t1", roots[1]: "t2", roots[2]: "t3"},
            open_runs={"t1"},
            inbox={"t2": 1},
            open_effects=[{"task_id": "t1", "tool": "channel_reply", "effect_id": "e1"}],
            asks=[{"ask_id": "q_1", "task_id": "t2", "kind": "question", "card_ts": "", "decision": None}],
            follow_ups=[{"follow_up": "fu_1", "task_id": "t3", "state": "pending", "fire_id": None}],
        )
        outcome = check([reply, ask, follow], slack, state, [(log, None)])
    assert set(outcome.failed) == set(CHECKS), outcome.report()
    assert [r[:2] for r in runs_of([(log, 1767261600.5)])] == [("t1", "r1"), ("t1", "r2")]
    assert runs_of([(log, 1767261600.5)])[1][3] == 1767261600.5  # cut off by the kill


def _directed(store: str, kind: str, stream: str, *faults: Fault, crash_at: str = "") -> Plan:
    conversation = Conversation("c1", kind, 0.0)
    return Plan(0, store, stream, (conversation,), faults, crash_at=crash_at, within=DIRECTED_WITHIN)


async def _directed_outcome(schedule: Plan, tmp_path: Path) -> Outcome:
    if schedule.store == "postgres":
        base_url()
    return await run_plan(schedule, tmp_path)


def _failures(outcome: Outcome) -> str:
    return "\n".join(outcome.notes) + "\n" + outcome.report()


STORES = ["sqlite", "postgres"]


@pytest.mark.process
@pytest.mark.parametrize("store", STORES)
async def test_a_reply_slack_applies_late_is_in_the_thread_once(store: str, tmp_path: Path) -> None:
    schedule = _directed(store, "reply", "off", Fault(0.0, "slack.late", "chat.postMessage", 6.0))
    outcome = await _directed_outcome(schedule, tmp_path)
    assert not outcome.checks["one_answer_each"], _failures(outcome)


@pytest.mark.process
@pytest.mark.parametrize("store", STORES)
async def test_a_reply_on_its_way_when_its_writer_is_killed_is_in_the_thread_once(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process is SIGKILLed once Slack has cut its post, which Slack applies seconds later: the
    survivor (on SQLite the restart, on Postgres the peer or the restart, whichever takes the
    conversation first) finds the entry open and looks for the post until it can no longer land, so
    it finds it and the model is told it was posted (looked at once, it would be told "not posted"
    and post it again)."""
    monkeypatch.setattr(Chaos, "_pick", lambda self, n: 0)  # every delivery to a: the one killed
    schedule = _directed(store, "reply", "off", Fault(0.0, "slack.late.kill", "chat.postMessage", 4.0))
    outcome = await _directed_outcome(schedule, tmp_path)
    killed = "killed a with its chat.postMessage on the way"
    assert any(killed in note for note in outcome.notes), _failures(outcome)
    assert not outcome.checks["one_answer_each"], _failures(outcome)


@pytest.mark.process
@pytest.mark.timeout(180)
async def test_a_stream_on_its_way_when_its_writer_is_killed_leaves_no_partial(tmp_path: Path) -> None:
    """Killed once Slack has cut its ``chat.startStream`` (applied seconds later): the restarted
    process waits until the start can no longer land (the whole window: an unfinished message is not
    found by an id), then removes the message Slack started and answers once."""
    conversation = Conversation("c1", "plain", 0.0)
    fault = Fault(0.0, "slack.late.kill", "chat.startStream", 4.0)
    # The conversation may take the takeover's whole wait (WRITE_IN_FLIGHT and the guard's lag).
    schedule = Plan(0, "sqlite", "auto", (conversation,), (fault,), within=DIRECTED_WITHIN + 45.0)
    outcome = await _directed_outcome(schedule, tmp_path)
    killed = "killed a with its chat.startStream on the way"
    assert any(killed in note for note in outcome.notes), _failures(outcome)
    assert not outcome.checks["no_partial_message"], _failures(outcome)
    assert not outcome.checks["one_answer_each"], _failures(outcome)


@pytest.mark.process
@pytest.mark.parametrize("store", ["sqlite"])
async def test_a_stream_slack_starts_late_leaves_no_empty_message(store: str, tmp_path: Path) -> None:
    schedule = _directed(store, "plain", "auto", Fault(0.0, "slack.late", "chat.startStream", 5.0))
    outcome = await _directed_outcome(schedule, tmp_path)
    assert not outcome.checks["no_partial_message"], _failures(outcome)


@pytest.mark.process
@pytest.mark.parametrize("store", ["sqlite"])
async def test_an_answer_slack_posts_late_gets_no_apology(store: str, tmp_path: Path) -> None:
    schedule = _directed(store, "plain", "off", Fault(0.0, "slack.late", "chat.postMessage", 6.0))
    outcome = await _directed_outcome(schedule, tmp_path)
    assert not outcome.checks["no_apology"], _failures(outcome)


@pytest.mark.process
async def test_an_approval_requested_by_a_resumed_run_can_be_decided_by_its_requester(tmp_path: Path) -> None:
    """Killed once its first step was checkpointed (its message consumed with it), the resumed run
    still runs for the person who asked: the approval it requests is theirs to decide."""
    schedule = _directed("sqlite", "approval", "off", crash_at="store.checkpoint.after")
    outcome = await _directed_outcome(schedule, tmp_path)
    assert not outcome.checks["cards_decided_once"], _failures(outcome)


@pytest.mark.process
async def test_a_failed_journal_write_at_the_answer_still_answers(tmp_path: Path) -> None:
    schedule = _directed("sqlite", "plain", "off", Fault(0.0, "db.fail", "effects", EFFECTS_DOWN))
    outcome = await _directed_outcome(schedule, tmp_path)
    assert not outcome.checks["one_answer_each"], _failures(outcome)


@pytest.mark.process
async def test_an_ask_whose_card_cannot_be_journalled_leaves_no_orphan(tmp_path: Path) -> None:
    schedule = _directed("sqlite", "ask", "off", Fault(0.0, "db.fail", "effects", EFFECTS_DOWN))
    outcome = await _directed_outcome(schedule, tmp_path)
    assert not outcome.checks["no_orphan_asks"], _failures(outcome)
