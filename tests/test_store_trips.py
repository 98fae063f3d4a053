"""What one turn costs on the SQLite store's database thread: each job there is a trip from the
event loop and back, so the turn's fixed cost (issue #22) is bounded by a count, not a timing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from storage.sqlite import SQLiteStore
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.sqlite_jobs import count_jobs
from threadbound_emulator import Call, FakeSlack

#: Jobs before the reply is posted: the claim, the lease with the run's start state and the woken
#: message's handle (one batch, app.runs.start), and the journal entry with the step's usage row and
#: held checkpoint (one transaction, app.runs.checkpoint).
BEFORE_REPLY = 3
#: The whole turn, through the lease's release and the driver's last look.
TURN = 12
#: The instance's own loops (app.service): their looks are not the turn's.
BACKGROUND = frozenset({"sweeper", "follow-ups", "takeover"})


def _reply_then_stop(turn: Turn) -> list[Any]:
    return [call("channel_reply", text="hello")] if turn.prompt else [""]


async def test_a_turn_makes_a_bounded_number_of_store_trips(tmp_path: Path) -> None:
    """One mention answered by a reply: the database thread gets at most BEFORE_REPLY jobs before
    the post goes out and TURN in all (12 and 21 before the run's start state was read in one trip
    and the call-tools step's writes and look went together; 5 and 14 before its checkpoint and usage
    row went along with its journal entry; 4 and 13 before the woken message's handle was minted with
    the lease)."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=scripted(_reply_then_stop), data_dir=tmp_path, stream="off"
        ) as app:
            assert app.service is not None
            store = app.service.store
            assert isinstance(store, SQLiteStore)
            jobs = count_jobs(store)
            await _quiet(jobs)  # the start-up look, sweep and pruning are done
            jobs.clear()
            at_reply: list[int] = []

            def seen(request: Call) -> None:
                if request.method == "chat.postMessage":
                    at_reply.append(len(_turn(jobs)))

            slack.observe(seen)
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            assert response.status == 200
            await app.idle()
            total = len(_turn(jobs))
        assert [m["text"] for m in slack.bot_messages("C1")] == ["hello"]
        assert at_reply and at_reply[0] <= BEFORE_REPLY, at_reply
        assert total <= TURN, total


async def _quiet(jobs: list[Any]) -> None:
    """Until no job has been handed to the database thread for a while (bounded)."""
    seen = -1
    for _ in range(100):
        if len(jobs) == seen:
            return
        seen = len(jobs)
        await asyncio.sleep(0.2)
    raise AssertionError("the store never went quiet")


def _turn(jobs: list[tuple[str | None, Any]]) -> list[Any]:
    return [job for task, job in jobs if task not in BACKGROUND]
