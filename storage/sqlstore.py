"""The :class:`~storage.base.Store` methods, written once over SQL (``statements.py``).

A backend subclasses :class:`SqlStore` and supplies its dialect and four ways to reach its
database: one statement (:meth:`~SqlStore._fetch`, :meth:`~SqlStore._execute`), one procedure
(:meth:`~SqlStore._call`, a transaction in one trip) and one script (:meth:`~SqlStore._script`,
the migration runner). Everything the store does is defined here and in ``statements.py``; the
backends hold only connection plumbing.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import statements as sql
from ._rows import from_row, stats_from_row
from .base import (
    ClaimOutcome,
    EffectRecord,
    Fence,
    HandleKind,
    HandleRecord,
    InboxItem,
    InstanceLook,
    LeaseMoved,
    LeaseRecord,
    StoreError,
    StoreStats,
    TaskRecord,
)
from .crashpoints import crash_point
from .schema import migration
from .sqlcore import new_id
from .sqlstore_asks import AskMethods
from .sqlstore_follow_ups import FollowUpMethods
from .sqlstore_people import PeopleMethods

#: Most claim keys of one table a prune statement deletes: a backlog goes in short transactions.
_PRUNE_BATCH = 10_000


class SqlStore(PeopleMethods, FollowUpMethods, AskMethods):
    """Every Store method over the backend's four primitives (module doc)."""

    # -- lifecycle -------------------------------------------------------------------
    async def migrate(self) -> None:
        prelude = self._migration_prelude()
        await self._script(lambda: migration(self.dialect, prelude))

    async def ping(self) -> None:
        await self._fetch(sql.PING, {})

    # -- ingress ---------------------------------------------------------------------
    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        row = await self._one(sql.FIND_TASK, channel=channel, thread_ts=thread_ts)
        return None if row is None else str(row["task_id"])

    async def claim_message(
        self,
        *,
        event_id: str,
        channel: str,
        ts: str,
        thread_ts: str,
        create: bool,
        payload: str,
        now: float,
    ) -> ClaimOutcome:
        params = {
            "event_id": event_id,
            "channel": channel,
            "ts": ts,
            "thread_ts": thread_ts,
            "create": create,
            "payload": payload,
            "now": now,
            "claim_id": new_id(),
        }
        crash_point("store.claim.before")
        outcome = from_row(ClaimOutcome, await self._call(sql.CLAIM, params))
        crash_point("store.claim.after")
        return outcome

    async def prune_claims(self, *, older_than: float) -> int:
        # One statement per batch, each its own transaction: between batches other writers get the
        # database (SQLite: its write lock; Postgres: the rows, and SKIP LOCKED splits them between
        # instances pruning at once).
        deleted = 0
        for statement in sql.PRUNE:
            while True:
                count = await self._execute(statement, {"cutoff": older_than, "batch": _PRUNE_BATCH})
                deleted += count
                if count < _PRUNE_BATCH:  # done, or the rest is locked by a concurrent prune
                    break
        return deleted

    # -- tasks -------------------------------------------------------------------------
    async def create_task(self, *, channel: str, thread_ts: str, now: float) -> TaskRecord:
        params = {"channel": channel, "thread_ts": thread_ts, "now": now, "task_id": new_id()}
        return from_row(TaskRecord, await self._call(sql.CREATE_TASK, params))

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._one(sql.GET_TASK, task_id=task_id)
        return None if row is None else from_row(TaskRecord, row)

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        if await self._one(sql.SET_TASK_THREAD, task_id=task_id, thread_ts=thread_ts) is None:
            raise StoreError(f"unknown task {task_id!r}")

    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        await self._execute(sql.RECORD_ROOT, {"channel": channel, "thread_ts": ts, "task_id": task_id})

    async def save_run(
        self,
        task_id: str,
        *,
        transcript: bytes,
        consumed: Sequence[int],
        enabled_tools: Sequence[str] | None = None,
        summary: str | None = None,
        fence: Fence | None = None,
        feedback_upto: float | None = None,
    ) -> None:
        await self._save(
            task_id, transcript, consumed, enabled_tools, summary, fence, False, None, feedback_upto
        )

    async def checkpoint(
        self,
        task_id: str,
        *,
        transcript: bytes,
        consumed: Sequence[int],
        fence: Fence | None,
        close: tuple[str, str] | None = None,
        feedback_upto: float | None = None,
        summary: str | None = None,
    ) -> None:
        await self._save(task_id, transcript, consumed, None, summary, fence, True, close, feedback_upto)

    async def _save(
        self,
        task_id: str,
        transcript: bytes,
        consumed: Sequence[int],
        enabled_tools: Sequence[str] | None,
        summary: str | None,
        fence: Fence | None,
        run_open: bool,
        close: tuple[str, str] | None,
        feedback_upto: float | None,
    ) -> None:
        params = {
            "task_id": task_id,
            "transcript": transcript,
            "tools": self.dialect.texts(enabled_tools),
            "consumed": self.dialect.ids(consumed),
            "summary": summary,
            "run_open": run_open,
            "close_id": close[0] if close else None,
            "close_result": close[1] if close else None,
            "feedback_upto": feedback_upto,
            "fence": _token(task_id, fence),
        }
        kind = "checkpoint" if run_open else "save"
        crash_point(f"store.{kind}.before")
        if consumed:
            crash_point("store.consume.before")
        row = await self._call(sql.SAVE_RUN, params)
        if consumed:
            crash_point("store.consume.after")
        crash_point(f"store.{kind}.after")
        # An unknown task changes nothing: the update finds no row, the delete is scoped by task.
        if not row["saved"]:
            raise StoreError(f"unknown task {task_id!r}")
        if not row["fenced"]:
            raise LeaseMoved(f"the lease of task {task_id!r} has moved: nothing was saved")

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        row = await self._one(sql.SET_ENABLED_TOOLS, task_id=task_id, tools=self.dialect.texts(tools))
        if row is None:
            raise StoreError(f"unknown task {task_id!r}")

    # -- inbox ---------------------------------------------------------------------------
    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        return [from_row(InboxItem, r) for r in await self._fetch(sql.PENDING_INBOX, {"task_id": task_id})]

    async def tasks_needing_a_run(self, *, now: float) -> list[str]:
        return [str(r["task_id"]) for r in await self._fetch(sql.TASKS_NEEDING_A_RUN, {"now": now})]

    # -- leases --------------------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        return await self.take_lease(task_id, owner=owner, ttl=ttl, now=now) is not None

    async def take_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> Fence | None:
        params = {"task_id": task_id, "owner": owner, "expires_at": now + ttl, "now": now, "token": new_id()}
        row = await self._one(sql.ACQUIRE_LEASE, **params)
        return None if row is None else Fence(task_id, owner, str(row["token"]))

    async def renew_lease(
        self, task_id: str, *, owner: str, ttl: float, now: float, fence: Fence | None = None
    ) -> bool:
        token = None if fence is None else fence.token
        row = await self._one(
            sql.RENEW_LEASE, task_id=task_id, owner=owner, expires_at=now + ttl, token=token
        )
        return row is not None

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        await self._execute(sql.RELEASE_LEASE, {"task_id": task_id, "owner": owner})

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        row = await self._one(sql.GET_LEASE, task_id=task_id)
        return None if row is None else from_row(LeaseRecord, row)

    # -- instances -----------------------------------------------------------------------
    #: Seconds an owner's liveness lock must be missing before it counts as dead (``Store`` doc).
    liveness_grace: float = 0.0

    async def register_instance(self, owner: str, *, now: float) -> bool:
        lock_key, fresh = await self._hold_liveness(owner)
        if fresh:
            await self._execute(sql.REGISTER_INSTANCE, {"owner": owner, "lock_key": lock_key, "now": now})
        return fresh

    async def dead_owners(self, *, now: float) -> list[str]:
        return list((await self.look_at_instances("", now=now)).missing)

    async def look_at_instances(self, owner: str, *, now: float) -> InstanceLook:
        rows = await self._fetch(sql.REGISTERED_INSTANCES, {"now": now})
        keys = [(str(r["owner"]), int(r["lock_key"])) for r in rows]
        session, held = await self._lock_states(owner, keys)
        leasing = [str(r["owner"]) for r in rows if r["leasing"]]
        live = frozenset(o for o, alive in held.items() if alive)
        return InstanceLook(session, live, tuple(o for o in leasing if held.get(o) is False))

    async def expire_leases(self, owner: str, *, now: float) -> int:
        ended = await self._execute(sql.EXPIRE_LEASES, {"owner": owner, "now": now})
        await self._execute(sql.FORGET_INSTANCE, {"owner": owner})
        await self._forget_liveness(owner)
        return ended

    async def prune_instances(self, *, now: float) -> int:
        rows = await self._fetch(sql.IDLE_INSTANCES, {"now": now})
        keys = {str(r["owner"]): int(r["lock_key"]) for r in rows}
        pruned = 0
        for owner in await self._gone(list(keys.items())):
            params = {"owner": owner, "lock_key": keys[owner], "now": now}
            if await self._execute(sql.FORGET_IDLE_INSTANCE, params):
                await self._forget_liveness(owner)
                pruned += 1
        return pruned

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
        row = await self._one(
            sql.MINT_HANDLE, task_id=task_id, handle=handle, kind=kind, ref=ref, authored=authored, data=data
        )
        assert row is not None  # an upsert with RETURNING yields the inserted or updated row
        return from_row(HandleRecord, row)

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        row = await self._one(sql.RESOLVE_HANDLE, task_id=task_id, handle=handle)
        return None if row is None else from_row(HandleRecord, row)

    async def find_handle(self, task_id: str, kind: HandleKind, ref: str) -> HandleRecord | None:
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
        params = {
            "effect_id": effect_id,
            "task_id": task_id,
            "tool": tool,
            "args": args,
            "now": now,
            "call_id": call_id,
            "fence": _token(task_id, fence),
        }
        crash_point("store.journal_open.before")
        opened = await self._execute(sql.OPEN_EFFECT, params)
        crash_point("store.journal_open.after")
        if not opened:
            raise LeaseMoved(f"the lease of task {task_id!r} has moved: the write was not journalled")

    async def close_effect(self, effect_id: str, *, result: str, fence: Fence | None = None) -> None:
        token = None if fence is None else fence.token
        crash_point("store.journal_close.before")
        row = await self._one(sql.CLOSE_EFFECT, effect_id=effect_id, result=result, fence=token)
        crash_point("store.journal_close.after")
        if row is None:
            if fence is not None and await self.get_effect(effect_id) is not None:
                raise LeaseMoved(f"the lease of task {fence.task_id!r} has moved: {effect_id} stays open")
            raise StoreError(f"unknown effect {effect_id!r}")

    async def call_effects(self, task_id: str) -> list[EffectRecord]:
        return [from_row(EffectRecord, r) for r in await self._fetch(sql.CALL_EFFECTS, {"task_id": task_id})]

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        return [from_row(EffectRecord, r) for r in await self._fetch(sql.OPEN_EFFECTS, {"task_id": task_id})]

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = await self._one(sql.GET_EFFECT, effect_id=effect_id)
        return None if row is None else from_row(EffectRecord, row)

    async def stats(self) -> StoreStats:
        row = await self._one(sql.STATS)
        assert row is not None  # an aggregate query always yields one row
        return stats_from_row(row)


def _token(task_id: str, fence: Fence | None) -> str | None:
    if fence is None:
        return None
    if fence.task_id != task_id:
        raise StoreError(f"a fence of task {fence.task_id!r} cannot guard a write of task {task_id!r}")
    return fence.token
