"""takeover_seconds: how long a conversation whose instance was SIGKILLed mid-run waits for another
instance's answer, on Postgres.

Setup. Two ``python -m app serve`` child processes on one Postgres database (``BENCH_DATABASE_URL``
or ``TEST_DATABASE_URL``; the row is skipped without), FakeSlack and FakeOpenAI here. The model
never answers the first request of a round (the process running it is killed meanwhile); every
later one answers with ``channel_reply``. ``LEASE_TTL`` is ten minutes, so no answer inside the
bound can come from a lease expiring.

Measurement. From the SIGKILL of the instance running the conversation to the survivor's reply in
the thread. The survivor starts after the doomed instance, so its first look sees it alive under its
own liveness lock, as in any deployment whose instances have been up for more than a second
(``app.runs.takeover``; a survivor that had not would wait out the 12 s grace). ``ROUNDS`` rounds
(one with ``--tiny``), the row is the median, the spread in the note.
(``recovery_seconds``, a restart on SQLite, is ``bench.recovery``.)
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

from tests.support import events
from tests.support.fake_model import FakeOpenAI, StuckFirst
from threadbound_emulator import Call, FakeSlack

from . import Row, Scale
from .common import SIGNING_SECRET, ServerProcess, median, our_server

ROWS = ("takeover_seconds",)
ROUNDS = 3
#: Rounds of a ``--tiny`` run (a smoke test).
TINY_ROUNDS = 1
TARGET_S = 5.0
#: How long one round may wait for the reply.
WAIT_S = 60.0
CAP = {"tiny": 200.0, "quick": 300.0, "full": 400.0}


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


async def _takeover(root: Path, base: str, rounds: int) -> list[float]:
    """Seconds from the SIGKILL of the instance running the conversation to the survivor's reply."""
    import asyncpg

    model = StuckFirst()
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
    base = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL") or ""
    if not base:
        return [
            Row(
                "takeover_seconds",
                None,
                None,
                "s from SIGKILL to reply",
                f"<= {TARGET_S:.0f} s",
                skipped=True,
                note="skipped: set BENCH_DATABASE_URL or TEST_DATABASE_URL to a Postgres database",
            )
        ]
    rounds = TINY_ROUNDS if scale.mode == "tiny" else ROUNDS
    with tempfile.TemporaryDirectory(prefix="bench-takeover-") as tmp:
        took = await _takeover(Path(tmp), base, rounds)
    middle = median(took)
    return [
        Row(
            "takeover_seconds",
            round(middle, 2) if middle != float("inf") else None,
            None,
            "s from SIGKILL to reply",
            f"<= {TARGET_S:.0f} s",
            note=f"Postgres, two instances, the one running the conversation SIGKILLed mid-run; "
            f"{_spread(took)}",
        )
    ]
