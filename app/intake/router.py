"""Routing: does a Slack event concern the bot, and which conversation is it in?

Pure functions over the event payload (the store lookup for thread follow-ups
happens in ingress), so every rule is testable without a server:

- an ``app_mention``, or a ``message`` that mentions the bot → start or resume
  the task of ``(channel, thread root or the message itself)``;
- a message in a DM with the bot → the DM's top level is one conversation
  (``thread_ts == ""``); a DM thread is its own conversation;
- any other message in a thread → resume, only if that thread belongs to a task;
- an edit that adds the bot's mention → the edited message, as if just posted (its
  ``(channel, ts)`` claim makes an edit of an already-claimed message a duplicate). Slack sends
  such an edit twice, as ``message_changed`` (to apps subscribed to messages) and as an
  ``app_mention`` carrying ``edited`` (to apps subscribed to mentions): either starts the turn,
  and both together start one, since both claim the message's own ``(channel, ts)``. Slack also
  repeats ``app_mention`` on later edits of an answered message; its claim makes those duplicates;
- other edits, deletions, Slackbot, system notices (topic, joins, pins, huddles, …),
  the bot's own posts and (unless allowed) other bots' posts → nothing;
- events other than messages and mentions (home tab, reactions, assistant pane, …)
  → nothing, each with the reason in the delivery log.

A message a person forwards is that person's message, whoever wrote the original:
only the message's own author and text decide, never its attachments.

People from another organisation (Slack Connect: the message's ``user_team``, else
``team``, is not the install's) are ignored unless ``ALLOW_EXTERNAL_USERS``; the
decision says so (``external``), so ingress can tell them once, privately.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.settings import Settings
from channel.slack.identity import SlackIdentity
from channel.slack.inbound import edited_message

# Subtypes that are ordinary messages (file uploads, "also send to channel", /me); `bot_message`
# (integrations, webhooks) goes on to the bot rules below, so ALLOW_BOTS governs it like any bot post.
_ORDINARY_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message", "bot_message"})
#: Slackbot's user ID: its notices ("You have been removed from #…") are nobody's request.
SLACKBOT = "USLACKBOT"
# Why events that never start a turn are ignored (the delivery log shows this reason).
_UNROUTED = {
    "assistant_thread_started": "the assistant pane opened; the person's first message starts the task",
    "assistant_thread_context_changed": "the assistant pane's context changed; only messages start tasks",
    "app_home_opened": "someone opened the app's tab; only messages start tasks",
    "reaction_added": "reactions start nothing",
    "reaction_removed": "reactions start nothing",
    "member_joined_channel": "a member joined a channel; joins start nothing",
    "member_left_channel": "a member left a channel; that starts nothing",
    "document_mention": "a mention in a canvas has no thread to answer in; it starts nothing",
    "link_shared": "link unfurling is not offered; it starts nothing",
}
_SUBTYPE_REASONS = {
    # Slack sends a mention in a canvas as app_mention with this subtype: no thread to answer in.
    "document_mention": "a mention in a canvas has no thread to answer in; it starts nothing",
    "message_deleted": "a deletion starts nothing",
    "message_replied": "a thread-reply notice starts nothing",
    "channel_join": "a join notice starts nothing",
    "group_join": "a join notice starts nothing",
    "channel_leave": "a leave notice starts nothing",
    "group_leave": "a leave notice starts nothing",
}

Action = Literal["start", "follow_up", "ignore"]


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    channel: str = ""
    ts: str = ""
    #: Conversation key: the thread root's ts, or "" for a DM's top level.
    thread_ts: str = ""
    user: str = ""
    #: Ignored because the author is from another organisation (``ALLOW_EXTERNAL_USERS`` is off).
    external: bool = False

    @property
    def create(self) -> bool:
        return self.action == "start"


def classify(event: Mapping[str, Any], bot: SlackIdentity, settings: Settings) -> Decision:
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in ("app_mention", "message"):
        return Decision("ignore", _UNROUTED.get(str(kind), f"event type {kind!r} is not routed"))
    subtype = event.get("subtype")
    if subtype is not None and not isinstance(subtype, str):
        return Decision("ignore", "event has a malformed subtype")
    if subtype == "message_changed":
        return _edit(event, bot, settings)
    if subtype not in _ORDINARY_SUBTYPES or event.get("hidden"):
        reason = _SUBTYPE_REASONS.get(str(subtype), f"a system message ({subtype}) starts nothing")
        return Decision("ignore", reason)
    channel = str(event.get("channel") or "")
    ts = str(event.get("ts") or "")
    if not channel or not ts:
        return Decision("ignore", "event has no channel or ts")
    user = str(event.get("user") or "")
    if user == SLACKBOT:
        return Decision("ignore", "a Slackbot notice starts nothing")
    bot_id = event.get("bot_id")
    if user == bot.user_id or (bot_id and bot_id == bot.bot_id):
        return Decision("ignore", "the bot's own post")
    is_bot = bool(bot_id) or subtype == "bot_message"
    if is_bot and not settings.allow_bots:
        return Decision("ignore", "posted by another bot (ALLOW_BOTS is off)")
    thread_ts = str(event.get("thread_ts") or "")
    team = event.get("user_team") or event.get("team")
    # The install's workspace unknown (team_id ""): nobody counts as external. An event that does not
    # tell the author's organisation (neither user_team nor team) is not decided here: the run asks
    # Slack (users.info) before the model sees it, and one it cannot tell either counts as external
    # (app.agent.admission).
    external = bool(bot.team_id) and isinstance(team, str) and team not in ("", bot.team_id)
    if external and not settings.allow_external_users:
        reason = "author is from another organisation (ALLOW_EXTERNAL_USERS is off)"
        return Decision("ignore", reason, channel, ts, thread_ts, user, external=True)
    if settings.allowed_users and user not in settings.allowed_users:
        return Decision("ignore", "author is not in ALLOWED_USERS")
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
        reason = "mention (edited)" if event.get("edited") else "mention"
        return Decision("start", reason, channel, ts, thread_ts or ts, user)
    if thread_ts:
        if is_bot:
            return Decision("ignore", "a bot reply in a thread (loop protection)")
        return Decision("follow_up", "thread reply", channel, ts, thread_ts, user)
    return Decision("ignore", "not addressed to the bot")


def _edit(event: Mapping[str, Any], bot: SlackIdentity, settings: Settings) -> Decision:
    """An edit starts a turn only when it adds the bot's mention; the claim on the message's own
    ``(channel, ts)`` then keeps an already-answered message from being answered again."""
    edited = edited_message(event)
    if edited is None:
        return Decision("ignore", "an edit without the edited message")
    mention = f"<@{bot.user_id}>"
    previous = event.get("previous_message")
    before = str(previous.get("text") or "") if isinstance(previous, Mapping) else ""
    if mention not in str(edited.get("text") or ""):
        return Decision("ignore", "an edit starts nothing")
    if mention in before:
        return Decision("ignore", "an edit of a message that already mentioned the bot")
    if edited.get("channel_type") == "im" or str(edited.get("channel") or "").startswith("D"):
        return Decision("ignore", "an edit in a direct message (the message itself was the request)")
    if edited.get("subtype") == "message_changed":
        return Decision("ignore", "an edit without the edited message")
    if not (edited.get("user_team") or edited.get("team")) and event.get("team"):
        # Slack may leave the organisation out of the edited message; the edit's own event names it.
        edited = {**edited, "team": event.get("team")}
    decision = classify(edited, bot, settings)
    if decision.action == "ignore":
        return decision
    return Decision(
        "start", "edited to mention the bot", decision.channel, decision.ts, decision.thread_ts, decision.user
    )
