"""Resuming a run a crash left open: its last checkpoint's calls answered from the effect journal,
and an answer checkpointed before it was posted posted once (``app.runs.checkpoint`` tells how
checkpoints are written and why this is enough)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
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
from channel.journal import CALL_ID
from channel.session import ChannelSession
from channel.session.asking import ASK_TOOLS
from channel.streaming import STREAM_KEY_PREFIX
from channel.tools import spec_named
from storage.base import EffectRecord, Store, TaskRecord

from .checkpoint import ANSWER_KEY, REQUESTER_KEY, STREAMED_KEY
from .history import load_history

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OpenAnswer:
    """A final answer checkpointed before it was posted: its text, marker, and the journal names of
    its streamed messages (:func:`entries_named`)."""

    text: str
    call: str
    effects: tuple[str, ...]
    #: A note the run ended with (a stop note, an apology): no feedback buttons.
    note: bool = False


#: Where a reply's messages reached: (part, characters of it shown; None: all of it).
Reached = tuple[int, int | None]
#: Posts what a reply has after a point (``ChannelSession.post_rest``): a reply a crash cut off.
RestPoster = Callable[[str, Reached | None], Awaitable[list[str]]]


async def resume(
    store: Store, task: TaskRecord, rest: RestPoster | None = None
) -> tuple[TaskRecord, OpenAnswer | None]:
    """The task of an open run, ready to go on (module doc): its dangling tool calls answered from
    the journal, or the final answer it had not finished posting. A reply cut off after some of its
    parts were posted is finished with ``rest`` first (its result then names every part). Run after
    the journal's reconcile."""
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
    by_call = await _by_call(store, task.task_id)
    streamed = (last.metadata or {}).get(STREAMED_KEY)
    for call_id, names in (streamed if isinstance(streamed, dict) else {}).items():
        # Streamed while the model wrote the call, before it existed: journalled under the answer's key.
        found = await entries_named(store, by_call, names)
        by_call[str(call_id)] = found + by_call.get(str(call_id), [])
    returns = []
    for call in calls:
        effects = by_call.get(call.tool_call_id, [])
        content = _result(call.tool_name, effects)
        if rest is not None and call.tool_name == "channel_reply" and _reached(effects) is not None:
            content = await _finish_reply(rest, call, effects, content)
        returns.append(ToolReturnPart(call.tool_name, content, call.tool_call_id))
    history.append(ModelRequest(parts=returns))
    return replace(task, transcript=ModelMessagesTypeAdapter.dump_json(history)), None


async def _by_call(store: Store, task_id: str) -> dict[str, list[EffectRecord]]:
    """The task's journal entries made under a call id (a tool call's, an answer's, a stream's), by it."""
    by_call: dict[str, list[EffectRecord]] = {}
    for effect in await store.call_effects(task_id):
        by_call.setdefault(effect.call_id, []).append(effect)
    return by_call


async def entries_named(
    store: Store, by_call: dict[str, list[EffectRecord]], names: object
) -> list[EffectRecord]:
    """The journal entries a checkpoint names for a streamed answer: each name is the answer's key
    (its entries, from ``by_call``: the task's entries by call id) or, in a checkpoint written by an
    earlier version, one entry's id."""
    found: list[EffectRecord] = []
    for name in names if isinstance(names, (list, tuple)) else ():
        name = str(name)
        if name.startswith(STREAM_KEY_PREFIX):
            found += by_call.get(name, [])
        elif (effect := await store.get_effect(name)) is not None:
            found.append(effect)
    return found


def _reached(effects: Sequence[EffectRecord]) -> Reached | None:
    """How far a reply's posted messages reach, from its journal entries: the last part with a
    message, and how many of its characters they show (None: all; a message records ``chars``
    when it may hold less, a streamed one Slack ended early). None when nothing was posted."""
    reached: Reached | None = None
    for effect in effects:
        result = json.loads(effect.result) if effect.state == "done" and effect.result else None
        if effect.tool != "channel_reply" or not isinstance(result, dict):
            continue
        if not isinstance(result.get("message"), str):
            continue
        args = json.loads(effect.args)
        part = args.get("part", 0) if isinstance(args.get("part", 0), int) else 0
        chars = result.get("chars")
        end = int(args.get("base") or 0) + chars if isinstance(chars, int) else None
        if reached is None or part > reached[0]:
            reached = (part, end)
        elif part == reached[0] and reached[1] is not None:
            reached = (part, None if end is None else max(end, reached[1]))
    return reached


async def _finish_reply(
    rest: RestPoster, call: ToolCallPart, effects: Sequence[EffectRecord], content: dict[str, Any]
) -> dict[str, Any]:
    """A reply whose first parts were posted before the crash: its other parts posted now, under
    its call (never twice: they are journalled as the call's), and named in its result."""
    try:
        text = call.args_as_dict().get("text")
    except ValueError:
        return content
    if not isinstance(text, str):
        return content
    token = CALL_ID.set(call.tool_call_id)
    try:
        more = await rest(text, _reached(effects))
    except ChannelError as exc:
        return {**content, "note": f"{content['note']}; its last parts could not be posted: {exc.message}"}
    finally:
        CALL_ID.reset(token)
    if not more:
        return content
    parts = [*(content.get("parts") or [content["message"]]), *more]
    note = "posted before your run was interrupted (its last parts as it resumed)"
    return {**content, "parts": parts, "note": note}


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
    spec = spec_named(tool)
    if spec is not None and spec.journal.journalled:
        return _interrupted("Your run was interrupted before this call wrote anything; nothing was done.")
    return _interrupted("Your run was interrupted while this call ran; its result is unknown. Check first.")


def _interrupted(message: str) -> dict[str, Any]:
    return {"error": {"code": "interrupted", "message": message}}


async def answer_reached(store: Store, task_id: str, answer: OpenAnswer) -> Reached | None:
    """How far the open answer's messages reach in the thread (:func:`_reached`); None: nowhere."""
    by_call = await _by_call(store, task_id)
    return _reached(by_call.get(answer.call, []) + await entries_named(store, by_call, answer.effects))


async def finish_answer(store: Store, session: ChannelSession, answer: OpenAnswer) -> None:
    """Post the open answer, or the parts of it that did not reach the thread, then close the run."""
    if answer.text.strip():
        reached = await answer_reached(store, session.task.task_id, answer)
        token = CALL_ID.set(answer.call)
        try:
            await session.post_rest(answer.text, reached, feedback=not answer.note)
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


def requester_of(transcript: bytes) -> str:
    """The person the run the transcript ends with worked for, as its newest checkpoint named them
    (``checkpoint.tag_requester``); "" for none. A resumed run goes on for them: its inbox items
    were consumed with the checkpoint, so no message names them any more."""
    for message in reversed(load_history(transcript)):
        if isinstance(message, ModelResponse):
            person = (message.metadata or {}).get(REQUESTER_KEY)
            if isinstance(person, str) and person:
                return person
    return ""


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
    session.task, answer = await resume(store, session.task, session.post_rest)
    session.replied = not fresh and replied_since_prompt(session.task.transcript)
    if answer is None:
        if not fresh and asked(session.task.transcript):
            session.turn_end = "waiting"  # as the interrupted run would have: its card waits for an answer
        return False
    if feedback:
        session.feedback = session.task.task_id
    await finish_answer(store, session, answer)
    return True
