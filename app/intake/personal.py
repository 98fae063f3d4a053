"""What one person has with the app, as the slash command and the App Home show it: their model
usage today against their budget, their pending follow-ups, the tasks their requests ran in; and
cancelling one of their follow-ups.

Read from the store on every ask (nothing cached: any instance answers the same). A person sees only
their own: every read is filtered by their user id, and a cancel is refused unless the follow-up's
requester is the person clicking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.agent.prices import Cost, total_cost
from app.agent.usage import utc_day
from storage.base import FollowUpRecord, PersonTask, Store

#: Tasks the App Home lists: the latest this many, from the last ``TASK_DAYS`` days.
TASKS_SHOWN = 10
TASK_DAYS = 7
#: Follow-ups one answer lists (the install holds at most ``FOLLOW_UPS_MAX`` in all).
FOLLOW_UPS_SHOWN = 20


@dataclass(frozen=True, slots=True)
class Usage:
    """A person's model usage of one UTC day."""

    day: str
    input_tokens: int
    output_tokens: int
    requests: int
    #: ``USER_DAILY_TOKEN_BUDGET`` (0: none).
    budget: int
    #: What those tokens cost at list prices (``app.agent.prices``); None: nothing used.
    cost: Cost | None = None

    @property
    def spent(self) -> int:
        """What the budget counts: input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def line(self) -> str:
        """One line of Markdown-free text: spent today, against the budget when there is one."""
        spent = f"{self.spent:,} tokens today ({self.input_tokens:,} in, {self.output_tokens:,} out, "
        spent += f"{self.requests:,} model request{'s' if self.requests != 1 else ''})"
        if self.cost is not None:
            spent += f", about {self.cost.text()} at list prices"
        if not self.budget:
            return f"You have used {spent}; there is no daily budget per person."
        left = max(self.budget - self.spent, 0)
        return f"You have used {spent} of your {self.budget:,}; {left:,} left until 00:00 UTC."


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """What a cancel click did: ``cancelled``, ``not_yours``, ``gone`` (fired, cancelled or unknown)."""

    status: str
    record: FollowUpRecord | None = None


@dataclass(slots=True)
class Personal:
    """One person's usage, follow-ups and tasks, from the store."""

    store: Store
    #: ``USER_DAILY_TOKEN_BUDGET`` (0: none).
    budget: int = 0
    clock: Callable[[], float] = time.time

    async def usage(self, person: str) -> Usage:
        day = utc_day(self.clock())
        rows = await self.store.person_usage_by_model(person, day)
        return Usage(
            day=day,
            input_tokens=sum(r.input_tokens for r in rows),
            output_tokens=sum(r.output_tokens for r in rows),
            requests=sum(r.requests for r in rows),
            budget=self.budget,
            cost=total_cost(rows) if rows else None,
        )

    async def follow_ups(self, person: str) -> list[FollowUpRecord]:
        """``person``'s pending follow-ups, the soonest first."""
        pending = await self.store.pending_follow_ups()
        return sorted((f for f in pending if f.requester == person), key=lambda f: f.due_at)[
            :FOLLOW_UPS_SHOWN
        ]

    async def tasks(self, person: str) -> list[PersonTask]:
        since = utc_day(self.clock() - TASK_DAYS * 86400)
        return await self.store.person_tasks(person, since=since, limit=TASKS_SHOWN)

    async def cancel(self, person: str, task_id: str, follow_up: str) -> CancelOutcome:
        """Cancel ``person``'s pending follow-up; anyone else's is refused."""
        record = await self.store.get_follow_up(task_id, follow_up)
        if record is None or record.state != "pending":
            return CancelOutcome("gone", record)
        if record.requester != person:
            return CancelOutcome("not_yours", record)
        done = await self.store.cancel_follow_up(task_id, follow_up, now=self.clock())
        return CancelOutcome("cancelled" if done else "gone", record)


def cancel_value(record: FollowUpRecord) -> str:
    """The value a cancel button carries: the follow-up's task and handle."""
    return f"{record.task_id} {record.follow_up}"


def parse_cancel_value(value: str) -> tuple[str, str] | None:
    task_id, _, follow_up = value.partition(" ")
    return (task_id, follow_up) if task_id and follow_up.startswith("fu_") else None
