"""What a run works with under its conversation's profile: agent, tools, budgets, instructions.

Built once at start-up (``app.service``), one :class:`Policy` per profile of the agent file
(``app.agent.profiles``); a run asks :meth:`Policies.of` for its conversation's. The tools a profile
does not allow are not in its :class:`~channel.selection.ToolSelection`, so its sessions never
offer them, ``tool_search`` never finds them, and a call naming one is refused by the session (a
channel tool) or the MCP toolset (a server's) — invariant "Scoped by profile", docs/architecture.md.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import Agent

from app.agent.admission import Admission
from app.agent.agent_file import AgentFile
from app.agent.profiles import Profile
from app.agent.runtime import RunDeps
from app.agent.usage import Budgets
from channel.selection import HostTool, ToolSelection

__all__ = ["Policies", "Policy", "host_tools_of"]


@dataclass(frozen=True, slots=True)
class Policy:
    """One profile's run-time parts."""

    profile: Profile
    agent: Agent[RunDeps, Any]
    tools: ToolSelection
    budgets: Budgets
    #: The agent file as this profile reads it (its instructions and approval globs).
    agent_file: AgentFile

    @classmethod
    def plain(
        cls, agent: Agent[RunDeps, Any], tools: ToolSelection, budgets: Budgets, agent_file: AgentFile
    ) -> Policy:
        """The default profile's policy from the executor's own parts (an install without profiles)."""
        return cls(agent_file.profiles.default, agent, tools, budgets, agent_file)

    @classmethod
    def of(
        cls,
        profile: Profile,
        agent: Agent[RunDeps, Any],
        tools: ToolSelection,
        budgets: Budgets,
        agent_file: AgentFile,
    ) -> Policy:
        """``profile``'s policy: its budgets where it sets them, its instructions and approvals."""
        if profile.user_daily_token_budget is not None or profile.daily_token_budget is not None:
            budgets = replace(
                budgets,
                per_user=_either(profile.user_daily_token_budget, budgets.per_user),
                install=_either(profile.daily_token_budget, budgets.install),
            )
        reads = replace(agent_file, instructions=profile.instructions, approval=profile.approval)
        return cls(profile, agent, tools, budgets, reads)


def _either(value: int | None, default: int) -> int:
    return default if value is None else value


class Policies:
    """Every profile's :class:`Policy`, chosen per conversation by ``admission``'s precedence."""

    def __init__(self, admission: Admission, by_name: Mapping[str, Policy]) -> None:
        self.admission = admission
        self.by_name = dict(by_name)

    async def of(self, channel: str) -> Policy:
        profile = await self.admission.profile(channel)
        return self.by_name[profile.name]

    def refusal(self, channel: str, profile: Profile) -> Any:
        """The run screen's question for ``channel`` (``app.runs.budget_screen.Refusal``)."""

        async def refused(person: str, team: str | None) -> str | None:
            return await self.admission.refusal(channel, person, team=team, profile=profile)

        return refused


def host_tools_of(profile: Profile, tools: Sequence[HostTool], servers: Mapping[str, str]) -> list[HostTool]:
    """``tools`` of the MCP servers ``profile.mcp`` names (``servers``: tool name → its server)."""
    if profile.mcp is None:
        return list(tools)
    return [t for t in tools if any(fnmatch.fnmatchcase(servers.get(t.name, ""), g) for g in profile.mcp)]
