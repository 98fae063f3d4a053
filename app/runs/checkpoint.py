"""Step checkpoints: a run's transcript saved as it goes, and how an interrupted run resumes from it
(``app.runs.resume``).

A run checkpoints (``Store.checkpoint``, one fenced transaction) after every model response that
calls tools, before the first of them writes (below), and after its final response, before the
answer is posted: the transcript so far, the inbox items it has shown the model (consumed with it),
the feedback its prompt showed. The task's run stays *open* until the run is saved; an open run is
due, so a crash at any point is resumed — by a restart or another instance — from the last
checkpoint:

- a response whose tool calls have no results: each call is answered from the effect journal,
  which records the call id with every write the call made (``channel.journal.CALL_ID``). A write
  left open was settled by the journal's reconcile first; a call that journalled nothing did not
  write. The model sees its own calls and their results (what it posted, with the text it wrote)
  and carries on; it is never asked the conversation again.
- a final answer: its response carries an answer marker (``metadata``); the answer's writes are
  journalled under that marker, so the resumed run knows whether the answer reached the thread and
  posts it only if it did not.

A checkpoint must survive the process dying at once; against a power loss it need only be on disk
before anything outside the store happens that a rerun from the previous checkpoint would repeat.
The run's own tools (``channel.tools``) journal a write before they make it, and that journal entry
is a synced commit, which on SQLite syncs the checkpoint before it too; other tools (MCP servers)
act on their own. So a checkpoint whose calls are all the run's own tools, or that holds the final
answer (posted through the journal), is committed without a sync of its own (``synced=False``);
one calling any other tool is synced itself.

The same reasoning lets a step calling only the run's own tools *hold* its checkpoint
(:meth:`Checkpoints.hold`) instead of writing it before the tools run: it is written in the same
trip as the step's first journal entry (``channel.journal.EffectJournal.held``, one SQLite
transaction, the checkpoint first), before a tool that writes outside the journal (a follow-up,
a question) or before the next model request, whichever comes first; a newer checkpoint or the
save supersedes it. Until then nothing has left the process that a rerun from the previous
checkpoint would repeat — the step's tools only read — so a crash there asks the model that step
again. The step's usage row goes with it. A turn's reply thus costs one store trip after the
model's response instead of two.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from functools import partial
from typing import Any, TypeVar, cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)

from channel.journal import CALL_ID
from channel.session import ChannelSession
from channel.tools import CATALOG, MCP_SEARCH
from storage.base import Fence, LeaseMoved, Store, StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The run's own tools: each journals a write before making it, or only reads (module doc).
_OWN_TOOLS = frozenset({*CATALOG, MCP_SEARCH.name})

#: Tries of a final answer's checkpoint before the run stops (``app.runs.outcome.StoreFailed``): the
#: answer the model wrote lives only in the process until it is written, so a failed write (a
#: session ended mid-statement, a timeout) is made again first, ``ANSWER_CHECKPOINT_PAUSE`` seconds
#: later, doubling.
ANSWER_CHECKPOINT_TRIES = 3
ANSWER_CHECKPOINT_PAUSE = 0.5

#: Key of the answer marker in a final response's ``metadata``.
ANSWER_KEY = "threadbound_answer"
#: Key, in a response's ``metadata``, of the streamed answer its ``channel_reply`` calls finish (by
#: call id): the messages streamed while the model wrote a call were journalled before the call
#: existed, under the answer's key (``channel.streaming.AnswerStream.key``); the key is how a resumed
#: run knows the call's reply reached the thread (``app.runs.resume``), however late they started.
STREAMED_KEY = "threadbound_streamed"
#: Key, in a checkpointed response's ``metadata``, of the person the run works for (its requester):
#: a run resumed from the checkpoint, its inbox items consumed, goes on for them (``app.runs.resume``).
REQUESTER_KEY = "threadbound_requester"


@dataclass(eq=False)
class Checkpoints:
    """One run's checkpoints, each with the items the run consumed since the last one."""

    store: Store
    task_id: str
    _: KW_ONLY
    fence: Fence | None
    #: Messages at the start of the history that are the summary (stored apart, never saved).
    prefix: int
    #: The items the run consumes (``app.runs.steps.Turn.consumed``): read here, changed by the turn.
    consumed: list[int]
    #: Feedback shown by the prompt, marked shown with the first checkpoint or save.
    feedback_upto: float | None = None
    #: A summary compaction made this run (saved with the first checkpoint or save).
    summary: str | None = field(default=None, init=False)
    #: Items a checkpoint consumed already (the next one sends only the newer ones).
    _done: set[int] = field(default_factory=set, init=False)
    #: A step's checkpoint held back (module doc): its messages, the items it consumes, and the
    #: writes that go with it (its usage row).
    _held: tuple[list[ModelMessage], list[int], tuple[Callable[[], Awaitable[Any]], ...]] | None = field(
        default=None, init=False
    )
    #: The held writes in flight (taken along by one call's write; another call's waits for them).
    _landing: asyncio.Future[Any] | None = field(default=None, init=False)

    def transcript(self, messages: Sequence[ModelMessage]) -> bytes:
        return ModelMessagesTypeAdapter.dump_json(list(messages[self.prefix :]))

    def take_feedback(self) -> float | None:
        upto, self.feedback_upto = self.feedback_upto, None
        return upto

    async def save(self, messages: Sequence[ModelMessage]) -> None:
        """Checkpoint ``messages`` (the run's whole history so far) with what the run consumed; a
        held checkpoint is superseded (its other writes go along)."""
        await self.with_held_checkpoint(self._write(messages, self._fresh()), supersedes=True)

    def hold(self, messages: Sequence[ModelMessage], *writes: Callable[[], Awaitable[Any]]) -> None:
        """Hold the checkpoint of ``messages``, and ``writes``, until the run's next write (module
        doc): a step whose calls are all the run's own tools (:func:`synced_by_next_write`)."""
        earlier = self._held[2] if self._held is not None else ()  # superseded, its writes kept
        self._held = (list(messages), self._fresh(), (*earlier, *writes))

    async def with_held_checkpoint(self, write: Awaitable[T], *, supersedes: bool = False) -> T:
        """``write``'s result, what is held committed with it (one trip on SQLite, in order, before
        it). ``supersedes``: ``write`` is a newer checkpoint or the save, so the held checkpoint is
        dropped (written after it, it would reopen the run with an older transcript). A write made
        while another call's write carries them waits until they are in (tools run concurrently);
        if that failed, the held checkpoint is held again and this write carries it."""
        while True:
            before = self._held
            if held := self._take(supersedes):
                self._landing = landing = asyncio.gather(*held)
                if before is not None and not supersedes:
                    landing.add_done_callback(partial(self._unless_landed, before[:2]))
                done = await asyncio.gather(landing, write)
                return cast(T, done[1])
            carrying = self._landing
            if carrying is None or carrying.done():
                return await write
            try:
                await asyncio.shield(carrying)  # never before it
            except BaseException:
                failed = carrying.done() and not carrying.cancelled() and carrying.exception() is not None
                if failed and self._held is not None:
                    continue  # held again (``_unless_landed``): written with this write now
                if inspect.iscoroutine(write):
                    write.close()
                raise
            return await write

    def _unless_landed(
        self, checkpoint: tuple[list[ModelMessage], list[int]], landing: asyncio.Future[Any]
    ) -> None:
        """The held checkpoint's write failed (a store failover, say): held again, so the run's next
        write or model request writes it, unless a newer one is held by then."""
        if (landing.cancelled() or landing.exception() is not None) and self._held is None:
            self._held = (*checkpoint, ())

    async def settle(self) -> None:
        """Commit what is held now (before a write outside the journal, or the next model request)."""
        await self.with_held_checkpoint(asyncio.sleep(0))

    def _take(self, supersedes: bool) -> list[Awaitable[Any]]:
        held, self._held = self._held, None
        if held is None:
            return []
        messages, fresh, writes = held
        first = [] if supersedes else [self._write(messages, fresh)]
        return [*first, *(w() for w in writes)]

    def _fresh(self) -> list[int]:
        return [i for i in self.consumed if i not in self._done]

    async def _write(self, messages: Sequence[ModelMessage], fresh: list[int]) -> None:
        upto = self.take_feedback()
        try:
            await self.store.checkpoint(
                self.task_id,
                transcript=self.transcript(messages),
                consumed=fresh,
                fence=self.fence,
                feedback_upto=upto,
                summary=self.summary,
                synced=not synced_by_next_write(messages),
            )
        except BaseException:
            if self.feedback_upto is None:
                self.feedback_upto = upto  # not marked shown: the next write marks it
            raise
        self._done.update(fresh)


def tag_streamed(messages: list[ModelMessage], streamed: Sequence[str], key: str) -> str:
    """Name on the last response (a step calling tools) the key ``key`` of the answer being
    streamed, for the first of its ``channel_reply`` calls among the ``streamed`` sources, before
    the step is checkpointed; returns that call's id ("" for none), the one call that finishes
    the answer (``AnswerStream.own``; any other reply call posts on its own). Finishing the reply
    makes the streamed text whole messages, journalled under the key (some may start only after this
    checkpoint), and a crash after it must find them posted, not ask for the reply again."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelResponse):
        return ""
    owner = next(
        (
            p.tool_call_id
            for p in last.parts
            if isinstance(p, ToolCallPart)
            and p.tool_name == "channel_reply"
            and f"call:{p.tool_call_id}" in streamed
        ),
        "",
    )
    if owner:
        metadata = {**(last.metadata or {}), STREAMED_KEY: {owner: [key]}}
        messages[-1] = replace(last, metadata=metadata)
    return owner


def tag_requester(messages: list[ModelMessage], person: str) -> None:
    """Name ``person`` (the run's requester) on the last response before the step is checkpointed."""
    last = messages[-1] if messages else None
    if person and isinstance(last, ModelResponse) and (last.metadata or {}).get(REQUESTER_KEY) != person:
        messages[-1] = replace(last, metadata={**(last.metadata or {}), REQUESTER_KEY: person})


def synced_by_next_write(messages: Sequence[ModelMessage]) -> bool:
    """Whether a checkpoint ending with ``messages`` may wait for the run's next synced commit to
    reach the disk (module doc): the last response calls only the run's own tools, or none."""
    last = messages[-1] if messages else None
    return isinstance(last, ModelResponse) and all(
        p.tool_name in _OWN_TOOLS for p in last.parts if isinstance(p, ToolCallPart)
    )


def mark_answer(
    messages: list[ModelMessage], text: str, effects: Sequence[str], *, note: bool = False
) -> str:
    """Put an answer marker on the final response (the last message): the call id its writes are
    journalled under. ``effects``: the key of the answer being streamed, whose messages started
    before the marker existed (``channel.streaming.AnswerStream.key``); ``note``: the run's stop
    note (posted without feedback buttons)."""
    marker = f"answer:{uuid.uuid4().hex}"
    last = messages[-1]
    if isinstance(last, ModelResponse):
        answer: dict[str, Any] = {"call": marker, "text": text, "effects": list(effects)}
        if note:
            answer["note"] = True
        messages[-1] = replace(last, metadata={**(last.metadata or {}), ANSWER_KEY: answer})
    return marker


async def _post_marked(
    session: ChannelSession, checkpoints: Checkpoints, messages: list[ModelMessage], text: str, *, note: bool
) -> None:
    """Checkpoint ``messages`` with an answer marker for ``text``, then post it journalled under it."""
    effects = () if note or session.answer is None else (session.answer.key,)
    marker = mark_answer(messages, text, effects, note=note)
    await _keep(session, checkpoints, messages)
    token = CALL_ID.set(marker)
    try:
        if note:
            await session.post_markdown(text, feedback=False)
        else:
            await session.answer_with(text)
    finally:
        CALL_ID.reset(token)


async def _keep(session: ChannelSession, checkpoints: Checkpoints, messages: list[ModelMessage]) -> None:
    """Checkpoint the answer ``messages`` end with, trying again (``ANSWER_CHECKPOINT_TRIES``) when
    the store fails; the lease is checked before each new try, and a fenced write is never repeated.
    Writing it again is harmless: the same transcript, the same items consumed."""
    pause = ANSWER_CHECKPOINT_PAUSE
    for attempt in range(1, ANSWER_CHECKPOINT_TRIES + 1):
        try:
            await checkpoints.save(messages)
            return
        except LeaseMoved:
            raise
        except StoreError as exc:
            if attempt == ANSWER_CHECKPOINT_TRIES:
                raise
            log.warning(
                "checkpointing the answer of task %s failed (%s); trying again", checkpoints.task_id, exc
            )
        await asyncio.sleep(pause)
        pause *= 2
        await session.journal.check()


async def post_note(
    session: ChannelSession, checkpoints: Checkpoints, messages: list[ModelMessage], text: str
) -> None:
    """Post the note a run ends with (``messages`` end with it: a stop note, an apology) once across
    a crash: checkpointed with its marker first, so a restart finds it posted or posts it."""
    await _post_marked(session, checkpoints, messages, text, note=True)


async def post_answer(
    session: ChannelSession,
    checkpoints: Checkpoints,
    messages: list[ModelMessage],
    output: str,
    note: str,
    *,
    start: int,
) -> None:
    """The end of a run in the thread: the note it stopped with, or its final text as the answer,
    unless the model replied to the newest message shown (a message steered in after a reply is
    answered too) or the text repeats a reply of this run (``messages[start:]``); else the streamed
    text that was no answer is removed. The answer (or the note) is checkpointed before it is posted
    and its writes journalled under its marker: a crash from here on posts it once."""
    if note:
        await session.drop_answer()
        await post_note(session, checkpoints, messages, note)
    elif not session.replied and output.strip() and not _repeats(messages[start:], output):
        await _post_marked(session, checkpoints, messages, output, note=False)
    else:
        await session.drop_answer()  # streamed text that was no answer (or a silent end)


def _repeats(messages: Sequence[ModelMessage], output: str) -> bool:
    """Whether ``output`` is the text of a channel_reply in ``messages`` that was posted."""
    posted = {
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
        and p.tool_name == "channel_reply"
        and isinstance(p.content, dict)
        and isinstance(p.content.get("message"), str)
    }
    return any(
        isinstance(p, ToolCallPart)
        and p.tool_name == "channel_reply"
        and p.tool_call_id in posted
        and str(p.args_as_dict().get("text", "")).strip() == output.strip()
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
    )
