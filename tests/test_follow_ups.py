"""Follow-ups (issue 23): the agent schedules its own return to the thread, and it comes back once."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.ops.follow_ups_report import follow_ups_command
from app.playground import GENERAL, Playground, demo_model
from app.runs import follow_ups as follow_ups_module
from app.runs.follow_ups import Access, FollowUpSweep
from channel.session import ChannelSession
from storage import FollowUpRecord
from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.process import ServerProcess
from tests.support.sessions import SessionEnv, slack_session
from tests.support.waiting import eventually
from tests.test_playground import _conversation as conversation
from tests.test_playground import _live as live
from tests.test_playground import _session as pg_session
from tests.test_playground import _settings as pg_settings
from tests.test_playground import _until as until
from threadbound_emulator import FakeSlack

_FU = re.compile(r"fu_[A-Za-z0-9_-]{8,40}")
TOOLS = ["channel_follow_up", "channel_follow_ups", "channel_cancel_follow_up"]


class Agent:
    """Schedules a follow-up when asked to remind, cancels when asked to, and answers a fired one."""

    def __init__(self) -> None:
        self.fired: list[str] = []
        self.instructions: list[str] = []
        self.mode = ""

    def __call__(self, turn: Turn) -> list[Any]:
        self.instructions.append(turn.info.instructions or "")
        if "Follow-up you scheduled" in turn.prompt:
            self.fired.append(turn.prompt)
            return [call("channel_reply", text="deploy is green")]
        for word in ("remind", "cancel"):
            if word in turn.prompt:
                self.mode = word
                return [call("tool_search", query=f"{word} follow-up later", limit=3)]
        for name, result in turn.results:
            if name == "tool_search":
                if self.mode == "remind":
                    return [call("channel_follow_up", after="20m", note="check the deploy")]
                return [call("channel_follow_ups")]
            if name == "channel_follow_ups":
                return [
                    call("channel_cancel_follow_up", follow_up=f["follow_up"]) for f in result["follow_ups"]
                ]
            if name == "channel_follow_up":
                return [call("channel_reply", text=f"I will check at {result['at']}")]
            if name == "channel_cancel_follow_up":
                return [call("channel_reply", text="cancelled")]
        return [""]


def _app(slack: FakeSlack, data_dir: Path, agent: Agent, **overrides: Any) -> AppHarness:
    return AppHarness(slack, model=scripted(agent), data_dir=data_dir, **overrides)


def _sweep(app: AppHarness) -> FollowUpSweep:
    assert app.service is not None and app.service.follow_ups is not None
    return app.service.follow_ups


async def _ask(app: AppHarness, slack: FakeSlack, text: str, thread: str = "") -> str:
    ts = slack.add_message("C1", text, user="U1", thread_ts=thread or None)
    assert (
        await app.deliver(events.app_mention("C1", "U1", text, ts, thread_ts=thread or None))
    ).status == 200
    await app.idle()
    return thread or ts


async def _pending(app: AppHarness) -> list[FollowUpRecord]:
    assert app.service is not None
    return await app.service.store.pending_follow_ups()


def _replies(slack: FakeSlack, text: str) -> list[dict[str, Any]]:
    return [m for m in slack.bot_messages("C1") if text in m.get("text", "")]


async def test_a_follow_up_scheduled_before_a_restart_fires_once_after_it(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Scheduled, the app restarted before it is due: it fires once after the restart, for its requester."""
    agent = Agent()
    async with _app(slack, tmp_path, agent) as app:
        await _ask(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        [scheduled] = await _pending(app)
        assert scheduled.requester == "U1" and scheduled.note == "check the deploy"
        assert _replies(slack, "I will check at")
    async with _app(slack, tmp_path, agent) as app:
        assert await _sweep(app).fire(now=scheduled.due_at - 1) == []
        fired = await _sweep(app).fire(now=scheduled.due_at + 1)
        assert [f.follow_up for f in fired] == [scheduled.follow_up]
        await app.idle()
        assert await _sweep(app).fire(now=scheduled.due_at + 3600) == []
        await app.idle()
        assert app.service is not None
        usage = await app.service.store.usage_by_day("2000-01-01")
    assert len(agent.fired) == 1 and "check the deploy" in agent.fired[0] and "late" not in agent.fired[0]
    assert len(_replies(slack, "deploy is green")) == 1
    assert {u.person for u in usage} == {"U1"}  # the follow-up's run is charged to its requester


async def test_a_follow_up_due_during_downtime_fires_late_with_a_note(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """One due while the app was down fires at the next start, and the model hears how late it is."""
    agent = Agent()
    async with _app(slack, tmp_path, agent) as app:
        await _ask(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        [scheduled] = await _pending(app)
    async with _app(slack, tmp_path, agent) as app:
        sweep = _sweep(app)
        sweep.clock = lambda: scheduled.due_at + 2 * 3600 + 5 * 60  # two hours of downtime past due
        sweep.nudge()
        async with asyncio.timeout(10):
            while not agent.fired:
                await asyncio.sleep(0.05)
                await app.idle()
        assert app.service is not None
        metrics = app.service.observer.metrics.render().decode()
    assert "2 h 5 min late" in agent.fired[0]
    assert "threadbound_follow_ups_late_total 1.0" in metrics
    assert "threadbound_follow_ups_fired_total 1.0" in metrics


async def test_two_postgres_instances_fire_a_follow_up_once(
    slack: FakeSlack, tmp_path: Path, database_url: str
) -> None:
    """Both instances fire at the same moment: the follow-up resumes its task once."""
    agent = Agent()
    common: dict[str, Any] = {"database_url": database_url}
    async with (
        _app(slack, tmp_path / "a", agent, owner="instance-a", **common) as a,
        _app(slack, tmp_path / "b", agent, owner="instance-b", **common) as b,
    ):
        await _ask(a, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        # Either instance may run the conversation (b's start-up sweep can find a's inbox item
        # before a's own driver takes the lease): wait for its answer, then for both to settle.
        await eventually(lambda: bool(_replies(slack, "I will check")))
        await asyncio.gather(a.idle(), b.idle())
        [scheduled] = await _pending(a)
        now = scheduled.due_at + 1
        results = await asyncio.gather(*(s.fire(now=now) for s in [_sweep(a), _sweep(b)] * 3))
        assert sum(len(r) for r in results) == 1
        await a.idle()
        await b.idle()
    assert len(agent.fired) == 1 and len(_replies(slack, "deploy is green")) == 1


async def test_asking_in_the_thread_cancels_the_follow_up(slack: FakeSlack, tmp_path: Path) -> None:
    """A person asks in the thread; the agent lists and cancels by handle; nothing fires later."""
    agent = Agent()
    async with _app(slack, tmp_path, agent) as app:
        root = await _ask(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        [scheduled] = await _pending(app)
        await _ask(app, slack, "<@UBOT> please cancel that", thread=root)
        assert await _pending(app) == []
        assert _replies(slack, "cancelled")
        assert await _sweep(app).fire(now=scheduled.due_at + 60) == []
        assert app.service is not None
        metrics = app.service.observer.metrics.render().decode()
    assert agent.fired == []
    assert "threadbound_follow_ups_cancelled_total 1.0" in metrics


async def test_a_follow_up_whose_person_is_no_longer_allowed_ends_with_a_note(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Its requester left ALLOWED_USERS: a short note in the thread, no model call."""
    agent = Agent()
    async with _app(slack, tmp_path, agent) as app:
        await _ask(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        [scheduled] = await _pending(app)
    async with _app(slack, tmp_path, agent, allowed_users=("U2",)) as app:
        assert len(await _sweep(app).fire(now=scheduled.due_at + 1)) == 1
        await app.idle()
    assert agent.fired == []
    assert len(_replies(slack, "did not run: the person it was for is no longer allowed")) == 1


async def test_the_requesters_time_zone_is_in_the_instructions(slack: FakeSlack, tmp_path: Path) -> None:
    """The requester's users.info tz reaches the instructions, so 'tomorrow at 9' is their 9."""
    slack.add_user("U1", "alice", display_name="Alice", tz="Europe/Berlin")
    agent = Agent()
    async with _app(slack, tmp_path, agent) as app:
        await _ask(app, slack, "<@UBOT> hello")
    assert "time zone Europe/Berlin (UTC+01:00" in agent.instructions[0]


# -- the tools on a session -------------------------------------------------------------------------


@pytest.fixture
async def env(tmp_path: Path) -> Any:
    async with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_channel("C1", "general")
        root = slack.add_message("C1", "<@UBOT> hi", "U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root, enabled=TOOLS) as env:
            env.session.requester = "U1"
            yield env


def _code(result: dict[str, Any]) -> str:
    return str(result.get("error", {}).get("code", "ok"))


@pytest.mark.parametrize(
    "args",
    [
        {"after": "30m", "at": "2030-01-01T09:00:00+01:00", "note": "both"},
        {"note": "neither"},
        {"after": "20s", "note": "seconds are not a unit"},
        {"after": "0m", "note": "not a minute ahead"},
        {"after": "31d", "note": "past 30 days"},
        {"at": "2020-01-01T09:00:00+00:00", "note": "in the past"},
        {"at": "2030-01-01T09:00:00", "note": "no offset"},
        {"at": "tomorrow at 9", "note": "not ISO 8601"},
        {"after": "1h", "note": "x" * 1001},
        {"after": "1h", "note": ""},
        {"after": "1h", "note": "hi", "channel": "C2"},
    ],
)
async def test_out_of_bounds_follow_ups_are_refused_with_invalid_arguments(
    env: SessionEnv, args: dict[str, Any]
) -> None:
    """Both or neither time, under a minute or over 30 days, no offset, a long note, an address: refused."""
    assert _code(await env.session.call("channel_follow_up", args)) == "invalid_arguments"
    assert await env.session.call("channel_follow_ups", {}) == {"follow_ups": []}


async def test_a_task_has_at_most_ten_and_the_install_follow_ups_max(env: SessionEnv) -> None:
    """The eleventh pending follow-up of a task, and one past FOLLOW_UPS_MAX, are refused."""
    for i in range(10):
        assert _code(await env.session.call("channel_follow_up", {"after": f"{i + 1}h", "note": "n"})) == "ok"
    assert (
        _code(await env.session.call("channel_follow_up", {"after": "1d", "note": "n"}))
        == "invalid_arguments"
    )
    other = await env.open_session("900.000001", enabled=TOOLS)
    other.follow_ups.install_max = 10
    result = await other.call("channel_follow_up", {"after": "1d", "note": "n"})
    assert _code(result) == "invalid_arguments" and "FOLLOW_UPS_MAX" in result["error"]["message"]


async def test_a_follow_up_resolves_to_utc_and_is_cancelled_by_its_handle_only(env: SessionEnv) -> None:
    """``at`` with an offset resolves to UTC; cancel takes this task's handle once; others are refused."""
    session: ChannelSession = env.session
    at = time.strftime("%Y-%m-%dT%H:%M:%S+02:00", time.gmtime(time.time() + 3 * 3600 + 2 * 3600))
    result = await session.call("channel_follow_up", {"at": at, "note": "look again"})
    handle = result["follow_up"]
    assert _FU.fullmatch(handle) and result["at"].endswith("Z") and "cancel" in result["how_to_cancel"]
    assert result["at"][11:16] == time.strftime("%H:%M", time.gmtime(time.time() + 3 * 3600))
    listed = await session.call("channel_follow_ups", {})
    assert listed == {"follow_ups": [{"follow_up": handle, "at": result["at"], "note": "look again"}]}
    other = await env.open_session("900.000001", enabled=TOOLS)
    assert _code(await other.call("channel_cancel_follow_up", {"follow_up": handle})) == "invalid_handle"
    assert _code(await session.call("channel_cancel_follow_up", {"follow_up": "1700000000.000100"})) == (
        "invalid_handle"
    )
    assert await session.call("channel_cancel_follow_up", {"follow_up": handle}) == {"ok": True}
    assert _code(await session.call("channel_cancel_follow_up", {"follow_up": handle})) == "not_found"
    assert await session.call("channel_follow_ups", {}) == {"follow_ups": []}


async def test_the_follow_up_tools_are_deferred_and_found_by_tool_search(tmp_path: Path) -> None:
    """They start deferred; tool_search finds channel_follow_up for a reminder."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        root = slack.add_message("C1", "<@UBOT> hi", "U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            assert not set(TOOLS) & set(env.session.offered_names())
            found = await env.session.call("tool_search", {"query": "remind me later, follow up", "limit": 3})
            assert "channel_follow_up" in [t["name"] for t in found["enabled"]]


async def test_a_sweep_without_access_lists_fires_everything_due(env: SessionEnv) -> None:
    """The access check only refuses when lists are set; due follow-ups of free tasks fire once."""
    await env.session.call("channel_follow_up", {"after": "2m", "note": "n"})
    woken: list[str] = []
    sweep = FollowUpSweep(env.store, wake=woken.append, clock=lambda: time.time() + 300, access=Access())
    assert await sweep.due()
    [fired] = await sweep.fire()
    assert woken == [env.task.task_id]
    [item] = await env.store.pending_inbox(env.task.task_id)
    assert json.loads(item.payload)["note"] == "n" and item.ts == fired.follow_up


async def test_the_follow_ups_command_lists_pending_ones_with_their_permalink(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """`follow-ups` lists the install's pending follow-ups: when, task, thread permalink, first words."""
    agent = Agent()
    async with _app(slack, tmp_path, agent) as app:
        await _ask(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        [scheduled] = await _pending(app)
        settings = app.settings
    text, js = io.StringIO(), io.StringIO()
    assert await follow_ups_command(settings, as_json=False, out=text) == 0
    assert await follow_ups_command(settings, as_json=True, out=js) == 0
    line = text.getvalue().splitlines()[1]
    assert scheduled.task_id in line and line.endswith("check the deploy") and "https://" in line
    [row] = json.loads(js.getvalue())["follow_ups"]
    assert row["follow_up"] == scheduled.follow_up and row["requester"] == "U1" and row["permalink"]


async def test_the_playground_shows_follow_ups_under_their_thread_and_fast_forwards_to_them(
    tmp_path: Path,
) -> None:
    """The page lists a scheduled follow-up under its thread; fast-forward fires it and the reply arrives."""
    agent = Agent()
    async with (
        Playground(pg_settings(tmp_path), model=scripted(agent)) as pg,
        pg_session(pg.page_token) as http,
    ):
        stream = live(http, pg.url)
        async with http.post(
            f"{pg.url}api/messages",
            json={"as": "U0BOB", "channel": GENERAL, "text": "@threadbound remind me about the deploy"},
        ) as response:
            root = (await response.json())["ts"]
        state = await until(stream, lambda s: conversation(s, GENERAL)["follow_ups"])
        [shown] = conversation(state, GENERAL)["follow_ups"]
        assert (
            shown["thread_ts"] == root and shown["note"] == "check the deploy" and shown["in"] == "in 20 min"
        )
        async with http.post(f"{pg.url}api/fast-forward", json={}) as response:
            assert response.status == 200 and (await response.json())["skipped"] >= 1190
        state = await until(
            stream,
            lambda s: (
                not conversation(s, GENERAL)["follow_ups"]
                and any(
                    "deploy is green" in r["html"]
                    for m in conversation(s, GENERAL)["messages"]
                    for r in m["replies"]
                )
            ),
        )
        assert state["clock"]["offset"] >= 1190
    assert len(agent.fired) == 1


async def test_the_demo_model_schedules_a_follow_up_that_fast_forward_fires(tmp_path: Path) -> None:
    """In --demo, asking to be reminded schedules a follow-up; fast-forward makes it come back as a turn."""
    settings = pg_settings(tmp_path)
    async with Playground(settings, model=demo_model()) as pg, pg_session(pg.page_token) as http:
        stream = live(http, pg.url)
        async with http.post(
            f"{pg.url}api/messages",
            json={"as": "U0BOB", "channel": GENERAL, "text": "@threadbound remind me to stretch"},
        ) as response:
            assert response.status == 200
        state = await until(stream, lambda s: conversation(s, GENERAL)["follow_ups"])
        # The note is what Bob wrote, not the prompt's JSON row around it.
        assert (
            conversation(state, GENERAL)["follow_ups"][0]["note"]
            == "Follow up on: @threadbound remind me to stretch"
        )
        await until(stream, lambda s: "scheduled a follow-up for" in json.dumps(s))
        async with http.post(f"{pg.url}api/fast-forward", json={}) as response:
            assert response.status == 200
        await until(stream, lambda s: "Follow-up you scheduled" in json.dumps(s))


async def test_every_due_follow_up_is_access_checked_before_any_fires(
    env: SessionEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more due than one fire batch, none of a no-longer-allowed person's runs as a model turn."""
    monkeypatch.setattr(follow_ups_module, "FIRE_BATCH", 2)
    for n in range(5):
        await env.session.call("channel_follow_up", {"after": f"{n + 2}m", "note": f"n{n}"})
    access = Access(allowed_users=frozenset({"U2"}))
    sweep = FollowUpSweep(env.store, clock=lambda: time.time() + 3600, access=access)
    assert len(await sweep.fire()) == 5
    items = await env.store.pending_inbox(env.task.task_id)
    assert len(items) == 5 and all("refused" in json.loads(i.payload) for i in items)


def _tools_called(request: dict[str, Any]) -> list[str]:
    """Names of the tool calls the model made so far in this request's messages, in order."""
    return [
        str(c["function"]["name"])
        for m in request.get("messages") or []
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or []
    ]


def _remind_script(request: dict[str, Any]) -> Reply:
    """Over the OpenAI wire: schedule a follow-up when asked to remind; answer it once it comes back."""
    text = last_user_text(request)
    called = _tools_called(request)
    last_role = (request.get("messages") or [{}])[-1].get("role")
    if "Follow-up you scheduled" in text:
        if last_role == "tool":
            return FakeOpenAI.text("")
        late = "late" if '"late"' in text else "on time"
        return FakeOpenAI.tool_call("channel_reply", {"text": f"deploy is green ({late})"})
    if last_role != "tool":
        return FakeOpenAI.tool_call("tool_search", {"query": "schedule a follow-up reminder", "limit": 3})
    if called[-1] == "tool_search":
        return FakeOpenAI.tool_call("channel_follow_up", {"after": "20m", "note": "check the deploy"})
    return FakeOpenAI.text("I will check in 20 minutes." if called[-1] == "channel_follow_up" else "")


@pytest.mark.process
async def test_a_follow_up_survives_sigkill_and_downtime_and_fires_once_late(tmp_path: Path) -> None:
    """Scheduled, SIGKILL, two hours down: the restarted server fires it once, with the late note."""
    async with FakeSlack() as slack, FakeOpenAI(_remind_script) as llm, aiohttp.ClientSession() as http:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.api_url,
            "DATA_DIR": str(tmp_path / "data"),
            "MODEL": "openai-chat:fake",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "x",
            "STREAM": "off",
        }
        first = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server1.log")
        await first.start()
        root = slack.add_message("C1", "<@UBOT> remind me to check the deploy", user="U1")
        mention = events.app_mention("C1", "U1", "<@UBOT> remind me to check the deploy", root)
        assert (
            await events.deliver(http, f"{first.url}/slack/events", mention, SIGNING_SECRET)
        ).status == 200
        await eventually(lambda: any("I will check" in m["text"] for m in slack.bot_messages("C1")))
        first.kill()
        await first.wait()
        # Two hours of downtime: the follow-up fell due while no process was running.
        due = time.time() - 7200
        with sqlite3.connect(tmp_path / "data" / "threadbound.db") as db:
            moved = db.execute(
                "UPDATE follow_ups SET due_at = ?, payload = json_set(payload, '$.at', ?)"
                " WHERE state = 'pending'",
                (due, due),
            )
            assert moved.rowcount == 1
        second = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server2.log")
        await second.start()
        try:
            await eventually(lambda: any("deploy is green" in m["text"] for m in slack.bot_messages("C1")))
        finally:
            await second.stop()  # SIGTERM: a second firing would run before it exits
        answers = [m["text"] for m in slack.bot_messages("C1") if "deploy is green" in m["text"]]
    assert answers == ["deploy is green (late)"]


async def test_in_the_playground_a_follow_up_scheduled_after_a_fast_forward_waits_its_time(
    tmp_path: Path,
) -> None:
    """After a fast-forward, a new follow-up due in 20 minutes is scheduled by the demo clock too: it waits
    (shown "in 20 min") instead of firing at once because the demo clock is already past it."""
    agent = Agent()
    async with (
        Playground(pg_settings(tmp_path), model=scripted(agent)) as pg,
        pg_session(pg.page_token) as http,
    ):
        stream = live(http, pg.url)
        remind = {"as": "U0BOB", "channel": GENERAL, "text": "@threadbound remind me about the deploy"}
        async with http.post(f"{pg.url}api/messages", json=remind) as response:
            assert response.status == 200
        await until(stream, lambda s: conversation(s, GENERAL)["follow_ups"])
        async with http.post(f"{pg.url}api/fast-forward", json={}) as response:
            assert response.status == 200
        await until(stream, lambda s: not conversation(s, GENERAL)["follow_ups"] and len(agent.fired) == 1)
        async with http.post(
            f"{pg.url}api/messages", json=remind | {"text": "@threadbound remind me"}
        ) as response:
            assert response.status == 200
        state = await until(stream, lambda s: conversation(s, GENERAL)["follow_ups"])
        [shown] = conversation(state, GENERAL)["follow_ups"]
        assert shown["in"] == "in 20 min"
        assert pg.service is not None and pg.service.follow_ups is not None
        assert await pg.service.follow_ups.fire() == []  # the sweep's own look: not due yet
    assert len(agent.fired) == 1


async def test_a_restarted_playground_forgets_the_follow_ups_of_its_earlier_session(tmp_path: Path) -> None:
    """The playground's workspace starts empty while its store is kept: follow-ups scheduled before a
    restart are cancelled at start (their threads are gone), not shown under no thread or fired to fail."""
    agent = Agent()
    async with (
        Playground(pg_settings(tmp_path), model=scripted(agent)) as pg,
        pg_session(pg.page_token) as http,
    ):
        stream = live(http, pg.url)
        remind = {"as": "U0BOB", "channel": GENERAL, "text": "@threadbound remind me about the deploy"}
        async with http.post(f"{pg.url}api/messages", json=remind) as response:
            assert response.status == 200
        await until(stream, lambda s: conversation(s, GENERAL)["follow_ups"])
    async with Playground(pg_settings(tmp_path), model=scripted(agent)) as pg:
        assert pg.service is not None and pg.service.follow_ups is not None
        assert await pg.service.store.pending_follow_ups() == []
        assert await pg.service.follow_ups.fire(now=time.time() + 3600) == []  # nothing left to fire
    assert len(agent.fired) == 0


class TextAgent(Agent):
    """Answers a fired follow-up with its final text rather than a tool call."""

    def __call__(self, turn: Turn) -> list[Any]:
        found = super().__call__(turn)
        return ["deploy is green"] if "Follow-up you scheduled" in turn.prompt else found


def _delete_thread(slack: FakeSlack, root: str) -> None:
    stored = slack.stored("C1")
    stored[:] = [m for m in stored if root not in (m["ts"], m.get("thread_ts"))]


async def test_a_follow_up_whose_thread_was_deleted_ends_politely_once(
    slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its thread is gone when it fires: one warning naming Slack's refusal, no traceback, not retried."""
    agent = TextAgent()
    async with _app(slack, tmp_path, agent) as app:
        root = await _ask(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")
        [scheduled] = await _pending(app)
        _delete_thread(slack, root)
        caplog.clear()
        caplog.set_level(logging.WARNING)
        assert len(await _sweep(app).fire(now=scheduled.due_at + 1)) == 1
        await app.idle()
        assert app.service is not None
        assert await app.service.store.pending_inbox(scheduled.task_id) == []
        await _ask(app, slack, "<@UBOT> remind me to check the deploy in 20 minutes")  # still usable
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
    assert [r.getMessage() for r in caplog.records if "thread no longer exists" in r.getMessage()]
    assert len(agent.fired) == 1 and len(_replies(slack, "I will check at")) == 1


async def test_a_message_whose_thread_vanishes_mid_run_ends_politely(
    slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The thread is deleted while the model works: the run ends with one warning and no traceback."""

    def agent(turn: Turn) -> list[Any]:
        if not turn.results:
            _delete_thread(slack, root)
        return ["here you go"]

    async with AppHarness(slack, model=scripted(agent), data_dir=tmp_path) as app:
        caplog.set_level(logging.WARNING)
        root = slack.add_message("C1", "<@UBOT> hello", user="U1")
        assert (await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hello", root))).status == 200
        await app.idle()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
    assert slack.bot_messages("C1") == []


@pytest.mark.process
async def test_a_refused_follow_ups_note_is_posted_once_across_a_sigkill_after_it(tmp_path: Path) -> None:
    """Killed right after posting a refused follow-up's note: the restarted server does not post it again."""
    async with FakeSlack() as slack, FakeOpenAI(_remind_script) as llm, aiohttp.ClientSession() as http:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_API_URL": slack.api_url,
            "DATA_DIR": str(tmp_path / "data"),
            "MODEL": "openai-chat:fake",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "x",
            "STREAM": "off",
        }
        first = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server1.log")
        await first.start()
        root = slack.add_message("C1", "<@UBOT> remind me to check the deploy", user="U1")
        mention = events.app_mention("C1", "U1", "<@UBOT> remind me to check the deploy", root)
        assert (
            await events.deliver(http, f"{first.url}/slack/events", mention, SIGNING_SECRET)
        ).status == 200
        await eventually(lambda: any("I will check" in m["text"] for m in slack.bot_messages("C1")))
        await first.stop()
        scheduling = len(llm.requests)
        db_path = tmp_path / "data" / "threadbound.db"
        with sqlite3.connect(db_path) as db:
            db.execute("UPDATE follow_ups SET due_at = ? WHERE state = 'pending'", (time.time() - 5,))
        refused = {**env, "ALLOWED_USERS": "U2"}  # its requester is no longer allowed
        crashing = {**refused, "THREADBOUND_CRASH_AT": "slack.post.after"}
        second = ServerProcess(crashing, cwd=tmp_path, log_path=tmp_path / "server2.log")
        with contextlib.suppress(RuntimeError):  # it may be killed before it says it is listening
            await second.start()
        assert await second.wait() == -9  # killed right after the note was posted
        third = ServerProcess(refused, cwd=tmp_path, log_path=tmp_path / "server3.log")
        await third.start()

        def inbox_empty() -> bool:
            with sqlite3.connect(db_path) as db:
                return db.execute("SELECT count(*) FROM inbox").fetchone()[0] == 0

        try:
            await eventually(inbox_empty)
        finally:
            await third.stop()
        notes = [m for m in slack.bot_messages("C1") if "did not run" in m["text"]]
    assert len(notes) == 1
    assert len(llm.requests) == scheduling  # the refused follow-up made no model call
