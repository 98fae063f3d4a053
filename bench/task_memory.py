"""task_memory: RSS growth per conversation with 1,000 conversations waiting on a slow model.

Setup. The app runs in this process (``AppHarness``: the real ``Service`` over real HTTP, SQLite
store, model built from ``MODEL=openai-chat:fake`` as in production), so its RSS is this process's.
The slow model is FakeOpenAI with an hour's delay in a helper child process (``bench.fakes``): each
waiting run holds what it holds in production — its agent graph, its prompt, an HTTP request in
flight on the OpenAI client's pool — while the parked server side is not counted. FakeSlack runs
here (its per-conversation state, one stored message and a status, is small and counted against us).

Measurement. Warm-up conversations first (imports, caches, connections), also left waiting; then
RSS (after ``gc.collect()``); then N more mentions, each a new conversation, until every run is
active and the model has received their requests (past the ``openai`` client's 1,000-connection
pool, the rest wait in the pool, unsent); ``gc.collect()``; RSS again. The row is the growth / N.
Shutdown cancels the waiting runs (``SHUTDOWN_GRACE`` is short); their inboxes stay pending.

Shown beside it (the target bounds ours alone): the same measurement of the Bolt + pydantic-ai peer
(``bench.bolt_baseline turn``, a child process, collected through its ``GET /gc``), whose every
mention likewise waits on the slow model with its request in flight: what the libraries themselves
hold per waiting conversation, with nothing durable, no streaming and one tool.
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import events
from tests.support.harness import SIGNING_SECRET, AppHarness
from threadbound_emulator import FakeSlack

from . import Row, Scale
from .common import SIGNING_SECRET as BENCH_SECRET
from .common import bench_workspace, bolt_server, rss
from .fakes import helper

ROWS = ("task_memory",)
WARM = 10
CHANNELS = 20
KIB = 1024
#: The ``openai`` client's default connection limit: requests past it wait in its pool, unsent.
OPENAI_POOL = 1000
#: Seconds all runs may take to reach the model (starting 1,000 runs on 2 cores takes ~30 s).
WAIT_CAP = 120.0
#: Wall-clock caps of this module's child (``python -m bench``): starting the app in-process is slow.
CAP = {"tiny": 200.0, "quick": 300.0}


async def run(scale: Scale) -> list[Row]:
    n = scale.conversations
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        async with helper({"model_delay": 3600}) as fakes, FakeSlack() as slack:
            bench_workspace(slack, CHANNELS)
            envelopes = []
            for i in range(WARM + n):
                channel = f"C{i % CHANNELS:04d}"
                text = f"<@UBOT> please wait {i}"
                envelopes.append(
                    events.app_mention(channel, "U1", text, slack.add_message(channel, text, "U1"))
                )
            app = AppHarness(
                slack,
                model=None,
                model_name="openai-chat:fake",
                openai_base_url=fakes["model_base_url"],
                openai_api_key="bench",
                data_dir=Path(tmp),
                shutdown_grace=0.5,
                run_timeout=3600.0,
                # Every conversation really waits on the model (the default cap would queue most of
                # them in the inbox, which costs far less and would flatter the number).
                max_concurrent_runs=WARM + n,
                # One person (U1) sends every mention: USER_MAX_RUNS would queue all but four.
                user_max_runs=WARM + n,
            )
            async with app, aiohttp.ClientSession() as http:
                await _deliver(app, envelopes[:WARM])
                await _wait_for_requests(app, http, fakes["model_count_url"], WARM, WAIT_CAP)
                gc.collect()
                before = rss()
                await _deliver(app, envelopes[WARM:])
                waiting = await _wait_for_requests(app, http, fakes["model_count_url"], WARM + n, WAIT_CAP)
                gc.collect()
                after = rss()
            peer = await _peer(slack, fakes, envelopes, Path(tmp), n)
    per = (after - before) / n / KIB
    note = f"{n} conversations; RSS {before / 2**20:.0f} → {after / 2**20:.0f} MiB"
    if waiting < WARM + n:
        note += f"; only {waiting - WARM} of {n} were waiting when the time cap ({WAIT_CAP:.0f} s) passed"
    note += f"; baseline: the Bolt + pydantic-ai peer, {peer[1]}"
    return [
        Row(
            "task_memory",
            round(per, 1),
            round(peer[0], 1) if peer[0] is not None else None,
            "KiB/conversation",
            "<= 100 KiB",
            absolute=True,
            also={"every conversation waiting": waiting >= WARM + n},
            note=note,
        )
    ]


async def _peer(
    slack: FakeSlack, fakes: dict[str, Any], envelopes: list[dict[str, object]], tmp: Path, n: int
) -> tuple[float | None, str]:
    """The peer's RSS growth per waiting conversation (KiB), measured like ours, and a note."""
    server = bolt_server(slack, "turn", tmp / "bolt.log", tmp, model_base_url=fakes["model_base_url"])
    async with server, aiohttp.ClientSession() as http:
        url = f"{server.url}/slack/events"
        gate = asyncio.Semaphore(50)

        async def deliver(envelope: dict[str, object]) -> None:
            async with gate:
                response = await events.deliver(http, url, envelope, BENCH_SECRET)
                if response.status != 200:
                    raise RuntimeError(f"the peer answered {response.status}")

        async def arrived() -> int:
            async with http.get(fakes["model_count_url"]) as response:
                return int((await response.json())["count"])

        async def settled(expected: int) -> int:
            deadline = time.monotonic() + WAIT_CAP
            while True:
                count = await arrived() - offset
                if count >= expected or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            async with http.get(f"{server.url}/gc") as response:
                await response.read()
            return count

        offset = await arrived()  # our side's requests, still parked at the model
        await asyncio.gather(*(deliver(e) for e in envelopes[:WARM]))
        await settled(WARM)
        before = rss(server.pid)
        await asyncio.gather(*(deliver(e) for e in envelopes[WARM:]))
        waiting = await settled(min(WARM + n, OPENAI_POOL)) - WARM
        after = rss(server.pid)
    note = f"{waiting} of {n} at the model, RSS {before / 2**20:.0f} → {after / 2**20:.0f} MiB"
    return ((after - before) / n / KIB if waiting > 0 else None), note


async def _deliver(app: AppHarness, envelopes: list[dict[str, object]], in_flight: int = 50) -> None:
    gate = asyncio.Semaphore(in_flight)

    async def one(envelope: dict[str, object]) -> None:
        async with gate:
            response = await app.deliver(envelope)
            if response.status != 200:
                raise RuntimeError(f"delivery answered {response.status}")

    await asyncio.gather(*(one(e) for e in envelopes))


async def _wait_for_requests(
    app: AppHarness, http: aiohttp.ClientSession, url: str, expected: int, cap: float
) -> int:
    """Runs waiting on the model, once ``expected`` runs are active and the model received all their
    requests — or as many as the OpenAI client's pool lets out; the rest wait in the pool (or the
    cap passed)."""
    assert app.service is not None
    runner = app.service.runner
    deadline = time.monotonic() + cap
    while True:
        async with http.get(url) as response:
            arrived = int((await response.json())["count"])
        active = len(runner.executor.active_runs)
        if (active >= expected and arrived >= min(expected, OPENAI_POOL)) or time.monotonic() > deadline:
            return min(active, expected)
        await asyncio.sleep(0.1)


__all__ = ["ROWS", "SIGNING_SECRET", "run"]
