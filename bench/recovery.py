"""recovery_seconds: how long a killed server takes, once restarted, to finish a streamed answer once.

Setup. The server in a child process (``python -m app serve``, SQLite) next to FakeSlack and a fake
OpenAI-compatible model that answers at once (a read step, then a 600-character final answer):
the measured time is ours, not the model's. The first process streams the answer and is SIGKILLed
in the middle of it, right after Slack took an ``appendStream`` (``THREADBOUND_CRASH_AT``): the
message shows the text but was never finished (``stopStream``).

Measurement. From starting the second process to the thread holding the whole answer exactly once
in a finished message (:func:`answered_once`: the unfinished one removed or finished, the answer
posted; the takeover runs as the process starts). The baseline is a restart with nothing to
recover, on the same data directory: from starting the process to its ``/healthz`` answering. The
two sides alternate, ``ROUNDS`` rounds (one with ``--tiny``); the row is the median of each side,
the rounds' spread in the note. Process start-up is most of both, so the row also checks that
recovering adds at most 3 s to a plain restart.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply
from tests.support.harness import SIGNING_SECRET
from tests.support.process import ServerProcess
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

from . import Row, Scale
from .common import median

ROWS = ("recovery_seconds",)
ROUNDS = 3
ANSWER = "The launch moves to March third because QA needs another week of testing. " * 8


def _model(request: dict[str, Any]) -> Reply:
    if not any(m.get("role") == "assistant" for m in request.get("messages", [])):
        return FakeOpenAI.tool_call("channel_read")  # its step opens the streamed message
    return FakeOpenAI.text(ANSWER)


def _env(slack: FakeSlack, llm: FakeOpenAI, data: Path) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "DATA_DIR": str(data),
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "x",
        "LEASE_TTL": "600",
        "PROGRESS": "off",
        "STREAM": "auto",
    }


def answered_once(slack: FakeSlack) -> bool:
    """The thread holds one bot message, the whole answer, and it is not an unfinished stream (a
    crashed stream shows its text but was never stopped: it does not count as answered)."""
    messages = slack.bot_messages("C1")
    if len(messages) != 1 or messages[0].get("text", "").strip() != ANSWER.strip():
        return False
    stream = slack.streams.get(("C1", messages[0]["ts"]))
    return stream is None or stream.state == "stopped"


async def _round(tmp: Path) -> tuple[float, float]:
    """(seconds to the whole answer after a crash mid-stream, seconds to healthy with nothing to do)."""
    async with FakeSlack() as slack, FakeOpenAI(_model) as llm, aiohttp.ClientSession() as http:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        env = _env(slack, llm, tmp / "data")
        doomed = ServerProcess(
            {**env, "THREADBOUND_CRASH_AT": "slack.appendStream.after"}, cwd=tmp, log_path=tmp / "doomed.log"
        )
        await doomed.start()
        root = slack.add_message("C1", "<@UBOT> what did we decide?", user="U1")
        envelope = events.app_mention("C1", "U1", "<@UBOT> what did we decide?", root)
        await events.deliver(http, f"{doomed.url}/slack/events", envelope, SIGNING_SECRET)
        if await doomed.wait(within=60.0) >= 0:
            raise RuntimeError("the server was not killed mid-answer")

        if answered_once(slack):
            raise RuntimeError("the answer was finished before the crash")
        started = time.perf_counter()
        survivor = ServerProcess(env, cwd=tmp, log_path=tmp / "survivor.log")
        await survivor.start()
        try:
            await eventually(lambda: answered_once(slack), within=60.0, interval=0.01)
            ours = time.perf_counter() - started
        finally:
            await survivor.stop()
        started = time.perf_counter()
        idle = ServerProcess(env, cwd=tmp, log_path=tmp / "idle.log")
        await idle.start()
        base = time.perf_counter() - started
        await idle.stop()
    return ours, base


async def run(scale: Scale) -> list[Row]:
    rounds = 1 if scale.mode == "tiny" else ROUNDS
    ours: list[float] = []
    base: list[float] = []
    for n in range(rounds):
        with tempfile.TemporaryDirectory(prefix=f"bench-recovery-{n}-") as tmp:
            recovered, restarted = await _round(Path(tmp))
        ours.append(recovered)
        base.append(restarted)
    middle, baseline = median(ours), median(base)
    adds = [o - b for o, b in zip(ours, base, strict=True)]
    return [
        Row(
            "recovery_seconds",
            round(middle, 3),
            round(baseline, 3),
            "s",
            "<= 3.0 s",
            absolute=True,
            also={"recovery adds <= 3 s to a plain restart": median(adds) <= 3.0},
            note="SIGKILL mid-stream, restart, the whole answer once in a finished message; baseline: a "
            f"plain restart; {len(ours)} alternating rounds, ours {min(ours):.2f}–{max(ours):.2f} s, "
            f"baseline {min(base):.2f}–{max(base):.2f} s, recovery adds {median(adds):+.2f} s (median)",
        )
    ]
