"""Failover on Postgres: every database session ends at once (a restart, a failover, a terminated
backend) while two instances are mid-run; both recover without running a conversation twice. And an
instance SIGKILLed mid-run: the survivor takes its conversation over without waiting out the grace."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import psutil
import pytest

from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from tests.support.harness import SIGNING_SECRET
from tests.support.postgres import fresh_schema
from tests.support.process import ServerProcess, server_env
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

pytestmark = pytest.mark.process

WITHIN_S = 30.0


def _client_ports(servers: list[ServerProcess], url: str) -> list[int]:
    """The local ports of every connection the servers' processes hold to the database at ``url``."""
    port = urlsplit(url).port or 5432
    return [
        c.laddr.port
        for server in servers
        for c in psutil.Process(server.pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port
    ]


class _Held:
    """A model whose first request of each conversation waits until released; then it replies once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.first: list[str] = []

    async def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or [{}]
        if messages[-1].get("role") == "tool":
            return FakeOpenAI.text("")
        asked = last_user_text(request)
        if not any(m.get("role") == "assistant" for m in messages):
            self.first.append(asked)
            if "hold" in asked:
                await self.release.wait()
        return FakeOpenAI.tool_call("channel_reply", {"text": f"answer to: {asked.split(': ')[-1]}"})


async def test_both_instances_recover_when_every_backend_is_terminated_mid_run(tmp_path: Path) -> None:
    """Two instances each mid-run when every Postgres backend is terminated: each conversation is
    answered once by a single run (none is judged dead and run again), and both instances answer new
    conversations afterwards."""
    model = _Held()
    async with fresh_schema("tb_failover") as pg:
        base, url = pg.base, pg.url
        async with FakeSlack() as slack, FakeOpenAI(model) as llm, aiohttp.ClientSession() as http:
            slack.add_channel("C1", "general")
            slack.add_user("U1", "alice", display_name="Alice")
            env = server_env(slack, llm, DATABASE_URL=url)
            servers = [
                ServerProcess(
                    {**env, "DATA_DIR": str(tmp_path / name)}, cwd=tmp_path, log_path=tmp_path / f"{name}.log"
                )
                for name in ("a", "b")
            ]
            for server in servers:
                await server.start()

            async def ask(server: ServerProcess, text: str) -> str:
                root = slack.add_message("C1", f"<@UBOT> {text}", user="U1")
                envelope = events.app_mention("C1", "U1", f"<@UBOT> {text}", root)
                response = await events.deliver(http, f"{server.url}/slack/events", envelope, SIGNING_SECRET)
                assert response.status == 200
                return root

            def answers(root: str) -> list[str]:
                return [m["text"] for m in slack.bot_messages("C1") if m.get("thread_ts") == root]

            try:
                roots = [await ask(servers[0], "hold one"), await ask(servers[1], "hold two")]
                await eventually(lambda: len(model.first) == 2, within=WITHIN_S)
                # Every session of the two instances (as a restart would end them), and only theirs:
                # other tests on this database may be running at the same time (pytest-xdist).
                ports = _client_ports(servers, base)
                assert len(ports) >= 4, ports  # each instance: its liveness session and pooled ones
                conn = await asyncpg.connect(base)
                try:
                    ended = await conn.fetchval(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND client_port = ANY($1::int[])",
                        ports,
                    )
                finally:
                    await conn.close()
                assert ended == len(ports)
                # Past the liveness grace: every instance has re-registered and looked at the others.
                await asyncio.sleep(14)
                model.release.set()
                for root in roots:
                    await eventually(lambda root=root: bool(answers(root)), within=WITHIN_S)
                later = [await ask(servers[0], "new three"), await ask(servers[1], "new four")]
                for root in later:
                    await eventually(lambda root=root: bool(answers(root)), within=WITHIN_S)
            finally:
                model.release.set()
                for server in servers:
                    await server.stop()
            for root in [*roots, *later]:
                assert len(answers(root)) == 1, answers(root)
            assert len(model.first) == 4, model.first  # no conversation was run a second time


class _StuckOnce:
    """The first request of the conversation never returns (its instance is killed meanwhile);
    every later one replies once."""

    def __init__(self) -> None:
        self.first = asyncio.Event()
        self.release = asyncio.Event()
        self.asked = 0

    async def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or [{}]
        if messages[-1].get("role") == "tool":
            return FakeOpenAI.text("")
        self.asked += 1
        if not self.first.is_set():
            self.first.set()
            await self.release.wait()
            return FakeOpenAI.text("")
        return FakeOpenAI.tool_call("channel_reply", {"text": f"answer to: {last_user_text(request)}"})


async def test_a_killed_instances_conversation_is_taken_over_without_waiting_out_the_grace(
    tmp_path: Path,
) -> None:
    """Two instances; the one running a conversation is SIGKILLed mid-run. The survivor, which saw
    it alive under its own unbroken liveness lock, judges it dead as soon as its lock is gone (the
    log names that rule, not the grace), and the conversation is answered once."""
    model = _StuckOnce()
    async with fresh_schema("tb_takeover") as pg:
        url = pg.url
        async with FakeSlack() as slack, FakeOpenAI(model) as llm, aiohttp.ClientSession() as http:
            slack.add_channel("C1", "general")
            slack.add_user("U1", "alice", display_name="Alice")
            env = server_env(slack, llm, DATABASE_URL=url)
            doomed, survivor = (
                ServerProcess(
                    {**env, "DATA_DIR": str(tmp_path / name)}, cwd=tmp_path, log_path=tmp_path / f"{name}.log"
                )
                for name in ("doomed", "survivor")
            )
            await doomed.start()
            await survivor.start()
            try:
                root = slack.add_message("C1", "<@UBOT> anyone there", user="U1")
                envelope = events.app_mention("C1", "U1", "<@UBOT> anyone there", root)
                response = await events.deliver(http, f"{doomed.url}/slack/events", envelope, SIGNING_SECRET)
                assert response.status == 200
                await asyncio.wait_for(model.first.wait(), WITHIN_S)
                doomed.kill()
                await doomed.wait()

                def answers() -> list[str]:
                    return [m["text"] for m in slack.bot_messages("C1") if m.get("thread_ts") == root]

                await eventually(lambda: bool(answers()), within=WITHIN_S)
            finally:
                model.release.set()
                await survivor.stop()
            assert len(answers()) == 1 and "anyone there" in answers()[0], answers()
            log = (tmp_path / "survivor.log").read_text()
            assert "is gone (its liveness lock ended while ours held); taking over its 1 conversations" in log
            assert "stayed missing" not in log
