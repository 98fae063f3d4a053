"""Slack's agent sessions end to end against the emulator, over HTTP and Socket Mode: a run shows
``processing`` and ends ``active`` (``suspended`` while it waits on a person), and a person's Stop
ends the run at once, for good (invariant "A stop is final")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.intake.stop_command import thread_of
from tests.support import events
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, scripted
from tests.support.waiting import eventually
from tests.test_approvals import APPROVE, ReactScript, _ask, _cards, _click, _gated, _settle
from tests.test_ask import AskScript
from threadbound_emulator import FakeSlack
from threadbound_emulator.events import command_body, envelope, over_socket, session_stopped, slash_command

LONG = " ".join(f"Word{i} of a long answer that keeps going." for i in range(400))
SHORT = "Here is the short answer."


def _long_then_short(turn: Turn) -> list[Any]:
    """The first question gets a long, slowly streamed answer; later ones a short one."""
    if not turn.prompt:
        return [""]
    return [SHORT] if "again" in turn.prompt else [LONG]


@pytest.fixture
def agent_slack(slack: FakeSlack) -> FakeSlack:
    """The workspace's app is declared an agent: it holds ``assistant:write``."""
    slack.scopes.append("assistant:write")
    return slack


async def _mention(app: AppHarness, text: str, thread_ts: str | None = None, *, socket: bool = False) -> str:
    ts = app.slack.add_message("C1", f"<@UBOT> {text}", user="U1", thread_ts=thread_ts)
    body = events.app_mention("C1", "U1", f"<@UBOT> {text}", ts, thread_ts=thread_ts)
    if socket:
        async with asyncio.timeout(10):
            await app.slack.socket.wait_acked(over_socket(app.slack.socket, body))
        return ts
    response = await app.deliver(body)
    assert response.status == 200
    return ts


async def _stop(app: AppHarness, root: str, *, socket: bool) -> None:
    body = session_stopped(app.slack, "C1", root, "U2")
    if socket:
        envelope = over_socket(app.slack.socket, body)
        async with asyncio.timeout(10):
            await app.slack.socket.wait_acked(envelope)
    else:
        assert app.service is not None
        response = await app.deliver(body)
        assert response.status == 200


@pytest.mark.parametrize("socket", [False, True], ids=["http", "socket-mode"])
async def test_a_stop_is_final_a_long_streamed_answer_stopped_midway_stays_stopped(
    agent_slack: FakeSlack, tmp_path: Path, socket: bool
) -> None:
    """Stop mid-stream: nothing more is written, no message is left streaming, the session leaves
    ``processing``, the stopper is told privately; a restart does not take the turn up again, and the
    next message is answered normally, the model told who stopped its previous turn."""
    slack = agent_slack
    seen: list[str] = []

    def script(turn: Turn) -> list[Any]:
        seen.append(turn.history_text)
        return _long_then_short(turn)

    model = scripted(script, chunk=40, chunk_delay=0.02)
    async with AppHarness(slack, model=model, data_dir=tmp_path, socket_mode=socket) as app:
        assert app.service is not None
        app.service.runner.executor.stream_interval = 0.05
        root = await _mention(app, "tell me everything", socket=socket)
        await eventually(lambda: any(len(s.text) > 200 for s in slack.streams.values()))
        assert slack.session_status("C1", root) == "processing"
        await _stop(app, root, socket=socket)
        await app.idle()
        [stream] = slack.streams.values()
        shown = stream.text
        assert 0 < len(shown) < len(LONG)  # stopped midway: what was shown stays
        assert stream.state == "stopped"
        assert slack.count("chat.postMessage") == 0  # nothing more posted (no apology, no rest)
        session = slack.sessions[("C1", root)]
        assert session.status == "active" and session.history[0] == "processing"
        assert session.title == "@threadbound tell me everything" or session.title.endswith(
            "tell me everything"
        )
        assert [(c, u) for c, u, _, _ in slack.ephemerals] == [("C1", "U2")]
    async with AppHarness(slack, model=model, data_dir=tmp_path, socket_mode=socket) as app:
        await app.idle()
        assert [m["ts"] for m in slack.bot_messages("C1")] == [stream.ts]  # not resumed
        assert stream.text == shown
        await _mention(app, "again please", thread_ts=root, socket=socket)
        await app.idle()
    replies = [m for m in slack.bot_messages("C1") if m["ts"] != stream.ts]
    assert [r["text"] for r in replies] == [SHORT]
    assert "stopped by Bob" in seen[-1]
    assert all(s.state != "streaming" for s in slack.streams.values())


async def test_a_stop_between_runs_does_nothing(agent_slack: FakeSlack, tmp_path: Path) -> None:
    """A Stop on a session with no run in progress changes nothing; the next message is answered."""
    slack = agent_slack
    model = scripted(lambda turn: [SHORT] if turn.prompt else [""])
    async with AppHarness(slack, model=model, data_dir=tmp_path) as app:
        root = await _mention(app, "hello")
        await app.idle()
        assert slack.sessions[("C1", root)].history == ["processing", "active"]
        await _stop(app, root, socket=False)
        await _mention(app, "again", thread_ts=root)
        await app.idle()
        assert [m["text"] for m in slack.bot_messages("C1")] == [SHORT, SHORT]
        assert slack.ephemerals == []


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("channel_ask", {"question": "Which colour?"}),
        ("channel_request_approval", {"action": "Paint it blue"}),
    ],
    ids=["ask", "approval"],
)
async def test_the_session_is_suspended_while_an_ask_waits(
    agent_slack: FakeSlack, tmp_path: Path, tool: str, args: dict[str, str]
) -> None:
    """A run that asks a person (a question, an approval) ends ``suspended``; the next run goes
    ``processing`` then ``active``."""
    slack = agent_slack
    script = AskScript(tool, **args)
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
        root = await _mention(app, "please ask")
        await app.idle()
        session = slack.sessions[("C1", root)]
        assert session.history == ["processing", "suspended"]
        ts = slack.add_message("C1", "Blue", user="U1", thread_ts=root)
        assert (await app.deliver(events.message("C1", "U1", "Blue", ts, thread_ts=root))).status == 200
        await app.idle()
        assert session.history == ["processing", "suspended", "processing", "active"]


async def test_without_the_agent_setting_everything_works_as_before(slack: FakeSlack, tmp_path: Path) -> None:
    """An install without ``assistant:write`` never calls the session methods; the answer arrives."""
    async with AppHarness(
        slack, model=scripted(lambda t: [SHORT] if t.prompt else [""]), data_dir=tmp_path
    ) as app:
        await _mention(app, "hello")
        await app.idle()
    assert slack.count("agents.sessions.setStatus") == 0
    assert [m["text"] for m in slack.bot_messages("C1")] == [SHORT]


async def test_agent_sessions_on_where_slack_refuses_them_stops_asking(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """``AGENT_SESSIONS=on`` on an install Slack refuses (``missing_scope``): asked once, then never."""
    model = scripted(lambda t: [SHORT] if t.prompt else [""])
    async with AppHarness(slack, model=model, data_dir=tmp_path, agent_sessions="on") as app:
        root = await _mention(app, "hello")
        await app.idle()
        await _mention(app, "again", thread_ts=root)
        await app.idle()
    assert slack.count("agents.sessions.setStatus") == 1
    assert [m["text"] for m in slack.bot_messages("C1")] == [SHORT, SHORT]


async def test_a_stop_reaches_the_other_instance_on_postgres(
    agent_slack: FakeSlack, tmp_path: Path, database_url: str
) -> None:
    """Two instances on one Postgres: the run works on A, the Stop arrives at B; A halts its run at
    once, writes nothing more, and the stop is settled for good."""
    slack = agent_slack
    model = scripted(_long_then_short, chunk=40, chunk_delay=0.02)
    common: dict[str, Any] = {"database_url": database_url, "model": model}
    async with (
        AppHarness(slack, data_dir=tmp_path / "a", owner="instance-a", **common) as a,
        AppHarness(slack, data_dir=tmp_path / "b", owner="instance-b", **common) as b,
    ):
        assert a.service is not None and b.service is not None
        a.service.runner.executor.stream_interval = 0.05
        root = await _mention(a, "tell me everything")
        await eventually(lambda: any(len(s.text) > 200 for s in slack.streams.values()))
        await _stop(b, root, socket=False)
        await a.idle()
        [stream] = slack.streams.values()
        assert 0 < len(stream.text) < len(LONG) and stream.state == "stopped"
        assert slack.count("chat.postMessage") == 0
        assert slack.sessions[("C1", root)].status == "active"
        task_id = await a.service.store.find_task("C1", root)
        assert task_id is not None and await a.service.store.stop_of(task_id) is None
        assert await a.service.store.pending_inbox(task_id) == []


async def test_a_rename_in_slack_keeps_the_stored_title_in_step(
    agent_slack: FakeSlack, tmp_path: Path
) -> None:
    """The session is created with the first message's words as its title; a person's rename
    (``agent_session_title_changed``) is what the store then holds, and what a session created again
    is titled."""
    slack = agent_slack
    model = scripted(lambda t: [SHORT] if t.prompt else [""])
    async with AppHarness(slack, model=model, data_dir=tmp_path) as app:
        assert app.service is not None
        root = await _mention(app, "plan the offsite")
        await app.idle()
        store = app.service.store
        task_id = await store.find_task("C1", root)
        assert task_id is not None
        assert (await store.session_title(task_id)).endswith("plan the offsite")
        assert slack.sessions[("C1", root)].title == await store.session_title(task_id)
        event = {
            "type": "agent_session_title_changed",
            "channel": "C1",
            "thread_ts": root,
            "title": "Offsite",
        }
        assert (await app.deliver(envelope(slack, event))).status == 200
        assert await store.session_title(task_id) == "Offsite"
        del slack.sessions[("C1", root)]  # Slack no longer has it: the next run creates it again
        await _mention(app, "again", thread_ts=root)
        await app.idle()
        assert slack.sessions[("C1", root)].title == "Offsite"


async def test_the_session_is_suspended_while_a_gated_call_waits_for_its_approval(
    agent_slack: FakeSlack, tmp_path: Path
) -> None:
    """A call the agent file gates waits for a person's approval: the run ends ``suspended``; the
    approval's click resumes the task, which ends ``active``."""
    slack = agent_slack
    async with _gated(slack, tmp_path, ReactScript()) as app:
        root = await _ask(app, slack)
        session = slack.sessions[("C1", root)]
        assert session.history == ["processing", "suspended"]
        [card] = _cards(slack)
        assert (await app.click(_click(card, "U1", APPROVE, root))).status == 200
        await _settle(app)
        assert session.history == ["processing", "suspended", "processing", "active"]


@pytest.mark.parametrize("socket", [False, True], ids=["http", "socket-mode"])
async def test_the_stop_subcommand_stops_the_run_of_the_thread_it_names(
    agent_slack: FakeSlack, tmp_path: Path, socket: bool
) -> None:
    """``/threadbound stop`` with a link to the thread stops its run like Slack's Stop (privately
    answered); without a thread it says how; with nothing running it says so and changes nothing."""
    slack = agent_slack
    model = scripted(_long_then_short, chunk=40, chunk_delay=0.02)
    async with AppHarness(slack, model=model, data_dir=tmp_path, socket_mode=socket) as app:
        assert app.service is not None
        app.service.runner.executor.stream_interval = 0.05
        root = await _mention(app, "tell me everything", socket=socket)
        await eventually(lambda: any(len(s.text) > 200 for s in slack.streams.values()))
        how = await _slash(app, "U2", "stop", socket=socket)
        assert "Type `stop` in the thread" in how["text"]
        link = f"https://fake.slack.com/archives/C1/p{root.replace('.', '')}"
        answer = await _slash(app, "U2", f"stop {link}", socket=socket)
        assert answer["response_type"] == "ephemeral" and "Stopping" in answer["text"]
        await app.idle()
        [stream] = slack.streams.values()
        assert 0 < len(stream.text) < len(LONG) and stream.state == "stopped"
        assert slack.count("chat.postMessage") == 0
        assert slack.sessions[("C1", root)].status == "active"
        again = await _slash(app, "U2", f"stop {link}", socket=socket)
        assert "Nothing of the app's is running" in again["text"]


async def _slash(app: AppHarness, user: str, text: str, *, socket: bool) -> dict[str, Any]:
    payload = slash_command(app.slack, "C1", user, text, response_url=app.slack.response_url())
    if socket:
        envelope = over_socket(app.slack.socket, payload)
        async with asyncio.timeout(10):
            await app.slack.socket.wait_acked(envelope)
        answer = envelope.ack_payload
    else:
        raw, headers = command_body(payload, SIGNING_SECRET)
        response = await app.post_raw(raw, headers)
        assert response.status == 200
        answer = await response.json()
    assert isinstance(answer, dict)
    return answer


def test_the_stop_subcommand_finds_its_thread_in_the_payload_or_a_link() -> None:
    """The thread is Slack's ``thread_ts`` when given, else a link's (a reply's link names its
    thread); a link to another conversation, or none, names nothing."""
    assert thread_of({"thread_ts": "1.5"}, "", "C1") == "1.5"
    assert thread_of({}, "https://x.slack.com/archives/C1/p1700000000123456", "C1") == "1700000000.123456"
    reply = "https://x.slack.com/archives/C1/p1700000009000001?thread_ts=1700000000.123456&cid=C1"
    assert thread_of({}, reply, "C1") == "1700000000.123456"
    assert thread_of({}, "https://x.slack.com/archives/C9/p1700000000123456", "C1") is None
    assert thread_of({}, "please", "C1") is None


async def test_the_model_renames_its_session_and_the_title_is_kept(
    agent_slack: FakeSlack, tmp_path: Path
) -> None:
    """channel_set_title (found with tool_search where sessions are offered) renames the thread's
    session in Slack and is the stored title a session created again takes."""
    from tests.support.models import call

    seen: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        seen.extend(turn.results)
        steps = [
            [call("tool_search", query="rename the conversation title", limit=1)],
            [call("channel_set_title", title="  Offsite   planning ")],
        ]
        return steps[turn.step] if turn.step < len(steps) else [""]

    slack = agent_slack
    async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
        assert app.service is not None
        root = await _mention(app, "plan the offsite with me")
        await app.idle()
        task_id = await app.service.store.find_task("C1", root)
        assert task_id is not None
        assert ("channel_set_title", {"title": "Offsite planning"}) in seen
        assert slack.sessions[("C1", root)].title == "Offsite planning"
        assert await app.service.store.session_title(task_id) == "Offsite planning"
        renames = [c.params for c in slack.calls_to("agents.sessions.rename")]
        assert renames and renames[-1]["title"] == "Offsite planning"
