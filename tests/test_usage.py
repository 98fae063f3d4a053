"""Cost visible and bounded: usage stored per request, budgets, max_requests_per_run, the footer."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from app import logs
from app.agent.usage import Budgets, utc_day
from app.ops.usage_report import usage_command
from app.runs.budget_screen import BudgetScreen, newest_author
from app.settings import Settings
from storage import InboxItem, UsageRecord, open_store
from tests.support import events
from tests.support.days import days_ahead
from tests.support.harness import AppHarness, settings_for
from tests.support.models import Turn, call, echo_model, scripted
from tests.support.steering import reply_while_held
from threadbound_emulator import FakeSlack

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
    and model, counted in /metrics and summed on the run's log line."""
    calls: list[str] = []
    usage = RequestUsage(input_tokens=120, output_tokens=7, cache_read_tokens=100, cache_write_tokens=15)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=metered(reply_once, usage, calls), data_dir=tmp_path, stream="off"
        ) as app:
            with logs.capture(app.settings, level=logging.INFO) as captured:
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
    (finished,) = captured.lines("run finished")
    assert (finished["requests"], finished["input_tokens"], finished["output_tokens"]) == (2, 240, 14)
    assert (finished["cache_read_tokens"], finished["cache_write_tokens"]) == (200, 30)


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
        async with AppHarness(
            slack, model=model, data_dir=tmp_path, stream="off", user_daily_token_budget=100
        ) as app:
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
            assert calls[-2].endswith(' mine"}') and len(calls) == 4
            assert [m["text"] for m in slack.messages("C1", ts2) if m.get("bot_id")] == ["answer"]
            metrics = await _metrics(app)
    assert 'threadbound_budget_hits_total{budget="user"} 1.0' in metrics


async def test_install_budget_refuses_everyone(tmp_path: Path) -> None:
    """Past DAILY_TOKEN_BUDGET every person's request gets the note, and nobody's reaches the model."""
    calls: list[str] = []
    model = metered(reply_once, RequestUsage(input_tokens=60, output_tokens=10), calls)
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=model, data_dir=tmp_path, stream="off", daily_token_budget=100
        ) as app:
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
        async with AppHarness(
            slack, model=model, data_dir=tmp_path, stream="off", user_daily_token_budget=100
        ) as app:
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
    assert calls and calls[0].endswith(' again"}')  # the saved transcript is whole: the run went on
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
            slack, model=model, data_dir=tmp_path, stream="off", agent_file=tmp_path / "agent.toml"
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
        async with AppHarness(slack, model=model, data_dir=tmp_path, stream="off", usage_footer=True) as app:
            delivery, ts = mention(app, slack, "U1", "hi")
            await delivery
            await app.idle()
            [answer] = [m for m in slack.messages("C1", ts) if m.get("bot_id")]
    assert answer["text"] == "answer"
    context = [b for b in answer["blocks"] if b["type"] == "context"]
    assert context == [
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "2,468 tokens · 2 requests"}]}
    ]


async def test_a_streamed_answer_is_metered_and_gets_the_footer(tmp_path: Path) -> None:
    """With streaming on, each streamed response's usage is stored and the footer goes under the
    streamed answer, beside its feedback buttons."""
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, usage_footer=True) as app:
            delivery, ts = mention(app, slack, "U1", "hi")
            await delivery
            await app.idle()
            assert app.service is not None
            [row] = await app.service.store.usage_by_day("2000-01-01")
            [answer] = [m for m in slack.messages("C1", ts) if m.get("bot_id")]
    assert row.requests == 2 and row.input_tokens > 0 and row.output_tokens > 0
    assert "echo:" in answer["text"]
    [context] = [b for b in answer["blocks"] if b["type"] == "context"]
    assert context["elements"][0]["text"] == f"{row.tokens:,} tokens · 2 requests"


async def _seed(settings: Settings) -> str:
    """Usage rows of today (returned: the report lists them under the day they were recorded)
    and of a day long gone."""
    store = open_store(settings.resolved_database_url)
    await store.migrate()
    today = utc_day(time.time())
    for person, channel, tokens in (("U1", "C1", 1200), ("U1", "C1", 34), ("U2", "C2", 500)):
        await store.record_usage(
            UsageRecord(
                day=today, person=person, channel=channel, input_tokens=tokens, output_tokens=10,
                cache_read_tokens=100, requests=1, task_id="T", model="m", at=time.time(),
            )
        )  # fmt: skip
    await store.record_usage(UsageRecord(day="2001-01-01", person="U1", channel="C1", input_tokens=7))
    await store.close()
    return today


async def test_usage_command_prints_tokens_by_day_person_and_channel(tmp_path: Path) -> None:
    """`usage` sums the recent days by person and channel, by name in text and with IDs in --json;
    older days are left out."""
    async with FakeSlack() as slack:
        workspace(slack)
        settings = settings_for(slack, tmp_path)
        today = await _seed(settings)
        text, js = io.StringIO(), io.StringIO()
        assert await usage_command(settings, days=7, as_json=False, out=text) == 0
        assert await usage_command(settings, days=7, as_json=True, out=js) == 0
    lines = text.getvalue().splitlines()
    assert lines[1].split() == ["day", "person", "channel", "input", "output", "cache", "read", "cache",
                                "write", "requests"]  # fmt: skip
    assert lines[2].split() == [today, "Alice", "#general", "1,234", "20", "200", "0", "2"]
    assert lines[3].split() == [today, "Bob", "#random", "500", "10", "100", "0", "1"]
    assert lines[4].split() == ["total", "1,734", "30", "300", "0", "3"]
    report = json.loads(js.getvalue())
    assert report["names_resolved"] is True and report["total"]["input_tokens"] == 1734
    assert report["rows"][0]["person"] == {"id": "U1", "name": "Alice"}
    assert report["rows"][1]["channel"] == {"id": "C2", "name": "#random"}


async def test_usage_command_without_slack_shows_ids_and_says_so(tmp_path: Path) -> None:
    """When Slack cannot be reached, the report still prints, by ID, with one line saying why."""
    async with FakeSlack() as slack:
        settings = settings_for(slack, tmp_path)
    await _seed(settings)  # the fake Slack is gone now
    out, err = io.StringIO(), io.StringIO()
    assert await usage_command(settings, days=2, as_json=False, out=out, err=err) == 0  # midnight-proof
    assert "Slack is not reachable" in err.getvalue() and "shown by ID" in err.getvalue()
    assert out.getvalue().splitlines()[2].split()[1:3] == ["U1", "C1"]


class Steered:
    """A model whose first request waits until released, so messages can arrive mid-run; records prompts."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.first = asyncio.Event()
        self.proceed = asyncio.Event()

    async def __call__(self, turn: Turn) -> list[Any]:
        if not self.first.is_set():
            self.first.set()
            await self.proceed.wait()
        if turn.prompt:
            self.prompts.append(turn.prompt)
            return [call("channel_reply", text=f"answer {len(self.prompts)}")]
        return [""]


async def _alice_then_bob(app: AppHarness, slack: FakeSlack, brain: Steered) -> str:
    """Alice asks; while her run's first request waits, Bob writes twice in her thread."""
    root = slack.add_message("C1", "<@UBOT> alice asks", user="U1")
    await app.deliver(events.app_mention("C1", "U1", "<@UBOT> alice asks", root))
    await brain.first.wait()
    for text in ("bob says one", "bob says two"):
        ts = slack.add_message("C1", text, user="U2", thread_ts=root)
        await app.deliver(events.message("C1", "U2", text, ts, thread_ts=root))
    brain.proceed.set()
    await app.idle()
    return root


async def test_an_over_budget_persons_message_steered_into_a_run_is_not_shown(tmp_path: Path) -> None:
    """Bob, past his daily budget, writes in the thread while Alice's request runs: the model never sees
    his messages, he gets the budget note once, and Alice is answered."""
    brain = Steered()
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=scripted(brain), data_dir=tmp_path, stream="off", user_daily_token_budget=100
        ) as app:
            assert app.service is not None
            for day in days_ahead():  # over budget on whichever day the run checks it
                spent = UsageRecord(day=day, person="U2", channel="C1", input_tokens=500, requests=1)
                await app.service.store.record_usage(spent)
            root = await _alice_then_bob(app, slack, brain)
        texts = [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")]
    assert brain.prompts and "alice asks" in brain.prompts[0]
    assert not any("bob says" in p for p in brain.prompts)
    assert sum("500 of your 100 daily model tokens" in t for t in texts) == 1
    assert "answer 1" in texts


async def test_requests_are_charged_to_the_author_of_the_newest_message_shown(tmp_path: Path) -> None:
    """Once Bob's message is steered into Alice's run, the requests answering it are charged to Bob."""
    brain = Steered()
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=scripted(brain), data_dir=tmp_path, stream="off") as app:
            assert app.service is not None
            days = days_ahead()  # the days the run's requests may be charged to
            await _alice_then_bob(app, slack, brain)
            store = app.service.store
            alice = sum([await store.tokens_spent(day, "U1") for day in days])
            bob = sum([await store.tokens_spent(day, "U2") for day in days])
    assert any("bob says" in p for p in brain.prompts)
    assert alice > 0 and bob > 0


class _Spent:
    """Stored usage stand-in: ``tokens_spent`` from a dict by person."""

    def __init__(self, spent: dict[str, int]) -> None:
        self.spent = spent

    async def tokens_spent(self, day: str, person: str | None = None) -> int:
        return self.spent.get(person or "", 0)


class _Thread:
    """Session stand-in that records the notes posted, by effect id (posted once per id)."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.effects: list[str] = []
        self.task = type("Task", (), {"task_id": "t"})()

    async def post_note_once(self, effect_id: str, markdown: str) -> None:
        if effect_id not in self.effects:
            self.effects.append(effect_id)
            self.notes.append(markdown)


def _item(n: int, user: str) -> InboxItem:
    payload = json.dumps({"user": user, "text": f"message {n}"})
    return InboxItem(
        item_id=n, task_id="t", channel="C1", ts=f"{n}.0", thread_ts="", payload=payload, created_at=0
    )


async def test_a_run_shows_only_the_messages_of_authors_within_their_budget() -> None:
    """Messages waiting together: an over-budget author's are left out and they are told once, the others
    are shown and the newest of them is charged; when every author is over, all stay for the refusal."""
    budgets = Budgets(_Spent({"U2": 500}), per_user=100)  # type: ignore[arg-type]
    thread = _Thread()
    screen = BudgetScreen(budgets, thread)  # type: ignore[arg-type]
    items = [_item(1, "U2"), _item(2, "U1"), _item(3, "U2")]
    shown = await screen.screen(items)
    assert [i.item_id for i in shown] == [2] and newest_author(shown) == "U1"
    assert len(thread.notes) == 1 and "500 of your 100" in thread.notes[0]
    assert thread.effects == ["budget_t_U2_1"]  # its own effect id: a restart finds it, posts it once
    only_bob = [_item(4, "U2"), _item(5, "U2")]
    assert await BudgetScreen(budgets, _Thread()).screen(only_bob) == only_bob  # type: ignore[arg-type]


async def test_a_budget_note_for_someone_else_does_not_drop_the_final_text_answer(tmp_path: Path) -> None:
    """Bob's budget note is the host's, no reply: Alice's answer, given as final text, is still posted."""
    held = asyncio.Event()
    proceed = asyncio.Event()

    async def brain(turn: Turn) -> list[Any]:
        held.set()
        await proceed.wait()
        return ["answer as text"]

    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=scripted(brain), data_dir=tmp_path, stream="off", user_daily_token_budget=100
        ) as app:
            assert app.service is not None
            for day in days_ahead():  # over budget on whichever day the run checks it
                spent = UsageRecord(day=day, person="U2", channel="C1", input_tokens=500)
                await app.service.store.record_usage(spent)
            _, texts = await reply_while_held(app, slack, held, proceed, "<@UBOT> alice asks", "bob says")
    assert sum("500 of your 100 daily model tokens" in t for t in texts) == 1
    assert texts.count("answer as text") == 1


def test_the_tests_record_budgets_for_every_day_they_may_be_checked_on() -> None:
    """A test started just before midnight UTC records spending for both days (a CI run at 23:59 once
    saw the server check the budget on the next day, where nothing was spent); at noon, one day."""
    assert days_ahead(1_764_633_540.0) == ["2025-12-01", "2025-12-02"]  # 2025-12-01 23:59 UTC
    assert days_ahead(1_764_590_400.0) == ["2025-12-01"]  # noon
