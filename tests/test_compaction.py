"""Long conversations compact instead of forgetting (app/compaction.py)."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import channel.slack.link
from app.agent.usage import UsageMeter
from app.runs.compaction import SUMMARISER_INSTRUCTIONS, SUMMARY_HEADER, Compactor, _cut, render
from channel.slack.outbound import Outbound
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import call
from threadbound_emulator import FakeSlack

FILLER = "Some chatter about the weather and the week, nothing anyone needs to remember. " * 10
FACT = re.compile(r'"message": "(msg_[\w-]+)", "text": "[^"]*?the vault code is (\d+)')


def _texts(messages: list[ModelMessage]) -> list[str]:
    out: list[str] = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, UserPromptPart | TextPart) and isinstance(p.content, str):
                out.append(p.content)
            elif isinstance(p, ToolReturnPart):
                out.append(p.model_response_str())
    return out


class Reader:
    """A model that answers only from what it receives: an extractive summariser (it keeps the lines
    that mention the vault code), and an assistant that finds the code and its message handle."""

    def __init__(self) -> None:
        self.summaries = 0
        self.first_messages: list[str] = []  # the first history message of every assistant request
        self.reacted: Any = None

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=sum(len(t) for t in _texts(messages)) // 4, output_tokens=5)
        if info.instructions == SUMMARISER_INSTRUCTIONS:
            self.summaries += 1
            kept = [line for t in _texts(messages) for line in t.splitlines() if "vault code is" in line]
            return ModelResponse(parts=[TextPart("\n".join(kept) or "Chatter only.")], usage=usage)
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        prompt = " ".join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if prompt:
            self.first_messages.append(_texts(messages[:1])[0])
        parts: list[Any]
        if "what is the vault code" in prompt:
            match = next(m for t in _texts(messages) if (m := FACT.search(t)))
            parts = [call("channel_react", message=match.group(1), emoji="white_check_mark")]
        elif returns and returns[0].tool_name == "channel_react":
            self.reacted = returns[0].content
            match = next(m for t in _texts(messages) if (m := FACT.search(t)))
            parts = [call("channel_reply", text=f"The vault code is {match.group(2)}.")]
        elif prompt:
            parts = [call("channel_reply", text="noted")]
        else:
            parts = [TextPart("")]
        return ModelResponse(parts=parts, usage=usage)


async def test_a_fact_from_turn_1_is_reachable_at_turn_40_after_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past COMPACT_AFTER_TOKENS older turns become a stored summary; at turn 40 the model finds turn
    1's fact and its message handle in it (the handle still resolves), and compactions are counted."""
    # Slack's pace of one post a second per channel (channel.slack.outbound) is not under test here and
    # would make 40 answers in one thread take 40 s: this adapter's posts are not spaced.
    monkeypatch.setattr(channel.slack.link, "Outbound", partial(Outbound, rate=1000.0, burst=1000))
    reader = Reader()
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=FunctionModel(reader), data_dir=tmp_path, stream="off", compact_after_tokens=2_000
        ) as app:
            root = slack.add_message("C1", "<@UBOT> the vault code is 4711", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> the vault code is 4711", root))
            await app.idle()
            for i in range(2, 40):
                ts = slack.add_message("C1", f"turn {i}: {FILLER}", user="U1", thread_ts=root)
                await app.deliver(events.message("C1", "U1", f"turn {i}: {FILLER}", ts, thread_ts=root))
                await app.idle()
            ts = slack.add_message("C1", "what is the vault code?", user="U1", thread_ts=root)
            await app.deliver(events.message("C1", "U1", "what is the vault code?", ts, thread_ts=root))
            await app.idle()
            assert app.service is not None
            [usage] = await app.service.store.usage_by_day("2000-01-01")
            task_id = await app.service.store.find_task("C1", root)
            assert task_id is not None
            task = await app.service.store.get_task(task_id)
    replies = [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")]
    assert replies[-1] == "The vault code is 4711."
    assert reader.reacted is not None and "error" not in str(reader.reacted)
    [original] = [m for m in slack.messages("C1", root) if m["ts"] == root]
    assert original.get("reactions"), "the handle from turn 1 still named its message"
    # Compaction happened (turn 40's history starts with the summary, not turn 1) more than once,
    # each time once, not per request; and the summariser's requests are counted as usage.
    assert reader.first_messages[-1].startswith(SUMMARY_HEADER)
    assert 2 <= reader.summaries <= 20
    assert task is not None and "vault code is 4711" in task.summary
    assistant_requests = usage.requests - reader.summaries
    assert assistant_requests >= 2 * 40


def test_cut_keeps_the_newest_turns_and_cuts_only_before_a_prompt() -> None:
    """The kept tail starts at a person's prompt and fits in ``keep``; the newest turn is always kept."""
    messages: list[ModelMessage] = []
    for i in range(6):
        messages += [
            ModelRequest(parts=[UserPromptPart(f"prompt {i}")]),
            ModelResponse(parts=[ToolCallPart("channel_reply", {"text": "x"}, tool_call_id=f"c{i}")]),
            ModelRequest(parts=[ToolReturnPart("channel_reply", {"ok": True}, tool_call_id=f"c{i}")]),
            ModelResponse(parts=[TextPart("")]),
        ]
    sizes = [10] * len(messages)
    assert _cut(messages, sizes, keep=80) == 16  # two turns of 40
    assert _cut(messages, sizes, keep=5) == 20  # the newest turn, although it is bigger than keep
    assert _cut(messages[:4], sizes[:4], keep=5) == 0  # one turn: nothing to cut
    text = render("earlier", messages[:4])
    assert (
        text.startswith("Summary so far:\nearlier")
        and '[assistant called channel_reply] {"text":"x"}' in text
    )


async def test_a_failed_compaction_keeps_the_history(tmp_path: Path) -> None:
    """A summariser that fails leaves the history as it was (the run goes on) and records nothing."""

    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("provider down")

    recorded: list[Any] = []

    class Store:
        async def record_usage(self, record: Any) -> None:
            recorded.append(record)

    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(FILLER)]),
        ModelResponse(parts=[TextPart("ok")]),
        ModelRequest(parts=[UserPromptPart(FILLER)]),
        ModelResponse(parts=[TextPart("ok")]),
    ]
    meter = UsageMeter(Store(), "T", "U1", "C1")  # type: ignore[arg-type]
    compactor = Compactor(FunctionModel(broken), after_tokens=100)
    assert await compactor.compact("", history, meter) is None
    assert recorded == []
    assert Compactor.prefix("") == []
