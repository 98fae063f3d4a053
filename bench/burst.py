"""burst_delivery: a burst of mentions in two channels under Slack's one post per second per channel.

Setup. The real ``python -m app serve`` (SQLite in a temp ``DATA_DIR``, defaults otherwise: the
answer streams) against FakeSlack with a per-channel rate limit on new messages
(``chat.postMessage`` and ``chat.startStream`` share it: one a second, no burst; beyond it a 429
with ``Retry-After``, nothing done) and a FakeOpenAI that answers at once with one ``channel_reply``.

Measurement. ``burst_mentions`` mentions, split over two channels, delivered at once; the seconds
from the first delivery until every thread has its reply. The baseline is the physical limit: one
channel's share of posts at one a second (20 posts take 20 s). Lost (a thread without a reply)
and duplicated (a thread with more than one) are counted after the server went quiet; both must be 0.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support import events
from tests.support.fake_model import FakeOpenAI
from threadbound_emulator import FakeSlack

from . import Row, Scale
from .common import deliver_all, our_server, quiet, warm_up

ROWS = ("burst_delivery",)
CHANNELS = ("C0BURST1", "C0BURST2")
#: Posts Slack lets through per second per channel (the fake enforces it).
POSTS_PER_SECOND = 1.0


async def run(scale: Scale) -> list[Row]:
    mentions = scale.burst_mentions
    with tempfile.TemporaryDirectory(prefix="bench-burst-") as tmp:
        root = Path(tmp)
        async with FakeSlack() as slack, FakeOpenAI() as llm:
            for n, channel in enumerate(CHANNELS):
                slack.add_channel(channel, f"incident-{n}")
            slack.add_channel("C0WARM", "warm-up")
            slack.add_user("U1", "alice", display_name="Alice")
            server = our_server(slack, llm.base_url, root / "data", root / "ours.log")
            async with server:
                url = f"{server.url}/slack/events"
                warm = slack.add_message("C0WARM", "<@UBOT> warm up", user="U1")
                await warm_up(url, [events.app_mention("C0WARM", "U1", "<@UBOT> warm up", warm)])
                await _replied(slack, [("C0WARM", warm)], 30.0)
                slack.rate_limit(per_second=POSTS_PER_SECOND, burst=1)  # posts and streamed answers
                threads, envelopes = _burst(slack, mentions)
                started = time.perf_counter()
                stats = await deliver_all(url, envelopes, in_flight=len(envelopes), time_cap=scale.time_cap)
                done = await _replied(slack, threads, cap=10 * mentions / POSTS_PER_SECOND)
                seconds = time.perf_counter() - started
                await quiet(server, 10.0)  # a duplicate would show up now
            counts = [len(_replies(slack, c, ts)) for c, ts in threads]
    lost = sum(1 for n in counts if n == 0)
    duplicated = sum(n - 1 for n in counts if n > 1)
    limit = mentions / len(CHANNELS) / POSTS_PER_SECOND
    refused = sum(sum(r.refused.values()) for r in slack.rate_limits.values())
    problems = stats.problems()
    return [
        Row(
            "burst_delivery",
            round(seconds, 1) if done else None,
            limit,
            "s until every thread has its reply",
            "<= 1.5",
            also={"0 lost": lost == 0, "0 duplicated": duplicated == 0, "all acknowledged": not problems},
            note=(
                f"{mentions} mentions over {len(CHANNELS)} channels, Slack at {POSTS_PER_SECOND:g} "
                f"post/s/channel; baseline is the physical limit; lost {lost}, duplicated {duplicated}, "
                f"429s waited out {refused}" + (f"; {problems}" if problems else "")
            ),
        )
    ]


def _burst(slack: FakeSlack, mentions: int) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    threads, envelopes = [], []
    for n in range(mentions):
        channel = CHANNELS[n % len(CHANNELS)]
        text = f"<@UBOT> incident question {n}"
        ts = slack.add_message(channel, text, user="U1")
        threads.append((channel, ts))
        envelopes.append(events.app_mention(channel, "U1", text, ts))
    return threads, envelopes


def _replies(slack: FakeSlack, channel: str, ts: str) -> list[dict[str, Any]]:
    return [m for m in slack.bot_messages(channel) if m.get("thread_ts") == ts]


async def _replied(slack: FakeSlack, threads: list[tuple[str, str]], cap: float) -> bool:
    """Wait until every thread has a reply (True), or ``cap`` seconds passed (False)."""
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        if all(_replies(slack, c, ts) for c, ts in threads):
            return True
        await asyncio.sleep(0.05)
    return False
