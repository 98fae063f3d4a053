"""The playground's follow-ups: each thread's scheduled ones on the page, and a demo clock to skip ahead.

The app keeps follow-ups in its store; :class:`FollowUpBoard` reads the pending ones about twice a
second and the page shows them under their thread. The board's :class:`DemoClock` is the follow-up
sweep's clock in the playground: **fast-forward** moves it to just past the next due follow-up and
nudges the sweep, so a person sees one fire without waiting. Follow-ups are scheduled by the same
clock (``RunExecutor.follow_up_clock``), so one asked for after a fast-forward waits its whole time;
the time the run is told and the timestamps of messages stay real.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.runs.follow_ups import FollowUpSweep
from storage.base import FollowUpRecord, Store

JSON = dict[str, Any]


@dataclass
class DemoClock:
    """Real time plus an offset that only grows (fast-forward)."""

    offset: float = 0.0

    def now(self) -> float:
        return time.time() + self.offset


@dataclass
class FollowUpBoard:
    """The pending follow-ups as the page shows them, and the fast-forward control."""

    clock: DemoClock = field(default_factory=DemoClock)
    pending: list[FollowUpRecord] = field(default_factory=list)

    async def refresh(self, store: Store) -> bool:
        """Read the pending follow-ups again; True when the page needs a new snapshot."""
        found = await store.pending_follow_ups(limit=500)
        changed = found != self.pending
        self.pending = found
        return changed

    async def fast_forward(self, store: Store, sweep: FollowUpSweep) -> JSON:
        """Move the demo clock just past the next due follow-up and let the sweep fire it."""
        await self.refresh(store)
        if not self.pending:
            return {"skipped": 0.0, "message": "No follow-up is scheduled."}
        skip = max(0.0, self.pending[0].due_at + 1.0 - self.clock.now())
        self.clock.offset += skip
        sweep.nudge()
        return {"skipped": round(skip), "message": f"Skipped ahead {round(skip / 60)} min."}

    def attach(self, snapshot: JSON) -> JSON:
        """``snapshot`` with each conversation's pending follow-ups and the demo clock."""
        for conversation in snapshot["conversations"]:
            conversation["follow_ups"] = [
                _view(f, self.clock.now()) for f in self.pending if f.channel == conversation["id"]
            ]
        now = self.clock.now()
        # ``at``: the page shows it as it shows message times (which follow the demo clock too).
        snapshot["clock"] = {"offset": round(self.clock.offset), "now": _utc(now), "at": now}
        return snapshot


async def cancel_earlier(store: Store, now: float) -> int:
    """Cancel the follow-ups an earlier playground session left pending; how many. The store is kept
    across restarts but the workspace starts empty, so their threads are gone: fired, they could only
    fail (``thread_not_found``) and show under no thread."""
    cancelled = 0
    while True:
        done = 0
        for record in await store.pending_follow_ups(limit=500):
            done += await store.cancel_follow_up(record.task_id, record.follow_up, now=now)
        cancelled += done
        if not done:
            return cancelled


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _view(record: FollowUpRecord, now: float) -> JSON:
    minutes = max(0, round((record.due_at - now) / 60))
    return {
        "follow_up": record.follow_up,
        "thread_ts": record.thread_ts,
        "at": _utc(record.due_at),
        "in": f"in {minutes} min" if minutes else "due now",
        "note": record.note,
    }
