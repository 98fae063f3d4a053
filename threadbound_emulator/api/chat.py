"""``chat.*``: post, update, delete and permalink, with Slack's limits on text and blocks."""

from __future__ import annotations

import copy
from typing import Any

from ..records import Channel
from ..wire import JSON, Params, SlackError, as_json
from ..workspace import Workspace
from .method import Method

MAX_BLOCKS = 50
MAX_MARKDOWN_CHARS = 12_000
MAX_TEXT_CHARS = 40_000
MAX_SECTION_TEXT = 3_000


def validate_blocks(blocks: Any) -> list[JSON]:
    """Blocks as Slack checks them: at most 50, typed, markdown ≤ 12,000 chars in all."""
    if not isinstance(blocks, list):
        raise SlackError("invalid_blocks")
    if len(blocks) > MAX_BLOCKS:
        raise SlackError("invalid_blocks")
    markdown_chars = 0
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise SlackError("invalid_blocks")
        if block["type"] == "markdown":
            text = block.get("text")
            if not isinstance(text, str):
                raise SlackError("invalid_blocks")
            markdown_chars += len(text)
        elif block["type"] == "section":
            text = block.get("text")
            if isinstance(text, dict) and len(str(text.get("text", ""))) > MAX_SECTION_TEXT:
                raise SlackError("invalid_blocks")
    if markdown_chars > MAX_MARKDOWN_CHARS:
        raise SlackError("msg_blocks_too_long")
    return blocks


def _metadata(value: Any) -> JSON | None:
    if value in (None, ""):
        return None
    meta = as_json(value, "invalid_metadata_format")
    if not isinstance(meta, dict) or not isinstance(meta.get("event_type"), str):
        raise SlackError("invalid_metadata_format")
    if "event_payload" in meta and not isinstance(meta["event_payload"], dict):
        raise SlackError("invalid_metadata_format")
    return {"event_type": meta["event_type"], "event_payload": meta.get("event_payload", {})}


def post_message(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params)
    text = params.get("text")
    text = "" if text is None else str(text)
    blocks_raw = params.get("blocks")
    markdown_text = params.get("markdown_text")
    blocks = None
    if blocks_raw not in (None, ""):
        blocks = validate_blocks(as_json(blocks_raw, "invalid_blocks"))
    if markdown_text not in (None, ""):
        if text or blocks:
            raise SlackError("markdown_text_conflict")
        markdown_text = str(markdown_text)
        if len(markdown_text) > MAX_MARKDOWN_CHARS:
            raise SlackError("msg_too_long")
        text = markdown_text
        blocks = [{"type": "markdown", "text": markdown_text}]
    if not text and not blocks and not params.get("attachments"):
        raise SlackError("no_text")
    metadata = _metadata(params.get("metadata"))
    root_ts = ws.thread_root(chan.id, params.get("thread_ts"))
    message = ws.bot_message(text[:MAX_TEXT_CHARS], ws.next_ts())
    if blocks is not None:
        message["blocks"] = copy.deepcopy(blocks)
    if metadata is not None:
        message["metadata"] = metadata
    if root_ts is not None:
        root = ws.find(chan.id, root_ts)
        assert root is not None
        ws.attach_reply(root, message)
        ws.shown_statuses.pop((chan.id, root_ts), None)  # the app's post clears the thread's status
    ws.insert(chan.id, message)
    return {"channel": chan.id, "ts": message["ts"], "message": ws.render(message, True)}


def _own_message(ws: Workspace, params: Params, ts_key: str, not_own: str) -> tuple[Channel, JSON]:
    chan = ws.channel(params)
    message = ws.find(chan.id, str(params.get(ts_key) or ""))
    if message is None or message.get("subtype") == "tombstone":
        raise SlackError("message_not_found")
    if not ws.is_bots(message):
        raise SlackError(not_own)
    return chan, message


def update(ws: Workspace, params: Params) -> JSON:
    chan, message = _own_message(ws, params, "ts", "cant_update_message")
    text = params.get("text")
    blocks_raw = params.get("blocks")
    if text is None and blocks_raw in (None, "") and params.get("markdown_text") in (None, ""):
        raise SlackError("no_text")
    if params.get("markdown_text") not in (None, ""):
        markdown_text = str(params["markdown_text"])
        if len(markdown_text) > MAX_MARKDOWN_CHARS:
            raise SlackError("msg_too_long")
        message["text"] = markdown_text
        message["blocks"] = [{"type": "markdown", "text": markdown_text}]
    if text is not None:
        if len(str(text)) > MAX_TEXT_CHARS:
            raise SlackError("msg_too_long")
        message["text"] = str(text)
    if blocks_raw not in (None, ""):
        blocks = validate_blocks(as_json(blocks_raw, "invalid_blocks"))
        if blocks:
            message["blocks"] = copy.deepcopy(blocks)
        else:
            message.pop("blocks", None)
    metadata = _metadata(params.get("metadata"))
    if metadata is not None:
        message["metadata"] = metadata
    message["edited"] = {"user": ws.bot_user_id, "ts": ws.next_ts()}
    rendered = ws.render(message, True)
    return {"channel": chan.id, "ts": message["ts"], "text": message["text"], "message": rendered}


def delete(ws: Workspace, params: Params) -> JSON:
    chan, message = _own_message(ws, params, "ts", "cant_delete_message")
    stored = ws.stored(chan.id)
    if not ws.is_reply(message) and int(message.get("reply_count", 0)) > 0:
        # Slack keeps a deleted root with replies as a tombstone.
        for key in ("text", "blocks", "files", "metadata", "reactions", "edited", "bot_id", "app_id"):
            message.pop(key, None)
        message.update({"subtype": "tombstone", "text": "This message was deleted.", "user": "USLACKBOT"})
        message.pop("bot_profile", None)
    else:
        stored.remove(message)
        if ws.is_reply(message):
            root = ws.find(chan.id, message["thread_ts"])
            if root is not None:
                replies = [m for m in stored if ws.is_reply(m) and m["thread_ts"] == root["ts"]]
                root["reply_count"] = len(replies)
                if replies:
                    root["latest_reply"] = replies[-1]["ts"]
                else:
                    for key in ("latest_reply", "reply_users", "reply_users_count"):
                        root.pop(key, None)
    return {"channel": chan.id, "ts": message["ts"]}


def post_ephemeral(ws: Workspace, params: Params) -> JSON:
    """A message only ``user`` sees; it is not part of the conversation's history."""
    chan = ws.channel(params)
    user = str(params.get("user") or "")
    text = str(params.get("text") or "")
    if not user:
        raise SlackError("user_not_in_channel")
    if not text and params.get("blocks") in (None, ""):
        raise SlackError("no_text")
    ws.ephemerals.append((chan.id, user, str(params.get("thread_ts") or ""), text[:MAX_TEXT_CHARS]))
    return {"message_ts": ws.next_ts()}


def get_permalink(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params)
    message = ws.find(chan.id, str(params.get("message_ts") or ""))
    if message is None:
        raise SlackError("message_not_found")
    return {"channel": chan.id, "permalink": ws.permalink(chan.id, message)}


METHODS = {
    "chat.postMessage": Method(post_message, "chat:write"),
    "chat.update": Method(update, "chat:write"),
    "chat.delete": Method(delete, "chat:write"),
    "chat.postEphemeral": Method(post_ephemeral, "chat:write"),
    "chat.getPermalink": Method(get_permalink),
}
