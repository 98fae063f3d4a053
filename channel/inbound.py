"""The neutral inbound message: what the inbox holds of a message someone posted, in no provider's words.

A provider's edge builds it from its event (Slack: ``channel.slack.inbound``) and the intake stores it
as an inbox row (:func:`dump`); the runs read it back with :func:`stored`. Everything neutral code
asks of a message is a field here: who wrote it (and from which organisation), its text and files,
where it is (its own opaque ``ref``, its conversation, the thread it is in) and whether it was edited
or forwarded. How the provider renders it for the model (rich text, forwarded messages, link
previews) stays in :attr:`InboundMessage.data`, which only the adapter reads
(:meth:`channel.contract.ChannelAdapter.view`).

Rows the inbox held before it stored neutral messages (the provider's event fields, unmarked) are
still read: :func:`stored` converts them once on read (:func:`_unmarked`), so a database carried over
an upgrade answers its pending messages as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["KIND", "InboundAuthor", "InboundFile", "InboundMessage", "dump", "person", "stored"]

#: ``kind`` of an inbox row that holds an inbound message (decisions, answers and follow-ups
#: carry kinds of their own).
KIND = "inbound_message"
#: The row format's version, stored with each row: a later change of the fields can still read
#: the rows already in a database.
VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundAuthor:
    """Who posted the message, as the access rules and the budgets need to know them."""

    #: The person's provider id (``""`` when a bot or integration posted without one).
    id: str = ""
    #: The posting bot's id, when a bot posted it (``""`` for a person).
    bot: str = ""
    #: The author's organisation (workspace), when the provider said; ``""`` when it did not.
    organisation: str = ""
    #: The author's name as the delivery gave it, when the message itself does not show them (a
    #: person asking about someone else's message, :attr:`InboundMessage.asked_about`); else ``""``.
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundFile:
    """A file attached to the message: its provider id and, when the event named it, its name."""

    id: str
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundMessage:
    """One message someone posted into a conversation, as the inbox holds it."""

    author: InboundAuthor = field(default_factory=InboundAuthor)
    text: str = ""
    files: tuple[InboundFile, ...] = ()
    #: The message's own opaque ref (as :meth:`channel.contract.ChannelAdapter.view` gives it);
    #: ``""`` when the row did not say (a row stored before refs were kept: ask the adapter).
    ref: str = ""
    #: The conversation (channel) it was posted in, opaque.
    conversation: str = ""
    #: The message's id within its conversation, opaque (the adapter's ``inbound_ref`` takes it).
    id: str = ""
    #: The thread the message is in, opaque; ``""`` at a conversation's top level.
    thread: str = ""
    #: Posted in a direct conversation with the bot.
    direct: bool = False
    #: The text was edited after it was first posted (the message reads as edited).
    edited: bool = False
    #: It forwards (shares) another message.
    forwarded: bool = False
    #: The author pointed the bot at this message and asked about it (Slack: a message shortcut):
    #: ``ref``, ``id``, ``text``, ``files`` and ``data`` are that message's, which someone else
    #: may have written; ``author`` is the person asking.
    asked_about: bool = False
    #: The provider's own form of the message, for its adapter to render; opaque to neutral code.
    data: Mapping[str, Any] = field(default_factory=dict)


def dump(message: InboundMessage) -> str:
    """The inbox row (JSON text) that holds ``message``; :func:`stored` reads it back."""
    body = asdict(message)
    body["files"] = [asdict(f) for f in message.files]
    body["data"] = dict(message.data)
    return json.dumps({"kind": KIND, "version": VERSION, **body}, ensure_ascii=False)


def stored(payload: str) -> InboundMessage | None:
    """The message an inbox row holds; None for a row of another kind (an approval's decision, an
    ask's answer, a follow-up) or one that is not a JSON object."""
    try:
        raw = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    if raw.get("kind") == KIND:
        return _marked(raw)
    if "kind" in raw:
        return None
    return _unmarked(raw)


def person(payload: str) -> str:
    """Whom an inbox row speaks for: a message's author, or the requester a follow-up or an ask's
    answer names (threadbound's own rows, whose ``user`` says it); ``""`` for a decision, a bot's
    message or a row that is not JSON."""
    message = stored(payload)
    if message is not None:
        return message.author.id
    try:
        raw = json.loads(payload)
    except ValueError:
        return ""
    user = raw.get("user") if isinstance(raw, dict) else None
    return user if isinstance(user, str) else ""


def _marked(raw: Mapping[str, Any]) -> InboundMessage:
    author = _mapping(raw.get("author"))
    return InboundMessage(
        author=InboundAuthor(
            id=_text(author.get("id")),
            bot=_text(author.get("bot")),
            organisation=_text(author.get("organisation")),
            name=_text(author.get("name")),
        ),
        text=_text(raw.get("text")),
        files=_files(raw.get("files")),
        ref=_text(raw.get("ref")),
        conversation=_text(raw.get("conversation")),
        id=_text(raw.get("id")),
        thread=_text(raw.get("thread")),
        direct=raw.get("direct") is True,
        edited=raw.get("edited") is True,
        forwarded=raw.get("forwarded") is True,
        asked_about=raw.get("asked_about") is True,
        data=_mapping(raw.get("data")),
    )


def _unmarked(raw: Mapping[str, Any]) -> InboundMessage:
    """A row stored before the inbox held neutral messages: the fields the ingress kept of the event,
    which name their facts as the only provider then did (Slack). Read here, once, and nowhere else:
    the storage format of those rows is frozen, so this reading never changes. Its ref is left to the
    adapter (``inbound_ref``), as it was then; the fields are the whole of the row, kept as ``data``."""
    return InboundMessage(
        author=InboundAuthor(id=_text(raw.get("user")), bot=_text(raw.get("bot_id"))),
        text=_text(raw.get("text")),
        files=_files(raw.get("files")),
        conversation=_text(raw.get("channel")),
        id=_text(raw.get("ts")),
        thread=_text(raw.get("thread_ts")),
        direct=raw.get("channel_type") == "im",
        data=dict(raw),
    )


def _files(value: object) -> tuple[InboundFile, ...]:
    found = [f for f in value if isinstance(f, dict)] if isinstance(value, list) else []
    return tuple(InboundFile(id=_text(f.get("id")), name=_text(f.get("name"))) for f in found)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}
