"""Cost visible and bounded: usage stored per request, budgets, max_requests_per_run, the footer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from app.usage import utc_day
from emulator import FakeSlack
from testing import events
from testing.harness import AppHarness
from testing.models import call

Step = Callable[[list[ModelMessage], AgentInfo], list[Any]]


def metered(step: Step, usage: RequestUsage, calls: list[str]) -> FunctionModel:
    """A FunctionModel answering with ``step(...)`` and reporting ``usage`` for every request; each
    request appends the newest prompt text (or "" for a tool step) to ``calls``."""

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        prompt = ""
        if isinstance(last, ModelRequest):
            prompt = " ".join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        calls.append(prompt)
        parts = [TextPart(p) if isinstance(p, str) else p for p in step(messages, info)]
        return ModelResponse(parts=parts, usage=usage, model_name="metered-1")

    return FunctionModel(fn)


def reply_once(messages: list[ModelMessage], info: AgentInfo) -> list[Any]:
    """channel_reply once per prompt, then end silently."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, UserPromptPart) for p in last.parts):
        return [call("channel_reply", text="answer")]
    return [""]


def mention(app: AppHarness, slack: FakeSlack, user: str, text: str, channel: str = "C1") -> Any:
    ts = slack.add_message(channel, f"<@UBOT> {text}", user=user)
    return app.deliver(events.app_mention(channel, user, f"<@UBOT> {text}", ts)), ts


def workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_channel("C2", "random")
    slack.add_user("U1", "alice", display_name="Alice")
    slack.add_user("U2", "bob", display_name="Bob")


async def test_usage_stored_per_request_with_cache_tokens_and_exposed_in_metrics(tmp_path: Path) -> None:
    """Each model request's tokens (cache reads and writes too) are stored with task, person, channel
    and model, and counted in /metrics."""
    calls: list[str] = []
    usage = RequestUsage(input_tokens=120, output_tokens=7, cache_read_tokens=100, cache_write_tokens=15)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=metered(reply_once, usage, calls), data_dir=tmp_path) as app:
            delivery, _ = mention(app, slack, "U1", "hello")
            await delivery
            await app.idle()
            assert app.service is not None
            rows = await app.service.store.usage_by_day("2000-01-01")
            metrics = await _metrics(app)
    assert len(calls) == 2  # the reply step and the silent end
    [row] = rows
    assert (row.person, row.channel, row.requests) == ("U1", "C1", 2)
    assert (row.input_tokens, row.output_tokens) == (240, 14)
    assert (row.cache_read_tokens, row.cache_write_tokens) == (200, 30)
    assert 'threadbound_model_tokens_total{kind="input"} 240.0' in metrics
    assert 'threadbound_model_tokens_total{kind="cache_read"} 200.0' in metrics
    assert 'threadbound_model_tokens_total{kind="cache_write"} 30.0' in metrics
    assert "threadbound_model_requests_total 2.0" in metrics


async def _metrics(app: AppHarness) -> str:
    assert app._http is not None
    async with app._http.get(f"{app.url}/metrics") as response:
        return await response.text()


async def test_budget_note_in_place_of_a_model_call_and_per_person_split(tmp_path: Path) -> None:
    """Past USER_DAILY_TOKEN_BUDGET a person's request gets one note and no model call (its inbox item
    consumed); another person is still answered; the hit is counted in /metrics."""
    calls: list[str] = []
    usage = RequestUsage(input_tokens=60, output_tokens=10)
    model = metered(reply_once, usage, calls)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=model, data_dir=tmp_path, user_daily_token_budget=100) as app:
            delivery, _ = mention(app, slack, "U1", "first")  # two requests: 140 tokens, over 100
            await delivery
            await app.idle()
            assert len(calls) == 2
            delivery, ts = mention(app, slack, "U1", "second")
            await delivery
            await app.idle()
            assert len(calls) == 2  # no model call for the refused request
            [note] = [m for m in slack.messages("C1", ts) if m.get("bot_id")]
            assert "140 of your 100 daily model tokens" in note["text"] and "00:00 UTC" in note["text"]
            assert app.service is not None
            assert not await app.service.store.tasks_needing_a_run(now=9e12)  # consumed, no loop
            delivery, ts2 = mention(app, slack, "U2", "mine")
            await delivery
            await app.idle()
            assert calls[-2].endswith("mine") and len(calls) == 4
            assert [m["text"] for m in slack.messages("C1", ts2) if m.get("bot_id")] == ["answer"]
            metrics = await _metrics(app)
    assert 'threadbound_budget_hits_total{budget="user"} 1.0' in metrics


async def test_install_budget_refuses_everyone(tmp_path: Path) -> None:
    """Past DAILY_TOKEN_BUDGET every person's request gets the note, and nobody's reaches the model."""
    calls: list[str] = []
    model = metered(reply_once, RequestUsage(input_tokens=60, output_tokens=10), calls)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=model, data_dir=tmp_path, daily_token_budget=100) as app:
            delivery, _ = mention(app, slack, "U1", "first")
            await delivery
            await app.idle()
            delivery, ts = mention(app, slack, "U2", "second", channel="C2")
            await delivery
            await app.idle()
            [note] = [m for m in slack.messages("C2", ts) if m.get("bot_id")]
    assert len(calls) == 2
    assert "This app has used 140 of its 100 daily model tokens" in note["text"]


async def test_a_run_crossing_the_budget_finishes_its_step_then_stops(tmp_path: Path) -> None:
    """A run that crosses the budget mid-way runs the tools of the step that crossed it, then stops
    with a short note instead of its next model request; the task answers again the next day."""
    calls: list[str] = []
    now = [1_800_000_000.0]

    def loop(messages: list[ModelMessage], info: AgentInfo) -> list[Any]:
        return [call("channel_reply", text=f"step {len(calls)}")]

    model = metered(loop, RequestUsage(input_tokens=70, output_tokens=10), calls)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=model, data_dir=tmp_path, user_daily_token_budget=100) as app:
            assert app.service is not None
            executor = app.service.runner.executor
            executor.budgets.clock = lambda: now[0]
            executor.clock = lambda: now[0]
            delivery, ts = mention(app, slack, "U1", "go")
            await delivery
            await app.idle()
            texts = [m["text"] for m in slack.messages("C1", ts) if m.get("bot_id")]
            assert len(calls) == 2  # 80 tokens, then 160: the second step's reply ran, no third request
            assert texts[:2] == ["step 1", "step 2"] and "160 of your 100" in texts[2]
            now[0] += 86_400  # the next UTC day
            calls.clear()
            delivery, _ = mention(app, slack, "U1", "again")
            await delivery
            await app.idle()
    assert calls and calls[0].endswith("again")  # the saved transcript is whole: the run went on
    assert utc_day(now[0]) != utc_day(now[0] - 86_400)


async def test_max_requests_per_run_stops_a_runaway_loop_and_the_task_stays_usable(tmp_path: Path) -> None:
    """agent.toml's max_requests_per_run ends a tool loop with an apology after that many requests;
    the next message in the thread is answered normally."""
    (tmp_path / "agent.toml").write_text("max_requests_per_run = 3\n")
    calls: list[str] = []

    def step(messages: list[ModelMessage], info: AgentInfo) -> list[Any]:
        if "stop looping" not in str(messages):
            return [call("channel_read")]  # forever
        return [call("channel_reply", text="done")] if "stop looping" in calls[-1] else [""]

    model = metered(step, RequestUsage(input_tokens=1, output_tokens=1), calls)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=model, data_dir=tmp_path, agent_file=tmp_path / "agent.toml"
        ) as app:
            delivery, root = mention(app, slack, "U1", "loop")
            await delivery
            await app.idle()
            assert len(calls) == 3
            texts = [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")]
            assert len(texts) == 1 and "stopped after 3 model requests" in texts[0]
            ts = slack.add_message("C1", "please stop looping", user="U1", thread_ts=root)
            await app.deliver(events.message("C1", "U1", "please stop looping", ts, thread_ts=root))
            await app.idle()
            texts = [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")]
    assert texts[-1] == "done"


async def test_usage_footer_under_the_answer(tmp_path: Path) -> None:
    """USAGE_FOOTER=true puts "N tokens · M requests" in a context block under the run's answer."""
    calls: list[str] = []
    model = metered(reply_once, RequestUsage(input_tokens=1000, output_tokens=234), calls)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=model, data_dir=tmp_path, usage_footer=True) as app:
            delivery, ts = mention(app, slack, "U1", "hi")
            await delivery
            await app.idle()
            [answer] = [m for m in slack.messages("C1", ts) if m.get("bot_id")]
    assert answer["text"] == "answer"
    context = [b for b in answer["blocks"] if b["type"] == "context"]
    assert context == [
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "2,468 tokens · 2 requests"}]}
    ]
