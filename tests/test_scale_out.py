"""Two app instances on one Postgres: one turn per message, shared history, one run at a time."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

BASE_URL = os.environ.get("TEST_DATABASE_URL", "")
pytestmark = pytest.mark.skipif(
    not BASE_URL, reason="TEST_DATABASE_URL not set: multi-instance Postgres tests skipped"
)


class Recorder:
    """A slow scripted model shared by both instances, recording prompts and overlapping runs."""

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.prompts: list[str] = []
        self.histories: list[str] = []
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, turn: Turn) -> list[Any]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if turn.prompt:
                self.prompts.append(turn.prompt)
                self.histories.append(turn.history_text)
                return [call("channel_reply", text=f"answer {len(self.prompts)}")]
            return [""]
        finally:
            self.in_flight -= 1


async def test_two_instances_share_claims_history_and_leases(tmp_path: Path, database_url: str) -> None:
    """The same message delivered to both instances gives one turn; a follow-up on the other resumes."""
    recorder = Recorder()
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        common: dict[str, Any] = {"database_url": database_url, "model": scripted(recorder)}
        async with (
            AppHarness(slack, data_dir=tmp_path / "a", owner="instance-a", **common) as a,
            AppHarness(slack, data_dir=tmp_path / "b", owner="instance-b", **common) as b,
        ):
            root = slack.add_message("C1", "<@UBOT> remember mango", user="U1")
            mention = events.app_mention("C1", "U1", "<@UBOT> remember mango", root)
            duplicate = events.message("C1", "U1", "<@UBOT> remember mango", root)
            responses = await asyncio.gather(a.deliver(mention), b.deliver(duplicate), b.deliver(mention, 1))
            assert all(r.status == 200 for r in responses)
            # Either instance may run the conversation (b's start-up sweep can find a's inbox item
            # before a's own driver takes the lease): wait for its turn, then for both to settle.
            await eventually(lambda: bool(recorder.prompts))
            await asyncio.gather(a.idle(), b.idle())
            assert len(recorder.prompts) == 1

            # Follow-ups alternate between instances while runs are slow: never two runs at once.
            for i in range(6):
                ts = slack.add_message("C1", f"follow-up {i}", user="U1", thread_ts=root)
                target = a if i % 2 else b
                await target.deliver(events.message("C1", "U1", f"follow-up {i}", ts, thread_ts=root))
            # No sweep here: a delivery that lost the lease race must be picked up by the lease
            # holder's look at the inbox after it releases.
            await eventually(lambda: "follow-up 5" in "\n".join(recorder.prompts), within=60)
            await asyncio.gather(a.idle(), b.idle())
        assert recorder.peak == 1
        joined = "\n".join(recorder.prompts)
        assert all(f"follow-up {i}" in joined for i in range(6))
        assert "mango" in recorder.histories[-1]
