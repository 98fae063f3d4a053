"""Delivery plumbing: shared lookups survive a cancelled caller, progress never holds a run,
one HTTP session carries every Slack call, and errors say what they are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from app.runs import progress
from app.runs.ack_gate import AckGate
from app.runs.scheduler import Scheduler
from channel.slack.adapter import SlackAdapter
from storage import open_store
from storage.base import StoreError
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import echo_model
from tests.support.sessions import SessionEnv, identity_of, slack_session
from threadbound_emulator import FakeSlack

# A guard against hanging forever in a broken build, far above anything these tests wait for.
GUARD_S = 20.0


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[SessionEnv]:
    async with FakeSlack() as slack:
        _workspace(slack)
        root = slack.add_message("C1", "root", user="U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            yield env


async def test_a_cancelled_first_lookup_does_not_strand_the_other_waiters(env: SessionEnv) -> None:
    """When the caller that started a users.info lookup is cancelled, the others waiting for the
    same name still get it, from the one call."""
    env.slack.hold("users.info")
    first = asyncio.create_task(env.adapter.user("U1"))
    await env.slack.held("users.info").wait()
    second = asyncio.create_task(env.adapter.user("U1"))
    await asyncio.sleep(0)  # let it join the lookup in flight
    first.cancel()
    env.slack.release("users.info")
    async with asyncio.timeout(GUARD_S):
        assert await second == ("Alice", False)
    assert first.cancelled()
    assert env.slack.count("users.info") == 1


async def test_a_stuck_progress_indicator_does_not_hold_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status call Slack never answers delays the run's end by a bounded wait, not until it answers."""
    monkeypatch.setattr(progress, "SETTLE_S", 0.2)
    monkeypatch.setattr(progress, "CLEAR_S", 0.2)
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.hold("assistant.threads.setStatus")
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            async with asyncio.timeout(GUARD_S):  # the held call would answer only after 30 s
                await app.idle()
            assert len(slack.bot_messages("C1")) == 1
            slack.release("assistant.threads.setStatus")


async def test_every_slack_call_shares_one_http_session(env: SessionEnv, tmp_path: Path) -> None:
    """Reads, posts and file downloads reuse the adapter's one session's connections, and closing
    the adapter closes it."""
    opened = 0

    async def on_connection(*_: Any) -> None:
        nonlocal opened
        opened += 1

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(on_connection)
    http = aiohttp.ClientSession(trace_configs=[trace])
    adapter = SlackAdapter(
        token=env.slack.token,
        api_url=env.slack.api_url,
        identity=identity_of(env.slack),
        file_origins=[env.slack.files_origin],
        http=http,
    )
    env.adapter = adapter
    env.slack.add_file("F1", "notes.txt", "text/plain", b"hello " * 100)
    env.slack.add_message("C1", "a file", user="U1", thread_ts=env.root, files=[env.slack.file_object("F1")])
    for _ in range(3):  # each new session reads the thread afresh
        session = env.new_session()
        read = await session.call("channel_read", {})
    file_handle = read["messages"][-1]["files"][0]["file"]
    for n in range(3):
        assert "message" in await session.call("channel_reply", {"text": f"reply {n}"})
    session.enabled.add("channel_fetch_file")
    assert "path" in await session.call("channel_fetch_file", {"file": file_handle})
    calls = len(env.slack.calls) + len(env.slack.file_requests)
    assert calls >= 8 and opened == 1
    await adapter.close()
    assert http.closed


async def test_a_programming_error_in_a_slack_call_is_not_a_slack_error(env: SessionEnv) -> None:
    """A bug inside a Slack call keeps its type and traceback instead of becoming slack_error."""

    async def broken(**_: Any) -> None:
        raise TypeError("a bug in our code")

    env.adapter.link.write_client = SimpleNamespace(chat_postMessage=broken)  # type: ignore[assignment]
    with pytest.raises(TypeError, match="a bug in our code"):
        await env.session.call("channel_reply", {"text": "hello"})


async def test_a_storage_failure_is_not_reported_as_a_slack_error(
    env: SessionEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the store fails during a tool, the model reads no Slack error — nor any result: the store
    error stops the run, which is taken up again from its last checkpoint
    (``tests/test_store_errors_at_answer.py``); nothing was posted."""

    async def failing(**_: Any) -> None:
        raise StoreError("disk I/O error")

    monkeypatch.setattr(env.store, "open_effect", failing)
    with pytest.raises(StoreError, match="disk I/O error"):
        await env.session.call("channel_reply", {"text": "hello"})
    assert env.slack.bot_messages("C1") == []


async def test_a_burst_across_two_channels_at_one_post_per_second_loses_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    """Mentions in two channels at once, with Slack refusing more than one post per second per
    channel: every thread gets exactly one reply, the 429s were waited out, nothing posted twice."""
    per_channel = 4
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.add_channel("C2", "random")
        slack.rate_limit(per_second=1.0, burst=1)
        # However fast the runs go on this machine, the first two posts are refused (429) too.
        slack.fail("chat.postMessage", error="ratelimited", retry_after=1, times=2)
        # Whole posts (STREAM=off): the chat.postMessage path, never retried but for a 429.
        harness = AppHarness(slack, model=echo_model(), data_dir=tmp_path, progress="off", stream="off")
        async with harness as app:
            roots: list[tuple[str, str]] = []
            for n in range(per_channel):
                for channel in ("C1", "C2"):
                    text = f"<@UBOT> question {n} in {channel}"
                    ts = slack.add_message(channel, text, user="U1")
                    roots.append((channel, ts))
            responses = await asyncio.gather(
                *(
                    app.deliver(events.app_mention(c, "U1", f"<@UBOT> question {n // 2} in {c}", ts))
                    for n, (c, ts) in enumerate(roots)
                )
            )
            assert all(r.status == 200 for r in responses)
            await app.idle()
        for channel, ts in roots:
            replies = [m for m in slack.bot_messages(channel) if m.get("thread_ts") == ts]
            assert len(replies) == 1, (channel, ts, replies)
        assert len(slack.bot_messages()) == len(roots)
        refused = [c for c in slack.calls_to("chat.postMessage") if not (c.response or {}).get("ok")]
        assert len(refused) >= 2  # every refusal was waited out and made again


class _NoRuns:
    """An executor stand-in: these tests never get as far as a run."""


async def test_run_start_ups_wait_until_no_acknowledgement_is_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wake-up during a delivery's acknowledgement starts its driver only after the 200 went out;
    while deliveries keep arriving, drivers still start after a bounded patience."""
    store = open_store(f"sqlite:///{tmp_path}/gate.db")
    gate = AckGate()
    scheduler = Scheduler(store=store, executor=_NoRuns(), ack_gate=gate)  # type: ignore[arg-type]
    started: list[tuple[str, bool]] = []

    async def drive(task_id: str) -> None:
        started.append((task_id, gate.busy))

    monkeypatch.setattr(scheduler, "_drive", drive)
    try:
        with gate.acking():
            scheduler.notify("quiet-later")
            for _ in range(10):  # give a driver every chance to start while the ack is in flight
                await asyncio.sleep(0)
        await scheduler.idle()
        assert started == [("quiet-later", False)]
        with gate.acking():  # a burst that never pauses
            scheduler.notify("patience")
            await scheduler.idle()
        assert started[-1] == ("patience", True)
    finally:
        await scheduler.shutdown(0)
        await store.close()
