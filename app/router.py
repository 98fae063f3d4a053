"""Routing: does a Slack event concern the bot, and which conversation is it in?

Pure functions over the event payload (the store lookup for thread follow-ups
happens in ingress), so every rule is testable without a server:

- an ``app_mention``, or a ``message`` that mentions the bot → start or resume
  the task of ``(channel, thread root or the message itself)``;
- a message in a DM with the bot → the DM's top level is one conversation
  (``thread_ts == ""``); a DM thread is its own conversation;
- any other message in a thread → resume, only if that thread belongs to a task;
- edits, deletions, joins and other hidden subtypes, the bot's own posts and
  (unless allowed) other bots' posts → nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .settings import Settings

# Subtypes that are ordinary messages (file uploads, "also send to channel"); `bot_message`
# (integrations, webhooks) goes on to the bot rules below, so ALLOW_BOTS governs it like any bot post.
_ORDINARY_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "bot_message"})

Action = Literal["start", "follow_up", "ignore"]


@dataclass(frozen=True, slots=True)
class BotIdentity:
    user_id: str
    bot_id: str


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    channel: str = ""
    ts: str = ""
    #: Conversation key: the thread root's ts, or "" for a DM's top level.
    thread_ts: str = ""
    user: str = ""

    @property
    def create(self) -> bool:
        return self.action == "start"


def classify(event: dict[str, Any], bot: BotIdentity, settings: Settings) -> Decision:
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return Decision("ignore", f"event type {kind!r} is not routed")
    subtype = event.get("subtype")
    if subtype not in _ORDINARY_SUBTYPES or event.get("hidden"):
        return Decision("ignore", f"message subtype {subtype!r} starts nothing")
    channel = str(event.get("channel") or "")
    ts = str(event.get("ts") or "")
    if not channel or not ts:
        return Decision("ignore", "event has no channel or ts")
    user = str(event.get("user") or "")
    bot_id = event.get("bot_id")
    if user == bot.user_id or (bot_id and bot_id == bot.bot_id):
        return Decision("ignore", "the bot's own post")
    is_bot = bool(bot_id) or subtype == "bot_message"
    if is_bot and not settings.allow_bots:
        return Decision("ignore", "posted by another bot (ALLOW_BOTS is off)")
    if settings.allowed_users and user not in settings.allowed_users:
        return Decision("ignore", "author is not in ALLOWED_USERS")
    thread_ts = str(event.get("thread_ts") or "")
    is_dm = event.get("channel_type") == "im" or (kind == "message" and channel.startswith("D"))
    if is_dm:
        if not settings.allow_dms:
            return Decision("ignore", "direct messages are off (ALLOW_DMS)")
        return Decision("start", "direct message", channel, ts, thread_ts, user)
    if settings.allowed_channels and channel not in settings.allowed_channels:
        return Decision("ignore", "channel is not in ALLOWED_CHANNELS")
    mentioned = kind == "app_mention" or f"<@{bot.user_id}>" in str(event.get("text") or "")
    if mentioned:
        if is_bot and thread_ts:
            # Loop protection: a bot mentioning us inside a thread is most likely answering us.
            return Decision("ignore", "a bot mentioning the bot inside a thread (loop protection)")
        return Decision("start", "mention", channel, ts, thread_ts or ts, user)
    if thread_ts:
        if is_bot:
            return Decision("ignore", "a bot reply in a thread (loop protection)")
        return Decision("follow_up", "thread reply", channel, ts, thread_ts, user)
    return Decision("ignore", "not addressed to the bot")
