"""recovery_seconds: how long a killed server takes, once restarted, to finish a streamed answer once.

Setup. The server in a child process (``python -m app serve``, SQLite) next to FakeSlack and a fake
OpenAI-compatible model that answers at once (a read step, then a 600-character final answer):
the measured time is ours, not the model's. The first process streams the answer and is SIGKILLed
in the middle of it, right after Slack took an ``appendStream`` (``THREADBOUND_CRASH_AT``).

Measurement. From starting the second process to the thread holding the whole answer exactly once
(the partial message removed, the answer posted; the takeover runs as the process starts). The
baseline is a restart with nothing to recover, on the same data directory: from starting the
process to its ``/healthz`` answering. Process start-up dominates both on a loaded machine, so the
row also checks that recovering adds at most 3 s to a plain restart.
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

ROWS = ("recovery_seconds",)
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

        def whole() -> bool:
            texts = [m.get("text", "") for m in slack.bot_messages("C1")]
            return texts == [ANSWER.strip()] or (len(texts) == 1 and texts[0].strip() == ANSWER.strip())

        started = time.perf_counter()
        survivor = ServerProcess(env, cwd=tmp, log_path=tmp / "survivor.log")
        await survivor.start()
        try:
            await eventually(whole, within=60.0, interval=0.01)
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
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        ours, base = await _round(Path(tmp))
    return [
        Row(
            "recovery_seconds",
            round(ours, 3),
            round(base, 3),
            "s",
            "<= 3.0 s",
            absolute=True,
            also={"recovery adds <= 3 s to a plain restart": ours - base <= 3.0},
            note="SIGKILL mid-stream, restart, the whole answer once; baseline: a plain restart",
        )
    ]
