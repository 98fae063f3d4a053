"""The statement group of follow-ups (``follow_up_statements.py``), over one
:class:`~storage.sqlcore.Database`: the store hands each of these calls here; each method's contract
is the docstring of the :class:`~storage.sqlstore.SqlStore` method of the same name."""

from __future__ import annotations

from dataclasses import asdict

from . import follow_up_statements as sql
from ._rows import from_row
from .crashpoints import crash_point
from .records import FollowUpRecord, FollowUpState
from .sqlcore import Database, new_id

#: ``pending_follow_ups`` without ``before``: every pending one (due before the year 5000).
_FOREVER = 95_617_584_000.0
#: Pending follow-ups one person may have across the install, unless the caller says otherwise.
DEFAULT_PER_PERSON = 50
#: Most fired or cancelled follow-ups one prune statement deletes.
_PRUNE_BATCH = 5_000


class FollowUps:
    """Scheduling, listing, cancelling and firing follow-ups, written once over SQL."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def schedule_follow_up(
        self,
        record: FollowUpRecord,
        *,
        payload: str,
        per_task: int,
        install_max: int,
        per_person: int = DEFAULT_PER_PERSON,
    ) -> str:
        bounds = {"per_task": per_task, "install_max": install_max, "per_person": per_person}
        params = {**asdict(record), "payload": payload, "now": record.created_at, **bounds}
        crash_point("store.follow_up.before")
        scheduled = await self._db.one(sql.SCHEDULE_FOLLOW_UP, **params)
        crash_point("store.follow_up.after")
        if scheduled is not None:
            return "scheduled"
        row = await self._db.one(sql.COUNT_TASK_PENDING, task_id=record.task_id)
        if row is not None and int(row["n"]) >= per_task:
            return "task_full"
        if record.requester:
            row = await self._db.one(sql.COUNT_PERSON_PENDING, requester=record.requester)
            if row is not None and int(row["n"]) >= per_person:
                return "person_full"
        return "install_full"

    async def task_follow_ups(self, task_id: str) -> list[FollowUpRecord]:
        return [
            from_row(FollowUpRecord, r)
            for r in await self._db.fetch(sql.TASK_FOLLOW_UPS, {"task_id": task_id})
        ]

    async def get_follow_up(self, task_id: str, follow_up: str) -> FollowUpRecord | None:
        row = await self._db.one(sql.GET_FOLLOW_UP, task_id=task_id, follow_up=follow_up)
        return None if row is None else from_row(FollowUpRecord, row)

    async def cancel_follow_up(self, task_id: str, follow_up: str, *, now: float) -> bool:
        row = await self._db.one(sql.CANCEL_FOLLOW_UP, task_id=task_id, follow_up=follow_up, now=now)
        return row is not None

    async def pending_follow_ups(
        self, *, before: float | None = None, limit: int = 1000
    ) -> list[FollowUpRecord]:
        params = {"before": _FOREVER if before is None else before, "limit": limit}
        return [from_row(FollowUpRecord, r) for r in await self._db.fetch(sql.PENDING_FOLLOW_UPS, params)]

    async def next_follow_up_due(self) -> float | None:
        row = await self._db.one(sql.NEXT_FOLLOW_UP_DUE)
        return None if row is None or row["due_at"] is None else float(row["due_at"])

    async def refuse_follow_up(self, follow_up: str, *, payload: str) -> None:
        await self._db.execute(sql.REFUSE_FOLLOW_UP, {"follow_up": follow_up, "refusal": payload})

    async def fire_follow_ups(self, *, now: float, limit: int = 500) -> list[FollowUpRecord]:
        fire_id = new_id()
        row = await self._db.call(sql.FIRE_FOLLOW_UPS, {"now": now, "limit": limit, "fire_id": fire_id})
        if not int(row["fired"]):
            return []
        return [
            from_row(FollowUpRecord, r)
            for r in await self._db.fetch(sql.FIRED_FOLLOW_UPS, {"fire_id": fire_id})
        ]

    async def prune_follow_ups(self, *, older_than: float) -> int:
        deleted = 0
        while True:  # bounded batches, each its own transaction
            count = await self._db.execute(
                sql.PRUNE_FOLLOW_UPS, {"cutoff": older_than, "batch": _PRUNE_BATCH}
            )
            deleted += count
            if count < _PRUNE_BATCH:
                return deleted

    async def pending_follow_up_count(self) -> int:
        row = await self._db.one(sql.COUNT_PENDING)
        return 0 if row is None else int(row["n"])

    async def follow_up_counts(self) -> dict[FollowUpState, int]:
        counts: dict[FollowUpState, int] = {"pending": 0, "fired": 0, "cancelled": 0}
        for row in await self._db.fetch(sql.FOLLOW_UP_COUNTS, {}):
            counts[row["state"]] = int(row["n"])
        return counts
