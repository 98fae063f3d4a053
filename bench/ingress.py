"""ingress_throughput, ingress_ceiling and ingress_p99_ack: signed mentions, each a new conversation
whose run starts and works, against the real ``python -m app serve``.

Setup. Four processes: this one (the load generator, nothing else), FakeSlack and FakeOpenAI in a
``bench.fakes`` helper (so serving the runs' Slack and model calls never slows the load generator),
and the app under test, one of three, each freshly started for each of its rounds:

- ours: ``python -m app serve``, SQLite in a temp ``DATA_DIR``, a durable claim and inbox append
  before every 200, then the run;
- the peer: what a team writes with the same libraries, ``bench.bolt_baseline turn`` (a Bolt
  ``AsyncApp`` whose ``app_mention`` listener is acked by Bolt before it runs, then sets the status,
  reads the thread and runs a pydantic-ai ``Agent`` that replies in the thread; nothing durable);
- the ceiling: bare Bolt whose listener does nothing (``bench.bolt_baseline noop``); nobody deploys it.

The model answers every request after ``MODEL_DELAY`` (a tool call that posts the reply, then the
final text), so runs really work — posting replies, reading threads, saving transcripts — while
later deliveries are acknowledged.

Measurement. Rounds: every side once per round, the order rotating from round to round, so a slow
patch of a shared machine hits every side. A side's round: 8 warm-up mentions; ``PRELOAD`` more whose
runs are working when (``PRELOAD_SETTLE`` later) the measured burst starts: ``ingress_deliveries``
mentions, ``ingress_in_flight`` outstanding (acks per second: ``ingress_throughput`` against the peer,
``ingress_ceiling`` against bare Bolt); then, for ours and the peer, ``ingress_sustain`` seconds of
mentions sent open-loop at ``ingress_rate`` per second while the runs they started work (the p99 of
their acks from each send's scheduled moment: ``ingress_p99_ack``). Ratios are the median of the
rounds' ratios, with their spread.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import events

from . import Row, Scale, ratios
from .common import (
    HelperSlack,
    LoadStats,
    ServerProcess,
    bolt_server,
    deliver_all,
    deliver_at_rate,
    median,
    our_server,
    percentile,
    warm_up,
)
from .fakes import helper

ROWS = ("ingress_throughput", "ingress_ceiling", "ingress_p99_ack")
#: Seconds the fake model takes to answer each request: runs are mid-work during every burst.
MODEL_DELAY = 0.5
CHANNELS = 20
#: Mentions whose runs are already working when the measured burst starts, and how long before.
PRELOAD = 50
PRELOAD_SETTLE = 0.3
P99_TARGET_MS = 250.0
SIDES = ("peer", "ceiling", "ours")
#: Wall-clock caps of this module's child (``python -m bench``): three servers start every round.
CAP = {"tiny": 200.0, "quick": 300.0, "full": 1500.0}


@dataclass
class _Side:
    bursts: list[LoadStats] = field(default_factory=list)
    sustained: list[LoadStats] = field(default_factory=list)


class _Mentions:
    """Distinct ``app_mention`` envelopes of messages stored in the helper's FakeSlack."""

    def __init__(self, seed_url: str) -> None:
        self.seed_url = seed_url
        self.serial = 0

    async def batch(self, n: int) -> list[dict[str, Any]]:
        wanted = []
        for _ in range(n):
            self.serial += 1
            wanted.append((f"C{self.serial % CHANNELS:04d}", f"<@UBOT> question {self.serial}"))
        async with aiohttp.ClientSession() as http, http.post(self.seed_url, json={"messages": wanted}) as r:
            stamps = (await r.json())["ts"]
        return [events.app_mention(c, "U1", t, ts) for (c, t), ts in zip(wanted, stamps, strict=True)]


async def run(scale: Scale) -> list[Row]:
    sides = {name: _Side() for name in SIDES}
    with tempfile.TemporaryDirectory(prefix="bench-ingress-") as tmp:
        root = Path(tmp)
        async with helper({"model_delay": MODEL_DELAY, "channels": CHANNELS}) as fakes:
            slack = HelperSlack.of(fakes)
            mentions = _Mentions(fakes["seed_url"])
            model = fakes["model_base_url"]
            for n in range(scale.ingress_rounds):
                order = SIDES[n % 3 :] + SIDES[: n % 3]
                for name in order:
                    if name == "ours":
                        server = our_server(
                            slack, model, root / f"data-{n}", root / "ours.log", SHUTDOWN_GRACE="1"
                        )
                    else:
                        mode = "turn" if name == "peer" else "noop"
                        server = bolt_server(slack, mode, root / f"{name}.log", root, model_base_url=model)
                    async with server:
                        await _round(server, mentions, scale, sides[name], sustain=name != "ceiling")
                        # Killed, not stopped: draining hundreds of runs would only cost time.
                        server.kill()
                        await server.wait()
    return _rows(sides, scale)


async def _round(
    server: ServerProcess, mentions: _Mentions, scale: Scale, side: _Side, *, sustain: bool
) -> None:
    url = f"{server.url}/slack/events"
    await warm_up(url, await mentions.batch(8))
    burst = await mentions.batch(scale.ingress_deliveries)
    steady = await mentions.batch(int(scale.ingress_rate * scale.ingress_sustain)) if sustain else []
    await deliver_all(url, await mentions.batch(PRELOAD), in_flight=PRELOAD, time_cap=scale.time_cap)
    await asyncio.sleep(PRELOAD_SETTLE)
    side.bursts.append(
        await deliver_all(url, burst, in_flight=scale.ingress_in_flight, time_cap=scale.time_cap)
    )
    if sustain:
        side.sustained.append(
            await deliver_at_rate(url, steady, rate=scale.ingress_rate, time_cap=scale.time_cap)
        )


def _rows(sides: dict[str, _Side], scale: Scale) -> list[Row]:
    problems = "; ".join(
        f"{name}: {p}"
        for name, side in sides.items()
        for p in (r.problems() for r in side.bursts + side.sustained)
        if p
    )
    clean = {"no failed deliveries": not problems}
    rates = {name: [r.rate for r in side.bursts] for name, side in sides.items()}
    burst_p99 = {
        name: percentile([x for r in s.bursts for x in r.latencies], 99) * 1000 for name, s in sides.items()
    }
    steady_p99 = {
        name: percentile([x for r in s.sustained for x in r.latencies], 99) * 1000
        for name, s in sides.items()
        if name != "ceiling"
    }
    setup = (
        f"{scale.ingress_rounds} rounds of {scale.ingress_deliveries} mentions, {scale.ingress_in_flight} in "
        f"flight, each starting a run (model answers in {MODEL_DELAY} s), {PRELOAD} runs already working"
    )
    peer_ratio, peer_spread = ratios(rates["ours"], rates["peer"])
    ceiling_ratio, ceiling_spread = ratios(rates["ours"], rates["ceiling"])
    p99_note = (
        f"{scale.ingress_rate:.0f} mentions/s open-loop for {scale.ingress_sustain:.0f} s a round while "
        f"their runs work; baseline: the Bolt + pydantic-ai peer; burst p99 ours {burst_p99['ours']:.0f} ms, "
        f"peer {burst_p99['peer']:.0f} ms, bare Bolt {burst_p99['ceiling']:.0f} ms"
    )
    return [
        Row(
            "ingress_throughput",
            round(median(rates["ours"]), 1),
            round(median(rates["peer"]), 1),
            "deliveries/s",
            ">= 1.0 (vs Bolt + pydantic-ai)",
            ratio=peer_ratio,
            spread=peer_spread,
            also=clean,
            note="; ".join(x for x in (setup, problems) if x),
        ),
        Row(
            "ingress_ceiling",
            round(median(rates["ours"]), 1),
            round(median(rates["ceiling"]), 1),
            "deliveries/s",
            ">= 0.5 (vs bare Bolt)",
            ratio=ceiling_ratio,
            spread=ceiling_spread,
            also=clean,
            note="bare Bolt, no-op listener: the ceiling, not a peer",
        ),
        Row(
            "ingress_p99_ack",
            round(steady_p99["ours"], 1),
            round(steady_p99["peer"], 1),
            "ms",
            f"<= {P99_TARGET_MS:.0f} ms",
            absolute=True,
            also=clean,
            note="; ".join(x for x in (p99_note, problems) if x),
        ),
    ]
