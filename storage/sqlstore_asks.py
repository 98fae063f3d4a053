"""The :class:`~storage.base.Store` methods of asks (``ask_statements.py``), mixed into ``SqlStore``."""

from __future__ import annotations

import json
from dataclasses import asdict

from . import ask_statements as sql
from ._rows import from_row
from .ask_records import AskDecision, AskRecord
from .sqlcore import SqlCore


class AskMethods(SqlCore):
    """Questions and approvals the agent asked, written once over SQL."""

    async def open_ask(self, ask: AskRecord) -> None:
        """Record an open ask (its card is posted after, through the task's journal)."""
        options = json.dumps(list(ask.options), ensure_ascii=False)
        await self._fetch(sql.OPEN_ASK, {**asdict(ask), "options": options, "now": ask.created_at})

    async def get_ask(self, ask_id: str) -> AskRecord | None:
        row = await self._one(sql.GET_ASK, ask_id=ask_id)
        return None if row is None else from_row(AskRecord, row)

    async def open_asks(self, task_id: str) -> list[AskRecord]:
        """The task's undecided asks, oldest first."""
        return [from_row(AskRecord, r) for r in await self._fetch(sql.OPEN_TASK_ASKS, {"task_id": task_id})]

    async def set_ask_card(self, ask_id: str, card_ts: str) -> None:
        await self._one(sql.SET_ASK_CARD, ask_id=ask_id, card_ts=card_ts)

    async def decide_ask(
        self, ask_id: str, *, decision: AskDecision, answer: str, user_id: str, payload: str, now: float
    ) -> bool:
        """Decide an open ask and (unless ``payload`` is empty) append ``payload`` to its task's
        inbox, in one transaction; True for the one call that decided it, across instances."""
        decided = {"decision": decision, "user_id": user_id, "now": now, "payload": payload}
        return await self._decide(sql.DECIDE_ASK, ask_id=ask_id, answer=answer, **decided)

    async def expired_asks(self, *, before: float, limit: int = 100) -> list[AskRecord]:
        """Open asks created before ``before``, oldest first."""
        rows = await self._fetch(sql.EXPIRED_ASKS, {"before": before, "limit": limit})
        return [from_row(AskRecord, r) for r in rows]
