"""Slack's agent-session events: a person's Stop (``agent_session_stopped``) and a rename
(``agent_session_title_changed``), each answered with one store write before the 200.

``agent_session_stopped`` carries ``{channel, thread_ts, user, streaming_message_ts, event_ts}``
(SLACK-FACTS "Agent sessions"): the run in progress in that thread is stopped for good on whichever
instance runs it (``app.runs.stop``); Slack has stopped the listed streams itself, and the run moves
the session away from ``processing`` as it ends. A Stop with no run in progress changes nothing.
``agent_session_title_changed`` keeps the title the store holds for the session in step with the one
the person gave it. Slack retries a delivery that failed: both writes are idempotent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from app.runs.stop import request_stop
from storage.base import Store, StoreError

#: The agent-session events answered here (not routed to a task's inbox).
SESSION_EVENTS = frozenset({"agent_session_stopped", "agent_session_title_changed"})


def _where(event: Mapping[str, Any]) -> tuple[str, str]:
    channel = event.get("channel") or event.get("channel_id") or ""
    thread = event.get("thread_ts") or ""
    return (channel if isinstance(channel, str) else ""), (thread if isinstance(thread, str) else "")


async def session_event(
    store: Store, event: Mapping[str, Any], *, clock: Callable[[], float] = time.time
) -> tuple[str, str]:
    """Handle one agent-session event: ``(outcome, reason)`` for the delivery log, the outcome one of
    ``stopped``, ``ignored``, ``invalid``; raises :class:`StoreError` when the store failed."""
    channel, thread = _where(event)
    if not channel or not thread:
        return "invalid", f"{event.get('type')} without channel or thread_ts"
    if event.get("type") == "agent_session_stopped":
        user = event.get("user")
        by = user if isinstance(user, str) else ""
        if await request_stop(store, channel, thread, by, clock=clock):
            return "stopped", "a person stopped the run in progress"
        return "ignored", "Stop with no run in progress: nothing to stop"
    title = event.get("title")
    if not isinstance(title, str) or not title.strip():
        return "invalid", "agent_session_title_changed without a title"
    if await store.rename_session(channel, thread, title.strip(), now=clock()) is None:
        return "ignored", "the renamed session's thread is no task's"
    return "ignored", "session title recorded"


__all__ = ["SESSION_EVENTS", "StoreError", "session_event"]
