"""The :class:`~storage.base.Store` methods a channel session uses (``channel/store.py``): the
task's handles, its effect journal, its conversation keys and enabled tools. Mixed into
:class:`~storage.sqlstore.SqlStore` over the same four primitives (``sqlcore.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from . import statements as sql
from ._rows import from_row
from .crashpoints import crash_point
from .records import EffectRecord, Fence, HandleKind, HandleRecord, LeaseMoved, StoreError
from .sqlcore import SqlCore, fence_token


class SessionMethods(SqlCore):
    """What one conversation's session writes and reads, written once over SQL."""

    # -- the task's conversation keys and tools ------------------------------------------
    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        """Map the conversation key ``(channel, ts)`` of a root the bot posted to ``task_id``.
        An existing mapping is left as it is."""
        await self._execute(sql.RECORD_ROOT, {"channel": channel, "thread_ts": ts, "task_id": task_id})

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        """Set the origin thread of a task whose origin had none yet (its first posted root)."""
        if await self._one(sql.SET_TASK_THREAD, task_id=task_id, thread_ts=thread_ts) is None:
            raise StoreError(f"unknown task {task_id!r}")

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        """Remember the deferred tools ``tool_search`` enabled, across runs."""
        row = await self._one(sql.SET_ENABLED_TOOLS, task_id=task_id, tools=self.dialect.texts(tools))
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
        """Store ``handle`` for ``(task_id, kind, ref)`` and return it; if that triple already has
        a handle, return the existing one instead (its ``authored`` is raised to True when
        ``authored`` is True, and ``data`` replaced when not ``"{}"``)."""
        row = await self._one(
            sql.MINT_HANDLE, task_id=task_id, handle=handle, kind=kind, ref=ref, authored=authored, data=data
        )
        assert row is not None  # an upsert with RETURNING yields the inserted or updated row
        return from_row(HandleRecord, row)

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        """The record of ``handle`` if it belongs to ``task_id``; None when another task's or unknown."""
        row = await self._one(sql.RESOLVE_HANDLE, task_id=task_id, handle=handle)
        return None if row is None else from_row(HandleRecord, row)

    async def find_handle(self, task_id: str, kind: HandleKind, ref: str) -> HandleRecord | None:
        """``task_id``'s handle for ``ref``, if it has one (read only: nothing is minted); its
        ``authored`` says whether the task posted or uploaded it."""
        row = await self._one(sql.FIND_HANDLE, task_id=task_id, kind=kind, ref=ref)
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
        """Journal a write before it is made (``call_id``: the model's tool call making it). Fenced:
        :class:`LeaseMoved` and nothing journalled once the lease has moved from ``fence``."""
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
        opened = await self._execute(sql.OPEN_EFFECT, params)
        crash_point("store.journal_open.after")
        if not opened:
            raise LeaseMoved(f"the lease of task {task_id!r} has moved: the write was not journalled")

    async def close_effect(self, effect_id: str, *, result: str, fence: Fence | None = None) -> None:
        """Record a write's result; fenced like :meth:`open_effect`."""
        token = None if fence is None else fence.token
        crash_point("store.journal_close.before")
        row = await self._one(sql.CLOSE_EFFECT, effect_id=effect_id, result=result, fence=token)
        crash_point("store.journal_close.after")
        if row is None:
            if fence is not None and await self.get_effect(effect_id) is not None:
                raise LeaseMoved(f"the lease of task {fence.task_id!r} has moved: {effect_id} stays open")
            raise StoreError(f"unknown effect {effect_id!r}")

    async def call_effects(self, task_id: str) -> list[EffectRecord]:
        """The task's journalled writes made by the model's tool calls (``call_id`` set), oldest
        first, open or done: what a resumed run answers its interrupted calls with."""
        return [from_row(EffectRecord, r) for r in await self._fetch(sql.CALL_EFFECTS, {"task_id": task_id})]

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        """Effects of ``task_id`` still open (attempted, result not recorded), oldest first."""
        return [from_row(EffectRecord, r) for r in await self._fetch(sql.OPEN_EFFECTS, {"task_id": task_id})]

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = await self._one(sql.GET_EFFECT, effect_id=effect_id)
        return None if row is None else from_row(EffectRecord, row)
