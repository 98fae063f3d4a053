"""``assistant.threads.setStatus``: the progress status shown under a thread, recorded in order."""

from __future__ import annotations

from ..wire import JSON, Method, Params, SlackError
from ..workspace import Status, Workspace


def set_status(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params, "channel_id")
    thread_ts = str(params.get("thread_ts") or "")
    if not thread_ts:
        raise SlackError("invalid_arguments")
    ws.statuses.append(Status(chan.id, thread_ts, str(params.get("status") or "")))
    return {}


METHODS = {
    "assistant.threads.setStatus": Method(set_status, "assistant:write"),
}
