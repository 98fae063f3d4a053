"""What an MCP server sends besides results, mapped onto the thread: progress, log lines, resources,
a changed tool list, sampling — through the whole app against a real fastmcp server over stdio."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types
import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from app.agent.mcp.config import McpConfigError, parse_servers
from app.agent.mcp.scope import CallScope, InFlight, progress_text
from app.agent.mcp.talkback import Sampler
from app.agent.usage import Budgets, UsageMeter
from app.logs import capture
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

PYTHON = sys.executable.replace("\\", "/")
TALKBACK = (Path(__file__).parent / "support" / "mcp_talkback.py").as_posix()
SECRET = "talkback-canary-5f1e9a"


def agent_file(tmp_path: Path, extra: str = "", eager: str = '["*"]') -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(
        f"""
[mcp.tb]
command = ["{PYTHON}", "{TALKBACK}"]
env = {{ TALKBACK_SECRET = "${{TALKBACK_SECRET}}" }}
eager = {eager}
timeout = 20
{extra}
""",
        encoding="utf-8",
    )
    return path


async def converse(
    tmp_path: Path,
    script: Any,
    *,
    eager: str = '["*"]',
    monkeypatch: pytest.MonkeyPatch,
    **settings: Any,
) -> tuple[FakeSlack, AppHarness]:
    monkeypatch.setenv("TALKBACK_SECRET", SECRET)
    slack = FakeSlack()
    await slack.__aenter__()
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    app = AppHarness(
        slack,
        model=scripted(script),
        data_dir=tmp_path / "data",
        agent_file=agent_file(tmp_path, eager=eager),
        **settings,
    )
    await app.__aenter__()
    ts = slack.add_message("C1", "<@UBOT> go", user="U1")
    await app.deliver(events.app_mention("C1", "U1", "<@UBOT> go", ts))
    await app.idle()
    return slack, app


async def close(slack: FakeSlack, app: AppHarness) -> None:
    await app.__aexit__(None, None, None)
    await slack.__aexit__(None, None, None)


@pytest.mark.process
async def test_resources_in_a_result_become_files_the_model_can_attach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded resource and a resource link are saved in the task's directory and named in the
    result; channel_attach posts one of them."""
    seen: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        seen.extend(turn.results)
        if turn.step == 0:
            return [call("tb_report")]
        if turn.step == 1:
            return [call("tool_search", query="attach a file", limit=1)]
        if turn.step == 2:
            [result] = [r for name, r in seen if name == "tb_report"]
            csv = next(
                p["file"] for p in result["content"] if isinstance(p, dict) and p["uri"].endswith(".csv")
            )
            return [call("channel_attach", path=csv, comment="The summary")]
        return [""]

    slack, app = await converse(tmp_path, script, monkeypatch=monkeypatch, stream="off")
    try:
        [(_, result)] = [r for r in seen if r[0] == "tb_report"]
        text, notes, summary = result["content"]
        assert text == "Here is the report."
        assert notes["uri"] == "data://reports/notes.md" and notes["media_type"] == "text/markdown"
        assert summary["uri"] == "data://reports/summary.csv" and summary["file"].endswith("summary.csv")
        assert "channel_attach" in result["note"]
        task_dir = next((tmp_path / "data" / "tasks").iterdir())
        assert (task_dir / notes["file"]).read_text() == "# Notes\nAll good.\n"
        assert (task_dir / summary["file"]).read_text() == "name,total\nalpha,3\nbeta,5\n"
        uploads = [f for f in slack.files.values() if f.content is not None]
        assert [u.content for u in uploads] == [b"name,total\nalpha,3\nbeta,5\n"]
    finally:
        await close(slack, app)


@pytest.mark.process
async def test_a_changed_tool_list_is_searchable_from_the_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tb_bonus is absent until tb_unlock makes the server announce tools/list_changed; then
    tool_search finds it and the call reaches the server."""
    offered: list[list[str]] = []
    seen: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        offered.append(turn.tools)
        seen.extend(turn.results)
        if turn.step == 0:
            return [call("tb_unlock")]
        if turn.step == 1:
            return [call("tool_search", query="bonus tool", limit=1)]
        if turn.step == 2:
            return [call("tb_bonus")]
        return [""]

    eager = '["unlock", "report"]'
    slack, app = await converse(tmp_path, script, eager=eager, monkeypatch=monkeypatch, stream="off")
    try:
        assert "tb_bonus" not in offered[0]
        [(_, found)] = [r for r in seen if r[0] == "tool_search"]
        assert [e["name"] for e in found["enabled"]] == ["tb_bonus"], found
        assert "tb_bonus" in offered[2]
        assert ("tb_bonus", "bonus!") in seen
    finally:
        await close(slack, app)


@pytest.mark.process
async def test_progress_shows_in_the_thread_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def script(turn: Turn) -> list[Any]:
        if turn.step == 0:
            return [call("tb_export_rows", steps=3)]
        return ["done"]

    slack, app = await converse(tmp_path, script, monkeypatch=monkeypatch, stream="off")
    try:
        statuses = [c.params.get("status", "") for c in slack.calls_to("assistant.threads.setStatus")]
        assert any("tb: export rows (3 of 3: step 3 of the export)" in s for s in statuses), statuses
    finally:
        await close(slack, app)


@pytest.mark.process
async def test_progress_shows_in_a_streamed_answers_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def script(turn: Turn) -> list[Any]:
        if turn.step == 0:
            return [call("tb_export_rows", steps=3)]
        return ["done"]

    slack, app = await converse(tmp_path, script, monkeypatch=monkeypatch, stream="auto")
    try:
        sent = json.dumps(
            [c.params for c in slack.calls if c.method.startswith("chat.") and "Stream" in c.method]
        )
        assert "export rows (3 of 3: step 3 of the export)" in sent
    finally:
        await close(slack, app)


@pytest.mark.process
async def test_server_log_lines_reach_the_debug_log_without_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def script(turn: Turn) -> list[Any]:
        return [call("tb_chatty")] if turn.step == 0 else [""]

    monkeypatch.setenv("TALKBACK_SECRET", SECRET)
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice")
        harness = AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=agent_file(tmp_path)
        )
        with capture(harness.settings) as logged:
            async with harness as app:
                ts = slack.add_message("C1", "<@UBOT> go", user="U1")
                await app.deliver(events.app_mention("C1", "U1", "<@UBOT> go", ts))
                await app.idle()
    lines = [line for line in logged.lines() if line["message"].startswith("MCP tb")]
    assert {line["level"] for line in lines} == {"debug"}
    said = " ".join(line["message"] for line in lines)
    assert "starting the chatty tool" in said and "connecting with key [redacted]" in said
    assert SECRET not in logged.text


def test_sampling_is_a_per_server_choice_with_a_bound() -> None:
    source = Path("agent.toml")
    [plain] = parse_servers({"a": {"command": ["x"]}}, source=source)
    assert plain.sampling is False
    [allowed] = parse_servers(
        {"a": {"command": ["x"], "sampling": True, "sampling_max_tokens": 200}}, source=source
    )
    assert allowed.sampling and allowed.sampling_max_tokens == 200
    with pytest.raises(McpConfigError, match="sampling must be true or false"):
        parse_servers({"a": {"command": ["x"], "sampling": "yes"}}, source=source)
    with pytest.raises(McpConfigError, match="sampling_max_tokens"):
        parse_servers({"a": {"command": ["x"], "sampling_max_tokens": 0}}, source=source)


class _Store:
    """What Budgets and UsageMeter need of a store."""

    def __init__(self, spent: int = 0) -> None:
        self.spent = spent
        self.rows: list[Any] = []

    async def tokens_spent(self, day: str, person: str | None = None) -> int:
        return self.spent

    async def record_usage(self, record: Any) -> None:
        self.rows.append(record)


def _params(max_tokens: int) -> mcp_types.CreateMessageRequestParams:
    return mcp_types.CreateMessageRequestParams(
        messages=[
            mcp_types.SamplingMessage(role="user", content=mcp_types.TextContent(type="text", text="hi"))
        ],
        max_tokens=max_tokens,
    )


def _scope(person: str, usage: UsageMeter | None = None) -> CallScope:
    session: Any = SimpleNamespace(requester=person, streaming=False)
    return CallScope(session=session, tool="tb_summarize", label="tb: summarize", call_id="c1", usage=usage)


async def test_sampling_answers_for_the_calls_person_bounded_and_counted() -> None:
    asked: list[Any] = []

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        asked.append(info.model_settings)
        return ModelResponse(
            parts=[TextPart("a short summary")], usage=RequestUsage(input_tokens=7, output_tokens=3)
        )

    store = _Store()
    meter = UsageMeter(store, "T1", "U1", "C1")  # type: ignore[arg-type]
    inflight = InFlight()
    sampler = Sampler("tb", inflight, FunctionModel(model), 100, Budgets(store, per_user=1_000))  # type: ignore[arg-type]
    with inflight.calling(_scope("U1", meter)):
        result = await sampler([], _params(5_000), None)
    assert result.content.text == "a short summary"
    assert asked[0]["max_tokens"] == 100  # the server asked for 5,000
    [row] = store.rows
    assert (row.person, row.task_id, row.input_tokens, row.output_tokens) == ("U1", "T1", 7, 3)


async def test_sampling_is_refused_when_it_cannot_be_told_whose_or_the_budget_is_spent() -> None:
    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        raise AssertionError("no model request may be made")

    inflight = InFlight()
    store = _Store(spent=5_000)
    sampler = Sampler("tb", inflight, FunctionModel(model), 100, Budgets(store, per_user=1_000))  # type: ignore[arg-type]
    outside = await sampler([], _params(10), None)
    assert isinstance(outside, mcp_types.ErrorData) and "only answered during a tool call" in outside.message
    with inflight.calling(_scope("U1")):
        spent = await sampler([], _params(10), None)
    assert isinstance(spent, mcp_types.ErrorData) and "budget" in spent.message

    # Two calls of different runs in flight on one session: a request from another task is not guessed.
    inflight, store = InFlight(), _Store()
    sampler = Sampler("tb", inflight, FunctionModel(model), 100, None)
    first, second = _scope("U1"), _scope("U2")

    async def from_the_session_loop() -> Any:
        return await sampler([], _params(10), None)

    import asyncio

    with inflight.calling(first):
        task = asyncio.get_running_loop().create_task(_in_fresh_context(from_the_session_loop))
        with inflight.calling(second):
            ambiguous = await task
    assert isinstance(ambiguous, mcp_types.ErrorData) and "2 calls" in ambiguous.message


async def _in_fresh_context(fn: Any) -> Any:
    from app.agent.mcp.scope import CURRENT

    CURRENT.set(None)  # as the session's receive loop, started before any call
    return await fn()


def test_progress_text_is_one_bounded_line() -> None:
    assert progress_text("tb: export", 2, 5, "writing\nrows") == "tb: export (2 of 5: writing rows)"
    assert progress_text("tb: export", 40, None, None) == "tb: export (40)"
    assert len(progress_text("tb: x", 1, 2, "y" * 500)) < 120


def test_log_level_of_server_lines_is_debug(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from app.agent.mcp.talkback import write_log

    message = SimpleNamespace(level="error", logger="db", data={"query": "select 1"})
    with caplog.at_level(logging.DEBUG, logger="app.agent.mcp.talkback"):
        asyncio.run(write_log("tb", message))
    [record] = caplog.records
    assert (
        record.levelno == logging.DEBUG and record.getMessage() == 'MCP tb/db [error]: {"query": "select 1"}'
    )


@pytest.mark.process
async def test_a_server_samples_the_apps_model_only_where_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``sampling = true`` the server's request is answered by the app's model and counted for the
    requester; without it the server gets no completion and the call fails readably."""

    def script(turn: Turn) -> list[Any]:
        if "sampling-canary" in turn.prompt:
            return ["a sampled answer"]
        seen.extend(turn.results)
        return [call("tb_summarize", text="sampling-canary: the release notes")] if turn.step == 0 else [""]

    seen: list[Any] = []
    path = agent_file(tmp_path, extra="sampling = true\nsampling_max_tokens = 64")
    monkeypatch.setenv("TALKBACK_SECRET", SECRET)
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=path
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> go", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> go", ts))
            await app.idle()
            assert app.service is not None
            [usage] = await app.service.store.usage_by_day("2000-01-01")
    assert ("tb_summarize", "summary: a sampled answer") in seen
    # The run's two model requests and the server's one, all Alice's.
    assert (usage.person, usage.requests) == ("U1", 3)

    seen.clear()
    path = agent_file(tmp_path)  # sampling not allowed
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data2", agent_file=path
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> go", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> go", ts))
            await app.idle()
    [(_, result)] = [r for r in seen if r[0] == "tb_summarize"]
    assert result["error"]["code"] == "tool_failed"
