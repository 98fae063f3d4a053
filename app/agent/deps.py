"""What every tool call of a run can reach: :class:`RunDeps` (pydantic-ai's ``deps``), the run's session.

Its own module so that what reads it (the runtime, model settings, the approval gate, MCP tools)
imports it from below rather than from one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from channel.session import ChannelSession

if TYPE_CHECKING:
    from .usage import UsageMeter


@dataclass(slots=True)
class RunDeps:
    """The run's channel session, handed to every tool call and per-request setting."""

    session: ChannelSession
    #: The run's usage meter: what an MCP server samples for the run counts against its person.
    usage: UsageMeter | None = None
