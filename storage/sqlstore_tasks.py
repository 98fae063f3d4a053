"""The statement group of ingress, tasks and their inbox, over one :class:`~storage.sqlcore.Database`:
the store hands each of these calls here; each method's contract is the docstring of the
:class:`~storage.sqlstore.SqlStore` method of the same name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import ask_statements as ask_sql
from . import statements as sql
from . import stop_statements as stop_sql
from ._rows import from_row
from .ask_records import AskRecord
from .crashpoints import crash_point
from .records import (
    ClaimOutcome,
    EffectRecord,
    FeedbackRecord,
    Fence,
    InboxItem,
    LeaseMoved,
    StopRecord,
    StoreError,
    TaskRecord,
)
from .run_records import RunState
from .sql import Row, Statement
from .sqlcore import Database, fence_token, new_id
from .sqlstore_leases import acquisition

#: Most claim keys of one table a prune statement deletes: a backlog goes in short transactions.
_PRUNE_BATCH = 10_000


def _state_of(rows: Sequence[Sequence[Row]]) -> RunState:
    """The :class:`RunState` of the rows of ``Tasks._state_reads``, in order."""
    items, effects, tasks, waiting, asks, feedback, stops = rows
    return RunState(
        [from_row(InboxItem, r) for r in items],
        [from_row(EffectRecord, r) for r in effects],
        from_row(TaskRecord, tasks[0]) if tasks else None,
        open_approval=bool(waiting and waiting[0]["waiting"]),
        asks=tuple(from_row(AskRecord, r) for r in asks),
        feedback=tuple(from_row(FeedbackRecord, r) for r in feedback),
        stop=from_row(StopRecord, stops[0]) if stops else None,
    )


class Tasks:
    """Claiming messages, creating and saving tasks, their inbox; written once over SQL."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- ingress ---------------------------------------------------------------------
    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        row = await self._db.one(sql.FIND_TASK, channel=channel, thread_ts=thread_ts)
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
        outcome = from_row(ClaimOutcome, await self._db.call(sql.CLAIM, params))
        crash_point("store.claim.after")
        return outcome

    async def prune_claims(self, *, older_than: float) -> int:
        # One statement per batch, each its own transaction: between batches other writers get the
        # database (SQLite: its write lock; Postgres: the rows, and SKIP LOCKED splits them between
        # instances pruning at once).
        deleted = 0
        for statement in sql.PRUNE:
            while True:
                count = await self._db.execute(statement, {"cutoff": older_than, "batch": _PRUNE_BATCH})
                deleted += count
                if count < _PRUNE_BATCH:  # done, or the rest is locked by a concurrent prune
                    break
        return deleted

    # -- tasks -------------------------------------------------------------------------
    async def create_task(self, *, channel: str, thread_ts: str, now: float) -> TaskRecord:
        params = {"channel": channel, "thread_ts": thread_ts, "now": now, "task_id": new_id()}
        return from_row(TaskRecord, await self._db.call(sql.CREATE_TASK, params))

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._db.one(sql.GET_TASK, task_id=task_id)
        return None if row is None else from_row(TaskRecord, row)

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
        synced: bool = True,
    ) -> None:
        await self._save(
            task_id, transcript, consumed, None, summary, fence, True, close, feedback_upto, synced
        )

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
        synced: bool = True,
    ) -> None:
        params = {
            "task_id": task_id,
            "transcript": transcript,
            "tools": self._db.dialect.texts(enabled_tools),
            "consumed": self._db.dialect.ids(consumed),
            "summary": summary,
            "run_open": run_open,
            "close_id": close[0] if close else None,
            "close_result": close[1] if close else None,
            "feedback_upto": feedback_upto,
            "fence": fence_token(task_id, fence),
        }
        kind = "checkpoint" if run_open else "save"
        crash_point(f"store.{kind}.before")
        if consumed:
            crash_point("store.consume.before")
        row = await self._db.call(sql.SAVE_RUN, params, synced=synced)
        if consumed:
            crash_point("store.consume.after")
        crash_point(f"store.{kind}.after")
        # An unknown task changes nothing: the update finds no row, the delete is scoped by task.
        if not row["saved"]:
            raise StoreError(f"unknown task {task_id!r}")
        if not row["fenced"]:
            raise LeaseMoved(f"the lease of task {task_id!r} has moved: nothing was saved")

    # -- inbox ---------------------------------------------------------------------------
    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        return [from_row(InboxItem, r) for r in await self._db.fetch(sql.PENDING_INBOX, {"task_id": task_id})]

    async def take_lease_with_state(
        self, task_id: str, *, owner: str, ttl: float, now: float
    ) -> tuple[Fence | None, RunState | None]:
        row, rows = await self._db.write_then_reads(
            sql.ACQUIRE_LEASE,
            acquisition(task_id, owner, ttl, now),
            lambda row: self._state_reads(task_id) if row is not None else (),
        )
        if row is None:
            return None, None
        return Fence(task_id, owner, str(row["token"])), _state_of(rows)

    async def run_state(self, task_id: str) -> RunState:
        return _state_of(await self._db.reads(self._state_reads(task_id)))

    @staticmethod
    def _state_reads(task_id: str) -> list[tuple[Statement, Mapping[str, Any]]]:
        params = {"task_id": task_id}
        return [
            (sql.PENDING_INBOX, params),
            (sql.OPEN_EFFECTS, params),
            (sql.GET_TASK, params),
            (sql.HAS_OPEN_APPROVAL, params),
            (ask_sql.OPEN_TASK_ASKS, params),
            (sql.PENDING_FEEDBACK, params),
            (stop_sql.GET_STOP, params),
        ]

    async def tasks_needing_a_run(self, *, now: float) -> list[str]:
        return [str(r["task_id"]) for r in await self._db.fetch(sql.TASKS_NEEDING_A_RUN, {"now": now})]
