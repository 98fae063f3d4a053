"""ingress_throughput and ingress_p99_ack: signed deliveries against the real ``python -m app serve``.

Setup. Two child processes, both idle when not measured: ours (``python -m app serve``, SQLite
in a temp ``DATA_DIR``, ``MODEL=openai-chat:fake`` at a FakeOpenAI) and the baseline (a bare Bolt
``AsyncApp`` with a no-op ``app_mention`` listener, ``bench.bolt_baseline noop``). The bench process
runs the load generator, FakeSlack and FakeOpenAI. Every delivery is an ``app_mention`` of a distinct
message, so each one is claimed and appended to a new conversation's inbox before its 200.

The model answers slowly (``MODEL_DELAY``): a real model takes seconds, so during a burst of
deliveries the runs it starts are waiting on the model, not post-processing answers. The acks
measured therefore include what really competes with them — claiming, starting each run (lease,
inbox read, the model request going out) — but not model answers that would arrive later.

Measurement. ``in_flight`` deliveries outstanding (100), a fixed count per round and a time
cap; rounds alternate baseline / ours so drift on a shared machine hits both, each on a freshly
started server after 8 warm-up deliveries. For diagnosis, each ours round is followed by a round of
thread replies into one conversation whose run waits on the model: claims that start no run (the
ack path alone), reported in the rows' note. Throughput is the
median of the rounds' acknowledged-per-second; p99 is over every ack of a side's rounds.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tests.support import events
from tests.support.fake_model import FakeOpenAI
from threadbound_emulator import FakeSlack

from . import Row, Scale
from .common import (
    LoadStats,
    ServerProcess,
    bench_workspace,
    bolt_server,
    deliver_all,
    median,
    our_server,
    percentile,
    quiet,
    warm_up,
)

ROWS = ("ingress_throughput", "ingress_p99_ack")
#: Seconds the fake model takes to answer: longer than any round, so no answer lands mid-measurement.
MODEL_DELAY = 600.0
CHANNELS = 20
P99_ABSOLUTE_S = 3.0


class _Mentions:
    """Distinct ``app_mention`` envelopes, each of a message stored in FakeSlack (a run may read it)."""

    def __init__(self, slack: FakeSlack) -> None:
        self.slack = slack
        self.serial = 0
        bench_workspace(slack, CHANNELS)

    def replies(self, root: dict[str, Any], n: int) -> list[dict[str, Any]]:
        """``n`` thread replies (no mention) under the mention ``root``: claims into one conversation."""
        event = root["event"]
        out = []
        for _ in range(n):
            self.serial += 1
            text = f"and another thing {self.serial}"
            ts = self.slack.add_message(event["channel"], text, user="U1", thread_ts=event["ts"])
            out.append(events.message(event["channel"], "U1", text, ts, thread_ts=event["ts"]))
        return out

    def batch(self, n: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            self.serial += 1
            channel = f"C{self.serial % CHANNELS:04d}"
            text = f"<@UBOT> question {self.serial}"
            ts = self.slack.add_message(channel, text, user="U1")
            out.append(events.app_mention(channel, "U1", text, ts))
        return out


async def run(scale: Scale) -> list[Row]:
    ours_rounds: list[LoadStats] = []
    base_rounds: list[LoadStats] = []
    ack_path: list[LoadStats] = []
    with tempfile.TemporaryDirectory(prefix="bench-ingress-") as tmp:
        root = Path(tmp)
        async with FakeSlack() as slack, FakeOpenAI(delay=MODEL_DELAY) as llm:
            mentions = _Mentions(slack)
            for n in range(scale.ingress_rounds):
                # A fresh server per round: every round starts from the same state (no runs left waiting).
                base = bolt_server(slack, "noop", root / "bolt.log", root)
                async with base:
                    base_rounds.append(await _round(base, mentions, scale))
                data = root / f"data-{n}"
                ours = our_server(slack, llm.base_url, data, root / "ours.log", SHUTDOWN_GRACE="1")
                async with ours:
                    ours_rounds.append(await _round(ours, mentions, scale))
                    ack_path.append(await _replies_round(ours, mentions, scale))
    return _rows(ours_rounds, base_rounds, ack_path, scale)


async def _round(server: ServerProcess, mentions: _Mentions, scale: Scale) -> LoadStats:
    url = f"{server.url}/slack/events"
    await warm_up(url, mentions.batch(8))
    return await deliver_all(
        url,
        mentions.batch(scale.ingress_deliveries),
        in_flight=scale.ingress_in_flight,
        time_cap=scale.time_cap,
    )


async def _replies_round(server: ServerProcess, mentions: _Mentions, scale: Scale) -> LoadStats:
    """For diagnosis: the ack path alone. Replies into one conversation whose run is already waiting
    on the model are claimed and queued, but start no run."""
    url = f"{server.url}/slack/events"
    await quiet(server, scale.time_cap)  # the previous round's runs finish starting first
    root = mentions.batch(1)[0]
    await warm_up(url, [root])
    return await deliver_all(
        url,
        mentions.replies(root, scale.ingress_deliveries),
        in_flight=scale.ingress_in_flight,
        time_cap=scale.time_cap,
    )


def _rows(ours: list[LoadStats], base: list[LoadStats], ack_path: list[LoadStats], scale: Scale) -> list[Row]:
    def notes(side: str, rounds: list[LoadStats]) -> list[str]:
        return [f"{side}: {p}" for p in (r.problems() for r in rounds) if p]

    problems = "; ".join(notes("ours", ours) + notes("baseline", base))
    ours_rate = median([r.rate for r in ours])
    base_rate = median([r.rate for r in base])
    ours_p99 = percentile([x for r in ours for x in r.latencies], 99) * 1000
    base_p99 = percentile([x for r in base for x in r.latencies], 99) * 1000
    # A round with failed deliveries does not count as met, whatever its speed.
    clean = not problems
    extra = (
        f"{scale.ingress_rounds}x{scale.ingress_deliveries} mentions, {scale.ingress_in_flight} in flight, "
        "each starting a run; ours without run starts (replies into one busy conversation): "
        f"{median([r.rate for r in ack_path]):.0f}/s, p99 "
        f"{percentile([x for r in ack_path for x in r.latencies], 99) * 1000:.0f} ms"
    )
    return [
        Row(
            "ingress_throughput",
            round(ours_rate, 1),
            round(base_rate, 1),
            "deliveries/s",
            ">= 0.7",
            also={"no failed deliveries": clean},
            note="; ".join(x for x in (extra, problems) if x),
        ),
        Row(
            "ingress_p99_ack",
            round(ours_p99, 2),
            round(base_p99, 2),
            "ms",
            "<= 2.0 and ours < 3 s",
            also={"ours < 3 s": ours_p99 < P99_ABSOLUTE_S * 1000, "no failed deliveries": clean},
            note="; ".join(x for x in (extra, problems) if x),
        ),
    ]
