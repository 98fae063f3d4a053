"""The statement group about people (model usage, approvals, feedback), over one
:class:`~storage.sqlcore.Database`: the store hands each of these calls here; each method's contract
is the docstring of the :class:`~storage.sqlstore.SqlStore` method of the same name."""

from __future__ import annotations

import json
from dataclasses import asdict

from . import statements as sql
from ._rows import from_row
from .crashpoints import crash_point
from .records import ApprovalDecision, ApprovalRecord, FeedbackRecord, PersonTask, StoreError, UsageRecord
from .sqlcore import Database, decide


class People:
    """Usage, approvals and feedback, written once over SQL."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- model usage ---------------------------------------------------------------------
    async def record_usage(self, usage: UsageRecord) -> None:
        await self._db.execute(sql.RECORD_USAGE, asdict(usage))

    async def tokens_spent(self, day: str, person: str | None = None) -> int:
        row = await self._db.one(sql.TOKENS_SPENT, day=day, person=person)
        return int(row["spent"]) if row else 0

    async def recent_requester(self, task_id: str, *, since: str) -> str:
        row = await self._db.one(sql.RECENT_REQUESTER, task_id=task_id, since=since)
        return str(row["person"]) if row else ""

    async def usage_by_day(self, since: str) -> list[UsageRecord]:
        return [from_row(UsageRecord, r) for r in await self._db.fetch(sql.USAGE_BY_DAY, {"since": since})]

    async def person_usage_by_model(self, person: str, day: str) -> list[UsageRecord]:
        params = {"person": person, "day": day}
        return [from_row(UsageRecord, r) for r in await self._db.fetch(sql.PERSON_USAGE_BY_MODEL, params)]

    async def person_tasks(self, person: str, *, since: str, limit: int) -> list[PersonTask]:
        params = {"person": person, "since": since, "limit": limit}
        return [from_row(PersonTask, r) for r in await self._db.fetch(sql.PERSON_TASKS, params)]

    # -- approvals -------------------------------------------------------------------------
    async def open_approval(
        self,
        *,
        approval_id: str,
        task_id: str,
        tool_call_id: str,
        tool: str,
        args: str,
        requester: str,
        channel: str,
        thread_ts: str,
        card_effect: str,
        now: float,
    ) -> None:
        params = {
            "approval_id": approval_id,
            "task_id": task_id,
            "tool_call_id": tool_call_id,
            "tool": tool,
            "args": args,
            "requester": requester,
            "channel": channel,
            "thread_ts": thread_ts,
            "card_effect": card_effect,
            "card_args": json.dumps({"approval_id": approval_id}),
            "now": now,
        }
        crash_point("store.approval.before")
        await self._db.call(sql.OPEN_APPROVAL, params)
        crash_point("store.approval.after")

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        row = await self._db.one(sql.GET_APPROVAL, approval_id=approval_id)
        return None if row is None else from_row(ApprovalRecord, row)

    async def task_approvals(self, task_id: str) -> list[ApprovalRecord]:
        return [
            from_row(ApprovalRecord, r)
            for r in await self._db.fetch(sql.TASK_APPROVALS, {"task_id": task_id})
        ]

    async def has_open_approval(self, task_id: str) -> bool:
        row = await self._db.one(sql.HAS_OPEN_APPROVAL, task_id=task_id)
        return row is not None and bool(row["waiting"])

    async def set_approval_card(self, approval_id: str, card_ts: str) -> None:
        if await self._db.one(sql.SET_APPROVAL_CARD, approval_id=approval_id, card_ts=card_ts) is None:
            raise StoreError(f"unknown approval {approval_id!r}")

    async def decide_approval(
        self, approval_id: str, *, decision: ApprovalDecision, user_id: str, payload: str, now: float
    ) -> bool:
        decided = {"decision": decision, "user_id": user_id, "now": now, "payload": payload}
        return await decide(self._db, sql.DECIDE, approval_id=approval_id, **decided)

    async def expired_approvals(self, *, before: float, limit: int = 100) -> list[ApprovalRecord]:
        rows = await self._db.fetch(sql.EXPIRED_APPROVALS, {"before": before, "limit": limit})
        return [from_row(ApprovalRecord, r) for r in rows]

    async def start_execution(self, approval_id: str, *, now: float) -> bool:
        return await self._db.one(sql.START_EXECUTION, approval_id=approval_id, now=now) is not None

    # -- feedback -----------------------------------------------------------------------
    async def record_feedback(
        self, *, task_id: str, message: str, user_id: str, user_name: str, kind: str, now: float
    ) -> None:
        if kind not in ("positive", "negative"):
            raise StoreError(f"unknown feedback kind {kind!r}")
        params = {
            "task_id": task_id,
            "message": message,
            "user_id": user_id,
            "user_name": user_name,
            "kind": kind,
            "now": now,
        }
        await self._db.execute(sql.RECORD_FEEDBACK, params)

    async def pending_feedback(self, task_id: str) -> list[FeedbackRecord]:
        rows = await self._db.fetch(sql.PENDING_FEEDBACK, {"task_id": task_id})
        return [from_row(FeedbackRecord, r) for r in rows]

    async def mark_feedback_shown(self, task_id: str, *, upto: float) -> None:
        await self._db.execute(sql.MARK_FEEDBACK_SHOWN, {"task_id": task_id, "upto": upto})
