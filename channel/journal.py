"""The effect journal: every channel write is recorded before it is made, so a crash never repeats it.

A write opens an effect (tool and arguments) in the store *before* the provider
call and closes it with the result after. Effects a crashed run left open are
settled by :func:`reconcile` at the start of the next run:

- a post is looked up by the effect id it carries; found, its result is recovered,
  otherwise it is reported unavailable (and not posted again);
- a streamed reply (``stream: true``) carries its effect id once stopped, so a finished one is
  found like a post; one still unfinished (its ref journalled as ``channel_stream``) is partial
  text and is removed, so the resumed run answers once, not a fragment plus an answer. A stream
  whose ref was never journalled (a crash right after ``startStream``, or a start whose answer
  was lost: ``channel_stream`` with no ref) is looked for as the bot's unfinished message in the
  thread after the message it answered (``after``), and removed;
- reactions, edits and retractions are idempotent, so they are re-attempted
  (``already_done`` and :class:`~channel.errors.MessageGone` mean already done);
- uploads and documents carry no marker to look for: they are reported, never repeated.

An entry left open may be a write still on its way: its host died or was fenced while the request
was out, and Slack can apply it seconds later. Such a write counts as maybe applied until it can
no longer land (``ChannelAdapter.in_flight``: its last attempt began before its own deadline and
before the host's guard refused, ``channel.contract.WRITE_GUARD_LAG`` after this run took over;
it lands within one attempt's window after that). Until then a post is looked for again and again
and reported not posted only after; a stream whose start was never answered is looked for only
after; an idempotent write is made again only after (made sooner, the original landing late
would undo a later write of the model's); an upload is reported only after.

How a tool's entries settle is its spec's :class:`JournalPolicy` (``channel.tools``): the policy
names one of :func:`settle_post`, :func:`redo` or :func:`settle_unknown`.

Before any write is recorded, the journal awaits the host's ``guard`` (if any): a host
that may no longer act for the task (its lease was lost) raises there, so the write is
neither recorded nor made. A journal given the host's lease ``fence`` carries it on every
entry it opens and closes: once the lease has moved the store refuses them
(``storage.records.LeaseMoved``), so a run that lost its lease can commit nothing (invariant
"Fencing", docs/architecture.md).

The host may hold writes back until the task's next write (``held``: a run's step checkpoint,
``app.runs.checkpoint``): an entry opened goes to the store along with them, in one trip, and a
tool that writes outside the journal has them written first (:meth:`EffectJournal.settle_held`).

The session (``channel.session``) is the only caller.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any, Protocol, TypeVar

from storage.base import EffectRecord, Fence, retry_if_session_ended

from .contract import ChannelAdapter, Origin, Posted, WriteGuard, look_until
from .errors import ChannelError, MessageGone, bounded
from .store import SessionStore

log = logging.getLogger(__name__)

Result = dict[str, Any]
T = TypeVar("T")

#: The id of the model's tool call being handled: a streamed channel_reply is matched by it, and
#: the journal records it with every write the call makes (a resumed run answers the call from it).
CALL_ID: ContextVar[str] = ContextVar("channel_call_id", default="")
#: Journal tool name of the record tying a streamed message's ref to its reply effect.
STREAM_EFFECT = "channel_stream"
#: The note for a reply removed because it was interrupted while being written.
_CUT_OFF = "was cut off while being written and removed; answer again if still needed"


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A tool's journal entry a crash left open, with what settling it may use."""

    adapter: ChannelAdapter
    origin: Origin
    effect_id: str
    args: dict[str, Any]
    #: Mints the handle of a recovered post.
    record_post: Callable[[Posted], Awaitable[str]]
    #: The ``time.monotonic()`` moment after which the write can no longer land (module doc).
    until: float = 0.0

    async def look(self, find: Callable[[], Awaitable[T]]) -> T:
        """``find``'s answer once it finds something, else its answer once the write can no
        longer land."""
        return await look_until(find, self.until)

    async def waited(self) -> None:
        """Return once the write can no longer land."""
        await wait_until(self.until)


async def wait_until(until: float) -> None:
    """Sleep until the ``time.monotonic()`` moment ``until``."""
    left = until - time.monotonic()
    if left > 0:
        await asyncio.sleep(left)


def landed_by(journal: EffectJournal, adapter: ChannelAdapter, effect: EffectRecord) -> float:
    """The ``time.monotonic()`` moment after which the write of ``effect``, opened by a host that
    is gone or fenced now, can no longer land (module doc)."""
    now = journal.clock()
    left = adapter.in_flight.until(effect.created_at, now) - now
    return time.monotonic() + max(0.0, left)


#: Settles an interrupted entry: the result it is closed with, and the note the model reads.
Settle = Callable[[Interrupted], Awaitable[tuple[Result, str]]]


class Writes(Enum):
    """What a tool writes, as the journal sees it."""

    #: Every write opens a journal entry first: a call with no entry wrote nothing.
    JOURNALLED = "journalled"
    #: Nothing durable a rerun would repeat (a read's handles, a file already on disk).
    NOTHING = "nothing"
    #: Writes the journal does not see (the store's follow-ups and enabled tools, the host's cards).
    OUTSIDE = "outside"


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalPolicy:
    """How one tool meets the journal (module doc): what it writes, and how an entry of it a crash
    left open is settled."""

    writes: Writes
    #: Settles an entry of it a crash left open; every journalled tool has one.
    settle: Settle | None = None

    def __post_init__(self) -> None:
        if (self.writes is Writes.JOURNALLED) != (self.settle is not None):
            raise ValueError("a journalled tool, and only one, says how its interrupted entries settle")

    @property
    def journalled(self) -> bool:
        """A call of it with no journal entry wrote nothing (a resumed run says so)."""
        return self.writes is Writes.JOURNALLED

    @property
    def runs_with_held(self) -> bool:
        """Its only durable writes are journal entries, or none a rerun would repeat: it runs with
        the host's held writes still held. Any other tool has them written first."""
        return self.writes is not Writes.OUTSIDE


#: Tools that write nothing a rerun would repeat.
NO_WRITES = JournalPolicy(writes=Writes.NOTHING)
#: Tools that write outside the journal.
WRITES_OUTSIDE = JournalPolicy(writes=Writes.OUTSIDE)


def journalled(settle: Settle) -> JournalPolicy:
    """The policy of a tool that journals every write, its interrupted entries settled by ``settle``."""
    return JournalPolicy(writes=Writes.JOURNALLED, settle=settle)


class HeldWrites(Protocol):
    """Writes the host holds back until the task's next write (module doc)."""

    async def with_held_checkpoint(self, write: Awaitable[T]) -> T:
        """``write``'s result, the held writes committed with it (before it, in order)."""

    async def settle(self) -> None:
        """Commit the held writes now."""


@dataclass(eq=False)
class EffectJournal:
    """One task's journal of writes."""

    store: SessionStore
    task_id: str
    clock: Callable[[], float] = time.time
    #: Awaited before every write (module doc); None: nothing forbids writing.
    guard: WriteGuard | None = None
    #: The host's lease acquisition, carried on every entry opened and closed (module doc).
    fence: Fence | None = None
    #: Writes committed along with the next entry opened (module doc); None: nothing is held.
    held: HeldWrites | None = None

    async def check(self) -> None:
        """Raise (the guard's exception) when the task may no longer write."""
        if self.guard is not None:
            await self.guard()

    async def open(self, tool: str, args: Result, *, effect_id: str = "", call_id: str = "") -> str:
        """Record that ``tool`` is about to write with ``args``; returns the new effect's id (``effect_id``
        when given: one a restart can look up). ``call_id``: what the entry is recorded under when no
        tool call is being handled (:data:`CALL_ID` unset; a streamed answer's own key). The guard runs
        first: a write the host forbids is neither recorded nor made."""
        await self.check()
        effect_id = effect_id or uuid.uuid4().hex
        opened = self.store.open_effect(
            effect_id=effect_id,
            task_id=self.task_id,
            tool=tool,
            args=json.dumps(args),
            now=self.clock(),
            call_id=CALL_ID.get() or call_id,
            fence=self.fence,
        )
        await (opened if self.held is None else self.held.with_held_checkpoint(opened))
        return effect_id

    async def settle_held(self) -> None:
        """Commit what the host holds back (before a write outside the journal)."""
        if self.held is not None:
            await self.held.settle()

    async def get(self, effect_id: str) -> EffectRecord | None:
        return await self.store.get_effect(effect_id)

    async def look_for(
        self, adapter: ChannelAdapter, effect: EffectRecord, find: Callable[[], Awaitable[T]]
    ) -> T:
        """``find``'s answer once it finds the write of ``effect``, an entry a run that is gone or
        fenced left open, else its answer once that write can no longer land (module doc): what
        is not found then is made again."""
        return await look_until(find, landed_by(self, adapter, effect))

    async def close(self, effect_id: str, result: Result) -> None:
        """Record the write's result. Made again once when the store failed (a close only sets the
        entry's result, so twice is once): a write that happened must not stay open for want of a
        second try, after a database failover ended the session the first one went to."""
        write = partial(self.store.close_effect, effect_id, result=json.dumps(result), fence=self.fence)
        await retry_if_session_ended(write)

    async def write(self, tool: str, args: Result, action: Callable[[], Awaitable[Result]]) -> Result:
        """Run ``action`` inside an effect; its result (or its error result) closes the effect."""
        effect_id = await self.open(tool, args)
        try:
            result = await action()
        except ChannelError as exc:
            await self.close(effect_id, exc.as_result())
            raise
        await self.close(effect_id, result)
        return result


async def reconcile(
    journal: EffectJournal,
    adapter: ChannelAdapter,
    origin: Origin,
    effects: Sequence[EffectRecord],
    record_post: Callable[[Posted], Awaitable[str]],
    settle_of: Callable[[str], Settle | None],
) -> list[str]:
    """Settle effects a crashed run left open, never repeating a post; ``record_post`` mints the
    handle of a recovered post, ``settle_of`` names how a tool's entries settle (its spec's journal
    policy; None: :func:`settle_unknown`). Returns one line per effect for the model (reasons
    bounded to 512 bytes)."""
    notes: list[str] = []
    began = time.monotonic()
    until = {effect.effect_id: landed_by(journal, adapter, effect) for effect in effects}
    # A streamed message's ref, by the reply effect it belongs to.
    streamed: dict[str, tuple[str, str]] = {}
    for effect in effects:
        if effect.tool == STREAM_EFFECT:
            args = json.loads(effect.args)
            streamed[str(args.get("reply"))] = (effect.effect_id, str(args.get("ref") or ""))
    for effect in effects:
        if effect.tool == STREAM_EFFECT:
            continue  # settled with its reply
        await journal.check()  # settling may write again (reactions, edits, retractions)
        args = json.loads(effect.args)
        stream = streamed.pop(effect.effect_id, None)
        try:
            if stream is not None:
                result, note = await _settle_stream(adapter, origin, effect.effect_id, stream[1], record_post)
            else:
                settle = settle_of(effect.tool) or settle_unknown
                interrupted = Interrupted(
                    adapter, origin, effect.effect_id, args, record_post, until[effect.effect_id]
                )
                result, note = await settle(interrupted)
        except ChannelError as exc:
            result, note = exc.as_result(), f"is unavailable: {exc.message}"
        await journal.close(effect.effect_id, result)
        if stream is not None:
            await journal.close(stream[0], {"ok": True})
        notes.append(f"- an interrupted {effect.tool} {bounded(note)}")
    for stream_effect, ref in streamed.values():  # its reply effect was already closed
        await journal.check()
        args = json.loads(_args_of(effects, stream_effect))
        try:
            if not ref:  # a start whose answer was lost: Slack may hold the message, or still apply it
                await wait_until(until[stream_effect])
                await _remove_unfinished(adapter, origin, args)
            elif not await adapter.find_posted(origin, str(args.get("reply") or "")):
                # Not finished as its reply (no effect id on it): text that was removed from the
                # answer, whose deletion failed or was cut off.
                await _retract(adapter, ref)
        except ChannelError as exc:
            await journal.close(stream_effect, exc.as_result())
            continue
        await journal.close(stream_effect, {"ok": True})
    waited = time.monotonic() - began
    if waited >= 1.0:
        log.info(
            "interrupted writes settled after waiting out those still on their way",
            extra={"fields": {"task": journal.task_id, "waited_ms": round(waited * 1000)}},
        )
    return notes


async def _retract(adapter: ChannelAdapter, ref: str) -> None:
    """Delete ``ref``; already gone counts as done."""
    try:
        await adapter.retract(ref)
    except ChannelError as exc:
        if exc.code != "not_found":
            raise


def _args_of(effects: Sequence[EffectRecord], effect_id: str) -> str:
    return next(e.args for e in effects if e.effect_id == effect_id)


async def _remove_unfinished(adapter: ChannelAdapter, origin: Origin, args: dict[str, Any]) -> int:
    """Remove the bot's unfinished streamed messages after ``args["after"]`` in the reply's thread;
    how many were removed."""
    where = Origin(args.get("channel", origin.channel), args.get("thread_ts", origin.thread))
    removed = 0
    for orphan in await adapter.find_unfinished(where, str(args.get("after") or where.thread)):
        await _retract(adapter, orphan.ref)
        removed += 1
    return removed


async def _settle_stream(
    adapter: ChannelAdapter,
    origin: Origin,
    effect_id: str,
    ref: str,
    record_post: Callable[[Posted], Awaitable[str]],
) -> tuple[Result, str]:
    found = await adapter.find_posted(origin, effect_id)
    if found:
        handle = await record_post(found[0])
        return {"message": handle, "permalink": found[0].permalink}, f"was posted as {handle}"
    await _retract(adapter, ref)
    error = ChannelError("not_found", "the interrupted reply was removed before it was finished")
    return error.as_result(), _CUT_OFF


async def settle_post(interrupted: Interrupted) -> tuple[Result, str]:
    """A reply's part: found by the effect id it carries, else reported not posted (never posted
    again); a streamed one started but never journalled is looked for unfinished and removed."""
    args, origin, adapter = interrupted.args, interrupted.origin, interrupted.adapter
    where = Origin(args.get("channel", origin.channel), args.get("thread_ts", origin.thread))
    found = await interrupted.look(partial(adapter.find_posted, where, interrupted.effect_id))
    if not found and args.get("stream") and await _remove_unfinished(adapter, origin, args):
        # Started, but its ref never journalled: the partial message was found and removed.
        error = ChannelError("not_found", "the interrupted reply was removed before it was finished")
        return error.as_result(), _CUT_OFF
    if not found:
        error = ChannelError("not_found", "the interrupted reply is not in the conversation")
        return error.as_result(), "was not posted; post it again if it is still needed"
    handle = await interrupted.record_post(found[0])
    return {"message": handle, "permalink": found[0].permalink}, f"was posted as {handle}"


def redo(write: Callable[[ChannelAdapter, dict[str, Any]], Awaitable[object]]) -> Settle:
    """An idempotent write (a reaction, an edit, a retraction): made again with the journalled
    arguments; an error that means it had already taken effect counts as done."""

    async def settle(interrupted: Interrupted) -> tuple[Result, str]:
        await interrupted.waited()  # the original landing after it would undo what the model does next
        try:
            await write(interrupted.adapter, interrupted.args)
        except ChannelError as exc:
            # An idempotent write that had already taken effect, or whose message is gone.
            if exc.code != "already_done" and not isinstance(exc, MessageGone):
                raise
        return {"ok": True}, "was completed"

    return settle


async def settle_unknown(interrupted: Interrupted) -> tuple[Result, str]:
    """A write with no marker to look for (an upload, a document): reported, never repeated, once
    it can no longer land (the model may look for it then)."""
    await interrupted.waited()
    error = ChannelError("not_found", "the interrupted action's result is unavailable")
    return error.as_result(), "has an unavailable result; check before doing it again"
