"""FakeSlack / FakeOpenAI in a helper child process, for benchmarks whose own process must not
serve them (a file host sharing the downloader's event loop would halve both; a slow model's
1,000 parked requests would count in the measured process's RSS).

``python -m bench.fakes SPEC_JSON`` starts what SPEC asks for, prints one JSON line with the
URLs, then serves until SIGTERM. SPEC: ``{"files": [[id, name, mimetype, size], ...],
"model_delay": seconds | null, "channels": N}``; with a model, ``model_count_url`` answers how many
completion requests arrived; with ``channels``, the workspace of ``bench_workspace`` is set up and
``seed_url`` takes ``POST {"messages": [[channel, text], ...]}`` and answers the stored messages'
``{"ts": [...]}`` (the load generator's mentions must exist in Slack: the runs read their threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from tests.support.fake_model import FakeOpenAI
from threadbound_emulator import FakeSlack

from .common import LOOPBACK, REPO, bench_workspace


async def serve(spec: dict[str, Any]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        slack = await stack.enter_async_context(FakeSlack())
        for file_id, name, mimetype, size in spec.get("files", []):
            slack.add_file(file_id, name, mimetype, content=None, size=int(size))
        info: dict[str, Any] = {
            "api_url": slack.api_url,
            "files_origin": slack.files_origin,
            "token": slack.token,
        }
        if spec.get("model_delay") is not None:
            llm = await stack.enter_async_context(FakeOpenAI(delay=float(spec["model_delay"])))
            info["model_base_url"] = llm.base_url
            info["model_count_url"] = await _count_endpoint(stack, llm)
        if spec.get("channels"):
            bench_workspace(slack, int(spec["channels"]))
            info["seed_url"] = await _seed_endpoint(stack, slack)
        print(json.dumps(info), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()


async def _count_endpoint(stack: contextlib.AsyncExitStack, llm: FakeOpenAI) -> str:
    """``GET /count``: how many completion requests arrived (they are counted before the delay)."""

    async def count(_: web.Request) -> web.Response:
        return web.json_response({"count": llm.count})

    app = web.Application()
    app.router.add_get("/count", count)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, LOOPBACK, 0).start()
    return f"http://{LOOPBACK}:{runner.addresses[0][1]}/count"


async def _seed_endpoint(stack: contextlib.AsyncExitStack, slack: FakeSlack) -> str:
    """``POST /seed``: store people's messages, answer their ts (see the module docstring)."""

    async def seed(request: web.Request) -> web.Response:
        body = await request.json()
        stamps = [slack.add_message(str(c), str(t), user="U1") for c, t in body["messages"]]
        return web.json_response({"ts": stamps})

    app = web.Application(client_max_size=2**24)
    app.router.add_post("/seed", seed)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, LOOPBACK, 0).start()
    return f"http://{LOOPBACK}:{runner.addresses[0][1]}/seed"


@contextlib.asynccontextmanager
async def helper(spec: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """Start the helper, yield its URLs, stop it with SIGTERM on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.fakes",
        json.dumps(spec),
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            raise RuntimeError("bench.fakes exited before serving")
        info: dict[str, Any] = json.loads(line)
        assert all(LOOPBACK in str(v) for k, v in info.items() if k.endswith(("url", "origin")))
        yield info
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


if __name__ == "__main__":
    asyncio.run(serve(json.loads(sys.argv[1])))
