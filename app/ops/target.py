"""Which conversation ``python -m app run`` acts in: a channel ID or ``#name``, checked before a task exists.

Slack's refusals become one line saying what to do: a name the bot cannot see, an ID that does not
exist (or names a private channel the bot was never invited to), a channel the bot is not in, a
``--thread`` ts that names no thread there.
"""

from __future__ import annotations

import re
from typing import Any

from channel.errors import ChannelError
from channel.slack import SlackAdapter
from channel.slack.errors import slack_call

# Slack's advice for conversations.list: at most 200 per page.
_PAGE = 200
#: A message ts: seconds, a dot, microseconds.
_TS = re.compile(r"^\d{9,11}\.\d{6}$")


class TargetError(Exception):
    """The bot cannot act in the named conversation; the message says what to do."""


async def resolve_target(adapter: SlackAdapter, channel: str) -> str:
    """The ID of the conversation ``channel`` names (an ID, or ``#name``), once the bot can act there."""
    channel = channel.strip()
    channel_id = await _find_by_name(adapter, channel[1:]) if channel.startswith("#") else channel
    info = await _info(adapter, channel_id)
    label = f"#{info['name']} ({channel_id})" if info.get("name") else channel_id
    if info.get("is_archived"):
        raise TargetError(f"{label} is archived: unarchive it or pick another channel")
    if info.get("is_member") is False and not info.get("is_im"):
        bot = adapter.identity.bot_name or adapter.identity.user_id
        raise TargetError(f"the bot is not in {label}: invite it there with /invite @{bot}, then run again")
    return channel_id


async def resolve_thread(adapter: SlackAdapter, channel_id: str, thread_ts: str) -> str:
    """``thread_ts`` once Slack shows a thread there, checked before a task exists (and before the model
    is asked anything): a ts that names no message would only fail at the reply."""
    thread_ts = thread_ts.strip()
    if not _TS.match(thread_ts):
        raise TargetError(
            f"--thread {thread_ts!r} is not a message ts: use the thread's first message's ts, e.g. "
            "1732900000.123456 (its link ends p1732900000123456)"
        )
    try:
        async with slack_call("conversations.replies"):
            await adapter.link.read_client.conversations_replies(channel=channel_id, ts=thread_ts, limit=1)
    except ChannelError as exc:
        code = exc.provider_code or exc.code
        if code == "thread_not_found":
            raise TargetError(
                f"no thread {thread_ts} in {channel_id}: check the ts (its link ends "
                f"p{thread_ts.replace('.', '')}), or leave out --thread to start a new one"
            ) from exc
        if code == "missing_scope":
            return thread_ts  # without the history scope the thread cannot be checked here
        raise _refusal(exc, channel_id, "reading the thread") from exc
    return thread_ts


async def _find_by_name(adapter: SlackAdapter, name: str) -> str:
    wanted = name.strip().lower()
    # Private channels are listed only with groups:read, and only those the bot is in.
    private = "groups:read" in adapter.identity.scopes
    types = "public_channel,private_channel" if private else "public_channel"
    cursor = ""
    while True:
        try:
            async with slack_call("conversations.list"):
                response = await adapter.link.read_client.conversations_list(
                    types=types, limit=_PAGE, exclude_archived=True, cursor=cursor or None
                )
        except ChannelError as exc:
            raise _refusal(exc, f"#{name}", "looking up a channel by name") from exc
        for found in response.get("channels") or []:
            if str(found.get("name", "")).lower() == wanted:
                return str(found["id"])
        cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
        if not cursor:
            break
    where = "public or private channel the bot is in" if private else "public channel"
    raise TargetError(
        f"no {where} is named #{name}: check the name, or pass the channel ID "
        "(a private channel must have the bot invited first)"
    )


async def _info(adapter: SlackAdapter, channel_id: str) -> dict[str, Any]:
    try:
        async with slack_call("conversations.info"):
            response = await adapter.link.read_client.conversations_info(channel=channel_id)
    except ChannelError as exc:
        if exc.provider_code == "missing_scope":
            return {}  # without channels:read the ID cannot be checked here; the run itself will tell
        raise _refusal(exc, channel_id, "reading the channel") from exc
    return dict(response.get("channel") or {})


def _refusal(exc: ChannelError, channel: str, doing: str) -> TargetError:
    code = exc.provider_code or exc.code
    if code == "channel_not_found":
        return TargetError(
            f"channel {channel} was not found: check the ID (C…, G… or D…, the last part of the "
            "channel's link); for a private channel, invite the bot first"
        )
    if code == "not_in_channel":
        return TargetError(f"the bot is not in {channel}: invite it there with /invite, then run again")
    if code == "missing_scope":
        return TargetError(
            f"{doing} needs a scope this install lacks (channels:read, groups:read): "
            "add it and reinstall the app, or pass the channel ID"
        )
    return TargetError(f"cannot use {channel}: Slack answered {code} while {doing}")


__all__ = ["TargetError", "resolve_target", "resolve_thread"]
