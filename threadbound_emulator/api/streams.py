"""``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``: a message that grows.

The rules Slack enforces, as far as they are known (SLACK-FACTS "AI-app surface"):

- outside a DM the stream must name its reader: ``recipient_user_id`` and
  ``recipient_team_id`` (``missing_recipient_user_id`` / ``missing_recipient_team_id``);
  in a DM it must be a thread reply (the emulator answers ``invalid_thread_ts``
  when ``thread_ts`` is missing: Slack's exact code is unknown);
- ``markdown_text`` (and the message's Markdown in all) holds at most 12,000
  characters (``msg_too_long``);
- chunks are typed: ``markdown_text``, ``task_update`` (an ``id``, a ``title`` and a
  status of pending / in_progress / complete / error), ``plan_update``, ``blocks``
  (``invalid_chunks`` otherwise);
- ``task_display_mode`` is ``timeline`` (the default) or ``plan``; a ``plan_update`` chunk carries
  the plan's ``title``. ``Workspace.plans_offered = False`` answers ``invalid_arguments`` to a plan,
  as a Slack without the plan display would;
- after ``stopStream``, or once the stream is older than ``Workspace.stream_ttl``
  (Slack: about five minutes), appends and stops fail ``message_not_in_streaming_state``.

The message is a stored bot message from ``startStream`` on; its ``text`` and
``markdown`` block grow with each append, so ``conversations.replies`` shows what
a reader would see. Every stream is kept in ``Workspace.streams`` with the text of
each call, for tests to assert on.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from ..records import Stream
from ..wire import JSON, Params, SlackError, as_json
from ..workspace import Workspace
from .chat import MAX_MARKDOWN_CHARS, _metadata, validate_blocks
from .method import Method

TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
CHUNK_TYPES = frozenset({"markdown_text", "task_update", "plan_update", "blocks"})
#: ``task_display_mode``: task cards between the text (Slack's default), or gathered in a plan.
DISPLAY_MODES = frozenset({"timeline", "plan"})


def _chunks(params: Params) -> list[JSON]:
    raw = params.get("chunks")
    if raw in (None, ""):
        return []
    chunks = as_json(raw, "invalid_chunks")
    if not isinstance(chunks, list):
        raise SlackError("invalid_chunks")
    for chunk in chunks:
        if not isinstance(chunk, dict) or chunk.get("type") not in CHUNK_TYPES:
            raise SlackError("invalid_chunks")
        kind = chunk["type"]
        if kind == "markdown_text" and not isinstance(chunk.get("text"), str):
            raise SlackError("invalid_chunks")
        if kind == "task_update" and (
            not chunk.get("id") or not chunk.get("title") or chunk.get("status") not in TASK_STATUSES
        ):
            raise SlackError("invalid_chunks")
        if kind == "plan_update" and not isinstance(chunk.get("title"), str):
            raise SlackError("invalid_chunks")
        if kind == "blocks":
            validate_blocks(chunk.get("blocks"))
    return chunks


def _text_of(params: Params, chunks: list[JSON]) -> str:
    text = params.get("markdown_text")
    pieces = [str(text)] if text not in (None, "") else []
    pieces += [str(c["text"]) for c in chunks if c["type"] == "markdown_text"]
    added = "".join(pieces)
    if len(added) > MAX_MARKDOWN_CHARS:
        raise SlackError("msg_too_long")
    return added


def _apply(ws: Workspace, stream: Stream, added: str, chunks: list[JSON]) -> None:
    if len(stream.text) + len(added) > MAX_MARKDOWN_CHARS:
        raise SlackError("msg_too_long")
    stream.text += added
    stream.appends.append(added)
    for chunk in chunks:
        if chunk["type"] == "plan_update":
            stream.plan_titles.append(str(chunk["title"]))
        if chunk["type"] == "task_update":
            stream.tasks[str(chunk["id"])] = (str(chunk["title"]), str(chunk["status"]))
            stream.task_updates.append((str(chunk["id"]), str(chunk["status"])))
    message = ws.find(stream.channel, stream.ts)
    if message is not None:
        message["text"] = stream.text
        message["blocks"] = [{"type": "markdown", "text": stream.text}] if stream.text else []


def start_stream(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params)
    thread_ts = params.get("thread_ts")
    if not chan.is_im and not chan.is_mpim:
        if not params.get("recipient_user_id"):
            raise SlackError("missing_recipient_user_id")
        if not params.get("recipient_team_id"):
            raise SlackError("missing_recipient_team_id")
    elif thread_ts in (None, ""):
        raise SlackError("invalid_thread_ts")
    mode = str(params.get("task_display_mode") or "timeline")
    if mode not in DISPLAY_MODES or (mode == "plan" and not ws.plans_offered):
        raise SlackError("invalid_arguments")
    chunks = _chunks(params)
    added = _text_of(params, chunks)
    root_ts = ws.thread_root(chan.id, thread_ts)
    message = ws.bot_message("", ws.next_ts())
    if root_ts is not None:
        root = ws.find(chan.id, root_ts)
        assert root is not None
        ws.attach_reply(root, message)
    ws.insert(chan.id, message)
    stream = Stream(
        channel=chan.id,
        ts=message["ts"],
        recipient_user_id=str(params.get("recipient_user_id") or ""),
        recipient_team_id=str(params.get("recipient_team_id") or ""),
        started=time.monotonic(),
        display_mode=mode,
    )
    ws.streams[(chan.id, message["ts"])] = stream
    _apply(ws, stream, added, chunks)
    return {"channel": chan.id, "ts": message["ts"]}


def _open_stream(ws: Workspace, params: Params) -> Stream:
    chan = ws.channel(params)
    stream = ws.streams.get((chan.id, str(params.get("ts") or "")))
    if stream is None:
        if ws.find(chan.id, str(params.get("ts") or "")) is None:
            raise SlackError("message_not_found")
        raise SlackError("message_not_in_streaming_state")
    if stream.state == "streaming" and time.monotonic() - stream.started > ws.stream_ttl:
        stream.state = "expired"
    if stream.state != "streaming":
        raise SlackError("message_not_in_streaming_state")
    return stream


def append_stream(ws: Workspace, params: Params) -> JSON:
    stream = _open_stream(ws, params)
    chunks = _chunks(params)
    if params.get("markdown_text") in (None, "") and not chunks:
        raise SlackError("no_text")
    _apply(ws, stream, _text_of(params, chunks), chunks)
    return {"channel": stream.channel, "ts": stream.ts}


def stop_stream(ws: Workspace, params: Params) -> JSON:
    stream = _open_stream(ws, params)
    chunks = _chunks(params)
    blocks: list[Any] | None = None
    if params.get("blocks") not in (None, ""):
        blocks = validate_blocks(as_json(params["blocks"], "invalid_blocks"))
    metadata = _metadata(params.get("metadata"))
    message = ws.find(stream.channel, stream.ts)
    if message is None:  # deleted while it streamed (a late stop can arrive after the delete)
        raise SlackError("message_not_found")
    _apply(ws, stream, _text_of(params, chunks), chunks)
    stream.state = "stopped"
    if blocks:
        message["blocks"] = [*message.get("blocks", []), *copy.deepcopy(blocks)]
        stream.blocks = copy.deepcopy(blocks)
    if metadata is not None:
        message["metadata"] = metadata
    return {"channel": stream.channel, "ts": stream.ts, "message": ws.render(message, True)}


METHODS = {
    "chat.startStream": Method(start_stream, "chat:write"),
    "chat.appendStream": Method(append_stream, "chat:write"),
    "chat.stopStream": Method(stop_stream, "chat:write"),
}
