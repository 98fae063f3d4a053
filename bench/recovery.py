"""recovery_seconds and takeover_seconds: how long a conversation whose process was SIGKILLed mid-run
waits for its answer.

Setup. The real ``python -m app serve`` (child processes), FakeSlack and FakeOpenAI here. The model
never answers the first request (the process running it is killed meanwhile); every later one
answers with ``channel_reply``. ``LEASE_TTL`` is ten minutes, so no answer inside the bound can come
from a lease expiring.

- ``recovery_seconds`` (SQLite): one instance, killed mid-run, started again on the same
  ``DATA_DIR``; from the new process answering ``/healthz`` to the reply in the thread (the process's
  own start-up, mostly imports, is in the note).
- ``takeover_seconds`` (Postgres, ``BENCH_DATABASE_URL`` or ``TEST_DATABASE_URL``; skipped without):
  two instances on one database, the one running the conversation killed mid-run; from the SIGKILL
  to the survivor's reply.

Measurement. ``ROUNDS`` rounds each (one with ``--tiny``); the row is the median, the spread in the note.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from threadbound_emulator import Call, FakeSlack

from . import Row, Scale
from .common import SIGNING_SECRET, ServerProcess, median, our_server

ROWS = ("recovery_seconds", "takeover_seconds")
ROUNDS = 3
#: Rounds of a ``--tiny`` run (a smoke test).
TINY_ROUNDS = 1
TARGET_S = 5.0
#: How long one round may wait for the reply.
WAIT_S = 60.0
CAP = {"tiny": 300.0, "quick": 400.0, "full": 600.0}


class _StuckFirst:
    """The first request of each round never returns; every later one replies once."""

    def __init__(self) -> None:
        self.first_request = asyncio.Event()
        self.release = asyncio.Event()

    def arm(self) -> None:
        self.first_request = asyncio.Event()
        self.release.set()  # the previous round's stuck request (its process is dead) ends
        self.release = asyncio.Event()

    async def __call__(self, request: dict[str, Any]) -> Reply:
        if not self.first_request.is_set():
            self.first_request.set()
            await self.release.wait()
            return FakeOpenAI.text("")
        messages = request.get("messages") or [{}]
        if messages[-1].get("role") == "tool":
            return FakeOpenAI.text("")
        return FakeOpenAI.tool_call("channel_reply", {"text": f"echo: {last_user_text(request)}"})


class _Replies:
    """When each thread got its first bot post (this process's ``perf_counter``)."""

    def __init__(self, slack: FakeSlack) -> None:
        self.at: dict[str, asyncio.Future[float]] = {}
        slack.observe(self._arrived)

    def expect(self, thread_ts: str) -> asyncio.Future[float]:
        self.at[thread_ts] = asyncio.get_running_loop().create_future()
        return self.at[thread_ts]

    def _arrived(self, call: Call) -> None:
        future = self.at.get(str(call.params.get("thread_ts")))
        if call.method == "chat.postMessage" and future is not None and not future.done():
            future.set_result(time.perf_counter())


def _server(slack: FakeSlack, llm: FakeOpenAI, data: Path, log: Path, **env: str) -> ServerProcess:
    return our_server(slack, llm.base_url, data, log, LEASE_TTL="600", PROGRESS="off", **env)


async def _mention(http: aiohttp.ClientSession, slack: FakeSlack, server: ServerProcess, text: str) -> str:
    ts = slack.add_message("C1", text, user="U1")
    envelope = events.app_mention("C1", "U1", text, ts)
    response = await events.deliver(http, f"{server.url}/slack/events", envelope, SIGNING_SECRET)
    if response.status != 200:
        raise RuntimeError(f"delivery answered {response.status}")
    return ts


async def _recovery(root: Path, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds from the restarted process being ready to the reply; and its start-up times."""
    model = _StuckFirst()
    took: list[float] = []
    startups: list[float] = []
    async with FakeSlack() as slack, FakeOpenAI(model) as llm, aiohttp.ClientSession() as http:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice")
        replies = _Replies(slack)
        for n in range(rounds):
            model.arm()
            data = root / f"sqlite-{n}"
            first = _server(slack, llm, data, root / "recovery.log")
            await first.start()
            ts = await _mention(http, slack, first, f"<@UBOT> are you there {n}")
            answered = replies.expect(ts)
            await asyncio.wait_for(model.first_request.wait(), WAIT_S)
            first.kill()
            await first.wait()
            second = _server(slack, llm, data, root / "recovery.log")
            killed = time.perf_counter()
            async with second:
                ready = time.perf_counter()
                done = await asyncio.wait_for(answered, WAIT_S)
            took.append(done - ready)
            startups.append(ready - killed)
    return took, startups


async def _takeover(root: Path, base: str, rounds: int) -> list[float]:
    """Seconds from the SIGKILL of the instance running the conversation to the survivor's reply."""
    import asyncpg

    model = _StuckFirst()
    took: list[float] = []
    schemas: list[str] = []
    try:
        async with FakeSlack() as slack, FakeOpenAI(model) as llm, aiohttp.ClientSession() as http:
            slack.add_channel("C1", "general")
            slack.add_user("U1", "alice")
            replies = _Replies(slack)
            for n in range(rounds):
                model.arm()
                schemas.append(f"tb_bench_{uuid.uuid4().hex[:12]}")
                url = f"{base}{'&' if '?' in base else '?'}schema={schemas[-1]}"
                doomed, survivor = (
                    _server(slack, llm, root / f"pg-{n}-{name}", root / "takeover.log", DATABASE_URL=url)
                    for name in ("a", "b")
                )
                await doomed.start()
                async with survivor:
                    ts = await _mention(http, slack, doomed, f"<@UBOT> anyone there {n}")
                    answered = replies.expect(ts)
                    await asyncio.wait_for(model.first_request.wait(), WAIT_S)
                    doomed.kill()
                    killed = time.perf_counter()
                    await doomed.wait()
                    try:
                        took.append(await asyncio.wait_for(answered, WAIT_S) - killed)
                    except TimeoutError:
                        took.append(float("inf"))  # unanswered within WAIT_S: shown, never met
    finally:
        if schemas:
            conn = await asyncpg.connect(base)
            try:
                for schema in schemas:
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            finally:
                await conn.close()
    return took


def _spread(values: list[float]) -> str:
    unanswered = sum(1 for v in values if v == float("inf"))
    answered = [v for v in values if v != float("inf")] or [float("nan")]
    text = f"{min(answered):.1f}–{max(answered):.1f} s over {len(values)} rounds"
    return text + (f", {unanswered} unanswered within {WAIT_S:.0f} s" if unanswered else "")


async def run(scale: Scale) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        root = Path(tmp)
        rounds = TINY_ROUNDS if scale.mode == "tiny" else ROUNDS
        took, startups = await _recovery(root, rounds)
        rows = [
            Row(
                "recovery_seconds",
                round(median(took), 2),
                None,
                "s from restart to reply",
                f"<= {TARGET_S:.0f} s",
                note=f"SQLite, SIGKILL mid-run; {_spread(took)}; the restarted process took "
                f"{median(startups):.1f} s (median) to start before that",
            )
        ]
        base = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL") or ""
        if not base:
            rows.append(
                Row(
                    "takeover_seconds",
                    None,
                    None,
                    "s from SIGKILL to reply",
                    f"<= {TARGET_S:.0f} s",
                    skipped=True,
                    note="skipped: set BENCH_DATABASE_URL or TEST_DATABASE_URL to a Postgres database",
                )
            )
            return rows
        took = await _takeover(root, base, rounds)
        middle = median(took)
        rows.append(
            Row(
                "takeover_seconds",
                round(middle, 2) if middle != float("inf") else None,
                None,
                "s from SIGKILL to reply",
                f"<= {TARGET_S:.0f} s",
                note=f"Postgres, two instances, the one running the conversation SIGKILLed mid-run; "
                f"{_spread(took)}",
            )
        )
    return rows
