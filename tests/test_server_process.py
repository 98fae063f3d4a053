"""The test support's child servers (``tests.support.process.ServerProcess``) under xdist: the port a
child is given stays its own, and a start only returns once the child itself answers on it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import aiohttp
import psutil
import pytest
from aiohttp import web

from storage.crashpoints import TRAIL
from tests.support import events, harness, process
from tests.support.fake_model import FakeOpenAI
from tests.support.harness import SIGNING_SECRET, _ephemeral_low, free_port
from tests.support.preloaded import PreloadedProcess
from tests.support.process import ServerProcess, server_env
from threadbound_emulator import FakeSlack

#: A minimal child server: answers /healthz with its pid on HOST:PORT (fails if the port is taken).
_CHILD = """
import os
from aiohttp import web

async def healthz(_):
    return web.Response(text=str(os.getpid()))

app = web.Application()
app.router.add_get("/healthz", healthz)
web.run_app(app, host=os.environ["HOST"], port=int(os.environ["PORT"]), print=None)
"""


def test_free_ports_are_below_the_ephemeral_range_and_differ() -> None:
    """Ports for servers that bind later come from below the kernel's ephemeral range, where no
    port-0 bind or outgoing connection of another test lands, and one worker's differ in turn."""
    low = _ephemeral_low()
    if low is None or low - 1024 < harness._RESERVED_PORTS:
        pytest.skip("the ephemeral range is unknown here or leaves no room below it")
    ports = [free_port() for _ in range(5)]
    assert all(low - harness._RESERVED_PORTS <= p < low for p in ports), ports
    assert len(set(ports)) == 5


@pytest.mark.process
async def test_a_start_on_a_port_someone_else_took_meanwhile_moves_to_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another server took the child's port before the child bound it (and answers /healthz with
    200): the start neither returns on the impostor's answer nor fails; the child starts again on
    another port and the server talked to is the child."""

    async def impostor(_: web.Request) -> web.Response:
        return web.Response(text="impostor")

    app = web.Application()
    app.router.add_get("/healthz", impostor)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, process.LOOPBACK, 0)
    await site.start()
    taken = int(runner.addresses[0][1])
    handed = iter([taken])
    monkeypatch.setattr(process, "free_port", lambda: next(handed, None) or free_port())
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    server = ServerProcess(
        {}, cwd=tmp_path, log_path=tmp_path / "child.log", argv=[sys.executable, str(script)]
    )
    try:
        async with server, aiohttp.ClientSession() as http:
            async with http.get(f"{server.url}/healthz") as response:
                answer = await response.text()
            assert server.port != taken
            assert answer == str(server.pid)
            assert "already in use" in (tmp_path / "child.log").read_text().lower()
    finally:
        await runner.cleanup()


@pytest.mark.process
async def test_a_preloaded_child_is_its_own_process_with_its_own_environment(tmp_path: Path) -> None:
    """Under pytest ``python -m app serve`` children are forked from a process that imported the app
    (``tests/support/preloaded.py``): each is a process of its own (not the test's child), runs with
    the environment, directory and log it was given, arms its crash point from that environment, and
    reports a SIGTERM's clean exit and a SIGKILL as a spawned child would."""
    if not ServerProcess.preloaded:
        pytest.skip("THREADBOUND_TEST_SPAWN=1: children are spawned, none is preloaded")
    async with FakeSlack() as slack, FakeOpenAI(lambda _: FakeOpenAI.text("hi")) as llm:
        env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"))
        calm = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "calm.log")
        async with calm:
            assert isinstance(calm.proc, PreloadedProcess)
            child = psutil.Process(calm.pid)
            assert child.ppid() != os.getpid()  # forked by the fork server, not started by the test
            assert child.cwd() == str(tmp_path)
            # Waiters at once (a test's and stop()'s) all hear of the exit.
            waiters = [asyncio.create_task(calm.proc.wait()) for _ in range(2)]
            await asyncio.sleep(0)
        assert await asyncio.wait_for(asyncio.gather(*waiters), 10) == [0, 0]
        assert calm.proc.returncode == 0, calm.tail()
        assert "listening on 127.0.0.1 port" in (tmp_path / "calm.log").read_text(), calm.tail()
        assert (tmp_path / "data" / "threadbound.db").exists()

        doomed = ServerProcess(
            {**env, "THREADBOUND_CRASH_AT": "store.claim.before"},
            cwd=tmp_path,
            log_path=tmp_path / "doomed.log",
        )
        async with doomed, aiohttp.ClientSession() as http:
            root = slack.add_message("C1", "<@UBOT> hello", user="U1")
            with contextlib.suppress(aiohttp.ClientError):
                await events.deliver(
                    http,
                    f"{doomed.url}/slack/events",
                    events.app_mention("C1", "U1", "<@UBOT> hello", root),
                    SIGNING_SECRET,
                )
            assert await doomed.wait(within=20) == -signal.SIGKILL
        assert f"{TRAIL} store.claim.before" in (tmp_path / "doomed.log").read_text()
