"""What every tool call of a run can reach: :class:`RunDeps` (pydantic-ai's ``deps``), the run's session.

Its own module so that what reads it (the runtime, model settings, the approval gate, MCP tools)
imports it from below rather than from one another.
"""

from __future__ import annotations

from dataclasses import dataclass

from channel.session import ChannelSession


@dataclass(slots=True)
class RunDeps:
    """The run's channel session, handed to every tool call and per-request setting."""

    session: ChannelSession
