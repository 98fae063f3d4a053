"""``conversations.*``: thread replies and channel history with Slack's cursor paging, info, and list.

The scope each needs depends on the kind of conversation (``channels``/``groups``/``im``/``mpim``).
"""

from __future__ import annotations

import base64
import binascii

from ..wire import JSON, Params, SlackError, as_int, decode_cursor, encode_cursor, truthy, ts_key
from ..workspace import Workspace
from .method import Method


def replies(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params)
    ts = str(params.get("ts") or "")
    thread = ws.thread(chan.id, ts)
    if not thread:
        raise SlackError("thread_not_found")
    start, page, rest = _page(thread, params, default=1000, most=1000, newer=True)
    if start > 0 and ws.replies_repeat_root:
        page = [thread[0], *page]
    metadata = truthy(params.get("include_all_metadata"))
    return {
        "messages": [ws.render(m, metadata) for m in page],
        "has_more": bool(rest),
        "response_metadata": {"next_cursor": encode_cursor(rest[0]["ts"]) if rest else ""},
    }


def _page(
    messages: list[JSON], params: Params, *, default: int, most: int, newer: bool
) -> tuple[int, list[JSON], list[JSON]]:
    """One page of ``messages`` as ``limit`` and ``cursor`` ask: where it starts, it, and what follows.
    The cursor names the first message of the page (``newer``: messages run oldest first, else
    newest first)."""
    limit = as_int(params.get("limit"), default)
    limit = default if limit <= 0 else min(limit, most)
    start = 0
    cursor = params.get("cursor")
    if cursor:
        key = decode_cursor(str(cursor))
        at = [k >= key if newer else k <= key for k in (ts_key(m["ts"]) for m in messages)]
        start = at.index(True) if True in at else len(messages)
    return start, messages[start : start + limit], messages[start + limit :]


def history(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params)
    top = [m for m in reversed(ws.stored(chan.id)) if not ws.is_reply(m)]
    _, page, rest = _page(top, params, default=100, most=999, newer=False)
    metadata = truthy(params.get("include_all_metadata"))
    return {
        "messages": [ws.render(m, metadata) for m in page],
        "has_more": bool(rest),
        "pin_count": 0,
        "response_metadata": {"next_cursor": encode_cursor(rest[0]["ts"]) if rest else ""},
    }


def info(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params)
    out: JSON = {
        "id": chan.id,
        "name": chan.name,
        "is_channel": not chan.is_private,
        "is_group": chan.is_private and not chan.is_im and not chan.is_mpim,
        "is_im": chan.is_im,
        "is_mpim": chan.is_mpim,
        "is_private": chan.is_private,
        "is_archived": False,
        "is_member": chan.is_member,
        "context_team_id": ws.team_id,
        "created": 1_600_000_000,
    }
    if chan.is_im:
        out["user"] = chan.user
    return {"channel": out}


def list_(ws: Workspace, params: Params) -> JSON:
    """Channels by ``types`` (default ``public_channel``), paged by ``limit`` and ``cursor`` like Slack;
    a private channel is listed only when the bot is in it."""
    types = set(str(params.get("types") or "public_channel").split(","))
    wanted = [
        c
        for c in ws.channels.values()
        if not c.is_im
        and not c.is_mpim
        and ("private_channel" if c.is_private else "public_channel") in types
        and (c.is_member or not c.is_private)
    ]
    limit = as_int(params.get("limit"), 100)
    limit = 100 if limit <= 0 else min(limit, 1000)
    start = 0
    cursor = str(params.get("cursor") or "")
    if cursor:
        ids = [c.id for c in wanted]
        after = _decode_id_cursor(cursor)
        if after not in ids:
            raise SlackError("invalid_cursor")
        start = ids.index(after)
    page = wanted[start : start + limit]
    rest = wanted[start + limit :]
    return {
        "channels": [info(ws, {"channel": c.id})["channel"] for c in page],
        "response_metadata": {"next_cursor": _encode_id_cursor(rest[0].id) if rest else ""},
    }


def _encode_id_cursor(channel: str) -> str:
    return base64.urlsafe_b64encode(f"id:{channel}".encode()).decode()


def _decode_id_cursor(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor.encode()).decode().removeprefix("id:")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise SlackError("invalid_cursor") from exc


def _list_scope(ws: Workspace, params: Params) -> str:
    return "groups:read" if "private_channel" in str(params.get("types") or "") else "channels:read"


def _kind(ws: Workspace, params: Params) -> str:
    chan = ws.channels.get(str(params.get("channel", "")))
    if chan is not None and chan.is_im:
        return "im"
    if chan is not None and chan.is_mpim:
        return "mpim"
    if chan is not None and chan.is_private:
        return "groups"
    return "channels"


def _history_scope(ws: Workspace, params: Params) -> str:
    return f"{_kind(ws, params)}:history"


def _read_scope(ws: Workspace, params: Params) -> str:
    return f"{_kind(ws, params)}:read"


def members(ws: Workspace, params: Params) -> JSON:
    """The people of a conversation, paged by ``limit`` and ``cursor`` like Slack (an IM: the bot
    and the other party)."""
    chan = ws.channel(params)
    if chan.is_im:
        people = [ws.bot_user_id, *([chan.user] if chan.user else [])]
    elif chan.members is not None:
        people = list(chan.members)
    else:
        people = list(ws.users)
    limit = as_int(params.get("limit"), 100)
    limit = 100 if limit <= 0 else min(limit, 1000)
    start = 0
    cursor = str(params.get("cursor") or "")
    if cursor:
        after = _decode_id_cursor(cursor)
        if after not in people:
            raise SlackError("invalid_cursor")
        start = people.index(after)
    rest = people[start + limit :]
    return {
        "members": people[start : start + limit],
        "response_metadata": {"next_cursor": _encode_id_cursor(rest[0]) if rest else ""},
    }


METHODS = {
    "conversations.replies": Method(replies, _history_scope),
    "conversations.history": Method(history, _history_scope),
    "conversations.info": Method(info, _read_scope),
    "conversations.list": Method(list_, _list_scope),
    "conversations.members": Method(members, _read_scope),
}
