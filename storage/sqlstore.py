"""The :class:`~storage.base.Store`: every method, written once over SQL and over one
:class:`~storage.sqlcore.Database`, each method's docstring its contract.

The store owns its statement groups (``sqlstore_*.py``: tasks, leases, sessions, people,
follow-ups, asks), each constructed with the database it runs on, and hands every call to the
group it belongs to. A backend supplies only the database: :class:`~storage.sqlite.SQLiteStore` is
this store over a :class:`~storage.sqlite.SQLiteDatabase`, :class:`~storage.postgres.PostgresStore`
over a :class:`~storage.postgres.PostgresDatabase`; neither adds a statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Self

from . import statements as sql
from ._rows import stats_from_row
from .ask_records import AskDecision, AskRecord
from .records import (
    ApprovalDecision,
    ApprovalRecord,
    ClaimOutcome,
    EffectRecord,
    FeedbackRecord,
    Fence,
    FollowUpRecord,
    FollowUpState,
    HandleKind,
    HandleRecord,
    InboxItem,
    InstanceLook,
    LeaseRecord,
    PersonTask,
    StopRecord,
    StoreStats,
    TaskRecord,
    UsageRecord,
)
from .run_records import RunState
from .schema import migration
from .sqlcore import Database
from .sqlstore_asks import Asks
from .sqlstore_follow_ups import DEFAULT_PER_PERSON, FollowUps
from .sqlstore_leases import Leases
from .sqlstore_mcp_tokens import McpTokens
from .sqlstore_people import People
from .sqlstore_session import Sessions
from .sqlstore_stops import Stops
from .sqlstore_tasks import Tasks


class SqlStore:
    """Durable state of threadbound: every Store method, handed to the statement group it belongs
    to (module doc). Every method is atomic on its own."""

    def __init__(self, database: Database) -> None:
        #: Where every statement runs (a backend's connection plumbing).
        self.database = database
        #: Seconds a missing liveness lock must stay missing before its owner counts as dead
        #: (``Database.liveness_grace``; ``app.runs.takeover``).
        self.liveness_grace = database.liveness_grace
        self._tasks = Tasks(database)
        self._leases = Leases(database)
        self._sessions = Sessions(database)
        self._people = People(database)
        self._follow_ups = FollowUps(database)
        self._asks = Asks(database)
        self._stops = Stops(database)
        #: Per-person MCP credentials and authorizations (ciphertext only; ``sqlstore_mcp_tokens``).
        self.mcp_tokens = McpTokens(database)

    @classmethod
    def over(cls, database: Database) -> Self:
        """A store of this class over ``database`` as it is (a backend's constructor builds its own)."""
        store = cls.__new__(cls)
        SqlStore.__init__(store, database)
        return store

    # -- lifecycle -------------------------------------------------------------------
    async def migrate(self) -> None:
        """Create or upgrade the schema to the current version. Idempotent; safe on every start."""
        database = self.database
        prelude = database.migration_prelude()
        await database.script(lambda: migration(database.dialect, prelude))

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless the database answers a trivial query."""
        await self.database.fetch(sql.PING, {})

    def for_another_loop(self) -> Self:
        """A store on the same database for one other event loop (the HTTP edge's thread): its own
        write batching (SQLite, sharing this store's database thread) or its own small pool
        (Postgres, whose connections belong to one loop). Use it and close it on that loop only;
        closing it leaves this store open, and closing this store ends it too."""
        return self.over(self.database.for_another_loop())

    def inline_when(self, nothing_else_to_do: Callable[[], bool]) -> None:
        """``nothing_else_to_do()``: whether this process has nothing else to do now (one run
        working, no delivery waiting for its 200). A backend whose calls hop to a thread of its own
        (SQLite) then makes them on the caller's thread, where the hop costs more than the call; the
        others ignore it."""
        self.database.inline_when(nothing_else_to_do)

    async def stats(self) -> StoreStats:
        """Counts for readiness probes and benchmarks."""
        row = await self.database.one(sql.STATS)
        assert row is not None  # an aggregate query always yields one row
        return stats_from_row(row)

    async def close(self) -> None:
        """Release connections. The store is unusable afterwards."""
        await self.database.close()

    # -- ingress, tasks and their inbox (``sqlstore_tasks.Tasks``) -----------------------------
    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        """The task a conversation key belongs to, or None."""
        return await self._tasks.find_task(channel, thread_ts)

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
        return await self._tasks.claim_message(
            event_id=event_id,
            channel=channel,
            ts=ts,
            thread_ts=thread_ts,
            create=create,
            payload=payload,
            now=now,
        )

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
        return await self._tasks.prune_claims(older_than=older_than)

    async def create_task(self, *, channel: str, thread_ts: str, now: float) -> TaskRecord:
        """Create a task outside ingress (``python -m app run``). A non-empty
        ``thread_ts`` maps that key to the task (an existing mapping is kept and its task returned)."""
        return await self._tasks.create_task(channel=channel, thread_ts=thread_ts, now=now)

    async def get_task(self, task_id: str) -> TaskRecord | None:
        return await self._tasks.get_task(task_id)

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
        lease has moved from that acquisition ("Fencing", docs/architecture.md)."""
        await self._tasks.save_run(
            task_id,
            transcript=transcript,
            consumed=consumed,
            enabled_tools=enabled_tools,
            summary=summary,
            fence=fence,
            feedback_upto=feedback_upto,
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
        await self._tasks.checkpoint(
            task_id,
            transcript=transcript,
            consumed=consumed,
            fence=fence,
            close=close,
            feedback_upto=feedback_upto,
            summary=summary,
            synced=synced,
        )

    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        """Items not yet consumed by a saved run, oldest first."""
        return await self._tasks.pending_inbox(task_id)

    async def take_lease_with_state(
        self, task_id: str, *, owner: str, ttl: float, now: float
    ) -> tuple[Fence | None, RunState | None]:
        """:meth:`take_lease` and, when taken, the task's
        :meth:`run_state` as of that moment: one trip where the backend can (SQLite)."""
        return await self._tasks.take_lease_with_state(task_id, owner=owner, ttl=ttl, now=now)

    async def run_state(self, task_id: str) -> RunState:
        """What a run of the task starts from, read together (one trip where the backend can):
        its pending inbox (:meth:`pending_inbox`), its open journal entries (``open_effects``), its
        record (:meth:`get_task`; None for an unknown task), whether an approval of it waits for a
        decision (``has_open_approval``), its undecided asks (``open_asks``), its feedback not
        shown yet (``pending_feedback``) and a person's Stop waiting to be settled (:meth:`stop_of`)."""
        return await self._tasks.run_state(task_id)

    async def tasks_needing_a_run(self, *, now: float) -> list[str]:
        """Tasks that have pending inbox items, open effects or an open (checkpointed) run, and no
        live lease (expired or none)."""
        return await self._tasks.tasks_needing_a_run(now=now)

    # -- leases and the liveness of their owners (``sqlstore_leases.Leases``) ------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        """Take the lease if it is free, expired, or already ``owner``'s. Atomic across instances."""
        return await self._leases.acquire_lease(task_id, owner=owner, ttl=ttl, now=now)

    async def take_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> Fence | None:
        """:meth:`acquire_lease`, returning the acquisition's :class:`Fence` (None: not taken). An
        owner extending its own live lease keeps its fence; any other acquisition gets a new one."""
        return await self._leases.take_lease(task_id, owner=owner, ttl=ttl, now=now)

    async def renew_lease(
        self, task_id: str, *, owner: str, ttl: float, now: float, fence: Fence | None = None
    ) -> bool:
        """Extend ``owner``'s lease (only the acquisition ``fence`` names, when given); False when
        the lease is no longer ``owner``'s (it was lost)."""
        return await self._leases.renew_lease(task_id, owner=owner, ttl=ttl, now=now, fence=fence)

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        """Drop the lease if ``owner`` holds it; otherwise do nothing."""
        await self._leases.release_lease(task_id, owner=owner)

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        return await self._leases.get_lease(task_id)

    async def register_instance(self, owner: str, *, now: float) -> bool:
        """Tie ``owner``'s liveness to this store object until :meth:`close`: a session-level
        advisory lock on Postgres (the database ends it with the connection), a file lock next to
        the SQLite database (the kernel ends it with the process). Owners that never registered are
        judged by their lease's expiry alone. Calling it again is cheap and takes the lock anew if
        it was lost (a Postgres restart ended the session); True when the lock was taken now.
        Raises ``StoreError`` when ``owner`` is alive already elsewhere."""
        return await self._leases.register_instance(owner, now=now)

    async def dead_owners(self, *, now: float) -> list[str]:
        """Registered owners of unexpired leases whose liveness has ended (their process is gone)."""
        return await self._leases.dead_owners(now=now)

    async def look_at_instances(self, owner: str, *, now: float) -> InstanceLook:
        """Which registered owners' liveness locks are held and which lease holders' are not, and
        whether ``owner``'s own lock (registered through this store) is held at that moment."""
        return await self._leases.look_at_instances(owner, now=now)

    async def expire_leases(self, owner: str, *, now: float) -> int:
        """End every lease of ``owner`` (a dead instance's) now and forget the instance, so its
        tasks are due at once (:meth:`tasks_needing_a_run`); how many leases ended."""
        return await self._leases.expire_leases(owner, now=now)

    async def prune_instances(self, *, now: float) -> int:
        """Forget registered instances that hold no unexpired lease and whose liveness has ended
        (crashed, or stopped cleanly): their rows, and on SQLite their lock files; how many.
        An instance that registers again meanwhile (a new lock key) is kept."""
        return await self._leases.prune_instances(now=now)

    # -- what a conversation's session writes and reads (``sqlstore_session.Sessions``) --------
    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        """Map the conversation key ``(channel, ts)`` of a root the bot posted to ``task_id``.
        An existing mapping is left as it is."""
        await self._sessions.record_root(channel=channel, ts=ts, task_id=task_id)

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        """Set the origin thread of a task whose origin had none yet (its first posted root)."""
        await self._sessions.set_task_thread(task_id, thread_ts)

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        """Remember the deferred tools ``tool_search`` enabled, across runs."""
        await self._sessions.set_enabled_tools(task_id, tools)

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
        return await self._sessions.mint_handle(
            task_id=task_id,
            kind=kind,
            ref=ref,
            handle=handle,
            authored=authored,
            data=data,
        )

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        """The record of ``handle`` if it belongs to ``task_id``; None when another task's or unknown."""
        return await self._sessions.resolve_handle(task_id, handle)

    async def find_handle(self, task_id: str, kind: HandleKind, ref: str) -> HandleRecord | None:
        """``task_id``'s handle for ``ref``, if it has one (read only: nothing is minted); its
        ``authored`` says whether the task posted or uploaded it."""
        return await self._sessions.find_handle(task_id, kind, ref)

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
        await self._sessions.open_effect(
            effect_id=effect_id,
            task_id=task_id,
            tool=tool,
            args=args,
            now=now,
            call_id=call_id,
            fence=fence,
        )

    async def close_effect(self, effect_id: str, *, result: str, fence: Fence | None = None) -> None:
        """Record a write's result; fenced like :meth:`open_effect`."""
        await self._sessions.close_effect(effect_id, result=result, fence=fence)

    async def call_effects(self, task_id: str) -> list[EffectRecord]:
        """The task's journalled writes made by the model's tool calls (``call_id`` set), oldest
        first, open or done: what a resumed run answers its interrupted calls with."""
        return await self._sessions.call_effects(task_id)

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        """Effects of ``task_id`` still open (attempted, result not recorded), oldest first."""
        return await self._sessions.open_effects(task_id)

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        return await self._sessions.get_effect(effect_id)

    # -- usage, approvals and feedback (``sqlstore_people.People``) ----------------------------
    async def record_usage(self, usage: UsageRecord) -> None:
        """Append one model request's usage (``task_id``, ``model`` and ``at`` set)."""
        await self._people.record_usage(usage)

    async def tokens_spent(self, day: str, person: str | None = None) -> int:
        """Input plus output tokens of UTC ``day``: everyone's, or ``person``'s."""
        return await self._people.tokens_spent(day, person)

    async def recent_requester(self, task_id: str, *, since: str) -> str:
        """The person the task's newest model request on or after UTC day ``since`` (``YYYY-MM-DD``)
        was charged to; "" when there is none (or only runs no person started)."""
        return await self._people.recent_requester(task_id, since=since)

    async def usage_by_day(self, since: str) -> list[UsageRecord]:
        """Usage summed by day, person and channel from UTC day ``since`` on, oldest first."""
        return await self._people.usage_by_day(since)

    async def person_usage_by_model(self, person: str, day: str) -> list[UsageRecord]:
        """``person``'s usage of UTC ``day`` summed by model (``model`` set, ``channel`` empty)."""
        return await self._people.person_usage_by_model(person, day)

    async def person_tasks(self, person: str, *, since: str, limit: int = 10) -> list[PersonTask]:
        """The tasks ``person``'s model requests ran in from UTC day ``since`` on, the latest first
        (at most ``limit``)."""
        return await self._people.person_tasks(person, since=since, limit=limit)

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
        """Record an open approval and open the effect ``card_effect`` (tool ``approval_card``,
        args ``{"approval_id": ...}``) for its card, in one transaction."""
        await self._people.open_approval(
            approval_id=approval_id,
            task_id=task_id,
            tool_call_id=tool_call_id,
            tool=tool,
            args=args,
            requester=requester,
            channel=channel,
            thread_ts=thread_ts,
            card_effect=card_effect,
            now=now,
        )

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return await self._people.get_approval(approval_id)

    async def task_approvals(self, task_id: str) -> list[ApprovalRecord]:
        """Every approval of ``task_id``, oldest first."""
        return await self._people.task_approvals(task_id)

    async def has_open_approval(self, task_id: str) -> bool:
        """Some approval of ``task_id`` waits for a decision (the task waits with it)."""
        return await self._people.has_open_approval(task_id)

    async def set_approval_card(self, approval_id: str, card_ts: str) -> None:
        await self._people.set_approval_card(approval_id, card_ts)

    async def decide_approval(
        self, approval_id: str, *, decision: ApprovalDecision, user_id: str, payload: str, now: float
    ) -> bool:
        """Decide an open approval and append ``payload`` to its task's inbox, in one transaction.
        True for the one call that decided it; False when it was decided before or is unknown.
        Atomic across instances: of concurrent deciders exactly one gets True."""
        return await self._people.decide_approval(
            approval_id,
            decision=decision,
            user_id=user_id,
            payload=payload,
            now=now,
        )

    async def expired_approvals(self, *, before: float, limit: int = 100) -> list[ApprovalRecord]:
        """Open approvals created before ``before``, oldest first."""
        return await self._people.expired_approvals(before=before, limit=limit)

    async def start_execution(self, approval_id: str, *, now: float) -> bool:
        """Mark an approved call as started; True only the first time (the call may run)."""
        return await self._people.start_execution(approval_id, now=now)

    async def record_feedback(
        self, *, task_id: str, message: str, user_id: str, user_name: str, kind: str, now: float
    ) -> None:
        """Store ``user_id``'s feedback on ``message`` of ``task_id`` (``positive``/``negative``),
        replacing their earlier click on that message; it is not shown yet."""
        await self._people.record_feedback(
            task_id=task_id,
            message=message,
            user_id=user_id,
            user_name=user_name,
            kind=kind,
            now=now,
        )

    async def pending_feedback(self, task_id: str) -> list[FeedbackRecord]:
        """The task's feedback not shown to the model yet, oldest click first."""
        return await self._people.pending_feedback(task_id)

    async def mark_feedback_shown(self, task_id: str, *, upto: float) -> None:
        """Mark the task's feedback clicked at or before ``upto`` as shown."""
        await self._people.mark_feedback_shown(task_id, upto=upto)

    # -- follow-ups (``sqlstore_follow_ups.FollowUps``) ----------------------------------------
    async def schedule_follow_up(
        self,
        record: FollowUpRecord,
        *,
        payload: str,
        per_task: int,
        install_max: int,
        per_person: int = DEFAULT_PER_PERSON,
    ) -> str:
        """Store a pending follow-up unless its task already has ``per_task`` pending, its requester
        ``per_person`` (across the install; no bound for ``""``) or the install ``install_max``:
        ``"scheduled"``, ``"task_full"``, ``"person_full"`` or ``"install_full"``. ``payload`` is the
        inbox item it becomes when it fires."""
        return await self._follow_ups.schedule_follow_up(
            record,
            payload=payload,
            per_task=per_task,
            install_max=install_max,
            per_person=per_person,
        )

    async def task_follow_ups(self, task_id: str) -> list[FollowUpRecord]:
        """The task's pending follow-ups, soonest first."""
        return await self._follow_ups.task_follow_ups(task_id)

    async def get_follow_up(self, task_id: str, follow_up: str) -> FollowUpRecord | None:
        """One of ``task_id``'s follow-ups in any state; None when unknown or another task's."""
        return await self._follow_ups.get_follow_up(task_id, follow_up)

    async def cancel_follow_up(self, task_id: str, follow_up: str, *, now: float) -> bool:
        """Cancel a pending follow-up of ``task_id``; True for the one call that cancelled it."""
        return await self._follow_ups.cancel_follow_up(task_id, follow_up, now=now)

    async def pending_follow_ups(
        self, *, before: float | None = None, limit: int = 1000
    ) -> list[FollowUpRecord]:
        """Pending follow-ups across the install (due before ``before`` when given), soonest first."""
        return await self._follow_ups.pending_follow_ups(before=before, limit=limit)

    async def next_follow_up_due(self) -> float | None:
        """When the soonest pending follow-up is due; None when none is pending."""
        return await self._follow_ups.next_follow_up_due()

    async def refuse_follow_up(self, follow_up: str, *, payload: str) -> None:
        """Make a pending follow-up fire as ``payload`` instead (its person is no longer allowed)."""
        await self._follow_ups.refuse_follow_up(follow_up, payload=payload)

    async def fire_follow_ups(self, *, now: float, limit: int = 500) -> list[FollowUpRecord]:
        """Append up to ``limit`` due follow-ups of tasks with no live lease to their inboxes and
        mark them fired, in one transaction; the ones this call fired. Each follow-up is fired by
        exactly one call, across instances and restarts."""
        return await self._follow_ups.fire_follow_ups(now=now, limit=limit)

    async def prune_follow_ups(self, *, older_than: float) -> int:
        """Delete fired and cancelled follow-ups that fired or were cancelled before ``older_than``
        (pending ones are never touched), in bounded batches; how many."""
        return await self._follow_ups.prune_follow_ups(older_than=older_than)

    async def pending_follow_up_count(self) -> int:
        """How many follow-ups are pending across the install (``/metrics``)."""
        return await self._follow_ups.pending_follow_up_count()

    async def follow_up_counts(self) -> dict[FollowUpState, int]:
        """How many follow-ups are in each state."""
        return await self._follow_ups.follow_up_counts()

    # -- asks (``sqlstore_asks.Asks``) ---------------------------------------------------------
    async def open_ask(self, ask: AskRecord) -> None:
        """Record an open ask (its card is posted after, through the task's journal)."""
        await self._asks.open_ask(ask)

    async def get_ask(self, ask_id: str) -> AskRecord | None:
        return await self._asks.get_ask(ask_id)

    async def open_asks(self, task_id: str) -> list[AskRecord]:
        """The task's undecided asks, oldest first."""
        return await self._asks.open_asks(task_id)

    async def set_ask_card(self, ask_id: str, card_ts: str) -> None:
        await self._asks.set_ask_card(ask_id, card_ts)

    async def decide_ask(
        self, ask_id: str, *, decision: AskDecision, answer: str, user_id: str, payload: str, now: float
    ) -> bool:
        """Decide an open ask and (unless ``payload`` is empty) append ``payload`` to its task's
        inbox, in one transaction; True for the one call that decided it, across instances."""
        return await self._asks.decide_ask(
            ask_id,
            decision=decision,
            answer=answer,
            user_id=user_id,
            payload=payload,
            now=now,
        )

    async def expired_asks(self, *, before: float, limit: int = 100) -> list[AskRecord]:
        """Open asks created before ``before``, oldest first."""
        return await self._asks.expired_asks(before=before, limit=limit)

    # -- stops and agent sessions (``sqlstore_stops.Stops``) -------------------------------------
    async def request_stop(self, channel: str, thread_ts: str, *, by_user: str, now: float) -> str | None:
        """Record a person's Stop on the run in progress in conversation ``(channel, thread_ts)``:
        only while its task's lease is live and it has work (pending inbox items, or a run checkpointed
        and not finished): a run is in progress; and no stop of it waits already. Returns
        the task's id when recorded, None otherwise (no such conversation, no run: a Stop between runs
        does nothing). The stop's ``upto`` is the task's newest inbox item at this moment."""
        return await self._stops.request_stop(channel, thread_ts, by_user=by_user, now=now)

    async def stop_of(self, task_id: str) -> StopRecord | None:
        """The task's stop waiting to be settled, if any."""
        return await self._stops.stop_of(task_id)

    async def stops_of(self, task_ids: Sequence[str]) -> list[StopRecord]:
        """The waiting stops of the given tasks (what a running instance polls for)."""
        return await self._stops.stops_of(task_ids)

    async def settle_stop(
        self, task_id: str, *, transcript: bytes | None, consumed: Sequence[int] = (), fence: Fence | None
    ) -> bool:
        """Settle the task's waiting stop, in one fenced transaction: ``transcript`` saved (None keeps
        it) with the run closed, the inbox items up to the stop's ``upto`` (and ``consumed``, what the
        stopped run was shown) consumed, the task's open
        journal entries closed as they stand, the stop removed. True when no stop waits any more;
        :class:`LeaseMoved` when ``fence`` is no longer the task's lease (nothing changed)."""
        return await self._stops.settle_stop(task_id, transcript=transcript, consumed=consumed, fence=fence)

    async def session_title(self, task_id: str) -> str:
        """The title the task's agent session shows (``""``: none recorded)."""
        return await self._stops.session_title(task_id)

    async def set_session_title(self, task_id: str, title: str, *, now: float) -> None:
        await self._stops.set_session_title(task_id, title, now=now)

    async def rename_session(self, channel: str, thread_ts: str, title: str, *, now: float) -> str | None:
        """Record the title a person gave the session of conversation ``(channel, thread_ts)``; its
        task's id, None when the conversation is no task's."""
        return await self._stops.rename_session(channel, thread_ts, title, now=now)
