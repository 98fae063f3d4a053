"""Streamed answers stay exactly once when Slack ends a stream, a connection drops or a run crashes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from channel.contract import Step
from tests.support.sessions import slack_session
from threadbound_emulator import FakeSlack


def _shown(message: dict[str, Any]) -> str:
    """What a reader sees of a bot message: its markdown block (``text`` is the notification fallback)."""
    blocks = [b["text"] for b in message.get("blocks", []) if b.get("type") == "markdown"]
    return "".join(blocks) if blocks else str(message.get("text", ""))


def _thread(slack: FakeSlack) -> str:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    return slack.add_message("C1", "<@UBOT> how much?", user="U1")


async def test_a_stream_slack_ends_while_text_after_a_lt_is_held_continues_without_repeating(
    tmp_path: Path,
) -> None:
    """Slack ends the stream while "cost < budget" waits for a ``>``: the answer continues in a new
    message from exactly where the shown text stops, nothing repeated."""
    answer = "The cost < budget, so a -> b."
    async with FakeSlack() as slack:
        root = _thread(slack)
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            session = env.session
            assert session.stream_answers({"user": "U1", "team": "T1"}, interval=0.0)
            session.stream_text("text:1", "The cost ")
            await slack.wait_for_calls("chat.startStream")
            session.stream_text("text:1", "The cost < budget, ")
            session.stream_step(Step("t1", "Reading the thread", "in_progress"))
            await slack.wait_for_calls("chat.appendStream")
            assert slack.expire_streams() == 1
            await session.answer_with(answer)
        texts = [_shown(m) for m in slack.bot_messages("C1")]
        assert "".join(texts) == answer, texts
        assert texts[0] == "The cost "
