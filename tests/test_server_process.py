"""The test support's child servers (``tests.support.process.ServerProcess``) under xdist: the port a
child is given stays its own, and a start only returns once the child itself answers on it."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support import harness, process
from tests.support.harness import _ephemeral_low, free_port
from tests.support.process import ServerProcess

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
