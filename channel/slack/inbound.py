"""Slack's message events as the neutral inbound message (:class:`channel.inbound.InboundMessage`).

The intake builds one per claimed message with :func:`inbound_message` and stores it in the inbox;
the runs never see Slack's event. What the adapter needs to render the message later as a person
sees it (``blocks`` hold rich text, ``attachments`` hold forwarded messages and link previews) is
kept as the message's ``data``, the fields :data:`KEPT` name; everything else of the event is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from channel.inbound import InboundAuthor, InboundFile, InboundMessage

from .link import SlackLink

__all__ = ["KEPT", "edited_message", "inbound_message", "shortcut_message"]

#: The event's fields kept for the adapter's :meth:`view` (``SlackAdapter.view`` reads them).
KEPT = (
    "channel",
    "ts",
    "thread_ts",
    "user",
    "text",
    "blocks",
    "attachments",
    "files",
    "bot_id",
    "bot_profile",
    "channel_type",
    "subtype",
    "username",
)


def edited_message(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The message as it reads after a ``message_changed`` edit, with the event's channel."""
    message = event.get("message")
    if not isinstance(message, Mapping):
        return None
    edited = dict(message)
    # The event's channel, always: an inner message naming another channel routes nothing there.
    if event.get("channel"):
        edited["channel"] = event["channel"]
    else:
        edited.setdefault("channel", event.get("channel"))
    if "channel_type" in event:
        edited.setdefault("channel_type", event["channel_type"])
    return edited


def inbound_message(event: Mapping[str, Any]) -> InboundMessage:
    """The neutral message of a ``message`` or ``app_mention`` event; of a ``message_changed`` edit,
    the message as it reads now (marked edited)."""
    changed = edited_message(event) if event.get("subtype") == "message_changed" else None
    message: Mapping[str, Any] = changed if changed is not None else event
    channel = _text(message.get("channel"))
    ts = _text(message.get("ts"))
    attachments = message.get("attachments")
    shares = [a for a in attachments if isinstance(a, Mapping)] if isinstance(attachments, list) else []
    files = message.get("files")
    return InboundMessage(
        author=InboundAuthor(
            id=_text(message.get("user")),
            bot=_text(message.get("bot_id")),
            organisation=_text(message.get("user_team") or message.get("team")),
        ),
        text=_text(message.get("text")),
        files=tuple(
            InboundFile(id=_text(f.get("id")), name=_text(f.get("name") or f.get("title")))
            for f in (files if isinstance(files, list) else [])
            if isinstance(f, Mapping)
        ),
        ref=SlackLink.inbound_ref(channel, ts),
        conversation=channel,
        id=ts,
        thread=_text(message.get("thread_ts")),
        direct=_direct(message, channel),
        edited=changed is not None or bool(message.get("edited")),
        forwarded=any(a.get("is_share") for a in shares),
        data={k: message[k] for k in KEPT if k in message},
    )


def shortcut_message(payload: Mapping[str, Any]) -> InboundMessage | None:
    """The neutral message of a ``message_action`` payload (a message shortcut): the message it was
    used on, asked about (``asked_about``) by the person who used it; None when the payload names
    no message, channel or person. The message's channel is always the payload's own."""
    message, channel, user = payload.get("message"), payload.get("channel"), payload.get("user")
    if not isinstance(message, Mapping) or not isinstance(channel, Mapping) or not isinstance(user, Mapping):
        return None
    channel_id, user_id = _text(channel.get("id")), _text(user.get("id"))
    if not channel_id or not user_id or not _text(message.get("ts")):
        return None
    pointed = inbound_message({**message, "channel": channel_id, "type": "message"})
    team = payload.get("team")
    organisation = _text(user.get("team_id")) or (_text(team.get("id")) if isinstance(team, Mapping) else "")
    name = _text(user.get("name") or user.get("username"))
    return InboundMessage(
        author=InboundAuthor(id=user_id, organisation=organisation, name=name),
        text=pointed.text,
        files=pointed.files,
        ref=pointed.ref,
        conversation=channel_id,
        id=pointed.id,
        thread=pointed.thread,
        direct=channel_id[:1] == "D",
        edited=pointed.edited,
        forwarded=pointed.forwarded,
        asked_about=True,
        data=pointed.data,
    )


def _direct(message: Mapping[str, Any], channel: str) -> bool:
    # As the router tells a DM: the event says so, or a plain message's channel is a DM's (``D…``).
    return message.get("channel_type") == "im" or (message.get("type") == "message" and channel[:1] == "D")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
