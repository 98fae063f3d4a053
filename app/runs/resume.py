"""Resuming a run a crash left open: its last checkpoint's calls answered from the effect journal,
and an answer checkpointed before it was posted posted once (``app.runs.checkpoint`` tells how
checkpoints are written and why this is enough)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from channel.errors import ChannelError
from channel.journal import CALL_ID, JOURNALLED
from channel.session import ChannelSession
from channel.session.asking import ASK_TOOLS
from storage.base import EffectRecord, Store, TaskRecord

from .checkpoint import ANSWER_KEY, STREAMED_KEY
from .history import load_history

log = logging.getLogger(__name__)


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
    streamed = (last.metadata or {}).get(STREAMED_KEY)
    for call_id, effect_ids in (streamed if isinstance(streamed, dict) else {}).items():
        # Streamed while the model wrote the call, before it existed: journalled with no call id.
        found = [await store.get_effect(str(effect_id)) for effect_id in effect_ids]
        by_call[str(call_id)] = [e for e in found if e is not None] + by_call.get(str(call_id), [])
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
    if tool in JOURNALLED:
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
