"""The statement group of asks (``ask_statements.py``), over one :class:`~storage.sqlcore.Database`:
the store hands each of these calls here; each method's contract is the docstring of the
:class:`~storage.sqlstore.SqlStore` method of the same name."""

from __future__ import annotations

import json
from dataclasses import asdict

from . import ask_statements as sql
from ._rows import from_row
from .ask_records import AskDecision, AskRecord
from .crashpoints import crash_point
from .sqlcore import Database, decide


class Asks:
    """Questions and approvals the agent asked, written once over SQL."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def open_ask(self, ask: AskRecord) -> None:
        options = json.dumps(list(ask.options), ensure_ascii=False)
        crash_point("store.ask.before")
        await self._db.fetch(sql.OPEN_ASK, {**asdict(ask), "options": options, "now": ask.created_at})
        crash_point("store.ask.after")

    async def get_ask(self, ask_id: str) -> AskRecord | None:
        row = await self._db.one(sql.GET_ASK, ask_id=ask_id)
        return None if row is None else from_row(AskRecord, row)

    async def open_asks(self, task_id: str) -> list[AskRecord]:
        return [
            from_row(AskRecord, r) for r in await self._db.fetch(sql.OPEN_TASK_ASKS, {"task_id": task_id})
        ]

    async def set_ask_card(self, ask_id: str, card_ts: str) -> None:
        await self._db.one(sql.SET_ASK_CARD, ask_id=ask_id, card_ts=card_ts)

    async def decide_ask(
        self, ask_id: str, *, decision: AskDecision, answer: str, user_id: str, payload: str, now: float
    ) -> bool:
        decided = {"decision": decision, "user_id": user_id, "now": now, "payload": payload}
        return await decide(self._db, sql.DECIDE_ASK, ask_id=ask_id, answer=answer, **decided)

    async def expired_asks(self, *, before: float, limit: int = 100) -> list[AskRecord]:
        rows = await self._db.fetch(sql.EXPIRED_ASKS, {"before": before, "limit": limit})
        return [from_row(AskRecord, r) for r in rows]
