"""A new conversation's "is thinking…" set by the HTTP edge's own process (``app.intake.edge_status``),
and taken by the service's run as its own (``app.runs.progress``): once, before the reply, from
the edge's process; its failure falls back to the run's reaction, never to a second status."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import psutil
import pytest

from app.intake import edge_status
from app.intake.edge_status import EdgeStatus
from app.intake.router import Decision
from app.runs import progress
from channel.contract import Origin
from channel.errors import ChannelError
from channel.fake import FakeAdapter
from storage.base import InboxItem
from tests.support import events
from tests.support.fake_model import FakeOpenAI, default_script
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import echo_model
from tests.support.process import ServerProcess, server_env
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack


def _served(slack: FakeSlack, llm: FakeOpenAI, tmp_path: Path, **extra: str) -> ServerProcess:
    env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"), **{"PROGRESS": "auto", **extra})
    return ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "serve.log")


def _edge_of(server: ServerProcess) -> psutil.Process:
    [edge] = psutil.Process(server.pid).children()
    return edge


def _talks_to(proc: psutil.Process, url: str) -> bool:
    """Whether ``proc`` holds a connection to the server at ``url`` (aiohttp keeps it for reuse)."""
    port = urlsplit(url).port
    return any(c.raddr and c.raddr.port == port for c in proc.net_connections(kind="tcp"))


async def _mention(slack: FakeSlack, http: aiohttp.ClientSession, server: ServerProcess) -> str:
    root = slack.add_message("C1", "<@UBOT> question", user="U1")
    mention = events.app_mention("C1", "U1", "<@UBOT> question", root)
    answer = await events.deliver(http, f"{server.url}/slack/events", mention, SIGNING_SECRET)
    assert answer.status == 200
    return root


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


@pytest.mark.process
async def test_the_edge_sets_a_new_conversations_status_and_the_run_takes_it_as_its_own(
    tmp_path: Path,
) -> None:
    """The mention's thread shows "is thinking…" once, set by the edge's process (it holds the
    connection to Slack; the service counts the call in /metrics); the run takes that status as its
    own: its tool step changes it ("is reading the thread…"), and the reply clears it."""
    replies = [
        FakeOpenAI.tool_call("channel_read"),
        FakeOpenAI.tool_call("channel_reply", {"text": "read it"}),
    ]
    async with (
        FakeSlack() as slack,
        FakeOpenAI(FakeOpenAI.sequence(replies, then=lambda _: FakeOpenAI.text(""))) as llm,
        aiohttp.ClientSession() as http,
    ):
        _workspace(slack)
        async with _served(slack, llm, tmp_path) as server:
            root = await _mention(slack, http, server)
            await eventually(lambda: [m["text"] for m in slack.bot_messages("C1")] == ["read it"])
            assert _talks_to(_edge_of(server), slack.api_url), "the status call did not come from the edge"
            async with http.get(f"{server.url}/metrics") as metrics:
                text = await metrics.text()
        assert [(s.status, s.thread_ts) for s in slack.statuses] == [
            ("is thinking…", root),
            ("is reading the thread…", root),
        ]
        assert slack.statuses[0].loading_messages == progress.LOADING_MESSAGES
        assert slack.status_shown("C1", root) == ""  # the reply cleared it
        assert (
            'threadbound_slack_api_calls_total{method="assistant.threads.setStatus",outcome="ok"} 2.0' in text
        ), text[:3000]


@pytest.mark.process
async def test_a_streamed_answer_ends_with_the_edges_status_cleared(tmp_path: Path) -> None:
    """STREAM=auto: the run takes the edge's status as its own through a streamed answer and
    clears it at its end; the thread shows no status afterwards."""
    async with (
        FakeSlack() as slack,
        FakeOpenAI(lambda _: FakeOpenAI.text("Here is a streamed answer.")) as llm,
        aiohttp.ClientSession() as http,
    ):
        _workspace(slack)
        async with _served(slack, llm, tmp_path, STREAM="auto") as server:
            root = await _mention(slack, http, server)
            await eventually(lambda: slack.count("chat.stopStream") == 1)
            await eventually(
                lambda: any("streamed answer" in m.get("text", "") for m in slack.bot_messages("C1"))
            )
            assert _talks_to(_edge_of(server), slack.api_url)
        # Set once (by the edge), cleared once by the run's end, as a status the run set itself is
        # with a streamed answer.
        assert [(s.status, s.thread_ts) for s in slack.statuses] == [("is thinking…", root), ("", root)]
        assert slack.status_shown("C1", root) == ""


@pytest.mark.process
async def test_a_sigkill_after_the_edges_status_still_answers_once(tmp_path: Path) -> None:
    """The edge set the thread's status and the run waits on the model when the service is
    SIGKILLed (its edge dies with it). The restarted service resumes the conversation: one answer,
    the status set again by the resumed run (no edge announced it) and cleared by that answer."""
    asked = asyncio.Event()
    answer = asyncio.Event()

    async def script(request: dict[str, Any]) -> Any:
        asked.set()
        await answer.wait()
        return default_script(request)

    async with FakeSlack() as slack, FakeOpenAI(script) as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        doomed = _served(slack, llm, tmp_path)
        async with doomed:
            root = await _mention(slack, http, doomed)
            await eventually(lambda: asked.is_set() and len(slack.statuses) == 1)
            doomed.kill()
            assert await doomed.wait(within=10) == -signal.SIGKILL
        answer.set()
        env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"), PROGRESS="auto")
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "again.log"):
            await eventually(lambda: len(slack.bot_messages("C1")) == 1)
            await eventually(
                lambda: slack.count("chat.postMessage") >= 1 and slack.status_shown("C1", root) == ""
            )
        [reply] = slack.bot_messages("C1")
        assert reply["text"].startswith("echo: ") and reply["text"].endswith("question")
        assert [s.status for s in slack.statuses] == ["is thinking…", "is thinking…"]


@pytest.mark.process
async def test_a_status_the_edge_could_not_set_becomes_the_runs_reaction(tmp_path: Path) -> None:
    """Slack refuses the edge's status: the run shows its reaction instead (PROGRESS=auto) and does
    not try the status a second time."""
    async with FakeSlack() as slack, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        slack.fail("assistant.threads.setStatus", error="not_allowed", times=None)
        async with _served(slack, llm, tmp_path) as server:
            root = await _mention(slack, http, server)
            await eventually(lambda: len(slack.bot_messages("C1")) == 1)
            await eventually(lambda: slack.count("reactions.remove") == 1)
        assert slack.count("assistant.threads.setStatus") == 1
        assert [c.params["timestamp"] for c in slack.calls_to("reactions.add")] == [root]


@pytest.mark.process
async def test_without_a_status_to_show_the_edge_sets_none(tmp_path: Path) -> None:
    """PROGRESS=reaction: the edge's process leaves the thread alone; the run reacts as configured."""
    async with FakeSlack() as slack, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        async with _served(slack, llm, tmp_path, PROGRESS="reaction") as server:
            await _mention(slack, http, server)
            await eventually(lambda: slack.count("reactions.remove") == 1)
        assert slack.count("assistant.threads.setStatus") == 0


# -- the two halves, each alone ------------------------------------------------------------------


class _Wire:
    def __init__(self) -> None:
        self.said: list[dict[str, Any]] = []
        self.in_flight = 1  # the delivery whose claim created the conversation

    def send(self, **message: Any) -> None:
        self.said.append(message)


class _Slack(FakeAdapter):
    """Status calls that wait for ``go``, then succeed or raise ``refuse``."""

    def __init__(self, refuse: ChannelError | None = None) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.refuse = refuse
        self.shown: list[tuple[Origin, str, tuple[str, ...]]] = []
        self.closed = False

    async def set_status(self, origin: Origin, status: str, loading_messages: Sequence[str] = ()) -> None:
        await self.go.wait()
        if self.refuse is not None:
            raise self.refuse
        self.shown.append((origin, status, tuple(loading_messages)))

    async def close(self) -> None:  # type: ignore[override]
        self.closed = True


def _decision(thread_ts: str) -> Decision:
    return Decision("start", "mention", "C1", "100.000002", thread_ts, "U1")


async def test_the_edge_says_setting_before_the_wake_up_and_the_outcome_after() -> None:
    wire, slack = _Wire(), _Slack()
    status = EdgeStatus(slack, ("Hmm…",), wire)  # type: ignore[arg-type]
    status.created("t1", _decision("100.000002"))
    assert wire.said == [
        {"t": "status", "task": "t1", "state": "setting"}
    ]  # said at once, before the wake-up
    slack.go.set()
    await eventually(lambda: len(wire.said) == 2)
    assert wire.said[1] == {"t": "status", "task": "t1", "state": "ok"}
    assert slack.shown == [(Origin("C1", "100.000002"), "is thinking…", ("Hmm…",))]
    status.created("t2", _decision(""))  # a top-level direct message: no thread, no status
    await status.close()
    assert len(wire.said) == 2 and slack.closed


async def test_a_busy_edge_leaves_the_status_to_the_run() -> None:
    """Acks come first: with another delivery in flight, or MAX_CALLS status calls under way, the
    edge says nothing and sets nothing (the run sets its own status, as without the edge)."""
    wire, slack = _Wire(), _Slack()
    status = EdgeStatus(slack, (), wire)  # type: ignore[arg-type]
    wire.in_flight = 2
    status.created("t1", _decision("1.1"))
    assert wire.said == []
    wire.in_flight = 1
    for n in range(edge_status.MAX_CALLS + 1):
        status.created(f"t{n + 2}", _decision(f"2.{n}"))
    assert [m["task"] for m in wire.said] == [f"t{n + 2}" for n in range(edge_status.MAX_CALLS)]
    slack.go.set()
    await status.close()
    assert len(slack.shown) == edge_status.MAX_CALLS


async def test_a_refused_or_unfinished_status_is_told_as_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    wire, slack = _Wire(), _Slack(ChannelError("not_allowed", "no"))
    status = EdgeStatus(slack, (), wire)  # type: ignore[arg-type]
    status.created("t1", _decision("1.1"))
    slack.go.set()
    await eventually(lambda: len(wire.said) == 2)
    assert wire.said[1]["state"] == "failed"

    wire, slack = _Wire(), _Slack()  # never answered: a stopping edge gives up on it, and says so
    status = EdgeStatus(slack, (), wire)  # type: ignore[arg-type]
    status.created("t2", _decision("1.2"))
    await asyncio.sleep(0)
    monkeypatch.setattr(edge_status, "CLOSE_WAIT", 0.01)
    await status.close()
    assert wire.said[-1] == {"t": "status", "task": "t2", "state": "failed"}


@dataclass(eq=False)
class _Task:
    task_id: str


@dataclass(eq=False)
class _Run:
    """What progress reads of a run's session."""

    adapter: FakeAdapter
    task: _Task
    origin: Origin = field(default_factory=lambda: Origin("C1", "100.000001"))
    streaming: bool = False
    posts_begun: int = 0
    last_thread_post: int = 0


@pytest.mark.parametrize("heard_first", [True, False], ids=["outcome-before-run", "outcome-during-run"])
async def test_the_run_takes_the_edges_status_as_its_own(
    heard_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether the edge's outcome arrives before the run begins or while it waits: the run sets no
    status of its own, refreshes the edge's (Slack would clear it), and clears it at its end."""
    monkeypatch.setattr(progress, "REFRESH_S", 0.01)
    adapter = FakeAdapter()
    shown = progress.Progress("auto")
    run = _Run(adapter, _Task("t1"))
    shown.edge_said("t1", "setting")
    if heard_first:
        shown.edge_said("t1", "ok")
    await shown.on_start(run, [])  # type: ignore[arg-type]
    if not heard_first:
        await asyncio.sleep(0.03)
        assert adapter.statuses == []  # waiting for the edge's word, not setting its own
        shown.edge_said("t1", "ok")
    await eventually(lambda: len(adapter.statuses) >= 2)  # refreshed: the indicator is the run's
    await shown.on_end(run, [], "ok")  # type: ignore[arg-type]
    statuses = [status for _, status in adapter.statuses]
    assert statuses[-1] == "" and set(statuses[:-1]) == {"is thinking…"}
    assert "t1" not in shown._edge


def _item(ref: str) -> InboxItem:
    payload = json.dumps({"ref": ref})
    return InboxItem(
        item_id=1, task_id="t", channel="C1", ts="1.0", thread_ts="", payload=payload, created_at=0
    )


@pytest.mark.parametrize(("mode", "reactions"), [("auto", ["eyes"]), ("status", [])])
async def test_a_status_the_edge_failed_to_set_is_not_set_again(mode: str, reactions: list[str]) -> None:
    """``failed``: the run goes straight to its reaction (auto), or shows nothing (PROGRESS=status)."""
    adapter = FakeAdapter()
    origin = Origin("C1", "100.000001")
    message = adapter.add_message(origin, "hi")
    shown = progress.Progress(mode)
    run = _Run(adapter, _Task("t1"), origin=origin)
    shown.edge_said("t1", "setting")
    shown.edge_said("t1", "failed")
    await shown.on_start(run, [_item(message.ref)])  # type: ignore[arg-type]
    await shown.on_tool(run, "channel_reply")  # type: ignore[arg-type]
    assert [e for e, who in message.reactions.items() if who] == reactions
    await shown.on_end(run, [_item(message.ref)], "ok")  # type: ignore[arg-type]
    assert adapter.statuses == []
    assert not any(message.reactions.values())  # the reaction is gone with the run


async def test_a_run_that_begins_long_after_the_edges_status_sets_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that waited for a slot longer than a refresh interval sets the status itself at once
    (Slack clears one after about two minutes), then refreshes it as usual."""
    adapter = FakeAdapter()
    shown = progress.Progress("auto")
    run = _Run(adapter, _Task("t1"))
    shown.edge_said("t1", "setting")
    shown.edge_said("t1", "ok")
    monkeypatch.setattr(progress, "REFRESH_S", 0.0)  # "long ago": every status is older than this

    async def no_refresh(*_: Any) -> None:  # only the run's start may set it here
        return None

    monkeypatch.setattr(progress.Progress, "_refresh", no_refresh)
    await shown.on_start(run, [])  # type: ignore[arg-type]
    await shown.on_tool(run, "channel_reply")  # type: ignore[arg-type]
    assert [status for _, status in adapter.statuses] == ["is thinking…"]
    await shown.on_end(run, [], "ok")  # type: ignore[arg-type]


async def test_statuses_of_runs_that_never_began_are_let_go() -> None:
    shown = progress.Progress("auto")
    for n in range(progress.EDGE_SHOWN_KEPT + 5):
        shown.edge_said(f"t{n}", "setting")
    assert len(shown._edge) == progress.EDGE_SHOWN_KEPT and "t0" not in shown._edge
    shown.edge_said("t0", "ok")  # an outcome for one let go is ignored
    assert "t0" not in shown._edge


async def test_only_a_claim_that_created_its_conversation_is_heard_as_created(tmp_path: Path) -> None:
    """A mention starting a conversation is; its retry and a reply in its thread are not (their
    task existed: a run may be working, with a status of its own)."""
    heard: list[tuple[str, str, str]] = []
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            app.service.ingress.on_created = lambda task, d: heard.append((task, d.channel, d.thread_ts))
            root = slack.add_message("C1", "<@UBOT> hi", user="U1")
            mention = events.app_mention("C1", "U1", "<@UBOT> hi", root)
            assert (await app.deliver(mention)).status == 200
            assert (await app.deliver(mention, retry_num=1)).status == 200  # Slack's retry: a duplicate
            reply = slack.add_message("C1", "<@UBOT> and?", user="U1", thread_ts=root)
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> and?", reply, thread_ts=root))
            await app.idle()
            task = await app.service.store.find_task("C1", root)
    assert task is not None and heard == [(task, "C1", root)]


async def test_a_run_waiting_for_the_edges_word_goes_on_when_the_edge_is_gone() -> None:
    """The edge's process said its last (stopped, or its wire closed) with a status still being
    set: the run waiting for the outcome goes on at once as if it failed, not after SETTLE_S."""
    adapter = FakeAdapter()
    shown = progress.Progress("auto")
    run = _Run(adapter, _Task("t1"))
    shown.edge_said("t1", "setting")
    await shown.on_start(run, [])  # type: ignore[arg-type]
    shown.edge_said("", "gone")
    await asyncio.wait_for(shown.on_tool(run, "channel_reply"), 1)  # type: ignore[arg-type]
    await shown.on_end(run, [], "ok")  # type: ignore[arg-type]
    assert adapter.statuses == []  # as a failure: the reaction (none here: no message), no status
