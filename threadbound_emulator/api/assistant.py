"""``assistant.threads.*``: the status under a thread, its title, and suggested prompts, recorded in order."""

from __future__ import annotations

from ..records import Status
from ..wire import JSON, Params, SlackError, as_json
from ..workspace import Workspace
from .method import Method

#: Slack's limit on ``loading_messages`` in one setStatus call.
MAX_LOADING_MESSAGES = 10


def set_status(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params, "channel_id")
    thread_ts = str(params.get("thread_ts") or "")
    if not thread_ts:
        raise SlackError("invalid_arguments")
    loading = as_json(params.get("loading_messages") or [], "invalid_arguments")
    if not isinstance(loading, list) or len(loading) > MAX_LOADING_MESSAGES:
        raise SlackError("invalid_arguments")
    if not all(isinstance(m, str) and m for m in loading):
        raise SlackError("invalid_arguments")
    ws.statuses.append(Status(chan.id, thread_ts, str(params.get("status") or ""), tuple(loading)))
    ws.shown_statuses[(chan.id, thread_ts)] = str(params.get("status") or "")
    return {}


def set_title(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params, "channel_id")
    thread_ts = str(params.get("thread_ts") or "")
    title = str(params.get("title") or "")
    if not thread_ts or not title:
        raise SlackError("invalid_arguments")
    ws.titles.append((chan.id, thread_ts, title))
    return {}


def set_suggested_prompts(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params, "channel_id")
    thread_ts = str(params.get("thread_ts") or "")
    prompts = as_json(params.get("prompts"), "invalid_arguments")
    if not thread_ts or not isinstance(prompts, list) or not 1 <= len(prompts) <= 4:
        raise SlackError("invalid_arguments")
    for prompt in prompts:
        if not isinstance(prompt, dict) or not prompt.get("title") or not prompt.get("message"):
            raise SlackError("invalid_arguments")
    ws.suggested_prompts.append((chan.id, thread_ts, prompts))
    return {}


def _status_scope(ws: Workspace, params: Params) -> str:
    """Since 2026-03-05 setStatus accepts ``chat:write``, or the older ``assistant:write``."""
    return "chat:write" if "chat:write" in ws.scopes else "assistant:write"


METHODS = {
    "assistant.threads.setStatus": Method(set_status, _status_scope),
    # Assumed to follow setStatus's 2026-03-05 rule (unverified: Slack documents it for setStatus).
    "assistant.threads.setTitle": Method(set_title, _status_scope),
    "assistant.threads.setSuggestedPrompts": Method(set_suggested_prompts, _status_scope),
}
