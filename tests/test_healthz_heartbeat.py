"""``/healthz`` reflects the loop that runs the conversations, not only the edge that answers it: the
real ``python -m app serve``, its edge in a process of its own or on a thread, its service loop
stopped or wedged, asked over HTTP."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import aiohttp
import pytest

from storage.crashpoints import FAILOVER
from tests.support import events
from tests.support.fake_model import FakeOpenAI
from tests.support.harness import SIGNING_SECRET
from tests.support.process import ServerProcess, server_env
from tests.support.waiting import polls
from threadbound_emulator import FakeSlack

pytestmark = pytest.mark.process


async def _health(http: aiohttp.ClientSession, server: ServerProcess) -> int:
    async with http.get(f"{server.url}/healthz", timeout=aiohttp.ClientTimeout(total=5)) as answer:
        await answer.read()
        return answer.status


async def _until(http: aiohttp.ClientSession, server: ServerProcess, status: int) -> None:
    seen = 0
    async for _ in polls(within=20, interval=0.1):
        seen = await _health(http, server)
        if seen == status:
            return
    raise AssertionError(f"/healthz answered {seen}, never {status}: {server.tail()}")


async def test_a_stopped_service_process_fails_healthz_answered_by_its_edge(tmp_path: Path) -> None:
    """The edge in a process of its own keeps answering while the service's process is SIGSTOPped:
    503 once the service loop has gone HEALTH_DEADLINE_S without a beat, 200 again after SIGCONT."""
    async with FakeSlack() as slack, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"), HEALTH_DEADLINE_S="1")
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "serve.log") as server:
            assert await _health(http, server) == 200
            os.kill(server.pid, signal.SIGSTOP)  # the service alone: its edge is a process of its own
            try:
                await _until(http, server, 503)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            await _until(http, server, 200)
        assert "no heartbeat of the service loop" in (tmp_path / "serve.log").read_text()


async def test_a_wedged_main_loop_fails_healthz_answered_by_the_edge_thread(tmp_path: Path) -> None:
    """EDGE_PROCESS=false: the service loop blocks inside a run (a test seam that stalls the loop at
    the model request) while the edge's thread goes on answering: /healthz says 503 after
    HEALTH_DEADLINE_S, and 200 again once the loop runs, the conversation answered."""
    go = tmp_path / "go"
    async with FakeSlack() as slack, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        env = server_env(
            slack,
            llm,
            DATA_DIR=str(tmp_path / "data"),
            EDGE_PROCESS="false",
            HEALTH_DEADLINE_S="1",
            THREADBOUND_FAILOVER_AT="model.request",
            THREADBOUND_FAILOVER_GO=str(go),
        )
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "serve.log") as server:
            assert await _health(http, server) == 200
            root = slack.add_message("C1", "<@UBOT> question", user="U1")
            mention = events.app_mention("C1", "U1", "<@UBOT> question", root)
            answer = await events.deliver(http, f"{server.url}/slack/events", mention, SIGNING_SECRET)
            assert answer.status == 200
            try:
                await _until(http, server, 503)
                assert FAILOVER in (tmp_path / "serve.log").read_text()  # wedged where the seam stalls
            finally:
                go.touch()
            await _until(http, server, 200)
            async for _ in polls(within=20):
                if any("echo: " in m.get("text", "") for m in slack.bot_messages("C1")):
                    break
            assert any("echo: " in m.get("text", "") for m in slack.bot_messages("C1"))
