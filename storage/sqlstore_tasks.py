"""The :class:`~storage.base.Store` methods of ingress, tasks and their inbox, mixed into
:class:`~storage.sqlstore.SqlStore` over the same four primitives (``sqlcore.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import ask_statements as ask_sql
from . import statements as sql
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
    StoreError,
    TaskRecord,
)
from .run_records import RunState
from .sql import Row, Statement
from .sqlcore import SqlCore, fence_token, new_id
from .sqlstore_leases import acquisition

#: Most claim keys of one table a prune statement deletes: a backlog goes in short transactions.
_PRUNE_BATCH = 10_000


def _state_of(rows: Sequence[Sequence[Row]]) -> RunState:
    """The :class:`RunState` of the rows of ``TaskMethods._state_reads``, in order."""
    items, effects, tasks, waiting, asks, feedback = rows
    return RunState(
        [from_row(InboxItem, r) for r in items],
        [from_row(EffectRecord, r) for r in effects],
        from_row(TaskRecord, tasks[0]) if tasks else None,
        open_approval=bool(waiting and waiting[0]["waiting"]),
        asks=tuple(from_row(AskRecord, r) for r in asks),
        feedback=tuple(from_row(FeedbackRecord, r) for r in feedback),
    )


class TaskMethods(SqlCore):
    """Claiming messages, creating and saving tasks, their inbox; written once over SQL."""

    # -- ingress ---------------------------------------------------------------------
    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        """The task a conversation key belongs to, or None."""
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
        """Claim one Slack message and append it to its task's inbox, in one transaction.

        - If ``event_id`` or ``(channel, ts)`` was claimed before: record the
          ``event_id`` too (so its retries stay cheap) and return ``duplicate``.
        - Else find the task of ``(channel, thread_ts)``; if there is none and
          ``create`` is true, create a task whose origin is ``(channel, thread_ts)``
          and map the key to it; if there is none and ``create`` is false, return
          ``no_task`` and record nothing.
        - Else record both claim keys, append an inbox item and return ``claimed``.

        Two concurrent calls for the same message (even with different event ids)
        yield exactly one ``claimed``, on every backend and across processes.
        """
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
        """Delete the claim keys (by event id and by ``(channel, ts)``) with ``claimed_at <
        older_than``; return how many rows were deleted (both kinds together).

        Safe for any cutoff well beyond Slack's retry window: Slack re-delivers an event for at
        most about five minutes, and the second delivery of one message under another event id
        (``app_mention`` and ``message``) arrives within seconds, so a key that old can no longer
        stop anything. A claimed message's inbox item, if still pending, is not touched: it is
        run and consumed as usual. The consequence of pruning is that a pruned message could be
        claimed again, as new, were it ever delivered again. Deletes in bounded batches, each its
        own transaction, so a large backlog never holds the database's write lock for long.
        """
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
        """Create a task outside ingress (``python -m app run``). A non-empty
        ``thread_ts`` maps that key to the task (an existing mapping is kept and its task returned)."""
        params = {"channel": channel, "thread_ts": thread_ts, "now": now, "task_id": new_id()}
        return from_row(TaskRecord, await self._call(sql.CREATE_TASK, params))

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._one(sql.GET_TASK, task_id=task_id)
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
        """After a run: store the transcript, mark the consumed inbox items done, close the run
        (``run_open`` false) and, when given, replace the enabled tools and the summary and mark the
        feedback clicked up to ``feedback_upto`` shown. One transaction: a crash leaves either all
        or nothing. With ``fence`` nothing is written, and :class:`LeaseMoved` raised, once the
        lease has moved from that acquisition (invariant 12)."""
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
        """Mid-run: store the transcript so far, mark the inbox items it showed the model consumed
        and the run open (the task is due until :meth:`save_run` closes it), and close the journal
        entry ``close = (effect_id, result)``, mark feedback shown and replace the summary, when
        given. One transaction, fenced like :meth:`save_run`. ``synced=False``: the checkpoint need
        survive only the process dying until the run's next synced commit (a journal entry opened
        before a write, the save), which on SQLite syncs it too (``storage.sql.Statement.synced``)."""
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
            "tools": self.dialect.texts(enabled_tools),
            "consumed": self.dialect.ids(consumed),
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
        row = await self._call(sql.SAVE_RUN, params, synced=synced)
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
        """Items not yet consumed by a saved run, oldest first."""
        return [from_row(InboxItem, r) for r in await self._fetch(sql.PENDING_INBOX, {"task_id": task_id})]

    async def take_lease_with_state(
        self, task_id: str, *, owner: str, ttl: float, now: float
    ) -> tuple[Fence | None, RunState | None]:
        """:meth:`~storage.sqlstore_leases.LeaseMethods.take_lease` and, when taken, the task's
        :meth:`run_state` as of that moment: one trip where the backend can (SQLite)."""
        row, rows = await self._write_then_reads(
            sql.ACQUIRE_LEASE,
            acquisition(task_id, owner, ttl, now),
            lambda row: self._state_reads(task_id) if row is not None else (),
        )
        if row is None:
            return None, None
        return Fence(task_id, owner, str(row["token"])), _state_of(rows)

    async def run_state(self, task_id: str) -> RunState:
        """What a run of the task starts from, read together (one trip where the backend can):
        its pending inbox (:meth:`pending_inbox`), its open journal entries (``open_effects``), its
        record (:meth:`get_task`; None for an unknown task), whether an approval of it waits for a
        decision (``has_open_approval``), its undecided asks (``open_asks``) and its feedback not
        shown yet (``pending_feedback``)."""
        return _state_of(await self._reads(self._state_reads(task_id)))

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
        ]

    async def tasks_needing_a_run(self, *, now: float) -> list[str]:
        """Tasks that have pending inbox items, open effects or an open (checkpointed) run, and no
        live lease (expired or none)."""
        return [str(r["task_id"]) for r in await self._fetch(sql.TASKS_NEEDING_A_RUN, {"now": now})]
