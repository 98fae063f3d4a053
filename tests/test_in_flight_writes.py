"""Writes Slack applies late ("Exactly once at every point and under every schedule"): a write whose
connection was cut counts as maybe applied until it can no longer land. Its writer looks again until
then; a run taking over an entry another run left open waits it out before it settles the entry.

The emulator's ``late`` fault cuts the caller's connection at once and applies the write seconds
later. The sessions here count a write as maybe applied for ``IN_FLIGHT_S`` (2 s) after its attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from channel.slack.link import effect_id_of
from tests.support.sessions import SessionEnv, slack_session
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

#: Seconds after the cut the emulator applies a write: within the sessions' window.
LATE_S = 1.0


@pytest.fixture
async def env(tmp_path: Path) -> Any:
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        root = slack.add_message("C1", "<@UBOT> hi", user="U1")
        async with slack_session(
            slack, tmp_path, channel="C1", thread_ts=root, enabled=["channel_edit", "channel_retract"]
        ) as session_env:
            yield session_env


async def _posted(env: SessionEnv, text: str = "Draft") -> str:
    result = await env.session.call("channel_reply", {"text": text})
    handle: str = result["message"]
    return handle


def _shown(env: SessionEnv) -> list[str]:
    return [m.get("text", "") for m in env.slack.bot_messages("C1")]


# -- the writer looks again ------------------------------------------------------------------------


async def test_a_reply_slack_applies_late_is_found_by_its_writer(env: SessionEnv) -> None:
    """The post's connection cut, the post shows a second later: the model gets its handle, and it
    is in the thread once (looked at once, it would be reported not posted)."""
    env.slack.late("chat.postMessage", LATE_S)
    result = await env.session.call("channel_reply", {"text": "The launch moves to March 3rd."})
    assert result.get("message", "").startswith("msg_"), result
    assert len(env.slack.bot_messages("C1")) == 1


async def test_an_edit_slack_applies_late_is_done(env: SessionEnv) -> None:
    handle = await _posted(env)
    env.slack.late("chat.update", LATE_S)
    result = await env.session.call("channel_edit", {"message": handle, "text": "Final"})
    assert result == {"message": handle}
    assert env.slack.count("chat.update") == 1


async def test_a_retraction_slack_applies_late_is_done(env: SessionEnv) -> None:
    handle = await _posted(env)
    env.slack.late("chat.delete", LATE_S)
    result = await env.session.call("channel_retract", {"message": handle})
    assert result == {"ok": True}
    assert env.slack.bot_messages("C1") == []


async def test_a_reaction_slack_applies_late_is_done(env: SessionEnv) -> None:
    handle = await _posted(env)
    env.slack.late("reactions.add", LATE_S)
    result = await env.session.call("channel_react", {"message": handle, "emoji": "eyes"})
    assert result == {"ok": True}
    assert env.slack.count("reactions.add") == 1
    assert env.slack.bot_messages("C1")[0].get("reactions")


# -- a run taking over waits it out ----------------------------------------------------------------


async def _dies_in_flight(env: SessionEnv, method: str, call: Awaitable[Any]) -> None:
    """Run ``call`` until Slack has cut its ``method`` request (applied later), then end it there, as
    a process killed with the request out: its journal entry stays open."""
    before = env.slack.count(method)
    writer = asyncio.ensure_future(call)
    await eventually(lambda: env.slack.count(method) > before and env.slack.pending_late > 0)
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)


async def _take_over(env: SessionEnv) -> list[str]:
    """A later run's start: the entries left open are settled."""
    survivor = env.new_session()
    return await survivor.reconcile(await env.store.open_effects(env.task.task_id))


async def test_a_reply_on_its_way_when_its_writer_died_is_found_not_posted_again(env: SessionEnv) -> None:
    env.slack.late("chat.postMessage", LATE_S)
    await _dies_in_flight(env, "chat.postMessage", env.session.call("channel_reply", {"text": "Once."}))
    assert env.slack.bot_messages("C1") == []  # not applied yet when the survivor starts
    notes = await _take_over(env)
    assert len(notes) == 1 and "was posted as msg_" in notes[0], notes
    assert len(env.slack.bot_messages("C1")) == 1
    assert effect_id_of(env.slack.bot_messages("C1")[0])
    assert await env.store.open_effects(env.task.task_id) == []


async def test_an_edit_on_its_way_is_made_again_only_once_it_can_no_longer_land(env: SessionEnv) -> None:
    """Made again at once, the original landing late would undo the model's next edit."""
    handle = await _posted(env)
    env.slack.late("chat.update", LATE_S)
    await _dies_in_flight(
        env, "chat.update", env.session.call("channel_edit", {"message": handle, "text": "Second"})
    )
    notes = await _take_over(env)
    assert notes == ["- an interrupted channel_edit was completed"], notes
    survivor = env.new_session()
    assert await survivor.call("channel_edit", {"message": handle, "text": "Third"}) == {"message": handle}
    await env.slack.settle_late()
    assert _shown(env) == ["Third"]


async def test_a_reaction_on_its_way_is_added_again_only_once_it_can_no_longer_land(env: SessionEnv) -> None:
    """Added again at once and then removed by the model, the original landing late would put it back."""
    handle = await _posted(env)
    env.slack.late("reactions.add", LATE_S)
    await _dies_in_flight(
        env, "reactions.add", env.session.call("channel_react", {"message": handle, "emoji": "eyes"})
    )
    await _take_over(env)
    survivor = env.new_session()
    removed = await survivor.call("channel_react", {"message": handle, "emoji": "eyes", "action": "remove"})
    assert removed == {"ok": True}
    await env.slack.settle_late()
    assert not env.slack.bot_messages("C1")[0].get("reactions")
