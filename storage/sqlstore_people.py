"""The :class:`~storage.base.Store` methods about people: model usage, approvals, feedback.

Mixed into :class:`~storage.sqlstore.SqlStore`, over the same four primitives (``sqlcore.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from . import statements as sql
from ._rows import from_row
from .records import ApprovalDecision, ApprovalRecord, FeedbackRecord, StoreError, UsageRecord
from .sqlcore import SqlCore


class PeopleMethods(SqlCore):
    """Usage, approvals and feedback, written once over SQL."""

    # -- model usage ---------------------------------------------------------------------
    async def record_usage(self, usage: UsageRecord) -> None:
        """Append one model request's usage (``task_id``, ``model`` and ``at`` set)."""
        await self._execute(sql.RECORD_USAGE, asdict(usage))

    async def tokens_spent(self, day: str, person: str | None = None) -> int:
        """Input plus output tokens of UTC ``day``: everyone's, or ``person``'s."""
        row = await self._one(sql.TOKENS_SPENT, day=day, person=person)
        return int(row["spent"]) if row else 0

    async def usage_by_day(self, since: str) -> list[UsageRecord]:
        """Usage summed by day, person and channel from UTC day ``since`` on, oldest first."""
        return [from_row(UsageRecord, r) for r in await self._fetch(sql.USAGE_BY_DAY, {"since": since})]

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
        """Record an open approval and open the effect ``card_effect`` (tool ``approval_card``,
        args ``{"approval_id": ...}``) for its card, in one transaction."""
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
        await self._call(sql.OPEN_APPROVAL, params)

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        row = await self._one(sql.GET_APPROVAL, approval_id=approval_id)
        return None if row is None else from_row(ApprovalRecord, row)

    async def task_approvals(self, task_id: str) -> list[ApprovalRecord]:
        """Every approval of ``task_id``, oldest first."""
        return [
            from_row(ApprovalRecord, r) for r in await self._fetch(sql.TASK_APPROVALS, {"task_id": task_id})
        ]

    async def has_open_approval(self, task_id: str) -> bool:
        """Some approval of ``task_id`` waits for a decision (the task waits with it)."""
        row = await self._one(sql.HAS_OPEN_APPROVAL, task_id=task_id)
        return row is not None and bool(row["waiting"])

    async def set_approval_card(self, approval_id: str, card_ts: str) -> None:
        if await self._one(sql.SET_APPROVAL_CARD, approval_id=approval_id, card_ts=card_ts) is None:
            raise StoreError(f"unknown approval {approval_id!r}")

    async def decide_approval(
        self, approval_id: str, *, decision: ApprovalDecision, user_id: str, payload: str, now: float
    ) -> bool:
        """Decide an open approval and append ``payload`` to its task's inbox, in one transaction.
        True for the one call that decided it; False when it was decided before or is unknown.
        Atomic across instances: of concurrent deciders exactly one gets True."""
        decided = {"decision": decision, "user_id": user_id, "now": now, "payload": payload}
        return await self._decide(sql.DECIDE, approval_id=approval_id, **decided)

    async def expired_approvals(self, *, before: float, limit: int = 100) -> list[ApprovalRecord]:
        """Open approvals created before ``before``, oldest first."""
        rows = await self._fetch(sql.EXPIRED_APPROVALS, {"before": before, "limit": limit})
        return [from_row(ApprovalRecord, r) for r in rows]

    async def start_execution(self, approval_id: str, *, now: float) -> bool:
        """Mark an approved call as started; True only the first time (the call may run)."""
        return await self._one(sql.START_EXECUTION, approval_id=approval_id, now=now) is not None

    # -- feedback -----------------------------------------------------------------------
    async def record_feedback(
        self, *, task_id: str, message: str, user_id: str, user_name: str, kind: str, now: float
    ) -> None:
        """Store ``user_id``'s feedback on ``message`` of ``task_id`` (``positive``/``negative``),
        replacing their earlier click on that message; it is not shown yet."""
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
        await self._execute(sql.RECORD_FEEDBACK, params)

    async def pending_feedback(self, task_id: str) -> list[FeedbackRecord]:
        """The task's feedback not shown to the model yet, oldest click first."""
        rows = await self._fetch(sql.PENDING_FEEDBACK, {"task_id": task_id})
        return [from_row(FeedbackRecord, r) for r in rows]

    async def mark_feedback_shown(self, task_id: str, *, upto: float) -> None:
        """Mark the task's feedback clicked at or before ``upto`` as shown."""
        await self._execute(sql.MARK_FEEDBACK_SHOWN, {"task_id": task_id, "upto": upto})
