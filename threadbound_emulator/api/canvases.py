"""``canvases.*``: create a markdown canvas and grant channels or users access to it."""

from __future__ import annotations

from ..records import Canvas
from ..wire import JSON, Params, SlackError, as_json, as_list
from ..workspace import Workspace
from .method import Method


def create(ws: Workspace, params: Params) -> JSON:
    content = as_json(params.get("document_content") or "{}", "invalid_arguments")
    if not isinstance(content, dict) or content.get("type") != "markdown":
        raise SlackError("invalid_arguments")
    markdown = content.get("markdown")
    if not isinstance(markdown, str):
        raise SlackError("invalid_arguments")
    cid = ws.new_id("FCV")
    title = str(params.get("title") or "Untitled")
    ws.canvases[cid] = Canvas(cid, title, markdown, params.get("channel_id"))
    return {"canvas_id": cid}


def access_set(ws: Workspace, params: Params) -> JSON:
    canvas = ws.canvases.get(str(params.get("canvas_id") or ""))
    if canvas is None:
        raise SlackError("canvas_not_found")
    level = str(params.get("access_level") or "")
    if level not in ("read", "write", "owner"):
        raise SlackError("invalid_arguments")
    channel_ids = as_list(params.get("channel_ids"))
    user_ids = as_list(params.get("user_ids"))
    if not channel_ids and not user_ids:
        raise SlackError("invalid_arguments")
    for cid in channel_ids:
        ws.channel({"channel": cid})
    canvas.access.append({"access_level": level, "channel_ids": channel_ids, "user_ids": user_ids})
    return {}


METHODS = {
    "canvases.create": Method(create, "canvases:write"),
    "canvases.access.set": Method(access_set, "canvases:write"),
}
