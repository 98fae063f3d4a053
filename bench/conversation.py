"""tokens_per_turn, cacheable_prefix, slack_calls_per_turn: one scripted 30-turn thread per side.

Setup. Both sides talk to their own ``bench.fake_anthropic.FakeAnthropic`` (the Anthropic Messages
wire; it counts ~4 characters per token of what it receives and bills like Anthropic, prompt cache
included) and to one FakeSlack. Ours is the real ``python -m app serve`` with
``MODEL=anthropic:claude-sonnet-5-5``; the baseline is ``bench.bolt_baseline turn``: a Bolt app running
a pydantic-ai ``Agent`` with a reply tool that rebuilds the thread from ``conversations.replies`` on
every turn and sets no cache breakpoints (as ChatGPT-in-Slack and Slack's samples do). The fake model
answers every message with a 400-character ``channel_reply``, then ends the turn.

Measurement. A person mentions the bot 30 times in one thread, one turn after the other (the next
starts once the model saw the turn's tool result and the server went quiet).
- ``tokens_per_turn``: billed input tokens per turn (uncached + 0.1 x cache reads + 1.25 x cache
  writes, summed over the turn's requests), the mean over all turns.
- ``cacheable_prefix``: for every request after the first, the share of it (in characters, in the
  order Anthropic caches: tools, system, messages; cache markers excluded) that repeats the previous
  request's start byte for byte; the mean. Absolute target; the baseline's is shown.
- ``slack_calls_per_turn``: Web API calls per turn from the second turn on (caches warm).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.support import events
from threadbound_emulator import FakeSlack

from . import Row, Scale
from .common import SIGNING_SECRET, ServerProcess, bench_workspace, bolt_server, our_server, quiet
from .fake_anthropic import FakeAnthropic, common_prefix_share

ROWS = ("tokens_per_turn", "cacheable_prefix", "slack_calls_per_turn")
MODEL = "anthropic:claude-sonnet-5-5"
CHANNEL = "C0000"
QUESTIONS = (
    "can you summarise where the release stands?",
    "what is still blocking the deploy?",
    "who owns the database migration?",
    "draft a short note for the customer about the delay",
    "what did we decide about the feature flag yesterday?",
    "list the open questions from this thread",
)


@dataclass
class Conversation:
    """What one side's 30 turns cost."""

    billed: list[float] = field(default_factory=list)
    raw_input: list[int] = field(default_factory=list)
    prefix: list[float] = field(default_factory=list)
    warm_calls: int = 0
    #: Web API methods called in the warm turns, with counts.
    methods: dict[str, int] = field(default_factory=dict)
    warm_turns: int = 0
    unanswered: int = 0


async def _converse(
    server: ServerProcess, slack: FakeSlack, llm: FakeAnthropic, turns: int, cap: float
) -> Conversation:
    seen = Conversation()
    root: str | None = None
    url = f"{server.url}/slack/events"
    deadline = time.monotonic() + cap
    warm_from = 0
    async with aiohttp.ClientSession() as http:
        for n in range(turns):
            text = f"<@UBOT> {QUESTIONS[n % len(QUESTIONS)]} ({n + 1})"
            ts = slack.add_message(CHANNEL, text, user="U1", thread_ts=root)
            if n == 1:
                warm_from = len(slack.calls)
            first, ended = len(llm.bills), llm.turns_ended
            response = await events.deliver(
                http, url, events.app_mention(CHANNEL, "U1", text, ts, thread_ts=root), SIGNING_SECRET
            )
            root = root or ts
            if response.status != 200:
                seen.unanswered += 1
                continue
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.1)):
                    await llm.wait_turns(ended + 1)
            except TimeoutError:
                seen.unanswered += 1
            # Ours saves the transcript and clears its progress indicator after the last request.
            await quiet(server, cap=5.0)
            seen.billed.append(sum(b.billed for b in llm.bills[first:]))
            seen.raw_input.append(sum(b.total for b in llm.bills[first:]))
    seen.warm_calls = len(slack.calls) - warm_from
    seen.methods = dict(Counter(call.method for call in slack.calls[warm_from:]))
    seen.warm_turns = turns - 1
    seen.prefix = [
        common_prefix_share(before.blocks, after.blocks)
        for before, after in zip(llm.bills, llm.bills[1:], strict=False)
    ]
    return seen


async def run(scale: Scale) -> list[Row]:
    turns = scale.conversation_turns
    results: dict[str, Conversation] = {}
    with tempfile.TemporaryDirectory(prefix="bench-conversation-") as tmp:
        root = Path(tmp)
        for side in ("base", "ours"):
            async with FakeSlack() as slack, FakeAnthropic() as llm:
                bench_workspace(slack, 1)
                model = {"MODEL": MODEL, "ANTHROPIC_BASE_URL": llm.base_url, "ANTHROPIC_API_KEY": "bench"}
                if side == "ours":
                    server = our_server(slack, "", root / "data", root / "ours.log", **model)
                else:
                    server = bolt_server(slack, "turn", root / "bolt.log", root, **model)
                async with server:
                    results[side] = await _converse(server, slack, llm, turns, scale.time_cap * 3)
    ours, base = results["ours"], results["base"]
    unanswered = {side: c.unanswered for side, c in results.items() if c.unanswered}
    answered = {"every turn answered": not unanswered}
    note = f"{turns} turns in one thread, Anthropic wire, 400-character answers"
    if unanswered:
        note += f"; unanswered turns: {unanswered}"
    return [
        Row(
            "tokens_per_turn",
            round(statistics.mean(ours.billed)),
            round(statistics.mean(base.billed)),
            "billed input tokens",
            "<= 0.6",
            also=answered,
            note=f"{note}; raw input per turn {statistics.mean(ours.raw_input):,.0f}"
            f" vs {statistics.mean(base.raw_input):,.0f}",
        ),
        Row(
            "cacheable_prefix",
            round(statistics.mean(ours.prefix), 3),
            round(statistics.mean(base.prefix), 3),
            "share",
            ">= 0.9",
            absolute=True,
            also=answered,
            note=note + f"; lowest request: {min(ours.prefix):.2f}",
        ),
        Row(
            "slack_calls_per_turn",
            round(ours.warm_calls / ours.warm_turns, 2),
            round(base.warm_calls / base.warm_turns, 2),
            "Web API calls",
            "<= 1.0",
            also=answered,
            note=f"{note}; from the second turn on (caches warm); ours {_per_turn(ours)};"
            f" baseline {_per_turn(base)}",
        ),
    ]


def _per_turn(seen: Conversation) -> str:
    return ", ".join(f"{m} {n / seen.warm_turns:.3g}" for m, n in sorted(seen.methods.items()))
