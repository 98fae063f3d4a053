"""Recovery: what a failed, lease-less or crashed run leaves behind is still answered, once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.runs.lease import Lease
from app.runs.run import APOLOGY, RunStopped
from storage import open_store
from tests.support import events
from tests.support.fake_model import FakeOpenAI, StuckFirst
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.postgres import fresh_schema
from tests.support.process import ServerProcess
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack


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


async def test_a_started_instance_has_already_taken_up_what_its_predecessor_left(tmp_path: Path) -> None:
    """A run cut off by a stop leaves its message pending. The next instance's first sweep is done
    by the time it serves: idle() right after the start waits for the answer (before, the sweep
    ran in the background after the start, so a message delivered to another instance meanwhile
    could be taken by it, and a test's read right after the start raced it)."""
    asked = asyncio.Event()

    async def stuck(turn: Turn) -> list[Any]:
        asked.set()
        await asyncio.Event().wait()  # cancelled by the stop
        return [""]

    def answers(turn: Turn) -> list[Any]:
        return [call("channel_reply", text="here now")] if turn.prompt else [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(stuck), data_dir=tmp_path, shutdown_grace=0.0) as app:
            root = slack.add_message("C1", "<@UBOT> anyone there", user="U1")
            assert (
                await app.deliver(events.app_mention("C1", "U1", "<@UBOT> anyone there", root))
            ).status == 200
            await asyncio.wait_for(asked.wait(), 20)
        assert slack.bot_messages("C1") == []
        async with AppHarness(slack, model=scripted(answers), data_dir=tmp_path) as again:
            await again.idle()
            assert [m["text"] for m in slack.bot_messages("C1")] == ["here now"]


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


# -- crashes: a dead process's conversations are taken over at once, not after LEASE_TTL ---------

#: Far longer than any test waits: an answer within the test's bound cannot come from expiry.
LONG_LEASE = "600"
#: How long a crashed conversation may take to be answered (restart or takeover, and one run).
WITHIN_S = 30.0


def _serve_env(slack: FakeSlack, llm: FakeOpenAI, data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "DATA_DIR": str(data_dir),
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "x",
        "LEASE_TTL": LONG_LEASE,
        "SWEEP_INTERVAL": "3600",
        "PROGRESS": "off",
        **extra,
    }


async def _answered(slack: FakeSlack, count: int = 1) -> None:
    await eventually(lambda: len(slack.bot_messages("C1")) >= count, within=WITHIN_S)


@pytest.mark.process
async def test_after_sigkill_a_restart_answers_the_pending_inbox_at_once(tmp_path: Path) -> None:
    """SQLite: the process is killed mid-run; the restarted process takes the dead process's
    conversation over immediately (no LEASE_TTL wait) and answers it, once."""
    model = StuckFirst()
    async with FakeSlack() as slack, FakeOpenAI(model) as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        env = _serve_env(slack, llm, tmp_path / "data")
        first = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "first.log")
        await first.start()
        root = slack.add_message("C1", "<@UBOT> are you there", user="U1")
        envelope = events.app_mention("C1", "U1", "<@UBOT> are you there", root)
        assert (
            await events.deliver(http, f"{first.url}/slack/events", envelope, SIGNING_SECRET)
        ).status == 200
        await model.first_request.wait()
        first.kill()
        await first.wait()
        second = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "second.log")
        await second.start()
        try:
            await _answered(slack)
        finally:
            model.release.set()
            await second.stop()
        [reply] = slack.bot_messages("C1")
        assert "are you there" in reply["text"] and reply.get("thread_ts") == root


@pytest.mark.process
async def test_on_postgres_a_live_instance_answers_for_a_killed_one(tmp_path: Path) -> None:
    """Two instances on one Postgres: the one running a conversation is killed mid-run, and the
    other, seeing its database session end, takes the conversation over and answers it without
    anyone writing again and long before the lease would expire."""
    model = StuckFirst()
    async with fresh_schema("tb_test") as pg:
        url = pg.url
        async with FakeSlack() as slack, FakeOpenAI(model) as llm, aiohttp.ClientSession() as http:
            _workspace(slack)
            servers = [
                ServerProcess(
                    _serve_env(slack, llm, tmp_path / name, DATABASE_URL=url),
                    cwd=tmp_path,
                    log_path=tmp_path / f"{name}.log",
                )
                for name in ("a", "b")
            ]
            for server in servers:
                await server.start()
            doomed, survivor = servers
            root = slack.add_message("C1", "<@UBOT> anyone there", user="U1")
            envelope = events.app_mention("C1", "U1", "<@UBOT> anyone there", root)
            response = await events.deliver(http, f"{doomed.url}/slack/events", envelope, SIGNING_SECRET)
            assert response.status == 200
            await model.first_request.wait()
            doomed.kill()
            await doomed.wait()
            try:
                await _answered(slack)
            finally:
                model.release.set()
                await survivor.stop()
            [reply] = slack.bot_messages("C1")
            assert "anyone there" in reply["text"] and reply.get("thread_ts") == root


async def test_a_lease_whose_renewals_fail_for_a_whole_ttl_counts_as_lost(tmp_path: Path) -> None:
    """When the store cannot be reached, the run keeps writing while its lease surely still holds,
    and stops once a whole LEASE_TTL passed without a renewal (on the scheduler's clock)."""
    store = open_store(f"sqlite:///{tmp_path}/lease.db")
    await store.migrate()
    clock = ManualClock()
    try:
        task = await store.create_task(channel="C1", thread_ts="1.1", now=clock.now)
        assert await store.acquire_lease(task.task_id, owner="me", ttl=60, now=clock.now)
        lease = Lease(store, task.task_id, owner="me", ttl=60, clock=clock)
        await store.close()  # every store call fails from here on
        clock.now += 40  # past half a lease: check asks the store, which fails; the lease still holds
        await lease.check()
        clock.now += 21  # a whole lease without a renewal: another instance may have it now
        with pytest.raises(RunStopped):
            await lease.check()
        assert lease.lost.is_set()
    finally:
        await store.close()
