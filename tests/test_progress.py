"""Visible progress while a run works: assistant status where Slack allows it, else a reaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.service import StartupError
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, echo_model, scripted
from threadbound_emulator import FakeSlack


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


def _bot_reactions(slack: FakeSlack, channel: str, ts: str) -> list[str]:
    message = next(m for m in slack.messages(channel) if m["ts"] == ts)
    return [r["name"] for r in message.get("reactions", []) if slack.bot_user_id in r["users"]]


async def _mention(app: AppHarness, text: str = "hi") -> str:
    ts = app.slack.add_message("C1", f"<@UBOT> {text}", user="U1")
    response = await app.deliver(events.app_mention("C1", "U1", f"<@UBOT> {text}", ts))
    assert response.status == 200
    return ts


async def _one_turn(slack: FakeSlack, script: Any, tmp_path: Path) -> str:
    """One mention answered by ``script`` with STREAM=off, run to its end; the mention's ts."""
    _workspace(slack)
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, stream="off") as app:
        ts = await _mention(app)
        await app.idle()
    return ts


async def test_status_shows_thinking_then_the_tool_and_is_cleared(tmp_path: Path) -> None:
    """With STREAM=off, in a thread with chat:write alone (no assistant:write, Slack's 2026-03-05 rule) the
    status says "is thinking…", names the tool, then is cleared by the reply posted after it (Slack
    clears a thread's status when the app posts there: the run's end makes no call of its own).
    Streamed answers show the tool as a step instead: test_streaming.py."""
    seen_at_first_request: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            seen_at_first_request.extend(s.status for s in slack.statuses)
            return [call("channel_read")]
        if turn.results and turn.results[-1][0] == "channel_read":
            return [call("channel_reply", text="done reading")]
        return [""]

    async with FakeSlack() as slack:
        ts = await _one_turn(slack, script, tmp_path)
        assert seen_at_first_request == ["is thinking…"]
        assert [s.status for s in slack.statuses] == ["is thinking…", "is reading the thread…"]
        assert slack.status_shown("C1", ts) == ""
        assert all(s.channel_id == "C1" and s.thread_ts == ts for s in slack.statuses)
        assert slack.count("reactions.add") == 0
        assert [m["text"] for m in slack.bot_messages("C1")] == ["done reading"]


async def test_a_status_set_after_the_last_reply_is_cleared_at_the_end(tmp_path: Path) -> None:
    """A reply, then a tool that sets the status again, then the end with no more posts: nothing
    has cleared that status, so the run's end does (and the thread shows none)."""

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            return [call("channel_reply", text="on it")]
        if turn.results and turn.results[-1][0] == "channel_reply":
            return [call("channel_read")]
        return [""]

    async with FakeSlack() as slack:
        ts = await _one_turn(slack, script, tmp_path)
        assert [s.status for s in slack.statuses] == ["is thinking…", "is reading the thread…", ""]
        assert slack.status_shown("C1", ts) == ""
        assert [m["text"] for m in slack.bot_messages("C1")] == ["on it"]


async def test_when_slack_refuses_the_status_a_reaction_shows_progress_and_is_removed(tmp_path: Path) -> None:
    """When Slack refuses the status the inbound message wears the emoji while the run works, then
    loses it."""
    during: list[list[str]] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            during.append(_bot_reactions(slack, "C1", mention_ts))
            return [call("channel_reply", text="hello")]
        return [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        slack.fail("assistant.threads.setStatus", error="not_allowed", times=None)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            mention_ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", mention_ts))
            await app.idle()
        assert during == [["eyes"]]
        assert _bot_reactions(slack, "C1", mention_ts) == []
        assert [c.params["name"] for c in slack.calls_to("reactions.remove")] == ["eyes"]
        assert slack.count("assistant.threads.setStatus") == 1  # tried once, then the reaction
        assert [m["text"] for m in slack.bot_messages("C1")] == ["hello"]


async def test_a_top_level_dm_gets_the_reaction_with_the_configured_emoji(tmp_path: Path) -> None:
    """A DM's top level is no thread, so even with the status feature progress is a reaction
    (PROGRESS_EMOJI)."""
    async with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_channel("D1", "alice-dm", is_im=True, user="U1")
        async with AppHarness(
            slack, model=echo_model(), data_dir=tmp_path, progress_emoji="hourglass_flowing_sand"
        ) as app:
            ts = slack.add_message("D1", "hello", user="U1")
            await app.deliver(events.message("D1", "U1", "hello", ts, channel_type="im"))
            await app.idle()
        assert [c.params["name"] for c in slack.calls_to("reactions.add")] == ["hourglass_flowing_sand"]
        assert [c.params["timestamp"] for c in slack.calls_to("reactions.add")] == [ts]
        assert slack.count("reactions.remove") == 1
        assert slack.count("assistant.threads.setStatus") == 0


async def test_progress_off_does_nothing(tmp_path: Path) -> None:
    """PROGRESS=off makes no status and no reaction calls; the reply still arrives."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, progress="off") as app:
            await _mention(app)
            await app.idle()
        assert slack.count("assistant.threads.setStatus") == 0
        assert slack.count("reactions.add") == 0 and slack.count("reactions.remove") == 0
        assert len(slack.bot_messages("C1")) == 1


async def test_slack_refusing_status_and_reactions_never_fails_the_run(tmp_path: Path) -> None:
    """A refused setStatus falls back to the reaction; a refused reaction too, and the reply still arrives."""
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.fail("assistant.threads.setStatus", error="not_allowed", times=None)
        slack.fail("reactions.add", error="missing_scope", times=None)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            await _mention(app, "are you there")
            await app.idle()
        assert slack.count("assistant.threads.setStatus") == 1  # tried once, not again at the end
        assert slack.count("reactions.add") == 1 and slack.count("reactions.remove") == 0
        texts = [m["text"] for m in slack.bot_messages("C1")]
        assert len(texts) == 1 and "are you there" in texts[0]


async def test_status_mode_never_falls_back_to_a_reaction(tmp_path: Path) -> None:
    """PROGRESS=status shows a status or nothing: when Slack refuses it no reaction is added."""
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.fail("assistant.threads.setStatus", error="not_allowed", times=None)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, progress="status") as app:
            await _mention(app)
            await app.idle()
        assert slack.count("reactions.add") == 0 and slack.count("assistant.threads.setStatus") == 1
        assert len(slack.bot_messages("C1")) == 1


async def test_an_unknown_progress_mode_is_refused_at_start(tmp_path: Path) -> None:
    """PROGRESS must be auto, status, reaction or off; anything else stops start-up with the choices."""
    async with FakeSlack() as slack:
        with pytest.raises(StartupError, match="auto, status, reaction, off"):
            async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, progress="spinner"):
                pass
