"""What a run ends with and how it is told to stop: its outcome, its hooks, the fixed notes it posts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from channel.errors import ChannelError, Unsettled
from channel.session import ChannelSession
from storage.base import InboxItem, LeaseMoved, StoreError, UsageRecord

APOLOGY = "Sorry, I ran into a problem and couldn't finish that. Please try again in a moment."
RUNAWAY = (
    "Sorry, I stopped after {limit} model requests without finishing, to keep this from running away. "
    "Ask again (perhaps more narrowly) and I'll continue."
)

#: The task's inbox items not yet consumed, oldest first; a run polls it for steering messages.
Inbox = Callable[[], Awaitable[Sequence[InboxItem]]]


class RunStopped(Exception):
    """The run may no longer act for its task (its lease was lost): it ends without writing or saving."""


class StoreFailed(Exception):
    """The run's own bookkeeping failed (a checkpoint, a journal entry, the save: a ``StoreError``).
    The run ends as a stopped one does, posting and saving nothing more, and the error goes up to
    the scheduler, which drives the task again after a back-off (``app.runs.scheduler``): the
    conversation goes on from its last checkpoint, its message still in the inbox unless that
    checkpoint consumed it with what the run wrote. Never an apology: nothing retries could not mend
    went wrong in the conversation."""


@dataclass(slots=True)
class RunHooks:
    """Runtime effects around a run (progress indicators, metrics); failures are the hook's own business."""

    on_start: Callable[[ChannelSession, Sequence[InboxItem]], Awaitable[None]] | None = None
    on_tool: Callable[[ChannelSession, str], Awaitable[None]] | None = None
    on_end: Callable[[ChannelSession, Sequence[InboxItem], str], Awaitable[None]] | None = None
    #: Each model request's stored usage (metrics, the run's log line).
    on_usage: Callable[[ChannelSession, UsageRecord], None] | None = None
    #: A budget refused a request or stopped a run: ``"user"`` or ``"install"``.
    on_budget: Callable[[ChannelSession, str], None] | None = None


@dataclass(slots=True)
class RunOutcome:
    task_id: str
    status: str  # "ok" | "failed"
    replied: bool
    output: str = ""
    consumed: list[int] = field(default_factory=list)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps: the members of exception groups and the causes, each once
    (chains can loop)."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        if current.__cause__ is not None:
            pending.append(current.__cause__)


def stopped(exc: BaseException) -> bool:
    """``exc`` is, or wraps (an exception group, a cause), a :class:`RunStopped` or the store's
    refusal of a fenced write (``LeaseMoved``): either way the run may no longer act."""
    return any(isinstance(current, RunStopped | LeaseMoved) for current in _chain(exc))


def store_failed(exc: BaseException) -> bool:
    """``exc`` is, or wraps, a failure of the store (not its refusal of a fenced write: that is
    :func:`stopped`) or a write left unsettled (``channel.errors.Unsettled``): the run ends unsaved
    and is taken up again (:class:`StoreFailed`)."""
    kinds = StoreError | StoreFailed | Unsettled
    return not stopped(exc) and any(isinstance(current, kinds) for current in _chain(exc))


def slack_refusal(exc: BaseException) -> ChannelError | None:
    """The platform's refusal ``exc`` is or wraps (it answered no, for sure: not a transport failure,
    not an answer that leaves it unknown, not a rate limit), or None. A run ending on one is no bug:
    it ends with a warning naming the reason, not a traceback."""
    for current in _chain(exc):
        if (
            isinstance(current, ChannelError)
            and current.provider_code
            and not current.ambiguous
            and current.code != "rate_limited"
        ):
            return current
    return None
