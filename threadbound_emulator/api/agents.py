"""``agents.sessions.*``: a thread's agent session — its status, title and Stop (SLACK-FACTS "Agent
sessions").

Only an app declared an agent has ``assistant:write``; without it the server answers
``missing_scope`` like Slack. ``setStatus`` creates the session when needed (``title`` ≤ 200
characters and ``initiator_user_id`` count on creation only); ``rename`` needs an existing session.
A person's Stop is :func:`threadbound_emulator.events.session_stopped`.
"""

from __future__ import annotations

from ..records import AgentSession
from ..wire import JSON, Params, SlackError
from ..workspace import Workspace
from .method import Method

STATUSES = frozenset({"processing", "active", "suspended", "closed"})
MAX_TITLE = 200


def set_status(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params, "channel_id")
    thread_ts = str(params.get("thread_ts") or "")
    status = str(params.get("status") or "")
    title = str(params.get("title") or "")
    if not thread_ts or ws.find(chan.id, thread_ts) is None:
        raise SlackError("thread_not_found")
    if status not in STATUSES:
        raise SlackError("invalid_status")
    if len(title) > MAX_TITLE:
        raise SlackError("invalid_title")
    session = ws.sessions.get((chan.id, thread_ts))
    if session is None:
        session = AgentSession(
            chan.id, thread_ts, status, title=title, initiator=str(params.get("initiator_user_id") or "")
        )
        ws.sessions[(chan.id, thread_ts)] = session
    session.status = status
    session.history.append(status)
    return {"status": status, "title": session.title}


def rename(ws: Workspace, params: Params) -> JSON:
    chan = ws.channel(params, "channel_id")
    session = ws.sessions.get((chan.id, str(params.get("thread_ts") or "")))
    title = str(params.get("title") or "")
    if session is None:
        raise SlackError("session_not_found")
    if not title or len(title) > MAX_TITLE:
        raise SlackError("invalid_title")
    session.title = title
    return {"title": title}


METHODS = {
    "agents.sessions.setStatus": Method(set_status, "assistant:write"),
    "agents.sessions.rename": Method(rename, "assistant:write"),
}
