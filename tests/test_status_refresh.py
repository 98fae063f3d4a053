"""The thinking status outlives Slack's ~2-minute expiry: set again while a run works, with rotating
loading messages (the agent file's, else a default set), and cleared when the run ends."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from app.agent.agent_file import AgentFile
from app.runs import progress
from channel.contract import Origin
from channel.fake import FakeAdapter
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import (
    Turn,
    _answer,  # type: ignore[attr-defined]
    call,
)
from threadbound_emulator import FakeSlack


async def until(check: Any, what: str) -> None:
    """Wait (bounded) for ``check()`` to hold: the test waits on events, never on durations."""
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def waiting_model(slack: FakeSlack, script: Any, refreshes: int) -> FunctionModel:
    """A model whose first request answers only once the status was set ``refreshes`` more times."""

    async def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            start = len(slack.statuses)
            await until(lambda: len(slack.statuses) >= start + refreshes, "status refreshed")
        return await _answer(script, messages, info)

    return FunctionModel(fn)


async def run_once(tmp_path: Path, script: Any, agent_toml: str, refreshes: int) -> FakeSlack:
    agent = tmp_path / "agent.toml"
    agent.write_text(agent_toml, encoding="utf-8")
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        model = waiting_model(slack, script, refreshes)
        async with AppHarness(
            slack, model=model, data_dir=tmp_path / "d", stream="off", agent_file=agent
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            await app.idle()
            ended = len(slack.statuses)
            await asyncio.sleep(20 * progress.REFRESH_S)
            assert len(slack.statuses) == ended, "the status was set again after the run ended"
    return slack


def shown_at_end(slack: FakeSlack) -> str:
    """The status the run's thread shows (Slack clears it when the app posts there)."""
    [(channel, thread_ts)] = {(s.channel_id, s.thread_ts) for s in slack.statuses}
    return slack.status_shown(channel, thread_ts)


@pytest.fixture(autouse=True)
def fast_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "REFRESH_S", 0.01)


async def test_a_long_run_keeps_its_status_with_the_agent_files_loading_messages(tmp_path: Path) -> None:
    """While the model works the status is set again and again, each time with the agent file's
    loading_messages; the run's end clears it and the refreshing stops."""

    def script(turn: Turn) -> list[Any]:
        return [call("channel_reply", text="done")] if turn.prompt else [""]

    slack = await run_once(
        tmp_path, script, 'loading_messages = ["Checking the runbook…", "Asking the oracle…"]\n', 3
    )
    statuses = [(s.status, s.loading_messages) for s in slack.statuses]
    mine = ("Checking the runbook…", "Asking the oracle…")
    assert statuses[:4] == [("is thinking…", mine)] * 4
    assert shown_at_end(slack) == ""  # cleared: by the reply, or by the run's end if a refresh came after
    assert [m["text"] for m in slack.bot_messages("C1")] == ["done"]


async def test_without_loading_messages_the_default_set_rotates(tmp_path: Path) -> None:
    """An agent file without loading_messages gets threadbound's default set."""

    def script(turn: Turn) -> list[Any]:
        return [call("channel_reply", text="done")] if turn.prompt else [""]

    slack = await run_once(tmp_path, script, 'instructions = "Be brief."\n', 1)
    assert slack.statuses[0].loading_messages == progress.LOADING_MESSAGES
    assert slack.statuses[1].loading_messages == progress.LOADING_MESSAGES


async def test_a_refresh_repeats_the_tool_status_it_shows(tmp_path: Path) -> None:
    """After a tool step changed the status, a refresh sets that text again (without loading messages)."""
    reading = "is reading the thread…"
    seen: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            return [call("channel_read")]
        if turn.results and turn.results[-1][0] == "channel_read":
            seen.append("read")
            return [call("channel_reply", text="read it")]
        return [""]

    async def slow_second(slack: FakeSlack) -> None:
        await until(lambda: [s.status for s in slack.statuses].count(reading) >= 2, "tool status refreshed")

    agent = tmp_path / "agent.toml"
    agent.write_text("", encoding="utf-8")
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")

        async def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if len(messages) == 3:  # the request after channel_read's result
                await slow_second(slack)
            return await _answer(script, messages, info)

        async with AppHarness(
            slack, model=FunctionModel(fn), data_dir=tmp_path / "d", stream="off", agent_file=agent
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            await app.idle()
    refreshed = [s for s in slack.statuses if s.status == reading]
    assert len(refreshed) >= 2 and all(s.loading_messages == () for s in refreshed)
    assert seen == ["read"] and shown_at_end(slack) == ""


def test_loading_messages_are_checked_in_the_agent_file(tmp_path: Path) -> None:
    """More than ten loading messages, or an empty one, stops start-up naming the file and the rule."""
    agent = tmp_path / "agent.toml"
    agent.write_text("loading_messages = [" + ", ".join('"x"' for _ in range(11)) + "]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"loading_messages must be a list of at most 10 non-empty strings"):
        AgentFile.load(agent)
    agent.write_text('loading_messages = [""]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"loading_messages must be"):
        AgentFile.load(agent)


class _StuckRefresh(FakeAdapter):
    """Sets the first status at once; every later setStatus hangs (a call Slack may or may not have
    applied when the run's end cancels it)."""

    def __init__(self) -> None:
        super().__init__()
        self.hanging = asyncio.Event()

    async def set_status(self, origin: Origin, status: str, loading_messages: Sequence[str] = ()) -> None:
        if self.statuses and status:
            self.hanging.set()
            await asyncio.Event().wait()
        await super().set_status(origin, status, loading_messages)


@dataclass(eq=False)
class _Run:
    """What progress reads of a run's session."""

    adapter: FakeAdapter
    origin: Origin
    streaming: bool = False
    posts_begun: int = 0
    last_thread_post: int = 0


async def test_a_refresh_cut_off_mid_call_is_cleared_even_after_a_reply() -> None:
    """The run's end cancels a refresh whose setStatus was in flight: Slack may apply it after the
    reply that would have cleared the status, so the end clears it although a reply came later."""
    adapter = _StuckRefresh()
    run = _Run(adapter, Origin("C1", "100.000001"))
    shown = progress.Progress("status")
    await shown.on_start(run, [])  # type: ignore[arg-type]
    await until(lambda: adapter.hanging.is_set(), "a refresh in flight")
    run.posts_begun = run.last_thread_post = 1  # a reply begun after the status was first set
    await shown.on_end(run, [], "ok")  # type: ignore[arg-type]
    assert [status for _, status in adapter.statuses] == ["is thinking…", ""]
