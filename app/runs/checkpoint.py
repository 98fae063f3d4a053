"""Step checkpoints: a run's transcript saved as it goes, and an interrupted run resumed from it.

A run checkpoints (``Store.checkpoint``, one fenced transaction) after every model response that
calls tools, before the tools run, and after its final response, before the answer is posted: the
transcript so far, the inbox items it has shown the model (consumed with it), the feedback its
prompt showed. The task's run stays *open* until the run is saved; an open run is due, so a crash
at any point is resumed — by a restart or another instance — from the last checkpoint:

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
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from channel.errors import ChannelError
from channel.journal import CALL_ID
from channel.session import ChannelSession
from channel.session.asking import ASK_TOOLS
from channel.tools import CATALOG, MCP_SEARCH
from storage.base import EffectRecord, Fence, Store, TaskRecord

from .history import load_history

log = logging.getLogger(__name__)

#: The run's own tools: each journals a write before making it, or only reads (module doc).
_OWN_TOOLS = frozenset({*CATALOG, MCP_SEARCH.name})

#: Key of the answer marker in a final response's ``metadata``.
ANSWER_KEY = "threadbound_answer"
#: Channel tools that journal before they write: a call of one with no journal entry wrote nothing.
_JOURNALLED = frozenset(
    {
        "channel_reply",
        "channel_react",
        "channel_edit",
        "channel_retract",
        "channel_attach",
        "channel_post_document",
    }
)


@dataclass(eq=False)
class Checkpoints:
    """One run's checkpoints; ``consumed`` is the run's own list (steered items are appended to it)."""

    store: Store
    task_id: str
    _: KW_ONLY
    fence: Fence | None
    #: Messages at the start of the history that are the summary (stored apart, never saved).
    prefix: int
    consumed: list[int]
    #: Feedback shown by the prompt, marked shown with the first checkpoint or save.
    feedback_upto: float | None = None
    #: A summary compaction made this run (saved with the first checkpoint or save).
    summary: str | None = field(default=None, init=False)
    #: Items a checkpoint consumed already (the next one sends only the newer ones).
    _done: set[int] = field(default_factory=set, init=False)

    def transcript(self, messages: Sequence[ModelMessage]) -> bytes:
        return ModelMessagesTypeAdapter.dump_json(list(messages[self.prefix :]))

    def take_feedback(self) -> float | None:
        upto, self.feedback_upto = self.feedback_upto, None
        return upto

    async def save(self, messages: Sequence[ModelMessage]) -> None:
        """Checkpoint ``messages`` (the run's whole history so far) with what the run consumed."""
        fresh = [i for i in self.consumed if i not in self._done]
        await self.store.checkpoint(
            self.task_id,
            transcript=self.transcript(messages),
            consumed=fresh,
            fence=self.fence,
            feedback_upto=self.take_feedback(),
            summary=self.summary,
            synced=not synced_by_next_write(messages),
        )
        self._done.update(fresh)


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
    journalled under. ``effects``: journal entries of the answer made already (a streamed start);
    ``note``: the run's stop note (posted without feedback buttons)."""
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
    effects = () if note or session.answer is None else session.answer.effect_ids
    marker = mark_answer(messages, text, effects, note=note)
    await checkpoints.save(messages)
    token = CALL_ID.set(marker)
    try:
        if note:
            await session.post_markdown(text, feedback=False)
        else:
            await session.answer_with(text)
    finally:
        CALL_ID.reset(token)


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


@dataclass(frozen=True, slots=True)
class OpenAnswer:
    """A final answer checkpointed before it was posted: its text, marker and earlier journal entries."""

    text: str
    call: str
    effects: tuple[str, ...]
    #: A note the run ended with (a stop note, an apology): no feedback buttons.
    note: bool = False


async def resume(store: Store, task: TaskRecord) -> tuple[TaskRecord, OpenAnswer | None]:
    """The task of an open run, ready to go on (module doc): its dangling tool calls answered from
    the journal, or the final answer it had not finished posting. Run after the journal's reconcile."""
    history = load_history(task.transcript)
    last = history[-1] if history else None
    if not isinstance(last, ModelResponse):
        return task, None
    calls = [p for p in last.parts if isinstance(p, ToolCallPart)]
    if not calls:
        meta = (last.metadata or {}).get(ANSWER_KEY)
        if not isinstance(meta, dict):
            return task, None
        answer = OpenAnswer(
            str(meta.get("text", "")),
            str(meta.get("call", "")),
            tuple(meta.get("effects", ())),
            note=bool(meta.get("note")),
        )
        return task, answer
    gated = {a.tool_call_id for a in await store.task_approvals(task.task_id)}
    calls = [c for c in calls if c.tool_call_id not in gated]
    if not calls:
        return task, None  # calls waiting for approval: the approvals pass their results
    by_call: dict[str, list[EffectRecord]] = {}
    for effect in await store.call_effects(task.task_id):
        by_call.setdefault(effect.call_id, []).append(effect)
    returns = [
        ToolReturnPart(c.tool_name, _result(c.tool_name, by_call.get(c.tool_call_id, [])), c.tool_call_id)
        for c in calls
    ]
    history.append(ModelRequest(parts=returns))
    return replace(task, transcript=ModelMessagesTypeAdapter.dump_json(history)), None


def _result(tool: str, effects: Sequence[EffectRecord]) -> Any:
    """What an interrupted call returns, from the journal entries it made."""
    results = [json.loads(e.result) for e in effects if e.state == "done" and e.result]
    messages = [r["message"] for r in results if isinstance(r, dict) and isinstance(r.get("message"), str)]
    if tool == "channel_reply" and messages:
        result: dict[str, Any] = {"message": messages[0], "note": "posted before your run was interrupted"}
        if len(messages) > 1:
            result["parts"] = messages
        return result
    if results:
        return results[-1]
    if tool in _JOURNALLED:
        return _interrupted("Your run was interrupted before this call wrote anything; nothing was done.")
    return _interrupted("Your run was interrupted while this call ran; its result is unknown. Check first.")


def _interrupted(message: str) -> dict[str, Any]:
    return {"error": {"code": "interrupted", "message": message}}


async def answered(store: Store, task_id: str, answer: OpenAnswer) -> bool:
    """Whether the open answer reached the thread: a journal entry of it records a posted message."""
    entries = [e for e in await store.call_effects(task_id) if e.call_id == answer.call]
    for effect_id in answer.effects:
        effect = await store.get_effect(effect_id)
        if effect is not None:
            entries.append(effect)
    for effect in entries:
        result = json.loads(effect.result) if effect.state == "done" and effect.result else None
        if isinstance(result, dict) and isinstance(result.get("message"), str):
            return True
    return False


async def finish_answer(store: Store, session: ChannelSession, answer: OpenAnswer) -> None:
    """Post the open answer unless it reached the thread already, then close the run."""
    if answer.text.strip() and not await answered(store, session.task.task_id, answer):
        token = CALL_ID.set(answer.call)
        try:
            await session.post_markdown(answer.text, feedback=not answer.note)
        except ChannelError as exc:
            log.warning(
                "could not post the interrupted answer of task %s: %s", session.task.task_id, exc.message
            )
        finally:
            CALL_ID.reset(token)
    await session.journal.check()
    await store.save_run(
        session.task.task_id, transcript=session.task.transcript, consumed=[], fence=session.journal.fence
    )


def asked(transcript: bytes) -> bool:
    """Whether the transcript ends with a card's call answered (``channel_ask``, ``channel_request_approval``
    posted): the turn waits for the answer."""
    history = load_history(transcript)
    last = history[-1] if history else None
    return isinstance(last, ModelRequest) and any(
        isinstance(p, ToolReturnPart)
        and p.tool_name in ASK_TOOLS
        and isinstance(p.content, dict)
        and "error" not in p.content
        for p in last.parts
    )


def replied_since_prompt(transcript: bytes) -> bool:
    """Whether the run the transcript ends with posted a reply since the person's last prompt (a
    resumed run does not post its final text as a second answer)."""
    for message in reversed(load_history(transcript)):
        if not isinstance(message, ModelRequest):
            continue
        # A prompt is newer than the tool results sent with it (a message steered in after a reply):
        # those calls were made before the model saw it.
        if any(_prompted(p) for p in message.parts):
            return False
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.tool_name == "channel_reply":
                content = part.content
                if isinstance(content, dict) and isinstance(content.get("message"), str):
                    return True
    return False


def _prompted(part: object) -> bool:
    """A person's message shown to the model (not a notice of pydantic-ai's own, ``<system>…``)."""
    if not isinstance(part, UserPromptPart):
        return False
    return not (isinstance(part.content, str) and part.content.startswith("<system>"))


async def resume_open_run(store: Store, session: ChannelSession, fresh: bool, feedback: bool) -> bool:
    """Make ``session`` go on from its task's checkpoint (module doc). True when the run had its
    final answer: it is now posted once and the run closed, nothing more to do. ``fresh``: new
    messages came meanwhile (the resumed run answers them too, so it has not replied yet)."""
    session.task, answer = await resume(store, session.task)
    session.replied = not fresh and replied_since_prompt(session.task.transcript)
    if answer is None:
        if not fresh and asked(session.task.transcript):
            session.turn_end = "waiting"  # as the interrupted run would have: its card waits for an answer
        return False
    if feedback:
        session.feedback = session.task.task_id
    await finish_answer(store, session, answer)
    return True
