"""Exactly once across a SIGKILL for what the crash matrix's conversation does not pass: the host's
own notes (a per-person budget note) and what a prompt shows once (feedback on earlier answers).

Real server processes, like ``tests/test_crash_matrix.py``: one is killed at a named crash point
(``THREADBOUND_CRASH_AT``), a second on the same store takes the conversation over (on SQLite a
restart, on Postgres a peer that was already running, as in a deployment of several instances). On
SQLite, and on Postgres when ``TEST_DATABASE_URL`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from storage import UsageRecord, open_store
from tests.support import events
from tests.support.days import days_ahead
from tests.support.fake_model import FakeOpenAI, Reply, Script, last_user_text, message_text
from tests.support.harness import SIGNING_SECRET
from tests.support.postgres import fresh_schema
from tests.support.process import ServerProcess, server_env
from tests.support.settled import settled
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

pytestmark = pytest.mark.process

WITHIN_S = 40.0
BACKENDS = ["sqlite", "postgres"]


@contextlib.asynccontextmanager
async def _database(tmp_path: Path, backend: str) -> AsyncIterator[str]:
    """The ``DATABASE_URL`` of a fresh store: a SQLite file, or a Postgres schema dropped after."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'data' / 'threadbound.db'}"
        return
    async with fresh_schema("tb_notes") as schema:
        yield schema.url


_World = tuple[str, FakeSlack, FakeOpenAI, FakeOpenAI, aiohttp.ClientSession, contextlib.AsyncExitStack]


@contextlib.asynccontextmanager
async def _world(tmp_path: Path, backend: str, script: Script) -> AsyncIterator[_World]:
    """A fresh store's URL, FakeSlack with Alice in #general, a model for the killed server and one for
    its survivor (both following ``script``), an HTTP session, and a stack the servers are started on."""
    async with (
        _database(tmp_path, backend) as url,
        FakeSlack() as slack,
        FakeOpenAI(script) as llm,
        FakeOpenAI(script) as after,
        aiohttp.ClientSession() as http,
        contextlib.AsyncExitStack() as processes,
    ):
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        yield url, slack, llm, after, http, processes


def _env(slack: FakeSlack, llm: FakeOpenAI, tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    return server_env(slack, llm, DATA_DIR=str(tmp_path / "data"), DATABASE_URL=url, **extra)


async def _doomed_and_survivor(
    processes: contextlib.AsyncExitStack,
    tmp_path: Path,
    backend: str,
    point: str,
    env: dict[str, str],
    survivor_env: dict[str, str],
) -> tuple[ServerProcess, ServerProcess]:
    """The process to be killed at ``point``, started, and the one that takes its conversation over
    (started by :func:`_take_over`). On Postgres the survivor starts now, beside the doomed one: a
    peer that saw it alive takes the conversation over a second after the kill (app.runs.takeover),
    where one started after the kill waits the store's 12 s liveness grace. SQLite has one instance:
    a restart after the kill. Both are stopped when ``processes`` closes, whatever fails."""
    doomed = ServerProcess(
        {**env, "THREADBOUND_CRASH_AT": point}, cwd=tmp_path, log_path=tmp_path / "doomed.log"
    )
    survivor = ServerProcess(survivor_env, cwd=tmp_path, log_path=tmp_path / "survivor.log")
    processes.push_async_callback(doomed.stop)
    processes.push_async_callback(survivor.stop)
    await doomed.start()
    if backend == "postgres":
        await survivor.start()
    return doomed, survivor


async def _take_over(survivor: ServerProcess) -> None:
    """After the kill: on SQLite, restart (on Postgres the survivor already runs)."""
    if survivor.proc is None:
        await survivor.start()


async def _killed(doomed: ServerProcess) -> None:
    """Wait for the process to kill itself at its crash point."""
    try:
        code = await doomed.wait(within=WITHIN_S)
    except TimeoutError:
        await doomed.stop()
        pytest.fail(f"the crash point was never passed: {doomed.tail()}")
    assert code == -signal.SIGKILL, doomed.tail()


async def _settled(url: str, channel: str, root: str) -> None:
    """Wait until the conversation's run is over: saved, its inbox and journal empty."""
    await settled(url, channel, root, within=WITHIN_S)


async def _answered_after_takeover(
    survivor: ServerProcess, slack: FakeSlack, url: str, root: str, needle: str
) -> None:
    """The survivor takes over, a bot message holding ``needle`` arrives and the run is over; then
    the survivor stops."""
    await _take_over(survivor)
    await eventually(
        lambda: any(needle in m.get("text", "") for m in slack.bot_messages("C1")), within=WITHIN_S
    )
    await _settled(url, "C1", root)
    await survivor.stop()


async def _ask_doomed(http: aiohttp.ClientSession, slack: FakeSlack, doomed: ServerProcess) -> str:
    """The stop-inducing mention, delivered to the instance about to be killed; its ts."""
    root = slack.add_message("C1", f"<@UBOT> {STOP_ASK}", user="U1")
    mention = events.app_mention("C1", "U1", f"<@UBOT> {STOP_ASK}", root)
    assert (await events.deliver(http, f"{doomed.url}/slack/events", mention, SIGNING_SECRET)).status == 200
    return root


# -- a per-person budget note -----------------------------------------------------------------

ALICE_ASKS = "alice asks for help"
BOB_SAYS = "bob says hello"
ALICE_ANSWER = "ANSWER FOR ALICE"
#: Bob's spend today, far past USER_DAILY_TOKEN_BUDGET (Alice's requests stay well within it).
BOB_SPENT = 900_000
BUDGET = "100000"


class _HeldUntilBob:
    """The model: its first request waits until Bob's message is in the thread (so it is steered into
    Alice's run); it answers with final text. Records what each request showed."""

    def __init__(self) -> None:
        self.bob_delivered = asyncio.Event()
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        await self.bob_delivered.wait()
        return FakeOpenAI.text(ALICE_ANSWER)


@pytest.mark.parametrize("point", ["slack.post.before", "slack.post.after"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_budget_note_is_posted_once_across_a_sigkill_at_its_post(
    tmp_path: Path, backend: str, point: str
) -> None:
    """Bob, past his daily budget, writes into Alice's running conversation: his message is not shown
    to the model and he gets the budget note. Killed right before or right after that note's post
    (before the run consumed his message), the server that takes over shows the thread the note exactly
    once (finished from the journal, found by its effect id, not posted again when his message is
    screened anew) and Alice gets her answer once."""
    model = _HeldUntilBob()
    async with (
        _database(tmp_path, backend) as url,
        FakeSlack() as slack,
        FakeOpenAI(model) as llm,
        aiohttp.ClientSession() as http,
        contextlib.AsyncExitStack() as processes,
    ):
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        env = _env(slack, llm, tmp_path, url, USER_DAILY_TOKEN_BUDGET=BUDGET)
        doomed, survivor = await _doomed_and_survivor(processes, tmp_path, backend, point, env, env)
        store = open_store(url)
        try:
            for day in days_ahead():  # over budget on whichever day the servers check it
                await store.record_usage(
                    UsageRecord(day=day, person="U2", channel="C1", input_tokens=BOB_SPENT)
                )
        finally:
            await store.close()
        root = slack.add_message("C1", f"<@UBOT> {ALICE_ASKS}", user="U1")
        mention = events.app_mention("C1", "U1", f"<@UBOT> {ALICE_ASKS}", root)
        url_events = f"{doomed.url}/slack/events"
        assert (await events.deliver(http, url_events, mention, SIGNING_SECRET)).status == 200
        await eventually(lambda: bool(model.requests), within=WITHIN_S)  # Alice's run is under way
        bob = slack.add_message("C1", BOB_SAYS, user="U2", thread_ts=root)
        said = events.message("C1", "U2", BOB_SAYS, bob, thread_ts=root)
        assert (await events.deliver(http, url_events, said, SIGNING_SECRET)).status == 200
        model.bob_delivered.set()
        await _killed(doomed)
        await _answered_after_takeover(survivor, slack, url, root, ALICE_ANSWER)
        texts = [m.get("text", "") for m in slack.messages("C1", root) if m.get("bot_id")]
    assert sum("of your 100,000 daily model tokens" in t for t in texts) == 1, texts
    assert sum(ALICE_ANSWER in t for t in texts) == 1, texts
    shown = [message_text(m) for r in model.requests for m in r["messages"] if m.get("role") == "user"]
    assert not any(BOB_SAYS in s for s in shown)  # his message never reached the model


# -- feedback on an earlier answer, shown once ------------------------------------------------

QUESTIONS = {1: "question one", 2: "question two", 3: "question three"}
FEEDBACK_LINE = "marked your answer"


def _feedback_script(request: dict[str, Any]) -> Reply:
    """Every turn reads the thread, then answers "ANSWER <n>" with final text (posted by the host)."""
    asked = last_user_text(request)
    turn = next(n for n, words in QUESTIONS.items() if words in asked)
    if request["messages"][-1].get("role") == "user":
        return FakeOpenAI.tool_call("channel_read", {})
    return FakeOpenAI.text(f"ANSWER {turn}")


def _shown(request: dict[str, Any]) -> int:
    """How many times the request shows the model a feedback note (its whole history counted)."""
    return sum(message_text(m).count(FEEDBACK_LINE) for m in request["messages"] if m.get("role") == "user")


@pytest.mark.parametrize("point", ["store.checkpoint.before", "model.request:2"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_feedback_note_survives_a_sigkill_and_is_shown_once(
    tmp_path: Path, backend: str, point: str
) -> None:
    """Alice marks the first answer not helpful. The next turn's prompt shows the model that note; the
    server is killed after the model was shown it, before the run finished — before the checkpoint
    that marks it shown, or after it. The taking-over server's run shows the model the note (from its
    prompt again, or from the checkpointed history) exactly once, and so does every later turn: the
    note is neither lost nor duplicated."""
    async with _world(tmp_path, backend, _feedback_script) as (url, slack, llm, after, http, processes):
        env = _env(slack, llm, tmp_path, url)
        root = slack.add_message("C1", f"<@UBOT> {QUESTIONS[1]}", user="U1")

        def answered(n: int) -> bool:
            return any(f"ANSWER {n}" in m.get("text", "") for m in slack.bot_messages("C1"))

        async def say(server: ServerProcess, n: int) -> None:
            ts = slack.add_message("C1", QUESTIONS[n], user="U1", thread_ts=root)
            said = events.message("C1", "U1", QUESTIONS[n], ts, thread_ts=root)
            assert (
                await events.deliver(http, f"{server.url}/slack/events", said, SIGNING_SECRET)
            ).status == 200

        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "first.log") as first:
            mention = events.app_mention("C1", "U1", f"<@UBOT> {QUESTIONS[1]}", root)
            assert (
                await events.deliver(http, f"{first.url}/slack/events", mention, SIGNING_SECRET)
            ).status == 200
            await eventually(lambda: answered(1), within=WITHIN_S)
            await _settled(url, "C1", root)
            [answer] = [m for m in slack.bot_messages("C1") if "ANSWER 1" in m.get("text", "")]
            [buttons] = [e for b in answer["blocks"] if b["type"] == "context_actions" for e in b["elements"]]
            click = events.block_actions(
                channel="C1",
                user="U1",
                message_ts=answer["ts"],
                thread_ts=root,
                action_id=buttons["action_id"],
                value=buttons["negative_button"]["value"],
                element="feedback_buttons",
            )
            response = await events.deliver_interaction(
                http, f"{first.url}/slack/events", click, SIGNING_SECRET
            )
            assert response.status == 200
            store = open_store(url)
            try:
                task_id = await store.find_task("C1", root)
                assert task_id is not None
                for _ in range(int(WITHIN_S / 0.05)):
                    if await store.pending_feedback(task_id):
                        break
                    await asyncio.sleep(0.05)
                assert await store.pending_feedback(task_id), "the click was never stored"
            finally:
                await store.close()
        # The survivor asks a model of its own (``after``): what the killed process asked is all of
        # ``llm``'s requests at the kill, though a survivor already running may ask at once.
        survivor_env = _env(slack, after, tmp_path, url)
        doomed, survivor = await _doomed_and_survivor(processes, tmp_path, backend, point, env, survivor_env)
        await say(doomed, 2)
        await _killed(doomed)
        shown_before = [r for r in llm.requests if QUESTIONS[2] in last_user_text(r)]
        assert shown_before and _shown(shown_before[0]) == 1  # the model was shown the note, then killed
        await _take_over(survivor)
        await eventually(lambda: answered(2), within=WITHIN_S)
        await _settled(url, "C1", root)
        await say(survivor, 3)
        await eventually(lambda: answered(3), within=WITHIN_S)
        await _settled(url, "C1", root)
        await survivor.stop()
        texts = [m.get("text", "") for m in slack.bot_messages("C1")]
        requests = [*llm.requests, *after.requests]
    assert [sum(f"ANSWER {n}" in t for t in texts) for n in QUESTIONS] == [1, 1, 1], texts
    later = [r for r in requests[requests.index(shown_before[-1]) + 1 :]]
    assert later, "the server that took over asked the model nothing"
    # Every request after the restart shows the note exactly once: turn 2's resumed run and turn 3's.
    assert [_shown(r) for r in later] == [1] * len(later)


# -- the note a run stops with ----------------------------------------------------------------

STOP_ASK = "please look into it"


def _reads_then_answers(request: dict[str, Any]) -> Reply:
    """Reads the thread first (a step that spends the budget), then would answer."""
    if request["messages"][-1].get("role") == "user":
        return FakeOpenAI.tool_call("channel_read", {})
    return FakeOpenAI.text("ANSWER AFTER READING")


@pytest.mark.parametrize("point", ["slack.post.before", "slack.post.after"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_runs_stop_note_is_posted_once_across_a_sigkill_at_its_post(
    tmp_path: Path, backend: str, point: str
) -> None:
    """A run's first step crosses Alice's daily budget: the run stops with the budget's note. Killed
    right before or right after that note's post, the server that takes over posts it (or finds it posted)
    once, from the checkpoint it was marked in: the model is not asked again."""
    async with _world(tmp_path, backend, _reads_then_answers) as (url, slack, llm, after, http, processes):
        env = _env(slack, llm, tmp_path, url, USER_DAILY_TOKEN_BUDGET="10")
        # The survivor asks a model of its own (``after``): ``asked`` counts the killed process's
        # requests alone, though a survivor already running may ask at once.
        survivor_env = _env(slack, after, tmp_path, url, USER_DAILY_TOKEN_BUDGET="10")
        doomed, survivor = await _doomed_and_survivor(processes, tmp_path, backend, point, env, survivor_env)
        root = await _ask_doomed(http, slack, doomed)
        await _killed(doomed)
        asked = len(llm.requests)
        await _answered_after_takeover(survivor, slack, url, root, "daily model tokens")
        texts = [m.get("text", "") for m in slack.bot_messages("C1")]
        notes = [m for m in slack.bot_messages("C1") if "daily model tokens" in m.get("text", "")]
    assert asked == 1 and len(llm.requests) + len(after.requests) == 1  # one step, never asked again
    assert len(notes) == 1, texts
    assert "ANSWER AFTER READING" not in "".join(texts)
    assert not [b for b in notes[0].get("blocks") or [] if b.get("type") == "context_actions"]


# -- the apology of a failed run --------------------------------------------------------------


@pytest.mark.parametrize("point", ["slack.post.before", "slack.post.after"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_failed_runs_apology_is_posted_once_across_a_sigkill_at_its_post(
    tmp_path: Path, backend: str, point: str
) -> None:
    """The model provider refuses every request: the run ends with its apology. Killed right before or
    right after the apology's post, the server that takes over posts it (or finds it posted) once, from the
    checkpoint it was marked in, and does not run the failed request again (another apology)."""
    async with _world(tmp_path, backend, _reads_then_answers) as (url, slack, llm, after, http, processes):
        for model in (llm, after):
            model.fail(status=400, times=None, message="this request is refused")
        env = _env(slack, llm, tmp_path, url)
        # The survivor asks a model of its own (``after``): ``asked`` counts the killed process's
        # requests alone, though a survivor already running may ask at once.
        survivor_env = _env(slack, after, tmp_path, url)
        doomed, survivor = await _doomed_and_survivor(processes, tmp_path, backend, point, env, survivor_env)
        root = await _ask_doomed(http, slack, doomed)
        await _killed(doomed)
        asked = llm.count
        await _answered_after_takeover(survivor, slack, url, root, "ran into a problem")
        texts = [m.get("text", "") for m in slack.bot_messages("C1")]
    assert sum("ran into a problem" in t for t in texts) == 1, texts
    assert llm.count + after.count == asked  # the failed run is not run again after the takeover
