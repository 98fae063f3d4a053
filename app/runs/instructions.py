"""A run's instructions: the origin and tools (``app.agent.runtime.instructions_for``), the agent
file's own, the approval note, and for follow-ups the time and the requester's time zone.

The time zone is the requester's ``tz`` from ``users.info`` (cached by the adapter), so "tomorrow at
9" means that person's 9: the model writes ``at`` with that zone's offset. ``after`` needs none.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.agent.agent_file import AgentFile
from app.agent.runtime import instructions_for
from channel.selection import ToolSelection
from channel.session import ChannelSession

from .prompt import APPROVAL_NOTE

log = logging.getLogger(__name__)

#: The follow-up tool whose presence adds the time note.
_FOLLOW_UP = "channel_follow_up"


async def run_instructions(session: ChannelSession, tools: ToolSelection, agent_file: AgentFile) -> str:
    """Everything the model is told before the conversation, for this run."""
    info = await session.describe()
    instructions = instructions_for(info, tools, agent_file.instructions)
    if agent_file.approval_policy.gates_anything(bool(agent_file.mcp)):
        instructions += APPROVAL_NOTE
    if any(s.name == _FOLLOW_UP for s in tools.channel_tools):
        instructions += "\n\n" + await time_note(session)
    return instructions


async def time_note(session: ChannelSession) -> str:
    """Today's date, and the requester's time zone with its offset (when the adapter can tell it).

    Only the date: the instructions are the cached prefix of every request, so they change at most
    once a day (a time to the minute would make the provider's prompt cache miss on most turns).
    ``after`` needs no clock, and ``at`` comes back resolved to UTC in the tool's result."""
    now = datetime.fromtimestamp(session.clock(), UTC)
    lines = [
        "A follow-up you scheduled comes back as a line with `follow_up` (its handle) and `text` (your "
        "note); `late` is there when it fired late. Do then what the note says.",
        f"Today is {now:%A %Y-%m-%d} (UTC).",
    ]
    zone = ""
    look_up = getattr(session.adapter, "time_zone", None)
    if session.requester and look_up is not None:
        try:
            zone = str(await look_up(session.requester) or "")
        except Exception:  # a time zone is a nicety: never fail the run for it
            log.warning("could not look up the requester's time zone", exc_info=True)
    try:
        local = now.astimezone(ZoneInfo(zone)) if zone else None
    except (ZoneInfoNotFoundError, ValueError):
        local = None
    if local is not None:
        offset = local.strftime("%z")
        lines.append(
            f"The person you are answering is in time zone {zone} (UTC{offset[:3]}:{offset[3:]}, "
            f"{local:%A %Y-%m-%d} there): a time they name, such as 'tomorrow at 9', is in that zone; "
            "give channel_follow_up's `at` with that offset."
        )
    else:
        lines.append("The person's time zone is unknown: for a time of day, ask them or give it in UTC.")
    return "\n".join(lines)
