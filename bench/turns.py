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

``turn_overhead_c1_same_agent``: at ``c = 1`` a third side runs in the same rounds, the same Bolt bot
given ours's instructions and tool definitions (taken from a model request of ours after its
warm-up; ``bench.bolt_baseline``'s ``PEER_AGENT``), so the model reads the same request from both.
``turn_overhead_c1`` compares ours with the bot people run (a one-line prompt, one tool); this row
leaves out what a larger request costs the libraries and keeps what ours does around it (the
claim, the lease, the run's state, the checkpoint and the journal, handles and rendering).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import events
from tests.support.fake_model import FakeOpenAI
from threadbound_emulator import Call, FakeSlack

from . import Row, Scale, ratios
from .common import SIGNING_SECRET, ServerProcess, bench_workspace, bolt_server, median, our_server

ROWS = ("turn_overhead_c1", "turn_overhead_c1_same_agent", "turn_overhead_c50")
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
                await _warm(turns, ours, scale)
                # The same bot given what ours sends the model: its instructions and tools, from a
                # request of ours just made (turn_overhead_c1_same_agent).
                spec = root / "peer-agent.json"
                spec.write_text(json.dumps(_agent_of(llm.requests[-2])), encoding="utf-8")
                same = bolt_server(
                    slack, "turn", root / "same.log", root, model_base_url=llm.base_url, PEER_AGENT=str(spec)
                )
                async with same:
                    for server in (base, same):
                        await _warm(turns, server, scale)
                    for concurrency in scale.turn_concurrency:
                        sides = {"ours": ours, "base": base}
                        if concurrency == 1:
                            sides["same"] = same
                        rounds, per_round = await _rounds(turns, sides, concurrency, scale)
                        rows.append(
                            _row(f"turn_overhead_c{concurrency}", concurrency, rounds, "base", per_round)
                        )
                        if "same" in sides:
                            rows.append(
                                _row("turn_overhead_c1_same_agent", 1, rounds, "same", per_round, agent=spec)
                            )
    return rows


async def _warm(turns: _Turns, server: ServerProcess, scale: Scale) -> None:
    """One turn in every channel first (twenty at a time), then a few alone: the rows measure turns
    in channels each side has seen, the steady state of an app living in a workspace; a first turn
    in a channel costs ours one conversations.info (its name is in the instructions), which the peer
    never asks."""
    if scale.turn_warm_channels:
        await turns.run(server, CHANNELS, WARM_CONCURRENCY, scale.time_cap)
    await turns.run(server, WARM_TURNS, 1, scale.time_cap)


async def _rounds(
    turns: _Turns, sides: dict[str, ServerProcess], concurrency: int, scale: Scale
) -> tuple[dict[str, list[list[float]]], int]:
    """``turn_rounds`` rounds of every side, the order rotating (a slow patch of the machine hits
    every side); each side's latencies per round, and the turns a round has per side."""
    rounds: dict[str, list[list[float]]] = {side: [] for side in sides}
    # At least three turns per conversation slot: a round must reach the steady state of
    # `concurrency` turns in flight, not measure one burst of simultaneous starts.
    per_round = max(1, scale.turns // scale.turn_rounds, 3 * concurrency)
    names = list(sides)
    for n in range(scale.turn_rounds):
        order = names[n % len(names) :] + names[: n % len(names)]
        if n % 2:
            order.reverse()
        for side in order:
            rounds[side].append(await turns.run(sides[side], per_round, concurrency, scale.time_cap))
    return rounds, per_round


def _agent_of(request: dict[str, Any]) -> dict[str, Any]:
    """The instructions and tools of one of ours's model requests (``bench.bolt_baseline``'s PEER_AGENT)."""
    system = next(m for m in request["messages"] if m["role"] == "system")
    return {
        "instructions": system["content"],
        "tools": [
            {k: t["function"].get(k) for k in ("name", "description", "parameters")} for t in request["tools"]
        ],
    }


def _row(
    name: str,
    concurrency: int,
    rounds: dict[str, list[list[float]]],
    against: str,
    per_round: int,
    agent: Path | None = None,
) -> Row:
    """``ours`` against the side ``against``; ``agent``: the peer-agent spec that side was given."""
    sides = ("ours", against)
    expected = per_round * len(rounds["ours"])
    samples = {side: [x for r in rounds[side] for x in r] for side in sides}
    missing = {side: expected - len(v) for side, v in samples.items() if len(v) < expected}
    note = (
        f"{len(rounds['ours'])} alternating rounds of {per_round} turns per side, {concurrency} "
        "conversation(s) at a time; ours and baseline: medians of every turn; ratio: median of the rounds'"
    )
    if agent is not None:
        spec = json.loads(agent.read_text(encoding="utf-8"))
        note += (
            f"; the peer given ours's instructions ({len(spec['instructions']):,} characters) and "
            f"{len(spec['tools'])} tools ({', '.join(t['name'] for t in spec['tools'])})"
        )
    if missing:
        note += f"; unanswered turns: {missing}"
    ratio, spread = ratios([median(r) for r in rounds["ours"]], [median(r) for r in rounds[against]])
    return Row(
        name,
        round(median(samples["ours"]) * 1000, 2),
        round(median(samples[against]) * 1000, 2),
        "ms",
        "<= 1.2",
        ratio=ratio,
        spread=spread,
        also={"every turn answered": not missing},
        note=note,
    )
