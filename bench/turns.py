"""turn_overhead: delivery → ``chat.postMessage`` with an instant fake model, ours vs the Slack AI bot
people actually run.

Setup. Ours is the real ``python -m app serve`` (child process, SQLite, ``MODEL=openai-chat:fake``);
the baseline is ``bench.bolt_baseline turn``: a Bolt app that sets the assistant status, rebuilds the
thread from ``conversations.replies`` and runs a pydantic-ai ``Agent`` (the same library and model
wire) whose reply tool posts with ``chat_postMessage``, storing nothing. The bench process runs the
client, FakeSlack and FakeOpenAI (default script: the first request answers ``channel_reply("echo:
…")``; after the tool result both sides make a second request, after the post, outside the span).

Measurement. Each turn is a signed ``app_mention`` of a new message; its latency runs from just
before the POST to the moment FakeSlack receives the ``chat.postMessage`` in that message's thread
(both clocks are this process's ``perf_counter``). ``c`` conversations are in flight at once: a
worker sends the next mention only once its previous one was answered (at ``c = 1`` after a
short pause too, so each turn starts on an idle server: both sides keep working after the post).
Rounds (``turn_rounds``, at least three) alternate the sides and which goes first; ``ours`` and
``baseline`` are medians over every turn of a side, the ratio the median of the rounds' ratios. A
round has at least three turns per conversation slot, so at ``c = 50`` it measures 50 turns in
flight, not one burst of simultaneous starts. The mentions rotate over ``CHANNELS`` channels, more
than a round's turns at once, so that Slack's one post a second per channel, which ours keeps and
the peer ignores, does not set the pace: that cost is ``burst_delivery``'s row, not this one.
Before the rounds each side has one turn in every channel (caches in their steady state: ours
looks up a channel's name once, for its instructions).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.support import events
from tests.support.fake_model import FakeOpenAI
from threadbound_emulator import Call, FakeSlack

from . import Row, Scale, ratios
from .common import SIGNING_SECRET, ServerProcess, bench_workspace, bolt_server, median, our_server

ROWS = ("turn_overhead_c1", "turn_overhead_c50")
#: Channels the mentions rotate over: enough that no channel's post pacing binds (see above).
CHANNELS = 200
WARM_TURNS = 3
#: Turns in flight while warming up every channel.
WARM_CONCURRENCY = 20
#: Pause after each answered turn at concurrency 1 (seconds), outside the measured span.
SETTLE = 0.06


class TimedSlack(FakeSlack):
    """FakeSlack that notes when each thread receives its first ``chat.postMessage``."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: dict[tuple[str, str], asyncio.Future[float]] = {}
        self.observe(self._arrived)

    def expect(self, channel: str, ts: str) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.answered[(channel, ts)] = future
        return future

    def _arrived(self, call: Call) -> None:
        if call.method != "chat.postMessage":
            return
        future = self.answered.get((str(call.params.get("channel")), str(call.params.get("thread_ts"))))
        if future is not None and not future.done():
            future.set_result(time.perf_counter())


class _Turns:
    def __init__(self, slack: TimedSlack) -> None:
        self.slack = slack
        self.serial = 0
        bench_workspace(slack, CHANNELS)

    async def run(self, server: ServerProcess, turns: int, concurrency: int, cap: float) -> list[float]:
        """``turns`` turns, ``concurrency`` at a time; the latency of each answered one (seconds)."""
        latencies: list[float] = []
        left = turns
        deadline = time.perf_counter() + cap
        url = f"{server.url}/slack/events"

        async def worker(http: aiohttp.ClientSession) -> None:
            nonlocal left
            while left > 0 and time.perf_counter() < deadline:
                left -= 1
                self.serial += 1
                channel = f"C{self.serial % CHANNELS:04d}"
                text = f"<@UBOT> question {self.serial}"
                ts = self.slack.add_message(channel, text, user="U1")
                answered = self.slack.expect(channel, ts)
                t0 = time.perf_counter()
                response = await events.deliver(
                    http, url, events.app_mention(channel, "U1", text, ts), SIGNING_SECRET
                )
                if response.status != 200:
                    continue
                try:
                    done = await asyncio.wait_for(answered, max(deadline - time.perf_counter(), 0.1))
                except TimeoutError:
                    return
                latencies.append(done - t0)
                if concurrency == 1:
                    # One conversation at a time: let each side finish the turn's tail (the second model
                    # request; ours also saves the transcript) before the next delivery.
                    await asyncio.sleep(SETTLE)

        async with aiohttp.ClientSession() as http:
            await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        return latencies


async def run(scale: Scale) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-turns-") as tmp:
        root = Path(tmp)
        slack = TimedSlack()
        async with slack, FakeOpenAI() as llm:
            turns = _Turns(slack)
            ours = our_server(slack, llm.base_url, root / "data", root / "ours.log")
            base = bolt_server(slack, "turn", root / "bolt.log", root, model_base_url=llm.base_url)
            async with ours, base:
                for server in (base, ours):
                    # One turn in every channel first (twenty at a time), then a few alone: the
                    # rows measure turns in channels each side has seen, the steady state of an app
                    # living in a workspace; a first turn in a channel costs ours one
                    # conversations.info (its name is in the instructions), which the peer never asks.
                    if scale.turn_warm_channels:
                        await turns.run(server, CHANNELS, WARM_CONCURRENCY, scale.time_cap)
                    await turns.run(server, WARM_TURNS, 1, scale.time_cap)
                for concurrency in scale.turn_concurrency:
                    # Rounds alternate the sides (and which goes first), so a slow patch of the machine
                    # hits both; each round's ratio is of the two sides' medians in that round.
                    rounds: dict[str, list[list[float]]] = {"ours": [], "base": []}
                    # At least three turns per conversation slot: a round must reach the steady state
                    # of `concurrency` turns in flight, not measure one burst of simultaneous starts.
                    per_round = max(1, scale.turns // scale.turn_rounds, 3 * concurrency)
                    for n in range(scale.turn_rounds):
                        order = (
                            (("base", base), ("ours", ours))
                            if n % 2 == 0
                            else (("ours", ours), ("base", base))
                        )
                        for side, server in order:
                            rounds[side].append(
                                await turns.run(server, per_round, concurrency, scale.time_cap)
                            )
                    rows.append(_row(concurrency, rounds, per_round))
    return rows


def _row(concurrency: int, rounds: dict[str, list[list[float]]], per_round: int) -> Row:
    expected = per_round * len(rounds["ours"])
    samples = {side: [x for r in each for x in r] for side, each in rounds.items()}
    missing = {side: expected - len(v) for side, v in samples.items() if len(v) < expected}
    note = (
        f"{len(rounds['ours'])} alternating rounds of {per_round} turns per side, {concurrency} "
        "conversation(s) at a time; ours and baseline: medians of every turn; ratio: median of the rounds'"
    )
    if missing:
        note += f"; unanswered turns: {missing}"
    ratio, spread = ratios([median(r) for r in rounds["ours"]], [median(r) for r in rounds["base"]])
    return Row(
        f"turn_overhead_c{concurrency}",
        round(median(samples["ours"]) * 1000, 2),
        round(median(samples["base"]) * 1000, 2),
        "ms",
        "<= 1.2",
        ratio=ratio,
        spread=spread,
        also={"every turn answered": not missing},
        note=note,
    )
