"""The randomized fault schedule (``tests/support/fault_schedule.py``) over a few fixed seeds.

Each seed runs the workload (conversations with replies, streams, edits, reactions, files, asks and
approvals with clicks, follow-ups) against real server processes — two instances on Postgres, one on
SQLite — while its schedule injects faults; then each property of the checker
(``tests/support/chaos_checks.py``) is a test of its own, so a failure names what broke. A seed is run
once per test session and its outcome shared by its checks. Every run prints its seed and schedule;
``python -m tests.support.fault_schedule --seed N --store …`` replays one, ``--seeds 50`` runs many.

The checker's properties are shown able to fail on made-up states below (no process needed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos_checks import CHECKS, Outcome, StoreState, check, runs_of
from tests.support.chaos_workload import Conversation
from tests.support.fault_schedule import plan, run_seed
from tests.support.postgres import base_url
from threadbound_emulator import FakeSlack

#: The seeds CI runs, per store (a few minutes in all).
CI_SEEDS = {"sqlite": (1, 2), "postgres": (1, 2)}
#: Checks that fail on a seed because of a known, open bug: ``(store, seed, check) → reason``.
KNOWN: dict[tuple[str, int, str], str] = {}

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
    if store == "postgres":
        base_url()  # skips without TEST_DATABASE_URL
    if (store, seed) not in _outcomes:
        workdir = tmp_path_factory.mktemp(f"chaos-{store}-{seed}")
        _outcomes[store, seed] = await run_seed(seed, store, workdir)
    return _outcomes[store, seed]


@pytest.mark.process
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
