"""SIGTERM ends the process within SHUTDOWN_GRACE + 10 s whatever stalls — Slack answering nothing, the
model answering nothing, Postgres unreachable, the event loop's own teardown — and what was running
is resumed after restart, once."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from app.ops.shutdown import SHUTDOWN_MARGIN
from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from tests.support.harness import SIGNING_SECRET
from tests.support.process import ServerProcess
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

GRACE = 2.0
#: The bound under test, plus a little for the interpreter to exit and the OS to reap it.
EXIT_WITHIN = GRACE + SHUTDOWN_MARGIN + 3.0

pytestmark = pytest.mark.process


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


def _env(slack: FakeSlack, llm: FakeOpenAI, data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "DATA_DIR": str(data_dir),
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "x",
        "LEASE_TTL": "2",
        "SWEEP_INTERVAL": "0.5",
        "SHUTDOWN_GRACE": str(GRACE),
        "STREAM": "off",
        **extra,
    }


def _answer_once(request: dict[str, Any]) -> Reply:
    """Reply to the person; once told what happened to an interrupted reply, or after a tool, stop."""
    messages = request.get("messages") or [{}]
    text = last_user_text(request)
    if messages[-1].get("role") == "tool" or "interrupted" in text:
        return FakeOpenAI.text("")
    return FakeOpenAI.tool_call("channel_reply", {"text": "the answer"})


async def _ask(http: aiohttp.ClientSession, server: ServerProcess, slack: FakeSlack) -> str:
    root = slack.add_message("C1", "<@UBOT> a question", user="U1")
    envelope = events.app_mention("C1", "U1", "<@UBOT> a question", root)
    response = await events.deliver(http, f"{server.url}/slack/events", envelope, SIGNING_SECRET)
    assert response.status == 200
    return root


async def _sigterm_exits_in_time(server: ServerProcess) -> None:
    server.terminate()
    assert await server.wait(EXIT_WITHIN) == 0, server.tail()


async def _answered_once(slack: FakeSlack) -> None:
    await eventually(lambda: len(slack.bot_messages("C1")) >= 1, within=40)
    await asyncio.sleep(1.0)  # a duplicate would come right after
    assert [m["text"] for m in slack.bot_messages("C1")] == ["the answer"]


async def test_sigterm_while_slack_answers_nothing(tmp_path: Path) -> None:
    """chat.postMessage and the status line get no answer: SIGTERM still exits in time, and the restart
    finds the post Slack made (by its effect id) instead of posting again."""
    async with FakeSlack() as slack, FakeOpenAI(_answer_once) as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        env = _env(slack, llm, tmp_path / "data")
        first = await ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "first.log").start()
        held = slack.hold("chat.postMessage")
        slack.hold("assistant.threads.setStatus")
        await _ask(http, first, slack)
        await asyncio.wait_for(held.wait(), 20)
        await _sigterm_exits_in_time(first)
        slack.release("chat.postMessage")
        slack.release("assistant.threads.setStatus")
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "second.log"):
            await _answered_once(slack)
            await eventually(lambda: any("interrupted" in last_user_text(r) for r in llm.requests), within=30)


async def test_sigterm_while_the_model_answers_nothing(tmp_path: Path) -> None:
    """The model request hangs: SIGTERM exits in time, and the restart answers the message once."""
    async with FakeSlack() as slack, FakeOpenAI(_answer_once) as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        env = _env(slack, llm, tmp_path / "data")
        first = await ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "first.log").start()
        llm.delay_next(600)
        await _ask(http, first, slack)
        await eventually(lambda: len(llm.requests) >= 1)
        await _sigterm_exits_in_time(first)
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "second.log"):
            await _answered_once(slack)


#: ``python -m app serve`` with one task on its loop that will not end when cancelled: what a store
#: pool's tasks on connections that answer nothing did to asyncio.run's teardown, after serve returned.
_STUCK_SERVE = """
import asyncio, runpy, sys
import app.serving

real, kept = app.serving.serve, []

async def stuck():
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

async def serve(settings, **options):
    kept.append(asyncio.get_running_loop().create_task(stuck()))
    await real(settings, **options)

app.serving.serve = serve
sys.argv = ["app", "serve"]
runpy.run_module("app", run_name="__main__", alter_sys=True)
"""


async def test_sigterm_ends_the_process_when_the_loops_teardown_hangs(tmp_path: Path) -> None:
    """The shutdown's steps finish, but asyncio.run's teardown after them cannot cancel a task: the
    watchdog, no longer cancelled once the steps are done, ends the process in time (a Postgres
    frozen mid-run left such tasks behind, and the process hung past its deadline)."""
    script = tmp_path / "stuck_serve.py"
    script.write_text(_STUCK_SERVE)
    async with FakeSlack() as slack, FakeOpenAI(_answer_once) as llm:
        _workspace(slack)
        env = _env(slack, llm, tmp_path / "data")
        log = tmp_path / "stuck.log"
        server = await ServerProcess(
            env, cwd=tmp_path, log_path=log, argv=[sys.executable, str(script)]
        ).start()
        await _sigterm_exits_in_time(server)
    logged = log.read_text()
    assert "stopped after" in logged and "shutdown did not finish in time" in logged, logged[-2000:]


async def test_sigterm_while_postgres_is_unreachable(tmp_path: Path) -> None:
    """Postgres stops answering mid-run (connections stay open, nothing comes back): SIGTERM exits in
    time, and once Postgres is back a restart answers the message once."""
    base = os.environ.get("TEST_DATABASE_URL", "")
    if not base:
        pytest.skip("TEST_DATABASE_URL not set")
    schema = f"tb_test_{uuid.uuid4().hex[:12]}"
    proxy = await TcpProxy("127.0.0.1", 5432).start()
    proxied = base.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    assert proxied != base, "TEST_DATABASE_URL must point at 127.0.0.1:5432"
    try:
        async with FakeSlack() as slack, FakeOpenAI(_answer_once) as llm, aiohttp.ClientSession() as http:
            _workspace(slack)
            env = _env(slack, llm, tmp_path / "data", DATABASE_URL=f"{proxied}?schema={schema}")
            first = await ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "first.log").start()
            llm.delay_next(3)
            await _ask(http, first, slack)
            await eventually(lambda: len(llm.requests) >= 1)
            proxy.freeze()
            await _sigterm_exits_in_time(first)
            assert slack.bot_messages("C1") == []
            proxy.thaw()
            async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "second.log"):
                await _answered_once(slack)
    finally:
        await proxy.stop()
        conn = await asyncpg.connect(base)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


def _react_gated(request: dict[str, Any]) -> Reply:
    """Ask to react to the person's message (a gated call); stay silent after that."""
    handle = re.search(r"(msg_[A-Za-z0-9_-]+)", json.dumps(request.get("messages")))
    if (request.get("messages") or [{}])[-1].get("role") == "tool" or handle is None:
        return FakeOpenAI.text("")
    return FakeOpenAI.tool_call("channel_react", {"message": handle.group(1), "emoji": "eyes"})


async def test_sigterm_while_a_private_note_to_a_clicker_gets_no_answer(tmp_path: Path) -> None:
    """A click's private note (chat.postEphemeral) hangs: the click was answered at once, and SIGTERM still
    exits in time instead of waiting for the note."""
    async with FakeSlack() as slack, FakeOpenAI(_react_gated) as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        slack.add_user("U2", "bob", display_name="Bob")
        agent = tmp_path / "agent.toml"
        agent.write_text('approval = ["channel_react"]\n', encoding="utf-8")
        env = _env(slack, llm, tmp_path / "data", AGENT_FILE=str(agent))
        server = await ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server.log").start()
        root = await _ask(http, server, slack)
        await eventually(lambda: any(m.get("blocks") for m in slack.bot_messages("C1")))
        [card] = [m for m in slack.bot_messages("C1") if m.get("blocks")]
        actions = next(b for b in card["blocks"] if b["type"] == "actions")
        approval_id = next(e["value"] for e in actions["elements"] if e["action_id"] == "threadbound_approve")
        held = slack.hold("chat.postEphemeral")
        click = events.block_actions(
            channel="C1",
            user="U2",
            message_ts=card["ts"],
            thread_ts=root,
            action_id="threadbound_approve",
            value=approval_id,
        )
        response = await asyncio.wait_for(
            events.deliver_interaction(http, f"{server.url}/slack/events", click, SIGNING_SECRET), 20
        )
        assert response.status == 200
        await asyncio.wait_for(held.wait(), 20)
        await _sigterm_exits_in_time(server)
        slack.release("chat.postEphemeral")
