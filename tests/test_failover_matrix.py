"""A database failover at every point of a turn (Postgres): the answer is posted once, nothing lost.

Each row runs one conversation in a real server process armed with ``THREADBOUND_FAILOVER_AT=<point>``
(``storage/crashpoints.py``): at the point the process stops, this test ends every database session
its processes hold (``pg_terminate_backend``, as a database restart or a failover ends them), and the
process goes on. Its next store call meets the ended sessions. The thread must end with the answer
exactly once, and the conversation must answer a follow-up, without a restart of the app. Points
around a commit see both sides of it: ``.before``, the commit's own session ended first; ``.after``,
the commit landed and the next one fails. (The crash matrix, ``tests/test_crash_matrix.py``, kills the
process at the same points instead.)
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import psutil
import pytest

from storage.crashpoints import FAILOVER, SLACK_WRITES, STORE_COMMITS
from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from tests.support.harness import SIGNING_SECRET
from tests.support.postgres import fresh_schema
from tests.support.process import ServerProcess, server_env
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

pytestmark = pytest.mark.process

ASK = "please help"
FOLLOW_UP = "and again?"
ANSWER = "FINAL ANSWER"
SECOND = "SECOND ANSWER"
WITHIN_S = 60.0

#: Commits a plain turn never makes (an ask, a follow-up, an approval): the crash matrix passes them
#: with turns of their own (``tests/test_crash_matrix.py``); a plain turn would wait here forever.
NOT_ON_A_PLAIN_TURN = frozenset({"ask", "follow_up", "approval"})
#: Every store commit a turn makes, both sides, and the reply's post: the points a turn passes
#: (``STREAM=off``);
#: then the reply streamed while the model writes it (``STREAM=auto``) around its Slack calls and
#: its journal entries.
ROWS: list[tuple[str, str]] = [
    *(
        (f"store.{kind}.{when}", "off")
        for kind in STORE_COMMITS
        if kind not in NOT_ON_A_PLAIN_TURN
        for when in ("before", "after")
    ),
    *((f"slack.post.{when}", "off") for when in ("before", "after")),
    ("model.request", "off"),
    ("tool.call", "off"),
    *(
        (f"slack.{kind}.{when}", "auto")
        for kind in ("startStream", "stopStream")
        for when in ("before", "after")
    ),
    ("store.journal_open.after", "auto"),
    ("store.journal_close.before", "auto"),
]
assert {p.split(".")[1] for p, _ in ROWS if p.startswith("slack.")} <= set(SLACK_WRITES)


def _script(request: dict[str, Any]) -> Reply:
    """Reply with ``channel_reply`` until a result says it was posted, then end; a follow-up gets
    its own answer. What it does depends only on the history it is sent."""
    messages = request["messages"]
    if FOLLOW_UP in last_user_text(request) and messages[-1].get("role") == "user":
        return FakeOpenAI.text(SECOND)
    if any(m.get("role") == "tool" and "msg_" in str(m.get("content")) for m in messages):
        return FakeOpenAI.text("done")
    return FakeOpenAI.tool_call("channel_reply", {"text": f"{ANSWER}: the thread says what you hoped."})


def _family_ports(server: ServerProcess, url: str) -> list[int]:
    """The local ports of every connection the server's processes hold to the database at ``url``."""
    port = urlsplit(url).port or 5432
    parent = psutil.Process(server.pid)
    return [
        c.laddr.port
        for process in (parent, *parent.children(recursive=True))
        for c in process.net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port
    ]


async def _end_sessions(base: str, ports: list[int]) -> int:
    conn = await asyncpg.connect(base)
    try:
        ended: int = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND client_port = ANY($1::int[])",
            ports,
        )
        return ended
    finally:
        await conn.close()


@pytest.mark.parametrize(("point", "stream"), ROWS, ids=[f"{p}-stream-{s}" for p, s in ROWS])
async def test_a_failover_at_any_point_answers_exactly_once(tmp_path: Path, point: str, stream: str) -> None:
    """Every session ended at the point: the answer is in the thread once, a follow-up is answered."""
    go = tmp_path / "go"
    async with fresh_schema("tb_failover_matrix") as pg:
        async with (
            FakeSlack() as slack,
            FakeOpenAI(_script) as llm,
            aiohttp.ClientSession() as http,
            contextlib.AsyncExitStack() as stack,
        ):
            slack.add_channel("C1", "general")
            slack.add_user("U1", "alice", display_name="Alice")
            env = server_env(
                slack,
                llm,
                DATABASE_URL=pg.url,
                DATA_DIR=str(tmp_path / "data"),
                THREADBOUND_FAILOVER_AT=point,
                THREADBOUND_FAILOVER_GO=str(go),
                STREAM=stream,
            )
            server = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server.log")
            stack.push_async_callback(server.stop)
            await server.start()
            root = slack.add_message("C1", f"<@UBOT> {ASK}", user="U1")
            mention = events.app_mention("C1", "U1", f"<@UBOT> {ASK}", root)
            delivery = asyncio.create_task(
                events.deliver(http, f"{server.url}/slack/events", mention, SIGNING_SECRET)
            )
            await eventually(lambda: FAILOVER in server.tail(400), within=WITHIN_S)
            ports = _family_ports(server, pg.base)
            assert ports, "the server holds no database session"
            assert await _end_sessions(pg.base, ports) == len(ports)
            go.touch()
            response = await delivery
            if response.status != 200:  # the claim failed: Slack delivers the event again
                retry = await events.deliver(
                    http, f"{server.url}/slack/events", mention, SIGNING_SECRET, retry_num=1
                )
                assert retry.status == 200, server.tail()

            def texts() -> list[str]:  # what a reader sees: a message's markdown block, else its text
                return [
                    "".join(b["text"] for b in m.get("blocks", []) if b.get("type") == "markdown")
                    or m.get("text", "")
                    for m in slack.bot_messages("C1")
                ]

            await eventually(lambda: any(ANSWER in t for t in texts()), within=WITHIN_S)
            follow = slack.add_message("C1", FOLLOW_UP, user="U1", thread_ts=root)
            envelope = events.message("C1", "U1", FOLLOW_UP, follow, thread_ts=root)
            assert (
                await events.deliver(http, f"{server.url}/slack/events", envelope, SIGNING_SECRET)
            ).status == 200
            await eventually(lambda: any(SECOND in t for t in texts()), within=WITHIN_S)
            assert sum(ANSWER in t for t in texts()) == 1, texts()
            assert sum(SECOND in t for t in texts()) == 1, texts()
