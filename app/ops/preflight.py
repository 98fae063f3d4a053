"""Start-up's cheap first look: missing settings named before the service is imported.

``app.service`` imports pydantic-ai, the MCP client and Bolt, which takes seconds on a small machine;
a newcomer who has not set ``SLACK_BOT_TOKEN`` yet should not wait for that to read one line. This
module makes the service's own first checks, in the service's order, with nothing heavier than the
settings and the agent file, and gives the service's message for missing settings. Whenever an
earlier check of the service could fail first (an agent file that does not load, an MCP server's
``${VAR}`` that is not set, Socket Mode, which may call Slack), it says nothing and leaves the whole
start to the service, which repeats every check. Credentials of the wrong shape and missing settings
are named together, so one start names everything a newcomer has to fix.
"""

from __future__ import annotations

import os

from app.agent.agent_file import AgentFile
from app.settings import Settings, credential_shape_problems, missing_report, missing_settings

__all__ = ["missing_before_start"]


def missing_before_start(settings: Settings, *, webhook: bool) -> str | None:
    """The ``cannot start:`` message the service would give for credentials of the wrong shape and
    missing settings — every one of them at once — or None when it would get past them or fail on
    something else first. ``webhook``: as ``Service.create``'s."""
    try:
        agent_file = AgentFile.load(settings.resolved_agent_file, settings.mcp_config)
        for server in agent_file.mcp:
            server.resolve(os.environ)  # a ${VAR} that is not set: the service names it first
    except ValueError:
        return None
    if settings.socket_mode or not settings.http_events:
        return None
    shape = credential_shape_problems(settings)
    missing = missing_settings(settings, settings.model or agent_file.model, webhook=webhook)
    problems = [*shape, missing_report(missing)] if missing else shape
    return "\n".join(problems) if problems else None
