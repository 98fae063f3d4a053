"""The records the store hands out (tasks, inbox items, handles, effects, approvals, usage…) and
:class:`StoreError`; the vocabulary is in :mod:`storage.base`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

__all__ = [
    "ApprovalDecision",
    "ApprovalRecord",
    "CardRecord",
    "ClaimOutcome",
    "ClaimStatus",
    "EffectRecord",
    "EffectState",
    "FeedbackRecord",
    "Fence",
    "FollowUpRecord",
    "FollowUpState",
    "HandleKind",
    "HandleRecord",
    "InboxItem",
    "InstanceLook",
    "LeaseMoved",
    "LeaseRecord",
    "PersonTask",
    "StoreError",
    "StoreStats",
    "TaskRecord",
    "UsageRecord",
    "retry_if_session_ended",
]

_W = TypeVar("_W")

HandleKind = Literal["msg", "file"]
ClaimStatus = Literal["claimed", "duplicate", "no_task"]
EffectState = Literal["open", "done"]


@dataclass(frozen=True, slots=True)
class TaskRecord:
    task_id: str
    channel: str
    #: Root ts replies go to; ``""`` for a DM's top level or a root not posted yet.
    thread_ts: str
    #: pydantic-ai message history as JSON bytes (``ModelMessagesTypeAdapter``); ``b""`` when new.
    transcript: bytes
    #: Deferred tools the model enabled with ``tool_search``; kept across resumes.
    enabled_tools: tuple[str, ...]
    created_at: float
    #: The compacted summary of the conversation's older turns (``app/runs/compaction.py``); ``""`` if none.
    summary: str = ""
    #: A run checkpointed its transcript and has not finished (it is resumed from there).
    run_open: bool = False


@dataclass(frozen=True, slots=True)
class InboxItem:
    item_id: int
    task_id: str
    channel: str
    ts: str
    #: The conversation key's thread_ts this message arrived in (``""`` for a DM's top level).
    thread_ts: str
    #: JSON text the intake or the runs wrote (a message: ``channel.inbound.dump``); opaque to the store.
    payload: str
    created_at: float


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    status: ClaimStatus
    task_id: str | None = None
    item_id: int | None = None
    #: True when this claim created the task.
    created: bool = False


@dataclass(frozen=True, slots=True)
class HandleRecord:
    handle: str
    task_id: str
    kind: HandleKind
    #: Provider reference (e.g. ``C123:1700000000.000100`` or a file id); never shown to the model.
    ref: str
    #: True when the bot posted/uploaded this object for this task.
    authored: bool
    #: Provider data kept with the handle (JSON text, e.g. file metadata); ``"{}"`` when none.
    data: str = "{}"


@dataclass(frozen=True, slots=True)
class EffectRecord:
    effect_id: str
    task_id: str
    tool: str
    #: JSON text of the arguments the effect was attempted with.
    args: str
    state: EffectState
    #: JSON text of the recorded result once closed, else ``None``.
    result: str | None
    created_at: float
    #: The model's id of the tool call that made the write (``""``: the host's own write).
    call_id: str = ""


#: A card's decision: ``ApprovalDecision`` or ``storage.ask_records.AskDecision``.
D = TypeVar("D", bound=str)


@dataclass(frozen=True, slots=True, kw_only=True)
class CardRecord(Generic[D]):
    """What an approval and an ask share: a card posted in the task's thread for a requester,
    decided once (``card_statements.py``). Its fields are passed by name."""

    task_id: str
    #: The user whose message led to the card (``""`` when none, e.g. the ``run`` command).
    requester: str
    channel: str
    thread_ts: str
    #: ts of the posted card; ``""`` until it is posted.
    card_ts: str
    created_at: float
    #: ``None`` while open.
    decision: D | None = None
    decided_by: str | None = None
    decided_at: float | None = None


ApprovalDecision = Literal["approved", "denied", "expired", "void", "failed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord(CardRecord[ApprovalDecision]):
    """A gated tool call (``approval`` in agent.toml) and, once made, the decision on it."""

    approval_id: str
    #: The pydantic-ai tool call id in the task's transcript.
    tool_call_id: str
    tool: str
    #: JSON text of the call's arguments.
    args: str
    #: The effect id under which the card is posted (journalled like any post).
    card_effect: str
    #: When an approved call started running (set once).
    executed_at: float | None = None


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """A person's feedback on one of the task's answers (the latest click counts)."""

    task_id: str
    #: Provider reference of the answer's message.
    message: str
    user_id: str
    user_name: str
    kind: Literal["positive", "negative"]
    clicked_at: float


FollowUpState = Literal["pending", "fired", "cancelled"]


@dataclass(frozen=True, slots=True)
class FollowUpRecord:
    """A follow-up a task scheduled for itself (``channel_follow_up``); see ``follow_up_statements``."""

    #: The task-scoped handle (``fu_…``) the model names it by.
    follow_up: str
    task_id: str
    #: The person whose message led to scheduling it (budgets, approvals, access); ``""``: nobody.
    requester: str
    channel: str
    thread_ts: str
    note: str
    due_at: float
    created_at: float
    state: FollowUpState = "pending"
    fired_at: float | None = None


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    task_id: str
    owner: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class InstanceLook:
    """One look at the liveness locks of registered instances (``Store.look_at_instances``): every
    lock as one snapshot of the database (Postgres) or of the lock files (SQLite) shows it."""

    #: The key of the looking instance's own lock when that snapshot shows it held; None when it
    #: does not (lost since ``register_instance``: a database restart may have ended every lock).
    session: int | None
    #: Registered owners whose lock was held.
    live: frozenset[str]
    #: Registered owners of unexpired leases whose lock was not held (their process may be gone).
    missing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What model requests cost: one request's usage when recorded, a sum in ``usage_by_day``."""

    day: str  # UTC, YYYY-MM-DD
    person: str  # the requester's provider user ID; "" when no person asked (the `run` command)
    channel: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0
    task_id: str = ""  # "" in sums (which group by day, person and channel)
    model: str = ""  # "" in sums
    at: float = 0.0

    @property
    def tokens(self) -> int:
        """What budgets count: input plus output tokens."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class PersonTask:
    """A task one person's requests ran in (``person_tasks``), newest first."""

    task_id: str
    channel: str
    thread_ts: str
    #: When the person's latest model request in it was made.
    last_at: float


@dataclass(slots=True)
class StoreStats:
    """Counts for readiness probes and benchmarks."""

    tasks: int = 0
    pending_inbox: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class StoreError(Exception):
    """The store could not do what was asked (connection lost, constraint broken)."""

    #: The failure was the database session ending (a restart, a failover): a new session may do it.
    session_ended: bool = False


class LeaseMoved(StoreError):
    """A fenced write was refused: the lease it carried has moved to another acquisition."""


async def retry_if_session_ended(write: Callable[[], Awaitable[_W]]) -> _W:
    """``write()``, made a second time when the database session ended under the first (a failover;
    for a write that is the same done twice: a close, an upsert, a claim of one event). Any other
    failure, and a lease that moved, is final."""
    try:
        return await write()
    except StoreError as exc:
        if not exc.session_ended or isinstance(exc, LeaseMoved):
            raise
    return await write()


@dataclass(frozen=True, slots=True)
class Fence:
    """One acquisition of a task's lease (:meth:`~storage.base.Store.take_lease`). A run's durable
    writes carry it and are refused, inside their own transaction, once the lease has moved."""

    task_id: str
    owner: str
    #: Names this acquisition; a new owner's acquisition (or a renewed one after a free) gets a new one.
    token: str
