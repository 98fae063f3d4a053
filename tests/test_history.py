"""Transcript trimming keeps long conversations inside the model's context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from app.runs.run import trim_history
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack


def _turn(i: int) -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart(f"prompt {i}")]),
        ModelResponse(parts=[ToolCallPart("channel_reply", {"text": "x"}, tool_call_id=f"c{i}")]),
        ModelRequest(parts=[ToolReturnPart("channel_reply", {"ok": True}, tool_call_id=f"c{i}")]),
        ModelResponse(parts=[TextPart("")]),
    ]


def test_trim_cuts_only_before_a_prompt() -> None:
    """A transcript over the limit keeps its newest turns whole, starting at a user prompt."""
    messages = [m for i in range(10) for m in _turn(i)]
    trimmed = trim_history(messages, 10)
    assert len(trimmed) == 8
    first = trimmed[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[0], UserPromptPart)
    assert first.parts[0].content == "prompt 8"
    assert trim_history(messages, 100) == messages


async def test_a_long_conversation_sends_a_bounded_history(tmp_path: Path) -> None:
    """With HISTORY_LIMIT, the model receives at most that many earlier messages, newest kept."""
    sizes: list[int] = []
    histories: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            sizes.append(len(turn.messages))
            histories.append(turn.history_text)
            return [call("channel_reply", text="ok")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, history_limit=8) as app:
            root = slack.add_message("C1", "<@UBOT> message 0", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> message 0", root))
            await app.idle()
            for i in range(1, 6):
                ts = slack.add_message("C1", f"message {i}", user="U1", thread_ts=root)
                await app.deliver(events.message("C1", "U1", f"message {i}", ts, thread_ts=root))
                await app.idle()
        assert max(sizes) <= 8 + 1  # the kept history plus the new prompt
        assert "message 4" in histories[-1] and "message 0" not in histories[-1]
