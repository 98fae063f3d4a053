"""The statement group a channel session uses (``storage.base.SessionStore``): the task's handles, its
effect journal, its conversation keys and enabled tools, over one
:class:`~storage.sqlcore.Database`: the store hands each of these calls here; each method's contract
is the docstring of the :class:`~storage.sqlstore.SqlStore` method of the same name."""

from __future__ import annotations

from collections.abc import Sequence

from . import statements as sql
from ._rows import from_row
from .crashpoints import crash_point
from .records import EffectRecord, Fence, HandleKind, HandleRecord, LeaseMoved, StoreError
from .sqlcore import Database, fence_token


class Sessions:
    """What one conversation's session writes and reads, written once over SQL."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- the task's conversation keys and tools ------------------------------------------
    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        await self._db.execute(sql.RECORD_ROOT, {"channel": channel, "thread_ts": ts, "task_id": task_id})

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        if await self._db.one(sql.SET_TASK_THREAD, task_id=task_id, thread_ts=thread_ts) is None:
            raise StoreError(f"unknown task {task_id!r}")

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        row = await self._db.one(sql.SET_ENABLED_TOOLS, task_id=task_id, tools=self._db.dialect.texts(tools))
        if row is None:
            raise StoreError(f"unknown task {task_id!r}")

    # -- handles -------------------------------------------------------------------------
    async def mint_handle(
        self,
        *,
        task_id: str,
        kind: HandleKind,
        ref: str,
        handle: str,
        authored: bool = False,
        data: str = "{}",
    ) -> HandleRecord:
        crash_point("store.handle.before")
        row = await self._db.one(
            sql.MINT_HANDLE, task_id=task_id, handle=handle, kind=kind, ref=ref, authored=authored, data=data
        )
        crash_point("store.handle.after")
        assert row is not None  # an upsert with RETURNING yields the inserted or updated row
        return from_row(HandleRecord, row)

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        row = await self._db.one(sql.RESOLVE_HANDLE, task_id=task_id, handle=handle)
        return None if row is None else from_row(HandleRecord, row)

    async def find_handle(self, task_id: str, kind: HandleKind, ref: str) -> HandleRecord | None:
        row = await self._db.one(sql.FIND_HANDLE, task_id=task_id, kind=kind, ref=ref)
        return None if row is None else from_row(HandleRecord, row)

    # -- effect journal --------------------------------------------------------------------
    async def open_effect(
        self,
        *,
        effect_id: str,
        task_id: str,
        tool: str,
        args: str,
        now: float,
        call_id: str = "",
        fence: Fence | None = None,
    ) -> None:
        params = {
            "effect_id": effect_id,
            "task_id": task_id,
            "tool": tool,
            "args": args,
            "now": now,
            "call_id": call_id,
            "fence": fence_token(task_id, fence),
        }
        crash_point("store.journal_open.before")
        opened = await self._db.execute(sql.OPEN_EFFECT, params)
        crash_point("store.journal_open.after")
        if not opened:
            raise LeaseMoved(f"the lease of task {task_id!r} has moved: the write was not journalled")

    async def close_effect(self, effect_id: str, *, result: str, fence: Fence | None = None) -> None:
        token = None if fence is None else fence.token
        crash_point("store.journal_close.before")
        row = await self._db.one(sql.CLOSE_EFFECT, effect_id=effect_id, result=result, fence=token)
        crash_point("store.journal_close.after")
        if row is None:
            if fence is not None and await self.get_effect(effect_id) is not None:
                raise LeaseMoved(f"the lease of task {fence.task_id!r} has moved: {effect_id} stays open")
            raise StoreError(f"unknown effect {effect_id!r}")

    async def call_effects(self, task_id: str) -> list[EffectRecord]:
        return [
            from_row(EffectRecord, r) for r in await self._db.fetch(sql.CALL_EFFECTS, {"task_id": task_id})
        ]

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        return [
            from_row(EffectRecord, r) for r in await self._db.fetch(sql.OPEN_EFFECTS, {"task_id": task_id})
        ]

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = await self._db.one(sql.GET_EFFECT, effect_id=effect_id)
        return None if row is None else from_row(EffectRecord, row)
