"""The statement group of stops and agent-session titles (``stop_statements.py``), over one
:class:`~storage.sqlcore.Database`: the store hands each of these calls here; each method's contract is
the docstring of the :class:`~storage.sqlstore.SqlStore` method of the same name."""

from __future__ import annotations

import json
from collections.abc import Sequence

from . import stop_statements as sql
from ._rows import from_row
from .crashpoints import crash_point
from .records import Fence, LeaseMoved, StopRecord
from .sqlcore import Database, fence_token


class Stops:
    """A person's Stop on a run in progress, and the titles of agent sessions."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def request_stop(self, channel: str, thread_ts: str, *, by_user: str, now: float) -> str | None:
        params = {"channel": channel, "thread_ts": thread_ts, "by_user": by_user, "now": now}
        rows = await self._db.fetch(sql.REQUEST_STOP, params)
        crash_point("store.stop.after")
        return str(rows[0]["task_id"]) if rows else None

    async def stop_of(self, task_id: str) -> StopRecord | None:
        row = await self._db.one(sql.GET_STOP, task_id=task_id)
        return None if row is None else from_row(StopRecord, row)

    async def stops_of(self, task_ids: Sequence[str]) -> list[StopRecord]:
        if not task_ids:
            return []
        wanted = set(task_ids)
        rows = await self._db.fetch(sql.ALL_STOPS, {})
        return [stop for r in rows if (stop := from_row(StopRecord, r)).task_id in wanted]

    async def settle_stop(
        self, task_id: str, *, transcript: bytes | None, consumed: Sequence[int], fence: Fence | None
    ) -> bool:
        params = {
            "task_id": task_id,
            "transcript": transcript,
            "consumed": self._db.dialect.ids(consumed),
            "stopped_result": json.dumps({"stopped": True}),
            "fence": fence_token(task_id, fence),
        }
        crash_point("store.settle_stop.before")
        row = await self._db.call(sql.SETTLE_STOP, params)
        crash_point("store.settle_stop.after")
        if not row["fenced"]:
            raise LeaseMoved(f"the lease of task {task_id!r} has moved: the stop was not settled")
        return bool(row["settled"])

    async def session_title(self, task_id: str) -> str:
        row = await self._db.one(sql.GET_SESSION_TITLE, task_id=task_id)
        return "" if row is None else str(row["title"])

    async def set_session_title(self, task_id: str, title: str, *, now: float) -> None:
        await self._db.fetch(sql.SET_SESSION_TITLE, {"task_id": task_id, "title": title, "now": now})

    async def rename_session(self, channel: str, thread_ts: str, title: str, *, now: float) -> str | None:
        params = {"channel": channel, "thread_ts": thread_ts, "title": title, "now": now}
        rows = await self._db.fetch(sql.RENAME_SESSION, params)
        return str(rows[0]["task_id"]) if rows else None
