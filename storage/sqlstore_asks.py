"""The :class:`~storage.base.Store` methods of asks (``ask_statements.py``), mixed into ``SqlStore``."""

from __future__ import annotations

import json

from . import ask_statements as sql
from .ask_records import AskDecision, AskRecord
from .sql import Row
from .sqlcore import SqlCore, new_id


def ask_from_row(row: Row) -> AskRecord:
    decided_at = row["decided_at"]
    options = json.loads(row["options"] or "[]")
    return AskRecord(
        ask_id=row["ask_id"],
        task_id=row["task_id"],
        kind=row["kind"],
        text=row["text"],
        details=row["details"],
        options=tuple(str(o) for o in options),
        only_requester=bool(row["only_requester"]),
        requester=row["requester"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        card_ts=row["card_ts"],
        created_at=float(row["created_at"]),
        decision=row["decision"],
        answer=row["answer"],
        decided_by=row["decided_by"],
        decided_at=None if decided_at is None else float(decided_at),
    )


class AskMethods(SqlCore):
    """Questions and approvals the agent asked, written once over SQL."""

    async def open_ask(self, ask: AskRecord) -> None:
        await self._fetch(
            sql.OPEN_ASK,
            {
                "ask_id": ask.ask_id,
                "task_id": ask.task_id,
                "kind": ask.kind,
                "text": ask.text,
                "details": ask.details,
                "options": json.dumps(list(ask.options), ensure_ascii=False),
                "only_requester": ask.only_requester,
                "requester": ask.requester,
                "channel": ask.channel,
                "thread_ts": ask.thread_ts,
                "now": ask.created_at,
            },
        )

    async def get_ask(self, ask_id: str) -> AskRecord | None:
        row = await self._one(sql.GET_ASK, ask_id=ask_id)
        return None if row is None else ask_from_row(row)

    async def open_asks(self, task_id: str) -> list[AskRecord]:
        return [ask_from_row(r) for r in await self._fetch(sql.OPEN_TASK_ASKS, {"task_id": task_id})]

    async def set_ask_card(self, ask_id: str, card_ts: str) -> None:
        await self._one(sql.SET_ASK_CARD, ask_id=ask_id, card_ts=card_ts)

    async def decide_ask(
        self, ask_id: str, *, decision: AskDecision, answer: str, user_id: str, payload: str, now: float
    ) -> bool:
        params = {
            "ask_id": ask_id,
            "decision": decision,
            "answer": answer,
            "user_id": user_id,
            "now": now,
            "payload": payload,
            "decision_id": new_id(),
        }
        return bool((await self._call(sql.DECIDE_ASK, params))["won"])

    async def expired_asks(self, *, before: float, limit: int = 100) -> list[AskRecord]:
        rows = await self._fetch(sql.EXPIRED_ASKS, {"before": before, "limit": limit})
        return [ask_from_row(r) for r in rows]
