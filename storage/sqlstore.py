"""The :class:`~storage.base.Store` methods, written once over SQL (``statements.py``).

A backend subclasses :class:`SqlStore` and supplies its dialect and four ways to reach its
database: one statement (:meth:`~SqlStore._fetch`, :meth:`~SqlStore._execute`), one procedure
(:meth:`~SqlStore._call`, a transaction in one trip) and one script (:meth:`~SqlStore._script`,
the migration runner). Everything the store does is defined here and in ``statements.py``; the
backends hold only connection plumbing.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from . import statements as sql
from ._rows import (
    approval_from_row,
    claim_from_row,
    effect_from_row,
    handle_from_row,
    inbox_from_row,
    lease_from_row,
    stats_from_row,
    task_from_row,
    usage_from_row,
)
from .base import (
    ApprovalDecision,
    ApprovalRecord,
    ClaimOutcome,
    EffectRecord,
    FeedbackRecord,
    HandleKind,
    HandleRecord,
    InboxItem,
    LeaseRecord,
    StoreError,
    StoreStats,
    TaskRecord,
    UsageRecord,
)
from .schema import migration
from .sql import Dialect, Procedure, Row, Script, Statement

#: Most claim keys of one table a prune statement deletes: a backlog goes in short transactions.
_PRUNE_BATCH = 10_000


def new_id() -> str:
    return uuid.uuid4().hex


class SqlStore(ABC):
    """Every Store method over the backend's four primitives (module doc)."""

    dialect: ClassVar[Dialect]

    # -- what a backend supplies ---------------------------------------------------
    @abstractmethod
    async def _fetch(self, statement: Statement, params: Mapping[str, Any]) -> Sequence[Row]:
        """The rows of one statement, run on its own (atomic; autocommitted)."""

    @abstractmethod
    async def _execute(self, statement: Statement, params: Mapping[str, Any]) -> int:
        """Run one statement on its own; how many rows it changed."""

    @abstractmethod
    async def _call(self, procedure: Procedure, params: Mapping[str, Any]) -> Row:
        """The result row of ``procedure``, run as one transaction in one database trip."""

    @abstractmethod
    async def _script(self, make: Callable[[], Script]) -> Any:
        """Drive the script ``make()`` returns in one transaction; its return value. ``make`` is
        called again when the backend reruns the transaction (a generator runs only once)."""

    @abstractmethod
    async def _hold_liveness(self, owner: str) -> tuple[int, bool]:
        """Take the lock that ends with this process (or its connection): its key, and whether
        it was taken now (False: this store holds it already, under the same key)."""

    @abstractmethod
    async def _dead(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        """Which of ``(owner, lock key)`` no longer hold their liveness lock."""

    async def _forget_liveness(self, owner: str) -> None:
        """Clean up what a dead ``owner``'s liveness lock left behind (SQLite: its lock file)."""
        return None  # Postgres: nothing (the lock ended with its session)

    def _migration_prelude(self) -> Sequence[tuple[Statement, Mapping[str, Any]]]:
        """Statements the migration transaction starts with (Postgres: a lock, the schema)."""
        return ()

    @abstractmethod
    async def close(self) -> None: ...

    async def _one(self, statement: Statement, **params: Any) -> Row | None:
        rows = await self._fetch(statement, params)
        return rows[0] if rows else None

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
        return claim_from_row(await self._call(sql.CLAIM, params))

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
        return task_from_row(await self._call(sql.CREATE_TASK, params))

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._one(sql.GET_TASK, task_id=task_id)
        return None if row is None else task_from_row(row)

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
    ) -> None:
        params = {
            "task_id": task_id,
            "transcript": transcript,
            "tools": self.dialect.texts(enabled_tools),
            "consumed": self.dialect.ids(consumed),
            "summary": summary,
        }
        # An unknown task changes nothing: the update finds no row, the delete is scoped by task.
        if not (await self._call(sql.SAVE_RUN, params))["saved"]:
            raise StoreError(f"unknown task {task_id!r}")

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        row = await self._one(sql.SET_ENABLED_TOOLS, task_id=task_id, tools=self.dialect.texts(tools))
        if row is None:
            raise StoreError(f"unknown task {task_id!r}")

    # -- model usage ---------------------------------------------------------------------
    async def record_usage(self, usage: UsageRecord) -> None:
        await self._execute(
            sql.RECORD_USAGE,
            {
                "task_id": usage.task_id,
                "person": usage.person,
                "channel": usage.channel,
                "model": usage.model,
                "day": usage.day,
                "at": usage.at,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "requests": usage.requests,
            },
        )

    async def tokens_spent(self, day: str, person: str | None = None) -> int:
        row = await self._one(sql.TOKENS_SPENT, day=day, person=person)
        return int(row["spent"]) if row else 0

    async def usage_by_day(self, since: str) -> list[UsageRecord]:
        return [usage_from_row(r) for r in await self._fetch(sql.USAGE_BY_DAY, {"since": since})]

    # -- inbox ---------------------------------------------------------------------------
    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        return [inbox_from_row(r) for r in await self._fetch(sql.PENDING_INBOX, {"task_id": task_id})]

    async def tasks_needing_a_run(self, *, now: float) -> list[str]:
        return [str(r["task_id"]) for r in await self._fetch(sql.TASKS_NEEDING_A_RUN, {"now": now})]

    # -- leases --------------------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        row = await self._one(sql.ACQUIRE_LEASE, task_id=task_id, owner=owner, expires_at=now + ttl, now=now)
        return row is not None

    async def renew_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        row = await self._one(sql.RENEW_LEASE, task_id=task_id, owner=owner, expires_at=now + ttl)
        return row is not None

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        await self._execute(sql.RELEASE_LEASE, {"task_id": task_id, "owner": owner})

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        row = await self._one(sql.GET_LEASE, task_id=task_id)
        return None if row is None else lease_from_row(row)

    # -- instances -----------------------------------------------------------------------
    async def register_instance(self, owner: str, *, now: float) -> None:
        lock_key, fresh = await self._hold_liveness(owner)
        if fresh:
            await self._execute(sql.REGISTER_INSTANCE, {"owner": owner, "lock_key": lock_key, "now": now})

    async def dead_owners(self, *, now: float) -> list[str]:
        rows = await self._fetch(sql.REGISTERED_LEASE_OWNERS, {"now": now})
        if not rows:
            return []
        return await self._dead([(str(r["owner"]), int(r["lock_key"])) for r in rows])

    async def expire_leases(self, owner: str, *, now: float) -> int:
        ended = await self._execute(sql.EXPIRE_LEASES, {"owner": owner, "now": now})
        await self._execute(sql.FORGET_INSTANCE, {"owner": owner})
        await self._forget_liveness(owner)
        return ended

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
        return handle_from_row(row)

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        row = await self._one(sql.RESOLVE_HANDLE, task_id=task_id, handle=handle)
        return None if row is None else handle_from_row(row)

    # -- effect journal --------------------------------------------------------------------
    async def open_effect(self, *, effect_id: str, task_id: str, tool: str, args: str, now: float) -> None:
        params = {"effect_id": effect_id, "task_id": task_id, "tool": tool, "args": args, "now": now}
        await self._execute(sql.OPEN_EFFECT, params)

    async def close_effect(self, effect_id: str, *, result: str) -> None:
        if await self._one(sql.CLOSE_EFFECT, effect_id=effect_id, result=result) is None:
            raise StoreError(f"unknown effect {effect_id!r}")

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        return [effect_from_row(r) for r in await self._fetch(sql.OPEN_EFFECTS, {"task_id": task_id})]

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = await self._one(sql.GET_EFFECT, effect_id=effect_id)
        return None if row is None else effect_from_row(row)

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
        await self._call(sql.OPEN_APPROVAL, params)

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        row = await self._one(sql.GET_APPROVAL, approval_id=approval_id)
        return None if row is None else approval_from_row(row)

    async def task_approvals(self, task_id: str) -> list[ApprovalRecord]:
        return [approval_from_row(r) for r in await self._fetch(sql.TASK_APPROVALS, {"task_id": task_id})]

    async def has_open_approval(self, task_id: str) -> bool:
        row = await self._one(sql.HAS_OPEN_APPROVAL, task_id=task_id)
        return row is not None and bool(row["waiting"])

    async def set_approval_card(self, approval_id: str, card_ts: str) -> None:
        if await self._one(sql.SET_APPROVAL_CARD, approval_id=approval_id, card_ts=card_ts) is None:
            raise StoreError(f"unknown approval {approval_id!r}")

    async def decide_approval(
        self, approval_id: str, *, decision: ApprovalDecision, user_id: str, payload: str, now: float
    ) -> bool:
        params = {
            "approval_id": approval_id,
            "decision": decision,
            "user_id": user_id,
            "now": now,
            "payload": payload,
            "decision_id": new_id(),
        }
        return bool((await self._call(sql.DECIDE, params))["won"])

    async def expired_approvals(self, *, before: float, limit: int = 100) -> list[ApprovalRecord]:
        rows = await self._fetch(sql.EXPIRED_APPROVALS, {"before": before, "limit": limit})
        return [approval_from_row(r) for r in rows]

    async def start_execution(self, approval_id: str, *, now: float) -> bool:
        return await self._one(sql.START_EXECUTION, approval_id=approval_id, now=now) is not None

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
        await self._execute(sql.RECORD_FEEDBACK, params)

    async def pending_feedback(self, task_id: str) -> list[FeedbackRecord]:
        rows = await self._fetch(sql.PENDING_FEEDBACK, {"task_id": task_id})
        return [
            FeedbackRecord(
                task_id=str(r["task_id"]),
                message=str(r["message"]),
                user_id=str(r["user_id"]),
                user_name=str(r["user_name"]),
                kind="positive" if r["kind"] == "positive" else "negative",
                clicked_at=float(r["clicked_at"]),
            )
            for r in rows
        ]

    async def mark_feedback_shown(self, task_id: str, *, upto: float) -> None:
        await self._execute(sql.MARK_FEEDBACK_SHOWN, {"task_id": task_id, "upto": upto})

    async def stats(self) -> StoreStats:
        row = await self._one(sql.STATS)
        assert row is not None  # an aggregate query always yields one row
        return stats_from_row(row)
