"""task_memory and run_memory: what a conversation costs in memory, at rest and while its run waits.

``task_memory`` — RSS growth per **resting** conversation at 1,000 conversations (the
"memory per conversation"). The app runs in this process (``AppHarness``: the real ``Service`` over
real HTTP, SQLite store, model built from ``MODEL=openai-chat:fake`` as in production, default
``MAX_CONCURRENT_RUNS``). FakeSlack and a fast FakeOpenAI run in a helper child (``bench.fakes``),
so what Slack keeps (the messages, and the fake's log of every call) is not counted: a real Slack
keeps it on Slack's side. Each conversation has had a real turn: its mention delivered (50 in
flight), the model's ``channel_reply`` posted in its thread, the final answer, the run ended and its
lease released. Warm-up conversations first (imports, caches, connections); ``runner.idle()``;
``gc.collect()``; RSS; then N more conversations; idle again (no driver, no active run);
``gc.collect()``; RSS. The row is the growth / N; afterwards every thread is checked for the bot's
reply (``conversations.replies``), which the row's ``also`` requires.

What a resting conversation holds: nothing of its own. ``python -m bench.task_memory resting quick
--trace 20 --conversations 500`` (tracemalloc from the warm-up's end to the last RSS, grouped by
traceback) counts 2.3 KiB of Python objects per resting conversation, net, and none of it is a
structure keyed by task, channel or thread: ~0.8 KiB is capacity that asyncio's weak sets (tasks,
async generators) and the scheduler's ``_drivers`` and ``_wakeups`` dicts keep after their peak
(sets and dicts do not shrink; 0 blocks per conversation, bounded by the runs at once); 0.26 KiB is
pydantic_core's string cache for JSON parsing (global, fixed size; the streamed reply's arguments);
~0.16 KiB aiohttp's parser buffers of open connections; 61 B the Prometheus counters' values. The
rest of the RSS growth (14.5 KiB per conversation at 1,000 in a plain run) is the allocator's
(arenas the runs' transient objects left partly used) and SQLite's page cache filling as the database
grows (2 MiB per connection at most, SQLite's default). The transcript, inbox, handles and
checkpoints are in the store; a driver exists only while a conversation has work; the user, channel
and delivery caches are bounded LRUs.

``run_memory`` — RSS growth per run **waiting on the model** (``STREAM=off``, like the peer),
with 1,000 runs in flight on a model that takes an hour (``MAX_CONCURRENT_RUNS`` and
``USER_MAX_RUNS`` raised past 1,000; in production
``MAX_CONCURRENT_RUNS``, default 64, bounds them, so memory is runs in flight × this row +
conversations × ``task_memory``). Same in-process app; FakeSlack runs here (its per-conversation
state, one stored message and a status, is small and counted against us), the slow FakeOpenAI in the
helper child (its 1,000 parked requests are not counted). Each waiting run holds what it holds in
production — its agent graph, its prompt, an HTTP request in flight on the OpenAI client's pool.
Warm-up runs first, also left waiting; RSS after ``gc.collect()``; N more mentions, until every run
is active and the model has received their requests (past the ``openai`` client's 1,000-connection
pool the rest wait in the pool, unsent); ``gc.collect()``; RSS again. Shutdown cancels the waiting
runs (``SHUTDOWN_GRACE`` is short). Its baseline is the Bolt + pydantic-ai peer measured the same
way (``bench.bolt_baseline turn``, a child process, collected through its ``GET /gc``), each of
whose mentions likewise waits on the slow model with its request in flight: what the libraries
themselves hold per waiting run, with nothing durable, no streaming and one tool.

Each measurement runs in a fresh interpreter of its own (``python -m bench.task_memory resting|
waiting MODE``), so memory the first one freed cannot flatter the second's growth.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import aiohttp

from tests.support import events
from tests.support.harness import SIGNING_SECRET, AppHarness
from threadbound_emulator import FakeSlack

from . import SCALES, Mode, Row, Scale
from .common import REPO, HelperSlack, bench_workspace, bolt_server, rss, rss_growth
from .common import SIGNING_SECRET as BENCH_SECRET
from .fakes import helper

ROWS = ("task_memory", "run_memory")
WARM = 10
CHANNELS = 20
KIB = 1024
#: Deliveries in flight at once (each answered 200 before the next of its slot is sent).
IN_FLIGHT = 50
#: The ``openai`` client's default connection limit: requests past it wait in its pool, unsent.
OPENAI_POOL = 1000
#: Seconds all runs may take to reach the model (starting 1,000 runs on 2 cores takes ~30 s), or
#: all resting conversations to be answered.
WAIT_CAP = 180.0
#: Wall-clock caps of this module's child (``python -m bench``): two app start-ups, 2,000 runs.
CAP = {"tiny": 240.0, "quick": 600.0, "full": 900.0}


async def run(scale: Scale) -> list[Row]:
    resting = await _child("resting", scale.mode)
    waiting = await _child("waiting", scale.mode)
    n = scale.conversations
    rest_note = (
        f"{n} resting conversations, each after one turn (mention, reply posted, run ended); "
        f"RSS {resting['before'] / 2**20:.0f} → {resting['after'] / 2**20:.0f} MiB; "
        f"{resting['answered']} of {n} threads answered; FakeSlack in a helper process (not counted)"
    )
    mib = (waiting["before"] / 2**20, waiting["after"] / 2**20)
    run_note = f"{n} runs waiting on the model; RSS {mib[0]:.0f} → {mib[1]:.0f} MiB"
    if waiting["waiting"] < n:
        run_note += (
            f"; only {waiting['waiting']} of {n} were waiting when the time cap ({WAIT_CAP:.0f} s) passed"
        )
    run_note += f"; baseline: the Bolt + pydantic-ai peer, {waiting['peer_note']}"
    peer = waiting["peer"]
    return [
        Row(
            "task_memory",
            round(resting["per"], 1),
            None,
            "KiB/resting conversation",
            "<= 100 KiB",
            absolute=True,
            also={"every conversation answered": resting["answered"] >= n},
            note=rest_note,
        ),
        Row(
            "run_memory",
            round(waiting["per"], 1),
            round(peer, 1) if peer is not None else None,
            "KiB/run waiting on the model",
            "<= 1.2 (vs Bolt + pydantic-ai)",
            also={"every run waiting": waiting["waiting"] >= n},
            note=run_note,
        ),
    ]


async def _child(kind: str, mode: Mode) -> dict[str, Any]:
    """One measurement in a fresh interpreter: its JSON result."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.task_memory",
        kind,
        mode,
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench.task_memory {kind} exited with {proc.returncode}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


# -- resting conversations (task_memory) ------------------------------------------------------------


async def resting(scale: Scale, trace: int = 0) -> dict[str, Any]:
    """RSS growth per resting conversation; with ``trace`` the biggest tracemalloc groups (by
    traceback, ``trace`` frames) of what the N conversations left behind, printed to stderr."""
    n = scale.conversations
    cap = WAIT_CAP * (10 if trace else 1)  # tracemalloc makes every allocation several times slower
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        async with helper({"model_delay": 0, "channels": CHANNELS}) as fakes:
            wanted = [(f"C{i % CHANNELS:04d}", f"<@UBOT> please answer {i}") for i in range(WARM + n)]
            async with (
                aiohttp.ClientSession() as http,
                http.post(fakes["seed_url"], json={"messages": wanted}) as r,
            ):
                stamps = (await r.json())["ts"]
            envelopes = [
                events.app_mention(c, "U1", t, ts) for (c, t), ts in zip(wanted, stamps, strict=True)
            ]
            slack = HelperSlack.of(fakes)
            app = _app(
                cast(FakeSlack, slack),  # AppHarness reads only token, api_url and files_origin
                fakes,
                Path(tmp),
                # One person (U1) sends every mention: USER_MAX_RUNS (4) would run them 4 at a time.
                user_max_runs=64,
            )
            async with app:
                await _deliver(app, envelopes[:WARM])
                await _settle(app, cap)

                async def rest() -> None:
                    await _deliver(app, envelopes[WARM:])
                    await _settle(app, cap)

                before, after, _ = await rss_growth(rest, trace, n)
                answered = await _answered(
                    slack, [(c, ts) for (c, _), ts in zip(wanted, stamps, strict=True)][WARM:]
                )
    return {"per": (after - before) / n / KIB, "before": before, "after": after, "answered": answered}


async def _settle(app: AppHarness, cap: float) -> None:
    """Until no driver runs and no run is active (every delivered conversation is at rest)."""
    assert app.service is not None
    runner = app.service.runner
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        await asyncio.wait_for(app.idle(), cap)
        if not runner.executor.active_runs:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the runner did not come to rest")


async def _answered(slack: HelperSlack, threads: list[tuple[str, str]]) -> int:
    """How many of ``threads`` hold a reply from the bot (``conversations.replies``)."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    headers = {"Authorization": f"Bearer {slack.token}"}
    async with aiohttp.ClientSession(headers=headers) as http:

        async def one(channel: str, ts: str) -> bool:
            async with (
                gate,
                http.post(
                    f"{slack.api_url}conversations.replies", data={"channel": channel, "ts": ts}
                ) as response,
            ):
                body = await response.json()
            return any(m.get("bot_id") for m in body.get("messages", [])[1:])

        return sum(await asyncio.gather(*(one(c, ts) for c, ts in threads)))


# -- runs waiting on the model (run_memory) ---------------------------------------------------------


async def waiting(scale: Scale, trace: int = 0) -> dict[str, Any]:
    """RSS growth per run waiting on the model, ours and the peer's; with ``trace`` (ours only) the
    biggest tracemalloc groups of what the N waiting runs hold, printed to stderr."""
    n = scale.conversations
    cap = WAIT_CAP * (10 if trace else 1)
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
            app = _app(
                slack,
                fakes,
                Path(tmp),
                shutdown_grace=0.5,
                run_timeout=3600.0,
                # Like the peer (and the turn rows): whole posts. A streamed answer's request holds
                # ~28 KiB more per waiting run (pydantic-ai's memory streams and task groups).
                stream="off",
                # Every conversation really waits on the model (the default cap would queue most of
                # them in the inbox: that is task_memory's resting cost, not a waiting run's).
                max_concurrent_runs=WARM + n,
                # One person (U1) sends every mention: USER_MAX_RUNS would queue all but four.
                user_max_runs=WARM + n,
            )
            async with app, aiohttp.ClientSession() as http:
                await _deliver(app, envelopes[:WARM])
                await _wait_for_requests(app, http, fakes["model_count_url"], WARM, cap)

                async def wait() -> int:
                    await _deliver(app, envelopes[WARM:])
                    return await _wait_for_requests(app, http, fakes["model_count_url"], WARM + n, cap)

                before, after, count = await rss_growth(wait, trace, n)
            if trace:
                return {"per": (after - before) / n / KIB, "waiting": count - WARM}
            peer, peer_note = await _peer(slack, fakes, envelopes, Path(tmp), n)
    return {
        "per": (after - before) / n / KIB,
        "before": before,
        "after": after,
        "waiting": count - WARM,
        "peer": peer,
        "peer_note": peer_note,
    }


def _app(slack: FakeSlack, fakes: dict[str, Any], data_dir: Path, **settings: Any) -> AppHarness:
    """The app in this process, its model built from ``MODEL=openai-chat:fake`` as in production
    (against the helper's FakeOpenAI), with ``settings`` on top."""
    return AppHarness(
        slack,
        model=None,
        model_name="openai-chat:fake",
        openai_base_url=fakes["model_base_url"],
        openai_api_key="bench",
        data_dir=data_dir,
        **settings,
    )


async def _peer(
    slack: FakeSlack, fakes: dict[str, Any], envelopes: list[dict[str, object]], tmp: Path, n: int
) -> tuple[float | None, str]:
    """The peer's RSS growth per waiting run (KiB), measured like ours, and a note."""
    server = bolt_server(slack, "turn", tmp / "bolt.log", tmp, model_base_url=fakes["model_base_url"])
    async with server, aiohttp.ClientSession() as http:
        url = f"{server.url}/slack/events"
        gate = asyncio.Semaphore(IN_FLIGHT)

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
        count = await settled(min(WARM + n, OPENAI_POOL)) - WARM
        after = rss(server.pid)
    note = f"{count} of {n} at the model, RSS {before / 2**20:.0f} → {after / 2**20:.0f} MiB"
    return ((after - before) / n / KIB if count > 0 else None), note


async def _deliver(app: AppHarness, envelopes: list[dict[str, object]], in_flight: int = IN_FLIGHT) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.task_memory")
    parser.add_argument("kind", choices=("resting", "waiting"))
    parser.add_argument("mode", choices=tuple(SCALES), nargs="?", default="quick")
    parser.add_argument("--trace", type=int, nargs="?", const=25, default=0, metavar="FRAMES")
    parser.add_argument("--conversations", type=int, help="instead of the mode's")
    args = parser.parse_args()
    scale = SCALES[args.mode]
    if args.conversations:
        scale = dataclasses.replace(scale, conversations=args.conversations)
    if args.kind == "resting":
        result = asyncio.run(resting(scale, args.trace))
    else:
        result = asyncio.run(waiting(scale, args.trace))
    print(json.dumps(result), flush=True)


__all__ = ["ROWS", "SIGNING_SECRET", "run"]

if __name__ == "__main__":
    main()
