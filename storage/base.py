"""The Store contract: everything threadbound keeps durably, behind one interface.

Both backends (``storage.sqlite.SQLiteStore``, ``storage.postgres.PostgresStore``)
implement :class:`Store` and pass the same contract suite (``tests/test_store_contract.py``).
Nothing outside ``storage/`` touches SQL.

Vocabulary
----------
- A **conversation key** is ``(channel, thread_ts)``. ``thread_ts`` is the thread
  root's ts, or ``""`` for the top level of a direct message (the whole DM is one
  conversation there). Several keys may point to one task: the key it started in
  plus every root the bot posted for it.
- A **task** is one agent's memory: its transcript, the tools it has enabled,
  its origin (the key replies go to by default).
- The **inbox** holds claimed messages that no finished run has consumed yet.
- A **lease** gives one owner the right to run a task until ``expires_at``.
- A **handle** is an opaque, task-scoped name (``msg_…``/``file_…``) for a
  provider object (``ref``), with authorship recorded.
- An **effect** is a journalled Slack write: opened before the call, closed
  with its result after it, so a crashed run can reconcile instead of repeat.
- **Usage** is what one model request cost (tokens by kind), with the task, the
  person who asked, the channel and the model; counted per UTC ``day``.

The records themselves are in ``storage/records.py``.

All times are seconds since the epoch as floats, passed in by the caller
(``now``) so tests can move the clock and instances agree on one notion of time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

# Every record is also importable from here (``from storage.base import TaskRecord``).
from .ask_records import AskDecision, AskKind, AskRecord  # noqa: F401
from .records import (  # noqa: F401
    ApprovalDecision,
    ApprovalRecord,
    ClaimOutcome,
    ClaimStatus,
    EffectRecord,
    EffectState,
    FeedbackRecord,
    Fence,
    FollowUpRecord,
    FollowUpState,
    HandleKind,
    HandleRecord,
    InboxItem,
    InstanceLook,
    LeaseMoved,
    LeaseRecord,
    StoreError,
    StoreStats,
    TaskRecord,
    UsageRecord,
)


@runtime_checkable
class Store(Protocol):
    """Durable state of threadbound. Every method is atomic on its own."""

    # -- lifecycle ---------------------------------------------------------
    async def migrate(self) -> None:
        """Create or upgrade the schema to the current version. Idempotent; safe on every start."""

    async def close(self) -> None:
        """Release connections. The store is unusable afterwards."""

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless the database answers a trivial query."""

    # -- ingress -------------------------------------------------------------
    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        """The task a conversation key belongs to, or None."""

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

    # -- tasks -----------------------------------------------------------------
    async def create_task(self, *, channel: str, thread_ts: str, now: float) -> TaskRecord:
        """Create a task outside ingress (``python -m app run``). A non-empty
        ``thread_ts`` maps that key to the task (an existing mapping is kept and its task returned)."""

    async def get_task(self, task_id: str) -> TaskRecord | None: ...

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        """Set the origin thread of a task whose origin had none yet (its first posted root)."""

    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        """Map the conversation key ``(channel, ts)`` of a root the bot posted to ``task_id``.
        An existing mapping is left as it is."""

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
        """Mid-run: store the transcript so far, mark the inbox items it showed the model consumed
        and the run open (the task is due until :meth:`save_run` closes it), and close the journal
        entry ``close = (effect_id, result)``, mark feedback shown and replace the summary, when
        given. One transaction, fenced like :meth:`save_run`."""

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None: ...

    # -- model usage ------------------------------------------------------------
    async def record_usage(self, usage: UsageRecord) -> None:
        """Append one model request's usage (``task_id``, ``model`` and ``at`` set)."""

    async def tokens_spent(self, day: str, person: str | None = None) -> int:
        """Input plus output tokens of UTC ``day``: everyone's, or ``person``'s."""

    async def usage_by_day(self, since: str) -> list[UsageRecord]:
        """Usage summed by day, person and channel from UTC day ``since`` on, oldest first."""

    # -- inbox ------------------------------------------------------------------
    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        """Items not yet consumed by a saved run, oldest first."""

    async def tasks_needing_a_run(self, *, now: float) -> list[str]:
        """Tasks that have pending inbox items, open effects or an open (checkpointed) run, and no
        live lease (expired or none)."""

    # -- leases -----------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        """Take the lease if it is free, expired, or already ``owner``'s. Atomic across instances."""

    async def take_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> Fence | None:
        """:meth:`acquire_lease`, returning the acquisition's :class:`Fence` (None: not taken). An
        owner extending its own live lease keeps its fence; any other acquisition gets a new one."""

    async def renew_lease(
        self, task_id: str, *, owner: str, ttl: float, now: float, fence: Fence | None = None
    ) -> bool:
        """Extend ``owner``'s lease (only the acquisition ``fence`` names, when given); False when
        the lease is no longer ``owner``'s (it was lost)."""

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        """Drop the lease if ``owner`` holds it; otherwise do nothing."""

    async def get_lease(self, task_id: str) -> LeaseRecord | None: ...

    # -- instances ----------------------------------------------------------------
    #: Seconds an owner's liveness lock must be seen missing before it counts as dead (unless seen
    #: alive under the looker's unbroken lock, ``app.runs.takeover``): 0 where only the process's death
    #: ends it (SQLite's file lock), more where a database restart ends every lock at once (Postgres).
    liveness_grace: float

    async def register_instance(self, owner: str, *, now: float) -> bool:
        """Tie ``owner``'s liveness to this store object until :meth:`close`: a session-level
        advisory lock on Postgres (the database ends it with the connection), a file lock next to
        the SQLite database (the kernel ends it with the process). Owners that never registered are
        judged by their lease's expiry alone. Calling it again is cheap and takes the lock anew if
        it was lost (a Postgres restart ended the session); True when the lock was taken now.
        Raises ``StoreError`` when ``owner`` is alive already elsewhere."""

    async def dead_owners(self, *, now: float) -> list[str]:
        """Registered owners of unexpired leases whose liveness has ended (their process is gone)."""

    async def look_at_instances(self, owner: str, *, now: float) -> InstanceLook:
        """Which registered owners' liveness locks are held and which lease holders' are not, and
        whether ``owner``'s own lock (registered through this store) is held at that moment."""

    async def expire_leases(self, owner: str, *, now: float) -> int:
        """End every lease of ``owner`` (a dead instance's) now and forget the instance, so its
        tasks are due at once (:meth:`tasks_needing_a_run`); how many leases ended."""

    async def prune_instances(self, *, now: float) -> int:
        """Forget registered instances that hold no unexpired lease and whose liveness has ended
        (crashed, or stopped cleanly): their rows, and on SQLite their lock files; how many.
        An instance that registers again meanwhile (a new lock key) is kept."""

    # -- handles ----------------------------------------------------------------
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

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        """The record of ``handle`` if it belongs to ``task_id``; None when another task's or unknown."""

    async def find_handle(self, task_id: str, kind: HandleKind, ref: str) -> HandleRecord | None:
        """``task_id``'s handle for ``ref``, if it has one (read only: nothing is minted); its
        ``authored`` says whether the task posted or uploaded it."""

    # -- effect journal -----------------------------------------------------------
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

    async def close_effect(self, effect_id: str, *, result: str, fence: Fence | None = None) -> None:
        """Record a write's result; fenced like :meth:`open_effect`."""

    async def call_effects(self, task_id: str) -> list[EffectRecord]:
        """The task's journalled writes made by the model's tool calls (``call_id`` set), oldest
        first, open or done: what a resumed run answers its interrupted calls with."""

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        """Effects of ``task_id`` still open (attempted, result not recorded), oldest first."""

    async def get_effect(self, effect_id: str) -> EffectRecord | None: ...

    # -- approvals ------------------------------------------------------------------
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

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...

    async def task_approvals(self, task_id: str) -> list[ApprovalRecord]:
        """Every approval of ``task_id``, oldest first."""

    async def has_open_approval(self, task_id: str) -> bool:
        """Some approval of ``task_id`` waits for a decision (the task waits with it)."""

    async def set_approval_card(self, approval_id: str, card_ts: str) -> None: ...

    async def decide_approval(
        self, approval_id: str, *, decision: ApprovalDecision, user_id: str, payload: str, now: float
    ) -> bool:
        """Decide an open approval and append ``payload`` to its task's inbox, in one transaction.
        True for the one call that decided it; False when it was decided before or is unknown.
        Atomic across instances: of concurrent deciders exactly one gets True."""

    async def expired_approvals(self, *, before: float, limit: int = 100) -> list[ApprovalRecord]:
        """Open approvals created before ``before``, oldest first."""

    async def start_execution(self, approval_id: str, *, now: float) -> bool:
        """Mark an approved call as started; True only the first time (the call may run)."""

    # -- feedback -----------------------------------------------------------------
    async def record_feedback(
        self, *, task_id: str, message: str, user_id: str, user_name: str, kind: str, now: float
    ) -> None:
        """Store ``user_id``'s feedback on ``message`` of ``task_id`` (``positive``/``negative``),
        replacing their earlier click on that message; it is not shown yet."""

    async def pending_feedback(self, task_id: str) -> list[FeedbackRecord]:
        """The task's feedback not shown to the model yet, oldest click first."""

    async def mark_feedback_shown(self, task_id: str, *, upto: float) -> None:
        """Mark the task's feedback clicked at or before ``upto`` as shown."""

    # -- follow-ups (issue 23) -------------------------------------------------------------
    async def schedule_follow_up(
        self, record: FollowUpRecord, *, payload: str, per_task: int, install_max: int
    ) -> str:
        """Store a pending follow-up unless its task already has ``per_task`` pending or the install
        ``install_max``: ``"scheduled"``, ``"task_full"`` or ``"install_full"``. ``payload`` is the
        inbox item it becomes when it fires."""

    async def task_follow_ups(self, task_id: str) -> list[FollowUpRecord]:
        """The task's pending follow-ups, soonest first."""

    async def get_follow_up(self, task_id: str, follow_up: str) -> FollowUpRecord | None:
        """One of ``task_id``'s follow-ups in any state; None when unknown or another task's."""

    async def cancel_follow_up(self, task_id: str, follow_up: str, *, now: float) -> bool:
        """Cancel a pending follow-up of ``task_id``; True for the one call that cancelled it."""

    async def pending_follow_ups(
        self, *, before: float | None = None, limit: int = 1000
    ) -> list[FollowUpRecord]:
        """Pending follow-ups across the install (due before ``before`` when given), soonest first."""

    async def next_follow_up_due(self) -> float | None:
        """When the soonest pending follow-up is due; None when none is pending."""

    async def refuse_follow_up(self, follow_up: str, *, payload: str) -> None:
        """Make a pending follow-up fire as ``payload`` instead (its person is no longer allowed)."""

    async def fire_follow_ups(self, *, now: float, limit: int = 500) -> list[FollowUpRecord]:
        """Append up to ``limit`` due follow-ups of tasks with no live lease to their inboxes and
        mark them fired, in one transaction; the ones this call fired. Each follow-up is fired by
        exactly one call, across instances and restarts."""

    async def prune_follow_ups(self, *, older_than: float) -> int:
        """Delete fired and cancelled follow-ups that fired or were cancelled before ``older_than``
        (pending ones are never touched), in bounded batches; how many."""

    async def pending_follow_up_count(self) -> int:
        """How many follow-ups are pending across the install (``/metrics``)."""

    async def follow_up_counts(self) -> dict[FollowUpState, int]:
        """How many follow-ups are in each state."""

    # -- asks: questions and approvals the agent asked itself (issue 24) ------------
    async def open_ask(self, ask: AskRecord) -> None:
        """Record an open ask (its card is posted after, through the task's journal)."""

    async def get_ask(self, ask_id: str) -> AskRecord | None: ...

    async def open_asks(self, task_id: str) -> list[AskRecord]:
        """The task's undecided asks, oldest first."""

    async def set_ask_card(self, ask_id: str, card_ts: str) -> None: ...

    async def decide_ask(
        self, ask_id: str, *, decision: AskDecision, answer: str, user_id: str, payload: str, now: float
    ) -> bool:
        """Decide an open ask and (unless ``payload`` is empty) append ``payload`` to its task's
        inbox, in one transaction; True for the one call that decided it, across instances."""

    async def expired_asks(self, *, before: float, limit: int = 100) -> list[AskRecord]:
        """Open asks created before ``before``, oldest first."""

    async def stats(self) -> StoreStats: ...
