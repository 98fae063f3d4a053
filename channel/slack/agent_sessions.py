"""Slack's agent sessions: ``agents.sessions.setStatus`` and ``agents.sessions.rename``.

A session is scoped to one thread — a task's conversation — and shows people a status
(``processing``, ``active``, ``suspended``, ``closed``), a title, and a Stop button while
``processing`` (SLACK-FACTS "Agent sessions"). Only an app declared an agent in its settings
(which adds ``assistant:write``) may create sessions; an install without that setting answers
``not_allowed``, ``missing_scope`` or ``not_allowed_token_type``. The first such answer turns
sessions off for the life of the process: every later call raises ``unsupported`` without asking
Slack, and everything else works as without sessions.
"""

from __future__ import annotations

import logging

from channel.contract import Origin, SessionStatus
from channel.errors import ChannelError

from .link import SlackLink

log = logging.getLogger(__name__)

#: Seconds a session change may wait out rate limits: shown minutes late it would be wrong.
SESSION_DEADLINE = 10.0
#: Slack's answers meaning this install cannot have agent sessions.
NOT_AN_AGENT = frozenset(
    {"not_allowed", "missing_scope", "not_allowed_token_type", "unknown_method", "feature_not_enabled"}
)
#: Slack's limit on a session's title.
MAX_TITLE = 200


class AgentSessions:
    """The adapter's part for agent sessions (module doc)."""

    def __init__(self, link: SlackLink) -> None:
        self._link = link
        #: Slack said this install is no agent: no more calls.
        self.refused = ""

    async def set_status(
        self, origin: Origin, status: SessionStatus, *, title: str = "", initiator: str = ""
    ) -> None:
        if not origin.thread:
            raise ChannelError("unsupported", "Slack's agent sessions are scoped to a thread.")
        kwargs: dict[str, str] = {"channel_id": origin.channel, "thread_ts": origin.thread, "status": status}
        if title:
            kwargs["title"] = title[:MAX_TITLE]
        if initiator:
            kwargs["initiator_user_id"] = initiator
        await self._call("agents.sessions.setStatus", kwargs)

    async def rename(self, origin: Origin, title: str) -> None:
        if not origin.thread or not title.strip():
            raise ChannelError("invalid_arguments", "a session's title needs a thread and some text")
        kwargs = {"channel_id": origin.channel, "thread_ts": origin.thread, "title": title[:MAX_TITLE]}
        await self._call("agents.sessions.rename", kwargs)

    async def _call(self, method: str, kwargs: dict[str, str]) -> None:
        if self.refused:
            raise ChannelError("unsupported", f"agent sessions are off for this install ({self.refused})")
        client = self._link.write_client
        call = (
            client.agents_sessions_setStatus
            if method.endswith("setStatus")
            else client.agents_sessions_rename
        )
        try:
            await self._link.outbound.write(method, lambda: call(**kwargs), deadline=SESSION_DEADLINE)
        except ChannelError as exc:
            if exc.provider_code in NOT_AN_AGENT:
                self.refused = exc.provider_code or exc.code
                log.info(
                    "agent sessions off: Slack answered %s (the app is not declared an agent)", self.refused
                )
                raise ChannelError("unsupported", f"agent sessions are off ({self.refused})") from exc
            raise
