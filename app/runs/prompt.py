"""What the model is shown of a task's inbound messages: the prompt, and whom a streamed answer is for.

Text is data, never structure (invariant "Text is data", docs/architecture.md): each message is one
JSON object on a line of its own (``author``, ``message`` handle, ``text``, ``files``), so a newline,
a quote or a line shaped like another person's message inside a text or a file name stays inside
that string. The instructions tell the model the format (``app.agent.runtime``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from app.agent.approvals import Approvals, is_decision
from app.agent.asks import answer_row, is_answer
from app.agent.mcp.authorizations import authorization_row, is_authorization
from channel import inbound
from channel.errors import ChannelError
from channel.inbound import InboundAuthor, InboundMessage
from channel.session import ChannelSession
from storage.base import AskRecord, InboxItem

from .follow_ups import follow_up_row, is_follow_up

log = logging.getLogger(__name__)

#: Told to the model when some calls wait for approval (``approval`` in agent.toml).
APPROVAL_NOTE = (
    "\n\nSome actions wait for a person's approval: calling one posts an approval card in this "
    "conversation and your turn ends there. You continue with its result once someone decides; a "
    'refusal comes back as an error with code "denied", no decision in time as "expired".'
)


async def render_prompt(
    session: ChannelSession,
    items: Sequence[InboxItem],
    notes: Sequence[str] = (),
    *,
    asks: Sequence[AskRecord] | None = None,
) -> str:
    """The inbound messages as the model's user prompt: one JSON object per message (author,
    handle, rendered text, files), then any notes about an interrupted run. ``asks``: the task's
    undecided asks as the run's start read them (else read when a message might answer one)."""
    lines: list[str] = []
    for item in items:
        if is_decision(item):
            continue  # a decision on an approval resumes the task; it is no message
        if is_follow_up(item):
            if (follow_up := await follow_up_row(session, item)) is not None:
                lines.append(_line(follow_up))
            continue
        try:
            raw = json.loads(item.payload)
        except ValueError:
            raw = None
        if is_authorization(raw):  # "Alice connected the tickets service" (app.agent.mcp.authorizations)
            assert isinstance(raw, dict)
            lines.append(_line(authorization_row(raw, await _name(session, inbound.person(item.payload)))))
            continue
        if is_answer(raw):  # "Alice answered q_…: staging" (app.agent.asks)
            assert isinstance(raw, dict)
            lines.append(_line(await session.asks.row(session, raw) if session.asks else answer_row(raw, "")))
            continue
        message = inbound.stored(item.payload)
        if message is None or (message.conversation or item.channel) != item.channel:
            # Checked against the conversation it was claimed for: never a handle to another one.
            log.warning("inbound message %s does not belong to its conversation; not shown", item.ts)
            lines.append(_line({"unavailable": "a message that does not belong to this conversation"}))
            continue
        try:
            row = await session.inbound_row(message.data)
        except ChannelError as exc:
            log.warning("could not render inbound message %s: %s", item.ts, exc.message)
            lines.append(_line({"unavailable": f"a message that could not be shown: {exc.message}"}))
            continue
        shown = prompt_row(row)
        if message.asked_about:
            # A person pointed at this message (a shortcut): the asker, and the message by its handle.
            lines.append(_line({"author": message.author.name or "someone", "asked_about": shown}))
            continue
        if session.asks is not None and message.author.id:
            # The next message from an allowed person answers an open free-text question.
            who = message.author.id
            shown = await session.asks.free_text(session, who, shown, item.created_at, asks) or shown
        lines.append(_line(shown))
    if notes:
        lines += ["", "Your previous run was interrupted before it finished:", *notes]
    return "\n".join(lines)


async def _name(session: ChannelSession, user: str) -> str:
    """``user``'s display name as the asks' host finds it ("" when it cannot)."""
    name_of = getattr(session.asks, "name_of", None)
    if not user or name_of is None:
        return ""
    try:
        name, _ = await name_of(user)
    except ChannelError:
        return ""
    return str(name)


def prompt_row(row: dict[str, Any]) -> dict[str, Any]:
    """A ``channel_read`` row as the prompt shows it: who, which message, what it says, its files."""
    out: dict[str, Any] = {
        "author": row["author"]["display_name"],
        "message": row["message"],
        "text": row["text"],
    }
    files = [
        {k: f[k] for k in ("file", "name", "media_type", "size", "unavailable") if k in f}
        for f in row["files"]
    ]
    if files:
        out["files"] = files
    return out


def _line(obj: dict[str, Any]) -> str:
    # ensure_ascii off: names and text stay readable; JSON still escapes newlines, quotes and controls.
    return json.dumps(obj, ensure_ascii=False)


def recipient(items: Sequence[InboxItem]) -> InboundMessage | None:
    """The newest inbound message: whom a streamed answer is for. A follow-up stands for its
    requester (a message of theirs with no place in the conversation)."""
    for item in reversed(items):
        if (message := inbound.stored(item.payload)) is not None:
            return message
        if is_follow_up(item) and (who := inbound.person(item.payload)):
            return _for(who)
    return None


async def answer_recipient(items: Sequence[InboxItem], approvals: Approvals | None) -> InboundMessage | None:
    """Whom a streamed answer is for: the newest message's author, or (a run resumed by decisions
    alone) the person who asked for the approved calls."""
    found = recipient(items)
    if found is None and approvals is not None and items:
        asker = await approvals.requester(items)
        found = _for(asker) if asker else None
    return found


def _for(person: str) -> InboundMessage:
    # Whom an answer is for when no message of theirs is in the inbox: the person alone.
    return InboundMessage(author=InboundAuthor(id=person))
