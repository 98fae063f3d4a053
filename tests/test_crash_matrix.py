"""The crash-point matrix ("Exactly once"): the app is SIGKILLed at every named point and restarted.

Each row runs one conversation in a real server process with ``THREADBOUND_CRASH_AT=<point>``
(``storage/crashpoints.py``): the process kills itself when it passes the point; a second process on
the same store then takes the conversation over (on SQLite a restart, on Postgres a peer that was
already running, as in a deployment of several instances). The thread must end with the answer
exactly once and no partial or temporary message, the model must not be asked the conversation
afresh once a step was checkpointed, and the task must answer a follow-up. A row's conversation may
ask a question or have a gated call approved (the person clicks the card: one card, decided) or
schedule a follow-up (one stays pending), and may reach the app through the edge's thread or Socket
Mode instead of the edge's process. Rows run on SQLite, and on Postgres when ``TEST_DATABASE_URL``
is set. A crash point the code passes but no row covers fails
:func:`test_the_matrix_covers_every_crash_point`, which reads the points from the source
(``tests/support/crash_points.py``), not from the registry the rows could be built from.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channel.slack.outbound import CRASH_KINDS
from storage import open_store
from storage.crashpoints import POINTS, SLACK_WRITES, TRAIL
from tests.support import events
from tests.support.crash_points import Unresolved, crash_points_in
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text, message_text
from tests.support.harness import SIGNING_SECRET
from tests.support.postgres import fresh_schema
from tests.support.process import ServerProcess, server_env
from tests.support.settled import settled
from tests.support.waiting import eventually, polls
from threadbound_emulator import DEFAULT_SCOPES, FakeSlack
from threadbound_emulator.events import session_stopped

pytestmark = pytest.mark.process
ROOT = Path(__file__).resolve().parents[1]

ASK = "please help"
FOLLOW_UP = "and again?"
ANSWER = "FINAL ANSWER"
SECOND = "SECOND ANSWER"
WITHIN_S = 40.0

#: The rows: a crash point (``name`` or ``name:n``, the n-th pass) and the conversation that passes
#: it. "steps" makes every kind of write but the streamed ones (STREAM=off) and replies with a tool
#: call; "plain" reads, then answers with its final text (posted by the host); "stream" streams it.
STEPS = "steps"
PLAIN = "plain"
STREAM = "stream"
#: The answer is a channel_reply whose text streams while the model writes it (its finish makes
#: the message whole in the tool call, with the step's checkpoint held until then).
STREAM_REPLY = "stream-reply"
#: The same two with Slack slow to start the stream: the model has finished writing (the step's
#: checkpoint, or the answer's, is taken) while the first message is still being started.
STREAM_SLOW = "stream-slow"
STREAM_REPLY_SLOW = "stream-reply-slow"
_SLOW_START = {STREAM_SLOW: 1.0, STREAM_REPLY_SLOW: 1.0}
#: An answer of two messages (longer than one may hold): a reply (posted, or streamed) and final
#: text. A crash after its first part was posted posts the second as the run resumes, never the first again.
LONG = "long"
LONG_STREAM = "long-stream"
LONG_PLAIN = "long-plain"
_LONG = {LONG, LONG_STREAM, LONG_PLAIN}
LONG_TEXT = f"{ANSWER}: " + " ".join(f"w{i:05d}" for i in range(1500))
#: A streamed reply whose first message Slack ends (its stream expired) before all of it was in:
#: the rest is posted as a second message; a crash around that post leaves the resumed run to post
#: what the first message lacks, once.
STREAM_CUT = "stream-cut"
#: The same with the stream broken instead (an append refused): the rest is posted after what it shows.
STREAM_BROKEN = "stream-broken"
#: Two channel_reply calls in one response, both streamed while the model wrote them: the stream
#: is the first one's, the second is posted; each must reach the thread once.
TWO_REPLIES = "two-replies"
OTHER = "OTHER NOTE"
#: The model asks a question with options (``channel_ask``); the person clicks one; the answer follows.
ASK_CARD = "ask"
#: The model schedules a follow-up (``channel_follow_up``), then answers: one follow-up stays pending.
FOLLOW = "follow-up"
#: The model reacts through a call the agent file gates (``approval``): a card; the person approves;
#: the call runs and the answer follows.
APPROVAL = "approval"
#: The buttons a person clicks on a card, by scenario: an option, or Approve.
_CLICK = {ASK_CARD: "threadbound_ask_option_0", APPROVAL: "threadbound_approve"}
#: How Slack's deliveries reach the app, after a scenario's ``@``: the edge's process by default,
#: ``thread`` (``EDGE_PROCESS=false``: the edge on a thread of the one process), or ``socket``
#: (Socket Mode: deliveries and clicks over the emulator's socket, not HTTP).
EDGE_THREAD = "thread"
EDGE_SOCKET = "socket"
_STREAMED = {"startStream", "appendStream", "stopStream"}
#: Every point once, written out by hand (not taken from ``POINTS``): a point the code passes that is
#: missing here fails :func:`test_the_matrix_covers_every_crash_point`.
_EACH_POINT = (
    *(
        f"slack.{kind}.{when}"
        for kind in (
            *("post", "startStream", "appendStream", "stopStream"),
            *("update", "delete", "reaction", "upload"),
        )
        for when in ("before", "after")
    ),
    *(
        f"store.{kind}.{when}"
        for kind in ("claim", "checkpoint", "journal_open", "journal_close", "save", "consume")
        for when in ("before", "after")
    ),
    "model.request",
    "tool.call",
)
ROWS: list[tuple[str, str]] = [
    *((point, STREAM if point.split(".")[1] in _STREAMED else STEPS) for point in _EACH_POINT),
    # The records a run writes beside its journal, each in the conversation that writes it.
    # A handle minted mid-run (the first, the woken message's, is minted beside the lease's take:
    # killed there on Postgres, the message waits for a peer's sweep, an hour away in these rows).
    ("store.handle.before:2", STEPS),
    ("store.handle.after:2", STEPS),
    ("store.ask.before", ASK_CARD),
    ("store.ask.after", ASK_CARD),
    ("store.follow_up.before", FOLLOW),
    ("store.follow_up.after", FOLLOW),
    ("store.approval.before", APPROVAL),
    ("store.approval.after", APPROVAL),
    # Deliveries through the edge's thread and over Socket Mode: killed between the claim and the
    # acknowledgement (Slack delivers again), and after the answer's post.
    ("store.claim.after", f"{PLAIN}@{EDGE_THREAD}"),
    ("slack.post.after", f"{PLAIN}@{EDGE_THREAD}"),
    ("store.claim.after", f"{PLAIN}@{EDGE_SOCKET}"),
    ("slack.post.after", f"{PLAIN}@{EDGE_SOCKET}"),
    # Later passes: the answer's post and journal entries, the checkpoints before it.
    ("slack.post.before:2", STEPS),
    ("slack.post.after:2", STEPS),
    ("store.checkpoint.after:8", STEPS),
    ("store.journal_open.after:6", STEPS),
    ("store.journal_close.before:6", STEPS),
    ("model.request:8", STEPS),
    # A later step's tool call, its checkpoint still held: resumed from the step before it.
    ("tool.call:3", STEPS),
    # A final answer the host posts: checkpointed before it is posted, posted once.
    ("model.request:2", PLAIN),
    ("tool.call", PLAIN),
    ("store.checkpoint.after:2", PLAIN),
    ("slack.post.before", PLAIN),
    ("slack.post.after", PLAIN),
    ("store.journal_close.before", PLAIN),
    ("store.save.before", PLAIN),
    ("model.request:2", STREAM),
    ("store.checkpoint.after:2", STREAM),
    ("store.journal_close.before:2", STREAM),
    ("tool.call", STREAM_REPLY),
    ("slack.stopStream.before", STREAM_REPLY),
    ("slack.stopStream.after", STREAM_REPLY),
    ("store.journal_close.before", STREAM_REPLY),
    ("slack.stopStream.after", STREAM_SLOW),
    ("store.journal_close.before", STREAM_SLOW),
    ("slack.stopStream.after", STREAM_REPLY_SLOW),
    ("store.journal_close.before", STREAM_REPLY_SLOW),
    ("slack.post.after", LONG),
    ("slack.post.before:2", LONG),
    ("store.journal_close.before:2", LONG),
    ("slack.post.after", LONG_PLAIN),
    ("slack.post.before:2", LONG_PLAIN),
    ("slack.stopStream.after", LONG_STREAM),
    ("slack.post.before", STREAM_CUT),
    ("slack.post.after", STREAM_CUT),
    ("slack.post.before", STREAM_BROKEN),
    ("slack.post.before", TWO_REPLIES),
    ("slack.post.after", TWO_REPLIES),
]
IDS = [f"{scenario}-{point}" for point, scenario in ROWS]
#: Writes that change no message of an answer (statuses, titles, prompts, ephemeral notes, canvases).
NOT_ANSWER_WRITES = {
    "assistant.threads.setStatus",
    "assistant.threads.setSuggestedPrompts",
    "assistant.threads.setTitle",
    "chat.postEphemeral",
    "canvases.create",
    "canvases.access.set",
}


class Conversation:
    """The scripted model: what it does next depends only on the history it is sent, so a restarted
    run that lost a step would make it again (and the thread would show it twice)."""

    def __init__(self, scenario: str, data_dir: Path) -> None:
        self.scenario = scenario
        self.data_dir = data_dir
        self.requests: list[dict[str, Any]] = []

    def fresh_starts(self) -> int:
        """Requests that ask the conversation from its start (no assistant message after the ask)."""
        return sum(1 for r in self.requests if not _since_ask(r["messages"])[1:] and _asks(r))

    def __call__(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        messages = request["messages"]
        if FOLLOW_UP in last_user_text(request) and messages[-1].get("role") == "user":
            return FakeOpenAI.text(SECOND)
        turn = _since_ask(messages)
        done = [
            c["function"]["name"]
            for m in turn
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        ]
        results = {m.get("tool_call_id"): message_text(m) for m in turn if m.get("role") == "tool"}
        if self.scenario in (ASK_CARD, FOLLOW, APPROVAL):
            return _records_turn(self.scenario, turn, done, results)
        if self.scenario == LONG_PLAIN:
            return FakeOpenAI.text(LONG_TEXT)
        if self.scenario == STREAM_SLOW:
            return FakeOpenAI.text(f"{ANSWER}: " + "the thread says what you hoped it would say. " * 6)
        if self.scenario in (STREAM, PLAIN):
            if not done:
                # Streamed, the read opens the message (its step) and the answer is appended to it.
                return Reply(
                    text=None if self.scenario == STREAM else "Let me look that up for you, one moment. ",
                    tool_calls=(FakeOpenAI.tool_call("channel_read").tool_calls[0],),
                )
            return FakeOpenAI.text(f"{ANSWER}: " + "the thread says what you hoped it would say. " * 6)
        ask = message_text(turn[0]) if turn else ""
        calls = [c for m in turn if m.get("role") == "assistant" for c in m.get("tool_calls") or []]

        def result(tool: str, text: str = "") -> str | None:
            """The result of the first ``tool`` call (with ``text``); None when never called."""
            for call in calls:
                args = json.loads(call["function"]["arguments"] or "{}")
                if call["function"]["name"] == tool and (not text or args.get("text") == text):
                    return results.get(call["id"], "")
            return None

        def handle(found: str | None, key: str = "message") -> str:
            value = 'msg_[^"]+' if key == "message" else '[^"]+'
            match = re.search(rf'"{key}":\s*"({value})"', found or "")
            return match.group(1) if match else ""

        if self.scenario == TWO_REPLIES:
            wanted = {
                ANSWER: f"{ANSWER}: " + "the thread says what you hoped it would say. " * 6,
                OTHER: f"{OTHER}: one more thing.",
            }
            done_texts = [
                k
                for k in wanted
                for c in calls
                if k in c["function"]["arguments"] and handle(results.get(c["id"], ""))
            ]
            todo = [("channel_reply", {"text": t.rstrip()}) for k, t in wanted.items() if k not in done_texts]
            return FakeOpenAI.tool_calls(*todo) if todo else FakeOpenAI.text("done")
        if self.scenario in (STREAM_REPLY, STREAM_REPLY_SLOW, LONG, LONG_STREAM, STREAM_CUT, STREAM_BROKEN):
            posted = [results.get(c["id"], "") for c in calls if ANSWER in c["function"]["arguments"]]
            if any(handle(p) for p in posted):
                return FakeOpenAI.text("done")
            text = f"{ANSWER}: " + "the thread says what you hoped it would say. " * 6
            if self.scenario in _LONG:
                text = LONG_TEXT
            return FakeOpenAI.tool_call("channel_reply", {"text": text.rstrip()})
        if result("channel_react") is None:
            asked = re.search(r"\"message\": \"(msg_[^\"]+)\"", ask)
            return FakeOpenAI.tool_call(
                "channel_react", {"message": asked.group(1) if asked else "", "emoji": "eyes"}
            )
        if result("tool_search") is None:
            query = "edit or retract my message, download a file, upload a file"
            return FakeOpenAI.tool_call("tool_search", {"query": query, "limit": 6})
        temp = result("channel_reply", "working on it")
        if temp is None:
            return FakeOpenAI.tool_call("channel_reply", {"text": "working on it"})
        if handle(temp) and result("channel_edit") is None:
            return FakeOpenAI.tool_call(
                "channel_edit", {"message": handle(temp), "text": "still working on it"}
            )
        if handle(temp) and result("channel_retract") is None:
            return FakeOpenAI.tool_call("channel_retract", {"message": handle(temp)})
        fetched = result("channel_fetch_file")
        if fetched is None:
            attached = re.search(r"\"file\": \"(file_[^\"]+)\"", ask)
            return FakeOpenAI.tool_call("channel_fetch_file", {"file": attached.group(1) if attached else ""})
        if handle(fetched, "path") and result("channel_attach") is None:
            return FakeOpenAI.tool_call(
                "channel_attach", {"path": handle(fetched, "path"), "title": "report"}
            )
        # The answer, until a result says it was posted (a reply cut off before Slack took it is not).
        answers = [results.get(c["id"], "") for c in calls if ANSWER in c["function"]["arguments"]]
        if any(handle(a) for a in answers):
            return FakeOpenAI.text("done")
        return FakeOpenAI.tool_call("channel_reply", {"text": ANSWER})


def _records_turn(
    scenario: str, turn: list[dict[str, Any]], done: list[str], results: dict[Any, str]
) -> Reply:
    """The model of the scenarios that write a record beside the journal: an ask, a follow-up, a
    gated call's approval; then the answer as final text."""
    answer = FakeOpenAI.text(f"{ANSWER}: " + "the thread says what you hoped it would say. " * 2)
    if scenario == APPROVAL:
        if "channel_react" in done and results:  # approved: the call ran (its result is in the history)
            return answer
        asked = re.search(r"\"message\": \"(msg_[^\"]+)\"", message_text(turn[0]) if turn else "")
        react = {"message": asked.group(1) if asked else "", "emoji": "eyes"}
        return FakeOpenAI.tool_call("channel_react", react)
    said = [message_text(m) for m in turn if m.get("role") == "user"]
    if scenario == ASK_CARD and any("answered q_" in text for text in said):
        return answer
    tool, args, marker = {
        ASK_CARD: ("channel_ask", {"question": "Which one?", "options": ["staging", "prod"]}, '"q_'),
        FOLLOW: ("channel_follow_up", {"after": "1h", "note": "check on it"}, '"fu_'),
    }[scenario]
    if "tool_search" not in done:
        return FakeOpenAI.tool_call("tool_search", {"query": tool.removeprefix("channel_"), "limit": 3})
    if not any(marker in r for r in results.values()) and done.count(tool) < 3:
        return FakeOpenAI.tool_call(tool, args)
    return answer if scenario == FOLLOW else FakeOpenAI.text("")


def _shown(message: dict[str, Any]) -> str:
    """What a reader sees of a bot message: its markdown block (``text`` is the notification fallback)."""
    blocks = [str(b.get("text", "")) for b in message.get("blocks", []) if b.get("type") == "markdown"]
    return "".join(blocks) if blocks else str(message.get("text", ""))


def _asks(request: dict[str, Any]) -> bool:
    return any(m.get("role") == "user" and ASK in message_text(m) for m in request["messages"])


def _since_ask(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages from the person's ask on (the first turn)."""
    for i, message in enumerate(messages):
        if message.get("role") == "user" and ASK in message_text(message):
            return messages[i:]
    return []


def _env(slack: FakeSlack, llm: FakeOpenAI, data_dir: Path, scenario: str, url: str | None) -> dict[str, str]:
    scenario, _, edge = scenario.partition("@")
    whole = (STEPS, PLAIN, LONG, LONG_PLAIN, ASK_CARD, FOLLOW, APPROVAL)
    env = server_env(
        slack,
        llm,
        SLACK_FILE_ORIGINS=slack.files_origin,
        DATA_DIR=str(data_dir),
        STREAM="off" if scenario in whole else "auto",
    )
    if url:
        env["DATABASE_URL"] = url
    if edge == EDGE_THREAD:
        env["EDGE_PROCESS"] = "false"
    elif edge == EDGE_SOCKET:
        env["SLACK_APP_TOKEN"] = slack.app_token
    if scenario == APPROVAL:
        agent_file = data_dir.parent / "agent.toml"
        agent_file.write_text('approval = ["channel_react"]\n')
        env["AGENT_FILE"] = str(agent_file)
    return env


async def _deliver(
    http: aiohttp.ClientSession, slack: FakeSlack, server: ServerProcess, body: dict[str, Any], socket: bool
) -> None:
    """``body`` (an event or a click) to ``server`` over HTTP, or over the socket in Socket Mode."""
    if socket:
        events.over_socket(slack, body)
        return
    if body.get("type") == "block_actions":
        answer = await events.deliver_interaction(http, f"{server.url}/slack/events", body, SIGNING_SECRET)
    else:
        answer = await events.deliver(http, f"{server.url}/slack/events", body, SIGNING_SECRET)
    assert answer.status == 200


def _cards(slack: FakeSlack, action: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The bot's messages with a button ``action`` (a card still open), with that button."""
    return [
        (m, e)
        for m in slack.bot_messages("C1")
        for b in m.get("blocks") or []
        if b.get("type") == "actions"
        for e in b.get("elements") or []
        if e.get("action_id") == action
    ]


async def _click_card(
    http: aiohttp.ClientSession, slack: FakeSlack, server: ServerProcess, action: str, socket: bool
) -> dict[str, Any]:
    """Wait for the card with the button ``action`` in the thread, click it as the requester; the card."""
    await eventually(lambda: bool(_cards(slack, action)), within=WITHIN_S)
    [(card, button)] = _cards(slack, action)
    click = events.block_actions(
        channel="C1",
        user="U1",
        message_ts=card["ts"],
        thread_ts=_ROOT[0],
        action_id=action,
        value=button["value"],
    )
    await _deliver(http, slack, server, click, socket)
    return card


async def _records_kept_once(
    scenario: str, slack: FakeSlack, card: dict[str, Any] | None, data_dir: Path, url: str | None
) -> None:
    """One card for an ask or an approval, decided (its buttons gone); one follow-up pending."""
    if card is not None:
        assert _cards(slack, _CLICK[scenario]) == [], "a card is still open"
        shows = "Which one?" if scenario == ASK_CARD else "channel_react"
        assert [m["ts"] for m in slack.bot_messages("C1") if shows in json.dumps(m)] == [card["ts"]]
    if scenario == FOLLOW:
        store = open_store(url or f"sqlite:///{data_dir / 'threadbound.db'}")
        try:
            task_id = await store.find_task("C1", _ROOT[0])
            assert task_id is not None
            assert len(await store.task_follow_ups(task_id)) == 1, "the follow-up was scheduled twice"
        finally:
            await store.close()


def _left_open(log: str) -> bool:
    """Whether the killed process left its run checkpointed (``run_open``), from the crash points it
    passed (the armed seam's :data:`~storage.crashpoints.TRAIL` line in its log): the last run write it
    committed was a checkpoint, not the save. A write commits between its ``.before`` and ``.after``
    points (``store.consume.after`` is passed inside the checkpoint's or save's ``.after``). Nothing the
    survivor does changes this, where the store may already hold the survivor's save. Fails the row
    when the process left no trail (then the state cannot be known)."""
    trails = [line.split(TRAIL, 1)[1].split() for line in log.splitlines() if TRAIL in line]
    if len(trails) != 1:
        pytest.fail(f"the killed process left {len(trails)} trails of crash points, not one:\n{log[-4000:]}")
    writing, left_open = "", False
    for point in trails[0]:
        if point in ("store.checkpoint.before", "store.save.before"):
            writing = point
        elif writing and point in ("store.consume.after", "store.checkpoint.after", "store.save.after"):
            left_open = writing == "store.checkpoint.before"
            writing = ""
    return left_open


async def _run_open(data_dir: Path, url: str | None) -> bool:
    """Whether the store holds the conversation's run open (checkpointed, not yet saved)."""
    store = open_store(url or f"sqlite:///{data_dir / 'threadbound.db'}")
    try:
        task_id = await store.find_task("C1", _ROOT[0])
        task = await store.get_task(task_id) if task_id else None
        return bool(task and task.run_open)
    finally:
        await store.close()


_ROOT = [""]


async def _settled(data_dir: Path, url: str | None) -> None:
    """Wait until the conversation's run is over: saved (not open), its inbox and journal empty."""
    await settled(url or f"sqlite:///{data_dir / 'threadbound.db'}", "C1", _ROOT[0], within=WITHIN_S)


async def _row(tmp_path: Path, point: str, row: str, url: str | None) -> None:
    data_dir = tmp_path / "data"
    scenario, _, edge = row.partition("@")
    socket = edge == EDGE_SOCKET
    model = Conversation(scenario, data_dir)
    async with (
        FakeSlack() as slack,
        FakeOpenAI(model) as llm,
        aiohttp.ClientSession() as http,
        contextlib.AsyncExitStack() as processes,
    ):
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_file("F1", "report.txt", "text/plain", b"the report\n" * 10)
        files = [slack.file_object("F1")]
        if scenario in _SLOW_START:
            slack.delay("chat.startStream", _SLOW_START[scenario])
        if scenario == STREAM_BROKEN:
            slack.fail("chat.appendStream", "invalid_blocks", times=1)
        if scenario == STREAM_CUT:  # the first append arrives after the stream expired
            slack.stream_ttl = 0.3
            slack.delay("chat.appendStream", 0.6)
        env = _env(slack, llm, data_dir, row, url)
        doomed = ServerProcess(
            {**env, "THREADBOUND_CRASH_AT": point}, cwd=tmp_path, log_path=tmp_path / "doomed.log"
        )
        survivor = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "survivor.log")
        processes.push_async_callback(doomed.stop)  # whatever fails, no process outlives the row
        processes.push_async_callback(survivor.stop)
        await doomed.start()
        if url and not socket:
            # Postgres: a peer already running sees the doomed one alive, so it takes the conversation
            # over a second after the kill (app.runs.takeover) instead of after the 12 s liveness grace
            # that a process started after the kill must wait. SQLite has one instance: a restart.
            await survivor.start()
        root = _ROOT[0] = slack.add_message("C1", f"<@UBOT> {ASK}", user="U1", files=files)
        mention = events.app_mention("C1", "U1", f"<@UBOT> {ASK}", root, files=files)
        unanswered = False
        if socket:
            # To the doomed one's socket only (a survivor starts after the kill): an envelope it did
            # not acknowledge goes out again on the survivor's socket, as Slack redelivers it.
            async with asyncio.timeout(WITHIN_S):
                await slack.socket.wait_connections(1)
            events.over_socket(slack, mention)
        else:
            try:
                response = await events.deliver(http, f"{doomed.url}/slack/events", mention, SIGNING_SECRET)
                assert response.status == 200
            except aiohttp.ClientError:
                unanswered = True  # killed before its 200: Slack delivers the event again
        await eventually(
            lambda: (
                doomed.proc is not None
                and (doomed.proc.returncode is not None or "run finished" in doomed.tail(200))
            ),
            within=WITHIN_S,
        )
        try:
            code = await doomed.wait(within=2.0)
        except TimeoutError:
            await doomed.stop()
            pytest.fail(f"{point} was never passed: {doomed.tail()}")
        assert code == -signal.SIGKILL, doomed.tail()
        # Known from what the killed process did, not read from the store, where on Postgres the
        # survivor running beside it may already have taken over and saved the run.
        checkpointed = _left_open((tmp_path / "doomed.log").read_text(errors="replace"))
        if not url:  # nothing runs after the kill on SQLite yet: the store agrees with the trail
            assert await _run_open(data_dir, url) == checkpointed, doomed.tail()
        # Killed before its 200 on Postgres: Slack's retry reaches the running peer as a duplicate of a
        # claim nobody runs; the peer wakes the task at once (its sweep is an hour away here).
        try:
            if not survivor.proc:
                await survivor.start()
            if unanswered:
                retry = await events.deliver(
                    http, f"{survivor.url}/slack/events", mention, SIGNING_SECRET, retry_num=1
                )
                assert retry.status == 200
            card = None
            if scenario in _CLICK:  # the person answers the card (posted once, before or after the kill)
                card = await _click_card(http, slack, survivor, _CLICK[scenario], socket)
            await eventually(
                lambda: ANSWER in "".join(_shown(m) for m in slack.bot_messages("C1")), within=WITHIN_S
            )
            # The follow-up goes to the next run (one steered into this one would find it replied).
            await _settled(data_dir, url)
            follow = slack.add_message("C1", FOLLOW_UP, user="U1", thread_ts=root)
            envelope = events.message("C1", "U1", FOLLOW_UP, follow, thread_ts=root)
            await _deliver(http, slack, survivor, envelope, socket)
            await eventually(
                lambda: any(SECOND in m.get("text", "") for m in slack.bot_messages("C1")), within=WITHIN_S
            )
        finally:
            await survivor.stop()
            (tmp_path / "requests.json").write_text(json.dumps(model.requests, indent=1))
        texts = [m.get("text", "") for m in slack.bot_messages("C1") if m.get("text")]
        if scenario in _LONG | {
            STREAM_CUT,
            STREAM_BROKEN,
        }:  # every word of the answer once, in order, over its messages
            shown = " ".join(_shown(m) for m in slack.bot_messages("C1") if SECOND not in _shown(m))
            whole = (
                LONG_TEXT
                if scenario in _LONG
                else f"{ANSWER}: " + "the thread says what you hoped it would say. " * 6
            )
            assert shown.split() == whole.split(), texts
        else:
            answers = [t for t in texts if ANSWER in t]
            assert len(answers) == 1, texts
            assert answers[0].startswith(ANSWER)
            assert scenario == STEPS or answers[0].rstrip().endswith("say.")
        assert sum(SECOND in t for t in texts) == 1, texts
        if scenario == TWO_REPLIES:
            assert sum(OTHER in t for t in texts) == 1, texts
        assert not [t for t in texts if "working" in t or "look that up" in t], texts  # nothing partial left
        uploads = [m for m in slack.bot_messages("C1") if m.get("files")]
        assert len(uploads) <= 1  # an upload cut off in flight is reported, never repeated
        reactions = [r for m in slack.messages("C1") if m.get("ts") == root for r in m.get("reactions") or []]
        # A reaction cut off before Slack took it is reported as not done (this model goes on): never two.
        assert [(r["name"], r.get("count", 1)) for r in reactions] in ([], [("eyes", 1)])
        await _records_kept_once(scenario, slack, card, data_dir, url)
        if checkpointed:
            assert model.fresh_starts() == 1, "the resumed run asked the model the conversation afresh"


@pytest.mark.parametrize(("point", "scenario"), ROWS, ids=IDS)
async def test_a_crash_at_any_point_answers_exactly_once_on_sqlite(
    tmp_path: Path, point: str, scenario: str
) -> None:
    """SQLite: killed at the point and restarted, the thread holds the answer once, nothing partial,
    the model is not asked afresh after a checkpoint, and a follow-up is answered."""
    await _row(tmp_path, point, scenario, None)


@pytest.mark.parametrize(("point", "scenario"), ROWS, ids=IDS)
async def test_a_crash_at_any_point_answers_exactly_once_on_postgres(
    tmp_path: Path, point: str, scenario: str
) -> None:
    """Postgres: the same, the conversation taken over by a second instance running beside the killed
    one on the shared store."""
    async with fresh_schema("tb_matrix") as schema:
        await _row(tmp_path, point, scenario, schema.url)


def test_the_armed_seam_writes_the_points_passed_before_the_kill() -> None:
    """Armed, the seam writes every point the process passed, in order, in one stderr line just
    before the SIGKILL, whatever it passes after the kill could be; that line decides
    :func:`_left_open`, which reads a checkpoint's commit, and a save's, from it."""
    script = (
        "from storage.crashpoints import crash_point\n"
        "for p in ['store.checkpoint.before', 'store.checkpoint.after', 'store.save.before',"
        " 'store.consume.before', 'model.request', 'store.save.before']:\n"
        "    crash_point(p)\n"
        "print('not killed')\n"
    )
    env = {**os.environ, "THREADBOUND_CRASH_AT": "store.save.before:2"}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "not killed" not in done.stdout
    passed = "store.checkpoint.before store.checkpoint.after store.save.before store.consume.before"
    assert done.stderr == f"{TRAIL} {passed} model.request store.save.before\n"
    assert _left_open(done.stderr)  # the save never committed: the checkpoint's run stays open
    assert not _left_open(f"{TRAIL} {passed} store.consume.after store.save.after\n")
    assert not _left_open(f"{TRAIL} store.checkpoint.before model.request\n")
    with pytest.raises(pytest.fail.Exception):
        _left_open("a log without a trail\n")


def test_the_matrix_covers_every_crash_point() -> None:
    """Every crash point the code passes (read from its source, not from the registry) has a row,
    the registry knows each of them and no other, and every conversation write has a point."""
    passed = crash_points_in(ROOT, ("app", "channel", "storage"))
    unknown = {name: where for name, where in passed.items() if name not in POINTS}
    assert not unknown, f"crash points the registry (storage/crashpoints.py) does not know: {unknown}"
    rows = {point.split(":")[0] for point, _ in [*ROWS, *STOP_ROWS]}
    uncovered = {name: where for name, where in passed.items() if name not in rows}
    assert not uncovered, f"crash points no row of the matrix covers: {uncovered}"
    assert set(POINTS) <= set(passed), f"points the code never passes: {set(POINTS) - set(passed)}"
    assert rows <= set(passed), f"rows for points the code never passes: {rows - set(passed)}"
    assert set(CRASH_KINDS.values()) == set(SLACK_WRITES)
    written = set()
    for path in (ROOT / "channel" / "slack").rglob("*.py"):
        written |= set(re.findall(r'\.write\(\s*"([a-zA-Z_.0-9]+)"', path.read_text()))
    assert written, "no Slack writes found"
    assert written - set(CRASH_KINDS) <= NOT_ANSWER_WRITES, written - set(CRASH_KINDS) - NOT_ANSWER_WRITES


def test_the_coverage_check_reads_points_from_the_source(tmp_path: Path) -> None:
    """The check above can fail: a point named plainly, or by an f-string over a local choice or a
    module table, is found in code the registry never saw; a name it cannot work out is an error."""
    package = tmp_path / "pkg_chaos_points"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(
        "from storage.crashpoints import crash_point\n"
        "KINDS = {'a.b': 'card', 'c.d': 'mint'}\n"
        "def commit(opened):\n"
        "    crash_point('ask.record.before')\n"
        "    kind = 'open' if opened else 'shut'\n"
        "    crash_point(f'ask.{kind}.after')\n"
        "def write(method):\n"
        "    kind = KINDS.get(method)\n"
        "    crash_point(f'slack.{kind}.before')\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        found = crash_points_in(tmp_path, ["pkg_chaos_points"])
    finally:
        sys.path.remove(str(tmp_path))
    assert sorted(found) == [
        "ask.open.after",
        "ask.record.before",
        "ask.shut.after",
        "slack.card.before",
        "slack.mint.before",
    ]
    assert found["ask.record.before"] == ["pkg_chaos_points/mod.py:4"]
    (package / "mod.py").write_text("from storage.crashpoints import crash_point\ncrash_point(f'x.{y()}')\n")
    with pytest.raises(Unresolved):
        crash_points_in(tmp_path, ["pkg_chaos_points"])


# -- the Stop ("A stop is final"): killed while a person's Stop is recorded or settled --------------
#: The Stop's crash points: recorded (in the process that took the event), about to be settled by the
#: halted run, settled. Each row runs a run stopped mid-answer; the process is killed at the point.
STOP_ROWS: list[tuple[str, str]] = [
    ("store.stop.after", "stop"),
    ("store.settle_stop.before", "stop"),
    ("store.settle_stop.after", "stop"),
]


class _Stoppable:
    """The model of a run stopped mid-answer: it reads the thread (the streamed message opens with the
    step), then writes its answer so slowly that a Stop always comes first; a follow-up is answered."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answering = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        if FOLLOW_UP in last_user_text(request):
            return FakeOpenAI.text(SECOND)
        if not any(m.get("role") == "tool" for m in _since_ask(request["messages"])):
            return Reply(tool_calls=(FakeOpenAI.tool_call("channel_read").tool_calls[0],))
        self.answering.set()
        await self.release.wait()  # held until the row ends: the Stop comes first
        return FakeOpenAI.text(ANSWER)

    def stopped_turn_requests(self) -> int:
        return sum(1 for r in self.requests if _asks(r) and FOLLOW_UP not in last_user_text(r))


async def _stop_row(tmp_path: Path, point: str, url: str | None) -> None:
    data_dir = tmp_path / "data"
    model = _Stoppable()
    async with (
        FakeSlack(scopes=[*DEFAULT_SCOPES, "assistant:write"]) as slack,
        FakeOpenAI(model) as llm,
        aiohttp.ClientSession() as http,
        contextlib.AsyncExitStack() as processes,
    ):
        processes.callback(model.release.set)
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        env = _env(slack, llm, data_dir, STREAM, url)
        doomed = ServerProcess(
            {**env, "THREADBOUND_CRASH_AT": point}, cwd=tmp_path, log_path=tmp_path / "doomed.log"
        )
        survivor = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "survivor.log")
        processes.push_async_callback(doomed.stop)
        processes.push_async_callback(survivor.stop)
        await doomed.start()
        if url:
            await survivor.start()
        root = slack.add_message("C1", f"<@UBOT> {ASK}", user="U1")
        mention = events.app_mention("C1", "U1", f"<@UBOT> {ASK}", root)
        assert (
            await events.deliver(http, f"{doomed.url}/slack/events", mention, SIGNING_SECRET)
        ).status == 200
        async with asyncio.timeout(WITHIN_S):
            await model.answering.wait()
        await eventually(lambda: len(slack.streams) == 1, within=WITHIN_S)
        stop = session_stopped(slack, "C1", root, "U1")
        try:
            await events.deliver(http, f"{doomed.url}/slack/events", stop, SIGNING_SECRET)
        except aiohttp.ClientError:
            pass  # killed before its 200: Slack delivers the event again (below)
        await eventually(
            lambda: doomed.proc is not None and doomed.proc.returncode is not None, within=WITHIN_S
        )
        if not survivor.proc:
            await survivor.start()
        # Slack retries a Stop it got no 200 for; one already recorded (or settled) changes nothing.
        retry = await events.deliver(http, f"{survivor.url}/slack/events", stop, SIGNING_SECRET, retry_num=1)
        assert retry.status == 200
        store_url = url or f"sqlite:///{data_dir / 'threadbound.db'}"
        await settled(store_url, "C1", root, within=WITHIN_S)
        store = open_store(store_url)
        try:
            task_id = await store.find_task("C1", root)
            assert task_id is not None
            async for _ in polls(WITHIN_S):
                if await store.stop_of(task_id) is None:
                    break
            assert await store.stop_of(task_id) is None, "the stop was never settled"
        finally:
            await store.close()
        follow = slack.add_message("C1", FOLLOW_UP, user="U1", thread_ts=root)
        envelope = events.message("C1", "U1", FOLLOW_UP, follow, thread_ts=root)
        assert (
            await events.deliver(http, f"{survivor.url}/slack/events", envelope, SIGNING_SECRET)
        ).status == 200
        await eventually(
            lambda: any(SECOND in m.get("text", "") for m in slack.bot_messages("C1")), within=WITHIN_S
        )
        await survivor.stop()
        texts = [_shown(m) for m in slack.bot_messages("C1")]
        assert not [t for t in texts if ANSWER in t], texts  # the stopped turn wrote nothing more
        assert sum(SECOND in t for t in texts) == 1, texts
        assert model.stopped_turn_requests() == 2  # never asked again for the stopped turn
        assert all(s.state != "streaming" for s in slack.streams.values())
        follow_up = next(r for r in model.requests if FOLLOW_UP in last_user_text(r))
        assert "stopped by Alice" in json.dumps(follow_up["messages"])  # the model learns it


@pytest.mark.parametrize(("point", "scenario"), STOP_ROWS, ids=[p for p, _ in STOP_ROWS])
async def test_a_crash_around_a_stop_never_takes_the_stopped_turn_up_again_on_sqlite(
    tmp_path: Path, point: str, scenario: str
) -> None:
    """SQLite: killed while a Stop is recorded or settled and restarted, the stopped turn writes nothing
    more and is never taken up again, the model learns who stopped it, and the next message is answered."""
    await _stop_row(tmp_path, point, None)


@pytest.mark.parametrize(("point", "scenario"), STOP_ROWS, ids=[p for p, _ in STOP_ROWS])
async def test_a_crash_around_a_stop_never_takes_the_stopped_turn_up_again_on_postgres(
    tmp_path: Path, point: str, scenario: str
) -> None:
    """Postgres: the same, taken over by a second instance running beside the killed one."""
    async with fresh_schema("tb_matrix") as schema:
        await _stop_row(tmp_path, point, schema.url)
