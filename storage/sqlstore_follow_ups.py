"""The :class:`~storage.base.Store` methods of follow-ups (``follow_up_statements.py``).

Mixed into :class:`~storage.sqlstore.SqlStore`, over the same four primitives (``sqlcore.py``).
"""

from __future__ import annotations

from dataclasses import asdict

from . import follow_up_statements as sql
from ._rows import from_row
from .records import FollowUpRecord, FollowUpState
from .sqlcore import SqlCore, new_id

#: ``pending_follow_ups`` without ``before``: every pending one (due before the year 5000).
_FOREVER = 95_617_584_000.0
#: Most fired or cancelled follow-ups one prune statement deletes.
_PRUNE_BATCH = 5_000


class FollowUpMethods(SqlCore):
    """Scheduling, listing, cancelling and firing follow-ups, written once over SQL."""

    async def schedule_follow_up(
        self, record: FollowUpRecord, *, payload: str, per_task: int, install_max: int
    ) -> str:
        """Store a pending follow-up unless its task already has ``per_task`` pending or the install
        ``install_max``: ``"scheduled"``, ``"task_full"`` or ``"install_full"``. ``payload`` is the
        inbox item it becomes when it fires."""
        bounds = {"per_task": per_task, "install_max": install_max}
        params = {**asdict(record), "payload": payload, "now": record.created_at, **bounds}
        if await self._one(sql.SCHEDULE_FOLLOW_UP, **params) is not None:
            return "scheduled"
        row = await self._one(sql.COUNT_TASK_PENDING, task_id=record.task_id)
        return "task_full" if row is not None and int(row["n"]) >= per_task else "install_full"

    async def task_follow_ups(self, task_id: str) -> list[FollowUpRecord]:
        """The task's pending follow-ups, soonest first."""
        return [
            from_row(FollowUpRecord, r) for r in await self._fetch(sql.TASK_FOLLOW_UPS, {"task_id": task_id})
        ]

    async def get_follow_up(self, task_id: str, follow_up: str) -> FollowUpRecord | None:
        """One of ``task_id``'s follow-ups in any state; None when unknown or another task's."""
        row = await self._one(sql.GET_FOLLOW_UP, task_id=task_id, follow_up=follow_up)
        return None if row is None else from_row(FollowUpRecord, row)

    async def cancel_follow_up(self, task_id: str, follow_up: str, *, now: float) -> bool:
        """Cancel a pending follow-up of ``task_id``; True for the one call that cancelled it."""
        row = await self._one(sql.CANCEL_FOLLOW_UP, task_id=task_id, follow_up=follow_up, now=now)
        return row is not None

    async def pending_follow_ups(
        self, *, before: float | None = None, limit: int = 1000
    ) -> list[FollowUpRecord]:
        """Pending follow-ups across the install (due before ``before`` when given), soonest first."""
        params = {"before": _FOREVER if before is None else before, "limit": limit}
        return [from_row(FollowUpRecord, r) for r in await self._fetch(sql.PENDING_FOLLOW_UPS, params)]

    async def next_follow_up_due(self) -> float | None:
        """When the soonest pending follow-up is due; None when none is pending."""
        row = await self._one(sql.NEXT_FOLLOW_UP_DUE)
        return None if row is None or row["due_at"] is None else float(row["due_at"])

    async def refuse_follow_up(self, follow_up: str, *, payload: str) -> None:
        """Make a pending follow-up fire as ``payload`` instead (its person is no longer allowed)."""
        await self._execute(sql.REFUSE_FOLLOW_UP, {"follow_up": follow_up, "refusal": payload})

    async def fire_follow_ups(self, *, now: float, limit: int = 500) -> list[FollowUpRecord]:
        """Append up to ``limit`` due follow-ups of tasks with no live lease to their inboxes and
        mark them fired, in one transaction; the ones this call fired. Each follow-up is fired by
        exactly one call, across instances and restarts."""
        fire_id = new_id()
        row = await self._call(sql.FIRE_FOLLOW_UPS, {"now": now, "limit": limit, "fire_id": fire_id})
        if not int(row["fired"]):
            return []
        return [
            from_row(FollowUpRecord, r) for r in await self._fetch(sql.FIRED_FOLLOW_UPS, {"fire_id": fire_id})
        ]

    async def prune_follow_ups(self, *, older_than: float) -> int:
        """Delete fired and cancelled follow-ups that fired or were cancelled before ``older_than``
        (pending ones are never touched), in bounded batches; how many."""
        deleted = 0
        while True:  # bounded batches, each its own transaction
            count = await self._execute(sql.PRUNE_FOLLOW_UPS, {"cutoff": older_than, "batch": _PRUNE_BATCH})
            deleted += count
            if count < _PRUNE_BATCH:
                return deleted

    async def pending_follow_up_count(self) -> int:
        """How many follow-ups are pending across the install (``/metrics``)."""
        row = await self._one(sql.COUNT_PENDING)
        return 0 if row is None else int(row["n"])

    async def follow_up_counts(self) -> dict[FollowUpState, int]:
        """How many follow-ups are in each state."""
        counts: dict[FollowUpState, int] = {"pending": 0, "fired": 0, "cancelled": 0}
        for row in await self._fetch(sql.FOLLOW_UP_COUNTS, {}):
            counts[row["state"]] = int(row["n"])
        return counts
