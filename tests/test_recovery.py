"""Recovery: what a failed, lease-less or crashed run leaves behind is still answered, once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.run import APOLOGY
from emulator import FakeSlack
from testing import events
from testing.harness import AppHarness
from testing.models import Turn, call, scripted


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    slack.add_user("U2", "bob", display_name="Bob")


async def test_a_message_steered_into_a_failed_run_is_still_part_of_the_task(tmp_path: Path) -> None:
    """A message steered into a run whose model then fails is consumed with that run, and the next
    turn's transcript still holds it."""
    steered_in = asyncio.Event()
    histories: list[str] = []

    async def script(turn: Turn) -> list[Any]:
        if "the code is 4711" in turn.prompt:
            raise RuntimeError("the model provider is down")
        if "first" in turn.prompt:
            await steered_in.wait()
            return [call("channel_read")]
        if "what was the code" in turn.prompt:
            histories.append(turn.history_text)
            return [call("channel_reply", text="noted")]
        return [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            root = slack.add_message("C1", "<@UBOT> first", user="U1")
            assert (await app.deliver(events.app_mention("C1", "U1", "<@UBOT> first", root))).status == 200
            ts = slack.add_message("C1", "the code is 4711", user="U2", thread_ts=root)
            await app.deliver(events.message("C1", "U2", "the code is 4711", ts, thread_ts=root))
            steered_in.set()
            await app.idle()
            assert [m["text"] for m in slack.bot_messages("C1")] == [APOLOGY]
            ts2 = slack.add_message("C1", "what was the code?", user="U1", thread_ts=root)
            await app.deliver(events.message("C1", "U1", "what was the code?", ts2, thread_ts=root))
            await app.idle()
        assert len(histories) == 1 and "the code is 4711" in histories[0]
        assert [m["text"] for m in slack.bot_messages("C1")] == [APOLOGY, "noted"]


class ManualClock:
    """The scheduler's clock, moved by the test: lease expiry without waiting for it."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_run_that_lost_its_lease_stops_before_its_next_write(tmp_path: Path) -> None:
    """When the lease expires (on the scheduler's clock) and another instance takes the conversation,
    the run posts nothing more — neither its reply nor an apology — and leaves the inbox to the new owner."""
    thinking = asyncio.Event()
    go = asyncio.Event()

    async def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            thinking.set()
            await go.wait()
            return [call("channel_reply", text="too late")]
        return [""]

    clock = ManualClock()
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            assert app.service is not None
            scheduler, store = app.service.runner, app.service.store
            scheduler.clock = clock
            root = slack.add_message("C1", "<@UBOT> question", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> question", root))
            await thinking.wait()
            [task_id] = scheduler.executor.active_runs
            clock.now += scheduler.lease_ttl + 1  # no heartbeat renewed it in time
            assert await store.acquire_lease(task_id, owner="other-instance", ttl=60, now=clock.now)
            go.set()
            await app.idle()
            assert slack.bot_messages("C1") == []
            assert [i.ts for i in await store.pending_inbox(task_id)] == [root]
            lease = await store.get_lease(task_id)
            assert lease is not None and lease.owner == "other-instance"
